"""ndonnx: the array API standard recorded as an ONNX graph.

Arrays made from values (``ndonnx.asarray``) are computed as they are built, like NumPy's;
arrays made by ``ndonnx.argument`` have no values, only a dtype and a shape whose
dimensions may be unknown (``None``), and the operations on them record the ONNX graph
that :mod:`xpseq.export` writes. No gradients: the models here only run forward and search
(float64 parity with NumPy in the parity suite).

What the standard lacks is a loop whose number of steps is only known when the graph
runs (a source of symbolic length): :meth:`OnnxBackend.scan` records it as one ONNX
``Loop`` node (through spox, the library ndonnx builds its graphs with), as ``lax.scan``
records one loop on JAX.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import ndonnx
import numpy as np
import spox.opset.ai.onnx.v21 as op

from xpseq.core.tree import flatten, unflatten

from ._base import CAPABILITIES, Backend


class OnnxBackend(Backend):
    name = "onnx"
    capabilities = CAPABILITIES["onnx"]

    def __init__(self) -> None:
        super().__init__(ndonnx)

    def _from_host(self, host: np.ndarray, dtype: Any) -> Any:
        x = ndonnx.asarray(np.array(host, copy=True))
        return x if x.dtype == dtype else x.astype(dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        if not self.is_array(x):
            return super().to_numpy(x)            # its TypeError
        return np.asarray(x.unwrap_numpy())

    def scan(self, fn: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Any,
             length: int | None = None, reverse: bool = False,
             span: tuple[Any, Any] | None = None) -> tuple[Any, Any]:
        """``lax.scan`` semantics (see :meth:`Backend.scan`). Over a known number of steps
        the loop runs in Python (each step recorded, or computed on eager arrays); over an
        unknown one (``xs``' leading size is ``None``) it is recorded as an ONNX ``Loop``
        whose body is ``fn`` traced once. ``span`` is not read: every step runs (which
        its promise makes the same)."""
        leaves, treedef = flatten(xs)
        if not leaves or leaves[0].shape[0] is not None:
            return super().scan(fn, carry, xs, length, reverse)
        return _loop(fn, carry, leaves, treedef, reverse)


def _loop(fn: Callable[[Any, Any], tuple[Any, Any]], carry: Any, leaves: list[Any],
          treedef: Any, reverse: bool) -> tuple[Any, Any]:
    init, carry_def = flatten(carry)
    steps = leaves[0].dynamic_shape[0]                  # an int64 scalar of the graph
    y_def: list[Any] = []

    def body(i: Any, cond: Any, *state: Any) -> list[Any]:
        t = ndonnx.reshape(ndonnx.asarray(i), (1,))
        if reverse:
            t = steps - 1 - t
        x_t = unflatten(treedef, [ndonnx.take(leaf, t, axis=0)[0, ...] for leaf in leaves])
        new, y = fn(unflatten(carry_def, [ndonnx.asarray(s) for s in state]), x_t)
        new_leaves, new_def = flatten(new)
        if new_def != carry_def:
            raise ValueError("scan: fn must return a carry of the structure it was given")
        y_leaves, defn = flatten(y)
        y_def.append(defn)
        return [cond, *(a.unwrap_spox() for a in new_leaves),
                *(a.unwrap_spox() for a in y_leaves)]

    with warnings.catch_warnings():     # spox: the carried outputs' shapes are not inferred
        warnings.simplefilter("ignore")
        outs = op.loop(steps.unwrap_spox(), None, [a.unwrap_spox() for a in init], body=body)
        # A carry keeps the shape it was given (lax.scan's rule): say so to the graph.
        final = [ndonnx.asarray(op.reshape(o, a.dynamic_shape.unwrap_spox()))
                 for o, a in zip(outs, init)]
    ys = [ndonnx.asarray(o) for o in outs[len(init):]]
    if reverse:
        ys = [ndonnx.flip(y, axis=0) for y in ys]
    return unflatten(carry_def, final), unflatten(y_def[0], ys)
