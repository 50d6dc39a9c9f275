"""Lesson 3: NaN through ``where``, and the double-``where`` repair.

``x log x`` made safe at 0 by one ``where`` still has a NaN gradient there, because the
backward differentiates the branch it did not take; a second ``where`` that feeds ``log`` a
safe value repairs it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from array_api_compat import array_namespace

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
    _xp_numpy,
)

__all__ = ["lesson_where_nan"]


def _xlogx_naive(x: Any) -> Any:
    """``Σ x log x`` with the value 0 at 0 by one ``where``: the gradient at 0 is NaN."""
    xp = array_namespace(x)
    return xp.sum(xp.where(x > 0, x * xp.log(x), xp.zeros_like(x)))


def _xlogx_double(x: Any) -> Any:
    """The same function with the double ``where``: ``log`` never sees 0."""
    xp = array_namespace(x)
    positive = x > 0
    safe = xp.where(positive, x, xp.ones_like(x))
    return xp.sum(xp.where(positive, safe * xp.log(safe), xp.zeros_like(x)))


@_lesson(3, "NaN through where, and the double-where repair")
def lesson_where_nan() -> tuple[str, list[Row], dict[str, Any]]:
    """x log x made safe at 0 by where: NaN gradient, and the double-where fix."""
    x = np.array([0.0, 0.5])
    facts: dict[str, Any] = {"x": x.tolist()}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        xp = _xp_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            value = float(_xlogx_naive(xp.asarray(x)))
            # The chain rule applied mechanically, as a hand-derived rule would:
            # where() sends the cotangent to the taken branch only (g), then the
            # product rule for x·log x gives g·log x + x·(g/x) = 0·(−inf) + 0·(0/0) at 0.
            positive = x > 0
            g = np.where(positive, 1.0, 0.0)
            naive = g * np.log(x) + x * (g / x)
            safe = np.where(positive, x, 1.0)
            double = np.where(positive, g * np.log(safe) + safe * (g / safe), 0.0)
        facts.update(numpy_value=value, numpy_naive_grad=_floats(naive),
                     numpy_double_grad=_floats(double))
        return {"value": _num(value), "naive": _vec(naive), "double": _vec(double)}

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        xj = jnp.asarray(x)
        value = float(_xlogx_naive(xj))
        naive = np.asarray(jax.jit(jax.grad(_xlogx_naive))(xj))
        double = np.asarray(jax.jit(jax.grad(_xlogx_double))(xj))
        facts.update(jax_value=value, jax_naive_grad=_floats(naive),
                     jax_double_grad=_floats(double))
        return {"value": _num(value), "naive": _vec(naive), "double": _vec(double)}

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        grads = {}
        for name, f in (("naive", _xlogx_naive), ("double", _xlogx_double)):
            xt = torch.tensor(x, requires_grad=True)
            out = f(xt)
            out.backward()
            grads[name] = xt.grad.numpy()
            if name == "naive":
                value = float(out.detach())
        facts.update(torch_value=value, torch_naive_grad=_floats(grads["naive"]),
                     torch_double_grad=_floats(grads["double"]))
        return {"value": _num(value), "naive": _vec(grads["naive"]),
                "double": _vec(grads["double"])}

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("value", "f(x) = Σ where(x > 0, x log x, 0) at x = (0, 0.5)"),
        ("naive", "∂f/∂x, one where (numpy: the chain rule by hand)"),
        ("double", "∂f/∂x, double where: log(where(x > 0, x, 1))"),
    ])
    explanation = (
        f"The forward value is finite ({_fact(facts, 'numpy_value', _num)}), but the "
        f"gradient of where still differentiates the branch it did not take, where the "
        f"zero cotangent meets d(x log x)/dx = −inf and gives "
        f"{_fact(facts, 'jax_naive_grad', lambda v: _num(v[0]))}; feeding log a safe value "
        f"with a second where gives {_fact(facts, 'jax_double_grad', lambda v: _num(v[0]))}."
    )
    return explanation, rows, facts
