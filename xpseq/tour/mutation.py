"""Lesson 8: mutation, torch's in-place version check and JAX's immutable arrays.

Writing into arrays, and into values a backward pass saved: torch refuses, JAX arrays
cannot be written, and a hand-derived NumPy rule silently reads the mutated value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xpseq.core import vjp
from xpseq.tour._common import (
    NONE,
    Cells,
    Row,
    _columns,
    _fact,
    _jax,
    _lesson,
    _num,
    _short,
    _table,
    _torch,
    _xp_numpy,
)

__all__ = ["lesson_mutation"]


@_lesson(8, "Mutation: torch's in-place version check, JAX's immutable arrays")
def lesson_mutation() -> tuple[str, list[Row], dict[str, Any]]:
    """Writing into arrays, and into values saved for the backward pass."""
    x0 = np.array([0.5, -1.0, 2.0])
    facts: dict[str, Any] = {"x": x0.tolist()}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        xp = _xp_numpy()
        x = x0.copy()
        x[0] = 5.0
        y, backprop = vjp.tanh(xp.asarray(x0), xp=xp)
        (before,) = backprop(np.ones(3))
        y += 1.0                                   # in place, on the array the rule saved
        (after,) = backprop(np.ones(3))
        changed = float(np.max(np.abs(after - before)))
        frozen = np.array(x0)
        frozen.flags.writeable = False
        try:
            frozen[0] = 5.0
            readonly = "none"
        except ValueError as err:
            readonly = type(err).__name__
        facts.update(numpy_setitem_ok=bool(x[0] == 5.0), numpy_grad_change_after_mutation=changed,
                     numpy_readonly_error=readonly)
        return {"setitem": "allowed", "saved": f"silently wrong: |Δgrad| {_num(changed)}",
                "guard": f"writeable=False → {readonly}", "leaf": NONE}

    def jax_part(facts: dict[str, Any]) -> Cells:
        _, jnp = _jax()
        x = jnp.asarray(x0)
        try:
            x[0] = 5.0
            error = "none"
        except TypeError as err:
            error = type(err).__name__
        updated = x.at[0].set(5.0)
        facts.update(jax_setitem_error=error, jax_at_set_value=float(updated[0]),
                     jax_original_unchanged=bool(float(x[0]) == x0[0]))
        return {"setitem": f"{error}; x.at[0].set(5) → new array",
                "saved": "- (nothing can change)", "guard": "always immutable", "leaf": NONE}

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        plain = torch.tensor(x0)
        version_before = plain._version            # bumped by every in-place write
        plain[0] = 5.0
        version_after = plain._version
        x = torch.tensor(x0, requires_grad=True)
        y = torch.tanh(x)                          # saves y for its backward
        y.add_(1.0)
        try:
            y.sum().backward()
            error, message = "none", ""
        except RuntimeError as err:
            error, message = type(err).__name__, str(err)
        leaf = torch.tensor(x0, requires_grad=True)
        try:
            leaf.add_(1.0)
            leaf_error = "none"
        except RuntimeError as err:
            leaf_error = f"{type(err).__name__}: {_short(err, 50)}"
        facts.update(torch_setitem_ok=bool(plain[0] == 5.0), torch_version_before=version_before,
                     torch_version_after=version_after, torch_inplace_error=error,
                     torch_inplace_message=message, torch_leaf_inplace_error=leaf_error)
        return {"setitem": f"allowed; version {version_before} → {version_after}",
                "saved": f"{error}: {_short(RuntimeError(message), 70)}" if message else error,
                "guard": "version counter", "leaf": leaf_error}

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("setitem", "x[0] = 5 on a plain array"),
        ("saved", "mutate y = tanh(x) in place, then backward"),
        ("guard", "what protects saved values"),
        ("leaf", "in-place op on a leaf that requires grad (numpy, jax: no leaves)"),
    ])
    explanation = (
        f"Backward passes reuse values saved in the forward: torch counts in-place writes "
        f"and refuses ({_fact(facts, 'torch_inplace_error')}), JAX arrays cannot be written "
        f"({_fact(facts, 'jax_setitem_error')}; .at[].set returns a copy), and a "
        f"hand-derived NumPy rule simply reads the mutated array and returns a gradient off "
        f"by {_fact(facts, 'numpy_grad_change_after_mutation', _num)}."
    )
    return explanation, rows, facts
