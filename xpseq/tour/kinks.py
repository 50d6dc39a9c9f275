"""Lesson 2: derivatives at kinks are conventions (abs, clamp, relu and the norm at 0).

Each library's gradient exactly at a kink, against a central difference, which sees the
mean of the two one-sided slopes.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from xpseq.testing import central_difference_grad
from xpseq.tour._common import (
    Cells,
    Part,
    Row,
    as_floats,
    format_fact,
    format_number,
    format_vector,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["lesson_kinks", "numpy_kink_slopes", "jax_kink_slopes", "torch_kink_slopes"]


# ------------------------------------------------------------------------ the code


def numpy_kink_slopes() -> dict[str, Any]:
    """Central differences (:func:`xpseq.testing.central_difference_grad`) of abs, relu and
    clamp at 0 and of the norm at ``(0, 0)``: NumPy has no derivative of its own."""
    funcs = {"abs": lambda a: float(np.sum(np.abs(a))),
             "relu": lambda a: float(np.sum(np.maximum(a, 0.0))),
             "clamp": lambda a: float(np.sum(np.clip(a, 0.0, 1.0)))}
    slopes: dict[str, Any] = {name: float(central_difference_grad(f, np.zeros(1))[0])
                              for name, f in funcs.items()}
    slopes["norm"] = central_difference_grad(lambda a: float(np.linalg.norm(a)), np.zeros(2))
    return slopes


def jax_kink_slopes() -> dict[str, Any]:
    """``jax.grad`` of abs, relu and clamp exactly at 0, and of the norm at ``(0, 0)``."""
    import jax
    import jax.numpy as jnp

    funcs = {"abs": jnp.abs, "relu": jax.nn.relu, "clamp": lambda x: jnp.clip(x, 0.0, 1.0)}
    slopes: dict[str, Any] = {name: float(jax.jit(jax.grad(f))(0.0))
                              for name, f in funcs.items()}
    slopes["norm"] = np.asarray(jax.jit(jax.grad(jnp.linalg.norm))(jnp.zeros(2)))
    return slopes


def torch_kink_slopes() -> dict[str, Any]:
    """torch autograd of abs, relu and clamp exactly at 0, and of the norm at ``(0, 0)``."""
    import torch

    funcs = {"abs": torch.abs, "relu": torch.relu, "clamp": lambda x: torch.clamp(x, 0.0, 1.0),
             "norm": torch.linalg.vector_norm}
    slopes: dict[str, Any] = {}
    for name, f in funcs.items():
        x = torch.zeros(2 if name == "norm" else (), dtype=torch.float64, requires_grad=True)
        f(x).backward()
        assert x.grad is not None
        slopes[name] = x.grad.numpy()
    return slopes


# ------------------------------------------------------------------------ the table


@register_lesson(2, "Derivatives at kinks are conventions: abs, clamp, relu and norm at 0",
                 code=(numpy_kink_slopes, jax_kink_slopes, torch_kink_slopes))
def lesson_kinks() -> tuple[str, list[Row], dict[str, Any]]:
    """Gradients of abs, relu, clamp and the norm exactly at their kinks."""
    facts: dict[str, Any] = {}

    def part(name: str, slopes: Callable[[], dict[str, Any]]) -> Part:
        def fill(facts: dict[str, Any]) -> Cells:
            found = slopes()
            facts.update({f"{name}_{k}": float(found[k]) for k in ("abs", "relu", "clamp")})
            facts[f"{name}_norm"] = as_floats(found["norm"])
            return {k: format_number(found[k]) for k in ("abs", "relu", "clamp")} | {
                "norm": format_vector(found["norm"])}
        return fill

    columns = run_columns(facts, numpy=part("numpy", numpy_kink_slopes),
                          jax=part("jax", jax_kink_slopes), torch=part("torch", torch_kink_slopes))
    rows = table_rows(columns, [
        ("abs", "d|x|/dx at 0 (numpy: xpseq central difference)"),
        ("relu", "d relu(x)/dx at 0"),
        ("clamp", "d clamp(x, 0, 1)/dx at the bound 0"),
        ("norm", "∇‖x‖ at x = (0, 0)"),
    ])
    explanation = (
        f"At a kink the derivative is a convention that each library picks for itself "
        f"(d|x|/dx at 0 is {format_fact(facts, 'jax_abs', format_number)} in jax and "
        f"{format_fact(facts, 'torch_abs', format_number)} in torch, clamp at its bound "
        f"{format_fact(facts, 'jax_clamp', format_number)} vs "
        f"{format_fact(facts, 'torch_clamp', format_number)}, ∇‖0‖ "
        f"{format_fact(facts, 'jax_norm', format_vector)} vs "
        f"{format_fact(facts, 'torch_norm', format_vector)}), while a "
        f"central difference sees the mean of the two one-sided slopes."
    )
    return explanation, rows, facts
