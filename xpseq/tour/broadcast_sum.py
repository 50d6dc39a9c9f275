"""Lesson 13: broadcasting in the forward is a sum in the backward.

The gradient of a bias broadcast over the batch and time axes is the cotangent summed over
those axes, with the bias's own shape.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from array_api_compat import array_namespace

from xpseq import backends
from xpseq.core import vjp
from xpseq.tour._common import (
    Cells,
    Part,
    Row,
    as_floats,
    format_error,
    format_fact,
    format_vector,
    normal_samples,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["lesson_broadcast_sum", "bias_loss", "numpy_bias_grad", "jax_bias_grad",
           "torch_bias_grad"]


# ------------------------------------------------------------------------ the code


def bias_loss(W: Any, b: Any, X: Any, G: Any) -> Any:
    """``loss = Σ G ⊙ (X Wᵀ + b)``: the bias ``b (out,)`` is broadcast over the batch and
    time axes of ``X (batch, time, in)``; written once."""
    xp = array_namespace(W, b, X, G)
    return xp.sum(G * (X @ W.T + b))


def numpy_bias_grad(X: Any, W: Any, b: Any, G: Any) -> tuple[Any, Any]:
    """``∂loss/∂W`` and ``∂loss/∂b`` by xpseq's hand-derived ``linear`` rule, whose ``db``
    sums the cotangent ``G`` over the leading axes."""
    _, backprop = vjp.linear(X, W, b, xp=backends.get("numpy").xp)
    _, dW, db = backprop(G)
    return dW, db


def jax_bias_grad(X: Any, W: Any, b: Any, G: Any) -> tuple[Any, Any]:
    """``∂loss/∂W`` and ``∂loss/∂b`` by ``jax.grad``."""
    import jax
    import jax.numpy as jnp

    grad = jax.jit(jax.grad(bias_loss, argnums=(0, 1)))
    return grad(*(jnp.asarray(a) for a in (W, b, X, G)))


def torch_bias_grad(X: Any, W: Any, b: Any, G: Any) -> tuple[Any, Any]:
    """``∂loss/∂W`` and ``∂loss/∂b`` by torch autograd."""
    import torch

    Wt, bt = torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True)
    bias_loss(Wt, bt, torch.tensor(X), torch.tensor(G)).backward()
    assert Wt.grad is not None and bt.grad is not None
    return Wt.grad.numpy(), bt.grad.numpy()


# ------------------------------------------------------------------------ the table


@register_lesson(13, "Broadcasting in the forward is a sum in the backward: the bias gradient",
                 code=(bias_loss, numpy_bias_grad, jax_bias_grad, torch_bias_grad))
def lesson_broadcast_sum() -> tuple[str, list[Row], dict[str, Any]]:
    """The gradient of a bias broadcast over batch and time is a sum."""
    X = normal_samples(131, 2, 3, 4)                         # x: (batch, time, in)
    W, b = normal_samples(132, 5, 4), normal_samples(133, 5)
    G = normal_samples(134, 2, 3, 5)                         # loss = Σ G ⊙ (x Wᵀ + b)
    expected = G.sum(axis=(0, 1))
    facts: dict[str, Any] = {"G": G.tolist(), "b_shape": list(b.shape)}

    def part(name: str, grads: Callable[..., tuple[Any, Any]]) -> Part:
        def fill(facts: dict[str, Any]) -> Cells:
            dW, db = (np.asarray(a) for a in grads(X, W, b, G))
            diff = float(np.max(np.abs(db - expected)))
            facts.update({f"{name}_db": as_floats(db), f"{name}_db_shape": list(db.shape),
                          f"{name}_db_max_diff": diff, f"{name}_dW": dW.tolist()})
            return {"db": format_vector(db, 3), "diff": format_error(diff),
                    "shape": str(tuple(db.shape))}
        return fill

    numpy_part, jax_part = part("numpy", numpy_bias_grad), part("jax", jax_bias_grad)
    torch_part = part("torch", torch_bias_grad)
    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [
        ("db", "∂loss/∂b for loss = Σ G ⊙ (x Wᵀ + b), x (2, 3, 4), b (5,)"),
        ("diff", "max |∂loss/∂b − Σ over (batch, time) of G|"),
        ("shape", "shape of ∂loss/∂b"),
    ])
    explanation = (
        f"A bias of shape {b.shape} added to outputs of shape {G.shape} is copied along the batch "
        "and time axes, so its gradient is the cotangent summed over them (max difference "
        f"{format_fact(facts, 'torch_db_max_diff', format_error)} in torch, "
        f"{format_fact(facts, 'numpy_db_max_diff', format_error)} by xpseq's rule), with the "
        f"bias's own shape {format_fact(facts, 'jax_db_shape', lambda s: str(tuple(s)))}."
    )
    return explanation, rows, facts
