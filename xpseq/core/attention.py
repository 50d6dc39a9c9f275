"""Attention scores, attention pooling and multi-head attention, written once.

Shapes use these names: ``Q`` queries, ``K`` keys, ``d_q`` / ``d_k`` / ``d_v`` the depths of
queries, keys and values, ``h`` the hidden size of the additive score. Leading ``...``
dimensions (batch, heads) broadcast against each other as in ``matmul``.

Weight matrices follow the formulas they come from (and ``torch.nn.Linear``): a weight
applied as ``W x`` has shape ``(out, in)``.

Score functions:

=======================  =======================================  ======================
function                 score                                    known as
=======================  =======================================  ======================
:func:`dot_scores`       ``e_ij = scale * q_i . k_j``             Luong "dot"; scaled dot
:func:`general_scores`   ``e_ij = q_iᵀ W k_j``                    Luong "general"
:func:`additive_scores`  ``e_ij = vᵀ tanh(W_q q_i + W_k k_j)``    Bahdanau
=======================  =======================================  ======================

Every function validates its arguments (see :mod:`xpseq.core.checks` for what happens to
value checks under ``jax.jit``) and then calls a private kernel that does only the math.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Mapping

import array_api_compat as compat

from . import checks, delegation, kernels, values
from .masking import (
    check_no_empty_rows,
    keep_mask,
    lengths_array,
    validated_keep,
)

__all__ = [
    "dot_scores",
    "general_scores",
    "additive_scores",
    "attend",
    "scaled_dot_product_attention",
    "multi_head_attention",
]


# --------------------------------------------------------------------------- scores


def dot_scores(q: Any, k: Any, scale: float | None = None) -> Any:
    """Dot-product scores ``scale * q kᵀ``.

    Parameters
    ----------
    q : real floating array, shape ``(..., Q, d)``
    k : real floating array, shape ``(..., K, d)``, same dtype as ``q``
    scale : float, optional
        Multiplies the scores. ``None`` means 1 (Luong's "dot"); ``1 / sqrt(d)`` gives the
        scaled dot product of Vaswani et al.

    Returns
    -------
    scores : array, shape ``(..., Q, K)``
    """
    fname = "dot_scores"
    xp = checks.namespace(fname, q=q, k=k)
    scale = checks.check_scale(fname, scale)
    _check_qk(fname, q, k, xp)
    return kernels.dot_scores(q, k, scale, xp=xp)


def general_scores(q: Any, k: Any, W: Any) -> Any:
    """Luong's "general" (multiplicative) scores ``e_ij = q_iᵀ W k_j``.

    Parameters
    ----------
    q : real floating array, shape ``(..., Q, d_q)``
    k : real floating array, shape ``(..., K, d_k)``
    W : real floating array, shape ``(d_q, d_k)``

    Returns
    -------
    scores : array, shape ``(..., Q, K)``
    """
    fname = "general_scores"
    xp = checks.namespace(fname, q=q, k=k, W=W)
    _check_qk(fname, q, k, xp, same_depth=False, W=W)
    checks.check_ndim(fname, "W", W, 2, exact=True, layout="(d_q, d_k)")
    checks.check_dim(fname, "W", W, 0, q.shape[-1], "the depth of q")
    checks.check_dim(fname, "W", W, 1, k.shape[-1], "the depth of k")
    checks.check_finite(fname, "W", W, xp)
    return kernels.general_scores(q, k, W, xp=xp)


def additive_scores(q: Any, k: Any, W_q: Any, W_k: Any, v: Any) -> Any:
    """Bahdanau's additive scores ``e_ij = vᵀ tanh(W_q q_i + W_k k_j)``.

    Parameters
    ----------
    q : real floating array, shape ``(..., Q, d_q)``
    k : real floating array, shape ``(..., K, d_k)``
    W_q : real floating array, shape ``(h, d_q)``
    W_k : real floating array, shape ``(h, d_k)``
    v : real floating array, shape ``(h,)``

    Returns
    -------
    scores : array, shape ``(..., Q, K)``

    Notes
    -----
    The ``(..., Q, K, h)`` tensor of ``tanh`` arguments is formed explicitly.
    """
    fname = "additive_scores"
    xp = checks.namespace(fname, q=q, k=k, W_q=W_q, W_k=W_k, v=v)
    _check_qk(fname, q, k, xp, same_depth=False, W_q=W_q, W_k=W_k, v=v)
    checks.check_ndim(fname, "W_q", W_q, 2, exact=True, layout="(h, d_q)")
    checks.check_ndim(fname, "W_k", W_k, 2, exact=True, layout="(h, d_k)")
    checks.check_ndim(fname, "v", v, 1, exact=True, layout="(h,)")
    checks.check_dim(fname, "W_q", W_q, 1, q.shape[-1], "the depth of q")
    checks.check_dim(fname, "W_k", W_k, 1, k.shape[-1], "the depth of k")
    checks.check_dim(fname, "W_k", W_k, 0, W_q.shape[0], "the hidden size h of W_q")
    checks.check_dim(fname, "v", v, 0, W_q.shape[0], "the hidden size h of W_q")
    for name, w in (("W_q", W_q), ("W_k", W_k), ("v", v)):
        checks.check_finite(fname, name, w, xp)
    return kernels.additive_scores(q, k, W_q, W_k, v, xp=xp)


# ------------------------------------------------------------------ attention pooling


def attend(scores: Any, values: Any, *, valid_lens: Any = None, mask: Any = None,
           empty: str = "error") -> tuple[Any, Any]:
    """Masked softmax of ``scores``, then the weighted sum of ``values``.

    Parameters
    ----------
    scores : real floating array, shape ``(batch, ..., Q, K)``
    values : real floating array, shape ``(..., K, d_v)``, same dtype as ``scores``
    valid_lens, mask, empty
        As in :func:`xpseq.core.masked_softmax`.

    Returns
    -------
    context : array, shape ``(batch, ..., Q, d_v)``
        ``context[..., i, :] = sum_j weights[..., i, j] * values[..., j, :]``; an all-masked
        row (``empty="zero"``) gives a zero context.
    weights : array, shape ``(batch, ..., Q, K)``
    """
    fname = "attend"
    xp = checks.namespace(fname, scores=scores, values=values,
                           valid_lens=lengths_array(valid_lens), mask=mask)
    for name, x in (("scores", scores), ("values", values)):
        checks.check_floating(fname, name, x, xp)
    checks.check_same_dtype(fname, scores=scores, values=values)
    checks.check_ndim(fname, "scores", scores, 2, layout="(..., queries, keys)")
    checks.check_ndim(fname, "values", values, 2, layout="(..., keys, d_v)")
    checks.check_dim(fname, "values", values, -2, scores.shape[-1],
                      "the number of keys in scores")
    checks.broadcast_leading(fname, xp, scores=scores.shape[:-2], values=values.shape[:-2])
    checks.check_finite(fname, "values", values, xp)
    keep = validated_keep(fname, "scores", scores, valid_lens, mask, empty, xp=xp)
    return kernels.attend(scores, values, keep, xp=xp)


def scaled_dot_product_attention(q: Any, k: Any, v: Any, *, valid_lens: Any = None,
                                 mask: Any = None, empty: str = "error",
                                 scale: float | None = None,
                                 need_weights: bool = True) -> tuple[Any, Any]:
    """Scaled dot-product attention ``softmax(q kᵀ * scale) v`` with a true mask.

    With ``need_weights=False`` the weights are not returned (``None``), and on PyTorch
    the work is delegated to ``torch.nn.functional.scaled_dot_product_attention`` (a fused
    kernel: the same semantics, boolean mask included) whenever no query row is left
    without a key (the fused kernel's answer there is NaN, the policy's is an error or a
    zero row, so such calls take the generic body) and ``q``, ``k``, ``v`` share their
    leading shape. The generic body is the reference; a parity test compares both.

    Parameters
    ----------
    q : real floating array, shape ``(batch, ..., Q, d)``
    k : real floating array, shape ``(..., K, d)``
    v : real floating array, shape ``(..., K, d_v)``
    valid_lens, mask, empty
        As in :func:`xpseq.core.masked_softmax`, for scores of shape ``(batch, ..., Q, K)``.
    scale : float, optional
        Defaults to ``1 / sqrt(d)``.
    need_weights : bool
        Return the weights (``True``) or ``None`` in their place.

    Returns
    -------
    context : array, shape ``(batch, ..., Q, d_v)``
    weights : array, shape ``(batch, ..., Q, K)``, or ``None``

    Examples
    --------
    One query, four keys of depth 1, the fourth padding (``valid_lens=[3]``): it gets
    exactly zero weight, however large its value.

    >>> import numpy as np
    >>> import xpseq.core as C
    >>> q = np.array([[[1.0]]])
    >>> k = np.array([[[1.0], [0.0], [1.0], [2.0]]])
    >>> v = np.array([[[1.0, 0.0], [0.0, 2.0], [2.0, 1.0], [100.0, 100.0]]])
    >>> context, weights = C.scaled_dot_product_attention(q, k, v, valid_lens=np.array([3]))
    >>> print(np.round(weights, 4), np.round(context, 4))
    [[[0.4223 0.1554 0.4223 0.    ]]] [[[1.267 0.733]]]

    The same call on PyTorch (or JAX) arrays returns PyTorch (or JAX) arrays:
    ``xpseq.backends.get("torch").asarray(q)``.
    """
    fname = "scaled_dot_product_attention"
    xp = checks.namespace(fname, q=q, k=k, v=v, valid_lens=lengths_array(valid_lens), mask=mask)
    scale = checks.check_scale(fname, scale)
    need_weights = values.flag(fname, "need_weights", need_weights)
    fused = not need_weights and delegation.has_fused_attention(q, k, v, xp=xp)
    # The fused path checks its one output for NaN / infinity instead of its three inputs
    # (a non-finite input, or an overflowing q kᵀ, always reaches the output).
    check_qkv(fname, q, k, v, xp, finite=not fused)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if fused:
        shape = (*q.shape[:-1], k.shape[-2])
        keep = keep_mask(fname, shape, valid_lens, mask, xp=xp, device=compat.device(q),
                         compact=True, keys=k, keys_axis=-2)
        context = delegation.fused_attention(q, k, v, keep, scale, xp=xp)
        if context is not None:
            # max and min propagate NaN and show infinities: two reductions, no temporary
            # (an empty result has nothing to check: torch's max refuses it; and torch's
            # .size is a method, so the shape says whether it is empty)
            finite = 0 in tuple(context.shape) or checks.concrete(
                xp.isfinite(xp.max(context)) & xp.isfinite(xp.min(context)))
            if finite is False:
                raise ValueError(f"{fname}: the result is not finite: q, k or v contain NaN "
                                 "or infinity, or q kᵀ overflows")
            return context, None
        checks.check_all_finite(fname, xp, q=q, k=k, v=v)     # the generic body, checked
    scores = kernels.dot_scores(q, k, scale, xp=xp)
    keep = validated_keep(fname, "the scores q kᵀ", scores, valid_lens, mask, empty, xp=xp)
    context, weights = kernels.attend(scores, v, keep, xp=xp)
    return context, weights if need_weights else None



def multi_head_attention(params: Mapping[str, Any], q: Any, k: Any, v: Any, *,
                         num_heads: int, valid_lens: Any = None, mask: Any = None,
                         empty: str = "error", scale: float | None = None) -> tuple[Any, Any]:
    """Multi-head scaled dot-product attention over a parameter dict.

    Each input is projected (``x Wᵀ + b``), split into ``num_heads`` heads, attended with
    :func:`scaled_dot_product_attention` per head, concatenated and projected by ``W_o``.

    Parameters
    ----------
    params : mapping
        ``W_q`` ``(d_model, d_q)``, ``W_k`` ``(d_model, d_k)``, ``W_v`` ``(d_value, d_v)``,
        ``W_o`` ``(d_out, d_value)``; optional biases ``b_q`` ``(d_model,)``, ``b_k``
        ``(d_model,)``, ``b_v`` ``(d_value,)``, ``b_o`` ``(d_out,)``. ``num_heads`` must
        divide ``d_model`` and ``d_value``. This is ``torch.nn.MultiheadAttention``'s layout.
    q : real floating array, shape ``(..., Q, d_q)``
    k : real floating array, shape ``(..., K, d_k)``
    v : real floating array, shape ``(..., K, d_v)``
    num_heads : int
    valid_lens, mask, empty
        As in :func:`xpseq.core.masked_softmax`, for scores of shape ``(..., Q, K)``; the
        same mask applies to every head.
    scale : float, optional
        Defaults to ``1 / sqrt(d_model / num_heads)``.

    Returns
    -------
    context : array, shape ``(..., Q, d_out)``
    weights : array, shape ``(..., num_heads, Q, K)``
    """
    fname = "multi_head_attention"
    if not isinstance(params, Mapping):
        raise TypeError(f"{fname}: params must be a mapping of arrays, got {type(params).__name__}")
    required = ("W_q", "W_k", "W_v", "W_o")
    optional = ("b_q", "b_k", "b_v", "b_o")
    missing = [n for n in required if params.get(n) is None]
    if missing:
        raise ValueError(f"{fname}: params is missing {missing}; it needs {list(required)}")
    unknown = sorted(set(params) - set(required) - set(optional))
    if unknown:
        raise ValueError(f"{fname}: params has unknown entries {unknown}")
    p: dict[str, Any] = {n: params.get(n) for n in required + optional}
    xp = checks.namespace(fname, q=q, k=k, v=v, valid_lens=lengths_array(valid_lens), mask=mask,
                           **{n: a for n, a in p.items() if a is not None})
    if not checks.is_int(num_heads):
        raise TypeError(f"{fname}: num_heads must be an int, got {type(num_heads).__name__}")
    num_heads = operator.index(num_heads)
    if num_heads < 1:
        raise ValueError(f"{fname}: num_heads must be >= 1, got {num_heads}")
    scale = checks.check_scale(fname, scale)
    check_qkv(fname, q, k, v, xp, same_depth=False,
              **{n: a for n, a in p.items() if a is not None})
    for n, layout in zip(required, ("(d_model, d_q)", "(d_model, d_k)", "(d_value, d_v)",
                                    "(d_out, d_value)")):
        checks.check_ndim(fname, n, p[n], 2, exact=True, layout=layout)
    d_model, d_value, d_out = p["W_q"].shape[0], p["W_v"].shape[0], p["W_o"].shape[0]
    checks.check_dim(fname, "W_q", p["W_q"], 1, q.shape[-1], "the depth of q")
    checks.check_dim(fname, "W_k", p["W_k"], 1, k.shape[-1], "the depth of k")
    checks.check_dim(fname, "W_v", p["W_v"], 1, v.shape[-1], "the depth of v")
    checks.check_dim(fname, "W_k", p["W_k"], 0, d_model, "d_model (rows of W_q)")
    checks.check_dim(fname, "W_o", p["W_o"], 1, d_value, "d_value (rows of W_v)")
    for b, size, what in (("b_q", d_model, "d_model"), ("b_k", d_model, "d_model"),
                          ("b_v", d_value, "d_value"), ("b_o", d_out, "d_out")):
        if p[b] is not None:
            checks.check_ndim(fname, b, p[b], 1, exact=True, layout=f"({what},)")
            checks.check_dim(fname, b, p[b], 0, size, what)
    for n, a in p.items():
        if a is not None:
            checks.check_finite(fname, n, a, xp)
    for size, what in ((d_model, "d_model"), (d_value, "d_value")):
        if size % num_heads:
            raise ValueError(f"{fname}: num_heads={num_heads} does not divide {what}={size}")
    lead = checks.broadcast_leading(fname, xp, q=q.shape[:-2], k=k.shape[:-2], v=v.shape[:-2])
    scores_shape = lead + (q.shape[-2], k.shape[-2])
    empty = checks.check_empty(fname, empty)
    keep = keep_mask(fname, scores_shape, valid_lens, mask, xp=xp, device=compat.device(q),
                     keys=k, keys_axis=-2)
    if empty == "error":
        check_no_empty_rows(fname, "the scores", scores_shape, keep, xp=xp)
    if scale is None:
        scale = 1.0 / math.sqrt(d_model // num_heads)
    scores, vh = kernels.head_scores(p, q, k, v, num_heads, scale, xp=xp)
    checks.check_finite(fname, "the per-head scores", scores, xp,
                        where=kernels.heads_keep(keep, xp=xp))
    return kernels.head_pool(p, scores, vh, keep, xp=xp)


# ------------------------------------------------------------------------- helpers


def _check_qk(fname: str, q: Any, k: Any, xp: Any, *, same_depth: bool = True,
              finite: bool = True, **weights: Any) -> None:
    for name, x in (("q", q), ("k", k), *weights.items()):
        checks.check_floating(fname, name, x, xp)
    checks.check_same_dtype(fname, q=q, k=k, **weights)
    checks.check_ndim(fname, "q", q, 2, layout="(..., queries, depth)")
    checks.check_ndim(fname, "k", k, 2, layout="(..., keys, depth)")
    if q.shape[-1] == 0:
        raise ValueError(f"{fname}: q must have depth >= 1, got shape {tuple(q.shape)}")
    if same_depth and k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"{fname}: q has depth {q.shape[-1]} but k has depth {k.shape[-1]} "
            f"(shapes {tuple(q.shape)} and {tuple(k.shape)})"
        )
    checks.broadcast_leading(fname, xp, q=q.shape[:-2], k=k.shape[:-2])
    if finite:
        checks.check_finite(fname, "q", q, xp)
        checks.check_finite(fname, "k", k, xp)


def check_qkv(fname: str, q: Any, k: Any, v: Any, xp: Any, *, same_depth: bool = True,
              finite: bool = True, **weights: Any) -> None:
    """Check the shapes, dtypes and (with ``finite``) finiteness of ``q (..., Q, d)``,
    ``k (..., K, d)`` (``d_k`` may differ without ``same_depth``) and ``v (..., K, d_v)``.

    Shared with :mod:`xpseq.core.blockwise`; not in ``__all__`` (the module's math).
    """
    _check_qk(fname, q, k, xp, same_depth=same_depth, finite=finite, v=v, **weights)
    checks.check_ndim(fname, "v", v, 2, layout="(..., keys, d_v)")
    checks.check_dim(fname, "v", v, -2, k.shape[-2], "the number of keys in k")
    checks.broadcast_leading(fname, xp, q=q.shape[:-2], k=k.shape[:-2], v=v.shape[:-2])
    if finite:
        checks.check_finite(fname, "v", v, xp)
