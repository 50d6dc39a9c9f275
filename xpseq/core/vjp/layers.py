"""Hand-derived rules of the layers and the elementwise functions: linear, embedding,
sigmoid, tanh, gelu, relu, layer_norm, feed_forward, concat and dropout.

Each rule returns ``(output, backprop)`` as described in :mod:`xpseq.core.vjp`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import array_api_extra as xpx

from .. import delegation, kernels

__all__ = ["linear", "embedding", "sigmoid", "tanh", "gelu", "relu", "ACTIVATIONS",
           "layer_norm", "feed_forward", "concat", "dropout"]


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


#: The rule of each activation of :func:`feed_forward`, by name.
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
