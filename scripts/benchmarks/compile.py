"""``compile``: xpseq's jitted JAX training step over two epochs of bucketed batches.

The compile time (first call on a shape minus that shape's steady step time, median over
the shapes; also the XLA compile alone, ``.lower().compile()``), the traces in the first
epoch (one per batch shape) and in the second (retraces). Targets: <= 3 s, 0 retraces.
This section runs on all the process's CPUs (``bench.py`` releases the pinning), as XLA
compiles in parallel.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from .. import _common as common

from xpseq import backends

from .context import Context
from .shared import HAND_JAX, Row, float32_on, on_backend


def run(context: Context) -> list[Row]:
    """Compile time and traces of xpseq's jitted step over two epochs."""
    import jax

    be, step = context.jax, context.jax_step()
    params = float32_on(be, context.init32)
    opt_state = context.optimizer.init(params)
    batches = [on_backend(be, b) for b in context.epoch]
    shapes = [(b["src"].shape, b["tgt_in"].shape) for b in context.epoch]
    already = step.traces
    epochs: list[list[tuple[float, bool]]] = []
    for _ in range(2):
        calls = []
        for batch in batches:
            before = step.traces
            start = time.perf_counter()
            params, opt_state, loss = step(params, opt_state, batch)
            float(be.to_numpy(loss))
            calls.append((time.perf_counter() - start, step.traces > before))
        epochs.append(calls)
    traces = [sum(traced for _, traced in calls) for calls in epochs]
    steady: dict[Any, float] = {}
    for shape in set(shapes):
        steady[shape] = statistics.median(t for (t, _), s in zip(epochs[1], shapes) if s == shape)
    compiles = [t - steady[s] for (t, traced), s in zip(epochs[0], shapes) if traced]
    rows = []
    if compiles:
        compile_s = statistics.median(compiles)
        typical = statistics.median(steady.values())
        rows.append(Row("compile", "JAX training-step compile (first call − steady step)",
                        compile_s, "s", None, "<= 3 s", compile_s <= 3.0,
                        f"median of {len(compiles)} shapes (max {max(compiles):.2f} s) on "
                        f"{backends.usable_cpus()} CPUs; "
                        f"{compile_s / typical:.0f} steady steps of {1e3 * typical:.1f} ms"))
    else:
        rows.append(Row("compile", "JAX training-step compile", "not measured", detail=(
            f"every shape was compiled before this section ({already} traces)")))
    # The XLA compilation alone, ahead of time, for the first batch's shape.
    for label, gradients in (("", None), (f" ({HAND_JAX})", "hand-derived")):
        inner = context.jax_step(gradients)
        outer = jax.jit(lambda p, o, b, inner=inner: inner(p, o, b))
        start = time.perf_counter()
        lowered = outer.lower(params, opt_state, batches[0])
        lower_s = time.perf_counter() - start
        start = time.perf_counter()
        lowered.compile()
        xla_s = time.perf_counter() - start
        rows.append(Row("compile", f"XLA compile alone (.lower().compile()){label}", xla_s,
                        "s", detail=f"tracing and lowering {lower_s:.2f} s; shape src "
                                    f"{shapes[0][0]}, tgt {shapes[0][1]}"))
    rows.append(Row("compile", "traces in epoch 1", traces[0], "",
                    detail=f"{len(batches)} batches, {len(set(shapes))} shapes, "
                           f"bucket {context.args.bucket}"))
    rows.append(Row("compile", "retraces in epoch 2", traces[1], "", None, "0",
                    traces[1] == 0))
    return rows
