"""The hand-derived backward rules of :mod:`xpseq.core.vjp` against autodiff and finite
differences.

Every rule is run as a *case*: float64 inputs (the differentiated ones in ``inputs``, ids,
masks, lengths and flags in ``consts``), an adapter that calls the rule and names its
gradients, and a *reference forward* written with the public xpseq functions (or the private
kernels where there is no public one) that knows nothing about the rule. With a fixed random
cotangent for every output:

* the rule's output equals the reference forward on NumPy (within 1e-15), its gradients
  have the inputs' shapes, and it leaves its inputs untouched;
* its NumPy gradients equal ``jax.vjp`` and ``torch.autograd.grad`` of the reference
  forward (``GRAD_RTOL``);
* and central differences of the NumPy reference forward (``FD_REL_ERR``);
* the same rule run on jax, torch and array_api_strict arrays gives the NumPy numbers
  (rtol 1e-12) in that library's arrays.

The cases are in vjp_cases.py. The special cases the rules promise, and :func:`xpseq.core.vjp.defvjp` with the backends'
``value_and_grad``, are in test_vjp_special.py.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from vjp_cases import BY_ID, CASES, IDS, NP, Case

from xpseq import backends
from xpseq.core import vjp
from xpseq.testing import (
    FD_REL_ERR,
    GRAD_ATOL,
    GRAD_RTOL,
    assert_matches,
    central_difference_grad,
    relative_error,
)

FORWARD_TOL = 1e-15      # the rule's forward against the plain kernel, NumPy
CROSS_RTOL = 1e-12       # the same rule on another array library against NumPy
CROSS_ATOL = 1e-14
RULE_BACKENDS = ("jax", "torch", "array_api_strict")



@functools.lru_cache(maxsize=None)
def numpy_rule(case_id: str) -> tuple[tuple[np.ndarray, ...], dict[str, np.ndarray]]:
    """The rule's outputs and gradients on NumPy (float64 arrays)."""
    case = BY_ID[case_id]
    outs, back = case.rule(NP.xp, case.inputs, case.consts)
    grads = back(case.cots)
    return tuple(np.asarray(o) for o in outs), {n: np.asarray(g) for n, g in grads.items()}


def check_grads(got: dict, reference: dict, *, what: str) -> None:
    assert set(got) == set(reference)
    for name, ref in reference.items():
        assert got[name].shape == ref.shape, f"{what}: d{name} shape"
        np.testing.assert_allclose(got[name], ref, rtol=GRAD_RTOL, atol=GRAD_ATOL,
                                   err_msg=f"{what}: d{name}")


# --------------------------------------------------------------- every rule, every check


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_equals_kernel(case: Case) -> None:
    before = {n: v.copy() for n, v in case.inputs.items()}
    outs, back = case.rule(NP.xp, case.inputs, case.consts)
    ref = case.forward(NP.xp, case.inputs, case.consts)
    assert len(outs) == len(ref)
    for o, r in zip(outs, ref):
        assert np.shape(o) == np.shape(r)
        np.testing.assert_allclose(o, r, rtol=FORWARD_TOL, atol=FORWARD_TOL)
    grads = back(case.cots)
    assert set(grads) == set(case.inputs)
    for name, g in grads.items():
        g = np.asarray(g)
        assert g.shape == case.inputs[name].shape, name
        assert g.dtype == np.float64, name
        assert np.all(np.isfinite(g)), name
    for name, v in before.items():
        np.testing.assert_array_equal(case.inputs[name], v, err_msg=f"{name} was modified")


@functools.lru_cache(maxsize=None)
def jax_results(case_id: str) -> tuple[dict, tuple, dict]:
    """``jax.vjp`` of the reference forward, and the rule's outputs and gradients on JAX
    arrays, from one function: jitted (one compilation per case instead of one per
    primitive), except for the recurrences, whose unrolled loops compile slowly and run
    eagerly on primitives cached across cases."""
    import jax

    case = BY_ID[case_id]
    be = backends.get("jax")
    consts = be.asarray_tree(case.consts)

    def run(inputs: dict, cots: tuple) -> tuple[dict, tuple, dict]:
        _, pullback = jax.vjp(lambda a: tuple(case.forward(be.xp, a, consts)), inputs)
        (ref,) = pullback(cots)
        outs, back = case.rule(be.xp, inputs, consts)
        return ref, tuple(outs), back(cots)

    if not case_id.startswith("run_sequence"):
        run = jax.jit(run)
    return run(be.asarray_tree(case.inputs), tuple(be.asarray(t) for t in case.cots))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vjp_matches_jax(case: Case) -> None:
    pytest.importorskip("jax")
    be = backends.get("jax")
    ref = jax_results(case.id)[0]
    check_grads(numpy_rule(case.id)[1], {n: be.to_numpy(g) for n, g in ref.items()},
                what=f"{case.id} vs jax.vjp")


# Both cells and directions; "mixed" has an empty row, a row of length 1 and a full one,
# "nosteps" has no time steps (one JAX compilation per case: the other lengths add time,
# not coverage).
SEQUENCE_CASES = [c for c in CASES if c.id.startswith("run_sequence")
                  and c.id.endswith(("-mixed", "-nosteps"))]


def torch_vjp(case: Case) -> dict[str, np.ndarray]:
    torch = pytest.importorskip("torch")
    be = backends.get("torch")
    inputs = {n: be.asarray(v).requires_grad_(True) for n, v in case.inputs.items()}
    outs = case.forward(be.xp, inputs, be.asarray_tree(case.consts))
    pairs = [(o, be.asarray(t)) for o, t in zip(outs, case.cots) if o.requires_grad]
    names = list(inputs)
    grads = torch.autograd.grad([o for o, _ in pairs], [inputs[n] for n in names],
                                grad_outputs=[t for _, t in pairs], allow_unused=True) \
        if pairs else [None] * len(names)
    return {n: np.zeros_like(case.inputs[n]) if g is None else be.to_numpy(g)
            for n, g in zip(names, grads)}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vjp_matches_torch_autograd(case: Case) -> None:
    check_grads(numpy_rule(case.id)[1], torch_vjp(case), what=f"{case.id} vs torch")


def fd_grads(case: Case) -> dict[str, np.ndarray]:
    """Central differences of ``L = Σ_i sum(out_i * cot_i)`` of the NumPy reference forward."""
    grads = {}
    for name in case.inputs:
        def loss(x, name=name):
            a = dict(case.inputs)
            a[name] = x
            outs = case.forward(NP.xp, a, case.consts)
            return sum(float(np.sum(np.asarray(o) * t)) for o, t in zip(outs, case.cots))

        grads[name] = central_difference_grad(loss, case.inputs[name])
    return grads


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vjp_matches_finite_differences(case: Case) -> None:
    got = numpy_rule(case.id)[1]
    for name, fd in fd_grads(case).items():
        err = relative_error(got[name], fd)
        assert err <= FD_REL_ERR, f"{case.id}: d{name} relative error {err:.2e}"


@pytest.mark.parametrize("name", RULE_BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rule_on_other_array_libraries(case: Case, name: str) -> None:
    pytest.importorskip(name)
    be = backends.get(name)
    if name == "jax":
        _, outs, grads = jax_results(case.id)
    else:
        outs, back = case.rule(be.xp, be.asarray_tree(case.inputs), be.asarray_tree(case.consts))
        grads = back(tuple(be.asarray(t) for t in case.cots))
    np_outs, np_grads = numpy_rule(case.id)
    assert len(outs) == len(np_outs)
    for i, (o, r) in enumerate(zip(outs, np_outs)):
        assert_matches(be, o, r, rtol=CROSS_RTOL, atol=CROSS_ATOL, err_msg=f"output {i}")
    assert set(grads) == set(np_grads)
    for n, g in grads.items():
        assert_matches(be, g, np_grads[n], rtol=CROSS_RTOL, atol=CROSS_ATOL, err_msg=f"d{n}")


def test_case_list_covers_every_rule() -> None:
    """Every public rule of xpseq.core.vjp has a case above (defvjp is tested below), and
    so have the models' chains of them (multi-head attention, backpropagation through
    time)."""
    covered = {case.id.split("-")[0] for case in CASES}
    covered = {"additive_from_projections" if c == "additive" else c for c in covered}
    # lstm_back, gru_back and softmax_back are the second halves of lstm_step, gru_step
    # and masked_softmax (tested there); sequence_step_back is run_sequence's step.
    rules = set(vjp.__all__) - {"defvjp", "CELL_STEPS", "CELL_BACKS", "lstm_back", "gru_back",
                                "softmax_back", "sequence_step_back"}
    assert rules <= covered, sorted(rules - covered)
    assert {"multi_head_attention", "attention_over_heads", "run_sequence"} <= covered
    assert vjp.CELL_STEPS == {"lstm": vjp.lstm_step, "gru": vjp.gru_step}
