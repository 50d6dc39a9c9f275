"""The Transformer's attention layer derived by hand: multi-head attention as a chain of the
rules of :mod:`xpseq.core.vjp` (the projections into heads, the scores, the masked softmax
and the pooling, or blockwise attention, the heads merged and the output projection).

:func:`attention_over_heads` is what the layers of
:mod:`xpseq.models.transformer.layers` run (self-attention, whose keys and values they
project, and cross-attention over keys and values projected once per source batch);
:func:`multi_head_attention` is the whole layer from unprojected keys and values, the
hand-derived gradient of :func:`xpseq.core.multi_head_attention`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import array_api_compat as compat

from xpseq.core import blockwise, delegation, kernels, vjp

__all__ = ["attention_over_heads", "multi_head_attention"]


def attention_over_heads(p: Mapping[str, Any], q: Any, kh: Any, vh: Any, keep: Any,
                         num_heads: int, scale: float, *, xp: Any, need_weights: bool = True,
                         causal: bool = False, block: int | None = None,
                         custom_vjp: Callable[..., Any] | None = None,
                         scan: Callable[..., Any] | None = None,
                         ) -> tuple[tuple[Any, Any], Callable[..., Any]]:
    """Multi-head attention of the queries ``q (..., Q, d_q)`` over keys and values already
    projected and split into heads, ``kh, vh (..., H, K, d/H)`` (the rule ``heads`` of
    :mod:`xpseq.core.vjp`; a key/value cache, or an encoder memory projected once): the
    query projection ``W_q, b_q``, the rules ``dot_scores`` and ``attend`` per head over
    the keys ``keep`` keeps (a bool mask that broadcasts to ``(..., Q, K)``, or ``None``),
    the heads merged and the output projection ``W_o, b_o``.

    Returns ``(out (..., Q, d_out), weights (..., H, Q, K) or None)`` and
    ``backprop(d_out, d_weights=None) -> (dq, d_kh, d_vh, grads)`` with ``grads`` the
    gradients of those of ``W_q, b_q, W_o, b_o`` that ``p`` holds (not ``None``). With
    ``need_weights=False``, where the library has a fused attention kernel and every row
    keeps a key (:func:`xpseq.core.delegation.fused_attention`), the context is computed by
    it and ``backprop`` (when called, e.g. by PyTorch asked for hand-derived gradients)
    recomputes the weights it needs.

    ``causal=True`` also masks the keys after each query (``j > i``: teacher forcing's
    self-attention), without the caller building that ``(Q, K)`` mask. With ``block``
    (and ``need_weights=False``) the context is :func:`xpseq.core.blockwise_attention`'s,
    in blocks of ``block`` queries and keys, and ``backprop`` is
    :func:`xpseq.core.blockwise.backward`: no ``(Q, K)`` array in either pass. Given
    ``custom_vjp``
    (``backend.custom_vjp``, for a caller differentiated by the library's own autodiff),
    that context is :func:`xpseq.core.blockwise.hand_derived_attention`'s: the library's
    differentiation runs that backward too, instead of keeping every block's arrays.
    ``scan`` is the blockwise path's loop over blocks (the backend's ``backend.scan``;
    ``None``: :func:`xpseq.core.delegation.scan`).
    """
    qh, q_bp = vjp.heads(q, p["W_q"], p.get("b_q"), num_heads, xp=xp)
    keep_c = kernels.heads_keep(keep, xp=xp)
    if block is not None:
        if need_weights:
            raise ValueError("attention_over_heads: need_weights=True asks for the weights, "
                             "which the blockwise path (block=...) never builds")
        return _blockwise_over_heads(p, qh, q_bp, kh, vh, blockwise.BlockMask(
            mask=keep_c, causal=causal), num_heads, scale, block, xp=xp, custom_vjp=custom_vjp,
            scan=scan)

    if causal:                                  # (Q, K): key j <= query i
        rows, cols = (xp.arange(n, dtype=kernels.int_dtype(xp), device=compat.device(qh))
                      for n in (qh.shape[-2], kh.shape[-2]))
        keep_c = blockwise.BlockMask(causal=True).keep(rows, cols, None, keep_c,
                                                       kh.shape[-2], xp=xp)

    def generic() -> tuple[Any, ...]:
        scores, scores_bp = vjp.dot_scores(qh, kh, scale, xp=xp)
        keep_h = None if keep_c is None else kernels.broadcast_keep(keep_c, scores, xp=xp)
        (ctx, w), attend_bp = vjp.attend(scores, vh, keep_h, xp=xp)
        return ctx, w, scores_bp, attend_bp

    context = None if need_weights else delegation.fused_attention(qh, kh, vh, keep_c, scale,
                                                                   xp=xp)
    rules: Sequence[Any]
    fused, weights, rules = context is not None, None, ()
    if not fused:
        context, weights, *rules = generic()
    out, out_bp = vjp.linear(kernels.merge_heads(context, xp=xp, num_heads=num_heads),
                             p["W_o"], p.get("b_o"), xp=xp)

    def backprop(d_out: Any, d_weights: Any = None) -> tuple[Any, Any, Any, dict[str, Any]]:
        scores_bp, attend_bp = generic()[2:] if fused else rules
        d_merged, d_Wo, d_bo = out_bp(d_out)
        d_scores, d_vh, _ = attend_bp(kernels.split_heads(d_merged, num_heads, xp=xp),
                                      d_weights)
        d_qh, d_kh = scores_bp(d_scores)
        dq, grads = _query_side_grads(p, q_bp(d_qh), d_Wo, d_bo)
        return dq, d_kh, d_vh, grads

    return (out, weights if need_weights else None), backprop


def _query_side_grads(p: Mapping[str, Any], query: tuple[Any, Any, Any], d_Wo: Any,
                      d_bo: Any) -> tuple[Any, dict[str, Any]]:
    """``dq`` and the gradients of those of ``W_q, b_q, W_o, b_o`` that ``p`` holds, from
    the query projection's backprop ``(dq, dW_q, db_q)`` and the output projection's."""
    dq, d_Wq, d_bq = query
    grads = {"W_q": d_Wq, "b_q": d_bq, "W_o": d_Wo, "b_o": d_bo}
    return dq, {n: g for n, g in grads.items() if p.get(n) is not None}


def _blockwise_over_heads(p: Mapping[str, Any], qh: Any, q_bp: Callable[..., Any], kh: Any,
                          vh: Any, mask: blockwise.BlockMask, num_heads: int, scale: float,
                          block: int, *, xp: Any, custom_vjp: Callable[..., Any] | None = None,
                          scan: Callable[..., Any] | None = None,
                          ) -> tuple[tuple[Any, None], Callable[..., Any]]:
    """:func:`attention_over_heads` with the context of blockwise attention (through
    :func:`xpseq.core.blockwise.hand_derived_attention` given ``custom_vjp``), its loops
    over blocks those of ``scan``."""
    if custom_vjp is None:
        context, lse, _ = blockwise.forward(qh, kh, vh, mask, scale, block, block, xp=xp,
                                            scan=scan)
    else:
        attention = blockwise.hand_derived_attention(causal=mask.causal, scale=scale,
                                                     block_q=block, block_k=block,
                                                     custom_vjp=custom_vjp, xp=xp, scan=scan)
        context, lse = attention(qh, kh, vh, mask.lens, mask.mask), None
    out, out_bp = vjp.linear(kernels.merge_heads(context, xp=xp, num_heads=num_heads),
                             p["W_o"], p.get("b_o"), xp=xp)

    def backprop(d_out: Any, d_weights: Any = None) -> tuple[Any, Any, Any, dict[str, Any]]:
        d_merged, d_Wo, d_bo = out_bp(d_out)
        saved = lse if lse is not None else blockwise.forward(qh, kh, vh, mask, scale, block,
                                                              block, xp=xp, scan=scan)[1]
        d_qh, d_kh, d_vh = blockwise.backward(qh, kh, vh, mask, scale, block, block, context,
                                              saved,
                                              kernels.split_heads(d_merged, num_heads, xp=xp),
                                              xp=xp, scan=scan)
        dq, grads = _query_side_grads(p, q_bp(d_qh), d_Wo, d_bo)
        return dq, d_kh, d_vh, grads

    return (out, None), backprop


def multi_head_attention(p: Mapping[str, Any], q: Any, k: Any, v: Any, keep: Any,
                         num_heads: int, scale: float, *, xp: Any,
                         need_weights: bool = True) -> tuple[tuple[Any, Any], Callable[..., Any]]:
    """:func:`xpseq.core.multi_head_attention` (``torch.nn.MultiheadAttention``'s layout)
    as a chain of hand-derived rules: the keys and values projected into heads
    (:func:`xpseq.core.vjp.heads <xpseq.core.vjp.attention.heads>`), then
    :func:`attention_over_heads` (the query projection, the scores, the attention per
    head, the heads merged and the output projection).

    ``backprop(d_context, d_weights=None)`` returns ``(dq, dk, dv, grads)`` with ``grads``
    the gradients of the entries of ``p`` that are not ``None``. When ``q``, ``k`` and
    ``v`` are one array (self-attention), the caller adds the three. ``need_weights`` as
    in :func:`attention_over_heads`.
    """
    kh, k_bp = vjp.heads(k, p["W_k"], p.get("b_k"), num_heads, xp=xp)
    vh, v_bp = vjp.heads(v, p["W_v"], p.get("b_v"), num_heads, xp=xp)
    (out, weights), att_bp = attention_over_heads(p, q, kh, vh, keep, num_heads, scale, xp=xp,
                                                  need_weights=need_weights)

    def backprop(d_out: Any, d_weights: Any = None) -> tuple[Any, Any, Any, dict[str, Any]]:
        dq, d_kh, d_vh, grads = att_bp(d_out, d_weights)
        dk, grads["W_k"], grads["b_k"] = k_bp(d_kh)
        dv, grads["W_v"], grads["b_v"] = v_bp(d_vh)
        return dq, dk, dv, {n: g for n, g in grads.items() if p.get(n) is not None}

    return (out, weights), backprop
