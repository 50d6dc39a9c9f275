"""Lesson 17: attention in blocks is exact, and its backward recomputes what the plain
path stores.

The online softmax visits the keys block by block, keeping per query row the largest
score so far ``m``, the sum ``l`` of ``exp(s - m)`` and the weighted sum of values ``acc``;
a block that raises the maximum to ``m'`` rescales both sums by ``exp(m - m')``, which
turns every earlier term ``exp(s - m)`` into ``exp(s - m')``. After the last block
``acc / l`` is the softmax-weighted sum itself: the same sums in another order, so equal
to rounding. The backward needs each block's weights again; the hand-derived rule
(:func:`xpseq.core.vjp.blockwise_attention`) recomputes them from ``q``, ``k`` and the
row's log-sum-exp instead of keeping the ``(Q, K)`` weights, which the plain path's
backward (NumPy's rules, JAX's residuals, PyTorch's tape) keeps.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xpseq import backends
from xpseq.core import blockwise, vjp
from xpseq.tour._common import (
    Cells,
    Part,
    Row,
    format_error,
    format_fact,
    normal_samples,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["BLOCK", "lesson_online_softmax", "numpy_attention_vjp", "jax_attention_vjp",
           "torch_attention_vjp"]

#: Queries and keys per block (the lesson's 256 positions make 8 blocks a side).
BLOCK = 32


# ------------------------------------------------------------------------ the code


def numpy_attention_vjp(q: Any, k: Any, v: Any, d_out: Any,
                        blockwise_path: bool) -> tuple[Any, tuple[Any, ...], int]:
    """The context, ``(dq, dk, dv)`` for the cotangent ``d_out`` and the bytes the backward
    keeps, by xpseq's hand-derived rules: blockwise, or the plain path's chain (scores,
    masked softmax, weighted sum)."""
    xp, scale = backends.get("numpy").xp, 1.0 / math.sqrt(q.shape[-1])
    if blockwise_path:
        out, rule = vjp.blockwise_attention(q, k, v, blockwise.BlockMask(), scale,
                                            BLOCK, BLOCK, xp=xp)
        return out, rule(d_out), _closure_bytes(rule)
    scores, scores_bp = vjp.dot_scores(q, k, scale, xp=xp)
    (out, _), attend_bp = vjp.attend(scores, v, None, xp=xp)

    def backprop(d: Any) -> tuple[Any, Any, Any]:
        d_scores, dv, _ = attend_bp(d)
        return (*scores_bp(d_scores), dv)

    return out, backprop(d_out), _closure_bytes(backprop)


def jax_attention_vjp(q: Any, k: Any, v: Any, d_out: Any,
                      blockwise_path: bool) -> tuple[Any, tuple[Any, ...], int]:
    """The same three by ``jax.vjp``: of the blockwise rule attached as a
    ``jax.custom_vjp``, or of plain softmax attention in ``jax.numpy``; the bytes are the
    residuals ``jax.vjp`` keeps (the leaves of its pullback)."""
    import jax
    import jax.numpy as jnp

    be, scale = backends.get("jax"), 1.0 / math.sqrt(q.shape[-1])
    if blockwise_path:
        rule = blockwise.hand_derived_attention(causal=False, scale=scale, block_q=BLOCK,
                                                block_k=BLOCK, custom_vjp=be.custom_vjp,
                                                xp=be.xp)

        def attention(q: Any, k: Any, v: Any) -> Any:
            return rule(q, k, v, None, None)
    else:
        def attention(q: Any, k: Any, v: Any) -> Any:
            return jax.nn.softmax(q @ k.T * scale, axis=-1) @ v

    out, pullback = jax.vjp(attention, *(jnp.asarray(a) for a in (q, k, v)))
    kept = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(pullback))
    return out, pullback(jnp.asarray(d_out)), int(kept)


def torch_attention_vjp(q: Any, k: Any, v: Any, d_out: Any,
                        blockwise_path: bool) -> tuple[Any, tuple[Any, ...], int]:
    """The same three by torch autograd: through the blockwise rule attached as a
    ``torch.autograd.Function``, or through plain softmax attention; the bytes are those
    of the tensors the tape saves, and those the Function's node keeps (each once)."""
    import torch

    be, scale = backends.get("torch"), 1.0 / math.sqrt(q.shape[-1])
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    rule = blockwise.hand_derived_attention(causal=False, scale=scale, block_q=BLOCK,
                                            block_k=BLOCK, custom_vjp=be.custom_vjp, xp=be.xp)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = (rule(tq, tk, tv, None, None) if blockwise_path
               else torch.softmax(tq @ tk.T * scale, dim=-1) @ tv)
    for t in getattr(out.grad_fn, "residuals", ()):      # an autograd.Function's own
        _ = isinstance(t, torch.Tensor) and pack(t)
    grads = torch.autograd.grad(out, (tq, tk, tv), torch.tensor(d_out))
    return out.detach().numpy(), tuple(g.numpy() for g in grads), sum(saved.values())


def _closure_bytes(fn: Any) -> int:
    """Bytes of the NumPy arrays a closure keeps, through the closures it keeps (each
    array counted once)."""
    seen: dict[int, int] = {}
    todo, visited = [fn], set()
    while todo:
        f = todo.pop()
        if id(f) in visited:
            continue
        visited.add(id(f))
        for cell in getattr(f, "__closure__", None) or ():
            value = cell.cell_contents
            if isinstance(value, np.ndarray):
                base = value if value.base is None else value.base
                seen[id(base)] = base.nbytes
            elif callable(value):
                todo.append(value)
    return sum(seen.values())


# ------------------------------------------------------------------------ the table


@register_lesson(17, "Attention in blocks: the online softmax is exact, and its backward "
                     "recomputes what the plain path stores",
                 code=(numpy_attention_vjp, jax_attention_vjp, torch_attention_vjp))
def lesson_online_softmax() -> tuple[str, list[Row], dict[str, Any]]:
    """Blockwise attention against the plain path on each library: values, gradients and
    the bytes each backward keeps."""
    n, d = 256, 8
    q, k, v, d_out = (normal_samples(171 + i, n, d) for i in range(4))
    facts: dict[str, Any] = {"n": n, "d": d, "block": BLOCK, "weights_bytes": n * n * 8,
                             "q": q.tolist(), "k": k.tolist(), "v": v.tolist(),
                             "d_out": d_out.tolist()}

    def part(name: str, fn: Any) -> Part:
        def fill(facts: dict[str, Any]) -> Cells:
            plain_out, plain_grads, plain_kept = fn(q, k, v, d_out, False)
            out, grads, kept = fn(q, k, v, d_out, True)
            facts[f"{name}_context"] = np.asarray(out).tolist()
            facts[f"{name}_grads"] = [np.asarray(g).tolist() for g in grads]
            facts[f"{name}_context_diff"] = float(np.max(np.abs(np.asarray(out)
                                                                - np.asarray(plain_out))))
            facts[f"{name}_grad_diff"] = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                                             for a, b in zip(grads, plain_grads))
            facts[f"{name}_plain_kept"], facts[f"{name}_blockwise_kept"] = plain_kept, kept
            return {"context": format_error(facts[f"{name}_context_diff"]),
                    "grads": format_error(facts[f"{name}_grad_diff"]),
                    "plain": f"{plain_kept / 1024:.0f} KiB",
                    "blockwise": f"{kept / 1024:.0f} KiB"}
        return fill

    columns = run_columns(facts, numpy=part("numpy", numpy_attention_vjp),
                          jax=part("jax", jax_attention_vjp),
                          torch=part("torch", torch_attention_vjp))
    rows = table_rows(columns, [
        ("context", f"max |blockwise − plain| of the context, {n} queries and keys in blocks "
                    f"of {BLOCK} (float64)"),
        ("grads", "max |Δ| of (dq, dk, dv), blockwise rule vs the plain path's backward"),
        ("plain", f"bytes the plain path's backward keeps (the weights alone: "
                  f"{n * n * 8 // 1024} KiB)"),
        ("blockwise", "bytes the blockwise rule keeps (q, k, v, the context, each row's "
                      "log-sum-exp)"),
    ])
    explanation = (
        f"The online softmax gives the plain path's context to "
        f"{format_fact(facts, 'numpy_context_diff', format_error)} (NumPy), "
        f"{format_fact(facts, 'jax_context_diff', format_error)} (JAX) and "
        f"{format_fact(facts, 'torch_context_diff', format_error)} (PyTorch), and its hand-derived "
        f"backward the same gradients, while keeping "
        f"{format_fact(facts, 'numpy_blockwise_kept', lambda b: f'{b / 1024:.0f} KiB')} for the "
        f"backward where the plain path keeps "
        f"{format_fact(facts, 'numpy_plain_kept', lambda b: f'{b / 1024:.0f} KiB')} (NumPy): "
        f"it recomputes each block's weights from the saved log-sum-exp instead of storing "
        f"the {n} × {n} weights."
    )
    return explanation, rows, facts
