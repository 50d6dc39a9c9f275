"""Tests of :mod:`xpseq.backends`: selection, conversion, scan, jit and gradients.

Every backend-parametrised test runs on numpy, jax, torch and array_api_strict (see the
``backend`` fixture in conftest.py); gradient tests run on jax and torch (``grad_backend``).
"""

from __future__ import annotations

import ast
import importlib.util
import math
import pathlib
import re

import numpy as np
import pytest

from xpseq import backends
from xpseq.backends import NAMES, Backend
from xpseq.core.vjp import defvjp

CORE_DIR = pathlib.Path(__file__).resolve().parent.parent / "xpseq" / "core"
FORBIDDEN_IMPORTS = ("numpy", "jax", "torch", "array_api_strict")


# ------------------------------------------------------------------------- helpers


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def other_backend(name: str) -> Backend:
    """A backend for ``name``, or skip if its library is missing."""
    if not installed(name):
        pytest.skip(f"{name} is not installed")
    return backends.get(name)


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


def np_name(be: Backend, x) -> str:
    """The NumPy name of the dtype of a ``be`` array (checked against the library's too)."""
    name = be.to_numpy(x).dtype.name
    assert x.dtype == be.dtype(name)
    return name


# ---------------------------------------------------------------- available / get


def test_available_lists_installed_backends_in_names_order():
    names = backends.available()
    assert names == [n for n in NAMES if n in names]  # NAMES order, no duplicates
    for n in NAMES:
        assert (n in names) == installed(n), n


def test_available_leaves_out_a_missing_library(monkeypatch):
    real = importlib.util.find_spec

    def fake(name, *args, **kwargs):
        return None if name == "torch" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake)
    monkeypatch.setattr(backends, "_cache", {})
    assert "torch" not in backends.available()
    with pytest.raises(ModuleNotFoundError, match=re.escape("xpseq[torch]")):
        backends.get("torch")


@pytest.mark.parametrize("name", NAMES)
def test_get_returns_a_cached_backend_named_name(name):
    be = other_backend(name)
    assert isinstance(be, Backend)
    assert be.name == name
    assert backends.get(name) is be
    assert name in repr(be)


def test_get_unknown_name_lists_the_names():
    with pytest.raises(ValueError) as info:
        backends.get("nope")
    message = str(info.value)
    assert "nope" in message
    for n in NAMES:
        assert n in message


@pytest.mark.parametrize("name", [3, None, b"numpy", ("numpy",)])
def test_get_non_str_raises_value_error(name):
    with pytest.raises(ValueError, match="unknown backend"):
        backends.get(name)


# ------------------------------------------------------------------------ asarray


def test_asarray_python_floats_give_float64(backend):
    x = backend.asarray(1.5)
    assert np_name(backend, x) == "float64"
    assert backend.to_numpy(x) == 1.5
    y = backend.asarray([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]])
    assert np_name(backend, y) == "float64"
    assert tuple(y.shape) == (2, 3)
    # 0.1 survives exactly as the float64 0.1 (a float32 round trip would change it).
    np.testing.assert_array_equal(backend.to_numpy(y), np.array([[0.1, 0.2, 0.3], [1, 2, 3.0]]))


def test_torch_own_default_would_be_float32():
    torch = pytest.importorskip("torch")
    assert torch.tensor(1.5).dtype == torch.float32  # what asarray must not inherit
    assert backends.get("torch").asarray(1.5).dtype == torch.float64


def test_asarray_python_ints_give_int64(backend):
    x = backend.asarray([1, 2, 3])
    assert np_name(backend, x) == "int64"
    np.testing.assert_array_equal(backend.to_numpy(x), [1, 2, 3])
    assert np_name(backend, backend.asarray(7)) == "int64"


def test_asarray_bools_give_bool(backend):
    x = backend.asarray([True, False, True])
    assert np_name(backend, x) == "bool"
    np.testing.assert_array_equal(backend.to_numpy(x), [True, False, True])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_asarray_explicit_dtype(backend, dtype):
    x = backend.asarray([0.0, 1.0, 2.0], dtype=dtype)
    assert np_name(backend, x) == dtype
    np.testing.assert_array_equal(backend.to_numpy(x), np.array([0.0, 1.0, 2.0]).astype(dtype))


def test_asarray_float32_from_python_floats_and_float64_array(backend):
    x = backend.asarray([0.1, 0.2], dtype="float32")
    assert np_name(backend, x) == "float32"
    np.testing.assert_array_equal(backend.to_numpy(x), np.array([0.1, 0.2], np.float32))
    y = backend.asarray(np.array([0.1, 0.2]), dtype="float32")
    assert np_name(backend, y) == "float32"


def test_asarray_numpy_float64_array_stays_float64(backend):
    a = np.array([[1e-300, 0.1], [1.0 + 2**-40, -3.5]])
    x = backend.asarray(a)
    assert np_name(backend, x) == "float64"
    np.testing.assert_array_equal(backend.to_numpy(x), a)


def test_asarray_numpy_float32_array_stays_float32(backend):
    a = np.array([0.1, 0.2], dtype=np.float32)
    assert np_name(backend, backend.asarray(a)) == "float32"


def test_asarray_same_library_array_is_returned_unchanged(backend):
    x = backend.asarray([1.0, 2.0])
    assert backend.asarray(x) is x
    m = backend.asarray([True, False])
    assert backend.asarray(m) is m
    # With another dtype it is converted.
    y = backend.asarray(x, dtype="float32")
    assert y is not x
    assert np_name(backend, y) == "float32"
    assert np_name(backend, x) == "float64"


@pytest.mark.parametrize("dtype", ["float16", "complex128", "int8", "uint8", "float", "f8", ""])
def test_asarray_unknown_dtype_name_raises_value_error(backend, dtype):
    with pytest.raises(ValueError, match="dtype must be one of"):
        backend.asarray([1.0], dtype=dtype)


def test_asarray_strings_raise_type_error(backend):
    with pytest.raises(TypeError):
        backend.asarray(["a", "b"])


def test_asarray_numpy_string_array_raises_type_error(backend):
    # A NumPy array of strings is not numbers or booleans on any backend, the numpy one
    # included (an ndarray must not bypass the dtype check just because it is NumPy's).
    with pytest.raises(TypeError):
        backend.asarray(np.array(["a", "b"]))


@pytest.mark.parametrize("source", NAMES)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "bool"])
def test_asarray_converts_arrays_of_other_libraries(backend, source, dtype):
    src = other_backend(source)
    values = np.array([[0.1, -2.0], [3.0, 0.0]]).astype(dtype)
    x = src.asarray(values, dtype=dtype)
    y = backend.asarray(x)
    assert backend.is_array(y)
    assert np_name(backend, y) == dtype
    np.testing.assert_array_equal(backend.to_numpy(y), values)


def test_asarray_torch_tensor_to_jax():
    torch = pytest.importorskip("torch")
    jb = other_backend("jax")
    t = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64, requires_grad=True)
    j = jb.asarray(t)
    assert jb.is_array(j)
    assert j.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(j), [0.1, 0.2, 0.3])


def test_jax_backend_leaves_the_64_bit_mode_alone():
    jax = pytest.importorskip("jax")
    before = jax.config.jax_enable_x64             # on: the suite's own setting (conftest)
    backends.get("jax")
    backends.get("jax", device="cpu")
    assert jax.config.jax_enable_x64 is before


def test_jax_asarray_raises_instead_of_downcasting_when_x64_is_turned_off():
    jax = pytest.importorskip("jax")
    jb = backends.get("jax")
    assert jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        for make in (lambda: jb.asarray(1.5), lambda: jb.asarray(np.array([0.1, 0.2])),
                     lambda: jb.asarray([1.0], dtype="float64"),
                     lambda: jb.asarray([1], dtype="int64")):
            with pytest.raises(RuntimeError, match='64-bit mode.*jax_enable_x64", True'):
                make()
        # Integers become JAX's int32 when they fit, and are refused when they do not.
        assert jb.asarray([1, 2]).dtype == np.int32
        with pytest.raises(ValueError, match="beyond int32"):
            jb.asarray(np.array([2**40]))
        # float32 is still fine.
        assert jb.asarray([1.0], dtype="float32").dtype == np.float32
    finally:
        jax.config.update("jax_enable_x64", True)
    assert jb.asarray(1.5).dtype == np.float64


# ----------------------------------------------------------------------- to_numpy


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int32", "bool"])
def test_to_numpy_round_trips_values_and_dtype(backend, dtype):
    values = np.array([[1.25, 0.0, -3.0], [0.1, 7.0, 1e-8]]).astype(dtype)
    out = backend.to_numpy(backend.asarray(values))
    assert type(out) is np.ndarray
    assert out.dtype == np.dtype(dtype)
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(out, values)


def test_to_numpy_of_zero_d(backend):
    out = backend.to_numpy(backend.asarray(2.5))
    assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.float64
    assert float(out) == 2.5


def test_to_numpy_of_a_zero_d_reduction(backend):
    # NumPy returns scalars (np.float64) for 0-d results such as xp.sum(x); they are still
    # NumPy values and must convert (a loss value is exactly such a result).
    xp = backend.xp
    x = backend.asarray([1.5, 2.0, 4.0])
    for value in (xp.sum(x), xp.max(x), x[0, ...] + x[1, ...]):
        out = backend.to_numpy(value)
        assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.float64
    assert float(backend.to_numpy(xp.sum(x))) == 7.5


def test_to_numpy_of_another_library_raises_naming_both(backend):
    others = [n for n in NAMES if n != backend.name and installed(n)]
    if not others:
        pytest.skip("no other array library installed")
    for source in others:
        x = backends.get(source).asarray([1.0, 2.0])
        with pytest.raises(TypeError, match=re.escape(
                f"expected a {backend.name} array, got {source}")):
            backend.to_numpy(x)


def test_to_numpy_of_a_list_raises(backend):
    with pytest.raises(TypeError, match=re.escape(f"expected a {backend.name} array")):
        backend.to_numpy([1.0, 2.0])


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


# ---------------------------------------------------------------------------- jit


@pytest.mark.parametrize("name", ["numpy", "torch", "array_api_strict"])
def test_jit_is_identity_without_a_compiler(name):
    be = other_backend(name)

    def f(x):
        return x * 2.0

    assert be.jit(f) is f
    assert be.jit(f, static_argnames=("n",)) is f


def test_jax_jit_compiles_and_accepts_static_argnames():
    pytest.importorskip("jax")
    jb = backends.get("jax")
    xp = jb.xp

    def f(x, n):
        for _ in range(n):  # Python control flow on n: n must be static
            x = xp.sin(x) + x
        return x

    x = jb.asarray([0.1, 0.2, 0.3])
    jitted = jb.jit(f, static_argnames=("n",))
    assert jitted is not f
    assert hasattr(jitted, "lower")  # a jax.jit-wrapped function
    np.testing.assert_allclose(np.asarray(jitted(x, n=3)), np.asarray(f(x, 3)), rtol=1e-14)
    # Without static_argnames the traced n cannot drive range().
    with pytest.raises(TypeError):  # jax.errors.TracerIntegerConversionError
        jb.jit(f)(x, 3)

    g = jb.jit(lambda a, b: a @ b + 1.0)
    a = jb.asarray(np.arange(6.0).reshape(2, 3))
    b = jb.asarray(np.arange(3.0))
    out = g(a, b)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(out), np.arange(6.0).reshape(2, 3) @ np.arange(3.0) + 1)


# ------------------------------------------------------------------ value_and_grad


X_NP = np.array([[0.3, -1.2, 2.0], [0.0, 0.7, -0.4]])
Y_NP = np.array([[1.5, 0.2, -0.9], [2.2, -0.1, 0.6]])


def _value_np(be, v):
    out = be.to_numpy(v)
    assert out.shape == ()
    return float(out)


def test_value_and_grad_sin_x_times_x(grad_backend):
    be, xp = grad_backend, grad_backend.xp
    vg = be.value_and_grad(lambda x: xp.sum(xp.sin(x) * x))
    value, grad = vg(be.asarray(X_NP))
    assert math.isclose(_value_np(be, value), float(np.sum(np.sin(X_NP) * X_NP)),
                        rel_tol=1e-14)
    g = be.to_numpy(grad)
    assert g.dtype == np.float64 and g.shape == X_NP.shape
    np.testing.assert_allclose(g, np.cos(X_NP) * X_NP + np.sin(X_NP), rtol=1e-12, atol=1e-15)


def test_value_and_grad_argnums_tuple(grad_backend):
    be, xp = grad_backend, grad_backend.xp
    vg = be.value_and_grad(lambda x, y, z: xp.sum(x * y**2) + z, argnums=(0, 1))
    value, grads = vg(be.asarray(X_NP), be.asarray(Y_NP), 3.0)
    assert isinstance(grads, tuple) and len(grads) == 2
    assert math.isclose(_value_np(be, value), float(np.sum(X_NP * Y_NP**2)) + 3.0,
                        rel_tol=1e-14)
    np.testing.assert_allclose(be.to_numpy(grads[0]), Y_NP**2, rtol=1e-13)
    np.testing.assert_allclose(be.to_numpy(grads[1]), 2 * X_NP * Y_NP, rtol=1e-13)


def test_value_and_grad_argnums_second_argument_only(grad_backend):
    be, xp = grad_backend, grad_backend.xp
    vg = be.value_and_grad(lambda x, y: xp.sum(xp.exp(x) * y), argnums=1)
    value, grad = vg(be.asarray(X_NP), be.asarray(Y_NP))
    assert not isinstance(grad, tuple)
    np.testing.assert_allclose(be.to_numpy(grad), np.exp(X_NP), rtol=1e-13)


def test_value_and_grad_dict_pytree(grad_backend):
    be, xp = grad_backend, grad_backend.xp

    def loss(params, x):
        h = xp.tanh(x @ params["W"] + params["inner"]["b"])
        return xp.sum(h * h)

    W = np.array([[0.5, -0.3], [0.1, 0.8], [-0.6, 0.2]])
    b = np.array([0.05, -0.1])
    params = {"W": be.asarray(W), "inner": {"b": be.asarray(b)}}
    value, grads = be.value_and_grad(loss)(params, be.asarray(X_NP))

    h = np.tanh(X_NP @ W + b)
    dz = 2 * h * (1 - h**2)
    assert isinstance(grads, dict) and set(grads) == {"W", "inner"}
    assert isinstance(grads["inner"], dict) and set(grads["inner"]) == {"b"}
    assert math.isclose(_value_np(be, value), float(np.sum(h * h)), rel_tol=1e-13)
    np.testing.assert_allclose(be.to_numpy(grads["W"]), X_NP.T @ dz, rtol=1e-12)
    np.testing.assert_allclose(be.to_numpy(grads["inner"]["b"]), dz.sum(axis=0), rtol=1e-12)


def test_value_and_grad_has_aux(grad_backend):
    be, xp = grad_backend, grad_backend.xp

    def f(x):
        y = x * x
        return xp.sum(y), {"y": y, "mean": xp.mean(x)}

    (value, aux), grad = be.value_and_grad(f, has_aux=True)(be.asarray(X_NP))
    assert math.isclose(_value_np(be, value), float(np.sum(X_NP**2)), rel_tol=1e-14)
    assert set(aux) == {"y", "mean"}
    np.testing.assert_allclose(be.to_numpy(aux["y"]), X_NP**2, rtol=1e-15)
    np.testing.assert_allclose(be.to_numpy(aux["mean"]), X_NP.mean(), rtol=1e-14)
    np.testing.assert_allclose(be.to_numpy(grad), 2 * X_NP, rtol=1e-15)


@pytest.mark.parametrize("argnums", [(0, 1), 1], ids=["both", "unused_only"])
def test_value_and_grad_unused_argument_gets_zero_gradient(grad_backend, argnums):
    be, xp = grad_backend, grad_backend.xp
    vg = be.value_and_grad(lambda x, y: xp.sum(xp.sin(x)), argnums=argnums)
    value, grads = vg(be.asarray(X_NP), be.asarray(Y_NP))
    assert math.isclose(_value_np(be, value), float(np.sum(np.sin(X_NP))), rel_tol=1e-14)
    g_y = grads[1] if isinstance(argnums, tuple) else grads
    g_y = be.to_numpy(g_y)
    assert g_y.shape == Y_NP.shape and g_y.dtype == np.float64
    np.testing.assert_array_equal(g_y, np.zeros_like(Y_NP))
    if isinstance(argnums, tuple):
        np.testing.assert_allclose(be.to_numpy(grads[0]), np.cos(X_NP), rtol=1e-14)


def test_torch_value_and_grad_is_repeatable_and_leaves_inputs_alone():
    torch = pytest.importorskip("torch")
    tb = backends.get("torch")
    x = tb.asarray(X_NP)
    before = x.clone()
    vg = tb.value_and_grad(lambda x: torch.sum(x**3))
    v1, g1 = vg(x)
    v2, g2 = vg(x)
    assert torch.equal(g1, g2)
    np.testing.assert_allclose(g1.numpy(), 3 * X_NP**2, rtol=1e-14)
    assert torch.equal(v1, v2)
    assert not x.requires_grad
    assert x.grad is None
    assert torch.equal(x, before)
    assert not v1.requires_grad and v1.grad_fn is None
    assert not g1.requires_grad


def test_torch_value_and_grad_works_under_no_grad():
    torch = pytest.importorskip("torch")
    tb = backends.get("torch")
    with torch.no_grad():
        _, g = tb.value_and_grad(lambda x: torch.sum(x * x))(tb.asarray(X_NP))
    np.testing.assert_allclose(g.numpy(), 2 * X_NP, rtol=1e-15)


def test_torch_value_and_grad_rejects_non_scalar_value():
    pytest.importorskip("torch")
    tb = backends.get("torch")
    with pytest.raises(TypeError, match="scalar"):
        tb.value_and_grad(lambda x: x * 2.0)(tb.asarray(X_NP))
    with pytest.raises(TypeError, match="scalar"):
        tb.value_and_grad(lambda x: 1.0)(tb.asarray(X_NP))


def test_torch_value_and_grad_rejects_integer_argument():
    torch = pytest.importorskip("torch")
    tb = backends.get("torch")
    vg = tb.value_and_grad(lambda x: torch.sum(x * 1.0))
    with pytest.raises(TypeError, match="floating"):
        vg(tb.asarray([1, 2, 3]))
    with pytest.raises(TypeError, match="floating"):
        vg({"a": tb.asarray([1.0]), "b": tb.asarray([1, 2])})


@pytest.mark.parametrize("name", ["numpy", "array_api_strict"])
def test_hand_derived_value_and_grad_needs_a_rule(name):
    be = other_backend(name)
    with pytest.raises(NotImplementedError) as info:
        be.value_and_grad(lambda x: x)
    message = str(info.value)
    assert "no automatic differentiation" in message and "defvjp" in message
    assert be.gradients == "hand-derived"


@pytest.mark.parametrize("name", ["numpy", "array_api_strict"])
def test_hand_derived_value_and_grad_uses_the_attached_rule(name):
    """f(x, y) = sum(x * y) with a hand-written rule: df/dx = y, df/dy = x."""
    be = other_backend(name)
    xp = be.xp

    def f(x, y):
        return xp.sum(x * y)

    def rule(x, y):
        return f(x, y), lambda d: (d * y, d * x)

    defvjp(f, rule)
    x, y = be.asarray([1.0, 2.0, 3.0]), be.asarray([4.0, -5.0, 6.0])
    value, gx = be.value_and_grad(f)(x, y)
    assert float(value) == 1 * 4 - 2 * 5 + 3 * 6
    np.testing.assert_array_equal(be.to_numpy(gx), [4.0, -5.0, 6.0])
    value, (gx, gy) = be.value_and_grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(be.to_numpy(gy), [1.0, 2.0, 3.0])

    def g(x, y):
        return f(x, y), "aux"

    defvjp(g, lambda x, y: ((f(x, y), "aux"), rule(x, y)[1]))
    (value, aux), gy = be.value_and_grad(g, argnums=1, has_aux=True)(x, y)
    assert aux == "aux" and float(value) == 12.0
    np.testing.assert_array_equal(be.to_numpy(gy), [1.0, 2.0, 3.0])


# -------------------------------------------------------- core imports no library


def forbidden_imports(source: str, filename: str = "<string>") -> list[str]:
    """``file:line module`` for each import of a forbidden library in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        for module in modules:
            if module.split(".")[0] in FORBIDDEN_IMPORTS:
                found.append(f"{filename}:{node.lineno} {module}")
    return found


def test_forbidden_import_checker_catches_imports():
    src = ("import os\nimport numpy as np\nfrom jax import numpy as jnp\n"
           "def f():\n    import torch.nn\n    from array_api_strict import asarray\n"
           "from . import numpy\nimport numpyish\n")
    assert [f.split(" ")[1] for f in forbidden_imports(src)] == [
        "numpy", "jax", "torch.nn", "array_api_strict"]


def test_core_imports_no_array_library():
    files = sorted(CORE_DIR.rglob("*.py"))
    assert files, CORE_DIR
    assert any(f.name == "attention.py" for f in files)
    found = []
    for path in files:
        found += forbidden_imports(path.read_text(encoding="utf-8"), str(path))
    assert found == []
