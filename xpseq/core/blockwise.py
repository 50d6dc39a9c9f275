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
(:func:`backward`, derived in its docstring; :func:`xpseq.core.vjp.blockwise_attention` is
the pair as a rule), which recomputes each block's weights ``exp(s - lse)`` instead of
storing them.

The loops over blocks are the ``scan`` the caller passes (the backend's ``backend.scan``,
as the models pass it); a caller with no backend passes none and gets the arrays' own loop,
:func:`xpseq.core.delegation.scan` (``jax.lax.scan`` on JAX, a Python loop elsewhere).

Masking is the plain path's, block by block: ``valid_lens`` ``(B,)`` or ``(B, Q)``, a
boolean ``mask`` broadcasting to the scores, and ``causal`` (query ``i`` sees keys ``j <=
i``). A key block whose keys are all masked adds nothing (its terms are zeros, and the
running maximum stays ``-inf`` until a kept key arrives); a query row with no kept key at
all ends with ``l = 0`` and gets a zero context, or an error with ``empty="error"``: the
same policy as :func:`xpseq.core.scaled_dot_product_attention`, never NaN.

On PyTorch (CPU) the context is PyTorch's own fused kernel where it computes the same
function in linear memory (:func:`xpseq.core.delegation.fused_blockwise_attention`: masks
over keys only, every query row keeping a key); these loops stay the reference, and run
on NumPy, JAX, array_api_strict, dask and in an export, and on PyTorch wherever the
kernel does not apply.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import array_api_compat as compat

from . import checks, delegation, kernels, values
from .attention import check_qkv
from .masking import check_mask, lengths_array, lengths_for

__all__ = ["blockwise_attention", "backward", "hand_derived_attention", "DEFAULT_BLOCK"]

#: The default query and key block sizes: of 128, 256, 512 and 1,024, the fastest on
#: NumPy, PyTorch and JAX, forward and backward, at 4,096 tokens (4 heads of depth 64,
#: float32: ``python -m scripts.bench_long_attention --blocks``, recorded on the benchmarks
#: page). A block's scores take ``4 heads x 512 x 512`` floats (4 MiB in float32)
#: whatever the length.
DEFAULT_BLOCK = 512


@dataclasses.dataclass(frozen=True)
class BlockMask:
    """What masks the scores: ``lens``, lengths that broadcast against the scores less
    their key axis (from :func:`xpseq.core.masking.lengths_for`), or ``None``; ``mask``, a
    boolean array that broadcasts to the scores, or ``None``; ``causal``: keys ``j <= i``
    only. :class:`Tiles` cuts ``lens`` and ``mask`` into blocks and :meth:`keep` builds one
    block's keep mask from them."""

    lens: Any = None
    mask: Any = None
    causal: bool = False

    def keep(self, rows: Any, cols: Any, lens: Any, mask: Any, n_k: int, *,
             xp: Any) -> Any:
        """The keep mask (``True`` = attend) of the block of query rows ``rows`` ``(bq,)``
        and keys ``cols`` ``(bk,)`` (integer positions): ``lens`` this block's lengths
        ``(..., bq or 1)`` or ``None``, ``mask`` this block's ``(..., bq or 1, bk or 1)``
        or ``None``; keys at ``n_k`` and beyond are the padding of a last block. ``None``
        when nothing is masked."""
        keep = None
        if lens is not None:                   # lengths <= n_k: padding masked too
            keep = cols < xp.expand_dims(xp.astype(lens, cols.dtype), axis=-1)
        elif n_k % cols.shape[0]:
            keep = cols < n_k
        if self.causal:
            below = cols <= xp.expand_dims(rows, axis=-1)
            keep = below if keep is None else keep & below
        if mask is not None:
            keep = mask if keep is None else keep & mask
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
    :func:`backward` (the hand-derived backward pass; :func:`xpseq.core.vjp.blockwise_attention`
    pairs it with the forward as a rule) and
    :func:`hand_derived_attention` (that rule attached for JAX, PyTorch and NumPy). On
    PyTorch's CPU tensors, with masks over keys only and a key for every query row, the
    context is PyTorch's fused kernel's
    (:func:`xpseq.core.delegation.fused_blockwise_attention`), also in linear memory.

    Parameters
    ----------
    q : real floating array, shape ``(batch, ..., Q, d)``
    k : real floating array, shape ``(..., K, d)``
    v : real floating array, shape ``(..., K, d_v)``
    valid_lens, mask, empty
        As in :func:`xpseq.core.masked_softmax`, for scores of shape ``(batch, ..., Q,
        K)``. ``empty="error"`` raises for a query row left without a key, ``"zero"``
        gives it a zero context. Under ``jax.jit`` the values are unknown: ``"error"``
        cannot raise there and such a row gets a zero context, as with ``"zero"``.
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
    causal = values.flag(fname, "causal", causal)
    if values.flag(fname, "need_weights", need_weights):
        raise ValueError(f"{fname}: need_weights=True asks for the (Q, K) weights, which "
                         "the blockwise path never builds; scaled_dot_product_attention "
                         "returns them")
    block_q = values.integer(fname, "block_q", block_q, low=1)
    block_k = values.integer(fname, "block_k", block_k, low=1)
    check_qkv(fname, q, k, v, xp)
    shape = (*_lead(q, k, v), q.shape[-2], k.shape[-2])
    device = compat.device(q)
    blocks = BlockMask(
        lens=None if valid_lens is None else lengths_for(fname, shape, valid_lens, xp=xp,
                                                         device=device),
        mask=mask, causal=causal)
    if mask is not None:
        check_mask(fname, mask, shape, xp=xp)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = delegation.fused_blockwise_attention(q, k, v, blocks.lens, mask, causal, scale,
                                               xp=xp)
    if out is None:                  # not PyTorch, or a row without a key, or a (Q, K) mask
        out, _, kept = forward(q, k, v, blocks, scale, block_q, block_k, xp=xp)
        if empty == "error":
            _raise_empty(fname, shape, k.shape[-2], kept, xp=xp)
    finite = 0 in tuple(out.shape) or checks.concrete(
        xp.isfinite(xp.max(out)) & xp.isfinite(xp.min(out)))
    if finite is False:
        raise ValueError(f"{fname}: the result is not finite: q kᵀ overflows")
    return out, None


def _raise_empty(fname: str, shape: tuple[Any, ...], n_k: int, kept: Any, *, xp: Any) -> None:
    """Raise the ``ValueError`` of ``empty="error"`` when a query row keeps no key (``kept
    (..., Q)`` from :func:`forward`)."""
    if n_k == 0 and math.prod(shape[:-1]) > 0:
        raise ValueError(f"{fname}: k has no keys (K = 0), so no query has a valid key; "
                         "pass empty='zero' for all-zero rows")
    row = checks.first_true_index(~kept, xp)
    if row is not None:
        raise ValueError(f"{fname}: query row {row} of the scores q kᵀ (shape {shape}) "
                         "has no valid key; every query needs at least one when "
                         "empty='error' (pass empty='zero' for an all-zero row)")


def _lead(q: Any, k: Any, v: Any) -> tuple[Any, ...]:
    """The broadcast leading shape of ``q``, ``k`` and ``v`` (all but their last two axes)."""
    return checks.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])


@dataclasses.dataclass(frozen=True)
class Tiles:
    """The inputs cut into blocks, each block axis moved to the front so that a ``scan``
    visits one block per step. A last block shorter than the others is padded (zeros for
    arrays, ``False`` for the mask); padded keys are masked and padded rows dropped.

    ``q``, ``lse`` and the like: ``(n_q / bq, ..., bq, d)``; ``rows`` ``(n_q / bq, bq)`` and
    ``cols`` ``(n_k / bk, bk)`` the positions; ``lens`` ``(n_q / bq, ..., bq or 1)`` or
    ``None``; ``mask`` ``(n_q / bq, n_k / bk, ..., bq or 1, bk or 1)`` or ``None``.
    """

    n_q: int
    n_k: int
    block_q: int
    block_k: int
    rows: Any
    cols: Any
    lens: Any
    mask: Any

    @classmethod
    def of(cls, blocks: BlockMask, n_q: int, n_k: int, block_q: int, block_k: int, *,
           xp: Any, device: Any) -> "Tiles":
        """The tiles of ``n_q`` queries and ``n_k >= 1`` keys (``n_q >= 1``); blocks no
        longer than the axes they cut."""
        bq, bk = min(block_q, n_q), min(block_k, n_k)
        index = kernels.int_dtype(xp)
        rows = xp.reshape(xp.arange(_ceil(n_q, bq) * bq, dtype=index, device=device),
                          (-1, bq))
        cols = xp.reshape(xp.arange(_ceil(n_k, bk) * bk, dtype=index, device=device),
                          (-1, bk))
        lens = blocks.lens
        if lens is not None:
            lens = (xp.expand_dims(lens, axis=0) if lens.shape[-1] == 1
                    else cut(lens, -1, bq, 0, xp=xp))
            if lens.shape[0] != rows.shape[0]:
                lens = xp.broadcast_to(lens, (rows.shape[0], *lens.shape[1:]))
        mask = blocks.mask
        if mask is not None:
            if mask.ndim < 2:
                mask = xp.reshape(mask, (*(1,) * (2 - mask.ndim), *mask.shape))
            mask = (cut(mask, -1, bk, False, xp=xp) if mask.shape[-1] != 1
                    else xp.broadcast_to(mask[None, ...], (cols.shape[0], *mask.shape)))
            mask = (cut(mask, -2, bq, False, xp=xp) if mask.shape[-2] != 1
                    else xp.broadcast_to(mask[None, ...], (rows.shape[0], *mask.shape)))
        return cls(n_q, n_k, bq, bk, rows, cols, lens, mask)

    def queries(self, x: Any, *, xp: Any) -> Any:
        """``x (..., n_q, d)`` cut into query blocks, ``(n_q / bq, ..., bq, d)``."""
        return cut(x, -2, self.block_q, 0, xp=xp)

    def keys(self, x: Any, *, xp: Any) -> Any:
        """``x (..., n_k, d)`` cut into key blocks, ``(n_k / bk, ..., bk, d)``."""
        return cut(x, -2, self.block_k, 0, xp=xp)


def _ceil(size: int, block: int) -> int:
    return -(-size // block)


def cut(x: Any, axis: int, block: int, fill: Any, *, xp: Any) -> Any:
    """``x`` with its axis ``axis`` (negative) padded with ``fill`` to a multiple of
    ``block`` and cut into blocks, their count moved to the front: ``(..., n, ...) ->
    (ceil(n / block), ..., block, ...)``."""
    ndim, size = x.ndim, x.shape[axis]
    pos = ndim + axis
    count = _ceil(size, block)
    if count * block != size:
        shape = list(x.shape)
        shape[pos] = count * block - size
        x = xp.concat([x, xp.full(tuple(shape), fill, dtype=x.dtype,
                                   device=compat.device(x))], axis=pos)
    x = xp.reshape(x, (*x.shape[:pos], count, block, *x.shape[pos + 1:]))
    return xp.permute_dims(x, (pos, *range(pos), *range(pos + 1, ndim + 1)))


def joined(x: Any, size: int, *, xp: Any) -> Any:
    """The inverse of :func:`cut` along axis ``-2``, the padding dropped: ``(count, ...,
    block, d) -> (..., size, d)``."""
    ndim = x.ndim
    x = xp.permute_dims(x, (*range(1, ndim - 2), 0, ndim - 2, ndim - 1))
    x = xp.reshape(x, (*x.shape[:-3], x.shape[-3] * x.shape[-2], x.shape[-1]))
    return x if x.shape[-2] == size else x[..., :size, :]


def block_scores(qi: Any, kj: Any, keep: Any, *, xp: Any) -> Any:
    """``qi kjᵀ`` (``qi`` the queries already times the scale: one pass over ``(Q, d)``
    instead of one over every block's scores) with the masked scores at ``-inf``."""
    s = qi @ xp.matrix_transpose(kj)
    return s if keep is None else xp.where(keep, s, -math.inf)


def block_weights(s: Any, shift: Any, keep: Any, *, xp: Any) -> Any:
    """``exp(s - shift)`` with the masked entries exactly 0 (the first ``where`` keeps the
    masked ``-inf`` out of ``exp``, so no ``0 · inf`` reaches an automatic gradient)."""
    if keep is None:
        return xp.exp(s - shift)
    return xp.where(keep, xp.exp(xp.where(keep, s - shift, 0.0)), 0.0)


def forward(q: Any, k: Any, v: Any, blocks: BlockMask, scale: float, block_q: int,
            block_k: int, *, xp: Any,
            scan: Callable[..., Any] | None = None) -> tuple[Any, Any, Any]:
    """The unchecked forward pass: ``(context (..., Q, d_v), lse (..., Q, 1), kept (...,
    Q))`` where ``lse`` is each row's log-sum-exp of its kept scores (0 for a row without
    one) and ``kept`` whether the row has a kept key. Narrow dtypes (bfloat16) are computed
    in float32 and the context returned in their dtype.

    Two nested loops of ``scan`` (the backend's ``backend.scan``; ``None``:
    :func:`xpseq.core.delegation.scan`, ``jax.lax.scan`` on JAX, whose program then holds
    one copy of each loop's body whatever the length, and a Python loop elsewhere): over
    query blocks, and inside each over key blocks, carrying the running ``(m, l, acc)``."""
    if kernels.is_narrow(q.dtype, xp=xp):
        q32, k32, v32 = (xp.astype(x, xp.float32) for x in (q, k, v))
        out, lse, kept = forward(q32, k32, v32, blocks, scale, block_q, block_k, xp=xp,
                                 scan=scan)
        return xp.astype(out, q.dtype), lse, kept
    device = compat.device(q)
    lead = _lead(q, k, v)
    n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    if n_q == 0 or n_k == 0:                      # no queries, or no keys: all-zero rows
        return (xp.zeros((*lead, n_q, d_v), dtype=q.dtype, device=device),
                xp.zeros((*lead, n_q, 1), dtype=q.dtype, device=device),
                xp.zeros((*lead, n_q), dtype=xp.bool, device=device))
    t = Tiles.of(blocks, n_q, n_k, block_q, block_k, xp=xp, device=device)
    loop = scan or delegation.scan(xp)
    keys = {"k": t.keys(k, xp=xp), "v": t.keys(v, xp=xp), "cols": t.cols}

    def row_block(_: Any, x: Any) -> tuple[None, tuple[Any, Any, Any]]:
        def key_block(state: tuple[Any, Any, Any], y: Any) -> tuple[tuple[Any, Any, Any], None]:
            m, l, acc = state
            keep = blocks.keep(x["rows"], y["cols"], x.get("lens"), y.get("mask"), n_k, xp=xp)
            s = block_scores(x["q"], y["k"], keep, xp=xp)
            m_new = xp.maximum(m, xp.max(s, axis=-1, keepdims=True))
            shift = xp.where(xp.isfinite(m_new), m_new, 0.0)     # -inf: nothing kept yet
            p = block_weights(s, shift, keep, xp=xp)
            alpha = xp.exp(m - shift)           # m - shift is -inf or <= 0: never NaN
            return (m_new, alpha * l + xp.sum(p, axis=-1, keepdims=True),
                    alpha * acc + p @ y["v"]), None

        start = (xp.full((*lead, t.block_q, 1), -math.inf, dtype=q.dtype, device=device),
                 xp.zeros((*lead, t.block_q, 1), dtype=q.dtype, device=device),
                 xp.zeros((*lead, t.block_q, d_v), dtype=q.dtype, device=device))
        inner = keys if "mask" not in x else {**keys, "mask": x["mask"]}
        (m, l, acc), _ = loop(key_block, start, inner)
        has = l > 0
        safe = xp.where(has, l, 1.0)
        lse = xp.where(has, xp.where(xp.isfinite(m), m, 0.0) + xp.log(safe), 0.0)
        return None, (acc / safe, lse, has)

    rows = {"q": t.queries(q * scale, xp=xp), "rows": t.rows}
    for name in ("lens", "mask"):
        if getattr(t, name) is not None:
            rows[name] = getattr(t, name)
    _, (out, lse, kept) = loop(row_block, None, rows)
    return joined(out, n_q, xp=xp), joined(lse, n_q, xp=xp), joined(kept, n_q, xp=xp)[..., 0]


def backward(q: Any, k: Any, v: Any, blocks: BlockMask, scale: float, block_q: int,
             block_k: int, out: Any, lse: Any, d_out: Any, *, xp: Any,
             scan: Callable[..., Any] | None = None) -> tuple[Any, Any, Any]:
    """The hand-derived backward pass of :func:`forward` from what it saved (the context
    ``out (..., Q, d_v)`` and the rows' log-sum-exp ``lse (..., Q, 1)``): ``(dq, dk, dv)``,
    shaped as ``q``, ``k`` and ``v``, for the context's cotangent ``d_out (..., Q, d_v)``.

    For a query row ``i``, ``s_ij = scale · q_i · k_j``, the weights ``P_ij = exp(s_ij -
    lse_i)`` (``lse_i`` the row's log-sum-exp over its kept keys, saved by the forward
    pass; ``P_ij = 0`` for a masked key) and ``o_i = Σ_j P_ij v_j``. With ``do_i`` the
    cotangent of ``o_i``:

    * ``dv_j = Σ_i P_ij do_i``;
    * ``dP_ij = do_i · v_j``, and the softmax's backward ``ds_ij = P_ij (dP_ij - Σ_l P_il
      dP_il)``. The row term is ``Σ_l P_il (do_i · v_l) = do_i · o_i =: D_i``: it needs the
      row's output, not its weights, so ``D = rowsum(do ⊙ o)`` is computed once and
      ``ds = P ⊙ (dP - D)`` block by block;
    * ``dq_i = scale Σ_j ds_ij k_j`` and ``dk_j = scale Σ_i ds_ij q_i``.

    Each block's ``P`` is recomputed from ``q``, ``k`` and ``lse`` instead of being
    stored: the memory stays linear in the lengths, for one more block product per block.
    A row without a kept key has ``P = 0``, so it gives and gets no gradient.

    A loop of ``scan`` (as in :func:`forward`) over key blocks, and inside it one over
    query blocks: each key block's ``dk_j`` and ``dv_j`` are sums over the query blocks
    (the inner loop's carry), and ``dq`` gathers every key block's part (the outer loop's
    carry)."""
    device = compat.device(q)
    lead = tuple(d_out.shape[:-2])
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    if n_q == 0 or n_k == 0:                  # nothing attended: no gradient
        return tuple(xp.zeros(x.shape, dtype=x.dtype, device=device) for x in (q, k, v))
    t = Tiles.of(blocks, n_q, n_k, block_q, block_k, xp=xp, device=device)
    rows_d = xp.sum(d_out * out, axis=-1, keepdims=True)          # D: (..., Q, 1)
    queries = {"q": t.queries(q * scale, xp=xp), "do": t.queries(d_out, xp=xp),
               "lse": t.queries(lse, xp=xp), "D": t.queries(rows_d, xp=xp), "rows": t.rows}
    if t.lens is not None:
        queries["lens"] = t.lens
    keys = {"k": t.keys(k, xp=xp), "v": t.keys(v, xp=xp), "cols": t.cols}
    if t.mask is not None:                    # (key blocks, query blocks, ...)
        keys["mask"] = xp.permute_dims(t.mask, (1, 0, *range(2, t.mask.ndim)))
    loop = scan or delegation.scan(xp)

    def key_block(dq: Any, y: Any) -> tuple[Any, tuple[Any, Any]]:
        kj, vj = y["k"], y["v"]

        def query_block(sums: tuple[Any, Any], x: Any) -> tuple[tuple[Any, Any], Any]:
            keep = blocks.keep(x["rows"], y["cols"], x.get("lens"), x.get("mask"), n_k, xp=xp)
            p = block_weights(block_scores(x["q"], kj, keep, xp=xp),
                                        x["lse"], keep, xp=xp)
            ds = p * (x["do"] @ xp.matrix_transpose(vj) - x["D"])
            dk_j, dv_j = sums                       # x["q"] is q · scale
            return ((dk_j + xp.matrix_transpose(ds) @ x["q"],
                     dv_j + xp.matrix_transpose(p) @ x["do"]), (ds @ kj) * scale)

        start = (xp.zeros((*lead, t.block_k, d), dtype=q.dtype, device=device),
                 xp.zeros((*lead, t.block_k, v.shape[-1]), dtype=q.dtype, device=device))
        inner = queries if "mask" not in y else {**queries, "mask": y["mask"]}
        sums, dq_parts = loop(query_block, start, inner)
        return dq + dq_parts, sums

    dq0 = xp.zeros((t.rows.shape[0], *lead, t.block_q, d), dtype=q.dtype, device=device)
    dq, (dk, dv) = loop(key_block, dq0, keys)
    return (kernels.unbroadcast(joined(dq, n_q, xp=xp), q.shape, xp=xp),
            kernels.unbroadcast(joined(dk, n_k, xp=xp), k.shape, xp=xp),
            kernels.unbroadcast(joined(dv, n_k, xp=xp), v.shape, xp=xp))


def hand_derived_attention(*, causal: bool, scale: float, block_q: int, block_k: int,
                           custom_vjp: Callable[..., Any], xp: Any,
                           scan: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """Blockwise attention with its hand-derived gradient attached, for the models.

    Returns ``attention(q, k, v, lens, mask) -> context`` (unchecked: ``lens`` from
    :func:`xpseq.core.masking.lengths_for` or ``None``, ``mask`` boolean or ``None``) made
    ``custom_vjp(fn, fwd, bwd)`` (``backend.custom_vjp``: a ``jax.custom_vjp`` on JAX, a
    ``torch.autograd.Function`` on PyTorch, the rule that ``value_and_grad`` runs on NumPy).
    The forward pass keeps the context and each row's log-sum-exp; the backward pass is
    :func:`backward`, which recomputes each block's weights from them; both loop with
    ``scan`` (the backend's ``backend.scan``; ``None``: :func:`xpseq.core.delegation.scan`,
    as in :func:`forward`). Automatic
    differentiation through :func:`xpseq.core.blockwise.forward` is the other way to the
    gradient: it stores each block's intermediate arrays instead.

    On PyTorch, where :func:`xpseq.core.delegation.fused_blockwise_attention` applies (CPU
    tensors, masks over keys only, every query row keeping a key: decided at each call),
    the context is PyTorch's fused kernel instead, and autograd runs that kernel's own
    backward (memory linear too); elsewhere, and where it does not apply, the rule above.
    """
    def run(q: Any, k: Any, v: Any, lens: Any, mask: Any) -> tuple[Any, Any]:
        out, lse, _ = forward(q, k, v, BlockMask(lens, mask, causal), scale, block_q, block_k,
                              xp=xp, scan=scan)
        return out, lse

    def fn(q: Any, k: Any, v: Any, lens: Any, mask: Any) -> Any:
        return run(q, k, v, lens, mask)[0]

    def fwd(q: Any, k: Any, v: Any, lens: Any, mask: Any) -> tuple[Any, tuple[Any, ...]]:
        out, lse = run(q, k, v, lens, mask)
        return out, (q, k, v, lens, mask, out, lse)

    def bwd(saved: tuple[Any, ...], d_out: Any) -> tuple[Any, ...]:
        q, k, v, lens, mask, out, lse = saved
        dq, dk, dv = backward(q, k, v, BlockMask(lens, mask, causal), scale, block_q, block_k,
                              out, lse, d_out, xp=xp, scan=scan)
        return dq, dk, dv, None, None

    wrapped: Callable[..., Any] = custom_vjp(fn, fwd, bwd)
    if not delegation.delegates("fused_blockwise_attention", xp):
        return wrapped

    def attention(q: Any, k: Any, v: Any, lens: Any, mask: Any) -> Any:
        out = delegation.fused_blockwise_attention(q, k, v, lens, mask, causal, scale, xp=xp)
        return wrapped(q, k, v, lens, mask) if out is None else out

    return attention
