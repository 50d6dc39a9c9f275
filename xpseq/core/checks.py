"""Argument validation shared by the public functions of :mod:`xpseq.core`.

Every public core function validates at its boundary and then calls a private kernel
that does only the math. Two kinds of check happen here:

* **Structural** checks (array library, dtype, rank, shape) always run: shapes and dtypes
  are static, so they are known even while JAX traces a function under ``jax.jit``.
* **Value** checks (a negative length, a non-finite score, a query with no valid key) need
  the numbers. They run whenever the values are concrete (NumPy, PyTorch,
  array_api_strict, and JAX outside ``jit``). Under ``jax.jit`` the values are abstract
  tracers; :func:`concrete` then returns ``None`` and the check is skipped. So it is on a
  lazy library's arrays that hold no values (``ndonnx.argument``, which records an ONNX
  graph), whose shapes may also have unknown dimensions (``None``): the shape checks let
  those pass. Each public function documents what it computes when a check is skipped,
  and it is never NaN.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Any

import array_api_compat as compat

EMPTY_POLICIES = ("error", "zero")


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or NumPy) and not a ``bool`` (which Python
    counts as an int: ``True`` must not pass for ``1``)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """Whether ``value`` is a real number (an int or a float, Python or NumPy) and not a
    ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def library(xp: Any) -> str | None:
    """The short name of the library of the array namespace ``xp``: ``"numpy"``,
    ``"torch"``, ``"jax"``, ``"ndonnx"`` or ``"array_api_strict"``; ``None`` for any other.
    The one place that names a library: :func:`library_name` (an array's) and
    :mod:`xpseq.core.delegation` (which kernel a namespace delegates) both ask it."""
    for name, test in (("numpy", compat.is_numpy_namespace), ("torch", compat.is_torch_namespace),
                       ("jax", compat.is_jax_namespace), ("ndonnx", compat.is_ndonnx_namespace),
                       ("array_api_strict", compat.is_array_api_strict_namespace)):
        if test(xp):
            return name
    return None


def library_name(x: Any) -> str:
    """Short name of the library an array belongs to (``"numpy"``, ``"torch"``, ...):
    :func:`library` of its namespace, else the top module of its type."""
    try:
        name = library(compat.array_namespace(x))
    except TypeError:
        name = None
    return name or type(x).__module__.split(".")[0]


def namespace(fname: str, **arrays: Any) -> Any:
    """The one array namespace of the named arrays; ``None`` values are skipped.

    Raises
    ------
    TypeError
        If an argument is not an array, or if arrays of two libraries are mixed (the
        message names both arguments and both libraries).
    """
    first: dict[str, str] = {}
    present = []
    for name, value in arrays.items():
        if value is None:
            continue
        if not compat.is_array_api_obj(value) or isinstance(value, numbers.Number):
            raise TypeError(
                f"{fname}: {name} must be an array (numpy, jax, torch or array_api_strict), "
                f"got {type(value).__name__}"
            )
        lib = library_name(value)
        first.setdefault(lib, name)
        present.append(value)
    if len(first) > 1:
        (lib1, name1), (lib2, name2) = list(first.items())[:2]
        raise TypeError(
            f"{fname}: {name1} is a {lib1} array but {name2} is a {lib2} array; pass arrays "
            "of one library (convert with xpseq.backends.get(name).asarray)"
        )
    if not present:
        raise TypeError(f"{fname}: expected at least one array argument")
    return compat.array_namespace(*present)


def concrete(flag: Any) -> bool | None:
    """``bool(flag)`` for a 0-d boolean array, or ``None`` when its value is not available.

    Under ``jax.jit`` an array is an abstract tracer and ``bool()`` raises a subclass of
    ``TypeError`` (``jax.errors.ConcretizationTypeError``); value checks are then skipped.
    So they are while ``torch.compile`` traces a torch tensor: reading its value there
    would break the graph in two (torch is reached through the loaded tensor's module,
    never imported here). A lazy library's array that holds no value yet (an
    ``ndonnx.argument`` and what is computed from it) raises ``ValueError``: skipped too.
    """
    if compat.is_torch_array(flag) and sys.modules["torch"].compiler.is_compiling():
        return None
    if getattr(flag, "ndim", 0) != 0:
        raise ValueError(f"concrete: expected a 0-d flag, got shape {tuple(flag.shape)}")
    try:
        return bool(flag)
    except (TypeError, ValueError):
        return None


def check_floating(fname: str, name: str, x: Any, xp: Any) -> None:
    """Require a real floating dtype (``float32``, ``float64``, ...)."""
    if not xp.isdtype(x.dtype, "real floating"):
        raise TypeError(f"{fname}: {name} must have a real floating dtype, got {x.dtype}")


def check_same_dtype(fname: str, **arrays: Any) -> None:
    """Require that all named floating arrays share one dtype (no silent promotion)."""
    items = [(n, a) for n, a in arrays.items() if a is not None]
    name0, a0 = items[0]
    for name, a in items[1:]:
        if a.dtype != a0.dtype:
            raise TypeError(
                f"{fname}: {name0} is {a0.dtype} but {name} is {a.dtype}; cast explicitly "
                "so that nothing is silently promoted or downcast"
            )


def check_ndim(fname: str, name: str, x: Any, ndim: int, *, exact: bool = False,
               layout: str = "") -> None:
    """Require ``x.ndim >= ndim`` (or ``== ndim`` when ``exact``)."""
    bad = x.ndim != ndim if exact else x.ndim < ndim
    if bad:
        what = f"exactly {ndim}" if exact else f"at least {ndim}"
        shape_hint = f" {layout}" if layout else ""
        raise ValueError(
            f"{fname}: {name} must have {what} dimensions{shape_hint}, got shape {tuple(x.shape)}"
        )


def sizes_agree(a: int | None, b: int | None) -> bool:
    """Whether two sizes can be the same: equal, or either unknown (``None``)."""
    return a is None or b is None or a == b


def check_dim(fname: str, name: str, x: Any, axis: int, size: int | None, what: str) -> None:
    """Require ``x.shape[axis] == size``; ``what`` says where ``size`` comes from. An
    unknown dimension (``None``, a lazy array's symbolic size) on either side passes."""
    if x.shape[axis] is None or size is None:
        return
    if x.shape[axis] != size:
        raise ValueError(
            f"{fname}: {name} has {x.shape[axis]} along axis {axis} (shape {tuple(x.shape)}) "
            f"but {what} is {size}"
        )


def broadcast_leading(fname: str, xp: Any,
                      **shapes: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """Broadcast the named (leading) shapes with the namespace's ``broadcast_shapes`` (the
    standard's, 2025.12; :func:`broadcast_shapes` where a library lacks it), or raise
    ``ValueError`` naming the arrays."""
    broadcast = getattr(xp, "broadcast_shapes", broadcast_shapes)
    try:
        return tuple(broadcast(*(tuple(s) for s in shapes.values())))
    except (ValueError, RuntimeError):          # torch raises RuntimeError
        names = ", ".join(f"{k} {tuple(v)}" for k, v in shapes.items())
        raise ValueError(
            f"{fname}: the leading (batch) dimensions do not broadcast: {names}") from None


def broadcast_shapes(*shapes: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """The standard's ``broadcast_shapes`` for a library that lacks it (ndonnx): the
    broadcast of ``shapes``, an unknown dimension (``None``) broadcasting to ``None``
    unless the other side is known and not 1. ``ValueError`` if two known sizes differ
    and neither is 1."""
    ndim = max([0, *(len(s) for s in shapes)])
    out: list[int | None] = []
    for axis in range(-ndim, 0):
        sizes = [s[axis] for s in shapes if len(s) >= -axis]
        known = {n for n in sizes if n is not None and n != 1}
        if len(known) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast (axis {axis})")
        if known:
            out.append(known.pop())
        else:
            out.append(None if None in sizes else 1)
    return tuple(out)


def check_all_finite(fname: str, xp: Any, **arrays: Any) -> None:
    """:func:`check_finite` for each named array (``None`` skipped)."""
    for name, x in arrays.items():
        if x is not None:
            check_finite(fname, name, x, xp)


def check_not_nan(fname: str, name: str, x: Any, xp: Any) -> None:
    """Reject NaN in ``x`` when values are concrete (infinities are allowed)."""
    if concrete(xp.any(xp.isnan(x))) is True:
        raise ValueError(f"{fname}: {name} must not contain NaN")


def check_no_nan_or_pos_inf(fname: str, name: str, x: Any, xp: Any) -> None:
    """Reject NaN and ``+inf`` in ``x`` when values are concrete (``-inf``, the log of a
    zero probability, is allowed)."""
    ok = concrete(xp.all(~xp.isnan(x) & (x != math.inf)))
    if ok is False:
        raise ValueError(f"{fname}: {name} must not contain NaN or +inf (-inf, log 0, is "
                         "allowed)")


def check_finite(fname: str, name: str, x: Any, xp: Any, where: Any = None) -> None:
    """Reject NaN or infinity in ``x`` (only at ``where`` if given) when values are concrete."""
    if x.ndim == 0 and where is None:
        ok = concrete(xp.isfinite(x))
    else:
        finite = xp.isfinite(x)
        if where is not None:
            finite = finite | ~where
        ok = concrete(xp.all(finite))
    if ok is False:
        place = " at an unmasked key" if where is not None else ""
        raise ValueError(f"{fname}: {name} must be finite{place}; it contains NaN or infinity")


def check_scale(fname: str, scale: Any) -> float | None:
    """``scale`` must be ``None`` or a finite real Python number."""
    if scale is None:
        return None
    if not is_real(scale):
        raise TypeError(f"{fname}: scale must be a real number or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"{fname}: scale must be finite, got {scale}")
    return float(scale)


def check_empty(fname: str, empty: Any) -> str:
    """``empty`` must be one of :data:`EMPTY_POLICIES`."""
    if not isinstance(empty, str) or empty not in EMPTY_POLICIES:
        raise ValueError(f"{fname}: empty must be 'error' or 'zero', got {empty!r}")
    return empty


def first_true_index(flags: Any, xp: Any) -> tuple[int, ...] | None:
    """Index (a tuple) of the first ``True`` in a concrete boolean array, else ``None``."""
    found = concrete(xp.any(flags))
    if not found:
        return None
    flat = xp.reshape(xp.astype(flags, xp.int8), (-1,))
    pos = int(xp.argmax(flat))
    index = []
    for size in reversed(tuple(flags.shape)):
        index.append(pos % size)
        pos //= size
    return tuple(reversed(index))
