"""Blockwise attention: scaled dot-product attention in memory that grows linearly with length.

``softmax(q kᵀ · scale) v`` computed over blocks of queries and of keys with an *online
softmax* (Milakov & Gimelshein 2018; the forward pass of FlashAttention, Dao et al. 2022):
for each block of queries, the key blocks are visited in turn and three things are kept per
query row,

* ``m``, the largest score seen so far (``-inf`` before the first kept key),
* ``l``, the sum of ``exp(s - m)`` over the kept keys seen so far,
* ``acc``, the sum of ``exp(s - m) v`` over them.

When a block raises the maximum from ``m`` to ``m'``, the old sums are rescaled by
``exp(m - m')``: every term ``exp(s - m)`` becomes ``exp(s - m')``, so after the last block
``acc / l`` is exactly the softmax-weighted sum (up to rounding: the same sums, taken in
another order). No ``(Q, K)`` array is ever built: the largest is a block's ``(block_q,
block_k)`` scores. The row's log-sum-exp ``lse = m + log l`` is saved for the backward pass
(:func:`xpseq.core.vjp.blockwise_attention`), which recomputes each block's weights
``exp(s - lse)`` instead of storing them.

Masking is the plain path's, block by block: ``valid_lens`` ``(B,)`` or ``(B, Q)``, a
boolean ``mask`` broadcasting to the scores, and ``causal`` (query ``i`` sees keys ``j <=
i``). A key block whose keys are all masked adds nothing (its terms are zeros, and the
running maximum stays ``-inf`` until a kept key arrives); a query row with no kept key at
all ends with ``l = 0`` and gets a zero context, or an error with ``empty="error"``: the
same policy as :func:`xpseq.core.scaled_dot_product_attention`, never NaN.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, Callable

import array_api_compat as compat

from . import checks, kernels
from .attention import _check_qkv
from .masking import check_mask, lengths_array, lengths_for

__all__ = ["blockwise_attention", "hand_derived_attention", "DEFAULT_BLOCK"]

#: The default query and key block sizes.
DEFAULT_BLOCK = 128


@dataclasses.dataclass(frozen=True)
class BlockMask:
    """How to build the keep mask (``True`` = attend) of one block of the scores.

    ``lens``: lengths that broadcast against the scores less their key axis (from
    :func:`xpseq.core.masking.lengths_for`), or ``None``; ``mask``: a boolean array that
    broadcasts to the scores, or ``None``; ``causal``: keys ``j <= i`` only.
    """

    lens: Any = None
    mask: Any = None
    causal: bool = False

    def block(self, rows: tuple[int, int], cols: tuple[int, int], *, xp: Any,
              device: Any) -> Any:
        """The keep mask of the scores' rows ``rows`` and columns ``cols`` (half-open
        ranges), broadcasting to that block; ``None`` when nothing is masked."""
        keep = None
        if self.lens is not None or self.causal:
            j = xp.arange(cols[0], cols[1], dtype=kernels.int_dtype(xp), device=device)
        if self.lens is not None:
            lens = self.lens if self.lens.shape[-1] == 1 else self.lens[..., rows[0]:rows[1]]
            keep = j < xp.expand_dims(xp.astype(lens, j.dtype), axis=-1)
        if self.causal:
            i = xp.arange(rows[0], rows[1], dtype=j.dtype, device=device)
            below = j <= xp.expand_dims(i, axis=-1)
            keep = below if keep is None else keep & below
        if self.mask is not None:
            part = self.mask
            if part.shape[-2] != 1:
                part = part[..., rows[0]:rows[1], :]
            if part.shape[-1] != 1:
                part = part[..., cols[0]:cols[1]]
            keep = part if keep is None else keep & part
        return keep


def blockwise_attention(q: Any, k: Any, v: Any, *, valid_lens: Any = None, mask: Any = None,
                        causal: bool = False, empty: str = "error",
                        scale: float | None = None, block_q: int = DEFAULT_BLOCK,
                        block_k: int = DEFAULT_BLOCK,
                        need_weights: bool = False) -> tuple[Any, None]:
    """Scaled dot-product attention over blocks: the context of
    :func:`xpseq.core.scaled_dot_product_attention`, in memory linear in the lengths.

    Peak memory is ``O(B·H·(Q·d + block_q·block_k))`` instead of ``O(B·H·Q·K)``: the
    weights are never formed (see the module docstring for the algorithm). For gradients:
    :func:`xpseq.core.vjp.blockwise_attention` (the hand-derived rule) and
    :func:`hand_derived_attention` (that rule attached for JAX, PyTorch and NumPy).

    Parameters
    ----------
    q : real floating array, shape ``(batch, ..., Q, d)``
    k : real floating array, shape ``(..., K, d)``
    v : real floating array, shape ``(..., K, d_v)``
    valid_lens, mask, empty
        As in :func:`xpseq.core.masked_softmax`, for scores of shape ``(batch, ..., Q,
        K)``. ``empty="error"`` raises for a query row left without a key, ``"zero"``
        gives it a zero context.
    causal : bool
        Query ``i`` attends to keys ``j <= i`` only (with the other masks).
    scale : float, optional
        Defaults to ``1 / sqrt(d)``.
    block_q, block_k : int
        Queries and keys per block (a last block may be shorter). Any positive sizes
        give the same result to rounding.
    need_weights : bool
        Must be ``False``: the ``(Q, K)`` weights are what this path never builds
        (:func:`xpseq.core.scaled_dot_product_attention` returns them).

    Returns
    -------
    context : array, shape ``(batch, ..., Q, d_v)``
    weights : ``None``

    Raises
    ------
    ValueError
        ``need_weights=True``, block sizes below 1, and everything
        :func:`xpseq.core.scaled_dot_product_attention` refuses (bad shapes, lengths or
        masks, non-finite input, a row without a key under ``empty="error"``).
    TypeError
        Non-floating arrays, a non-bool ``mask``, ``causal`` or ``need_weights``, a
        block size that is not an int.

    Examples
    --------
    >>> import numpy as np
    >>> import xpseq.core as C
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((2, 300, 8)) for _ in range(3))
    >>> out, _ = C.blockwise_attention(q, k, v, valid_lens=np.array([300, 7]), block_k=64)
    >>> ref, _ = C.scaled_dot_product_attention(q, k, v, valid_lens=np.array([300, 7]))
    >>> bool(np.max(np.abs(out - ref)) < 1e-12)
    True
    """
    fname = "blockwise_attention"
    xp = checks.namespace(fname, q=q, k=k, v=v, valid_lens=lengths_array(valid_lens), mask=mask)
    scale = checks.check_scale(fname, scale)
    empty = checks.check_empty(fname, empty)
    for name, flag in (("causal", causal), ("need_weights", need_weights)):
        if not isinstance(flag, bool):
            raise TypeError(f"{fname}: {name} must be a bool, got {flag!r}")
    if need_weights:
        raise ValueError(f"{fname}: need_weights=True asks for the (Q, K) weights, which "
                         "the blockwise path never builds; scaled_dot_product_attention "
                         "returns them")
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if not checks.is_int(size):
            raise TypeError(f"{fname}: {name} must be an int, got {type(size).__name__}")
        if size < 1:
            raise ValueError(f"{fname}: {name} must be >= 1, got {size}")
    _check_qkv(fname, q, k, v, xp)
    shape = (*_lead(q, k, v), q.shape[-2], k.shape[-2])
    device = compat.device(q)
    blocks = BlockMask(
        lens=None if valid_lens is None else lengths_for(fname, shape, valid_lens, xp=xp,
                                                         device=device),
        mask=mask, causal=causal)
    if mask is not None:
        check_mask(fname, mask, shape, xp=xp)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out, _, kept = forward(q, k, v, blocks, scale, operator.index(block_q),
                           operator.index(block_k), xp=xp)
    if empty == "error":
        if k.shape[-2] == 0 and math.prod(shape[:-1]) > 0:
            raise ValueError(f"{fname}: k has no keys (K = 0), so no query has a valid key; "
                             "pass empty='zero' for all-zero rows")
        row = checks.first_true_index(~kept, xp)
        if row is not None:
            raise ValueError(f"{fname}: query row {row} of the scores q kᵀ (shape {shape}) "
                             "has no valid key; every query needs at least one when "
                             "empty='error' (pass empty='zero' for an all-zero row)")
    finite = 0 in tuple(out.shape) or checks.concrete(
        xp.isfinite(xp.max(out)) & xp.isfinite(xp.min(out)))
    if finite is False:
        raise ValueError(f"{fname}: the result is not finite: q kᵀ overflows")
    return out, None


def _lead(q: Any, k: Any, v: Any) -> tuple[Any, ...]:
    """The broadcast leading shape of ``q``, ``k`` and ``v`` (all but their last two axes)."""
    return checks.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])


def spans(size: int, block: int) -> list[tuple[int, int]]:
    """``[(0, block), (block, 2 block), ..., (.., size)]``: the blocks of ``size`` items."""
    return [(start, min(start + block, size)) for start in range(0, size, block)]


def block_scores(qi: Any, kj: Any, keep: Any, scale: float, *, xp: Any) -> Any:
    """``qi kjᵀ · scale`` with the masked scores at ``-inf``."""
    s = (qi @ xp.matrix_transpose(kj)) * scale
    return s if keep is None else xp.where(keep, s, -math.inf)


def block_weights(s: Any, shift: Any, keep: Any, *, xp: Any) -> Any:
    """``exp(s - shift)`` with the masked entries exactly 0 (the first ``where`` keeps the
    masked ``-inf`` out of ``exp``, so no ``0 · inf`` reaches an automatic gradient)."""
    if keep is None:
        return xp.exp(s - shift)
    return xp.where(keep, xp.exp(xp.where(keep, s - shift, 0.0)), 0.0)


def forward(q: Any, k: Any, v: Any, blocks: BlockMask, scale: float, block_q: int,
            block_k: int, *, xp: Any) -> tuple[Any, Any, Any]:
    """The unchecked forward pass: ``(context (..., Q, d_v), lse (..., Q, 1), kept (..., Q))``
    where ``lse`` is each row's log-sum-exp of its kept scores (0 for a row without one) and
    ``kept`` whether the row has a kept key. Narrow dtypes (bfloat16) are computed in
    float32 and the context returned in their dtype."""
    if kernels.is_narrow(q.dtype, xp=xp):
        q32, k32, v32 = (xp.astype(x, xp.float32) for x in (q, k, v))
        out, lse, kept = forward(q32, k32, v32, blocks, scale, block_q, block_k, xp=xp)
        return xp.astype(out, q.dtype), lse, kept
    device = compat.device(q)
    lead = _lead(q, k, v)
    n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    outs, lses, kepts = [], [], []
    for rows in spans(n_q, block_q):
        qi = q[..., rows[0]:rows[1], :]
        m: Any = None
        l: Any = None
        acc: Any = None
        for cols in spans(n_k, block_k):
            keep = blocks.block(rows, cols, xp=xp, device=device)
            s = block_scores(qi, k[..., cols[0]:cols[1], :], keep, scale, xp=xp)
            top = xp.max(s, axis=-1, keepdims=True)
            m_new = top if m is None else xp.maximum(m, top)
            shift = xp.where(xp.isfinite(m_new), m_new, 0.0)     # -inf: nothing kept yet
            p = block_weights(s, shift, keep, xp=xp)
            row_sum = xp.sum(p, axis=-1, keepdims=True)
            pv = p @ v[..., cols[0]:cols[1], :]
            if m is None:
                l, acc = row_sum, pv
            else:
                alpha = xp.exp(m - shift)          # m - shift is -inf or <= 0, never NaN
                l, acc = alpha * l + row_sum, alpha * acc + pv
            m = m_new
        if m is None:                               # no keys at all
            shape = (*lead, rows[1] - rows[0])
            outs.append(xp.zeros((*shape, d_v), dtype=q.dtype, device=device))
            lses.append(xp.zeros((*shape, 1), dtype=q.dtype, device=device))
            kepts.append(xp.zeros(shape, dtype=xp.bool, device=device))
            continue
        has = l > 0
        safe = xp.where(has, l, 1.0)
        outs.append(acc / safe)
        lses.append(xp.where(has, shift + xp.log(safe), 0.0))    # shift: the last max, finite
        kepts.append(has[..., 0])
    if not outs:                                     # no queries
        return (xp.zeros((*lead, 0, d_v), dtype=q.dtype, device=device),
                xp.zeros((*lead, 0, 1), dtype=q.dtype, device=device),
                xp.zeros((*lead, 0), dtype=xp.bool, device=device))
    if len(outs) == 1:
        return outs[0], lses[0], kepts[0]
    return (xp.concat(outs, axis=-2), xp.concat(lses, axis=-2), xp.concat(kepts, axis=-1))


def hand_derived_attention(*, causal: bool, scale: float, block_q: int, block_k: int,
                           custom_vjp: Callable[..., Any], xp: Any) -> Callable[..., Any]:
    """Blockwise attention with its hand-derived gradient attached, for the models.

    Returns ``attention(q, k, v, lens, mask) -> context`` (unchecked: ``lens`` from
    :func:`xpseq.core.masking.lengths_for` or ``None``, ``mask`` boolean or ``None``) made
    ``custom_vjp(fn, fwd, bwd)`` (``backend.custom_vjp``: a ``jax.custom_vjp`` on JAX, a
    ``torch.autograd.Function`` on PyTorch, the rule that ``value_and_grad`` runs on NumPy).
    The forward pass keeps the context and each row's log-sum-exp; the backward pass is
    :func:`xpseq.core.vjp.blockwise_back`, which recomputes each block's weights from them.
    Automatic differentiation through :func:`forward` is the other way to the gradient:
    it stores each block's intermediate arrays instead.
    """
    from . import vjp

    def fn(q: Any, k: Any, v: Any, lens: Any, mask: Any) -> Any:
        return forward(q, k, v, BlockMask(lens, mask, causal), scale, block_q, block_k,
                       xp=xp)[0]

    def fwd(q: Any, k: Any, v: Any, lens: Any, mask: Any) -> tuple[Any, tuple[Any, ...]]:
        out, lse, _ = forward(q, k, v, BlockMask(lens, mask, causal), scale, block_q, block_k,
                              xp=xp)
        return out, (q, k, v, lens, mask, out, lse)

    def bwd(saved: tuple[Any, ...], d_out: Any) -> tuple[Any, ...]:
        q, k, v, lens, mask, out, lse = saved
        dq, dk, dv = vjp.blockwise_back(q, k, v, BlockMask(lens, mask, causal), scale,
                                        block_q, block_k, out, lse, d_out, xp=xp)
        return dq, dk, dv, None, None

    wrapped: Callable[..., Any] = custom_vjp(fn, fwd, bwd)
    return wrapped
