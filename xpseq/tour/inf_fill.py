"""Lesson 5: a finite loss with a NaN gradient under a −inf fill.

A log-softmax loss with an additive −inf mask and a padding query row: the loss ignores
the all −inf row, but its NaN still reaches the gradient, unless the fill is a ``where`` or
the rule is xpseq's ``log_softmax``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import xpseq.core as C
from xpseq import backends
from xpseq.core import vjp
from xpseq.tour._common import (
    Cells,
    Row,
    as_floats,
    format_fact,
    format_number,
    format_vector,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["lesson_inf_fill", "numpy_masked_loss_grad", "jax_masked_loss_grads",
           "torch_masked_loss_grads", "torch_cross_entropy_grad"]


# ------------------------------------------------------------------------ the code


def numpy_masked_loss_grad(scores: Any, bias: Any, targets: Any,
                           real: Any) -> tuple[float, np.ndarray]:
    """The loss ``−Σ log_softmax(s + bias)[target]`` over the real rows and ``∂loss/∂s`` by
    xpseq's hand-derived ``log_softmax`` rule (``d(s + bias)/ds = 1``)."""
    y, backprop = vjp.log_softmax(scores + bias, xp=backends.get("numpy").xp)
    rows = np.arange(len(targets))
    loss = -float(np.sum(np.where(real, y[rows, targets], 0.0)))
    dy = np.zeros_like(y)
    dy[rows, targets] = -real.astype(np.float64)      # d loss / d y: −1 at each real target
    (dscores,) = backprop(dy)
    return loss, dscores


def jax_masked_loss_grads(scores: Any, keep: Any, bias: Any, targets: Any,
                          real: Any) -> tuple[float, dict[str, Any]]:
    """The loss and ``jax.grad`` of it with an additive mask, with a ``where`` fill, and with
    the additive mask through ``xpseq.core.log_softmax``."""
    import jax
    import jax.numpy as jnp

    def loss(log_softmax: Callable, fill: Callable) -> Callable:
        def f(s: Any) -> Any:
            picked = log_softmax(fill(s))[jnp.arange(len(targets)), targets]
            return -jnp.sum(jnp.where(jnp.asarray(real), picked, 0.0))
        return f

    additive = lambda s: s + jnp.asarray(bias)                          # noqa: E731
    where = lambda s: jnp.where(jnp.asarray(keep), s, -jnp.inf)         # noqa: E731
    value, grad = jax.jit(jax.value_and_grad(loss(jax.nn.log_softmax, additive)))(scores)
    return float(value), {"additive": grad,
                          "where": jax.jit(jax.grad(loss(jax.nn.log_softmax, where)))(scores),
                          "xpseq": jax.jit(jax.grad(loss(C.log_softmax, additive)))(scores)}


def torch_masked_loss_grads(scores: Any, keep: Any, bias: Any, targets: Any,
                            real: Any) -> tuple[float, dict[str, np.ndarray]]:
    """The loss and torch autograd of it with an additive mask, with ``masked_fill``, and
    with the additive mask through ``xpseq.core.log_softmax``."""
    import torch

    def run(log_softmax: Callable, fill: Callable) -> tuple[float, np.ndarray]:
        s = torch.tensor(scores, requires_grad=True)
        picked = log_softmax(fill(s))[torch.arange(len(targets)), torch.tensor(targets)]
        value = -torch.sum(torch.where(torch.tensor(real), picked, 0.0))
        value.backward()
        assert s.grad is not None
        return float(value.detach()), s.grad.numpy()

    native = lambda z: torch.log_softmax(z, dim=-1)                     # noqa: E731
    additive = lambda s: s + torch.tensor(bias)                         # noqa: E731
    where = lambda s: s.masked_fill(~torch.tensor(keep), float("-inf"))  # noqa: E731
    value, grad = run(native, additive)
    return value, {"additive": grad, "where": run(native, where)[1],
                   "xpseq": run(C.log_softmax, additive)[1]}


def torch_cross_entropy_grad(scores: Any, bias: Any, targets: Any,
                             real: Any) -> tuple[float, np.ndarray]:
    """``F.cross_entropy`` of the additively masked scores, the padding row ignored by
    ``ignore_index``: the loss and its gradient."""
    import torch

    s = torch.tensor(scores, requires_grad=True)
    ignored = torch.where(torch.tensor(real), torch.tensor(targets), -100)
    ce = torch.nn.functional.cross_entropy(s + torch.tensor(bias), ignored, ignore_index=-100,
                                           reduction="sum")
    ce.backward()
    assert s.grad is not None
    return float(ce.detach()), s.grad.numpy()


# ------------------------------------------------------------------------ the table


@register_lesson(5, "A finite loss with a NaN gradient under a −inf fill",
                 code=(numpy_masked_loss_grad, jax_masked_loss_grads, torch_masked_loss_grads,
                       torch_cross_entropy_grad))
def lesson_inf_fill() -> tuple[str, list[Row], dict[str, Any]]:
    """Log-softmax loss with a −inf mask and a padding query row."""
    scores = np.array([[1.0, 2.0, 0.5], [0.3, 0.1, 0.2]])
    keep = np.array([[True, True, False], [False, False, False]])   # row 1 is a padding query
    bias = np.where(keep, 0.0, -np.inf)                              # an additive −inf mask
    targets, real = np.array([1, 0]), np.array([True, False])
    facts: dict[str, Any] = {"scores": scores.tolist(), "keep": keep.tolist(),
                             "targets": targets.tolist(), "real": real.tolist()}

    def record(name: str, key: str, grad: Any) -> str:
        grad = np.asarray(grad)
        facts[f"{name}_{key}_padding_grad"] = as_floats(grad[1])
        facts[f"{name}_{key}_real_grad"] = as_floats(grad[0])
        return format_vector(grad[1])

    def numpy_part(facts: dict[str, Any]) -> Cells:
        loss, dscores = numpy_masked_loss_grad(scores, bias, targets, real)
        facts["numpy_loss"] = loss
        cell = record("numpy", "additive", dscores)
        record("numpy", "where", np.where(keep, dscores, 0.0))
        record("numpy", "xpseq", dscores)
        return {"loss": format_number(loss), "additive": cell, "where": cell, "xpseq": cell}

    def jax_part(facts: dict[str, Any]) -> Cells:
        loss, grads = jax_masked_loss_grads(scores, keep, bias, targets, real)
        facts["jax_loss"] = loss
        return {"loss": format_number(loss)} | {k: record("jax", k, g) for k, g in grads.items()}

    def torch_part(facts: dict[str, Any]) -> Cells:
        loss, grads = torch_masked_loss_grads(scores, keep, bias, targets, real)
        facts["torch_loss"] = loss
        cells = {"loss": format_number(loss)} | {k: record("torch", k, g) for k, g in grads.items()}
        facts["torch_ce_loss"], grad = torch_cross_entropy_grad(scores, bias, targets, real)
        cells["ce"] = (f"loss {format_number(facts['torch_ce_loss'])}, grad "
                       + record("torch", "ce", grad))
        return cells

    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [
        ("loss", "loss = −Σ log_softmax(s + mask)[target], padding row dropped by where "
                 "(numpy: xpseq's rule)"),
        ("additive", "∂loss/∂s, padding row (mask added: 0 or −inf)"),
        ("where", "same, fill by where/masked_fill(keep, s, −inf)"),
        ("xpseq", "same as the additive row, through xpseq.core.log_softmax"),
        ("ce", "F.cross_entropy(s + mask, ignore_index): padding row (torch only)"),
    ])
    explanation = (
        "An all −inf row has no softmax (0/0), so although the loss ignores it and stays finite "
        f"({format_fact(facts, 'jax_loss', format_number)}), the backward multiplies that row's "
        "NaN by a zero cotangent and an additive mask passes the NaN on "
        f"({format_fact(facts, 'jax_additive_padding_grad', format_vector)} in jax, "
        f"{format_fact(facts, 'torch_additive_padding_grad', format_vector)} in torch), whereas "
        "xpseq's log_softmax defines an all −inf row as −inf with a zero gradient."
    )
    return explanation, rows, facts
