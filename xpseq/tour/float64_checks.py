"""Lesson 7: why gradient checks need float64.

The error of a central difference against its step size, in float32 and float64, next to
the error of the gradient itself.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from array_api_compat import array_namespace

from xpseq.tour._common import (
    Cells,
    Row,
    format_error,
    format_fact,
    import_jax,
    import_torch,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["STEPS", "lesson_float64_checks", "sin_exp", "sin_exp_derivative",
           "central_difference", "numpy_derivative", "jax_derivative", "torch_derivative"]


STEPS = tuple(10.0 ** -e for e in range(1, 11))
_FD_POINT = 0.7


# ------------------------------------------------------------------------ the code


def sin_exp(x: Any) -> Any:
    """``f(x) = sin(x) e^x``, written once."""
    xp = array_namespace(x)
    return xp.sin(x) * xp.exp(x)


def sin_exp_derivative(x: float) -> float:
    """``f'(x) = e^x (sin x + cos x)`` in float64 (the exact reference)."""
    return math.exp(x) * (math.sin(x) + math.cos(x))


def central_difference(x: Any, step: Any) -> Any:
    """``(f(x + h) - f(x - h)) / 2h`` for ``f = sin_exp``, in the dtype of ``x``."""
    return (sin_exp(x + step) - sin_exp(x - step)) / (2 * step)


def numpy_derivative(x: Any) -> float:
    """``f'(x)`` by hand, in the dtype of ``x`` (NumPy has no autodiff)."""
    return float(np.exp(x) * (np.sin(x) + np.cos(x)))


def jax_derivative(x: Any) -> float:
    """``f'(x)`` by ``jax.grad``, in the dtype of ``x``."""
    import jax

    return float(jax.jit(jax.grad(sin_exp))(x))


def torch_derivative(x: Any) -> float:
    """``f'(x)`` by torch autograd, in the dtype of ``x``."""
    x = x.clone().requires_grad_(True)
    sin_exp(x).backward()
    return float(x.grad)


# ------------------------------------------------------------------------ the table


def _fd_cells(name: str, asarray: Callable[[float, str], Any], grad: Callable[[Any], float],
              facts: dict[str, Any], quotient: Callable = central_difference) -> Cells:
    """Central-difference and autodiff errors of ``f'(0.7)`` in float32 and float64."""
    cells: dict[str, list[str]] = {}
    for dtype in ("float32", "float64"):
        x = asarray(_FD_POINT, dtype)
        exact = sin_exp_derivative(float(x))         # at the point the dtype can hold
        errors = []
        for h in STEPS:
            step = asarray(h, dtype)
            errors.append(abs(float(quotient(x, step)) - exact))
        best = int(np.argmin(errors))
        facts.update({f"{name}_errors_{dtype}": errors, f"{name}_best_h_{dtype}": STEPS[best],
                      f"{name}_best_err_{dtype}": errors[best],
                      f"{name}_autodiff_err_{dtype}": abs(grad(x) - exact)})
        for i, e in enumerate(errors):
            cells.setdefault(f"h{i}", []).append(format_error(e))
        cells.setdefault("best_h", []).append(format_error(STEPS[best]))
        cells.setdefault("best_err", []).append(format_error(errors[best]))
        cells.setdefault("autodiff", []).append(format_error(facts[f"{name}_autodiff_err_{dtype}"]))
    return {k: " / ".join(v) for k, v in cells.items()}


@register_lesson(7, "Why gradient checks need float64: finite-difference error against step size",
                 code=(sin_exp, sin_exp_derivative, central_difference, numpy_derivative,
                       jax_derivative, torch_derivative))
def lesson_float64_checks() -> tuple[str, list[Row], dict[str, Any]]:
    """Central-difference error against step size in float32 and float64."""
    facts: dict[str, Any] = {"steps": list(STEPS), "point": _FD_POINT}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        return _fd_cells("numpy", lambda v, d: np.asarray(v, dtype=d), numpy_derivative, facts)

    def jax_part(facts: dict[str, Any]) -> Cells:
        _, jnp = import_jax()
        # The quotient runs eagerly: under jit, XLA may fuse and reorder its float32
        # arithmetic (it does at its default optimisation level).
        return _fd_cells("jax", lambda v, d: jnp.asarray(v, dtype=d), jax_derivative, facts)

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = import_torch()
        return _fd_cells("torch", lambda v, d: torch.tensor(v, dtype=getattr(torch, d)),
                         torch_derivative, facts)

    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    spec = [(f"h{i}", f"|central difference − f'|, h = {h:.0e} (float32 / float64)")
            for i, h in enumerate(STEPS)]
    spec += [("best_h", "best h (float32 / float64)"),
             ("best_err", "best error (float32 / float64)"),
             ("autodiff", "error of the gradient itself (numpy: by hand; float32 / float64)")]
    rows = table_rows(columns, spec)
    explanation = (
        "A central difference trades truncation error (h²) against rounding error (eps/h), so for "
        f"f(x) = sin(x)·eˣ at {_FD_POINT} its best error is "
        f"{format_fact(facts, 'numpy_best_err_float32', format_error)} in float32 (at h = "
        f"{format_fact(facts, 'numpy_best_h_float32', format_error)}) but "
        f"{format_fact(facts, 'numpy_best_err_float64', format_error)} in float64 (at h = "
        f"{format_fact(facts, 'numpy_best_h_float64', format_error)}), far too coarse in float32 "
        "to tell a right gradient from a slightly wrong one."
    )
    return explanation, rows, facts
