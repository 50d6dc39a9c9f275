"""Hand-derived rules of the softmaxes and of the loss: masked_softmax (with softmax_back,
its backward from the weights), log_softmax and nll_sum.

Each rule returns ``(output, backprop)`` as described in :mod:`xpseq.core.vjp`.
"""

from __future__ import annotations

from typing import Any, Callable

import array_api_extra as xpx

from .. import kernels

__all__ = ["masked_softmax", "softmax_back", "log_softmax", "nll_sum"]


def masked_softmax(scores: Any, keep: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``w = softmax(scores)`` over the kept positions of the last axis (zero elsewhere).

    ``∂w_j/∂s_k = w_j (δ_jk - w_k)`` for kept ``j, k``, so
    ``ds_k = Σ_j dw_j w_j (δ_jk - w_k) = w_k (dw_k - Σ_j w_j dw_j)``.
    Masked positions have ``w_k = 0`` and get exactly zero; so does every position of a row
    with nothing kept (its weights are the constant zero).
    """
    w = kernels.masked_softmax(scores, keep, xp=xp)
    return w, lambda dw: (softmax_back(w, dw, xp=xp), None)


def softmax_back(w: Any, dw: Any, *, xp: Any) -> Any:
    """:func:`masked_softmax`'s backward pass from its weights ``w``:
    ``ds = w ⊙ (dw - Σ_k w_k dw_k)`` over the last axis."""
    return w * (dw - xp.sum(w * dw, axis=-1, keepdims=True))


def log_softmax(x: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``y = x - logsumexp(x)`` over the last axis.

    ``∂y_j/∂x_k = δ_jk - softmax(x)_k``, so ``dx = dy - softmax(x) Σ_j dy_j`` with
    ``softmax(x) = e^y``.
    """
    y = kernels.log_softmax(x, axis=-1, xp=xp)

    def backprop(dy: Any) -> tuple[Any]:
        return (dy - xp.exp(y) * xp.sum(dy, axis=-1, keepdims=True),)

    return y, backprop


def nll_sum(logits: Any, targets: Any, pad_id: int | None, *, xp: Any,
            smoothing: float = 0.0) -> tuple[tuple[Any, Any], Callable[..., Any]]:
    """``total = -Σ_{real tokens} Σ_v q_v log softmax(logits)_v`` and the count of real
    tokens, with the target distribution ``q = (1 - ε) onehot(target) + ε / V``
    (``ε = smoothing``; 0 gives the plain negative log-likelihood).

    With ``p = softmax(logits)`` and ``r`` = 1 for real tokens, 0 for ``pad_id``:
    ``∂total/∂logits_v = r (p_v - q_v)`` (log-softmax's rule with ``dy = -q``, using
    ``Σ_v q_v = 1``). ``backprop(d_total)`` returns ``(dlogits, None)``; the count has no
    gradient.
    """
    (total, count), logp = kernels.nll_parts(logits, targets, pad_id, xp=xp,
                                             smoothing=smoothing)

    def backprop(d_total: Any) -> tuple[Any, None]:
        p = xp.exp(logp)
        target = xpx.one_hot(targets, logits.shape[-1], dtype=logits.dtype)
        if smoothing:
            target = (1.0 - smoothing) * target + smoothing / logits.shape[-1]
        real = xp.ones_like(p[..., :1]) if pad_id is None else \
            xp.astype(xp.expand_dims(targets != pad_id, axis=-1), logits.dtype)
        return (p - target) * (real * d_total), None

    return (total, count), backprop
