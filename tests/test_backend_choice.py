"""Tests of what a backend declares and how one is chosen: the capability table, the
compile methods, forward-only backends, the default rule per purpose, threads and devices
(:mod:`xpseq.backends`; conversion, scan and gradients are in test_backends.py)."""

from __future__ import annotations

import os
import pathlib
import sys

import numpy as np
import pytest

from xpseq import backends
from xpseq.backends import NAMES

ROOT = pathlib.Path(__file__).resolve().parents[1]


def other_backend(name: str) -> backends.Backend:
    """A backend for ``name``, or skip if its library is missing."""
    try:
        return backends.get(name)
    except ModuleNotFoundError:
        pytest.skip(f"{name} is not installed")


def test_gradient_flags(backend):
    expected = "autodiff" if backend.name in ("jax", "torch") else "hand-derived"
    assert backend.gradients == expected == backend.capabilities.gradients
    assert backend.capabilities is backends.capabilities(backend.name)


def test_the_capability_table():
    """One table says what each backend can do, known without importing its library; the
    backends that train are those with gradients, the rest are forward-only."""
    caps = backends.CAPABILITIES
    assert list(caps) == ["numpy", "jax", "torch", "array_api_strict", "onnx", "dask"]
    assert backends.NAMES == ("numpy", "jax", "torch", "array_api_strict")
    assert {n for n, c in caps.items() if c.gradients == "none"} == {"onnx", "dask"}
    assert {n for n, c in caps.items() if c.compile == "program"} == {"jax"}
    with pytest.raises(ValueError, match="unknown backend 'cupy'"):
        backends.capabilities("cupy")
    with pytest.raises(ValueError, match="compile must be one of"):
        backends.Capabilities("autodiff", "always")


def test_each_backend_answers_how_a_search_runs(backend):
    """The backend decides the search's loop, cache and batch sizes; nobody else reads
    what it compiles."""
    plan = backend.search_plan(max_len=12)
    if backend.name == "jax":
        assert plan.scan is not None and plan.whole_program and plan.capacity == 12
        assert not plan.narrowing and plan.batch_sizes == backends.COMPILED_BATCH_SIZES
    else:
        assert plan == backends.SearchPlan() and plan.capacity is None and plan.narrowing
        assert not plan.whole_program and plan.batch_sizes is None
    assert backend.compiles_autodiff is (backend.name == "jax")


def test_a_compiled_torch_backend_compiles_the_decoder_step():
    compiled = other_backend("torch") and backends.get("torch", compile=True)
    plan = compiled.search_plan(max_len=7)
    assert plan.compiled_step and plan.capacity == 7 and not plan.narrowing
    assert plan.scan is None and plan.batch_sizes is None and not compiled.compiles_autodiff


def test_compile_methods_are_the_identity_where_they_do_not_apply(backend):
    """The training step and the search call compile_program and compile_piece whatever
    the backend: each is the identity where the backend does not compile that way (JAX
    compiles programs, a torch backend made with compile=True pieces)."""
    def f(x):
        return x * 2.0

    program, piece = backend.compile_program(f), backend.compile_piece(f)
    assert (program is f) == (backend.capabilities.compile != "program")
    assert piece is f                   # only compiled torch compiles pieces
    x = backend.asarray([1.0, 2.0])
    np.testing.assert_array_equal(backend.to_numpy(program(x)), [2.0, 4.0])
    assert backend.cache_key == (backend.name, backend.capabilities.compile)
    assert backend.graphs(3) == (3 if backend.capabilities.compile == "program" else None)


@pytest.mark.parametrize("name", ["dask", "onnx"])
def test_a_forward_only_backend_refuses_value_and_grad_by_type(name):
    """dask and ndonnx run the models forward and search, never train: asking one for
    gradients is a TypeError that names the backends that train, before anything runs."""
    pytest.importorskip({"onnx": "ndonnx", "dask": "dask.array"}[name])
    be = backends.get(name)
    assert not be.capabilities.trains
    with pytest.raises(TypeError, match=f"the {name} backend runs models forward only .*"
                                        "'numpy', 'jax', 'torch' or 'array_api_strict'"):
        be.value_and_grad(lambda a: a)


def test_the_default_backend_rule(monkeypatch):
    """``XPSEQ_BACKEND`` if set, else the first installed of the purpose's order (training:
    jax, torch, numpy; decoding: numpy, torch, jax); a wrong name is an error naming the
    variable (and, on the command line, one line)."""
    import subprocess
    import sys

    monkeypatch.delenv("XPSEQ_BACKEND", raising=False)
    installed = backends.available()
    assert backends.default_name() == backends.default_name("train") == next(
        n for n in ("jax", "torch", "numpy") if n in installed)
    assert backends.default_name("decode") == next(n for n in ("numpy", "torch", "jax")
                                                   if n in installed)
    with pytest.raises(ValueError, match="purpose must be one of \\['train', 'decode'\\]"):
        backends.default_name("fast")
    monkeypatch.setenv("XPSEQ_BACKEND", "torch")
    assert backends.default_name() == backends.default_name("decode") == "torch"
    monkeypatch.setenv("XPSEQ_BACKEND", "tensorflow")
    with pytest.raises(ValueError, match="XPSEQ_BACKEND='tensorflow' is not a backend"):
        backends.default()
    fixture = pathlib.Path(__file__).parent / "fixtures" / "rnn_format1.safetensors"
    done = subprocess.run([sys.executable, "-m", "xpseq", "translate", str(fixture), "a"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == ("xpseq: error: XPSEQ_BACKEND='tensorflow' is not a "
                                   "backend; choose one of ['numpy', 'jax', 'torch', "
                                   "'array_api_strict']")


#: Run in a child process: the default orders replaced by two that tell the purposes apart
#: (training on NumPy, decoding on array_api_strict), every backend made recorded, then
#: the library's front doors and the commands asked for no backend.
_DEFAULT_PROBE = """
import json, sys
from xpseq import backends
backends.PREFERENCE.update(train=("numpy",), decode=("array_api_strict",))
made = []
get = backends.get
def spy(name, *args, **kwargs):
    made.append(name)
    return get(name, *args, **kwargs)
backends.get = spy
import xpseq
from xpseq import g2p
from xpseq.app.cli import main
checkpoint = sys.argv[1]
seen = {}
seen["load"] = xpseq.load(checkpoint).backend.name
seen["G2P"] = g2p.G2P().decoder.name
seen["g2p.pronounce"] = g2p.load().decoder.name
task = xpseq.toy_task(n_train=40, n_dev=8, n_test_per_bucket=2)
seen["Translator.train"] = xpseq.Translator.train(task, epochs=1, progress=False, embed=4,
                                                  hidden=4).backend.name
for argv in (["translate", checkpoint, "the cat"], ["g2p", "hello"],
             ["heatmap", checkpoint, "the cat", "--png", sys.argv[2]]):
    del made[:]
    assert main(argv) == 0, argv
    seen["xpseq " + argv[0]] = sorted(set(made))
print(json.dumps(seen))
"""


def test_one_default_rule_for_the_library_g2p_and_every_command(tmp_path):
    """With no backend named, the library (``xpseq.load``, ``Translator.train``), ``G2P``
    and each command take their backend from :func:`backends.default_name` for their
    purpose, one rule for all: here decoding is made to pick array_api_strict and
    training NumPy, so a front door with its own rule would show."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "XPSEQ_BACKEND"}
    checkpoint = ROOT / "tests" / "fixtures" / "rnn_format1.safetensors"
    done = subprocess.run([sys.executable, "-c", _DEFAULT_PROBE, str(checkpoint),
                           str(tmp_path / "map.png")], capture_output=True, text=True,
                          timeout=240, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    decode = "array_api_strict"
    assert seen == {"load": decode, "G2P": decode, "g2p.pronounce": decode,
                    "Translator.train": "numpy", "xpseq translate": [decode],
                    "xpseq g2p": [decode], "xpseq heatmap": [decode]}


def test_set_threads_sets_torch_and_blas_in_one_place(monkeypatch):
    """``set_threads(n)``: PyTorch's intra-op threads and NumPy's BLAS (threadpoolctl);
    without a number, ``OMP_NUM_THREADS`` or 1. Restored afterwards."""
    torch = pytest.importorskip("torch")
    from threadpoolctl import threadpool_info

    def blas() -> set:
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    backends.get("torch")
    before_torch, before_blas = torch.get_num_threads(), blas()
    try:
        cpus = backends.usable_cpus()
        assert backends.set_threads(cpus) == cpus
        assert torch.get_num_threads() == cpus and blas() <= {cpus}
        monkeypatch.setenv("OMP_NUM_THREADS", str(cpus))
        assert backends.set_threads() == cpus and torch.get_num_threads() == cpus
        # More threads than CPUs is refused (32,768 on PyTorch ended in a segfault).
        with pytest.raises(ValueError, match=f"asks for {cpus + 1} threads, but this process "
                                             f"may use {cpus} CPU"):
            backends.set_threads(cpus + 1)
        monkeypatch.setenv("OMP_NUM_THREADS", "32768")
        with pytest.raises(ValueError, match="set_threads: OMP_NUM_THREADS=32768 asks for"):
            backends.set_threads()
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert backends.set_threads() == 1 and torch.get_num_threads() == 1
        assert blas() <= {1}
        with pytest.raises(ValueError, match="threads must be a positive int"):
            backends.set_threads(0)
    finally:
        backends.set_threads(max(before_blas or {1}))
        torch.set_num_threads(before_torch)


def test_set_threads_turns_xla_eigen_off_for_one_thread_before_jax_starts(monkeypatch):
    """With ``jax=True`` and JAX not yet started, one thread adds exactly
    ``--xla_cpu_multi_thread_eigen=false`` to ``XLA_FLAGS`` (after what is there); a flag
    already given, more threads, or a JAX already started leave ``XLA_FLAGS`` alone."""
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    backends.set_threads(1, jax=True)
    assert os.environ["XLA_FLAGS"].split() == ["--xla_force_host_platform_device_count=2",
                                               "--xla_cpu_multi_thread_eigen=false"]
    more = [("", 2)] if backends.usable_cpus() >= 2 else []     # (one CPU: 2 is refused)
    for flags, threads in (("--xla_cpu_multi_thread_eigen=true", 1), *more):
        monkeypatch.setenv("XLA_FLAGS", flags)
        backends.set_threads(threads, jax=True)
        assert os.environ["XLA_FLAGS"] == flags
    monkeypatch.setitem(sys.modules, "jax", object())
    monkeypatch.setenv("XLA_FLAGS", "")
    backends.set_threads(1, jax=True)
    assert os.environ["XLA_FLAGS"] == ""


# ------------------------------------------------------------------------- devices


def test_asarray_places_arrays_on_the_backends_device(backend):
    import array_api_compat as compat

    x = backend.asarray([[1.0, 2.0]])
    assert compat.device(x) == backend.device
    assert repr(backend).endswith(f"on {backend.device}>")


@pytest.mark.parametrize("name", ["numpy", "array_api_strict"])
def test_cpu_only_backends_refuse_another_device(name):
    if name not in backends.available():
        pytest.skip(f"{name} is not installed")
    assert backends.get(name, device="cpu") is backends.get(name)
    with pytest.raises(ValueError, match="CPU only"):
        backends.get(name, device="cuda")


def test_torch_device_choice():
    torch = pytest.importorskip("torch")
    be = backends.get("torch", device="cpu")
    assert be is backends.get("torch")                    # None and "cpu": one backend
    assert be.device == torch.device("cpu")
    assert be.asarray([1.0]).device == torch.device("cpu")
    with pytest.raises(ValueError, match="not a torch device"):
        backends.get("torch", device="no-such-device")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            backends.get("torch", device="cuda")


def test_jax_device_choice():
    jax = pytest.importorskip("jax")
    first = jax.devices("cpu")[0]
    assert backends.get("jax", device="cpu").device == first
    assert backends.get("jax", device=first).device == first
    assert backends.get("jax", device="cpu:0").asarray([1.0]).devices() == {first}
    # A named device is found when first used (asking JAX starts its runtime).
    with pytest.raises(ValueError, match="numbered from 0"):
        backends.get("jax", device=f"cpu:{len(jax.devices('cpu'))}").asarray([1.0])
    with pytest.raises(ValueError, match="no 'nosuchplatform' devices"):
        backends.get("jax", device="nosuchplatform").device
    with pytest.raises(TypeError, match="jax.Device or a string"):
        backends.get("jax", device=3)


def test_dask_is_a_forward_only_backend():
    """dask.array (``backends.get("dask")``): lazy arrays of NumPy's dtypes, computed by
    ``to_numpy``; listed with the forward-only backends, never among the training ones."""
    pytest.importorskip("dask.array")
    be = backends.get("dask")
    assert backends.capabilities("dask").gradients == "none" and "dask" not in NAMES
    assert "dask" not in backends.available()
    x = be.asarray([[0.1, 0.2], [0.3, 0.4]])
    assert type(x).__module__.startswith("dask.") and be.is_array(x)
    assert x.dtype == np.float64 and be.asarray([1, 2]).dtype == np.int64
    np.testing.assert_array_equal(be.to_numpy(x @ x), np.array([[0.1, 0.2], [0.3, 0.4]]) @
                                  np.array([[0.1, 0.2], [0.3, 0.4]]))
    with pytest.raises(TypeError, match="dask.to_numpy: expected a dask array, got numpy"):
        be.to_numpy(np.zeros(2))
    with pytest.raises(ValueError, match="CPU only"):
        backends.get("dask", device="cuda")
    with pytest.raises(TypeError, match="forward only"):
        be.value_and_grad(lambda a: (a * a).sum())(x)
