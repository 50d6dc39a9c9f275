"""A minimal pytree: nested dicts, lists and tuples with arrays (or None) at the leaves.

Enough for the Python-loop :func:`xpseq.core.scan`, the optimisers and the autograd
``value_and_grad`` of the torch backend; JAX has ``jax.tree_util`` of its own.
"""

from __future__ import annotations

from typing import Any, Callable

_LEAF = "leaf"


def flatten(tree: Any) -> tuple[list[Any], Any]:
    """Leaves in a fixed order (dict insertion order) and a structure to rebuild from."""
    if isinstance(tree, dict):
        leaves, defs = [], []
        for key, value in tree.items():
            sub, d = flatten(value)
            leaves.extend(sub)
            defs.append((key, d, len(sub)))
        return leaves, (type(tree), defs)
    if isinstance(tree, (list, tuple)):
        leaves, defs = [], []
        for value in tree:
            sub, d = flatten(value)
            leaves.extend(sub)
            defs.append((None, d, len(sub)))
        return leaves, (type(tree), defs)
    if tree is None:
        return [], (type(None), [])
    return [tree], _LEAF


def unflatten(treedef: Any, leaves: list[Any]) -> Any:
    """Inverse of :func:`flatten`."""
    if treedef == _LEAF:
        return leaves[0]
    kind, defs = treedef
    if kind is type(None):
        return None
    parts, pos = [], 0
    for key, d, n in defs:
        parts.append((key, unflatten(d, leaves[pos:pos + n])))
        pos += n
    if kind is dict or issubclass(kind, dict):
        return kind((key, value) for key, value in parts)
    values = [value for _, value in parts]
    if hasattr(kind, "_fields"):  # namedtuple
        return kind(*values)
    return kind(values)


def map_leaves(fn: Callable[..., Any], *trees: Any) -> Any:
    """Apply ``fn`` leaf-wise to trees of the same structure."""
    flat = [flatten(t) for t in trees]
    treedef = flat[0][1]
    return unflatten(treedef, [fn(*leaves) for leaves in zip(*(f[0] for f in flat))])
