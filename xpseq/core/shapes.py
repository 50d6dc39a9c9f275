"""Unknown sizes: the idioms that let the same kernels run on arrays whose shape is only
partly known.

A lazy array may have dimensions of unknown size (``None`` in ``x.shape``): an
``ndonnx.argument`` recording an ONNX graph whose batch and lengths are symbolic (what
:mod:`xpseq.export` traces). Every place where the core's kernels must do something else
for such an array goes through a function here, each named for what it does, so that the
kernels read as they would for known shapes and the exceptions are tested in one place
(``tests/test_shapes.py``, on ndonnx arguments).

The rules they follow:

* a reshape may leave one dimension to the library (``-1``), never two: with two unknown
  sizes, the same values are made without a reshape (slices stacked or concatenated, a
  one-hot product);
* a size that is unknown is taken from an array that has it (the batch from the source's
  first axis, positions by a running sum along an axis), never guessed;
* a broadcast to an unknown shape is left to the operation that consumes it.

>>> from xpseq.core import shapes
>>> shapes.reshape_dims((None, 3, 4))
(-1, 3, 4)
>>> shapes.unknown((None, None, 8)), shapes.known((2, 8))
(2, True)
"""

from __future__ import annotations

from typing import Any, Sequence

import array_api_compat as compat

__all__ = ["unknown", "known", "reshapable", "reshape_dims", "broadcastable", "positions",
           "take_rows", "split_last", "join_last", "zeros_rows"]


def unknown(shape: Sequence[int | None]) -> int:
    """How many dimensions of ``shape`` have an unknown size (``None``)."""
    return sum(n is None for n in shape)


def known(shape: Sequence[int | None]) -> bool:
    """Whether every size of ``shape`` is known."""
    return unknown(shape) == 0


def reshapable(shape: Sequence[int | None]) -> bool:
    """Whether a reshape can keep ``shape``'s sizes: at most one is unknown (a reshape
    leaves one to the library, ``-1``)."""
    return unknown(shape) <= 1


def reshape_dims(dims: Sequence[int | None]) -> tuple[int, ...]:
    """``dims`` as a reshape's target: an unknown size (``None``) becomes ``-1``.

    Raises
    ------
    ValueError
        Two or more sizes are unknown (no reshape can keep them; see
        :func:`split_last` and :func:`join_last`).
    """
    if not reshapable(dims):
        raise ValueError(f"reshape_dims: {tuple(dims)} has {unknown(dims)} unknown sizes; "
                         "a reshape can leave at most one to the library")
    return tuple(-1 if n is None else int(n) for n in dims)


def broadcastable(src: Sequence[int | None], dst: Sequence[int | None]) -> bool:
    """Whether ``src`` broadcasts to ``dst`` (the standard's rule, from the right), an
    unknown size on either side taken to fit."""
    if len(src) > len(dst):
        return False
    return all(s is None or d is None or s in (1, d)
               for s, d in zip(reversed(src), reversed(dst)))


def positions(like: Any, axis: int, *, xp: Any) -> Any:
    """``0, 1, ..., n - 1`` for ``n = like.shape[axis]``, in the namespace's default
    integer dtype, on ``like``'s device. Where ``n`` is unknown it is the running sum of
    ones along that axis minus one, which the graph computes for any ``n``."""
    wide = xp.__array_namespace_info__().default_dtypes()["integral"]
    n = like.shape[axis]
    if n is not None:
        return xp.arange(n, dtype=wide, device=compat.device(like))
    axis %= like.ndim
    line = like[tuple(slice(None) if i == axis else 0 for i in range(like.ndim))]
    return xp.cumulative_sum(xp.ones_like(line, dtype=wide), axis=0) - 1


def take_rows(table: Any, ids: Any, *, xp: Any) -> Any:
    """``table[ids]``: the rows of ``table (V, E)`` at integer ``ids (...)``, shape
    ``(..., E)``. With two or more unknown sizes in ``ids``, which no reshape can restore
    after a flat ``take``, it is the one-hot product ``onehot(ids) @ table``: the same
    values (one row times one, the others times zero), ``V`` more multiplications."""
    if not reshapable(ids.shape):
        onehot = ids[..., None] == xp.arange(table.shape[0], dtype=ids.dtype,
                                             device=compat.device(ids))
        return xp.astype(onehot, table.dtype) @ table
    flat = xp.take(table, xp.reshape(ids, (-1,)), axis=0)
    return xp.reshape(flat, reshape_dims((*ids.shape, table.shape[1])))


def split_last(x: Any, parts: int, *, axis: int, xp: Any) -> Any:
    """The last axis of ``x`` cut into ``parts`` equal slices, stacked along a new axis
    ``axis``: ``(..., parts * d) -> (..., parts, ..., d)``. The reshape-free way to split
    heads when two sizes are unknown."""
    d = x.shape[-1] // parts
    return xp.stack([x[..., i * d:(i + 1) * d] for i in range(parts)], axis=axis)


def join_last(x: Any, parts: int, *, axis: int, xp: Any) -> Any:
    """The inverse of :func:`split_last`: the ``parts`` entries along ``axis`` of ``x``
    concatenated along the last axis."""
    axis %= x.ndim
    pieces = [x[tuple(i if a == axis else slice(None) for a in range(x.ndim))]
              for i in range(parts)]
    return xp.concat(pieces, axis=-1)


def zeros_rows(like: Any, width: int, *, xp: Any) -> Any:
    """Zeros ``(B, width)`` in ``like``'s dtype and device, ``B = like.shape[0]`` whether
    or not it is known (taken from ``like``'s first column where it is not)."""
    batch = like.shape[0]
    if batch is not None:
        return xp.zeros((batch, width), dtype=like.dtype, device=compat.device(like))
    column = xp.zeros_like(like[(slice(None),) + (slice(0, 1),) * (like.ndim - 1)])
    return xp.reshape(column, (-1, 1)) + xp.zeros((width,), dtype=like.dtype,
                                                  device=compat.device(like))
