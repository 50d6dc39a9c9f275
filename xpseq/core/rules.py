"""Hand-derived rules attached to functions and run as their gradient: how a function gets
its value and gradient where no library differentiates it.

A rule is attached to a function with :func:`defvjp` (also importable from
:mod:`xpseq.core.vjp`, where the rules are):
``fn.vjp(*args) -> (fn(*args), backprop)``. :func:`value_and_grad_by_rule` runs it in
``jax.value_and_grad``'s convention; the NumPy and array_api_strict backends'
``value_and_grad`` is this function, and the training step calls it directly to run the
hand-derived backward passes on JAX or PyTorch arrays (``gradients="hand-derived"``).
"""

from __future__ import annotations

from typing import Any, Callable

import array_api_compat

__all__ = ["defvjp", "value_and_grad_by_rule"]


def defvjp(fn: Callable[..., Any], rule: Callable[..., Any]) -> Callable[..., Any]:
    """Attach a hand-derived rule to ``fn`` and return ``fn``.

    ``rule(*args)`` must return ``(fn(*args), backprop)`` where ``backprop(cotangent)``
    returns one gradient per positional argument (``None`` where there is none). The
    numpy and array_api_strict backends' ``value_and_grad(fn)`` call the rule; JAX and
    PyTorch ignore it and differentiate ``fn`` themselves.
    """
    setattr(fn, "vjp", rule)
    return fn


def value_and_grad_by_rule(fn: Callable[..., Any], argnums: int | tuple[int, ...] = 0,
                          has_aux: bool = False, *, who: str = "") -> Callable[..., Any]:
    """``fn``'s value and gradient from the rule attached to it with
    :func:`defvjp`, in ``jax.value_and_grad``'s convention (see
    :meth:`xpseq.backends.Backend.value_and_grad`).

    The rule runs on whatever arrays ``fn`` is given: how NumPy and array_api_strict
    differentiate, and how PyTorch and JAX run the hand-derived backward passes when asked
    (``gradients="hand-derived"``). ``who`` names the caller in the error for a function
    with no rule.

    Raises
    ------
    NotImplementedError
        ``fn`` carries no rule.
    """
    rule = getattr(fn, "vjp", None)
    if rule is None:
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise NotImplementedError(
            f"{who or 'value_and_grad_by_rule'}: no automatic differentiation here, so "
            f"value_and_grad(fn) needs fn to carry a hand-derived rule, attached with "
            f"xpseq.core.vjp.defvjp(fn, rule), and {name} has none. The models' losses "
            "have one (xpseq.models.loss_and_grad); for any other function use 'jax' or "
            "'torch', or xpseq.testing.central_difference_grad."
        )
    def wrapped(*args: Any) -> tuple[Any, Any]:
        out, backprop = rule(*args)
        value = out[0] if has_aux else out
        xp = array_api_compat.array_namespace(value)
        grads = backprop(xp.ones((), dtype=value.dtype,
                                 device=array_api_compat.device(value)))
        picked = (tuple(grads[i] for i in argnums) if isinstance(argnums, tuple)
                  else grads[argnums])
        return out, picked

    return wrapped
