"""Masks, masked softmax and log-space reductions, written once for every array library.

A *mask* here is a boolean array that is ``True`` where a key may be attended to. A masked
key gets exactly zero weight whatever its score is: xpseq never fills masked scores with a
finite sentinel such as ``-1e6`` (which a very negative real score can beat, and which turns
an all-masked row into a uniform one). A query row with no valid key is either an error
(``empty="error"``, the default) or an all-zero row (``empty="zero"``); neither the values
nor any gradient is ever NaN because of masking.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import array_api_compat as compat

from . import checks, kernels, shapes

__all__ = ["sequence_mask", "masked_softmax", "log_softmax", "logsumexp"]


# --------------------------------------------------------------------------- public API


def sequence_mask(lengths: Any, max_len: int) -> Any:
    """Boolean mask of the valid leading positions of padded sequences.

    Parameters
    ----------
    lengths : integer array, shape ``(...,)``
        Number of real (non-padding) positions of each sequence, ``0 <= lengths <= max_len``.
    max_len : int
        Length of the padded axis.

    Returns
    -------
    mask : bool array, shape ``(..., max_len)``
        ``mask[..., t]`` is ``True`` exactly when ``t < lengths[...]``.

    Raises
    ------
    TypeError
        ``lengths`` is not an integer array, or ``max_len`` is not an integer.
    ValueError
        ``max_len`` is negative, or a length lies outside ``[0, max_len]``.

    Notes
    -----
    Under ``jax.jit`` the range of ``lengths`` cannot be checked; a negative length then
    gives an all-``False`` row and one above ``max_len`` an all-``True`` row.
    """
    fname = "sequence_mask"
    xp = checks.namespace(fname, lengths=lengths)
    if not xp.isdtype(lengths.dtype, "integral"):
        raise TypeError(f"{fname}: lengths must have an integer dtype, got {lengths.dtype}")
    if not checks.is_int(max_len):
        raise TypeError(f"{fname}: max_len must be an int, got {type(max_len).__name__}")
    max_len = operator.index(max_len)
    if max_len < 0:
        raise ValueError(f"{fname}: max_len must be >= 0, got {max_len}")
    check_lengths_range(fname, "lengths", lengths, max_len, f"max_len = {max_len}", xp)
    return kernels.sequence_mask(lengths, max_len, xp=xp)


def masked_softmax(scores: Any, valid_lens: Any = None, *, mask: Any = None,
                   empty: str = "error") -> Any:
    """Softmax over the last axis that gives masked keys exactly zero weight.

    Parameters
    ----------
    scores : real floating array, shape ``(batch, ..., queries, keys)``
        Unnormalised attention scores. Any number of leading dimensions (heads included).
        Values at masked keys are ignored (they may even be infinite or NaN); values at
        valid keys must be finite.
    valid_lens : integer array or sequence of ints, shape ``(batch,)`` or ``(batch, Q)``
        Optional. Number of valid *leading* keys. Shape ``(batch,)`` applies one length to every
        query of a batch element; ``(batch, queries)`` gives each query its own length.
        ``batch`` is the first axis of ``scores`` and ``queries`` its second-to-last.
    mask : bool array, optional
        ``True`` where a key may be attended to; broadcasts to ``scores.shape``. If both
        ``valid_lens`` and ``mask`` are given, a key must pass both.
    empty : {"error", "zero"}
        What a query row with no valid key gets: ``"error"`` raises ``ValueError`` naming
        the row; ``"zero"`` returns an all-zero row (and a zero gradient for it).
        ``"error"`` needs the values: under ``jax.jit`` (or while a graph is recorded) it
        cannot raise, and such a row comes out as zeros, as with ``"zero"``; check the
        lengths before tracing where that matters.

    Returns
    -------
    weights : array, shape and dtype of ``scores``
        Each row sums to one over its valid keys (or is all zero, see ``empty``); masked
        keys are exactly ``0``. The input is not modified.

    Raises
    ------
    TypeError
        Non-floating ``scores``, non-integer ``valid_lens``, non-boolean ``mask``, or
        arrays of two different libraries.
    ValueError
        Bad shapes, a length outside ``[0, keys]``, a non-finite score at a valid key, an
        empty row with ``empty="error"``, or an unknown ``empty``.

    Notes
    -----
    The maximum over the valid keys is subtracted before exponentiating, so scores of
    ``±1e4`` are fine. Masked positions are replaced *before* ``exp`` and again after it
    (the double ``where``), so neither the forward value nor a gradient can pick up a NaN
    from them.

    Under ``jax.jit`` values cannot be inspected: the range and finiteness checks are
    skipped, and a row with no valid key (including one produced by a negative length)
    comes out as zeros, as with ``empty="zero"``.

    Examples
    --------
    Two queries over three keys, of which only the first two are valid:

    >>> import numpy as np
    >>> import xpseq.core as C
    >>> scores = np.array([[[1.0, 2.0, 3.0], [0.5, 0.5, 9.0]]])
    >>> print(np.round(C.masked_softmax(scores, valid_lens=np.array([2])), 4))
    [[[0.2689 0.7311 0.    ]
      [0.5    0.5    0.    ]]]
    """
    fname = "masked_softmax"
    xp = checks.namespace(fname, scores=scores, valid_lens=lengths_array(valid_lens),
                           mask=mask)
    checks.check_floating(fname, "scores", scores, xp)
    checks.check_ndim(fname, "scores", scores, 1)
    keep = validated_keep(fname, "scores", scores, valid_lens, mask, empty, xp=xp)
    return kernels.masked_softmax(scores, keep, xp=xp)


def logsumexp(x: Any, /, *, axis: int = -1, keepdims: bool = False) -> Any:
    """``log(sum(exp(x), axis))`` computed without overflow.

    Parameters
    ----------
    x : real floating array, shape ``(..., n, ...)``
    axis : int
        The axis to reduce.
    keepdims : bool
        Keep the reduced axis with size one.

    Returns
    -------
    array, shape of ``x`` without ``axis`` (or with size one there)

    Notes
    -----
    ``-inf`` entries (log 0) contribute nothing; a slice that is all ``-inf`` gives ``-inf``
    (and a zero gradient, not NaN). NaN and ``+inf`` are refused (``ValueError``) when values
    are concrete.
    """
    fname = "logsumexp"
    xp = checks.namespace(fname, x=x)
    checks.check_floating(fname, "x", x, xp)
    checks.check_no_nan_or_pos_inf(fname, "x", x, xp)
    axis = _check_axis(fname, axis, x.ndim)
    return kernels.logsumexp(x, axis=axis, keepdims=keepdims, xp=xp)


def log_softmax(x: Any, /, *, axis: int = -1) -> Any:
    """``log(softmax(x))`` along ``axis``, computed as ``x - logsumexp(x)``.

    Parameters
    ----------
    x : real floating array, shape ``(..., n, ...)``
    axis : int
        The axis over which the probabilities sum to one.

    Returns
    -------
    array, shape and dtype of ``x``

    Notes
    -----
    A slice that is all ``-inf`` (every probability zero) gives all ``-inf`` rather than
    NaN, and a zero gradient. NaN and ``+inf`` are refused (``ValueError``) when values are
    concrete.
    """
    fname = "log_softmax"
    xp = checks.namespace(fname, x=x)
    checks.check_floating(fname, "x", x, xp)
    checks.check_no_nan_or_pos_inf(fname, "x", x, xp)
    axis = _check_axis(fname, axis, x.ndim)
    return kernels.log_softmax(x, axis=axis, xp=xp)


# --------------------------------------------------------------- shared by attention


def keep_mask(fname: str, shape: tuple[int | None, ...], valid_lens: Any, mask: Any, *,
              xp: Any, device: Any, compact: bool = False, keys: Any = None,
              keys_axis: int = -1) -> Any:
    """Validate ``valid_lens`` / ``mask`` against a scores shape and combine them.

    Returns a boolean array of exactly ``shape`` (``True`` = attend), or one that
    broadcasts to it with ``compact`` (no axis stretched that need not be), or ``None``
    when neither is given. Used by every public function that takes ``valid_lens`` /
    ``mask``. ``keys`` is an array whose axis ``keys_axis`` runs over the keys: it gives
    their positions when their number is unknown (``shape[-1]`` is ``None`` on a lazy
    array); unknown sizes are left to broadcasting.
    """
    keep = None
    compact = compact or not shapes.known(shape)     # unknown sizes: left to broadcast
    if valid_lens is not None:
        valid_lens = _as_lengths(fname, valid_lens, xp=xp, device=device)
        keep = _lengths_to_keep(fname, shape, valid_lens, xp=xp, compact=compact, keys=keys,
                                keys_axis=keys_axis)
    if mask is not None:
        check_mask(fname, mask, shape, xp=xp)
        if not compact:
            mask = xp.broadcast_to(mask, shape)
        keep = mask if keep is None else (keep & mask)
    return keep


def check_mask(fname: str, mask: Any, shape: tuple[int | None, ...], *, xp: Any) -> None:
    """``mask`` must be boolean and broadcast to the scores shape ``shape``."""
    if mask.dtype != xp.bool:
        raise TypeError(
            f"{fname}: mask must have a bool dtype (True = attend), got {mask.dtype}"
        )
    if not shapes.broadcastable(tuple(mask.shape), shape):
        raise ValueError(
            f"{fname}: mask of shape {tuple(mask.shape)} does not broadcast to the "
            f"scores shape {shape}"
        )


def lengths_array(valid_lens: Any) -> Any:
    """``valid_lens`` when it is an array (so its library is checked), else ``None``.

    A Python sequence of ints is also accepted as ``valid_lens``; it is converted later.
    """
    if valid_lens is None or isinstance(valid_lens, (list, tuple)):
        return None
    return valid_lens


def validated_keep(fname: str, what: str, scores: Any, valid_lens: Any, mask: Any,
                   empty: str, *, xp: Any) -> Any:
    """:func:`keep_mask` for ``scores``, plus the finiteness and empty-row checks."""
    empty = checks.check_empty(fname, empty)
    shape = tuple(scores.shape)
    keep = keep_mask(fname, shape, valid_lens, mask, xp=xp, device=compat.device(scores),
                     keys=scores)
    checks.check_finite(fname, what, scores, xp, where=keep)
    if empty == "error":
        check_no_empty_rows(fname, what, shape, keep, xp=xp)
    return keep


def check_no_empty_rows(fname: str, what: str, shape: tuple[int, ...], keep: Any, *,
                        xp: Any) -> None:
    """Raise ``ValueError`` naming the first query row of ``keep`` with no valid key."""
    if shape[-1] == 0 and math.prod(shape[:-1]) > 0:
        raise ValueError(
            f"{fname}: {what} has no keys (last axis of size 0), so no query has a valid key; "
            "pass empty='zero' for all-zero rows"
        )
    if keep is None:
        return
    empty_rows = ~xp.any(keep, axis=-1)
    row = checks.first_true_index(empty_rows, xp)
    if row is not None:
        raise ValueError(
            f"{fname}: query row {row} of {what} (shape {shape}) has no valid key; every "
            "query needs at least one when empty='error' (pass empty='zero' for an "
            "all-zero row)"
        )


# ------------------------------------------------------------------------- helpers


def _as_lengths(fname: str, valid_lens: Any, *, xp: Any, device: Any) -> Any:
    if isinstance(valid_lens, (list, tuple)):
        flat = _flatten(valid_lens)
        if not all(checks.is_int(v) for v in flat):
            raise TypeError(f"{fname}: valid_lens must hold integers, got {valid_lens!r}")
        return xp.asarray(valid_lens, dtype=kernels.int_dtype(xp), device=device)
    if not xp.isdtype(valid_lens.dtype, "integral"):
        raise TypeError(f"{fname}: valid_lens must have an integer dtype, got {valid_lens.dtype}")
    return valid_lens


def _flatten(seq: Any) -> list[Any]:
    out = []
    for v in seq:
        out.extend(_flatten(v) if isinstance(v, (list, tuple)) else [v])
    return out


def _lengths_to_keep(fname: str, shape: tuple[int | None, ...], valid_lens: Any, *, xp: Any,
                     compact: bool = False, keys: Any = None, keys_axis: int = -1) -> Any:
    lens = lengths_for(fname, shape, valid_lens, xp=xp, keys=keys)
    keep = kernels.sequence_mask(lens, shape[-1], xp=xp, like=keys, axis=keys_axis)
    return keep if compact else xp.broadcast_to(keep, shape)


def lengths_for(fname: str, shape: tuple[int | None, ...], valid_lens: Any, *, xp: Any,
                keys: Any = None, device: Any = None) -> Any:
    """``valid_lens`` (``(batch,)`` or ``(batch, queries)``: an integer array, or nested
    lists of ints made one on ``device``) checked against the scores shape ``shape`` and
    reshaped to broadcast against ``shape[:-1]``: ``(batch, 1, ..., 1)`` or ``(batch, 1,
    ..., queries)``; key ``j`` of a row is kept where ``j < lens``. (Blockwise attention
    builds each block's mask from it, never the whole.)"""
    valid_lens = _as_lengths(fname, valid_lens, xp=xp, device=device)
    ndim = len(shape)
    if valid_lens.ndim == 1:
        if ndim < 2:
            raise ValueError(
                f"{fname}: valid_lens of shape (batch,) needs scores of shape "
                f"(batch, ..., keys), got shape {shape}"
            )
        if not checks.sizes_agree(valid_lens.shape[0], shape[0]):
            raise ValueError(
                f"{fname}: valid_lens has shape {tuple(valid_lens.shape)} but expected "
                f"(batch,) = ({shape[0]},) from scores of shape {shape}"
            )
        lens = xp.reshape(valid_lens, (-1,) + (1,) * (ndim - 2))
    elif valid_lens.ndim == 2:
        if ndim < 3:
            raise ValueError(
                f"{fname}: valid_lens of shape (batch, queries) needs scores of shape "
                f"(batch, ..., queries, keys), got shape {shape}"
            )
        if not (checks.sizes_agree(valid_lens.shape[0], shape[0])
                and checks.sizes_agree(valid_lens.shape[1], shape[-2])):
            raise ValueError(
                f"{fname}: valid_lens has shape {tuple(valid_lens.shape)} but expected "
                f"(batch, queries) = ({shape[0]}, {shape[-2]}) from scores of shape {shape}"
            )
        lens = valid_lens
        for _ in range(ndim - 3):
            lens = xp.expand_dims(lens, axis=1)
    else:
        raise ValueError(
            f"{fname}: valid_lens must have shape (batch,) or (batch, queries), got shape "
            f"{tuple(valid_lens.shape)}"
        )
    n_keys = shape[-1]
    if n_keys is not None:
        check_lengths_range(fname, "valid_lens", valid_lens, n_keys,
                            f"{n_keys} (the number of keys)", xp)
    elif keys is None:
        raise ValueError(f"{fname}: the number of keys is unknown (a lazy array), so "
                         "valid_lens needs the keys array to count them")
    return lens


def check_lengths_range(fname: str, name: str, lengths: Any, upper: int, upper_text: str,
                        xp: Any) -> None:
    """Raise ``ValueError`` if an integer array ``lengths`` (any shape) has a value below 0 or
    above ``upper`` (named ``upper_text`` in the message); skipped under ``jax.jit``.

    Shared with :mod:`xpseq.core.recurrent`; not in ``__all__`` (the module's math).
    """
    # Compare in the default integer dtype: a bound such as 300 does not fit an int8 array's.
    wide = xp.astype(lengths, kernels.int_dtype(xp))
    for bad, rule in ((wide < 0, ">= 0"), (wide > upper, f"<= {upper_text}")):
        index = checks.first_true_index(bad, xp)
        if index is not None:
            value = int(lengths[index]) if index else int(lengths)
            where = f"{name}[{', '.join(map(str, index))}]" if index else name
            raise ValueError(f"{fname}: {name} must be {rule}, got {where} = {value}")


def _check_axis(fname: str, axis: Any, ndim: int) -> int:
    if not checks.is_int(axis):
        raise TypeError(f"{fname}: axis must be an int, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{fname}: axis {axis} is out of range for an array of {ndim} dimensions")
    return operator.index(axis) % ndim
