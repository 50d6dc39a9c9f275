"""Optimisers and gradient clipping against ``torch.optim``, ``torch.nn.utils`` and optax.

xpseq's optimisers are pure array-API code, so the same update runs on every selected
backend (the ``backend`` fixture) and is compared, step for step over several steps with
gradients that depend on the current parameters, with the peers in float64.
"""

from __future__ import annotations

import functools
import math
import warnings

import array_api_compat
import numpy as np
import pytest

from xpseq import backends
from xpseq.core import optim

STEPS = 10
SHAPES = {"w": (3, 4), "s": ()}   # a 0-d parameter too (few shapes: jax compiles per shape)
# Parameters are O(1): a displacement error of a few ulps of them is ~1e-16 absolute.
RTOL, ATOL = 1e-12, 1e-15


def params0(seed=0):
    rng = np.random.default_rng(seed)
    return {k: np.asarray(rng.standard_normal(s)) for k, s in SHAPES.items()}


def grad_fn(xp, p, step):
    """The gradient at ``step`` (0-based): changes every step and depends on ``p``."""
    return xp.sin(p * float(step + 1)) + 0.1 * float(step) * xp.cos(p)


def xpseq_run(be, opt, p0, steps=STEPS):
    """``steps`` updates on backend ``be``; NumPy params and the final optimiser state."""
    params = {k: be.asarray(v) for k, v in p0.items()}
    state = opt.init(params)
    for step in range(steps):
        grads = {k: grad_fn(be.xp, p, step) for k, p in params.items()}
        params, state = opt.update(grads, state, params)
    return {k: be.to_numpy(v) for k, v in params.items()}, state


def torch_run(torch, make_opt, p0, steps=STEPS):
    ps = {k: torch.tensor(v, requires_grad=True) for k, v in p0.items()}
    opt = make_opt(list(ps.values()))
    for step in range(steps):
        for p in ps.values():
            p.grad = grad_fn(torch, p.detach(), step)
        opt.step()
    return {k: p.detach().numpy().copy() for k, p in ps.items()}, opt, ps


def assert_same_trajectory(got, expected, p0, rtol=RTOL, atol=ATOL):
    """Compare the displacement ``p_final - p0`` (stricter than comparing the params)."""
    for k in p0:
        g, e = np.asarray(got[k]), np.asarray(expected[k])
        assert g.shape == e.shape == np.shape(p0[k]) and g.dtype == np.float64, k
        np.testing.assert_allclose(g - p0[k], e - p0[k], rtol=rtol, atol=atol, err_msg=k)
        assert np.all(np.abs(e - p0[k]) > 1e-6), "the trajectory must move every parameter"


# ------------------------------------------------------------------------ Adam


@pytest.mark.parametrize("lr", [1e-2, 1e-3])
def test_adam_matches_torch_adam(backend, lr):
    torch = pytest.importorskip("torch")
    p0 = params0()
    expected, topt, tps = torch_run(torch, lambda ps: torch.optim.Adam(ps, lr=lr), p0)
    got, state = xpseq_run(backend, optim.adam(lr), p0)
    assert_same_trajectory(got, expected, p0)
    assert float(backend.to_numpy(state["step"])) == STEPS
    for k, p in tps.items():   # the moment estimates too
        tstate = topt.state[p]
        np.testing.assert_allclose(backend.to_numpy(state["m"][k]), tstate["exp_avg"].numpy(),
                                   rtol=RTOL, atol=1e-16, err_msg=k)
        np.testing.assert_allclose(backend.to_numpy(state["v"][k]),
                                   tstate["exp_avg_sq"].numpy(), rtol=RTOL, atol=1e-18,
                                   err_msg=k)


@functools.lru_cache(maxsize=None)
def _optax_adam_trajectory(lr):
    optax = pytest.importorskip("optax")
    be = backends.get("jax")            # x64 on before optax creates any array
    jnp = be.xp
    p0 = params0()
    params = {k: jnp.asarray(v) for k, v in p0.items()}
    tx = optax.adam(lr)
    state = tx.init(params)
    for step in range(STEPS):
        grads = {k: grad_fn(jnp, p, step) for k, p in params.items()}
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return {k: np.asarray(v) for k, v in params.items()}


@pytest.mark.parametrize("lr", [1e-2, 1e-3])
def test_adam_matches_optax_adam(backend, lr):
    pytest.importorskip("optax")
    # optax's scale_by_adam computes  m̂ / (sqrt(v̂) + eps)  with m̂ = m/(1-b1ᵗ),
    # v̂ = v/(1-b2ᵗ); torch and xpseq compute  (lr/(1-b1ᵗ)) m / (sqrt(v)/sqrt(1-b2ᵗ) + eps).
    # sqrt(v̂) = sqrt(v)/sqrt(1-b2ᵗ), so eps sits in the same place (outside the square
    # root, added to the bias-corrected root) and the two formulas are the same function:
    # they differ only by rounding, so the tight 1e-12 tolerance applies (not ~1e-9).
    expected = _optax_adam_trajectory(lr)
    p0 = params0()
    got, _ = xpseq_run(backend, optim.adam(lr), p0)
    assert_same_trajectory(got, expected, p0)


def test_adam_eps_matters_for_small_gradients():
    """The comparisons above are sensitive to eps: a tiny-gradient run moves by less than lr."""
    torch = pytest.importorskip("torch")
    p0 = {"w": np.full((3,), 1e-9)}
    ps = {"w": torch.tensor(p0["w"], requires_grad=True)}
    topt = torch.optim.Adam(list(ps.values()), lr=1e-2)
    be = backends.get("numpy")
    opt = optim.adam(1e-2)
    params = {"w": be.asarray(p0["w"])}
    state = opt.init(params)
    for _ in range(3):
        ps["w"].grad = ps["w"].detach() * 1e-2        # |g| ~ 1e-11 ~ eps
        topt.step()
        params, state = opt.update({"w": params["w"] * 1e-2}, state, params)
    moved = p0["w"] - ps["w"].detach().numpy()
    assert np.all(moved < 1e-2 * 3 * 0.9)            # eps damped the steps
    np.testing.assert_allclose(params["w"] - p0["w"], ps["w"].detach().numpy() - p0["w"],
                               rtol=RTOL, atol=1e-24)


# ------------------------------------------------------- schedules inside update


def warmup_factor(t: int) -> float:
    """A warm-up then inverse-square-root factor, by hand (``t`` = updates taken)."""
    return min((t + 1) / 4, math.sqrt(4 / (t + 1)))


def warmup_rate(lr):
    """``lr`` times :func:`warmup_factor` as a schedule of the 0-d step array."""
    def rate(step):
        xp = array_api_compat.array_namespace(step)
        s = step + 1.0
        return lr * xp.minimum(s / 4, xp.sqrt(4 / s))

    return rate


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_a_schedule_as_lr_matches_torch_with_lambda_lr(backend, name):
    """``lr`` a function of the step: the optimiser evaluates it in ``update``, step for
    step as torch's optimiser under ``LambdaLR`` (its rate at update t is lr · λ(t))."""
    torch = pytest.importorskip("torch")
    lr, p0 = (1e-2, params0()) if name == "adam" else (0.05, params0(1))

    def make_torch(ps):
        opt = (torch.optim.Adam(ps, lr=lr) if name == "adam"
               else torch.optim.SGD(ps, lr=lr, momentum=0.9))
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, warmup_factor)

    ps = {k: torch.tensor(v, requires_grad=True) for k, v in p0.items()}
    topt, sched = make_torch(list(ps.values()))
    for step in range(STEPS):
        for p in ps.values():
            p.grad = grad_fn(torch, p.detach(), step)
        topt.step()
        sched.step()
    expected = {k: p.detach().numpy().copy() for k, p in ps.items()}
    opt = optim.adam(warmup_rate(lr)) if name == "adam" else optim.sgd(warmup_rate(lr), 0.9)
    got, state = xpseq_run(backend, opt, p0)
    assert_same_trajectory(got, expected, p0)
    # ... and not the constant rate's trajectory (the schedule was applied)
    constant, _ = xpseq_run(backend, optim.adam(lr) if name == "adam"
                            else optim.sgd(lr, 0.9), p0)
    assert not np.allclose(got["w"], constant["w"], rtol=1e-6)
    assert set(state) == set(opt.init({k: backend.asarray(v) for k, v in p0.items()}))


def test_the_rate_is_the_schedule_times_the_plateau_factor():
    """One step by hand: ``p − lr(0) · scale · m̂ / (sqrt(v̂) + eps)`` = ``p − r · sign(g)``
    at the first step (m̂ = g, v̂ = g², eps ≪ |g|)."""
    be = backends.get("numpy")
    params = {"w": be.asarray(np.array([1.0, -2.0]))}
    grads = {"w": be.asarray(np.array([0.5, -3.0]))}
    opt = optim.adam(warmup_rate(0.1), eps=1e-300)
    state = optim.scale_learning_rate(opt.init(params), 0.5)
    new, new_state = opt.update(grads, state, params)
    rate = 0.1 * 0.25 * 0.5                               # lr · factor(0) · scale
    np.testing.assert_allclose(new["w"], [1.0 - rate, -2.0 + rate], rtol=1e-15, atol=0)
    assert float(new_state["scale"]) == 0.5 and float(new_state["step"]) == 1.0
    assert set(new_state) == set(state) == {"step", "m", "v", "scale"}


@pytest.mark.parametrize("make", [optim.adam, lambda lr: optim.sgd(lr, 0.9)],
                         ids=["adam", "sgd"])
def test_init_creates_the_plateau_factor_and_scale_learning_rate_lowers_it(backend, make):
    params = {k: backend.asarray(v) for k, v in params0().items()}
    opt = make(1e-2)
    state = opt.init(params)
    assert float(backend.to_numpy(state["scale"])) == 1.0
    assert backend.to_numpy(state["scale"]).shape == ()
    assert backend.to_numpy(state["scale"]).dtype == np.float64
    lowered = optim.scale_learning_rate(optim.scale_learning_rate(state, 0.5), 0.5)
    assert float(backend.to_numpy(lowered["scale"])) == 0.25
    assert float(backend.to_numpy(state["scale"])) == 1.0          # the input is unchanged
    assert set(lowered) == set(state) and lowered["m" if "m" in state else "momentum"] is \
        state["m" if "m" in state else "momentum"]
    # A step at scale 1/4 is the step of the rate lr / 4.
    grads = {k: grad_fn(backend.xp, p, 0) for k, p in params.items()}
    quarter, after = opt.update(grads, lowered, params)
    reference, _ = make(2.5e-3).update(grads, make(2.5e-3).init(params), params)
    for k in params:
        np.testing.assert_allclose(backend.to_numpy(quarter[k]), backend.to_numpy(reference[k]),
                                   rtol=1e-15, atol=0, err_msg=k)
    assert set(after) == set(state)                    # nothing added, nothing lost
    assert float(backend.to_numpy(after["scale"])) == 0.25


def test_scale_learning_rate_checks_its_inputs():
    state = optim.adam(1e-3).init({"w": np.zeros(2)})
    for bad in (0, -0.5, math.inf, True):
        with pytest.raises(ValueError, match="scale_learning_rate: factor must be a positive"):
            optim.scale_learning_rate(state, bad)
    with pytest.raises(KeyError, match="it has no 'scale'"):
        optim.scale_learning_rate({"step": np.zeros(())}, 0.5)


def test_a_schedule_is_recorded_in_the_hyperparameters():
    rate = warmup_rate(1e-3)
    opt = optim.adam(rate, b2=0.98)
    assert opt.hyperparams == {"lr": rate, "b1": 0.9, "b2": 0.98, "eps": 1e-8}
    again = optim.from_spec(opt.name, opt.hyperparams)
    params = {k: np.asarray(v) for k, v in params0().items()}
    grads = {k: grad_fn(np, p, 0) for k, p in params.items()}
    a, _ = opt.update(grads, opt.init(params), params)
    b, _ = again.update(grads, again.init(params), params)
    for k in params:
        np.testing.assert_array_equal(a[k], b[k])


# ------------------------------------------------------------------------- SGD


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_matches_torch_sgd(backend, momentum):
    torch = pytest.importorskip("torch")
    lr = 0.05
    p0 = params0(1)
    expected, _, _ = torch_run(
        torch, lambda ps: torch.optim.SGD(ps, lr=lr, momentum=momentum), p0)
    got, state = xpseq_run(backend, optim.sgd(lr, momentum), p0)
    assert_same_trajectory(got, expected, p0)
    assert float(backend.to_numpy(state["step"])) == STEPS


def test_sgd_momentum_differs_from_plain_sgd():
    be = backends.get("numpy")
    p0 = params0(1)
    plain, _ = xpseq_run(be, optim.sgd(0.05), p0, steps=3)
    heavy, _ = xpseq_run(be, optim.sgd(0.05, 0.9), p0, steps=3)
    assert not np.allclose(plain["w"], heavy["w"], rtol=1e-6)


# ------------------------------------------------------------ gradient clipping


def _grads(seed=2):
    rng = np.random.default_rng(seed)
    return {k: np.asarray(rng.standard_normal(s) * 3.0) for k, s in SHAPES.items()}


@pytest.mark.parametrize("max_norm", [5.7e37, 1e300, 1e-300])
def test_an_extreme_max_norm_never_overflows_in_float32(max_norm):
    """Found by the property test over TrainConfig: clip_norm=5.7e37 with float32
    gradients of norm 1e-3 overflowed ``max_norm / norm`` (a RuntimeWarning; the result
    was right). Gradients are kept below a huge max_norm and zeroed by a tiny one."""
    grads = {"a": np.array([1e-3, 0.0], dtype=np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clipped, _ = optim.clip_by_global_norm(grads, max_norm)
    expected = grads["a"] if max_norm > 1 else np.zeros(2, dtype=np.float32)
    np.testing.assert_array_equal(clipped["a"], expected)


@pytest.mark.parametrize("factor", [0.3, 2.0], ids=["clips", "below_max_norm"])
def test_clip_by_global_norm_matches_torch(backend, factor):
    torch = pytest.importorskip("torch")
    g_np = _grads()
    norm_np = math.sqrt(sum(float(np.sum(g * g)) for g in g_np.values()))
    max_norm = factor * norm_np
    ps = [torch.zeros(s, dtype=torch.float64, requires_grad=True) for s in SHAPES.values()]
    for p, g in zip(ps, g_np.values()):
        p.grad = torch.from_numpy(g.copy())
    t_norm = float(torch.nn.utils.clip_grad_norm_(ps, max_norm))
    t_clipped = {k: p.grad.numpy() for k, p in zip(SHAPES, ps)}

    clipped, norm = optim.clip_by_global_norm({k: backend.asarray(v) for k, v in g_np.items()},
                                              max_norm)
    norm = float(backend.to_numpy(norm))
    assert abs(norm - t_norm) <= 1e-12 * t_norm
    assert abs(norm - norm_np) <= 1e-12 * norm_np
    for k in SHAPES:
        got = backend.to_numpy(clipped[k])
        np.testing.assert_allclose(got, t_clipped[k], rtol=1e-12, atol=0, err_msg=k)
        if factor > 1:   # below max_norm: both leave the gradients exactly as they were
            np.testing.assert_array_equal(got, g_np[k])
            np.testing.assert_array_equal(t_clipped[k], g_np[k])
    if factor < 1:
        new_norm = math.sqrt(sum(float(np.sum(backend.to_numpy(g) ** 2))
                                 for g in clipped.values()))
        np.testing.assert_allclose(new_norm, max_norm, rtol=1e-6)   # 1e-6 in the denominator


def test_global_norm(backend):
    g_np = _grads()
    expected = math.sqrt(sum(float(v) ** 2 for g in g_np.values() for v in np.ravel(g)))
    got = float(backend.to_numpy(optim.global_norm({k: backend.asarray(v)
                                                    for k, v in g_np.items()})))
    assert abs(got - expected) <= 1e-14 * expected


# ------------------------------------------------------------------- jax.jit


@pytest.mark.parametrize("make", [lambda: optim.adam(1e-2), lambda: optim.sgd(0.05, 0.9),
                                  lambda: optim.adam(warmup_rate(1e-2))],
                         ids=["adam", "sgd_momentum", "adam_scheduled"])
def test_update_under_jax_jit_no_retrace(make):
    jax = pytest.importorskip("jax")
    be = backends.get("jax")
    opt = make()
    traces = 0

    def update(grads, state, params):
        nonlocal traces
        traces += 1
        return opt.update(grads, state, params)

    jitted = jax.jit(update)
    p0 = params0(3)
    params = {k: be.asarray(v) for k, v in p0.items()}
    state = opt.init(params)
    for step in range(5):
        grads = {k: grad_fn(be.xp, p, step) for k, p in params.items()}
        params, state = jitted(grads, state, params)
    assert traces == 1, f"update was traced {traces} times over 5 steps"
    eager, eager_state = xpseq_run(be, opt, p0, steps=5)
    # XLA may fuse the jitted arithmetic differently from eager dispatch: a few ulps.
    assert_same_trajectory({k: np.asarray(v) for k, v in params.items()}, eager, p0,
                           rtol=1e-13, atol=1e-15)
    assert float(state["step"]) == float(eager_state["step"]) == 5.0
    # A lower plateau factor (and the schedule's value at later steps) retraces nothing.
    for step in (5, 6):
        state = optim.scale_learning_rate(state, 0.5)
        params, state = jitted({k: grad_fn(be.xp, p, step) for k, p in params.items()},
                               state, params)
    assert traces == 1, f"update was traced {traces} times over 7 steps"
    assert float(state["scale"]) == 0.25


# -------------------------------------------------------- inputs are not mutated


def _snapshot(be, tree):
    if isinstance(tree, dict):
        return {k: _snapshot(be, v) for k, v in tree.items()}
    return be.to_numpy(tree).copy()


def _assert_unchanged(be, tree, snap):
    if isinstance(tree, dict):
        for k in tree:
            _assert_unchanged(be, tree[k], snap[k])
    else:
        np.testing.assert_array_equal(be.to_numpy(tree), snap)


@pytest.mark.parametrize("make", [lambda: optim.adam(1e-2), lambda: optim.sgd(0.05, 0.9),
                                  lambda: optim.sgd(0.05)], ids=["adam", "sgd_momentum", "sgd"])
def test_update_does_not_mutate_its_inputs(backend, make):
    opt = make()
    params = {k: backend.asarray(v) for k, v in params0(4).items()}
    state = opt.init(params)
    for step in range(2):   # the second update sees non-zero moments / momentum buffers
        grads = {k: grad_fn(backend.xp, p, step) for k, p in params.items()}
        trees = (grads, state, params)
        snaps = [_snapshot(backend, t) for t in trees]
        versions = [p._version for p in params.values()] if backend.name == "torch" else None
        new_params, new_state = opt.update(grads, state, params)
        for t, s in zip(trees, snaps):
            _assert_unchanged(backend, t, s)
        if versions is not None:   # no in-place torch op touched the parameters either
            assert [p._version for p in params.values()] == versions
        assert not np.array_equal(backend.to_numpy(new_params["w"]), snaps[2]["w"])
        params, state = new_params, new_state


def test_clip_does_not_mutate_its_inputs(backend):
    grads = {k: backend.asarray(v) for k, v in _grads().items()}
    snap = _snapshot(backend, grads)
    clipped, _ = optim.clip_by_global_norm(grads, 0.1)
    _assert_unchanged(backend, grads, snap)
    assert not np.array_equal(backend.to_numpy(clipped["w"]), snap["w"])


# ------------------------------------------------------------ hyperparameters


@pytest.mark.parametrize("make, match", [
    (lambda: optim.adam(lr=0), "adam: lr"),
    (lambda: optim.adam(lr=-1), "adam: lr"),
    (lambda: optim.adam(lr=math.inf), "adam: lr"),
    (lambda: optim.adam(b1=1.0), "adam: b1"),
    (lambda: optim.adam(b1=-0.5), "adam: b1"),
    (lambda: optim.adam(b2=-0.1), "adam: b2"),
    (lambda: optim.adam(b2=1.0), "adam: b2"),
    (lambda: optim.adam(eps=0.0), "adam: eps"),
    (lambda: optim.sgd(lr=0), "sgd: lr"),
    (lambda: optim.sgd(momentum=1.0), "sgd: momentum"),
    (lambda: optim.sgd(momentum=-0.1), "sgd: momentum"),
], ids=["adam_lr_0", "adam_lr_neg", "adam_lr_inf", "adam_b1_1", "adam_b1_neg", "adam_b2_neg",
        "adam_b2_1", "adam_eps_0", "sgd_lr_0", "sgd_momentum_1", "sgd_momentum_neg"])
def test_bad_hyperparameter_value(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("make, match", [
    (lambda: optim.adam(lr="x"), "adam: lr must be a real number, got str"),
    (lambda: optim.adam(b1=None), "adam: b1 must be a real number"),
    (lambda: optim.adam(lr=True), "adam: lr must be a real number, got bool"),
    (lambda: optim.sgd(momentum="0.9"), "sgd: momentum must be a real number"),
    (lambda: optim.sgd(lr=None), "sgd: lr must be a real number, got NoneType, or a "
                                 r"schedule \(a function of the step\)"),
], ids=["adam_lr_str", "adam_b1_none", "adam_lr_bool", "sgd_momentum_str", "sgd_lr_none"])
def test_bad_hyperparameter_type(make, match):
    with pytest.raises(TypeError, match=match):
        make()


@pytest.mark.parametrize("max_norm", [0, -1.0, 0.0])
def test_clip_by_global_norm_bad_max_norm(backend, max_norm):
    grads = {k: backend.asarray(v) for k, v in _grads().items()}
    with pytest.raises(ValueError, match="clip_by_global_norm: max_norm"):
        optim.clip_by_global_norm(grads, max_norm)


def test_hyperparameters_are_recorded():
    opt = optim.adam(3e-4, b1=0.8)
    assert opt.name == "adam"
    assert opt.hyperparams == {"lr": 3e-4, "b1": 0.8, "b2": 0.999, "eps": 1e-8}
    assert optim.sgd(0.5, 0.9).hyperparams == {"lr": 0.5, "momentum": 0.9}
