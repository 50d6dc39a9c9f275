"""Tests of the backends' ``scan`` (:meth:`xpseq.backends.Backend.scan`): every backend
against a plain Python loop in NumPy, reverse and spanned runs, zero-length sequences, the
errors, and JAX's ``lax.scan`` under ``jit``.

Every backend-parametrised test runs on numpy, jax, torch and array_api_strict (see the
``backend`` fixture in conftest.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import np_name, other_backend

from xpseq import backends
from xpseq.backends import Backend


def host(be: Backend, tree):
    """Leaves of a (nested tuple/list/dict) tree of ``be`` arrays as NumPy arrays."""
    if tree is None:
        return None
    if isinstance(tree, dict):
        return {k: host(be, v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(host(be, v) for v in tree)
    if be.name == "numpy" and isinstance(tree, np.generic):
        # NumPy arithmetic on 0-d arrays gives scalars (np.float64); the numpy backend's
        # to_numpy rejecting them is tested on its own (test_to_numpy_of_a_zero_d_reduction)
        # so that the scan tests check scan only.
        return np.asarray(tree)
    return be.to_numpy(tree)


def assert_tree_equal_np(actual, expected, rtol=1e-14, atol=0.0):
    """Same structure, shapes, dtypes and values (NumPy trees)."""
    if expected is None:
        assert actual is None
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected)
        for key in expected:
            assert_tree_equal_np(actual[key], expected[key], rtol, atol)
        return
    if isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_tree_equal_np(a, e, rtol, atol)
        return
    assert isinstance(actual, np.ndarray)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------- scan
#
# Each case: (carry, xs, length) as NumPy trees, and fn(xp) -> step function. The
# reference is a plain Python loop in NumPy; ys are stacked with np.stack.


def _case_scalar(xp):
    return lambda c, x: (c + x, c * x)


def _case_tuple_dict(xp):
    def step(carry, x):
        a, b = carry
        a = a + x["u"] * 2.0
        b = b * 0.5 + x["w"]
        return (a, b), a + xp.sum(b)
    return step


def _case_two_ys(xp):
    return lambda c, x: (c + xp.sum(x), (x * c, xp.sum(x * x)))


def _case_y_none(xp):
    return lambda c, x: (c * 2.0 + x, None)


def _case_no_xs(xp):
    return lambda c, x: (c * 3.0 + 1.0, c)


def _case_zero_length(xp):
    return lambda c, x: (c + xp.sum(x), (x * 2.0, xp.sum(x), c))


SCAN_CASES = {
    "scalar_carry_1d_xs": (_case_scalar, 0.5, np.array([1.0, -2.0, 3.5, 0.25]), None),
    "tuple_carry_dict_xs": (
        _case_tuple_dict,
        (1.0, np.array([1.0, -1.0])),
        {"u": np.array([0.5, 1.5, -1.0, 2.0, 0.0]),
         "w": np.arange(10.0).reshape(5, 2) / 7.0},
        None,
    ),
    "ys_tuple": (_case_two_ys, 1.0, np.arange(6.0).reshape(3, 2) - 2.5, None),
    "y_none": (_case_y_none, 0.0, np.array([1.0, 2.0, 3.0]), None),
    "xs_none_length_3": (_case_no_xs, 1.0, None, 3),
    "zero_length": (_case_zero_length, 0.5, np.zeros((0, 2)), None),
}


def _np_tree(tree):
    """NumPy float64 arrays (0-d for Python scalars) in the shape of ``tree``."""
    if tree is None:
        return None
    if isinstance(tree, dict):
        return {k: _np_tree(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_np_tree(v) for v in tree)
    return np.asarray(tree, dtype=np.float64)


def reference_scan(fn, carry, xs, length):
    """Plain-Python scan on NumPy trees."""
    def leaves(t):
        if t is None:
            return []
        if isinstance(t, dict):
            return [leaf for v in t.values() for leaf in leaves(v)]
        if isinstance(t, tuple):
            return [leaf for v in t for leaf in leaves(v)]
        return [t]

    def index(t, i):
        if t is None:
            return None
        if isinstance(t, dict):
            return {k: index(v, i) for k, v in t.items()}
        if isinstance(t, tuple):
            return tuple(index(v, i) for v in t)
        return t[i]

    n = length if xs is None else leaves(xs)[0].shape[0]
    ys = []
    for i in range(n):
        carry, y = fn(carry, index(xs, i))
        ys.append(y)
    return carry, ys


def _stack(ys):
    first = ys[0]
    if first is None:
        return None
    if isinstance(first, dict):
        return {k: _stack([y[k] for y in ys]) for k in first}
    if isinstance(first, tuple):
        return tuple(_stack([y[i] for y in ys]) for i in range(len(first)))
    return np.stack([np.asarray(y) for y in ys], axis=0)


@pytest.mark.parametrize("case", list(SCAN_CASES))
def test_scan_matches_python_loop(backend, case):
    make_fn, carry0, xs, length = SCAN_CASES[case]
    carry0, xs = _np_tree(carry0), _np_tree(xs)
    ref_carry, ref_ys = reference_scan(make_fn(np), carry0, xs, length)
    carry, ys = backend.scan(make_fn(backend.xp), backend.asarray_tree(carry0),
                             backend.asarray_tree(xs), length=length)
    assert_tree_equal_np(host(backend, carry), _np_tree(ref_carry))
    if case == "y_none":
        assert ys is None
    elif case == "zero_length":
        # What jax.lax.scan returns: each y stacked along a new axis of size 0.
        expected = (np.zeros((0, 2)), np.zeros((0,)), np.zeros((0,)))
        assert_tree_equal_np(host(backend, ys), expected)
    else:
        assert_tree_equal_np(host(backend, ys), _stack(ref_ys))


def test_scan_reverse_runs_from_the_last_step(backend):
    """``reverse=True``: the carry meets the steps last to first, and ``ys`` stay in the
    order of ``xs`` (``lax.scan``'s semantics), checked against a plain Python loop."""
    xs = np.array([1.0, -2.0, 3.5, 0.25])

    def fn(c, x):
        c = 0.5 * c + x
        return c, c * x

    carry, ys = backend.scan(fn, backend.asarray(1.0), backend.asarray(xs), reverse=True)
    c, expected = 1.0, [0.0] * len(xs)
    for i in reversed(range(len(xs))):
        c = 0.5 * c + xs[i]
        expected[i] = c * xs[i]
    assert float(backend.to_numpy(carry)) == pytest.approx(c, rel=1e-15)
    np.testing.assert_allclose(backend.to_numpy(ys), expected, rtol=1e-15)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("span", [(1, 4), (0, 6), (-3, 2), (4, 9), (3, 3), (5, 1)])
def test_scan_span_runs_only_the_steps_in_it(backend, span, reverse):
    """``span=(start, stop)``: the steps ``max(start, 0) <= t < min(stop, T)`` run, in
    order (last to first with ``reverse``), and the other steps' ``y`` are zero; the bounds
    are given as the backend's 0-d arrays, as a model computes them."""
    xs = np.array([1.0, -2.0, 3.5, 0.25, 2.0, -0.5])

    def fn(c, x):
        c = 0.5 * c + x
        return c, (c * x, 2.0 * x)

    start = backend.asarray(np.int64(span[0]))
    stop = backend.asarray(np.int64(span[1]))
    carry, (ys, twice) = backend.scan(fn, backend.asarray(1.0), backend.asarray(xs),
                                      reverse=reverse, span=(start, stop))
    steps = range(max(span[0], 0), min(span[1], len(xs)))
    c, expected, expected_twice = 1.0, np.zeros(len(xs)), np.zeros(len(xs))
    for i in (reversed(steps) if reverse else steps):
        c = 0.5 * c + xs[i]
        expected[i], expected_twice[i] = c * xs[i], 2.0 * xs[i]
    assert float(backend.to_numpy(carry)) == pytest.approx(c, rel=1e-15)
    np.testing.assert_allclose(backend.to_numpy(ys), expected, rtol=1e-15)
    np.testing.assert_allclose(backend.to_numpy(twice), expected_twice, rtol=1e-15)


def test_valid_span_bounds_the_steps_some_row_has(backend):
    """``kernels.valid_span``: from the first step where some row is valid to one past the
    last (steps between that no row has stay inside); no valid step at all gives an
    empty span."""
    from xpseq.core import kernels
    xp = backend.xp
    valid = np.zeros((7, 3, 1), dtype=bool)
    valid[1:3, 0] = True
    valid[4, 2] = True                          # step 3 is padding in every row
    start, stop = kernels.valid_span(backend.asarray(valid), xp=xp)
    assert (int(backend.to_numpy(start)), int(backend.to_numpy(stop))) == (1, 5)
    start, stop = kernels.valid_span(backend.asarray(np.zeros((4, 2, 1), bool)), xp=xp)
    assert int(backend.to_numpy(start)) >= int(backend.to_numpy(stop))
    start, stop = kernels.valid_span(backend.asarray(np.zeros((0, 2, 1), bool)), xp=xp)
    assert int(backend.to_numpy(start)) >= int(backend.to_numpy(stop))


def test_jax_scan_span_compiles_once_for_every_span():
    """JAX runs a span as a loop whose trip count is known only at run time: one jitted
    program serves every span."""
    jax = pytest.importorskip("jax")
    jb = backends.get("jax")
    traces = []

    @jax.jit
    def run(xs, start, stop):
        traces.append(1)
        return jb.scan(lambda c, x: (c + x, c * x), jb.asarray(0.0), xs, span=(start, stop))

    xs = jb.asarray(np.arange(1.0, 7.0))
    for start, stop in ((0, 6), (2, 5), (4, 4)):
        carry, ys = run(xs, start, stop)
        assert float(carry) == sum(range(start + 1, stop + 1))
        expected = [sum(range(start + 1, t + 1)) * (t + 1) if start <= t < stop else 0.0
                    for t in range(6)]
        np.testing.assert_array_equal(np.asarray(ys), expected)
    assert len(traces) == 1


def test_custom_vjp_runs_the_given_backward(backend):
    """``custom_vjp(fn, fwd, bwd)``: the value is ``fn``'s, the gradient is whatever
    ``bwd`` says (here deliberately 3 × the true one, so a library that differentiated
    ``fn`` itself would be caught), and an argument with no cotangent (``None``) is left
    alone. On numpy and array_api_strict ``value_and_grad`` runs the rule; on JAX it is a
    ``jax.custom_vjp``, on PyTorch an ``autograd.Function``."""
    def fn(x, scale):
        return backend.xp.sum(backend.xp.sin(x)) * scale

    def fwd(x, scale):
        return fn(x, scale), (x, scale)

    def bwd(saved, ct):
        x, scale = saved
        return 3.0 * ct * scale * backend.xp.cos(x), None

    f = backend.custom_vjp(fn, fwd, bwd)
    x = backend.asarray([0.1, 0.7, -1.2])
    value, grad = backend.value_and_grad(f)(x, backend.asarray(2.0))
    assert float(backend.to_numpy(value)) == pytest.approx(2.0 * float(np.sum(np.sin([0.1, 0.7, -1.2]))), rel=1e-14)
    np.testing.assert_allclose(backend.to_numpy(grad), 6.0 * np.cos([0.1, 0.7, -1.2]), rtol=1e-14)
    np.testing.assert_allclose(backend.to_numpy(f(x, backend.asarray(2.0))),
                               backend.to_numpy(value), rtol=0)


def test_scan_zero_length_shapes_match_jax_lax_scan(backend):
    jax = pytest.importorskip("jax")
    jb = backends.get("jax")
    fn_j = _case_zero_length(jb.xp)
    _, ys_j = jax.lax.scan(fn_j, jb.asarray(0.5), jb.asarray(np.zeros((0, 2))))
    _, ys = backend.scan(_case_zero_length(backend.xp), backend.asarray(0.5),
                         backend.asarray(np.zeros((0, 2))))
    assert [tuple(a.shape) for a in ys] == [tuple(a.shape) for a in ys_j]
    assert [np_name(backend, a) for a in ys] == [str(a.dtype) for a in ys_j]


def test_scan_zero_length_dict_xs_and_matrix_y(backend):
    xs = {"a": backend.asarray(np.zeros((0, 3))), "b": backend.asarray(np.zeros((0, 2, 4)))}
    xp = backend.xp
    carry, ys = backend.scan(
        lambda c, x: (c, {"outer": xp.reshape(x["a"], (3, 1)) * xp.sum(x["b"], axis=0)}),
        backend.asarray(1.0), xs)
    assert tuple(ys["outer"].shape) == (0, 3, 4)
    assert float(backend.to_numpy(carry)) == 1.0


def test_scan_mismatched_leading_sizes_raise(backend):
    xs = {"a": backend.asarray(np.zeros(3)), "b": backend.asarray(np.zeros(4))}
    with pytest.raises(ValueError):
        backend.scan(lambda c, x: (c, None), backend.asarray(0.0), xs)


def test_scan_length_disagreeing_with_xs_raises(backend):
    with pytest.raises(ValueError):
        backend.scan(lambda c, x: (c, None), backend.asarray(0.0),
                     backend.asarray(np.zeros(3)), length=4)


@pytest.mark.parametrize("name", ["numpy", "torch", "array_api_strict"])
def test_python_loop_scan_needs_length_without_xs(name):
    be = other_backend(name)
    with pytest.raises(ValueError, match="length"):
        be.scan(lambda c, x: (c, None), be.asarray(0.0), None)


def test_jax_scan_is_lax_scan(monkeypatch):
    jax = pytest.importorskip("jax")
    jb = backends.get("jax")
    fn = _case_tuple_dict(jb.xp)
    carry0 = jb.asarray_tree(_np_tree((1.0, np.array([1.0, -1.0]))))
    xs = jb.asarray_tree(_np_tree(SCAN_CASES["tuple_carry_dict_xs"][2]))
    direct = jax.lax.scan(fn, carry0, xs)
    ours = jb.scan(fn, carry0, xs)
    assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(direct)
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(direct)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    calls = []
    real = jax.lax.scan

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(jax.lax, "scan", spy)
    jb.scan(fn, carry0, xs)
    assert calls == [1]


def test_jax_scan_works_inside_jit():
    jax = pytest.importorskip("jax")
    jb = backends.get("jax")
    fn = _case_scalar(jb.xp)
    xs_np = np.array([1.0, -2.0, 3.5, 0.25])

    @jax.jit
    def run(c, xs):
        return jb.scan(fn, c, xs)

    carry, ys = run(jb.asarray(0.5), jb.asarray(xs_np))
    ref_carry, ref_ys = reference_scan(_case_scalar(np), np.float64(0.5), xs_np, None)
    np.testing.assert_allclose(np.asarray(carry), ref_carry, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(ys), np.stack(ref_ys), rtol=1e-14)
    assert ys.dtype == np.float64
