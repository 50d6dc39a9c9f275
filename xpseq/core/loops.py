"""``scan`` as a Python loop: ``lax.scan``'s semantics for libraries without it."""

from __future__ import annotations

from typing import Any, Callable

import array_api_compat as compat

from .tree import flatten, map_leaves, unflatten

__all__ = ["scan"]


def scan(fn: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Any,
         length: int | None = None, reverse: bool = False) -> tuple[Any, Any]:
    """Loop ``carry, y = fn(carry, x)`` over axis 0 of ``xs`` and stack the ``y``.

    Parameters
    ----------
    fn : callable ``(carry, x) -> (carry, y)``
    carry : array or nested dict/list/tuple of arrays
    xs : array or nested dict/list/tuple of arrays sharing their leading size ``T``
        (or ``None`` with ``length``)
    length : int, optional
        The number of steps when ``xs`` is ``None`` (or a check on ``T``).
    reverse : bool
        Run from the last step to the first; ``ys`` stays in the order of ``xs`` (as
        ``lax.scan(..., reverse=True)``).

    Returns
    -------
    carry : the final carry
    ys : ``y`` stacked along a new leading axis of size ``T`` (``None`` if ``fn`` returns
        ``None`` for ``y``)

    This is what the numpy, torch and array_api_strict backends use as ``backend.scan``;
    the jax backend uses ``jax.lax.scan``, with the same results and shapes.
    """
    leaves, treedef = flatten(xs)
    if not leaves and length is None:
        raise ValueError("scan: xs has no arrays, so pass length= (the number of steps)")
    sizes = {int(leaf.shape[0]) for leaf in leaves}
    if length is not None:
        sizes.add(int(length))
    if len(sizes) != 1:
        raise ValueError(
            f"scan: xs leaves and length disagree on the number of steps: {sorted(sizes)}"
        )
    (n,) = sizes
    if n == 0:
        # No step to run: find the shapes of y with one step on zeros, as lax.scan traces.
        dummy = []
        for leaf in leaves:
            xp = compat.array_namespace(leaf)
            dummy.append(xp.zeros(tuple(leaf.shape[1:]), dtype=leaf.dtype,
                                  device=compat.device(leaf)))
        _, y = fn(carry, unflatten(treedef, dummy))
        return carry, map_leaves(_empty_stack, y)
    ys = []
    for i in (reversed(range(n)) if reverse else range(n)):
        carry, y = fn(carry, unflatten(treedef, [leaf[i, ...] for leaf in leaves]))
        ys.append(y)
    if reverse:
        ys.reverse()
    return carry, map_leaves(_stack, *ys)


def _stack(*arrays: Any) -> Any:
    return compat.array_namespace(*arrays).stack(arrays, axis=0)


def _empty_stack(a: Any) -> Any:
    xp = compat.array_namespace(a)
    return xp.zeros((0, *a.shape), dtype=a.dtype, device=compat.device(a))
