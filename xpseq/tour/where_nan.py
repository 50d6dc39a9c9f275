"""Lesson 3: NaN through ``where``, and the double-``where`` repair.

``x log x`` made safe at 0 by one ``where`` still has a NaN gradient there, because the
backward differentiates the branch it did not take; a second ``where`` that feeds ``log`` a
safe value repairs it.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from array_api_compat import array_namespace

from xpseq import backends
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

__all__ = ["lesson_where_nan", "xlogx_naive", "xlogx_double", "numpy_where_grads",
           "jax_where_grads", "torch_where_grads"]


# ------------------------------------------------------------------------ the code


def xlogx_naive(x: Any) -> Any:
    """``Σ x log x`` with the value 0 at 0 by one ``where``: the gradient at 0 is NaN."""
    xp = array_namespace(x)
    return xp.sum(xp.where(x > 0, x * xp.log(x), xp.zeros_like(x)))


def xlogx_double(x: Any) -> Any:
    """The same function with the double ``where``: ``log`` never sees 0."""
    xp = array_namespace(x)
    positive = x > 0
    safe = xp.where(positive, x, xp.ones_like(x))
    return xp.sum(xp.where(positive, safe * xp.log(safe), xp.zeros_like(x)))


def numpy_where_grads(x: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The value, and both gradients by the chain rule applied mechanically, as a
    hand-derived rule would: ``where`` sends the cotangent to the taken branch only (``g``),
    then the product rule for ``x·log x`` gives ``g·log x + x·(g/x)``, ``0·(−inf) + 0·(0/0)``
    at 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(xlogx_naive(backends.get("numpy").xp.asarray(x)))
        positive = x > 0
        g = np.where(positive, 1.0, 0.0)
        naive = g * np.log(x) + x * (g / x)
        safe = np.where(positive, x, 1.0)
        double = np.where(positive, g * np.log(safe) + safe * (g / safe), 0.0)
    return value, naive, double


def jax_where_grads(x: np.ndarray) -> tuple[float, Any, Any]:
    """The value, and ``jax.grad`` of the one-``where`` and double-``where`` versions."""
    import jax
    import jax.numpy as jnp

    xj = jnp.asarray(x)
    return (float(xlogx_naive(xj)), jax.jit(jax.grad(xlogx_naive))(xj),
            jax.jit(jax.grad(xlogx_double))(xj))


def torch_where_grads(x: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The value, and torch autograd of the one-``where`` and double-``where`` versions."""
    import torch

    found = []
    for f in (xlogx_naive, xlogx_double):
        xt = torch.tensor(x, requires_grad=True)
        out = f(xt)
        out.backward()
        assert xt.grad is not None                 # the tape wrote it
        found.append((float(out.detach()), xt.grad.numpy()))
    return found[0][0], found[0][1], found[1][1]


# ------------------------------------------------------------------------ the table


@register_lesson(3, "NaN through where, and the double-where repair",
                 code=(xlogx_naive, xlogx_double, numpy_where_grads, jax_where_grads,
                       torch_where_grads))
def lesson_where_nan() -> tuple[str, list[Row], dict[str, Any]]:
    """x log x made safe at 0 by where: NaN gradient, and the double-where fix."""
    x = np.array([0.0, 0.5])
    facts: dict[str, Any] = {"x": x.tolist()}

    def part(name: str, grads: Callable[[np.ndarray], tuple]) -> Part:
        def fill(facts: dict[str, Any]) -> Cells:
            value, naive, double = grads(x)
            facts.update({f"{name}_value": float(value), f"{name}_naive_grad": as_floats(naive),
                          f"{name}_double_grad": as_floats(double)})
            return {"value": format_number(value), "naive": format_vector(naive),
                    "double": format_vector(double)}
        return fill

    numpy_part, jax_part = part("numpy", numpy_where_grads), part("jax", jax_where_grads)
    torch_part = part("torch", torch_where_grads)

    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [
        ("value", "f(x) = Σ where(x > 0, x log x, 0) at x = (0, 0.5)"),
        ("naive", "∂f/∂x, one where (numpy: the chain rule by hand)"),
        ("double", "∂f/∂x, double where: log(where(x > 0, x, 1))"),
    ])
    explanation = (
        f"The forward value is finite ({format_fact(facts, 'numpy_value', format_number)}), but "
        "the gradient of where still differentiates the branch it did not take, where the zero "
        "cotangent meets d(x log x)/dx = −inf and gives "
        f"{format_fact(facts, 'jax_naive_grad', lambda v: format_number(v[0]))}; feeding log a "
        "safe value with a second where gives "
        f"{format_fact(facts, 'jax_double_grad', lambda v: format_number(v[0]))}."
    )
    return explanation, rows, facts
