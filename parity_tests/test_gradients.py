"""Gradient parity: jax.grad, torch autograd and central finite differences agree.

For every core function with floating inputs, a scalar ``L = sum_i sum(out_i * R_i)`` of
all its outputs (fixed random float64 ``R_i``, so every output entry matters) is
differentiated with respect to every floating input (``params`` of multi-head attention as
a dict). Then:

* jax and torch gradients agree to ``GRAD_RTOL``;
* each agrees with central differences of the NumPy-backend ``L`` to ``FD_REL_ERR``;
* the jitted jax gradient equals the eager one;
* rows with no valid key (``empty="zero"``) and masked keys with huge or overflowing
  scores give finite gradients, exactly zero at masked scores;
* masked_softmax at scores of ``±1e4`` is finite and matches a shifted reference.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
from parity_helpers import lens_keep, normals

import xpseq.core as C
from xpseq import backends
from xpseq.testing import (
    FD_REL_ERR,
    FORWARD_ATOL,
    FORWARD_RTOL,
    GRAD_ATOL,
    GRAD_RTOL,
    central_difference_grad,
    relative_error,
)

NP = backends.get("numpy")

B, Q, K, D = 2, 3, 5, 4


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(977 + seed)


def to_numpy(be: backends.Backend, x: Any) -> Any:
    if isinstance(x, dict):
        return {key: to_numpy(be, val) for key, val in x.items()}
    return be.to_numpy(x)


def leaves(x: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(name, array) pairs of an array, a dict of arrays or a tuple of those."""
    if isinstance(x, dict):
        return [item for key in sorted(x) for item in leaves(x[key], f"{prefix}{key}")]
    if isinstance(x, (tuple, list)):
        return [item for i, v in enumerate(x) for item in leaves(v, f"{prefix}[{i}]")]
    return [(prefix, x)]


@dataclass
class GradCase:
    """``fn(*args, **consts)`` with static keywords bound in ``fn`` (functools.partial).

    ``args`` (floating arrays, or a dict of them) are differentiated; ``consts``
    (valid_lens, mask) are not. ``R`` has one weight array per output.
    """

    id: str
    fn: Callable[..., Any]
    args: tuple
    consts: dict = field(default_factory=dict)
    R: tuple = ()

    def loss(self, be: backends.Backend) -> Callable[..., Any]:
        xp = be.xp
        R = tuple(be.asarray(r) for r in self.R)

        def L(*args, **consts):
            out = self.fn(*args, **consts)
            out = out if isinstance(out, tuple) else (out,)
            assert len(out) == len(R)
            total = xp.sum(out[0] * R[0])
            for o, r in zip(out[1:], R[1:]):
                total = total + xp.sum(o * r)
            return total

        return L

    def value_and_grad(self, be: backends.Backend, *, jit: bool = False) -> tuple[float, tuple]:
        vg = be.value_and_grad(self.loss(be), argnums=tuple(range(len(self.args))))
        if jit:
            vg = be.jit(vg)
        args = be.asarray_tree(self.args)
        assert isinstance(args, tuple)
        value, grads = vg(*args, **be.asarray_tree(self.consts))
        return float(be.to_numpy(value)), tuple(to_numpy(be, g) for g in grads)


def with_R(case: GradCase) -> GradCase:
    """Fill ``case.R`` with fixed random weights shaped like the NumPy outputs."""
    out = case.fn(*case.args, **case.consts)
    out = out if isinstance(out, tuple) else (out,)
    r = rng(1000 + sum(map(ord, case.id)))
    case.R = tuple(r.standard_normal(o.shape) for o in out)
    return case


def mha_params(seed: int, *, biases: bool = True) -> dict[str, np.ndarray]:
    # d_q=3, d_k=5, d_v=2, d_model=4, d_value=8, d_out=3
    r = rng(seed)
    p = {"W_q": r.standard_normal((4, 3)) * 0.7, "W_k": r.standard_normal((4, 5)) * 0.7,
         "W_v": r.standard_normal((8, 2)), "W_o": r.standard_normal((3, 8)) * 0.5}
    if biases:
        p.update(b_q=r.standard_normal(4) * 0.5, b_k=r.standard_normal(4) * 0.5,
                 b_v=r.standard_normal(8) * 0.5, b_o=r.standard_normal(3) * 0.5)
    return p


LENS_B = np.array([2, 5], dtype=np.int64)
LENS_BQ = np.array([[1, 3, 5], [2, 2, 4]], dtype=np.int64)
LENS_EMPTY = np.array([[0, 3, 5], [2, 0, 4]], dtype=np.int64)  # rows with no valid key
MASK = np.array([[[1, 1, 0, 1, 0], [0, 1, 1, 1, 1], [1, 1, 1, 0, 0]],
                 [[1, 0, 1, 1, 1], [1, 1, 0, 0, 1], [0, 1, 1, 1, 0]]], dtype=bool)


def build_cases() -> list[GradCase]:
    cases = []
    add = lambda *a, **kw: cases.append(with_R(GradCase(*a, **kw)))  # noqa: E731
    r = rng(1)
    s = r.standard_normal((B, Q, K))
    s4 = r.standard_normal((B, 2, Q, K))
    zero = functools.partial

    add("masked_softmax-nomask", C.masked_softmax, (s,))
    add("masked_softmax-lens_b", C.masked_softmax, (s,), {"valid_lens": LENS_B})
    add("masked_softmax-lens_bq-mask", C.masked_softmax, (s,),
        {"valid_lens": LENS_BQ, "mask": MASK})
    add("masked_softmax-4d-lens_bq", C.masked_softmax, (s4,), {"valid_lens": LENS_BQ})
    add("masked_softmax-empty_zero", zero(C.masked_softmax, empty="zero"), (s,),
        {"valid_lens": LENS_EMPTY})

    x = r.standard_normal((B, Q, K)) * 2.0
    add("log_softmax-axis-1", C.log_softmax, (x,))
    add("log_softmax-axis0", zero(C.log_softmax, axis=0), (x,))
    add("logsumexp-axis-1", C.logsumexp, (x,))
    add("logsumexp-axis1-keepdims", zero(C.logsumexp, axis=1, keepdims=True), (x,))

    q, k = r.standard_normal((B, Q, D)), r.standard_normal((B, K, D))
    kw = r.standard_normal((B, K, 6))
    add("dot_scores", C.dot_scores, (q, k))
    add("dot_scores-scale", zero(C.dot_scores, scale=0.5), (q, k))
    add("general_scores", C.general_scores, (q, kw, r.standard_normal((D, 6)) * 0.5))
    add("additive_scores", C.additive_scores,
        (q, kw, r.standard_normal((7, D)) * 0.5, r.standard_normal((7, 6)) * 0.5,
         r.standard_normal(7)))

    vals = r.standard_normal((B, K, D))
    add("attend-nomask", C.attend, (s, vals))
    add("attend-lens_bq-mask", C.attend, (s, vals), {"valid_lens": LENS_BQ, "mask": MASK})
    add("attend-empty_zero", zero(C.attend, empty="zero"), (s, vals), {"valid_lens": LENS_EMPTY})

    v = r.standard_normal((B, K, 3))
    sdpa = C.scaled_dot_product_attention
    add("sdpa-nomask", sdpa, (q, k, v))
    add("sdpa-lens_b", sdpa, (q, k, v), {"valid_lens": LENS_B})
    add("sdpa-mask-scale", zero(sdpa, scale=0.3), (q, k, v), {"mask": MASK})
    add("sdpa-empty_zero", zero(sdpa, empty="zero"), (q, k, v),
        {"valid_lens": LENS_EMPTY, "mask": MASK})

    mq, mk, mv = normals(r, (B, Q, 3), (B, K, 5), (B, K, 2))
    mha = C.multi_head_attention
    add("mha-h2-bias-lens_b", zero(mha, num_heads=2), (mha_params(2), mq, mk, mv),
        {"valid_lens": LENS_B})
    add("mha-h1-nobias-mask", zero(mha, num_heads=1), (mha_params(3, biases=False), mq, mk, mv),
        {"mask": MASK})
    add("mha-h4-bias-lens_bq-mask", zero(mha, num_heads=4), (mha_params(4), mq, mk, mv),
        {"valid_lens": LENS_BQ, "mask": MASK})
    add("mha-h2-bias-scale-empty_zero", zero(mha, num_heads=2, empty="zero", scale=0.6),
        (mha_params(5), mq, mk, mv), {"valid_lens": LENS_EMPTY})
    return cases


CASES = build_cases()
IDS = [c.id for c in CASES]
CASE = {c.id: c for c in CASES}


@functools.lru_cache(maxsize=None)
def fd_grads(case_id: str) -> tuple[float, tuple]:
    """Central differences of the NumPy-backend loss, one per differentiated argument."""
    case = CASE[case_id]
    L = case.loss(NP)
    args = list(case.args)
    value = float(L(*args, **case.consts))
    grads = []
    for i, a in enumerate(args):
        def f_at(x, i=i, key=None):
            new = list(args)
            if key is None:
                new[i] = x
            else:
                new[i] = {**args[i], key: x}
            return L(*new, **case.consts)

        if isinstance(a, dict):
            grads.append({key: central_difference_grad(functools.partial(f_at, key=key), a[key])
                          for key in a})
        else:
            grads.append(central_difference_grad(f_at, a))
    return value, tuple(grads)


@functools.lru_cache(maxsize=None)
def autodiff(name: str, case_id: str, jit: bool = False) -> tuple[float, tuple]:
    return CASE[case_id].value_and_grad(backends.get(name), jit=jit)


def assert_grads_finite(grads: Any, what: str) -> None:
    for name, g in leaves(grads):
        assert np.isfinite(g).all(), f"{what}: non-finite gradient for {name}: {g}"


def jax_and_torch() -> tuple[backends.Backend, backends.Backend]:
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    return backends.get("jax"), backends.get("torch")


# ---------------------------------------------------------------------- parity


@pytest.mark.parametrize("case_id", IDS)
def test_jax_and_torch_gradients_agree(case_id):
    jax_and_torch()
    vj, gj = autodiff("jax", case_id)
    vt, gt = autodiff("torch", case_id)
    assert_grads_finite(gj, f"{case_id} jax")
    assert_grads_finite(gt, f"{case_id} torch")
    np.testing.assert_allclose(vj, vt, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    lj, lt = leaves(gj), leaves(gt)
    assert [n for n, _ in lj] == [n for n, _ in lt]
    for (name, a), (_, b) in zip(lj, lt):
        assert a.shape == b.shape and a.dtype == b.dtype == np.float64, name
        np.testing.assert_allclose(a, b, rtol=GRAD_RTOL, atol=GRAD_ATOL,
                                   err_msg=f"{case_id}: d/d{name}, jax vs torch")


@pytest.mark.parametrize("case_id", IDS)
def test_gradients_match_finite_differences(grad_backend, case_id):
    case = CASE[case_id]
    value, grads = autodiff(grad_backend.name, case_id)
    fd_value, fd = fd_grads(case_id)
    np.testing.assert_allclose(value, fd_value, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    assert len(grads) == len(case.args)
    for (name, g), (_, ref) in zip(leaves(grads), leaves(fd)):
        assert g.shape == ref.shape, name
        if name.endswith("b_k"):
            # Adding a constant to every key adds q_h . b_k to a whole row of scores, which
            # softmax ignores: the exact gradient is zero (FD sees only rounding noise).
            assert np.abs(g).max() <= GRAD_ATOL and np.abs(ref).max() < 1e-8, name
            continue
        assert np.abs(ref).max() > 1e-3, f"{case_id}: d/d{name} is trivially zero"
        err = relative_error(g, ref)
        assert err < FD_REL_ERR, (
            f"{case_id} on {grad_backend.name}: d/d{name} relative error {err:.3e} vs central "
            f"differences (limit {FD_REL_ERR})")


@pytest.mark.parametrize("case_id", IDS)
def test_jitted_jax_gradient_equals_eager(case_id):
    pytest.importorskip("jax")
    v_eager, g_eager = autodiff("jax", case_id)
    v_jit, g_jit = autodiff("jax", case_id, jit=True)
    np.testing.assert_allclose(v_jit, v_eager, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    for (name, a), (_, b) in zip(leaves(g_jit), leaves(g_eager)):
        np.testing.assert_allclose(a, b, rtol=FORWARD_RTOL, atol=FORWARD_ATOL,
                                   err_msg=f"{case_id}: d/d{name}, jit vs eager")


# ----------------------------------------------- masked rows and huge masked scores


def masked_score_cases(garbage: float) -> list[tuple[str, Callable, tuple, dict, np.ndarray]]:
    """(id, fn, args, consts, keep) with ``garbage`` at the masked scores where possible.

    For masked_softmax and attend the masked scores are set to ``garbage``. For sdpa and
    multi-head attention the masked keys are scaled so that their scores have magnitude
    about ``garbage`` (well past exp's overflow at ~709 for 1e4).
    """
    r = rng(50)
    lens = LENS_EMPTY
    keep = lens_keep(lens, (B, Q, K)) & MASK
    assert (~keep.any(-1)).any()
    s = np.where(keep, r.standard_normal((B, Q, K)), garbage)
    vals = r.standard_normal((B, K, D))
    q = r.standard_normal((B, Q, D))
    k = r.standard_normal((B, K, D))
    # keys masked for every query of their batch element (these get huge entries)
    dead = ~keep.any(axis=1)  # (B, K)
    assert dead.any(axis=1).all()
    big = abs(garbage) if math.isfinite(garbage) else 1.0  # k itself must stay finite
    k = np.where(dead[..., None], k * big, k)
    v = r.standard_normal((B, K, 3))
    mq, mk, mv = normals(r, (B, Q, 3), (B, K, 5), (B, K, 2))
    mk = np.where(dead[..., None], mk * big, mk)
    consts = {"valid_lens": lens, "mask": MASK}
    return [
        ("masked_softmax", functools.partial(C.masked_softmax, empty="zero"), (s,), consts, keep),
        ("attend", functools.partial(C.attend, empty="zero"), (s, vals), consts, keep),
        ("sdpa", functools.partial(C.scaled_dot_product_attention, empty="zero"), (q, k, v),
         consts, keep),
        ("mha", functools.partial(C.multi_head_attention, num_heads=2, empty="zero"),
         (mha_params(6), mq, mk, mv), consts, keep),
    ]


@pytest.mark.parametrize("garbage", [0.0, 1e4, -1e4, 1e3])
@pytest.mark.parametrize("which", ["masked_softmax", "attend", "sdpa", "mha"])
def test_masked_rows_give_finite_gradients(grad_backend, which, garbage):
    be = grad_backend
    cid, fn, args, consts, keep = next(c for c in masked_score_cases(garbage) if c[0] == which)
    case = with_R(GradCase(f"{cid}-masked-{garbage}", fn, args, consts))
    out = fn(*be.asarray_tree(args), **be.asarray_tree(consts))
    out = out if isinstance(out, tuple) else (out,)
    for o in out:
        assert np.isfinite(be.to_numpy(o)).all(), f"{which}: non-finite forward value"
    w = be.to_numpy(out[-1])
    w_keep = keep if w.ndim == 3 else keep[:, None]
    assert (np.broadcast_to(~w_keep, w.shape) <= (w == 0.0)).all(), "masked weight not 0"

    if which == "sdpa" and abs(garbage) >= 1e3:
        q, k = args[0], args[1]
        dead_scores = (q @ np.swapaxes(k, -1, -2) / math.sqrt(D))[np.broadcast_to(
            (~keep.any(axis=1))[:, None, :], keep.shape)]
        assert dead_scores.max() > 710.0, "the masked scores should overflow exp"

    value, grads = case.value_and_grad(be)
    assert math.isfinite(value)
    assert_grads_finite(grads, f"{which} garbage={garbage} on {be.name}")
    empty_rows = ~keep.any(-1)  # (B, Q)
    dead = ~keep.any(axis=1)    # (B, K)
    if which in ("masked_softmax", "attend"):
        # d/dscores is exactly zero at every masked score, and a whole empty row is zero
        assert (grads[0][~keep] == 0.0).all(), f"{which}: nonzero d/dscores at masked keys"
        assert (grads[0][empty_rows] == 0.0).all()
    if which == "attend":
        assert (grads[1][dead] == 0.0).all(), "attend: nonzero d/dvalues at dead keys"
    if which in ("sdpa", "mha"):
        gq, gk, gv = grads[1:] if which == "mha" else grads
        assert (gq[empty_rows] == 0.0).all(), f"{which}: nonzero d/dq for an empty row"
        assert (gk[dead] == 0.0).all(), f"{which}: nonzero d/dk at masked keys"
        assert (gv[dead] == 0.0).all(), f"{which}: nonzero d/dv at masked keys"

    if be.name == "jax" and garbage == 1e4:
        # jax.jit skips the value checks; the compiled gradient must be the same.
        value_jit, grads_jit = case.value_and_grad(be, jit=True)
        np.testing.assert_allclose(value_jit, value, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
        for (name, gj), (_, g) in zip(leaves(grads_jit), leaves(grads)):
            np.testing.assert_allclose(gj, g, rtol=FORWARD_RTOL, atol=FORWARD_ATOL,
                                       err_msg=f"{which}: d/d{name}, jit vs eager")

    # The gradient does not depend on what the masked entries hold: compare with the same
    # function on clean inputs (garbage 0.0 case) at every non-masked entry.
    if garbage != 0.0:
        _, _, clean_args, _, _ = next(c for c in masked_score_cases(0.0) if c[0] == which)
        clean = GradCase(case.id + "-clean", fn, clean_args, consts, case.R)
        _, clean_grads = clean.value_and_grad(be)
        for (name, g), (_, gc) in zip(leaves(grads), leaves(clean_grads)):
            np.testing.assert_allclose(g, gc, rtol=GRAD_RTOL, atol=GRAD_ATOL,
                                       err_msg=f"{which}: d/d{name} depends on masked entries")


@pytest.mark.parametrize("garbage", [np.inf, -np.inf, np.nan, 1e300])
@pytest.mark.parametrize("which", ["masked_softmax", "attend"])
def test_nonfinite_masked_scores_give_finite_gradients(grad_backend, which, garbage):
    """masked_softmax documents that masked scores may be infinite or NaN."""
    be = grad_backend
    cid, fn, args, consts, keep = next(c for c in masked_score_cases(garbage) if c[0] == which)
    case = with_R(GradCase(f"{cid}-nonfinite", fn, args, consts))
    value, grads = case.value_and_grad(be)
    assert math.isfinite(value)
    assert_grads_finite(grads, f"{which} masked={garbage} on {be.name}")
    assert (grads[0][~keep] == 0.0).all()


# ------------------------------------------------------------------------ stability


def stable_reference(s: np.ndarray, keep: np.ndarray,
                     R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Softmax by shifting with the row maximum, and its analytic gradient for sum(w * R)."""
    m = np.max(np.where(keep, s, -np.inf), axis=-1, keepdims=True)
    e = np.where(keep, np.exp(np.where(keep, s - m, 0.0)), 0.0)
    w = e / e.sum(-1, keepdims=True)
    g = w * (R - np.sum(w * R, axis=-1, keepdims=True))
    return w, g


@pytest.mark.parametrize("masked", [False, True])
def test_masked_softmax_stable_at_1e4(grad_backend, masked):
    be = grad_backend
    r = rng(60)
    sign = np.where(r.random((B, Q, K)) < 0.5, 1.0, -1.0)
    s = 1e4 * sign + r.standard_normal((B, Q, K))
    s[0, 0, :] = 1e4 + np.arange(K)     # all +1e4
    s[0, 1, :] = -1e4 - np.arange(K)    # all -1e4
    R = r.standard_normal((B, Q, K))
    consts = {"valid_lens": LENS_BQ} if masked else {}
    keep = lens_keep(LENS_BQ, s.shape) if masked else np.ones(s.shape, bool)
    w_ref, g_ref = stable_reference(s, keep, R)

    w_np = C.masked_softmax(s, **consts)
    np.testing.assert_allclose(w_np, w_ref, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)

    case = GradCase("stable", C.masked_softmax, (s,), consts, (R,))
    w = be.to_numpy(C.masked_softmax(*be.asarray_tree((s,)), **be.asarray_tree(consts)))
    assert np.isfinite(w).all()
    np.testing.assert_allclose(w, w_ref, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    assert (w[~keep] == 0.0).all()
    value, (g,) = case.value_and_grad(be)
    assert math.isfinite(value) and np.isfinite(g).all()
    np.testing.assert_allclose(value, np.sum(w_ref * R), rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    np.testing.assert_allclose(g, g_ref, rtol=GRAD_RTOL, atol=GRAD_ATOL)
    assert (g[~keep] == 0.0).all()
