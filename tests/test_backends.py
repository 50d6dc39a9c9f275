"""Tests of :mod:`xpseq.backends`: selection, conversion, jit and gradients (scan: in
test_backend_scan.py).

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
from helpers import installed, np_name, other_backend

from xpseq import backends
from xpseq.io.install import install_hint
from xpseq.backends import NAMES, Backend
from xpseq.core.vjp import defvjp

CORE_DIR = pathlib.Path(__file__).resolve().parent.parent / "xpseq" / "core"
FORBIDDEN_IMPORTS = ("numpy", "jax", "torch", "array_api_strict")


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
    with pytest.raises(ModuleNotFoundError, match=re.escape(install_hint("torch"))):
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


def test_every_door_offers_the_same_list_of_backends(tmp_path, capsys):
    """``backends.get``, ``xpseq.load`` and the command's ``--backend`` name one list,
    :data:`xpseq.backends.NAMES`, so that they cannot drift apart; ``get`` adds the
    forward-only backends it also makes."""
    import xpseq
    from xpseq.app import cli

    listed = str(list(NAMES))
    with pytest.raises(ValueError) as by_get:
        backends.get("nope")
    with pytest.raises(ValueError) as by_load:
        xpseq.load(tmp_path / "m.safetensors", backend="nope")
    assert str(by_load.value) == f"unknown backend 'nope'; choose one of {listed}"
    assert str(by_get.value) == (f"unknown backend 'nope'; choose one of {listed} (or the "
                                 "forward-only 'onnx', 'dask')")
    with pytest.raises(ValueError, match=re.escape(f"to decode choose one of {listed}")):
        xpseq.load(tmp_path / "m.safetensors", backend="dask")
    forward_only = [n for n in backends.CAPABILITIES if n not in NAMES]
    assert forward_only == ["onnx", "dask"]
    for command in ("train", "translate", "evaluate", "g2p"):
        with pytest.raises(SystemExit):
            cli.main([command, "--backend", "nope"])
        err = capsys.readouterr().err
        assert f"(choose from {', '.join(map(repr, NAMES))}" in err, (command, err)


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
