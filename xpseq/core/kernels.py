"""The unchecked kernels under the checked public functions of :mod:`xpseq.core`.

A named internal API, in the manner of SciPy's ``_logsumexp`` under ``logsumexp``: every
function here computes and nothing else. None of them validates its inputs, converts
them or looks for their namespace: each takes ``xp`` (the array namespace) as a keyword,
trusts shapes and dtypes, and is safe to call inside ``jax.jit`` and inside a time loop.
The public functions of ``masking``, ``layers``, ``attention``, ``losses`` and
``recurrent`` check their arguments once, then call these; the models call them directly
after checking their own inputs at their public boundary.

``linear``, ``sigmoid`` and ``relu`` are :mod:`xpseq.core.delegation`'s: they call the library's own
function where it has one. ``take_along_last`` is the standard's ``take_along_axis`` over the
last axis, written with ``take`` for a namespace that lacks it. Call a kernel only with
arguments a public function would have accepted: a wrong shape here is a wrong answer or an
error from deep inside the array library, not a clear message.

=====================================  ========================================================
kernel                                 public, checked counterpart
=====================================  ========================================================
linear, embedding, sigmoid,            :mod:`xpseq.core.layers`
dropout, zeros, int_dtype,
layer_norm (and ``_parts``), gelu,
relu, feed_forward,
sinusoidal_positions
sequence_mask, masked_softmax,         :mod:`xpseq.core.masking` (``masked_softmax`` takes the
logsumexp, log_softmax                 boolean keep-mask itself)
nll_sum, nll_parts (with label         :func:`xpseq.core.losses.cross_entropy`
smoothing)
dot_scores, general_scores,            :mod:`xpseq.core.attention`
additive_scores,
additive_from_projections, attend,
split_heads, merge_heads,
head_scores, head_pool,
multi_head_attention
lstm_step, gru_step (and their         :mod:`xpseq.core.recurrent` (cells and
``*_parts``), STEPS,                   ``run_sequence``)
initial_zeros, run_sequence,
keep_valid
=====================================  ========================================================
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, cast

import array_api_compat as compat

from . import delegation, shapes
from .checks import broadcast_shapes
from .delegation import linear, relu, sigmoid
from .loops import scan as python_scan

__all__ = ["linear", "embedding", "sigmoid", "dropout", "zeros", "int_dtype", "sequence_mask",
           "valid_span", "is_narrow", "widened", "masked_softmax", "logsumexp", "log_softmax",
           "take_along_last", "nll_sum", "nll_parts", "dot_scores", "general_scores",
           "additive_scores", "additive_from_projections", "attend",
           "layer_norm", "layer_norm_parts", "gelu", "relu", "ACTIVATIONS", "feed_forward",
           "sinusoidal_positions", "split_heads", "merge_heads", "broadcast_keep", "heads_keep",
           "sum_leading", "unbroadcast",
           "head_scores", "head_pool", "multi_head_attention", "lstm_parts", "gru_parts",
           "lstm_step", "gru_step", "STEPS", "PARTS", "initial_zeros", "run_sequence",
           "run_both_directions", "keep_valid"]


def embedding(ids: Any, E: Any, *, xp: Any) -> Any:
    """``E[ids]``: the rows of ``E (V, E)`` at ``ids (...)``, shape ``(..., E)``
    (:func:`xpseq.core.shapes.take_rows`, which also serves ids of unknown sizes)."""
    return shapes.take_rows(E, ids, xp=xp)


def dropout(x: Any, keep: Any, rate: float, *, xp: Any) -> Any:
    if rate == 0.0:
        return x
    return xp.where(keep, x * (1.0 / (1.0 - rate)), 0.0)


def zeros(shape: tuple[int, ...], like: Any, *, xp: Any) -> Any:
    """Zeros with the dtype and device of ``like``."""
    return xp.zeros(shape, dtype=like.dtype, device=compat.device(like))


def int_dtype(xp: Any) -> Any:
    """The namespace's default integer dtype (``__array_namespace_info__``): ``int64`` on
    NumPy, PyTorch, array_api_strict and JAX in its 64-bit mode, ``int32`` on JAX
    otherwise. Positions, lengths and token ids are made in it."""
    return xp.__array_namespace_info__().default_dtypes()["integral"]


def sequence_mask(lengths: Any, max_len: int | None, *, xp: Any, like: Any = None,
                  axis: int = -1) -> Any:
    """``positions < lengths`` in the default integer dtype (in ``lengths``' own small
    dtype, ``arange`` would wrap: ``int8`` counts no further than 127). ``max_len=None``
    (a lazy array's unknown size) takes the positions along ``axis`` of ``like``."""
    wide = int_dtype(xp)
    if max_len is None:
        steps = shapes.positions(like, axis, xp=xp)
    else:
        steps = xp.arange(max_len, dtype=wide, device=compat.device(lengths))
    return steps < xp.expand_dims(xp.astype(lengths, wide), axis=-1)


def valid_span(valid: Any, *, xp: Any) -> tuple[Any, Any]:
    """``(start, stop)``, 0-d integer arrays: the steps from the first to the last where some
    row of ``valid`` (``(T, B, ...)`` bool) is true (``start >= stop`` when none is), the
    ``span`` of a ``scan`` that may skip the steps that are padding in every row."""
    steps = valid.shape[0]
    t = xp.arange(steps, dtype=int_dtype(xp), device=compat.device(valid))
    if steps == 0:
        return xp.sum(t), xp.sum(t)
    any_valid = xp.any(xp.reshape(valid, (steps, -1)), axis=1)
    return (xp.min(xp.where(any_valid, t, steps)), xp.max(xp.where(any_valid, t + 1, 0)))


def is_narrow(dtype: Any, *, xp: Any) -> bool:
    """Whether ``dtype`` is a floating dtype narrower than float32 (bfloat16, float16): the
    dtypes whose reductions the kernels below accumulate in float32."""
    if dtype == xp.float32 or dtype == xp.float64:
        return False
    return cast(bool, xp.isdtype(dtype, "real floating") and xp.finfo(dtype).bits < 32)


def widened(x: Any, *, xp: Any) -> Any:
    """``x`` in float32 if its dtype :func:`is_narrow`, else ``x`` itself."""
    return xp.astype(x, xp.float32) if is_narrow(x.dtype, xp=xp) else x


def masked_softmax(scores: Any, keep: Any, *, xp: Any) -> Any:
    """Softmax over the last axis; ``keep`` (bool, shape of ``scores``) or ``None``.
    Narrow scores (bfloat16) are exponentiated and summed in float32 and the weights
    returned in their dtype."""
    if scores.shape[-1] == 0:
        return scores
    if is_narrow(scores.dtype, xp=xp):
        return xp.astype(masked_softmax(xp.astype(scores, xp.float32), keep, xp=xp),
                         scores.dtype)
    if keep is None:
        shifted = scores - xp.max(scores, axis=-1, keepdims=True)
        e = xp.exp(shifted)
        return e / xp.sum(e, axis=-1, keepdims=True)
    any_keep = xp.any(keep, axis=-1, keepdims=True)
    row_max = xp.max(xp.where(keep, scores, -math.inf), axis=-1, keepdims=True)
    row_max = xp.where(any_keep, row_max, 0.0)
    # First where: masked positions never reach exp (no inf, so no 0 * inf in the gradient).
    shifted = xp.where(keep, scores - row_max, 0.0)
    # Second where: masked positions are exactly zero, whatever exp(0) gave.
    e = xp.where(keep, xp.exp(shifted), 0.0)
    total = xp.sum(e, axis=-1, keepdims=True)
    # A row with no valid key has total 0; divide it by 1 to get zeros instead of 0/0.
    return e / xp.where(any_keep, total, 1.0)


def logsumexp(x: Any, *, axis: int, keepdims: bool, xp: Any) -> Any:
    if x.shape[axis] == 0:
        shape = tuple(1 if i == axis else n for i, n in enumerate(x.shape))
        out = xp.full(shape, -math.inf, dtype=x.dtype, device=compat.device(x))
        return out if keepdims else xp.squeeze(out, axis=axis)
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0.0)
    total = xp.sum(xp.exp(x - m), axis=axis, keepdims=True)
    positive = total > 0
    out = xp.where(positive, xp.log(xp.where(positive, total, 1.0)) + m, -math.inf)
    return out if keepdims else xp.squeeze(out, axis=axis)


def log_softmax(x: Any, *, axis: int, xp: Any) -> Any:
    """``x - logsumexp(x)``; narrow ``x`` (bfloat16) is computed in, and returned as,
    float32 (log-probabilities are summed into losses and beam scores)."""
    x = widened(x, xp=xp)
    lse = logsumexp(x, axis=axis, keepdims=True, xp=xp)
    finite = xp.isfinite(lse)
    return xp.where(finite, x - xp.where(finite, lse, 0.0), -math.inf)


def take_along_last(x: Any, indices: Any, *, xp: Any) -> Any:
    """``xp.take_along_axis(x, indices, axis=-1)``: ``out[..., j] = x[..., indices[..., j]]``
    (the leading dimensions broadcast; indices in ``[0, x.shape[-1])``).

    The standard has the function since its 2024.12 revision; for a namespace that lacks it
    the same gather is one ``take`` from ``x`` flattened, at the flat positions
    ``row * x.shape[-1] + index`` (exact, any dtype; the shapes must be known)."""
    take_along_axis = getattr(xp, "take_along_axis", None)
    if take_along_axis is not None:
        return take_along_axis(x, indices, axis=-1)
    n, m = x.shape[-1], indices.shape[-1]
    lead = cast(tuple[int, ...],          # sizes known (no lazy dimensions here)
                broadcast_shapes(tuple(x.shape[:-1]), tuple(indices.shape[:-1])))
    wide = int_dtype(xp)
    rows = xp.arange(math.prod(lead), dtype=wide, device=compat.device(indices)) * n
    flat = xp.reshape(xp.astype(xp.broadcast_to(indices, (*lead, m)), wide)
                      + xp.reshape(rows, (*lead, 1)), (-1,))
    values = xp.reshape(xp.broadcast_to(x, (*lead, n)), (-1,))
    return xp.reshape(xp.take(values, flat, axis=0), (*lead, m))


def nll_sum(logits: Any, targets: Any, pad_id: int | None, *, xp: Any,
            smoothing: float = 0.0) -> tuple[Any, Any]:
    """Summed negative log-likelihood of the real tokens, and their number (as a float).

    With ``smoothing = ε > 0`` each token's loss is the cross-entropy against the smoothed
    target ``(1 - ε) onehot(y) + ε / V`` (``torch.nn.functional.cross_entropy``'s
    ``label_smoothing``): ``(1 - ε)(-log p_y) + ε · mean_v(-log p_v)``."""
    return nll_parts(logits, targets, pad_id, xp=xp, smoothing=smoothing)[0]


def nll_parts(logits: Any, targets: Any, pad_id: int | None, *, xp: Any,
              smoothing: float = 0.0) -> tuple[tuple[Any, Any], Any]:
    """``nll_sum``'s ``(total, count)`` and the log-probabilities, which its backward
    pass needs; narrow logits (bfloat16) give float32 log-probabilities and sums."""
    logits = widened(logits, xp=xp)
    logp = log_softmax(logits, axis=-1, xp=xp)
    picked = xp.squeeze(take_along_last(logp, xp.expand_dims(targets, axis=-1), xp=xp),
                        axis=-1)
    if pad_id is None:
        real = xp.ones_like(picked)
    else:
        real = xp.astype(targets != pad_id, logits.dtype)
    if smoothing:
        per_token = (1.0 - smoothing) * picked + smoothing * xp.mean(logp, axis=-1)
        return (-xp.sum(per_token * real), xp.sum(real)), logp
    return (-xp.sum(picked * real), xp.sum(real)), logp


def layer_norm(x: Any, gamma: Any, beta: Any, eps: float, *, xp: Any) -> Any:
    """``gamma ⊙ (x - mean) / sqrt(var + eps) + beta`` over the last axis (biased variance,
    as ``torch.nn.LayerNorm``): PyTorch's own kernel where
    :func:`xpseq.core.delegation.fused_layer_norm` applies."""
    fused = delegation.fused_layer_norm(x, gamma, beta, eps, xp=xp)
    return layer_norm_parts(x, gamma, beta, eps, xp=xp)[0] if fused is None else fused[0]


def layer_norm_parts(x: Any, gamma: Any, beta: Any, eps: float, *,
                     xp: Any) -> tuple[Any, Any, Any]:
    """:func:`layer_norm` and what its backward pass needs: ``x̂`` and ``1 / sqrt(var +
    eps)``. For narrow ``x`` (bfloat16) the statistics and ``x̂`` are float32 and the
    result is returned in ``x``'s dtype."""
    wide = widened(x, xp=xp)
    centred = wide - xp.mean(wide, axis=-1, keepdims=True)
    inv_std = 1.0 / xp.sqrt(xp.mean(centred * centred, axis=-1, keepdims=True) + eps)
    normed = centred * inv_std
    out = normed * gamma + beta
    return (out if wide is x else xp.astype(out, x.dtype)), normed, inv_std


#: ``sqrt(2 / π)`` and the cubic coefficient of GELU's tanh form.
GELU_C, GELU_A = math.sqrt(2.0 / math.pi), 0.044715


def gelu(x: Any, *, xp: Any) -> Any:
    """GELU in its tanh form: ``x/2 · (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))``."""
    return 0.5 * x * (1.0 + xp.tanh(GELU_C * (x + GELU_A * x * x * x)))


ACTIVATIONS = {"relu": relu, "gelu": gelu}


def feed_forward(p: Mapping[str, Any], x: Any, activation: str, keep: Any, rate: float, *,
                 xp: Any) -> Any:
    """``W_2 dropout(act(W_1 x + b_1)) + b_2`` (the Transformer's position-wise block, in
    ``torch.nn.TransformerEncoderLayer``'s order)."""
    h = ACTIVATIONS[activation](linear(x, p["W_1"], p["b_1"], xp=xp), xp=xp)
    if keep is not None:
        h = dropout(h, keep, rate, xp=xp)
    return linear(h, p["W_2"], p["b_2"], xp=xp)


def sinusoidal_positions(positions: Any, d_model: int, dtype: Any, *, xp: Any) -> Any:
    """``PE[p, 2i] = sin(p / 10000^(2i/d))``, ``PE[p, 2i+1] = cos(...)`` for integer
    ``positions (...)``: ``(..., d_model)`` in ``dtype`` (computed in float32 for a narrow
    one: bfloat16 has 8 bits of mantissa, too few for the angles)."""
    device = compat.device(positions)
    work = xp.float32 if is_narrow(dtype, xp=xp) else dtype
    half = xp.arange(0, d_model, 2, dtype=work, device=device)              # 2i
    rates = xp.exp(half * (-math.log(10000.0) / d_model))                  # 10000^(-2i/d)
    angles = xp.expand_dims(xp.astype(positions, work), axis=-1) * rates    # (..., d/2)
    both = xp.stack([xp.sin(angles), delegation.cos(angles, xp=xp)], axis=-1)  # (..., d/2, 2)
    table = xp.reshape(both, shapes.reshape_dims((*angles.shape[:-1], d_model)))
    return table if work == dtype else xp.astype(table, dtype)


def dot_scores(q: Any, k: Any, scale: float | None, *, xp: Any) -> Any:
    scores = q @ xp.matrix_transpose(k)
    return scores if scale is None or scale == 1.0 else scores * scale


def general_scores(q: Any, k: Any, W: Any, *, xp: Any) -> Any:
    return (q @ W) @ xp.matrix_transpose(k)


def additive_scores(q: Any, k: Any, W_q: Any, W_k: Any, v: Any, *, xp: Any) -> Any:
    pq = q @ xp.matrix_transpose(W_q)                      # (..., Q, h)
    pk = k @ xp.matrix_transpose(W_k)                      # (..., K, h)
    return additive_from_projections(pq, pk, v, xp=xp)


def additive_from_projections(pq: Any, pk: Any, v: Any, *, xp: Any) -> Any:
    """``vᵀ tanh(pq_i + pk_j)`` from projected queries ``(..., Q, h)`` and keys ``(..., K, h)``.

    The models project the keys once per source sentence and reuse them at every step.
    """
    hidden = xp.tanh(xp.expand_dims(pq, axis=-2) + xp.expand_dims(pk, axis=-3))  # (..., Q, K, h)
    return xp.squeeze(hidden @ xp.expand_dims(v, axis=-1), axis=-1)


def attend(scores: Any, values: Any, keep: Any, *, xp: Any) -> tuple[Any, Any]:
    weights = masked_softmax(scores, keep, xp=xp)
    return weights @ values, weights


def split_heads(x: Any, num_heads: int, *, xp: Any) -> Any:
    """``(..., T, H * d) -> (..., H, T, d)``. On a lazy array with two or more unknown
    dimensions (``None``), which no reshape can keep, each head's columns are sliced and
    stacked: the same values."""
    *lead, t, width = x.shape
    if not shapes.reshapable(x.shape):
        return shapes.split_last(x, num_heads, axis=-3, xp=xp)
    x = xp.reshape(x, shapes.reshape_dims((*lead, t, num_heads, width // num_heads)))
    n = x.ndim
    return xp.permute_dims(x, (*range(n - 3), n - 2, n - 3, n - 1))


def merge_heads(x: Any, *, xp: Any, num_heads: int | None = None) -> Any:
    """``(..., H, T, d) -> (..., T, H * d)``. On a lazy array with two or more unknown
    dimensions, the heads (``num_heads`` of them, where ``H`` is unknown too) are
    concatenated along the last axis: the same values."""
    if not shapes.reshapable(x.shape):
        h = x.shape[-3] if x.shape[-3] is not None else num_heads
        if h is None:
            raise ValueError("merge_heads: the number of heads is unknown; pass num_heads")
        return shapes.join_last(x, h, axis=x.ndim - 3, xp=xp)
    n = x.ndim
    x = xp.permute_dims(x, (*range(n - 3), n - 2, n - 3, n - 1))
    *lead, t, h, d = x.shape
    return xp.reshape(x, shapes.reshape_dims((*lead, t, h * d)))


def broadcast_keep(keep: Any, scores: Any, *, xp: Any) -> Any:
    """A keep-mask broadcast to the shape of ``scores``; left as it is where that shape has
    unknown sizes (a lazy array: the softmax broadcasts it, with the same weights)."""
    if not shapes.known(scores.shape):
        return keep
    return xp.broadcast_to(keep, tuple(scores.shape))


def heads_keep(keep: Any, *, xp: Any) -> Any:
    """A ``(..., Q, K)`` keep-mask (or ``None``) for every head: ``(..., 1, Q, K)``, which
    broadcasts over the heads axis (whatever their number)."""
    return None if keep is None else xp.expand_dims(keep, axis=-3)


def head_scores(p: Mapping[str, Any], q: Any, k: Any, v: Any, num_heads: int, scale: float,
                *, xp: Any) -> tuple[Any, Any]:
    """Multi-head attention's first half: per-head scores ``(..., H, Q, K)`` and projected
    values ``(..., H, K, d_value / H)``. ``p`` holds ``W_q, W_k, W_v`` and ``b_q, b_k, b_v``
    (each bias may be ``None`` or absent)."""
    qh = split_heads(linear(q, p["W_q"], p.get("b_q"), xp=xp), num_heads, xp=xp)
    kh = split_heads(linear(k, p["W_k"], p.get("b_k"), xp=xp), num_heads, xp=xp)
    vh = split_heads(linear(v, p["W_v"], p.get("b_v"), xp=xp), num_heads, xp=xp)
    return dot_scores(qh, kh, scale, xp=xp), vh


def head_pool(p: Mapping[str, Any], scores: Any, vh: Any, keep: Any, *,
              xp: Any) -> tuple[Any, Any]:
    """Multi-head attention's second half: the masked softmax of every head's ``scores``
    (``keep``: ``None`` or a bool ``(..., Q, K)`` mask, the same for every head), the
    weighted values, the heads merged and projected by ``W_o`` (and ``b_o``). Returns the
    context ``(..., Q, d_out)`` and the weights ``(..., H, Q, K)``."""
    keep_h = None if keep is None else broadcast_keep(heads_keep(keep, xp=xp), scores, xp=xp)
    context, weights = attend(scores, vh, keep_h, xp=xp)
    return (linear(merge_heads(context, xp=xp, num_heads=scores.shape[-3] or vh.shape[-3]),
                   p["W_o"], p.get("b_o"), xp=xp), weights)


def multi_head_attention(p: Mapping[str, Any], q: Any, k: Any, v: Any, keep: Any,
                         num_heads: int, scale: float, *, xp: Any) -> tuple[Any, Any]:
    """:func:`xpseq.core.multi_head_attention` unchecked (:func:`head_scores`, then
    :func:`head_pool`): ``p`` holds ``W_q, W_k, W_v, W_o`` and ``b_q, b_k, b_v, b_o`` (each
    bias may be ``None``); ``keep`` is ``None`` or a bool ``(..., Q, K)`` mask. Returns the
    context ``(..., Q, d_out)`` and the weights ``(..., H, Q, K)``."""
    scores, vh = head_scores(p, q, k, v, num_heads, scale, xp=xp)
    return head_pool(p, scores, vh, keep, xp=xp)


def lstm_parts(xw: Any, state: tuple[Any, ...], p: Mapping[str, Any], *,
                xp: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """One LSTM step: the new state ``(h', c')`` and what its backward pass needs
    (the gates ``i, f, g, o`` after their nonlinearities and ``tanh(c')``)."""
    h, c = state
    gates = xw + linear(h, p["W_hh"], p["b_hh"], xp=xp)
    n = h.shape[-1]
    # One sigmoid over all four blocks (the g block's is computed and dropped): the same
    # values as three separate calls, in a third of the operations, which is what an eager
    # library such as PyTorch pays for at these sizes.
    sig = sigmoid(gates, xp=xp)
    i, f, o = sig[..., :n], sig[..., n:2 * n], sig[..., 3 * n:]
    g = xp.tanh(gates[..., 2 * n:3 * n])
    c = f * c + i * g
    tanh_c = xp.tanh(c)
    return (o * tanh_c, c), (i, f, g, o, tanh_c)


def gru_parts(xw: Any, state: tuple[Any, ...], p: Mapping[str, Any], *,
               xp: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """One GRU step: the new state ``(h',)`` and what its backward pass needs
    (``r``, ``z``, the candidate ``n`` and the recurrent projection ``W_hh h + b_hh``)."""
    (h,) = state
    hw = linear(h, p["W_hh"], p["b_hh"], xp=xp)
    n = h.shape[-1]
    r = sigmoid(xw[..., :n] + hw[..., :n], xp=xp)
    z = sigmoid(xw[..., n:2 * n] + hw[..., n:2 * n], xp=xp)
    cand = xp.tanh(xw[..., 2 * n:] + r * hw[..., 2 * n:])
    return ((1.0 - z) * cand + z * h,), (r, z, cand, hw)


def lstm_step(xw: Any, state: tuple[Any, ...], p: Mapping[str, Any], *, xp: Any) -> tuple[Any, ...]:
    return lstm_parts(xw, state, p, xp=xp)[0]


def gru_step(xw: Any, state: tuple[Any, ...], p: Mapping[str, Any], *, xp: Any) -> tuple[Any, ...]:
    return gru_parts(xw, state, p, xp=xp)[0]


STEPS = {"lstm": lstm_step, "gru": gru_step}
#: Each cell's step with what its backward pass needs: ``parts(xw, state, p) -> (new_state,
#: saved)``.
PARTS = {"lstm": lstm_parts, "gru": gru_parts}


def initial_zeros(cell: str, hidden: int, like: Any, *, xp: Any) -> tuple[Any, ...]:
    """The all-zero state of ``cell`` for the sequences ``like`` holds on axis 0 (their
    number known or not: :func:`xpseq.core.shapes.zeros_rows`)."""
    n_state = 2 if cell == "lstm" else 1
    return tuple(shapes.zeros_rows(like, hidden, xp=xp) for _ in range(n_state))


def run_sequence(cell: str, p: Mapping[str, Any], xs: Any, lengths: Any,
                 state0: tuple[Any, ...], *, reverse: bool, scan: Callable[..., Any] | None,
                 xp: Any,
                 recurrence: Callable[..., Any] | None = None) -> tuple[Any, tuple[Any, ...]]:
    """:func:`xpseq.core.recurrent.run_sequence` without its checks.

    The input projection of every step is one product before the loop; the loop is
    ``scan`` over time-major ``xw (T, B, G H)`` and ``valid (T, B, 1)``, or ``recurrence``
    when given: a function ``(W_hh, b_hh, xw, valid, state0) -> (outputs (T, B, H),
    final_state)`` that runs the same loop its own way (e.g.
    :func:`xpseq.core.recurrent.hand_derived_recurrence`, whose gradient is hand-derived).
    Without ``recurrence``, PyTorch runs its own fused kernel where
    :func:`xpseq.core.delegation.fused_recurrence` applies.
    """
    if recurrence is None:
        fused = delegation.fused_recurrence(cell, [(p, reverse)], xs, lengths, tuple(state0),
                                            xp=xp)
        if fused is not None:
            return fused[0]
    step = STEPS[cell]
    steps = xs.shape[1]
    xw = xp.permute_dims(linear(xs, p["W_ih"], p["b_ih"], xp=xp), (1, 0, 2))
    valid = xp.permute_dims(sequence_mask(lengths, steps, xp=xp, like=xs, axis=1),
                            (1, 0))[..., None]
    if reverse:
        xw, valid = xp.flip(xw, axis=0), xp.flip(valid, axis=0)
    if recurrence is not None:
        outputs, final = recurrence(p["W_hh"], p["b_hh"], xw, valid, tuple(state0))
    else:
        def body(state: tuple[Any, ...], inputs: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
            xw_t, valid_t = inputs
            return keep_valid(step(xw_t, state, p, xp=xp), state, valid_t, xp=xp)

        final, outputs = (scan or python_scan)(body, tuple(state0), (xw, valid))
    if reverse:
        outputs = xp.flip(outputs, axis=0)
    return xp.permute_dims(outputs, (1, 0, 2)), final


def run_both_directions(cell: str, p_fwd: Mapping[str, Any], p_bwd: Mapping[str, Any], xs: Any,
                        lengths: Any, state0: tuple[Any, ...], *,
                        scan: Callable[..., Any] | None, xp: Any
                        ) -> list[tuple[Any, tuple[Any, ...]]] | None:
    """:func:`run_sequence` forwards with ``p_fwd`` and in reverse with ``p_bwd``, both from
    ``state0``, in one loop of ``T`` steps instead of two: each step advances the two
    directions together as a stack ``(2, B, H)``, the recurrent product a stacked
    ``(2, B, H) @ (2, H, G H)``. A bidirectional encoder's sequential steps halve, which is
    what an eager loop on short sequences pays for (NumPy's search); a compiled ``scan``
    (JAX) ran the two loops' 2-D products faster, so the RNN uses this on NumPy's arrays.

    Returns ``[(outputs (B, T, H), final_state), ...]`` for the two directions, equal to two
    calls of :func:`run_sequence`; ``None`` where a direction has no recurrent bias (the
    caller then runs them one by one)."""
    if p_fwd.get("b_hh") is None or p_bwd.get("b_hh") is None:
        return None
    steps = xs.shape[1]
    valid = xp.permute_dims(sequence_mask(lengths, steps, xp=xp, like=xs, axis=1),
                            (1, 0))[..., None]                               # (T, B, 1)
    xw_f, xw_b = (xp.permute_dims(linear(xs, p["W_ih"], p["b_ih"], xp=xp), (1, 0, 2))
                  for p in (p_fwd, p_bwd))                                   # (T, B, G H)
    xw = xp.stack([xw_f, xp.flip(xw_b, axis=0)], axis=1)                     # (T, 2, B, G H)
    valid = xp.stack([valid, xp.flip(valid, axis=0)], axis=1)                # (T, 2, B, 1)
    # W_hh (2, G H, H) kept as the transpose of a stack of W_hhᵀ: the product h W_hhᵀ then
    # reads one contiguous (2, H, G H) block (NumPy's stacked product: 5.4 µs a step
    # against 7.9 µs through a transposed view, here).
    t = xp.matrix_transpose
    stacked = {"W_hh": t(xp.stack([t(p_fwd["W_hh"]), t(p_bwd["W_hh"])])),
               "b_hh": xp.stack([p_fwd["b_hh"], p_bwd["b_hh"]])[:, None, :]}  # (2, 1, G H)
    step = STEPS[cell]

    def body(state: tuple[Any, ...], inputs: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
        xw_t, valid_t = inputs
        return keep_valid(step(xw_t, state, stacked, xp=xp), state, valid_t, xp=xp)

    final, outputs = (scan or python_scan)(body, tuple(xp.stack([s, s]) for s in state0),
                                           (xw, valid))                       # (T, 2, B, H)
    fwd = xp.permute_dims(outputs[:, 0, ...], (1, 0, 2))
    bwd = xp.permute_dims(xp.flip(outputs[:, 1, ...], axis=0), (1, 0, 2))
    return [(fwd, tuple(s[0, ...] for s in final)), (bwd, tuple(s[1, ...] for s in final))]


def keep_valid(new: tuple[Any, ...], old: tuple[Any, ...], valid_t: Any, *,
               xp: Any) -> tuple[tuple[Any, ...], Any]:
    """The state after one step of the runner: ``new`` where ``valid_t`` (``(B, 1)`` bool),
    ``old`` at padded steps; and the step's output, ``h`` or zero at padding."""
    state = tuple(xp.where(valid_t, n, o) for n, o in zip(new, old))
    return state, xp.where(valid_t, state[0], 0.0)


def sum_leading(a: Any, ndim: int, *, xp: Any) -> Any:
    """Sum ``a`` over its leading axes down to its last ``ndim`` axes."""
    axes = tuple(range(a.ndim - ndim))
    return xp.sum(a, axis=axes) if axes else a


def unbroadcast(g: Any, shape: tuple[int, ...], *, xp: Any) -> Any:
    """The gradient of an input of ``shape`` that broadcasting stretched to ``g.shape``:
    a broadcast copies the input, so its gradient sums over the copies (the leading axes
    it lacked and the axes where it had size 1)."""
    g = sum_leading(g, len(shape), xp=xp)
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return xp.sum(g, axis=axes, keepdims=True) if axes else g
