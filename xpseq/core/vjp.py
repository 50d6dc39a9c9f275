"""Hand-derived backward passes: how NumPy gets gradients without autodiff.

Every function here runs a core forward kernel (the same one JAX and PyTorch run) and
returns its output together with a *backprop* callback, in the style of Thinc::

    y, backprop = linear(x, W, b, xp=xp)
    dx, dW, db = backprop(dy)          # the vector-Jacobian product: dy ↦ dy · ∂y/∂inputs

``backprop`` takes the gradient of a scalar loss with respect to the output (same shape as
the output) and returns the gradients with respect to the inputs, in the order of the
arguments (``None`` for integer and boolean inputs such as ids and masks). Each rule's
derivation is in its docstring; ``⊙`` is the elementwise product and ``Σ_b`` a sum over
the leading (batch) axes. Everything is written against the array API, so the same rules
run on NumPy, JAX, PyTorch and ``array_api_strict`` arrays, and the parity tests compare
them with ``jax.vjp``, ``torch.autograd`` and central finite differences.

:func:`defvjp` attaches a rule to a function; the numpy and array_api_strict backends'
``value_and_grad`` use that rule (``jax.custom_vjp`` has the same idea). These kernels do
not validate their inputs: they sit behind the public functions, which do.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import array_api_compat as compat
import array_api_extra as xpx

from . import blockwise, delegation, kernels
from .loops import span_steps

__all__ = ["defvjp", "linear", "embedding", "sigmoid", "tanh", "gelu", "relu", "layer_norm",
           "feed_forward", "concat", "dropout",
           "masked_softmax", "log_softmax", "nll_sum", "dot_scores", "general_scores",
           "additive_from_projections", "weighted_sum", "attend", "blockwise_attention",
           "heads", "attention_over_heads", "multi_head_attention",
           "lstm_step", "gru_step", "lstm_back", "gru_back", "softmax_back",
           "run_sequence", "CELL_STEPS", "CELL_BACKS"]


def defvjp(fn: Callable[..., Any], rule: Callable[..., Any]) -> Callable[..., Any]:
    """Attach a hand-derived rule to ``fn`` and return ``fn``.

    ``rule(*args)`` must return ``(fn(*args), backprop)`` where ``backprop(cotangent)``
    returns one gradient per positional argument (``None`` where there is none). The
    numpy and array_api_strict backends' ``value_and_grad(fn)`` call the rule; JAX and
    PyTorch ignore it and differentiate ``fn`` themselves.
    """
    setattr(fn, "vjp", rule)
    return fn


# --------------------------------------------------------------------------- layers


def linear(x: Any, W: Any, b: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``y = x Wᵀ + b`` with ``x (..., I)``, ``W (O, I)``, ``b (O,)`` or ``None``.

    ``y_o = Σ_i x_i W_oi + b_o``, so ``∂y_o/∂x_i = W_oi``, ``∂y_o/∂W_oi = x_i``,
    ``∂y_o/∂b_o = 1``: ``dx = dy W``, ``dW = Σ_b dyᵀ x`` (one ``tensordot`` over every
    leading axis of ``dy`` and ``x``), ``db = Σ_b dy``.
    """
    y = kernels.linear(x, W, b, xp=xp)

    def backprop(dy: Any) -> tuple[Any, Any, Any]:
        dx = dy @ W
        # A tensordot over the leading axes rather than a matrix product of the flattened
        # (N, O)ᵀ and (N, I): the same sum, and XLA's CPU backend turns the tensordot into
        # its fast matrix-product kernel, where it runs the flattened form 1.4-1.8x slower.
        leading = list(range(dy.ndim - 1))
        dW = xp.tensordot(dy, x, axes=(leading, leading))
        db = None if b is None else kernels.sum_leading(dy, 1, xp=xp)
        return dx, dW, db

    return y, backprop


def embedding(ids: Any, E: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``y[..., :] = E[ids[...], :]`` with ``E (V, E)``.

    Each output row is a copy of one row of ``E``, so ``dE[v] = Σ_{positions with id v} dy``:
    the rows of ``dy`` scatter-added into ``E``'s shape. The array API has no scatter-add;
    ``dE = onehot(ids)ᵀ dy`` with ``onehot (N, V)`` is the same sum as one matrix product.
    """
    y = kernels.embedding(ids, E, xp=xp)

    def backprop(dy: Any) -> tuple[None, Any]:
        onehot = xpx.one_hot(xp.reshape(ids, (-1,)), E.shape[0], dtype=dy.dtype)  # (N, V)
        return None, xp.matrix_transpose(onehot) @ xp.reshape(dy, (-1, E.shape[1]))

    return y, backprop


def sigmoid(x: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``y = σ(x) = 1 / (1 + e^{-x})``: ``dy/dx = e^{-x} / (1 + e^{-x})² = y (1 - y)``."""
    y = kernels.sigmoid(x, xp=xp)
    return y, lambda dy: (dy * y * (1.0 - y),)


def tanh(x: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``y = tanh x``: ``dy/dx = 1 / cosh² x = 1 - tanh² x = 1 - y²``."""
    y = xp.tanh(x)
    return y, lambda dy: (dy * (1.0 - y * y),)


def gelu(x: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """GELU's tanh form ``y = x/2 (1 + t)``, ``t = tanh(u)``, ``u = c (x + a x³)``
    (``c = sqrt(2/π)``, ``a = 0.044715``): ``dy/dx = (1 + t)/2 + x/2 (1 - t²) c (1 + 3a x²)``."""
    t = xp.tanh(kernels.GELU_C * (x + kernels.GELU_A * x * x * x))
    y = 0.5 * x * (1.0 + t)

    def backprop(dy: Any) -> tuple[Any]:
        slope = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kernels.GELU_C * (
            1.0 + 3.0 * kernels.GELU_A * x * x)
        return (dy * slope,)

    return y, backprop


def relu(x: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``y = max(x, 0)``: ``dy/dx`` is 1 where ``x > 0``, else 0 (0 at ``x = 0``, as
    PyTorch and JAX)."""
    y = kernels.relu(x, xp=xp)
    # y > 0 exactly where x > 0: the mask is formed only if the backward pass runs (a
    # decoder step, which never backpropagates, does one operation fewer per layer).
    return y, lambda dy: (delegation.relu_backward(dy, y, xp=xp),)


ACTIVATIONS = {"relu": relu, "gelu": gelu}


def layer_norm(x: Any, gamma: Any, beta: Any, eps: float, *,
               xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``y = γ ⊙ x̂ + β`` with ``x̂ = (x - μ) s``, ``s = 1 / sqrt(σ² + eps)`` over the last
    axis (``n`` features, biased ``σ²``).

    Backward, with ``g = dy ⊙ γ``: ``dx = s (g - mean(g) - x̂ mean(g ⊙ x̂))`` (the mean and
    the variance both depend on every feature), ``dγ = Σ_b dy ⊙ x̂``, ``dβ = Σ_b dy``.
    ``backprop(dy)`` returns ``(dx, dγ, dβ)``. On PyTorch both directions run its fused
    kernels, which compute the same (:func:`xpseq.core.delegation.fused_layer_norm`).
    """
    fused = delegation.fused_layer_norm(x, gamma, beta, eps, xp=xp)
    if fused is not None:
        return fused
    y, normed, inv_std = kernels.layer_norm_parts(x, gamma, beta, eps, xp=xp)

    def backprop(dy: Any) -> tuple[Any, Any, Any]:
        g = dy * gamma
        dx = inv_std * (g - xp.mean(g, axis=-1, keepdims=True)
                        - normed * xp.mean(g * normed, axis=-1, keepdims=True))
        return dx, kernels.sum_leading(dy * normed, 1, xp=xp), kernels.sum_leading(dy, 1, xp=xp)

    return y, backprop


def feed_forward(p: Mapping[str, Any], x: Any, activation: str, keep: Any, rate: float, *,
                 xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``y = W_2 dropout(act(W_1 x + b_1)) + b_2``: the chain of :func:`linear`, the
    activation's rule, :func:`dropout` and :func:`linear`. ``backprop(dy)`` returns
    ``(dx, {"W_1", "b_1", "W_2", "b_2"})``."""
    pre, first_bp = linear(x, p["W_1"], p["b_1"], xp=xp)
    h, act_bp = ACTIVATIONS[activation](pre, xp=xp)
    drop_bp = None
    if keep is not None:
        h, drop_bp = dropout(h, keep, rate, xp=xp)
    y, second_bp = linear(h, p["W_2"], p["b_2"], xp=xp)

    def backprop(dy: Any) -> tuple[Any, dict[str, Any]]:
        dh, d_W2, d_b2 = second_bp(dy)
        if drop_bp is not None:
            (dh, _) = drop_bp(dh)
        (d_pre,) = act_bp(dh)
        dx, d_W1, d_b1 = first_bp(d_pre)
        return dx, {"W_1": d_W1, "b_1": d_b1, "W_2": d_W2, "b_2": d_b2}

    return y, backprop


def concat(arrays: list[Any], *, axis: int = -1, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``y = [a; b; ...]`` along ``axis``: each input gets its own slice of ``dy`` back."""
    y = xp.concat(arrays, axis=axis)
    sizes = [a.shape[axis] for a in arrays]

    def backprop(dy: Any) -> tuple[Any, ...]:
        out, start = [], 0
        ax = axis % dy.ndim
        for size in sizes:
            index = tuple(slice(start, start + size) if i == ax else slice(None)
                          for i in range(dy.ndim))
            out.append(dy[index])
            start += size
        return tuple(out)

    return y, backprop


def dropout(x: Any, keep: Any, rate: float, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """Inverted dropout ``y = keep ⊙ x / (1 - rate)``: linear in ``x``, so
    ``dx = keep ⊙ dy / (1 - rate)`` (the same mask, the same scale)."""
    y = kernels.dropout(x, keep, rate, xp=xp)
    return y, lambda dy: (kernels.dropout(dy, keep, rate, xp=xp), None)


# ------------------------------------------------------------------------ masking


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


# ---------------------------------------------------------------------- attention


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
                        block_q: int, block_k: int, *,
                        xp: Any) -> tuple[Any, Callable[..., Any]]:
    """The context of :func:`xpseq.core.blockwise_attention` (``q (..., Q, d)``, ``k (...,
    K, d)``, ``v (..., K, d_v)``), with a backward pass that stores no ``(Q, K)`` array
    either: ``backprop(d_context) -> (dq, dk, dv)``.

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
    """
    out, lse, _ = blockwise.forward(q, k, v, blocks, scale, block_q, block_k, xp=xp)

    def backprop(d_out: Any) -> tuple[Any, Any, Any]:
        return blockwise.backward(q, k, v, blocks, scale, block_q, block_k, out, lse, d_out,
                              xp=xp)

    return out, backprop


def heads(x: Any, W: Any, b: Any, num_heads: int, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """``x Wᵀ + b`` (:func:`linear`) split into heads, ``(..., T, d) -> (..., H, T, d/H)``: a
    reshape and a transpose, whose backward is the inverse transpose and reshape.
    ``backprop(d_heads) -> (dx, dW, db)``."""
    y, bp = linear(x, W, b, xp=xp)
    return kernels.split_heads(y, num_heads, xp=xp), lambda dy: bp(kernels.merge_heads(dy, xp=xp))


def attention_over_heads(p: Mapping[str, Any], q: Any, kh: Any, vh: Any, keep: Any,
                         num_heads: int, scale: float, *, xp: Any, need_weights: bool = True,
                         causal: bool = False, block: int | None = None,
                         custom_vjp: Callable[..., Any] | None = None,
                         ) -> tuple[tuple[Any, Any], Callable[..., Any]]:
    """Multi-head attention of the queries ``q (..., Q, d_q)`` over keys and values already
    projected and split into heads, ``kh, vh (..., H, K, d/H)`` (:func:`heads`; a key/value
    cache, or an encoder memory projected once): the query projection ``W_q, b_q``,
    :func:`dot_scores`, :func:`attend` per head over the keys ``keep`` keeps (a bool mask
    that broadcasts to ``(..., Q, K)``, or ``None``), the heads merged and the output
    projection ``W_o, b_o``.

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
    """
    qh, q_bp = heads(q, p["W_q"], p.get("b_q"), num_heads, xp=xp)
    keep_c = kernels.heads_keep(keep, xp=xp)
    if block is not None:
        if need_weights:
            raise ValueError("attention_over_heads: need_weights=True asks for the weights, "
                             "which the blockwise path (block=...) never builds")
        return _blockwise_over_heads(p, qh, q_bp, kh, vh, blockwise.BlockMask(
            mask=keep_c, causal=causal), num_heads, scale, block, xp=xp, custom_vjp=custom_vjp)

    if causal:                                  # (Q, K): key j <= query i
        rows, cols = (xp.arange(n, dtype=kernels.int_dtype(xp), device=compat.device(qh))
                      for n in (qh.shape[-2], kh.shape[-2]))
        keep_c = blockwise.BlockMask(causal=True).keep(rows, cols, None, keep_c,
                                                       kh.shape[-2], xp=xp)

    def generic() -> tuple[Any, ...]:
        scores, scores_bp = dot_scores(qh, kh, scale, xp=xp)
        keep_h = None if keep_c is None else kernels.broadcast_keep(keep_c, scores, xp=xp)
        (ctx, w), attend_bp = attend(scores, vh, keep_h, xp=xp)
        return ctx, w, scores_bp, attend_bp

    context = None if need_weights else delegation.fused_attention(qh, kh, vh, keep_c, scale,
                                                                   xp=xp)
    rules: Sequence[Any]
    fused, weights, rules = context is not None, None, ()
    if not fused:
        context, weights, *rules = generic()
    out, out_bp = linear(kernels.merge_heads(context, xp=xp, num_heads=num_heads), p["W_o"],
                         p.get("b_o"), xp=xp)

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
                          ) -> tuple[tuple[Any, None], Callable[..., Any]]:
    """:func:`attention_over_heads` with the context of blockwise attention (through
    :func:`xpseq.core.blockwise.hand_derived_attention` given ``custom_vjp``)."""
    if custom_vjp is None:
        context, lse, _ = blockwise.forward(qh, kh, vh, mask, scale, block, block, xp=xp)
    else:
        attention = blockwise.hand_derived_attention(causal=mask.causal, scale=scale,
                                                     block_q=block, block_k=block,
                                                     custom_vjp=custom_vjp, xp=xp)
        context, lse = attention(qh, kh, vh, mask.lens, mask.mask), None
    out, out_bp = linear(kernels.merge_heads(context, xp=xp, num_heads=num_heads), p["W_o"],
                         p.get("b_o"), xp=xp)

    def backprop(d_out: Any, d_weights: Any = None) -> tuple[Any, Any, Any, dict[str, Any]]:
        d_merged, d_Wo, d_bo = out_bp(d_out)
        saved = lse if lse is not None else blockwise.forward(qh, kh, vh, mask, scale, block,
                                                              block, xp=xp)[1]
        d_qh, d_kh, d_vh = blockwise.backward(qh, kh, vh, mask, scale, block, block, context, saved,
                                          kernels.split_heads(d_merged, num_heads, xp=xp),
                                          xp=xp)
        dq, grads = _query_side_grads(p, q_bp(d_qh), d_Wo, d_bo)
        return dq, d_kh, d_vh, grads

    return (out, None), backprop


def multi_head_attention(p: Mapping[str, Any], q: Any, k: Any, v: Any, keep: Any,
                         num_heads: int, scale: float, *, xp: Any,
                         need_weights: bool = True) -> tuple[tuple[Any, Any], Callable[..., Any]]:
    """:func:`xpseq.core.multi_head_attention` (``torch.nn.MultiheadAttention``'s layout)
    as the chain of the rules above: the keys and values projected into heads
    (:func:`heads`), then :func:`attention_over_heads` (the query projection, the scores,
    the attention per head, the heads merged and the output projection).

    ``backprop(d_context, d_weights=None)`` returns ``(dq, dk, dv, grads)`` with ``grads``
    the gradients of the entries of ``p`` that are not ``None``. When ``q``, ``k`` and
    ``v`` are one array (self-attention), the caller adds the three. ``need_weights`` as
    in :func:`attention_over_heads`.
    """
    kh, k_bp = heads(k, p["W_k"], p.get("b_k"), num_heads, xp=xp)
    vh, v_bp = heads(v, p["W_v"], p.get("b_v"), num_heads, xp=xp)
    (out, weights), att_bp = attention_over_heads(p, q, kh, vh, keep, num_heads, scale, xp=xp,
                                                  need_weights=need_weights)

    def backprop(d_out: Any, d_weights: Any = None) -> tuple[Any, Any, Any, dict[str, Any]]:
        dq, d_kh, d_vh, grads = att_bp(d_out, d_weights)
        dk, grads["W_k"], grads["b_k"] = k_bp(d_kh)
        dv, grads["W_v"], grads["b_v"] = v_bp(d_vh)
        return dq, dk, dv, {n: g for n, g in grads.items() if p.get(n) is not None}

    return (out, weights), backprop


# ---------------------------------------------------------------------- recurrent


def lstm_step(xw: Any, state: tuple[Any, Any], p: Mapping[str, Any], *,
              xp: Any) -> tuple[tuple[Any, Any], Callable[..., Any]]:
    """One LSTM step from ``xw = W_ih x + b_ih`` (``(B, 4H)``) and ``state = (h, c)``.

    Forward: ``[i; f; g; o] = σ, σ, tanh, σ of (xw + W_hh h + b_hh)``,
    ``c' = f ⊙ c + i ⊙ g``, ``h' = o ⊙ tanh c'``.

    Backward, given ``(dh', dc')``: ``do = dh' ⊙ tanh c'``; ``c'`` collects
    ``dc̃ = dc' + dh' ⊙ o ⊙ (1 - tanh² c')``; then ``di = dc̃ ⊙ g``, ``df = dc̃ ⊙ c``,
    ``dg = dc̃ ⊙ i``, ``dc = dc̃ ⊙ f``. Through the nonlinearities (σ' = σ(1-σ),
    tanh' = 1 - tanh²) to the pre-activation ``da = [di i(1-i); df f(1-f); dg (1-g²);
    do o(1-o)]``; ``dxw = da``, ``dh = da W_hh``, ``dW_hh = daᵀ h``, ``db_hh = Σ_b da``.

    ``backprop(dh', dc')`` returns ``(dxw, (dh, dc), {"W_hh": ..., "b_hh": ...})``.
    """
    h, c = state
    (h_new, c_new), parts = kernels.lstm_parts(xw, state, p, xp=xp)

    def backprop(dh_new: Any, dc_new: Any) -> tuple[Any, ...]:
        da, _, (_, dc) = lstm_back(parts, state, dh_new, dc_new, xp=xp)
        grads = {"W_hh": xp.matrix_transpose(da) @ h, "b_hh": xp.sum(da, axis=0)}
        return da, (da @ p["W_hh"], dc), grads

    return (h_new, c_new), backprop


def lstm_back(parts: tuple[Any, ...], state: tuple[Any, ...], dh_new: Any, dc_new: Any, *,
              xp: Any) -> tuple[Any, Any, tuple[Any, Any]]:
    """:func:`lstm_step`'s backward pass from the step's saved values, without its matrix
    products: ``parts`` is :func:`xpseq.core.kernels.lstm_parts`'s ``(i, f, g, o, tanh c')``
    and ``state`` the ``(h, c)`` the step started from. Returns ``(da, dhw, (None, dc))``:
    the gradient of the gates' pre-activation ``da`` (which is ``dxw``), that of ``W_hh h +
    b_hh`` (``da`` again), and the state's gradient but for the products: ``h`` reaches the
    step only through ``W_hh`` (``dh = da W_hh``). ``dW_hh = daᵀ h`` and ``db_hh = Σ_b da``
    are left to the caller, which may sum them over many steps at once."""
    i, f, g, o, tanh_c = parts
    c = state[1]
    do = dh_new * tanh_c
    dc_total = dc_new + dh_new * o * (1.0 - tanh_c * tanh_c)
    da = xp.concat([dc_total * g * i * (1.0 - i), dc_total * c * f * (1.0 - f),
                    dc_total * i * (1.0 - g * g), do * o * (1.0 - o)], axis=-1)
    return da, da, (None, dc_total * f)


def gru_step(xw: Any, state: tuple[Any], p: Mapping[str, Any], *,
             xp: Any) -> tuple[tuple[Any], Callable[..., Any]]:
    """One GRU step from ``xw = W_ih x + b_ih`` (``(B, 3H)``) and ``state = (h,)``.

    Forward, with ``hw = W_hh h + b_hh`` split into ``hw_r, hw_z, hw_n``:
    ``r = σ(xw_r + hw_r)``, ``z = σ(xw_z + hw_z)``, ``n = tanh(xw_n + r ⊙ hw_n)``,
    ``h' = (1 - z) ⊙ n + z ⊙ h``.

    Backward, given ``dh'``: ``dn = dh' ⊙ (1 - z)``, ``dz = dh' ⊙ (h - n)``, and ``h``
    gets ``dh' ⊙ z`` directly. Pre-activations: ``a_n = dn (1 - n²)``,
    ``a_z = dz z (1 - z)``, ``a_r = (a_n ⊙ hw_n) r (1 - r)``. Then
    ``dxw = [a_r; a_z; a_n]`` and ``dhw = [a_r; a_z; a_n ⊙ r]`` (``r`` gates only the
    recurrent half of ``n``), so ``dh += dhw W_hh``, ``dW_hh = dhwᵀ h``, ``db_hh = Σ_b dhw``.

    ``backprop(dh')`` returns ``(dxw, (dh,), {"W_hh": ..., "b_hh": ...})``.
    """
    (h,) = state
    (h_new,), parts = kernels.gru_parts(xw, state, p, xp=xp)

    def backprop(dh_new: Any) -> tuple[Any, ...]:
        dxw, dhw, (dh_direct,) = gru_back(parts, state, dh_new, xp=xp)
        grads = {"W_hh": xp.matrix_transpose(dhw) @ h, "b_hh": xp.sum(dhw, axis=0)}
        return dxw, (dh_direct + dhw @ p["W_hh"],), grads

    return (h_new,), backprop


def gru_back(parts: tuple[Any, ...], state: tuple[Any, ...], dh_new: Any, *,
             xp: Any) -> tuple[Any, Any, tuple[Any]]:
    """:func:`gru_step`'s backward pass from the step's saved values, without its matrix
    products: ``parts`` is :func:`xpseq.core.kernels.gru_parts`'s ``(r, z, n, hw)`` and
    ``state`` the ``(h,)`` the step started from. Returns ``(dxw, dhw, (dh' ⊙ z,))``: the
    caller adds ``dhw W_hh`` to the last to get ``dh``, and forms ``dW_hh = dhwᵀ h`` and
    ``db_hh = Σ_b dhw`` (over one step or many at once)."""
    r, z, n, hw = parts
    (h,) = state
    size = h.shape[-1]
    dn = dh_new * (1.0 - z)
    a_n = dn * (1.0 - n * n)
    a_z = dh_new * (h - n) * z * (1.0 - z)
    a_r = a_n * hw[..., 2 * size:] * r * (1.0 - r)
    dxw = xp.concat([a_r, a_z, a_n], axis=-1)
    dhw = xp.concat([a_r, a_z, a_n * r], axis=-1)
    return dxw, dhw, (dh_new * z,)


CELL_STEPS: dict[str, Callable[..., tuple[tuple[Any, ...], Callable[..., Any]]]] = {
    "lstm": lstm_step, "gru": gru_step}

#: Each cell's backward pass from saved values: ``back(parts, state, *d_new_state) ->
#: (dxw, dhw, d_state)`` with ``d_state`` the state's gradient but for ``dhw W_hh`` (which
#: the caller adds to its ``h`` entry; ``None`` there for the LSTM).
CELL_BACKS: dict[str, Callable[..., tuple[Any, Any, Any]]] = {"lstm": lstm_back,
                                                              "gru": gru_back}


def _sequence_step_back(cell: str, parts: tuple[Any, ...], state: tuple[Any, ...],
                        W_hh: Any, d_state: tuple[Any, ...], d_out: Any, valid_t: Any, *,
                        xp: Any) -> tuple[tuple[Any, ...], Any, Any]:
    """One step of backpropagation through a padded recurrence, without the step's weight
    products: the cell's backward (:data:`CELL_BACKS`) from its saved ``parts`` and the
    ``state`` it started from, given ``d_state`` (the next state's gradient) and ``d_out``
    (its output's), where ``valid_t`` ``(B, 1)``; a padded row passes ``d_state`` straight
    through. Returns ``(d_state_prev, dxw, dhw)``: ``W_hh``'s and ``b_hh``'s gradients are
    ``Σ dhwᵀ h`` and ``Σ dhw``, left to the caller to form over many steps at once."""
    d_state = (d_state[0] + xp.where(valid_t, d_out, 0.0), *d_state[1:])
    d_cell = tuple(xp.where(valid_t, d, 0.0) for d in d_state)
    dxw, dhw, direct = CELL_BACKS[cell](parts, state, *d_cell, xp=xp)
    dh = dhw @ W_hh
    d_prev = (dh if direct[0] is None else dh + direct[0], *direct[1:])
    return tuple(xp.where(valid_t, dp, d) for dp, d in zip(d_prev, d_state)), dxw, dhw


def run_sequence(cell: str, p: Mapping[str, Any], xs: Any, lengths: Any,
                 state0: tuple[Any, ...], *, reverse: bool,
                 xp: Any) -> tuple[tuple[Any, tuple[Any, ...]], Callable[..., Any]]:
    """Backpropagation through time for :func:`xpseq.core.recurrent.run_sequence`.

    The forward loop is the runner's (:func:`xpseq.core.kernels.keep_valid` after every
    cell step); each step keeps its gates and the state it started from. Backward walks
    the steps in the opposite order. A step
    ``s_t = valid ? cell(s_{t-1}) : s_{t-1}`` routes ``ds_t`` into the cell where the step
    is real and straight through to ``s_{t-1}`` where it is padding; the output ``h`` of a
    real step adds its ``d_outputs`` to ``dh``. The input projection ``xw = xs W_ihᵀ + b_ih``
    of all steps is one :func:`linear`, and so is its backward.

    Returns ``((outputs (B, T, H), final_state), backprop)`` with
    ``backprop(d_outputs, d_final) -> (dxs, d_state0, {"W_ih", "b_ih", "W_hh", "b_hh"})``.
    The loop carries only the state's gradient (:func:`_sequence_step_back` each step);
    ``W_hh``'s and ``b_hh``'s gradients are one product and one sum over all steps after it
    (padded steps add zeros). The steps that are padding in every row (a batch padded past
    its longest sequence) are not run: their outputs and gradients are zero
    (:func:`xpseq.core.loops.span_steps`).
    """
    parts_of = kernels.PARTS[cell]
    steps = xs.shape[1]
    xw, linear_bp = linear(xs, p["W_ih"], p["b_ih"], xp=xp)               # (B, T, G H)
    valid = xp.expand_dims(kernels.sequence_mask(lengths, steps, xp=xp), axis=-1)  # (B, T, 1)
    # The steps that are padding in every row change nothing: they are skipped.
    run = span_steps(kernels.valid_span(xp.permute_dims(valid, (1, 0, 2)), xp=xp), steps)
    order = list(reversed(run)) if reverse else list(run)
    state, saved = tuple(state0), []
    outputs = [xp.zeros_like(state0[0])] * steps
    for t in order:
        new, parts = parts_of(xw[:, t, :], state, p, xp=xp)
        saved.append((t, parts, state))
        state, outputs[t] = kernels.keep_valid(new, state, valid[:, t, :], xp=xp)
    out = xp.stack(outputs, axis=1) if steps else xp.zeros(
        (xs.shape[0], 0, state0[0].shape[-1]), dtype=xs.dtype, device=compat.device(xs))

    def backprop(d_outputs: Any, d_final: tuple[Any, ...]) -> tuple[Any, ...]:
        grads = {"W_hh": xp.zeros_like(p["W_hh"]), "b_hh": xp.zeros_like(p["b_hh"])}
        if not steps:
            return (xp.zeros_like(xs), tuple(d_final),
                    {**grads, "W_ih": xp.zeros_like(p["W_ih"]),
                     "b_ih": xp.zeros_like(p["b_ih"])})
        d_state = tuple(d_final)
        d_xw: list[Any] = [xp.zeros_like(xw[:, 0, :])] * steps
        d_hw, h_prev = [], []
        for t, parts, prev in reversed(saved):
            d_state, d_xw[t], d_hw_t = _sequence_step_back(
                cell, parts, prev, p["W_hh"], d_state, d_outputs[:, t, :], valid[:, t, :],
                xp=xp)
            d_hw.append(d_hw_t)
            h_prev.append(prev[0])
        if d_hw:
            dhw = xp.stack(d_hw, axis=0)                                 # (steps run, B, G H)
            grads = {"W_hh": xp.tensordot(dhw, xp.stack(h_prev, axis=0), axes=([0, 1], [0, 1])),
                     "b_hh": xp.sum(dhw, axis=(0, 1))}
        dxs, grads["W_ih"], grads["b_ih"] = linear_bp(xp.stack(d_xw, axis=1))
        return dxs, d_state, grads

    return (out, state), backprop
