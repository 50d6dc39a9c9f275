"""What every backend has: conversion in and out, gradients, compilation and scan, and the
capabilities it declares.

A backend supplies only what the array API standard lacks. The math itself lives in
:mod:`xpseq.core` and runs on ``backend.xp`` arrays unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NoReturn, Sequence

import array_api_compat as compat
import numpy as np

from xpseq.core.loops import scan as python_scan
from xpseq.core.rules import value_and_grad_by_rule
from xpseq.core.tree import map_leaves

DTYPE_NAMES = ("float32", "float64", "int32", "int64", "bool")

#: How a backend gets gradients: the library differentiates (JAX transforms the function,
#: PyTorch records a tape), the hand-derived rules of :mod:`xpseq.core.vjp` run, or none
#: (a forward-only library: it runs the models and search, never trains).
GRADIENTS = ("autodiff", "hand-derived", "none")
#: What a backend compiles: whole programs (JAX: a training step or a search, autodiff
#: and loops included, traced once per input shape), pieces (torch.compile: the loss, the
#: optimiser's update, the decoder step; the loops around them stay Python), or nothing.
COMPILE = ("program", "pieces", "none")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend can do, declared once (the test fixture reads the same table).

    Whether a library has bfloat16, or arrays without values (a task graph, a recorded
    ONNX graph), is asked of its namespace where it matters
    (:func:`xpseq.core.precision.compute_dtype`, :mod:`xpseq.core.checks`), not declared.

    Attributes
    ----------
    gradients : {"autodiff", "hand-derived", "none"}
        See :data:`GRADIENTS`. ``"none"``: :meth:`Backend.value_and_grad` is a TypeError.
    compile : {"program", "pieces", "none"}
        See :data:`COMPILE`: what :meth:`Backend.compile_program` and
        :meth:`Backend.compile_piece` do (each is the identity where it does not apply),
        and the :class:`SearchPlan` a backend answers with.
    """

    gradients: str = "hand-derived"
    compile: str = "none"

    def __post_init__(self) -> None:
        if self.gradients not in GRADIENTS:
            raise ValueError(f"Capabilities: gradients must be one of {list(GRADIENTS)}, "
                             f"got {self.gradients!r}")
        if self.compile not in COMPILE:
            raise ValueError(f"Capabilities: compile must be one of {list(COMPILE)}, "
                             f"got {self.compile!r}")

    @property
    def trains(self) -> bool:
        """Whether models can be trained on it (it has gradients)."""
        return self.gradients != "none"


#: Every backend's capabilities, by name: known without importing its library. ``"torch"``
#: made with ``compile=True`` compiles ``"pieces"``.
CAPABILITIES = {
    "numpy": Capabilities("hand-derived", "none"),
    "jax": Capabilities("autodiff", "program"),
    "torch": Capabilities("autodiff", "none"),
    "array_api_strict": Capabilities("hand-derived", "none"),
    "onnx": Capabilities("none", "none"),
    "dask": Capabilities("none", "none"),
}

#: The row counts a backend that compiles whole searches pads a batch of sources to (one
#: compilation of the search each, per source length): any number of sentences then needs
#: a handful of programs, not one per batch size.
COMPILED_BATCH_SIZES = (16, 64, 128, 256)


@dataclasses.dataclass(frozen=True)
class SearchPlan:
    """How a search runs on a backend: :meth:`Backend.search_plan`'s answer.

    Attributes
    ----------
    scan : callable or None
        The loop over output positions: ``backend.scan`` compiled into the search's
        program (JAX's ``lax.scan``), or ``None`` for a Python loop that stops as soon as
        every sentence is finished.
    capacity : int or None
        The positions of a decoder's key/value cache: fixed at the longest output where
        what is compiled needs fixed shapes, ``None`` where the cache grows a position per
        step.
    narrowing : bool
        Whether greedy search drops finished sentences from its steps (an eager loop does;
        a compiled one would compile again for every batch size).
    compiled_step : bool
        Whether each model's decoder step is compiled on its own (``torch.compile``), the
        loop around it staying Python.
    batch_sizes : tuple of int or None
        The row counts a batch of sources is padded to (each a compilation of the whole
        search), or ``None`` for any.
    """

    scan: Callable[..., Any] | None = None
    capacity: int | None = None
    narrowing: bool = True
    compiled_step: bool = False
    batch_sizes: tuple[int, ...] | None = None

    @property
    def whole_program(self) -> bool:
        """Whether the whole search is one compiled program (each batch shape compiled on
        its first use)."""
        return self.scan is not None


class Backend:
    """One array library as xpseq uses it.

    Attributes
    ----------
    name : str
        The backend's name in :func:`xpseq.backends.get`: ``"numpy"``, ``"jax"``,
        ``"torch"``, ``"array_api_strict"``, or a forward-only ``"onnx"`` or ``"dask"``.
    xp : module
        The array API namespace of the library.
    capabilities : Capabilities
        What it can do (gradients, what it compiles, lazy arrays, bfloat16), as
        :data:`CAPABILITIES` declares; a torch backend made with ``compile=True``
        compiles ``"pieces"``.
    device : object
        Where :meth:`asarray` places the arrays it makes (parameters, batches): the
        library's device object (``torch.device("cpu")``, a ``jax.Device``; ``"cpu"`` for
        NumPy and array_api_strict). Everything the models and search create from those
        arrays takes their device.
    """

    name: str = ""
    capabilities: Capabilities = CAPABILITIES["numpy"]

    def __init__(self, xp: Any, device: Any = "cpu"):
        self.xp = xp
        self._device = device
        self._dtypes = {n: getattr(xp, n) for n in DTYPE_NAMES}

    @property
    def gradients(self) -> str:
        """``capabilities.gradients``: ``"autodiff"``, ``"hand-derived"`` or ``"none"``."""
        return self.capabilities.gradients

    @property
    def label(self) -> str:
        """The backend's name for a message: its name, ``"torch with torch.compile"`` for a
        torch backend made with ``compile=True``."""
        return self.name

    @property
    def cache_key(self) -> tuple[str, str]:
        """What a built program depends on about its backend, for
        :mod:`xpseq.backends.programs`: the name and what it compiles (eager and compiled
        torch share the name ``"torch"``)."""
        return (self.name, self.capabilities.compile)

    @property
    def device(self) -> Any:
        return self._device

    @property
    def compiles_autodiff(self) -> bool:
        """Whether it compiles whole programs, its own differentiation included (JAX):
        hand-derived rules then run inside that differentiation, as :meth:`custom_vjp`,
        rather than beside it."""
        return self.capabilities.compile == "program"

    def search_plan(self, max_len: int | None = None) -> SearchPlan:
        """How a search of outputs of at most ``max_len`` tokens runs here (see
        :class:`SearchPlan`): a scan compiled into one program per batch shape, batches
        padded to :data:`COMPILED_BATCH_SIZES` (JAX); an eager loop around a compiled
        decoder step with a cache of ``max_len`` positions (``torch.compile``); or an eager
        loop that narrows to the unfinished sentences and grows its cache (the rest)."""
        strategy = self.capabilities.compile
        if strategy == "program":
            return SearchPlan(scan=self.scan, capacity=max_len, narrowing=False,
                              batch_sizes=COMPILED_BATCH_SIZES)
        if strategy == "pieces":
            return SearchPlan(capacity=max_len, narrowing=False, compiled_step=True)
        return SearchPlan()

    def __repr__(self) -> str:
        return f"<xpseq backend {self.name!r} on {self.device}>"

    # ---------------------------------------------------------------- conversion

    def dtype(self, dtype: Any) -> Any:
        """The library's dtype for a name (``"float64"``), a NumPy dtype or its own dtype."""
        if isinstance(dtype, str):
            if dtype not in self._dtypes:
                raise ValueError(f"dtype must be one of {list(DTYPE_NAMES)}, got {dtype!r}")
            return self._dtypes[dtype]
        for found in self._dtypes.values():
            if dtype == found:
                return found
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
        if name not in self._dtypes:
            raise TypeError(f"dtype must be one of {list(DTYPE_NAMES)}, got {dtype!r}")
        return self._dtypes[name]

    def is_array(self, x: Any) -> bool:
        """Whether ``x`` is an array of this backend's library."""
        return compat.is_array_api_obj(x) and compat.array_namespace(x) is self.xp

    def asarray(self, obj: Any, dtype: Any = None) -> Any:
        """Convert ``obj`` (nested sequences, scalars, or an array of any library).

        With ``dtype=None`` the dtype is NumPy's: Python floats become ``float64`` and ints
        ``int64`` on every backend (never the library's ``float32`` default). An explicit
        ``dtype`` converts to it. An array of this library with ``dtype=None`` is returned
        as it is.
        """
        target = None if dtype is None else self.dtype(dtype)
        if self.is_array(obj):
            if not any(self.xp.isdtype(obj.dtype, kind)
                       for kind in ("bool", "integral", "real floating")):
                raise TypeError(
                    f"{self.name}.asarray: expected numbers or booleans, got dtype {obj.dtype}"
                )
            return obj if target is None or obj.dtype == target else self.xp.astype(obj, target)
        host = _to_host(obj)
        if host.dtype.kind not in "biuf":
            raise TypeError(
                f"{self.name}.asarray: expected numbers or booleans, got dtype {host.dtype}"
            )
        if target is None:
            target = self._default_dtype(host.dtype)
        result = self._from_host(host, target)
        if result.dtype != target:  # never silently downcast
            raise TypeError(
                f"{self.name}.asarray: asked for {target} but the library produced {result.dtype}"
            )
        return result

    def _default_dtype(self, host_dtype: np.dtype) -> Any:
        if host_dtype.name in self._dtypes:
            return self._dtypes[host_dtype.name]
        if host_dtype.kind in "iu":
            return self._dtypes["int64"]
        if host_dtype.kind == "f" and host_dtype.itemsize < 4:
            return self._dtypes["float32"]
        raise TypeError(
            f"{self.name}.asarray: no {self.name} dtype holds {host_dtype} exactly; pass dtype="
        )

    def to_numpy(self, x: Any) -> np.ndarray:
        """A NumPy array holding the values of ``x`` (an array of this backend)."""
        if not self.is_array(x):
            from xpseq.core.checks import library_name

            got = library_name(x) if compat.is_array_api_obj(x) else type(x).__name__
            raise TypeError(f"{self.name}.to_numpy: expected a {self.name} array, got {got}")
        return _to_host(x)

    def asarray_tree(self, tree: Any) -> Any:
        """``tree`` (arrays in nested dicts, lists and tuples: parameters, a batch) with
        every array converted by :meth:`asarray` (its dtype kept); other leaves (numbers,
        strings, ``None``) are left as they are."""
        return map_leaves(lambda x: self.asarray(x) if _is_array(x) else x, tree)

    def to_numpy_tree(self, tree: Any) -> Any:
        """``tree`` with every array of this backend converted by :meth:`to_numpy`; other
        leaves are left as they are."""
        return map_leaves(lambda x: self.to_numpy(x) if self.is_array(x) else x, tree)

    def _from_host(self, host: np.ndarray, dtype: Any) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------------ random

    def dropout_keep(self, seed: int, step: Any, shape: tuple[int, ...], rate: float,
                     stream: int = 0) -> Any:
        """A boolean keep-mask, ``True`` with probability ``1 - rate``, for one training step.

        Reproducible from ``(seed, step)`` on each backend: NumPy's ``default_rng([seed,
        step])`` here, ``jax.random`` on JAX (so it can be drawn inside ``jax.jit`` with a
        traced ``step``). The two streams differ; a test that wants one mask on every
        backend draws it once and converts it. ``stream`` tells apart the masks of one
        step (a model with several draws ``stream = 0, 1, ...``; stream 0 is the mask of
        ``(seed, step)`` alone).
        """
        entropy = [int(seed), int(step)] + ([int(stream)] if stream else [])
        rng = np.random.default_rng(entropy)
        return self.asarray(rng.random(shape) >= rate, dtype="bool")

    # -------------------------------------------------------------- transforms

    def value_and_grad(self, fn: Callable[..., Any], argnums: int | tuple[int, ...] = 0,
                       has_aux: bool = False) -> Callable[..., Any]:
        """``fn``'s value and its gradient with respect to the arguments ``argnums``.

        The convention is ``jax.value_and_grad``'s: ``fn`` returns a scalar (or
        ``(scalar, aux)`` with ``has_aux``); the wrapped function returns
        ``(value, grads)`` (or ``((value, aux), grads)``), ``grads`` having the structure of
        the differentiated argument (an array or a nested dict/list/tuple of arrays), or a
        tuple of such when ``argnums`` is a tuple.

        Here (NumPy, array_api_strict), without automatic differentiation, ``fn`` must
        carry a hand-derived rule attached with :func:`xpseq.core.vjp.defvjp`:
        ``fn.vjp(*args)`` returns ``(fn(*args), backprop)``, and the gradient is
        ``backprop(1)`` (:func:`xpseq.core.rules.value_and_grad_by_rule`). The training
        step's loss has one.

        Raises
        ------
        TypeError
            The backend has no gradients (``capabilities.gradients == "none"``: a
            forward-only library such as dask or ndonnx).
        NotImplementedError
            ``fn`` carries no hand-derived rule (NumPy, array_api_strict).
        """
        if not self.capabilities.trains:
            raise TypeError(f"the {self.name} backend runs models forward only (forward and "
                            "search, no gradients): value_and_grad needs one of the "
                            "backends that train, 'numpy', 'jax', 'torch' or "
                            "'array_api_strict'")
        return value_and_grad_by_rule(fn, argnums, has_aux, who=f"the {self.name} backend")

    def compile_program(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        """``fn`` compiled as a whole program, autodiff and loops included, where the
        backend compiles programs (``capabilities.compile == "program"``: ``jax.jit``,
        ``kwargs`` passed on); elsewhere ``fn`` itself. The training step and the search
        call it on what they build, whatever the backend."""
        return fn

    def compile_piece(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        """``fn`` compiled as one piece of a program that stays Python around it, where the
        backend compiles pieces (``capabilities.compile == "pieces"``: ``torch.compile``,
        ``dynamic=`` among ``kwargs``); elsewhere ``fn`` itself. The training step calls it
        on the loss and the update, the search on the decoder step."""
        return fn

    def jit(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        """``fn`` compiled however the backend compiles (:meth:`compile_program` or
        :meth:`compile_piece`); ``fn`` itself where it compiles nothing."""
        if self.capabilities.compile == "program":
            return self.compile_program(fn, **kwargs)
        return self.compile_piece(fn, **kwargs)

    def graphs(self, traces: int, pieces: Sequence[Any] = ()) -> int | None:
        """How many graphs were compiled for a program whose Python body ran ``traces``
        times around the compiled ``pieces``: ``None`` where nothing compiles (JAX: its
        traces; compiled torch: the graphs of its pieces)."""
        return None

    def scan(self, fn: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Any,
             length: int | None = None, reverse: bool = False,
             span: tuple[Any, Any] | None = None) -> tuple[Any, Any]:
        """``lax.scan`` semantics: loop ``carry, y = fn(carry, x)`` over axis 0 of ``xs``.

        ``xs`` is an array or a nested dict/list/tuple of arrays sharing their leading
        size (or ``None`` with ``length``). Returns the final carry and the ``y`` stacked
        along a new leading axis (``None`` if ``fn`` returns ``None`` for ``y``).
        ``reverse`` runs from the last step to the first (``ys`` keep the order of ``xs``).
        ``span=(start, stop)`` (run-time integers) promises that the steps outside it
        change nothing that is used, so that they may be skipped (their ``y`` then zero);
        see :func:`xpseq.core.loops.scan`.
        """
        return python_scan(fn, carry, xs, length, reverse, span)

    def custom_vjp(self, fn: Callable[..., Any], fwd: Callable[..., tuple[Any, Any]],
                   bwd: Callable[[Any, Any], tuple]) -> Callable[..., Any]:
        """``fn`` with a hand-written gradient, in ``jax.custom_vjp``'s convention.

        ``fwd(*args) -> (fn(*args), residuals)``; ``bwd(residuals, cotangent)`` returns one
        cotangent per positional argument of ``fn`` (with the structure of that argument,
        or ``None`` for one that has none, such as a mask). Here (no automatic
        differentiation) the result is ``fn`` carrying the rule that
        :meth:`value_and_grad` runs, ``rule(*args) -> (value, backprop)``; JAX makes it a
        ``jax.custom_vjp`` and PyTorch an ``autograd.Function``.
        """
        def wrapped(*args: Any) -> Any:
            return fn(*args)

        def rule(*args: Any) -> tuple[Any, Callable]:
            out, residuals = fwd(*args)
            return out, lambda cotangent: bwd(residuals, cotangent)

        setattr(wrapped, "vjp", rule)
        return wrapped

    # ------------------------------------------------ training over several devices
    # One process on one device here; JAX (a device mesh, several processes) and PyTorch
    # (a torch.distributed group) override what they can do.

    def process_group(self) -> tuple[int, int] | None:
        """``(this process's index, the process count)`` when it trains as one of several
        processes, ``None`` for one process (here, always)."""
        return None

    def join_processes(self, coordinator: str, processes: int, process_id: int) -> None:
        """Make this process one of ``processes`` (JAX only: ``jax.distributed``)."""
        raise TypeError(f"the {self.name} backend trains in one process; training across "
                        "processes started by xpseq needs the jax backend")

    def broadcast(self, obj: Any) -> Any:
        """Process 0's ``obj`` on every process (one process: ``obj`` itself)."""
        return obj

    def all_reduce_sum(self, tree_: Any) -> Any:
        """``tree_`` summed over the processes of the group (one process: itself)."""
        return tree_

    def mesh(self, devices: int) -> Any:
        """A one-axis device mesh of ``devices`` devices (JAX only)."""
        self._no_mesh()

    def put(self, tree: Any, mesh: Any, *, split: bool) -> Any:
        """``tree`` placed on ``mesh`` (JAX only; see :meth:`mesh`)."""
        self._no_mesh()

    def data_parallel(self, grad_fn: Callable[..., tuple[Any, Any]], mesh: Any,
                      pad_id: int) -> Callable[..., tuple[Any, Any]]:
        """``grad_fn`` run by each device of ``mesh`` on its rows (JAX only; see
        :meth:`mesh`)."""
        self._no_mesh()

    def _no_mesh(self) -> NoReturn:
        raise TypeError(f"the {self.name} backend has no device mesh; data parallelism over "
                        "devices in one process needs the jax backend")


def _is_array(x: Any) -> bool:
    return isinstance(x, np.generic) or (compat.is_array_api_obj(x)
                                         and not isinstance(x, (bool, int, float, complex)))


def _to_host(obj: Any) -> np.ndarray:
    """NumPy view or copy of any array (or nested sequence of numbers)."""
    if compat.is_numpy_array(obj):
        return np.asarray(obj)
    if compat.is_torch_array(obj):
        return obj.detach().cpu().numpy()
    if compat.is_array_api_obj(obj) and not compat.is_jax_array(obj):
        return np.from_dlpack(obj)
    return np.asarray(obj)
