"""A minimal pytree: nested dicts, lists and tuples with arrays (or None) at the leaves.

Enough for the Python-loop :func:`xpseq.core.scan`, the optimisers and the autograd
``value_and_grad`` of the torch backend; JAX has ``jax.tree_util`` of its own.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

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
    """Apply ``fn`` leaf-wise to trees of the same structure: dicts are paired by key
    (whatever their order), lists and tuples by position; the result has the first
    tree's structure.

    Raises
    ------
    ValueError
        The trees differ in structure (other keys, other lengths, a container where
        another has a leaf); the message gives the path where they part.
    """
    if not trees:
        raise TypeError("map_leaves: give at least one tree")
    return _map(fn, trees, ())


def _map(fn: Callable[..., Any], trees: Sequence[Any], path: tuple[Any, ...]) -> Any:
    first = trees[0]
    where = "".join(f"[{k!r}]" for k in path) or "the root"
    if isinstance(first, dict):
        for other in trees[1:]:
            if not isinstance(other, dict) or other.keys() != first.keys():
                theirs = sorted(map(repr, other)) if isinstance(other, dict) else \
                    type(other).__name__
                raise ValueError(f"map_leaves: the trees differ at {where}: keys "
                                 f"{sorted(map(repr, first))} against {theirs}")
        return type(first)((key, _map(fn, [t[key] for t in trees], (*path, key)))
                           for key in first)
    if isinstance(first, (list, tuple)):
        for other in trees[1:]:
            if not isinstance(other, (list, tuple)) or len(other) != len(first):
                theirs = (f"length {len(other)}" if isinstance(other, (list, tuple))
                          else type(other).__name__)
                raise ValueError(f"map_leaves: the trees differ at {where}: length "
                                 f"{len(first)} against {theirs}")
        values = [_map(fn, items, (*path, i)) for i, items in enumerate(zip(*trees))]
        return type(first)(*values) if hasattr(first, "_fields") else type(first)(values)
    if first is None:
        if any(other is not None for other in trees[1:]):
            raise ValueError(f"map_leaves: the trees differ at {where}: None against a leaf")
        return None
    for other in trees[1:]:
        if isinstance(other, (dict, list, tuple)) or other is None:
            raise ValueError(f"map_leaves: the trees differ at {where}: a leaf against "
                             f"{type(other).__name__}")
    return fn(*trees)
