"""``scan`` as a Python loop: ``lax.scan``'s semantics for libraries without it."""

from __future__ import annotations

import sys
from typing import Any, Callable

import array_api_compat as compat

from .tree import flatten, map_leaves, unflatten

__all__ = ["scan", "span_steps"]


def scan(fn: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Any,
         length: int | None = None, reverse: bool = False,
         span: tuple[Any, Any] | None = None) -> tuple[Any, Any]:
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
    span : ``(start, stop)``, integers or 0-d integer arrays, optional
        The caller's promise that the steps outside ``start <= t < stop`` leave the carry
        as it is and that their ``y`` are not used (padding in every row of a batch).
        ``scan`` may then skip them: their ``y`` are zero and the loop runs
        ``stop - start`` steps. Where reading the bounds would stop a compiler tracing
        the loop (``torch.compile``), every step runs; by the promise the carry and the
        used ``y`` are the same.

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
        return carry, map_leaves(lambda a: _zeros_like_stack(a, 0), y)
    steps = span_steps(span, n)
    ys = []
    for i in (reversed(steps) if reverse else steps):
        carry, y = fn(carry, unflatten(treedef, [leaf[i, ...] for leaf in leaves]))
        ys.append(y)
    if reverse:
        ys.reverse()
    if len(ys) == n:
        return carry, map_leaves(_stack, *ys)
    if not ys:                                  # no step in the span: find y's shapes
        _, y = fn(carry, unflatten(treedef, [leaf[0, ...] for leaf in leaves]))
        return carry, map_leaves(lambda a: _zeros_like_stack(a, n), y)
    return carry, map_leaves(lambda *a: _pad_stack(a, steps.start, n), *ys)


def span_steps(span: tuple[Any, Any] | None, n: int) -> range:
    """The steps of ``n`` that a Python loop given ``span=(start, stop)`` runs (see
    :func:`scan`): ``range(max(start, 0), min(stop, n))``, or all ``n`` without a span or
    while torch.compile traces the loop."""
    if span is None or _tracing():
        return range(n)
    return range(max(int(span[0]), 0), min(int(span[1]), n))


def _tracing() -> bool:
    """Whether torch.compile is tracing this call (reading a tensor's value would break
    its graph)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


def _pad_stack(arrays: tuple[Any, ...], start: int, n: int) -> Any:
    """``arrays`` stacked at ``start, start + 1, ...`` of ``n`` steps, zeros elsewhere."""
    xp = compat.array_namespace(*arrays)
    stacked = xp.stack(arrays, axis=0)
    before = _zeros_like_stack(arrays[0], start)
    after = _zeros_like_stack(arrays[0], n - start - len(arrays))
    return xp.concat((before, stacked, after), axis=0)


def _zeros_like_stack(a: Any, n: int) -> Any:
    xp = compat.array_namespace(a)
    return xp.zeros((n, *a.shape), dtype=a.dtype, device=compat.device(a))


def _stack(*arrays: Any) -> Any:
    return compat.array_namespace(*arrays).stack(arrays, axis=0)

