"""Hand-derived rules of attention: the scores (dot_scores, general_scores,
additive_from_projections), the pooling (weighted_sum), both with the softmax (attend), the
projection into heads (heads) and blockwise attention (blockwise_attention).

Each rule returns ``(output, backprop)`` as described in :mod:`xpseq.core.vjp`. Blockwise
attention's backward pass is :func:`xpseq.core.blockwise.backward`, beside its forward
pass; the rule here pairs the two. The chain of these rules through a multi-head attention
layer is :func:`xpseq.models.transformer.backward.attention_over_heads`.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import blockwise, kernels
from .layers import linear
from .softmax import masked_softmax

__all__ = ["dot_scores", "general_scores", "additive_from_projections", "weighted_sum",
           "attend", "blockwise_attention", "heads"]


def dot_scores(q: Any, k: Any, scale: float | None, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``s = c q kᵀ`` (``q (..., Q, d)``, ``k (..., K, d)``, ``c`` the scale or 1):
    ``dq = c ds k``, ``dk = c dsᵀ q``. Leading axes broadcast as in ``matmul``; an input
    that was broadcast gets its gradient summed over the copies."""
    s = kernels.dot_scores(q, k, scale, xp=xp)
    c = 1.0 if scale is None else scale

    def backprop(ds: Any) -> tuple[Any, Any]:
        ds = ds if c == 1.0 else ds * c
        return (kernels.unbroadcast(ds @ k, q.shape, xp=xp),
                kernels.unbroadcast(xp.matrix_transpose(ds) @ q, k.shape, xp=xp))

    return s, backprop


def general_scores(q: Any, k: Any, W: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``s = q W kᵀ`` (``W (d_q, d_k)``): with ``u = q W``, ``s = u kᵀ``:
    ``du = ds k``, ``dk = dsᵀ u``, ``dq = du Wᵀ``, ``dW = Σ_b qᵀ du``."""
    s = kernels.general_scores(q, k, W, xp=xp)

    def backprop(ds: Any) -> tuple[Any, Any, Any]:
        u = q @ W
        du = kernels.unbroadcast(ds @ k, u.shape, xp=xp)
        dW = xp.matrix_transpose(xp.reshape(q, (-1, q.shape[-1]))) \
            @ xp.reshape(du, (-1, du.shape[-1]))
        return (du @ xp.matrix_transpose(W),
                kernels.unbroadcast(xp.matrix_transpose(ds) @ u, k.shape, xp=xp), dW)

    return s, backprop


def additive_from_projections(pq: Any, pk: Any, v: Any, *,
                              xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``s_ij = vᵀ tanh(pq_i + pk_j)`` (``pq (..., Q, h)``, ``pk (..., K, h)``, ``v (h,)``).

    With ``a_ij = tanh(pq_i + pk_j)``: ``dv = Σ_{b,i,j} ds_ij a_ij``; the pre-activation
    gets ``g_ij = ds_ij v ⊙ (1 - a_ij²)``, and the sum ``pq_i + pk_j`` hands it to both:
    ``dpq_i = Σ_j g_ij``, ``dpk_j = Σ_i g_ij``. (The forward's ``(…, Q, K, h)`` tensor is
    recomputed here rather than kept.)
    """
    s = kernels.additive_from_projections(pq, pk, v, xp=xp)

    def backprop(ds: Any) -> tuple[Any, Any, Any]:
        a = xp.tanh(xp.expand_dims(pq, axis=-2) + xp.expand_dims(pk, axis=-3))  # (..., Q, K, h)
        dsa = xp.expand_dims(ds, axis=-1)
        dv = kernels.sum_leading(dsa * a, 1, xp=xp)
        g = dsa * v * (1.0 - a * a)
        dpq = kernels.unbroadcast(xp.sum(g, axis=-2), pq.shape, xp=xp)
        dpk = kernels.unbroadcast(xp.sum(g, axis=-3), pk.shape, xp=xp)
        return dpq, dpk, dv

    return s, backprop


def weighted_sum(weights: Any, values: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``c = w V`` (``w (..., Q, K)``, ``V (..., K, d)``): attention's pooling.
    ``dw = dc Vᵀ``, ``dV = wᵀ dc``."""
    c = weights @ values

    def backprop(dc: Any) -> tuple[Any, Any]:
        return (kernels.unbroadcast(dc @ xp.matrix_transpose(values), weights.shape, xp=xp),
                kernels.unbroadcast(xp.matrix_transpose(weights) @ dc, values.shape, xp=xp))

    return c, backprop


def attend(scores: Any, values: Any, keep: Any, *,
           xp: Any) -> tuple[tuple[Any, Any], Callable[..., Any]]:
    """``w = masked_softmax(scores)``, ``c = w V``: :func:`xpseq.core.attend`.

    The chain of the two rules above: ``backprop(dc, dw=None)`` takes the gradient of the
    context and, optionally, of the weights (which the context's adds to), and returns
    ``(dscores, dvalues, None)``.
    """
    w, softmax_bp = masked_softmax(scores, keep, xp=xp)
    c, pool_bp = weighted_sum(w, values, xp=xp)

    def backprop(dc: Any, dw: Any = None) -> tuple[Any, Any, None]:
        dw_pool, dvalues = pool_bp(dc)
        dscores, _ = softmax_bp(dw_pool if dw is None else dw_pool + dw)
        return dscores, dvalues, None

    return (c, w), backprop


def blockwise_attention(q: Any, k: Any, v: Any, blocks: blockwise.BlockMask, scale: float,
                        block_q: int, block_k: int, *, xp: Any,
                        scan: Callable[..., Any] | None = None,
                        ) -> tuple[Any, Callable[..., Any]]:
    """The context of :func:`xpseq.core.blockwise_attention` (``q (..., Q, d)``, ``k (...,
    K, d)``, ``v (..., K, d_v)``), with a backward pass that stores no ``(Q, K)`` array
    either: ``backprop(d_context) -> (dq, dk, dv)``.

    The forward pass is :func:`xpseq.core.blockwise.forward` (which saves each row's
    log-sum-exp), the backward pass :func:`xpseq.core.blockwise.backward`, derived in its
    docstring beside the forward: each block's weights are recomputed from ``q``, ``k``
    and the log-sum-exp instead of being stored. ``scan`` is the loop over blocks (the
    backend's ``backend.scan``; ``None``: :func:`xpseq.core.delegation.scan`).
    """
    out, lse, _ = blockwise.forward(q, k, v, blocks, scale, block_q, block_k, xp=xp, scan=scan)

    def backprop(d_out: Any) -> tuple[Any, Any, Any]:
        return blockwise.backward(q, k, v, blocks, scale, block_q, block_k, out, lse, d_out,
                                  xp=xp, scan=scan)

    return out, backprop


def heads(x: Any, W: Any, b: Any, num_heads: int, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``x Wᵀ + b`` (:func:`linear`) split into heads, ``(..., T, d) -> (..., H, T, d/H)``: a
    reshape and a transpose, whose backward is the inverse transpose and reshape.
    ``backprop(d_heads) -> (dx, dW, db)``."""
    y, bp = linear(x, W, b, xp=xp)
    return kernels.split_heads(y, num_heads, xp=xp), lambda dy: bp(kernels.merge_heads(dy, xp=xp))
