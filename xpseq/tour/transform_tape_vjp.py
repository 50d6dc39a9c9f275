"""Lesson 1: a function transform (jax.grad), a tape (torch) and a hand-derived VJP (xpseq).

The gradient of ``f(W) = Σ tanh(x Wᵀ)`` three ways, and what each does when asked again:
``jax.grad`` returns a fresh gradient on every call, torch's ``.grad`` accumulates and the
first backward frees the graph, and xpseq's hand-derived rule is a closure that can be
called again.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from array_api_compat import array_namespace

from xpseq import backends
from xpseq.core import vjp
from xpseq.tour._common import (
    NONE,
    Cells,
    Row,
    _columns,
    _data,
    _err,
    _fact,
    _jax,
    _lesson,
    _num,
    _short,
    _table,
    _torch,
    _vec,
    _xp_numpy,
)

__all__ = ["lesson_transform_tape_vjp"]


def _tanh_sum(W: Any, X: Any) -> Any:
    """``f(W) = Σ tanh(X Wᵀ)``, written once for any array library."""
    xp = array_namespace(W, X)
    return xp.sum(xp.tanh(X @ W.T))


def _tanh_sum_with_rule(X: np.ndarray) -> Callable[[Any], Any]:
    """``W ↦ _tanh_sum(W, X)`` with xpseq's hand-derived rule attached (``defvjp``)."""
    xp = _xp_numpy()

    def rule(W: Any) -> tuple[Any, Callable]:
        z, linear_bp = vjp.linear(X, W, None, xp=xp)
        y, tanh_bp = vjp.tanh(z, xp=xp)

        def backprop(d: Any) -> tuple[Any]:
            (dz,) = tanh_bp(d * xp.ones_like(y))      # d Σy / dy = 1, scaled by d
            _, dW, _ = linear_bp(dz)
            return (dW,)

        return xp.sum(y), backprop

    return vjp.defvjp(lambda W: _tanh_sum(W, X), rule)


@_lesson(1, "A function transform (jax.grad), a tape (torch) and a hand-derived VJP (xpseq)")
def lesson_transform_tape_vjp() -> tuple[str, list[Row], dict[str, Any]]:
    """jax.grad vs torch's tape vs xpseq's hand-derived rule on f(W) = Σ tanh(x Wᵀ)."""
    X, W = _data(1, 5, 4), _data(2, 3, 4)
    facts: dict[str, Any] = {"X": X.tolist(), "W": W.tolist()}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        be = backends.get("numpy")
        value, grad = be.value_and_grad(_tanh_sum_with_rule(X))(W)
        facts["numpy_value"] = float(value)
        facts["numpy_grad"] = grad.tolist()
        # y = 3x as xpseq's linear layer with the 1x1 weight 3; ask its backprop three times.
        _, backprop = vjp.linear(np.array([[2.0]]), np.array([[3.0]]), None, xp=be.xp)
        repeated = [float(backprop(np.ones((1, 1)))[0][0, 0]) for _ in range(3)]
        facts["numpy_repeated_grads"] = repeated
        again = len(set(repeated)) == 1               # the same backprop, called 3 times
        facts["numpy_second_backprop_same"] = again
        return {"value": _num(value, 10), "grad": _vec(grad[0]), "diff": "reference",
                "repeat": ", ".join(_num(g) for g in repeated),
                "second": ("allowed, same value" if again else "allowed, new value")
                + " (a closure)", "retain": NONE}

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        Xj = jnp.asarray(X)
        # jit compiles each transformed function once (eager JAX compiles op by op).
        value, grad = jax.jit(jax.value_and_grad(lambda W: _tanh_sum(W, Xj)))(jnp.asarray(W))
        diff = float(np.max(np.abs(np.asarray(grad) - np.asarray(facts["numpy_grad"]))))
        repeated = [float(jax.grad(lambda x: 3.0 * x)(2.0)) for _ in range(3)]
        _, pullback = jax.vjp(lambda x: x * x, 2.0)
        twice = [float(pullback(1.0)[0]) for _ in range(2)]
        facts.update(jax_value=float(value), jax_grad=np.asarray(grad).tolist(),
                     jax_max_diff_vs_numpy=diff, jax_repeated_grads=repeated,
                     jax_second_vjp=twice)
        return {"value": _num(value, 10), "grad": _vec(np.asarray(grad)[0]), "diff": _err(diff),
                "repeat": ", ".join(_num(g) for g in repeated),
                "second": f"vjp fn twice: {', '.join(_num(g) for g in twice)} (pure)",
                "retain": NONE}

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        Wt = torch.tensor(W, requires_grad=True)
        value = _tanh_sum(Wt, torch.tensor(X))
        value.backward()
        grad = Wt.grad.numpy()
        diff = float(np.max(np.abs(grad - np.asarray(facts["numpy_grad"]))))
        x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
        accumulated = []
        for _ in range(3):                # a training loop that forgets x.grad = None
            (3.0 * x).backward()
            accumulated.append(float(x.grad))
        x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
        y = x * x
        y.backward()
        try:
            y.backward()
            error, message = "none", ""
        except RuntimeError as err:
            error, message = type(err).__name__, _short(err)
        x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
        y = x * x
        retained = []
        for _ in range(2):
            y.backward(retain_graph=True)
            retained.append(float(x.grad))
        value = float(value.detach())
        facts.update(torch_value=value, torch_grad=grad.tolist(),
                     torch_max_diff_vs_numpy=diff, torch_grad_accumulates=accumulated,
                     second_backward_error=error, second_backward_message=message,
                     torch_retain_graph_grads=retained)
        return {"value": _num(value, 10), "grad": _vec(grad[0]), "diff": _err(diff),
                "repeat": ", ".join(_num(g) for g in accumulated),
                "second": f"{error}: {message}", "retain": ", ".join(_num(g) for g in retained)}

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("value", "f(W) = Σ tanh(x Wᵀ)"),
        ("grad", "∂f/∂W, first row"),
        ("diff", "max |∂f/∂W − numpy's hand-derived|"),
        ("repeat", "d(3x)/dx at 2, asked 3 times (torch: .grad never zeroed)"),
        ("second", "a second backward through the same graph"),
        ("retain", "y = x² at 2, backward twice with retain_graph=True: x.grad "
                   "(numpy, jax: no graph to keep)"),
    ])
    worst = max((facts[k] for k in ("jax_max_diff_vs_numpy", "torch_max_diff_vs_numpy")
                 if k in facts), default=float("nan"))
    explanation = (
        f"jax.grad transforms a pure function and returns a fresh gradient on every call "
        f"({_fact(facts, 'jax_repeated_grads')}), torch records a tape whose .grad "
        f"accumulates ({_fact(facts, 'torch_grad_accumulates')}) and whose graph the first "
        f"backward frees unless retain_graph=True, and xpseq's hand-derived NumPy rule is a "
        f"closure that can be called again; all three agree on ∂f/∂W to {_err(worst)}."
    )
    return explanation, rows, facts
