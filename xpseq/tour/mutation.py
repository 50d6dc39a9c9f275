"""Lesson 8: mutation, torch's in-place version check and JAX's immutable arrays.

Writing into arrays, and into values a backward pass saved: torch refuses, JAX arrays
cannot be written, and a hand-derived NumPy rule silently reads the mutated value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xpseq import backends
from xpseq.core import vjp
from xpseq.tour._common import (
    NONE,
    Cells,
    Row,
    format_fact,
    format_number,
    register_lesson,
    run_columns,
    short_message,
    table_rows,
)

__all__ = ["lesson_mutation", "numpy_mutate_saved", "numpy_write", "jax_write",
           "torch_write", "torch_mutate_saved", "torch_mutate_leaf"]


# ------------------------------------------------------------------------ the code


def numpy_mutate_saved(x0: np.ndarray) -> float:
    """xpseq's hand-derived ``tanh`` rule saves ``y = tanh x``; add 1 to ``y`` in place and
    ask again: how much the gradient moved (nothing stops it)."""
    y, backprop = vjp.tanh(np.asarray(x0), xp=backends.get("numpy").xp)
    (before,) = backprop(np.ones(3))
    y += 1.0                                   # in place, on the array the rule saved
    (after,) = backprop(np.ones(3))
    return float(np.max(np.abs(after - before)))


def numpy_write(x0: np.ndarray) -> tuple[bool, str]:
    """``x[0] = 5`` on a copy (allowed), then on an array marked ``writeable = False``."""
    x = x0.copy()
    x[0] = 5.0
    frozen = np.array(x0)
    frozen.flags.writeable = False
    try:
        frozen[0] = 5.0
        readonly = "none"
    except ValueError as err:
        readonly = type(err).__name__
    return bool(x[0] == 5.0), readonly


def jax_write(x0: np.ndarray) -> tuple[str, Any, Any]:
    """``x[0] = 5`` on a JAX array (refused), and ``x.at[0].set(5)``, which returns a new
    array and leaves ``x`` as it was."""
    import jax.numpy as jnp

    x = jnp.asarray(x0)
    try:
        x[0] = 5.0
        error = "none"
    except TypeError as err:
        error = type(err).__name__
    return error, x.at[0].set(5.0), x


def torch_write(x0: np.ndarray) -> tuple[bool, int, int]:
    """``x[0] = 5`` on a plain tensor: allowed, and counted by its version counter."""
    import torch

    x = torch.tensor(x0)
    before = x._version                        # bumped by every in-place write
    x[0] = 5.0
    return bool(x[0] == 5.0), before, x._version


def torch_mutate_saved(x0: np.ndarray) -> BaseException | None:
    """``y = tanh(x)`` saves ``y`` for its backward; add 1 to it in place and run backward:
    the error torch raises (``None`` if none)."""
    import torch

    x = torch.tensor(x0, requires_grad=True)
    y = torch.tanh(x)
    y.add_(1.0)
    try:
        y.sum().backward()
    except RuntimeError as err:
        return err
    return None


def torch_mutate_leaf(x0: np.ndarray) -> BaseException | None:
    """An in-place op on a leaf that requires grad: the error torch raises."""
    import torch

    leaf = torch.tensor(x0, requires_grad=True)
    try:
        leaf.add_(1.0)
    except RuntimeError as err:
        return err
    return None


# ------------------------------------------------------------------------ the table


@register_lesson(8, "Mutation: torch's in-place version check, JAX's immutable arrays",
                 code=(numpy_mutate_saved, numpy_write, jax_write, torch_write, torch_mutate_saved,
                       torch_mutate_leaf))
def lesson_mutation() -> tuple[str, list[Row], dict[str, Any]]:
    """Writing into arrays, and into values saved for the backward pass."""
    x0 = np.array([0.5, -1.0, 2.0])
    facts: dict[str, Any] = {"x": x0.tolist()}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        changed = numpy_mutate_saved(x0)
        setitem_ok, readonly = numpy_write(x0)
        facts.update(numpy_setitem_ok=setitem_ok, numpy_grad_change_after_mutation=changed,
                     numpy_readonly_error=readonly)
        return {"setitem": "allowed", "saved": f"silently wrong: |Δgrad| {format_number(changed)}",
                "guard": f"writeable=False → {readonly}", "leaf": NONE}

    def jax_part(facts: dict[str, Any]) -> Cells:
        error, updated, x = jax_write(x0)
        facts.update(jax_setitem_error=error, jax_at_set_value=float(updated[0]),
                     jax_original_unchanged=bool(float(x[0]) == x0[0]))
        return {"setitem": f"{error}; x.at[0].set(5) → new array",
                "saved": "- (nothing can change)", "guard": "always immutable", "leaf": NONE}

    def torch_part(facts: dict[str, Any]) -> Cells:
        setitem_ok, version_before, version_after = torch_write(x0)
        err = torch_mutate_saved(x0)
        error, message = ("none", "") if err is None else (type(err).__name__, str(err))
        leaf = torch_mutate_leaf(x0)
        leaf_error = "none" if leaf is None else f"{type(leaf).__name__}: {short_message(leaf, 50)}"
        facts.update(torch_setitem_ok=setitem_ok, torch_version_before=version_before,
                     torch_version_after=version_after, torch_inplace_error=error,
                     torch_inplace_message=message, torch_leaf_inplace_error=leaf_error)
        return {"setitem": f"allowed; version {version_before} → {version_after}",
                "saved": (f"{error}: {short_message(RuntimeError(message), 70)}" if message
                          else error),
                "guard": "version counter", "leaf": leaf_error}

    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [
        ("setitem", "x[0] = 5 on a plain array"),
        ("saved", "mutate y = tanh(x) in place, then backward"),
        ("guard", "what protects saved values"),
        ("leaf", "in-place op on a leaf that requires grad (numpy, jax: no leaves)"),
    ])
    explanation = (
        f"Backward passes reuse values saved in the forward: torch counts in-place writes "
        f"and refuses ({format_fact(facts, 'torch_inplace_error')}), JAX arrays cannot be written "
        f"({format_fact(facts, 'jax_setitem_error')}; .at[].set returns a copy), and a "
        f"hand-derived NumPy rule simply reads the mutated array and returns a gradient off "
        f"by {format_fact(facts, 'numpy_grad_change_after_mutation', format_number)}."
    )
    return explanation, rows, facts
