"""xpseq leaves its caller's global settings alone, and its kernels take one path per namespace.

JAX's 64-bit mode is the caller's switch (the suite turns it on for itself in conftest.py):
creating a backend, pronouncing with the shipped model and training a Translator on JAX must
leave it as it was, float64 without it must be a clear error, and the core must run on
JAX's default configuration without dtype warnings. These run in a child process with JAX's
defaults (``JAX_ENABLE_X64`` removed from its environment).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from xpseq.core import delegation

CHILD = textwrap.dedent(r"""
    import json, warnings
    warnings.simplefilter("error")           # any warning fails the child
    import numpy as np
    import jax, jax.numpy as jnp
    import xpseq
    from xpseq import backends, core

    out = {"x64_at_start": bool(jax.config.jax_enable_x64)}
    # A core function before any backend exists: its values and the path it takes.
    x = jnp.asarray(np.linspace(-30.0, 30.0, 7), dtype=jnp.float32)
    calls = []
    real = jax.nn.sigmoid
    jax.nn.sigmoid = lambda z: calls.append(1) or real(z)
    out["sigmoid_before"] = np.asarray(core.sigmoid(x)).tolist()
    out["native_calls_before"] = len(calls)

    be = backends.get("jax")
    out["x64_after_backend"] = bool(jax.config.jax_enable_x64)
    out["sigmoid_after"] = np.asarray(core.sigmoid(x)).tolist()
    out["native_calls_after"] = len(calls) - out["native_calls_before"]
    jax.nn.sigmoid = real

    # Float64 without 64-bit mode: a clear error, never JAX's silent float32.
    for name, make in (("python_floats", lambda: be.asarray([1.5])),
                       ("float64_array", lambda: be.asarray(np.ones(2))),
                       ("dtype_float64", lambda: be.asarray([1], dtype="float64"))):
        try:
            make()
            out[name] = "no error"
        except RuntimeError as err:
            out[name] = str(err)
    out["ints"] = str(be.asarray([1, 2]).dtype)

    # The attention of the worked example on default-configured JAX arrays: no warning.
    q = jnp.asarray([[[1.0]]], dtype=jnp.float32)
    k = jnp.asarray([[[1.0], [0.0], [1.0], [2.0]]], dtype=jnp.float32)
    v = jnp.asarray([[[1.0, 0.0], [0.0, 2.0], [2.0, 1.0], [100.0, 100.0]]], dtype=jnp.float32)
    context, weights = core.scaled_dot_product_attention(q, k, v, valid_lens=[3])
    out["sdpa_weights"] = np.asarray(weights).ravel().tolist()
    out["sdpa_context"] = np.asarray(context).ravel().tolist()
    core.masked_softmax(jnp.ones((2, 3), dtype=jnp.float32), jnp.asarray([1, 3]))

    from xpseq import g2p
    out["g2p"] = g2p.pronounce(["hello"], backend="jax", lookup=False)
    out["x64_after_g2p"] = bool(jax.config.jax_enable_x64)

    task = xpseq.toy_task(n_train=64, n_dev=16, n_test_per_bucket=2, seed=0)
    model = xpseq.Translator.train(task, backend="jax", epochs=1, embed=8, hidden=16,
                                   progress=False)
    out["translated"] = len(model.translate(["the cat sees the dog"]))
    out["x64_after_translator"] = bool(jax.config.jax_enable_x64)
    out["cache_after_translator"] = jax.config.jax_compilation_cache_dir
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def child(tmp_path_factory) -> dict:
    pytest.importorskip("jax")
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    # The command's cache folder, set: the library must not read it.
    env["XPSEQ_JAX_CACHE"] = str(tmp_path_factory.mktemp("library") / "jax")
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["cache_folder_made"] = os.path.exists(env["XPSEQ_JAX_CACHE"])
    return out


def test_jax_64_bit_mode_is_left_as_the_caller_set_it(child):
    assert child["x64_at_start"] is False
    assert child["x64_after_backend"] is False
    assert child["x64_after_g2p"] is False
    assert child["x64_after_translator"] is False
    # nor its compilation cache: the command sets that for its own process (below)
    assert child["cache_after_translator"] is None and not child["cache_folder_made"]
    assert child["g2p"] == [["HH", "EH1", "L", "OW0"]]            # as on NumPy
    assert child["translated"] == 1


COMMAND_CHILD = textwrap.dedent(r"""
    import json, sys
    import jax
    from xpseq.app import cli
    code = cli.main(["translate", sys.argv[1], "--backend", "jax", "the cat sees the dog"])
    print(json.dumps({"code": code, "cache": jax.config.jax_compilation_cache_dir,
                      "max_size": jax.config.jax_compilation_cache_max_size}))
""")


def _command_child(tmp_path, **env_vars) -> dict:
    """``xpseq translate --backend jax`` in a child process, with the user's cache folder
    in ``tmp_path`` and JAX keeping every compiled program however fast it compiled."""
    env = {k: v for k, v in os.environ.items() if k not in ("XPSEQ_JAX_CACHE",
                                                            "JAX_COMPILATION_CACHE_DIR")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", **env_vars)
    checkpoint = os.path.join(os.path.dirname(__file__), "fixtures", "rnn_format1.safetensors")
    done = subprocess.run([sys.executable, "-c", COMMAND_CHILD, checkpoint],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow       # (12 s together: child processes that compile on JAX)
def test_the_command_keeps_compiled_programs_in_the_users_cache_folder(tmp_path):
    pytest.importorskip("jax")
    from xpseq.app.commands import JAX_CACHE_BYTES

    out = _command_child(tmp_path)
    folder = tmp_path / "cache" / "xpseq" / "jax"
    assert out["code"] == 0
    assert out["cache"] == str(folder) and out["max_size"] == JAX_CACHE_BYTES
    assert any(folder.iterdir())                                  # the programs it compiled


@pytest.mark.slow       # (12 s together: child processes that compile on JAX)
def test_the_commands_compilation_cache_can_be_moved_or_turned_off(tmp_path):
    pytest.importorskip("jax")
    moved = _command_child(tmp_path, XPSEQ_JAX_CACHE=str(tmp_path / "elsewhere"))
    assert moved["cache"] == str(tmp_path / "elsewhere") and any((tmp_path / "elsewhere").iterdir())
    off = _command_child(tmp_path, XPSEQ_JAX_CACHE="0")
    assert off["code"] == 0 and off["cache"] is None
    assert not (tmp_path / "cache").exists()


def test_float64_on_jax_without_64_bit_mode_is_a_clear_error(child):
    for name in ("python_floats", "float64_array", "dtype_float64"):
        message = child[name]
        assert "64-bit mode" in message and 'jax.config.update("jax_enable_x64", True)' in message
    assert child["ints"] == "int32"                       # JAX's own integer default


def test_core_runs_on_default_jax_without_warnings(child):
    # (the child turns every warning into an error)
    np.testing.assert_allclose(child["sdpa_weights"], [0.422319, 0.155362, 0.422319, 0.0],
                               atol=1e-6)
    assert child["sdpa_weights"][3] == 0.0
    np.testing.assert_allclose(child["sdpa_context"], [1.266956, 0.733044], atol=1e-6)


def test_a_core_function_takes_one_path_whatever_ran_before(child):
    assert child["sigmoid_before"] == child["sigmoid_after"]
    assert child["native_calls_before"] == 1 and child["native_calls_after"] == 1


def test_delegation_is_decided_by_the_namespace_alone():
    import array_api_compat.numpy as xnp
    import array_api_strict

    assert delegation.DELEGATES == {"sigmoid": ("jax", "torch", "ndonnx"), "relu": ("torch",),
                                    "relu_backward": ("torch",), "linear": ("torch",),
                                    "fused_attention": ("torch",),
                                    "fused_blockwise_attention": ("torch",),
                                    "fused_layer_norm": ("torch",),
                                    "fused_recurrence": ("torch",), "scan": ("jax",),
                                    "cos": ("ndonnx",)}
    for xp in (xnp, array_api_strict):
        assert not any(delegation.delegates(k, xp) for k in delegation.DELEGATES)
    with pytest.raises(ValueError, match="kernel must be one of"):
        delegation.delegates("softmax", xnp)


def test_ndonnx_cosine_keeps_float64():
    """onnxruntime has no float64 Cos (ndonnx records it in float32, 1e-7 off); the
    identity 1 - 2 sin(x/2)^2 keeps float64 to a few ulp, in the graph it records too."""
    pytest.importorskip("ndonnx")
    import ndonnx
    import onnxruntime

    xs = np.concatenate([np.linspace(-60.0, 60.0, 241), [0.0, 1e-9, math.pi / 2, 512.0]])
    want = np.array([math.cos(v) for v in xs])                 # plain-Python reference
    eager = delegation.cos(ndonnx.asarray(xs), xp=ndonnx)
    np.testing.assert_allclose(eager.unwrap_numpy(), want, rtol=0, atol=4e-15)
    arg = ndonnx.argument(shape=(None,), dtype=ndonnx.float64)
    model = ndonnx.build({"x": arg}, {"y": delegation.cos(arg, xp=ndonnx)})
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": xs})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-15)
    with pytest.warns(UserWarning, match="lossy cast"):          # what the identity avoids
        naive = ndonnx.build({"x": arg}, {"y": ndonnx.cos(arg)})
    (lossy,) = onnxruntime.InferenceSession(naive.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": xs})
    assert np.abs(lossy - want).max() > 1e-9


def test_ndonnx_sigmoid_is_the_generic_body_to_rounding():
    """On ndonnx (eager, and in a graph run by onnxruntime) the sigmoid is (1 + tanh(x/2))
    / 2: the generic body's values to a few ulp of 1, absolute, in float64 and float32."""
    pytest.importorskip("ndonnx")
    import ndonnx
    import onnxruntime

    xs = np.concatenate([np.linspace(-40.0, 40.0, 161), [0.0, -0.0, 1e-300, -700.0, 700.0]])
    want = np.array([1.0 / (1.0 + math.exp(-v)) if v >= 0 else
                     math.exp(v) / (1.0 + math.exp(v)) for v in xs])    # plain Python
    assert delegation.delegates("sigmoid", ndonnx)
    eager = delegation.sigmoid(ndonnx.asarray(xs), xp=ndonnx).unwrap_numpy()
    np.testing.assert_allclose(eager, want, rtol=0, atol=5e-16)
    for dtype, atol in ((ndonnx.float64, 5e-16), (ndonnx.float32, 2.4e-7)):
        arg = ndonnx.argument(shape=(None,), dtype=dtype)
        model = ndonnx.build({"x": arg}, {"y": delegation.sigmoid(arg, xp=ndonnx)})
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        x = xs.astype(np.float64 if dtype == ndonnx.float64 else np.float32)
        (got,) = session.run(None, {"x": x})
        assert got.dtype == x.dtype and (got >= 0).all() and (got <= 1).all()
        np.testing.assert_allclose(got, want, rtol=0, atol=atol)
        assert "Where" not in [n.op_type for n in model.graph.node]


@pytest.mark.parametrize("library", ["jax", "torch"])
def test_the_delegated_kernels_equal_their_generic_bodies(library):
    from xpseq import backends

    pytest.importorskip(library)
    be = backends.get(library)
    xp = be.xp
    assert delegation.delegates("sigmoid", xp)
    assert delegation.delegates("relu", xp) == (library == "torch")
    x = be.asarray(np.concatenate([np.linspace(-40.0, 40.0, 161), [0.0, -0.0, 1e-300]]))
    np.testing.assert_allclose(be.to_numpy(delegation.sigmoid(x, xp=xp)),
                               be.to_numpy(delegation.generic_sigmoid(x, xp=xp)),
                               rtol=1e-15, atol=0)
    np.testing.assert_array_equal(be.to_numpy(delegation.relu(x, xp=xp)),
                                  be.to_numpy(delegation.generic_relu(x, xp=xp)))
    dy = be.asarray(np.linspace(-3.0, 5.0, x.shape[0]))
    for y in (delegation.relu(x, xp=xp), x):         # relu's output, and a negative zero
        np.testing.assert_array_equal(be.to_numpy(delegation.relu_backward(dy, y, xp=xp)),
                                      be.to_numpy(delegation.generic_relu_backward(dy, y, xp=xp)))
    rng = np.random.default_rng(0)
    a, W, b = (be.asarray(rng.normal(size=s)) for s in ((2, 3, 5), (4, 5), (4,)))
    for bias in (b, None):
        np.testing.assert_allclose(be.to_numpy(delegation.linear(a, W, bias, xp=xp)),
                                   be.to_numpy(delegation.generic_linear(a, W, bias, xp=xp)),
                                   rtol=1e-14, atol=1e-15)
    # Gradients of both paths are σ(1 - σ) = e / (1 + e)² with e = exp(-|x|), to rounding
    # (the library forms 1 - σ, which cancels for large x: an absolute error of an ulp of 1).
    e = np.exp(-np.abs(be.to_numpy(x)))
    for fn in (delegation.sigmoid, delegation.generic_sigmoid):
        g = be.to_numpy(be.value_and_grad(lambda z, fn=fn: xp.sum(fn(z, xp=xp)))(x)[1])
        np.testing.assert_allclose(g, e / (1.0 + e) ** 2, rtol=1e-13, atol=3e-16)


@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_fused_recurrence_equals_the_generic_loop(cell, monkeypatch):
    """PyTorch's packed LSTM / GRU (one direction either way, and both in one call) gives
    the generic loop's outputs, final states and gradients in float64, for lengths from 1
    to T in any order; a length of 0 falls back to the generic loop."""
    torch = pytest.importorskip("torch")
    import array_api_compat.torch as xp

    from xpseq.core import kernels

    rng = np.random.default_rng(7)
    B, T, I, H, G = 5, 6, 3, 4, 4 if cell == "lstm" else 3
    params = [{n: torch.tensor(rng.normal(size=s), requires_grad=True)
               for n, s in (("W_ih", (G * H, I)), ("W_hh", (G * H, H)), ("b_ih", (G * H,)),
                            ("b_hh", (G * H,)))} for _ in range(2)]
    xs = torch.tensor(rng.normal(size=(B, T, I)), requires_grad=True)
    lengths = torch.tensor([6, 2, 1, 5, 6])
    state0 = tuple(torch.tensor(rng.normal(size=(B, H))) for _ in range(2 if cell == "lstm"
                                                                       else 1))
    leaves = [xs, *params[0].values(), *params[1].values()]

    def generic(directions):
        with monkeypatch.context() as m:
            m.setattr(delegation, "fused_recurrence", lambda *a, **k: None)
            return [kernels.run_sequence(cell, p, xs, lengths, state0, reverse=r, scan=None,
                                         xp=xp) for p, r in directions]

    def flat(results):
        return [a for out, final in results for a in (out, *final)]

    for directions in ([(params[0], False)], [(params[1], True)],
                       [(params[0], False), (params[1], True)]):
        fused = delegation.fused_recurrence(cell, directions, xs, lengths, state0, xp=xp)
        want = generic(directions)
        assert fused is not None and len(fused) == len(directions)
        for got, ref in zip(flat(fused), flat(want)):
            assert got.shape == ref.shape
            np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(),
                                       rtol=0, atol=1e-14)
        weights = [torch.tensor(rng.normal(size=a.shape)) for a in flat(want)]

        def grads(results):
            total = sum((a * w).sum() for a, w in zip(flat(results), weights))
            return torch.autograd.grad(total, leaves, allow_unused=True)

        for got, ref in zip(grads(fused), grads(want)):
            if ref is None:
                assert got is None
            else:
                np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=0, atol=1e-13)
    # A length of 0 cannot be packed, and two directions run forward, then reverse:
    assert delegation.fused_recurrence(cell, [(params[0], False)], xs,
                                       torch.tensor([6, 0, 1, 5, 6]), state0, xp=xp) is None
    assert delegation.fused_recurrence(cell, [(params[0], True), (params[1], False)], xs,
                                       lengths, state0, xp=xp) is None
    # While torch.compile traces, the generic loop is unrolled into the graph instead.
    def probe(x):
        fused = delegation.fused_recurrence(cell, [(params[0], False)], x, lengths, state0,
                                            xp=xp)
        return x + (1.0 if fused is None else 0.0)

    with torch.no_grad():
        traced = torch.compile(probe, backend="eager", fullgraph=True)(xs)
    np.testing.assert_array_equal(traced.numpy(), xs.detach().numpy() + 1.0)
