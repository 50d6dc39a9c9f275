"""Lesson 5: a finite loss with a NaN gradient under a −inf fill.

A log-softmax loss with an additive −inf mask and a padding query row: the loss ignores
the all −inf row, but its NaN still reaches the gradient, unless the fill is a ``where`` or
the rule is xpseq's ``log_softmax``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import xpseq.core as C
from xpseq.core import vjp
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

__all__ = ["lesson_inf_fill"]


@_lesson(5, "A finite loss with a NaN gradient under a −inf fill")
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
        facts[f"{name}_{key}_padding_grad"] = _floats(grad[1])
        facts[f"{name}_{key}_real_grad"] = _floats(grad[0])
        return _vec(grad[1])

    def numpy_part(facts: dict[str, Any]) -> Cells:
        xp = _xp_numpy()
        y, backprop = vjp.log_softmax(scores + bias, xp=xp)            # xpseq's rule
        picked = y[np.arange(2), targets]
        loss = -float(np.sum(np.where(real, picked, 0.0)))
        dy = np.zeros_like(y)
        dy[np.arange(2), targets] = -real.astype(np.float64)
        (dscores,) = backprop(dy)                                       # d(s + bias)/ds = 1
        facts["numpy_loss"] = loss
        cell = record("numpy", "additive", dscores)
        record("numpy", "where", np.where(keep, dscores, 0.0))
        record("numpy", "xpseq", dscores)
        return {"loss": _num(loss), "additive": cell, "where": cell, "xpseq": cell}

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        keep_j, bias_j, real_j = jnp.asarray(keep), jnp.asarray(bias), jnp.asarray(real)

        def loss(log_softmax: Callable, fill: Callable) -> Callable:
            def f(s: Any) -> Any:
                picked = log_softmax(fill(s))[jnp.arange(2), targets]
                return -jnp.sum(jnp.where(real_j, picked, 0.0))
            return f

        additive = lambda s: s + bias_j                                 # noqa: E731
        where = lambda s: jnp.where(keep_j, s, -jnp.inf)                # noqa: E731
        value, grad = jax.jit(jax.value_and_grad(loss(jax.nn.log_softmax, additive)))(scores)
        facts["jax_loss"] = float(value)
        cells = {"loss": _num(value), "additive": record("jax", "additive", grad)}
        cells["where"] = record("jax", "where",
                                jax.jit(jax.grad(loss(jax.nn.log_softmax, where)))(scores))
        cells["xpseq"] = record("jax", "xpseq",
                                jax.jit(jax.grad(loss(C.log_softmax, additive)))(scores))
        return cells

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        keep_t, bias_t, real_t = torch.tensor(keep), torch.tensor(bias), torch.tensor(real)
        rows_t, targets_t = torch.arange(2), torch.tensor(targets)

        def run(log_softmax: Callable, fill: Callable) -> tuple[float, Any]:
            s = torch.tensor(scores, requires_grad=True)
            picked = log_softmax(fill(s))[rows_t, targets_t]
            value = -torch.sum(torch.where(real_t, picked, 0.0))
            value.backward()
            return float(value.detach()), s.grad.numpy()

        native = lambda z: torch.log_softmax(z, dim=-1)                 # noqa: E731
        additive = lambda s: s + bias_t                                 # noqa: E731
        where = lambda s: s.masked_fill(~keep_t, float("-inf"))         # noqa: E731
        value, grad = run(native, additive)
        facts["torch_loss"] = value
        cells = {"loss": _num(value), "additive": record("torch", "additive", grad)}
        cells["where"] = record("torch", "where", run(native, where)[1])
        cells["xpseq"] = record("torch", "xpseq", run(C.log_softmax, additive)[1])
        s = torch.tensor(scores, requires_grad=True)
        ce = torch.nn.functional.cross_entropy(s + bias_t, torch.where(real_t, targets_t, -100),
                                               ignore_index=-100, reduction="sum")
        ce.backward()
        facts["torch_ce_loss"] = float(ce.detach())
        cells["ce"] = f"loss {_num(facts['torch_ce_loss'])}, grad " + record(
            "torch", "ce", s.grad.numpy())
        return cells

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("loss", "loss = −Σ log_softmax(s + mask)[target], padding row dropped by where "
                 "(numpy: xpseq's rule)"),
        ("additive", "∂loss/∂s, padding row (mask added: 0 or −inf)"),
        ("where", "same, fill by where/masked_fill(keep, s, −inf)"),
        ("xpseq", "same as the additive row, through xpseq.core.log_softmax"),
        ("ce", "F.cross_entropy(s + mask, ignore_index): padding row (torch only)"),
    ])
    explanation = (
        f"An all −inf row has no softmax (0/0), so although the loss ignores it and stays "
        f"finite ({_fact(facts, 'jax_loss', _num)}), the backward multiplies that row's NaN "
        f"by a zero cotangent and an additive mask passes the NaN on "
        f"({_fact(facts, 'jax_additive_padding_grad', _vec)} in jax, "
        f"{_fact(facts, 'torch_additive_padding_grad', _vec)} in torch), whereas "
        f"xpseq's log_softmax defines an all −inf row as −inf with a zero gradient."
    )
    return explanation, rows, facts
