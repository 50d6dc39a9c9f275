"""Lesson 13: broadcasting in the forward is a sum in the backward.

The gradient of a bias broadcast over the batch and time axes is the cotangent summed over
those axes, with the bias's own shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from array_api_compat import array_namespace

from xpseq.core import vjp
from xpseq.tour._common import (
    Cells,
    Row,
    _columns,
    _data,
    _err,
    _fact,
    _floats,
    _jax,
    _lesson,
    _table,
    _torch,
    _vec,
    _xp_numpy,
)

__all__ = ["lesson_broadcast_sum"]


@_lesson(13, "Broadcasting in the forward is a sum in the backward: the bias gradient")
def lesson_broadcast_sum() -> tuple[str, list[Row], dict[str, Any]]:
    """The gradient of a bias broadcast over batch and time is a sum."""
    X, W, b = _data(131, 2, 3, 4), _data(132, 5, 4), _data(133, 5)   # x: (batch, time, in)
    G = _data(134, 2, 3, 5)                         # loss = Σ G ⊙ (x Wᵀ + b)
    expected = G.sum(axis=(0, 1))
    facts: dict[str, Any] = {"G": G.tolist(), "b_shape": list(b.shape)}

    def finish(name: str, db: Any, dW: Any) -> Cells:
        db = np.asarray(db)
        diff = float(np.max(np.abs(db - expected)))
        facts.update({f"{name}_db": _floats(db), f"{name}_db_shape": list(db.shape),
                      f"{name}_db_max_diff": diff, f"{name}_dW": np.asarray(dW).tolist()})
        return {"db": _vec(db, 3), "diff": _err(diff), "shape": str(tuple(db.shape))}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        _, backprop = vjp.linear(X, W, b, xp=_xp_numpy())
        _, dW, db = backprop(G)                   # db = Σ over the leading axes of dy
        return finish("numpy", db, dW)

    def loss(W: Any, b: Any, X: Any, G: Any) -> Any:
        xp = array_namespace(W, b, X, G)
        return xp.sum(G * (X @ W.T + b))

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        dW, db = grad(*(jnp.asarray(a) for a in (W, b, X, G)))
        return finish("jax", db, dW)

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        Wt, bt = torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True)
        loss(Wt, bt, torch.tensor(X), torch.tensor(G)).backward()
        return finish("torch", bt.grad.numpy(), Wt.grad.numpy())

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("db", "∂loss/∂b for loss = Σ G ⊙ (x Wᵀ + b), x (2, 3, 4), b (5,)"),
        ("diff", "max |∂loss/∂b − Σ over (batch, time) of G|"),
        ("shape", "shape of ∂loss/∂b"),
    ])
    explanation = (
        f"A bias of shape {b.shape} added to outputs of shape {G.shape} is copied along "
        f"the batch and time axes, so its gradient is the cotangent summed over them "
        f"(max difference {_fact(facts, 'torch_db_max_diff', _err)} in torch, "
        f"{_fact(facts, 'numpy_db_max_diff', _err)} by xpseq's rule), with the bias's own "
        f"shape {_fact(facts, 'jax_db_shape', lambda s: str(tuple(s)))}."
    )
    return explanation, rows, facts
