"""What every backend has: conversion in and out, gradients, jit and scan.

A backend supplies only what the array API standard lacks. The math itself lives in
:mod:`xpseq.core` and runs on ``backend.xp`` arrays unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, cast

import array_api_compat as compat
import numpy as np

from xpseq.core.loops import scan as python_scan
from xpseq.core.tree import map_leaves

DTYPE_NAMES = ("float32", "float64", "int32", "int64", "bool")


class Backend:
    """One array library as xpseq uses it.

    Attributes
    ----------
    name : str
        ``"numpy"``, ``"jax"``, ``"torch"`` or ``"array_api_strict"``.
    xp : module
        The array API namespace of the library.
    gradients : str
        How gradients come: ``"autodiff"`` (JAX transforms the function, PyTorch records a
        tape) or ``"hand-derived"`` (NumPy and array_api_strict run the backward rules of
        :mod:`xpseq.core.vjp` attached to the function with ``defvjp``).
    compiles : bool
        Whether :meth:`jit` compiles whole programs, autodiff and loops included (JAX: a
        function is traced once per input shape).
    compiled : bool
        Whether the backend was made with ``backends.get("torch", compile=True)``: its
        :meth:`jit` is ``torch.compile``, which the training step and the search apply to
        their pieces (the loss with its backward, the optimiser's update, the decoder
        step) rather than to whole programs. ``False`` on every other backend (JAX always
        compiles, ``compiles``). Program caches key on it.
    device : object
        Where :meth:`asarray` places the arrays it makes (parameters, batches): the
        library's device object (``torch.device("cpu")``, a ``jax.Device``; ``"cpu"`` for
        NumPy and array_api_strict). Everything the models and search create from those
        arrays takes their device.
    """

    name: str = ""
    gradients: str = "hand-derived"
    compiles: bool = False
    compiled: bool = False

    def __init__(self, xp: Any, device: Any = "cpu"):
        self.xp = xp
        self._device = device
        self._dtypes = {n: getattr(xp, n) for n in DTYPE_NAMES}

    @property
    def device(self) -> Any:
        return self._device

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
        ``backprop(1)``. The training step's loss has one.
        """
        rule = getattr(fn, "vjp", None)
        if rule is None:
            name = getattr(fn, "__qualname__", type(fn).__name__)
            raise NotImplementedError(
                f"the {self.name} backend has no automatic differentiation: "
                f"value_and_grad(fn) needs fn to carry a hand-derived rule, attached with "
                f"xpseq.core.vjp.defvjp(fn, rule), and {name} has none. The models' losses "
                "have one (xpseq.models.loss_and_grad); for any other function use 'jax' or "
                "'torch', or xpseq.testing.central_difference_grad."
            )
        many = isinstance(argnums, tuple)

        def wrapped(*args: Any) -> tuple[Any, Any]:
            out, backprop = rule(*args)
            value = out[0] if has_aux else out
            grads = backprop(self.xp.ones((), dtype=self.xp.asarray(value).dtype))
            picked = tuple(grads[i] for i in cast(tuple[int, ...], argnums)) if many \
                else grads[argnums]
            return out, picked

        return wrapped

    def jit(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        """Compile ``fn`` where the library can (``jax.jit``); elsewhere ``fn`` itself."""
        return fn

    def scan(self, fn: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Any,
             length: int | None = None, reverse: bool = False) -> tuple[Any, Any]:
        """``lax.scan`` semantics: loop ``carry, y = fn(carry, x)`` over axis 0 of ``xs``.

        ``xs`` is an array or a nested dict/list/tuple of arrays sharing their leading
        size (or ``None`` with ``length``). Returns the final carry and the ``y`` stacked
        along a new leading axis (``None`` if ``fn`` returns ``None`` for ``y``).
        ``reverse`` runs from the last step to the first (``ys`` keep the order of ``xs``).
        """
        return python_scan(fn, carry, xs, length, reverse)

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
