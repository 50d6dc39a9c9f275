"""Lesson 2: derivatives at kinks are conventions (abs, clamp, relu and the norm at 0).

Each library's gradient exactly at a kink, against a central difference, which sees the
mean of the two one-sided slopes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xpseq.testing import central_difference_grad
from xpseq.tour._common import (
    Cells,
    Row,
    _columns,
    _fact,
    _floats,
    _jax,
    _lesson,
    _num,
    _table,
    _torch,
    _vec,
)

__all__ = ["lesson_kinks"]


@_lesson(2, "Derivatives at kinks are conventions: abs, clamp, relu and norm at 0")
def lesson_kinks() -> tuple[str, list[Row], dict[str, Any]]:
    """Gradients of abs, relu, clamp and the norm exactly at their kinks."""
    facts: dict[str, Any] = {}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        funcs = {"abs": lambda a: float(np.sum(np.abs(a))),
                 "relu": lambda a: float(np.sum(np.maximum(a, 0.0))),
                 "clamp": lambda a: float(np.sum(np.clip(a, 0.0, 1.0)))}
        cells = {}
        for name, f in funcs.items():
            g = float(central_difference_grad(f, np.zeros(1))[0])
            facts[f"numpy_{name}"] = g
            cells[name] = _num(g)
        norm = central_difference_grad(lambda a: float(np.linalg.norm(a)), np.zeros(2))
        facts["numpy_norm"] = _floats(norm)
        cells["norm"] = _vec(norm)
        return cells

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        funcs = {"abs": jnp.abs, "relu": jax.nn.relu,
                 "clamp": lambda x: jnp.clip(x, 0.0, 1.0)}
        cells = {}
        for name, f in funcs.items():
            g = float(jax.jit(jax.grad(f))(0.0))
            facts[f"jax_{name}"] = g
            cells[name] = _num(g)
        norm = np.asarray(jax.jit(jax.grad(jnp.linalg.norm))(jnp.zeros(2)))
        facts["jax_norm"] = _floats(norm)
        cells["norm"] = _vec(norm)
        return cells

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        funcs = {"abs": torch.abs, "relu": torch.relu,
                 "clamp": lambda x: torch.clamp(x, 0.0, 1.0),
                 "norm": torch.linalg.vector_norm}
        cells = {}
        for name, f in funcs.items():
            x = torch.zeros(2 if name == "norm" else (), dtype=torch.float64,
                            requires_grad=True)
            f(x).backward()
            g = x.grad.numpy()
            facts[f"torch_{name}"] = _floats(g) if name == "norm" else float(g)
            cells[name] = _vec(g) if name == "norm" else _num(g)
        return cells

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("abs", "d|x|/dx at 0 (numpy: xpseq central difference)"),
        ("relu", "d relu(x)/dx at 0"),
        ("clamp", "d clamp(x, 0, 1)/dx at the bound 0"),
        ("norm", "∇‖x‖ at x = (0, 0)"),
    ])
    explanation = (
        f"At a kink the derivative is a convention that each library picks for itself "
        f"(d|x|/dx at 0 is {_fact(facts, 'jax_abs', _num)} in jax and "
        f"{_fact(facts, 'torch_abs', _num)} in torch, clamp at its bound "
        f"{_fact(facts, 'jax_clamp', _num)} vs {_fact(facts, 'torch_clamp', _num)}, ∇‖0‖ "
        f"{_fact(facts, 'jax_norm', _vec)} vs {_fact(facts, 'torch_norm', _vec)}), while a "
        f"central difference sees the mean of the two one-sided slopes."
    )
    return explanation, rows, facts
