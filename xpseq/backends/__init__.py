"""Backends: what each array library adds to the array API standard.

>>> from xpseq import backends
>>> "numpy" in backends.available()          # and jax, torch, array_api_strict if installed
True
>>> be = backends.get("numpy")               # or "jax", "torch", "array_api_strict"
>>> be.asarray([1.0, 2.0]).dtype             # float64 on every backend, even torch
dtype('float64')

Each backend has ``name``, ``xp`` (the array namespace), ``capabilities``, ``asarray``,
``to_numpy``, ``value_and_grad``, ``compile_program``, ``compile_piece``, ``scan`` and
``custom_vjp``; see :class:`xpseq.backends.Backend`. What each can do is declared once, in
:data:`CAPABILITIES` (:func:`capabilities` reads it without importing the library); the
training step and the search call ``compile_program`` and ``compile_piece`` on what they
build whatever the backend, each the identity where it does not apply.

============  ==========================  ==================  ========  ============
backend       xp                          gradients           compiles  scan
============  ==========================  ==================  ========  ============
numpy         array_api_compat.numpy      hand-derived rules  nothing   Python loop
jax           jax.numpy                   jax.value_and_grad  programs  lax.scan
torch         array_api_compat.torch      autograd tape       nothing   Python loop
torch [1]     array_api_compat.torch      autograd tape       pieces    Python loop
strict        array_api_strict            hand-derived rules  nothing   Python loop
onnx [2]      ndonnx                      none                nothing   ONNX Loop
dask [3]      array_api_compat.dask       none                nothing   Python loop
============  ==========================  ==================  ========  ============

[1] ``backends.get("torch", compile=True)``: the training step and the search compile their
pieces with ``torch.compile`` (see :mod:`xpseq.backends._torch`).

[2] Forward and search only (``capabilities.gradients == "none"``; ``value_and_grad`` is a
TypeError): on arrays with values it computes as NumPy does; on ``ndonnx.argument`` arrays
it records the ONNX graph that :mod:`xpseq.export` writes, its ``scan`` over a symbolic
number of steps an ONNX ``Loop``.

[3] Forward and search only: dask.array's arrays build a task graph that
:meth:`Backend.to_numpy` computes (see :mod:`xpseq.backends._dask`).

``custom_vjp(fn, fwd, bwd)`` gives ``fn`` a hand-written gradient in ``jax.custom_vjp``'s
convention: a ``jax.custom_vjp`` on JAX, a ``torch.autograd.Function`` on PyTorch, and on
numpy and array_api_strict the rule their ``value_and_grad`` runs. Backends know no model
and no cell: the hand-derived recurrence that uses it lives in
:func:`xpseq.core.recurrent.hand_derived_recurrence`.

:mod:`xpseq.backends.programs` is the one cache of built (on JAX, compiled) programs that
training and search share.

Libraries are imported only when their backend is first asked for, and their global
settings are left as they are: float64 on JAX needs JAX's 64-bit mode, which the caller
turns on (``jax.config.update("jax_enable_x64", True)``); without it, asking for float64 is
an error that says so.

:func:`default` is the one rule for "no backend given", everywhere (the library,
:class:`~xpseq.Translator`, :class:`~xpseq.g2p.G2P` and every command), with one order per
purpose: the ``XPSEQ_BACKEND`` environment variable if it is set, otherwise the first
installed of :data:`PREFERENCE` for the purpose, ``"train"`` or ``"decode"`` (each the
fastest first on this project's benchmarks).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from typing import Any, Iterator

from xpseq.core import checks, values
from xpseq.io.install import install_hint

from ._base import CAPABILITIES, COMPILED_BATCH_SIZES, Backend, Capabilities, SearchPlan

Backend.__module__ = __name__    # its public home, where the API reference documents it
Capabilities.__module__ = __name__
SearchPlan.__module__ = __name__

__all__ = ["Backend", "Capabilities", "CAPABILITIES", "SearchPlan", "COMPILED_BATCH_SIZES",
           "NAMES", "PREFERENCE", "PURPOSES",
           "COMPILE_APPLIES", "available", "capabilities", "get", "default_name", "default",
           "resolve",
           "set_threads", "threads_set", "usable_cpus", "blas_threads",
           "BLAS_THREAD_VARIABLES"]

#: The backends that train (they have gradients): what :func:`available` and the
#: command's ``--backend`` list. :func:`get` also makes the forward-only ones of
#: :data:`CAPABILITIES`: ``"onnx"`` (ndonnx, whose arrays made by ``ndonnx.argument``
#: record an ONNX graph, :mod:`xpseq.export`) and ``"dask"`` (dask.array, lazy: a task
#: graph computed when a result is asked for).
NAMES = tuple(n for n, c in CAPABILITIES.items() if c.trains)
# The backends that trace forward passes only (no gradients): get makes them, resolve
# (every front door) refuses them.
_FORWARD_ONLY = tuple(n for n in CAPABILITIES if n not in NAMES)
#: What a default backend is chosen for: ``"train"`` (training, the demo) or ``"decode"``
#: (translating, evaluating, heat maps, G2P: a few searches, where start-up and compile
#: time count as much as a step).
PURPOSES = ("train", "decode")
#: The order :func:`default` picks an installed backend in, per purpose, fastest first, as
#: measured on this project's benchmarks (docs/benchmarks.md): training, JAX's compiled
#: step ahead of PyTorch and NumPy; decoding, ``xpseq g2p`` with start-up included
#: (``python -m scripts.bench_startup``, one thread): NumPy answers one word and 1,000 words
#: soonest on both processors measured (AVX2 only and AVX-512; importing PyTorch alone
#: takes 1.4 to 5 s), PyTorch is ahead from several thousand words on AVX-512, and JAX is
#: last for its compilations.
PREFERENCE = {"train": ("jax", "torch", "numpy"), "decode": ("numpy", "torch", "jax")}

_CLASSES = {
    "numpy": ("._numpy", "NumpyBackend"),
    "jax": ("._jax", "JaxBackend"),
    "torch": ("._torch", "TorchBackend"),
    "array_api_strict": ("._strict", "StrictBackend"),
    "onnx": ("._onnx", "OnnxBackend"),
    "dask": ("._dask", "DaskBackend"),
}
_EXTRAS = {"jax": "jax", "torch": "torch", "array_api_strict": "strict", "onnx": "onnx",
           "dask": "dask"}
_MODULES = {"onnx": "ndonnx"}
_cache: dict[tuple[str, str | None, bool], Backend] = {}
_threads: int | None = None            # what set_threads asked for


def capabilities(name: str) -> Capabilities:
    """What the backend called ``name`` can do (:data:`CAPABILITIES`), without importing
    its library. A torch backend made with ``compile=True`` compiles ``"pieces"``."""
    if not isinstance(name, str) or name not in CAPABILITIES:
        raise ValueError(_unknown(name, forward_only=True))
    return CAPABILITIES[name]


def available() -> list[str]:
    """Names of the backends whose library is installed, in :data:`NAMES` order."""
    return [n for n in NAMES if importlib.util.find_spec(_MODULES.get(n, n)) is not None]


def get(name: str, device: Any = None, *, compile: bool = False) -> Backend:
    """The backend called ``name`` (one of :data:`CAPABILITIES`: :data:`NAMES` and the
    forward-only ``"onnx"`` and ``"dask"``) on ``device``, made once and kept.

    One backend is made per name, device and ``compile``; making it changes none of the
    library's global settings.

    ``device`` is where :meth:`Backend.asarray` places parameters and batches: for torch a
    ``torch.device`` or its name (``"cpu"``, ``"cuda"``, ``"cuda:1"``), for JAX a
    ``jax.Device`` or ``"cpu"``, ``"gpu"``, ``"gpu:1"``; ``None`` is the library's first
    device (the CPU unless JAX found an accelerator). NumPy and array_api_strict have the
    CPU only (``None`` or ``"cpu"``).

    ``compile=True`` (torch only) runs the training step and the decoder step through
    ``torch.compile`` (see :mod:`xpseq.backends._torch`); the backend is still named
    ``"torch"``, and its ``capabilities.compile`` is ``"pieces"``. It is off by default:
    compiling costs more than it saves on the benchmarks' models (the measurement is in
    that module).

    Raises
    ------
    ValueError
        ``name`` is not a known backend, ``device`` is not one of its devices, or
        ``compile=True`` for a backend other than torch.
    TypeError
        ``compile`` is not a bool.
    ModuleNotFoundError
        The library is not installed (the message says which extra installs it).

    Examples
    --------
    >>> from xpseq import backends
    >>> be = backends.get("numpy")
    >>> be
    <xpseq backend 'numpy' on cpu>
    >>> x = be.asarray([1.0, 2.0])          # Python floats become float64
    >>> x.dtype, backends.get("numpy") is be
    (dtype('float64'), True)
    """
    if not isinstance(name, str) or name not in _CLASSES:
        raise ValueError(_unknown(name, forward_only=True))
    compile = values.flag("backends.get", "compile", compile)
    if compile and name != "torch":
        raise ValueError(f"backends.get({name!r}, compile=True): {COMPILE_APPLIES}")
    key = (name, _device_key(name, device), compile)
    if key not in _cache:
        _cache[key] = _make(name, device, compile)
    return _cache[key]


#: Why ``compile=True`` (and the command's ``--compile``) is for torch only.
COMPILE_APPLIES = ("compile applies to the torch backend (torch.compile); JAX always "
                   "compiles with jax.jit, and numpy and array_api_strict cannot compile")


def _device_key(name: str, device: Any) -> str | None:
    """One cache key per device, whatever it is called: ``None`` and ``"cpu"`` name NumPy's
    and torch's one CPU (torch's names are parsed, which starts nothing). JAX's device is
    only resolved when first used (asking JAX for its devices starts its runtime, which must
    wait for ``jax.distributed.initialize`` in a multi-process run), so its names are kept
    as given."""
    if name == "torch" and device is not None:
        import torch

        try:
            device = str(torch.device(device))
        except (RuntimeError, TypeError):
            return repr(device)                       # refused when the backend is made
    if name != "jax" and device == "cpu":
        return None
    return None if device is None else str(device)


def _make(name: str, device: Any, compile: bool = False) -> Backend:
    module = _MODULES.get(name, name)
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(
            f"backend {name!r} needs the {module} package: {install_hint(_EXTRAS[name])}"
        )
    module_name, class_name = _CLASSES[name]
    cls = getattr(importlib.import_module(module_name, __name__), class_name)
    if name == "torch":
        backend = cls(device, compile=compile)
    elif name == "jax":
        backend = cls(device)
    elif device is None or device == "cpu":
        backend = cls()
    else:
        raise ValueError(f"backends.get({name!r}, device={device!r}): the {name} backend has "
                         "the CPU only (device None or 'cpu')")
    if name == "torch" and _threads is not None:
        sys.modules["torch"].set_num_threads(_threads)
    return backend


def default_name(purpose: str = "train") -> str:
    """The backend used when none is named, for ``purpose`` (``"train"`` or
    ``"decode"``): ``XPSEQ_BACKEND`` if set (one of :data:`NAMES`), otherwise the first
    installed of ``PREFERENCE[purpose]``.

    Raises
    ------
    ValueError
        ``XPSEQ_BACKEND`` names no backend, or ``purpose`` is not one of
        :data:`PURPOSES`.

    Examples
    --------
    >>> from xpseq import backends
    >>> backends.default_name("decode") in backends.available()
    True
    """
    if purpose not in PURPOSES:
        raise ValueError(f"default_name: purpose must be one of {list(PURPOSES)}, "
                         f"got {purpose!r}")
    chosen = os.environ.get("XPSEQ_BACKEND", "").strip()
    if chosen:
        if chosen not in NAMES:
            raise ValueError(f"XPSEQ_BACKEND={chosen!r} is not a backend; choose one of "
                             f"{list(NAMES)}")
        return chosen
    installed = available()
    return next(n for n in PREFERENCE[purpose] if n in installed)


def default(purpose: str = "train") -> Backend:
    """The backend :func:`default_name` names for ``purpose``."""
    return get(default_name(purpose))


def resolve(backend: str | Backend | None, purpose: str = "train") -> Backend:
    """``backend`` as a :class:`Backend`: a backend is kept, a name made with :func:`get`,
    ``None`` the :func:`default` for ``purpose``. Every front door (``Translator``,
    ``translate``, ``G2P``) takes its backend argument through it. A name must be a
    backend that trains and decodes (not ``onnx`` or ``dask``, which trace forward passes
    only); a ValueError names the choices."""
    if isinstance(backend, Backend):
        return backend
    if backend is None:
        return default(purpose)
    if not isinstance(backend, str) or backend not in CAPABILITIES:
        raise ValueError(_unknown(backend))
    if backend not in NAMES:                     # ndonnx and dask: forward passes only
        raise ValueError(f"backend {backend!r} traces forward passes only (an export, a "
                         f"lazy graph); to {purpose} choose one of {list(NAMES)}")
    return get(backend)


def _unknown(name: Any, *, forward_only: bool = False) -> str:
    """The error of an unknown backend ``name``: the names of :data:`NAMES`, the one list
    every door (``backends.get``, ``xpseq.load``, ``XPSEQ_BACKEND``, the command's
    ``--backend``) offers; ``forward_only``: and the forward-only ones (``"onnx"``,
    ``"dask"``), which :func:`get` also makes."""
    also = (f" (or the forward-only {', '.join(map(repr, _FORWARD_ONLY))})"
            if forward_only else "")
    return f"unknown backend {name!r}; choose one of {list(NAMES)}{also}"


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity where the system says, else the
    machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def set_threads(threads: int | None = None, *, jax: bool = False) -> int:
    """The threads of every array library's own parallelism, set in one place.

    PyTorch's intra-op threads (``torch.set_num_threads``: now if PyTorch is imported,
    else when the torch backend is first made) and NumPy's BLAS (through
    ``threadpoolctl``); with ``jax=True`` also XLA's CPU thread pool, which only takes
    effect before JAX starts (``XLA_FLAGS``: one thread turns off XLA's multi-threaded
    Eigen). ``None`` takes ``OMP_NUM_THREADS`` when it is set, else 1: the models here are
    small; on a 2-core machine a second thread gained at most 1.4x (PyTorch, idle) and cost
    NumPy and PyTorch 3x when the other core was busy (the benchmarks page, ``Threads``).
    Returns the number set.

    Raises
    ------
    ValueError
        ``threads`` (or ``OMP_NUM_THREADS``) asks for more threads than this process may
        use CPUs (:func:`usable_cpus`): 32,768 threads on PyTorch ended in a segfault.
    """
    where = "threads"
    if threads is None:
        text = os.environ.get("OMP_NUM_THREADS", "").strip()
        threads = int(text) if text.isdigit() and int(text) > 0 else 1
        where = f"OMP_NUM_THREADS={text}" if text.isdigit() and int(text) > 0 else where
    if not checks.is_int(threads) or threads < 1:
        raise ValueError(f"set_threads: threads must be a positive int, got {threads!r}")
    cpus = usable_cpus()
    if threads > cpus:
        raise ValueError(f"set_threads: {where} asks for {threads} threads, but this process "
                         f"may use {cpus} CPU(s); ask for at most {cpus}")
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads, user_api="blas")
    global _threads
    _threads = threads
    if "torch" in sys.modules:          # else when the torch backend is first made
        sys.modules["torch"].set_num_threads(threads)
    if jax and "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_cpu_multi_thread_eigen" not in flags and threads == 1:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()
    return threads


def threads_set() -> int | None:
    """The threads :func:`set_threads` set last, or ``None`` if it was never called (a
    library that sizes its own pool, such as onnxruntime's sessions, takes them)."""
    return _threads


#: The environment variables by which a caller sizes NumPy's BLAS thread pool.
BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                         "BLIS_NUM_THREADS")


@contextlib.contextmanager
def blas_threads(threads: int = 1) -> Iterator[int | None]:
    """NumPy's BLAS threads limited to ``threads`` for the duration of a ``with`` block and
    restored afterwards, unless the caller chose them.

    The caller chose them when one of :data:`BLAS_THREAD_VARIABLES` is set or
    :func:`set_threads` was called; the block then runs with the caller's setting. The
    front door (``Translator.train``, ``translate``, ``evaluate``, ``g2p.pronounce``) runs
    inside it: its matrices are small, and on a busy 2-core machine two OpenBLAS threads
    ran NumPy several times slower than one (the benchmarks page, ``Threads``).

    Yields
    ------
    int or None
        The limit in force inside the block, or ``None`` where the caller's setting was
        left alone.

    Examples
    --------
    >>> from threadpoolctl import threadpool_info
    >>> from xpseq import backends
    >>> with backends.blas_threads(1) as limit:
    ...     inside = {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}
    >>> limit is None or inside == {1}
    True
    """
    if not checks.is_int(threads) or threads < 1:
        raise ValueError(f"blas_threads: threads must be a positive int, got {threads!r}")
    if _threads is not None or any(os.environ.get(v, "").strip()
                                   for v in BLAS_THREAD_VARIABLES):
        yield None
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(threads, user_api="blas"):
        yield threads
