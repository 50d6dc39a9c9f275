"""Lesson 1: a function transform (jax.grad), a tape (torch) and a hand-derived VJP (xpseq).

The gradient of ``f(W) = Σ tanh(x Wᵀ)`` three ways, and what each does when asked again:
``jax.grad`` returns a fresh gradient on every call, torch's ``.grad`` accumulates and the
first backward frees the graph, and xpseq's hand-derived rule is a closure that can be
called again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from array_api_compat import array_namespace

from xpseq import backends
from xpseq.core import vjp
from xpseq.tour._common import (
    NONE,
    Cells,
    Row,
    format_error,
    format_fact,
    format_number,
    format_vector,
    normal_samples,
    register_lesson,
    run_columns,
    short_message,
    table_rows,
)

__all__ = ["lesson_transform_tape_vjp", "tanh_sum", "numpy_value_and_grad",
           "numpy_backprop_again", "jax_value_and_grad", "jax_asked_again",
           "torch_value_and_grad", "torch_accumulates", "torch_second_backward",
           "torch_retain_graph"]


# ------------------------------------------------------------------------ the code


def tanh_sum(W: Any, X: Any) -> Any:
    """``f(W) = Σ tanh(X Wᵀ)``, written once for any array library."""
    xp = array_namespace(W, X)
    return xp.sum(xp.tanh(X @ W.T))


def numpy_value_and_grad(X: np.ndarray, W: np.ndarray) -> tuple[Any, Any]:
    """``f`` and ``∂f/∂W`` on NumPy: xpseq's hand-derived rules of ``linear`` and ``tanh``,
    chained backwards by hand."""
    xp = backends.get("numpy").xp
    z, linear_bp = vjp.linear(X, W, None, xp=xp)      # z = X Wᵀ, and its backprop
    y, tanh_bp = vjp.tanh(z, xp=xp)                   # y = tanh z
    (dz,) = tanh_bp(xp.ones_like(y))                  # d Σy / dy = 1
    _, dW, _ = linear_bp(dz)
    return xp.sum(y), dW


def numpy_backprop_again() -> list[float]:
    """``y = 3x`` as xpseq's linear layer (the 1×1 weight 3) at ``x = 2``: its backprop, a
    closure, asked for ``dy/dx`` three times."""
    xp = backends.get("numpy").xp
    _, backprop = vjp.linear(np.array([[2.0]]), np.array([[3.0]]), None, xp=xp)
    return [float(backprop(np.ones((1, 1)))[0][0, 0]) for _ in range(3)]


def jax_value_and_grad(X: np.ndarray, W: np.ndarray) -> tuple[Any, Any]:
    """``f`` and ``∂f/∂W`` by ``jax.value_and_grad``, a transform of the function ``f``
    (``jit`` compiles it once; eager JAX compiles op by op)."""
    import jax
    import jax.numpy as jnp

    Xj = jnp.asarray(X)
    return jax.jit(jax.value_and_grad(lambda W: tanh_sum(W, Xj)))(jnp.asarray(W))


def jax_asked_again() -> tuple[list[float], list[float]]:
    """``d(3x)/dx`` at 2 asked three times, and the pullback of ``x²`` at 2 called twice:
    pure functions give the same answer every time."""
    import jax

    repeated = [float(jax.grad(lambda x: 3.0 * x)(2.0)) for _ in range(3)]
    _, pullback = jax.vjp(lambda x: x * x, 2.0)
    return repeated, [float(pullback(1.0)[0]) for _ in range(2)]


def torch_value_and_grad(X: np.ndarray, W: np.ndarray) -> tuple[float, np.ndarray]:
    """``f`` and ``∂f/∂W`` by torch's tape: the forward records, ``backward`` replays it."""
    import torch

    Wt = torch.tensor(W, requires_grad=True)
    value = tanh_sum(Wt, torch.tensor(X))
    value.backward()
    assert Wt.grad is not None                     # the tape wrote it
    return float(value.detach()), Wt.grad.numpy()


def torch_accumulates() -> list[float]:
    """``d(3x)/dx`` at 2, three backward passes that never set ``x.grad = None``."""
    import torch

    x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    seen = []
    for _ in range(3):                # a training loop that forgets x.grad = None
        (3.0 * x).backward()
        assert x.grad is not None
        seen.append(float(x.grad))
    return seen


def torch_second_backward() -> BaseException | None:
    """A second ``backward`` through the graph of ``y = x²``, which the first one freed:
    the error it raises (``None`` if none)."""
    import torch

    x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    y = x * x
    y.backward()
    try:
        y.backward()
    except RuntimeError as err:
        return err
    return None


def torch_retain_graph() -> list[float]:
    """``y = x²`` at 2, backward twice with ``retain_graph=True``: ``x.grad`` after each."""
    import torch

    x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    y = x * x
    seen = []
    for _ in range(2):
        y.backward(retain_graph=True)
        assert x.grad is not None
        seen.append(float(x.grad))
    return seen


CODE = (tanh_sum, numpy_value_and_grad, numpy_backprop_again, jax_value_and_grad,
        jax_asked_again, torch_value_and_grad, torch_accumulates, torch_second_backward,
        torch_retain_graph)


# ------------------------------------------------------------------------ the table


@register_lesson(1, "A function transform (jax.grad), a tape (torch) and a hand-derived VJP "
                 "(xpseq)", code=CODE)
def lesson_transform_tape_vjp() -> tuple[str, list[Row], dict[str, Any]]:
    """jax.grad vs torch's tape vs xpseq's hand-derived rule on f(W) = Σ tanh(x Wᵀ)."""
    X, W = normal_samples(1, 5, 4), normal_samples(2, 3, 4)
    facts: dict[str, Any] = {"X": X.tolist(), "W": W.tolist()}

    def diff(grad: Any) -> float:
        return float(np.max(np.abs(np.asarray(grad) - np.asarray(facts["numpy_grad"]))))

    def numpy_part(facts: dict[str, Any]) -> Cells:
        value, grad = numpy_value_and_grad(X, W)
        repeated = numpy_backprop_again()
        again = len(set(repeated)) == 1               # the same backprop, called 3 times
        facts.update(numpy_value=float(value), numpy_grad=grad.tolist(),
                     numpy_repeated_grads=repeated, numpy_second_backprop_same=again)
        return {"value": format_number(value, 10), "grad": format_vector(grad[0]),
                "diff": "reference",
                "repeat": ", ".join(format_number(g) for g in repeated),
                "second": ("allowed, same value" if again else "allowed, new value")
                + " (a closure)", "retain": NONE}

    def jax_part(facts: dict[str, Any]) -> Cells:
        value, grad = jax_value_and_grad(X, W)
        repeated, twice = jax_asked_again()
        facts.update(jax_value=float(value), jax_grad=np.asarray(grad).tolist(),
                     jax_max_diff_vs_numpy=diff(grad), jax_repeated_grads=repeated,
                     jax_second_vjp=twice)
        return {"value": format_number(value, 10), "grad": format_vector(np.asarray(grad)[0]),
                "diff": format_error(diff(grad)),
                "repeat": ", ".join(format_number(g) for g in repeated),
                "second": f"vjp fn twice: {', '.join(format_number(g) for g in twice)} (pure)",
                "retain": NONE}

    def torch_part(facts: dict[str, Any]) -> Cells:
        value, grad = torch_value_and_grad(X, W)
        accumulated, retained = torch_accumulates(), torch_retain_graph()
        err = torch_second_backward()
        error, message = ("none", "") if err is None else (type(err).__name__, short_message(err))
        facts.update(torch_value=value, torch_grad=grad.tolist(),
                     torch_max_diff_vs_numpy=diff(grad), torch_grad_accumulates=accumulated,
                     second_backward_error=error, second_backward_message=message,
                     torch_retain_graph_grads=retained)
        return {"value": format_number(value, 10), "grad": format_vector(grad[0]),
                "diff": format_error(diff(grad)),
                "repeat": ", ".join(format_number(g) for g in accumulated),
                "second": f"{error}: {message}",
                "retain": ", ".join(format_number(g) for g in retained)}

    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [
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
        f"({format_fact(facts, 'jax_repeated_grads')}), torch records a tape whose .grad "
        f"accumulates ({format_fact(facts, 'torch_grad_accumulates')}) and whose graph the first "
        f"backward frees unless retain_graph=True, and xpseq's hand-derived NumPy rule is a "
        f"closure that can be called again; all three agree on ∂f/∂W to {format_error(worst)}."
    )
    return explanation, rows, facts
