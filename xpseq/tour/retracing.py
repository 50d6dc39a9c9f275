"""Lesson 9: tracing and retracing under ``jax.jit`` for new shapes.

How often the Python body of a function runs: once per new input shape and dtype under
``jax.jit``, once per call in eager NumPy and torch.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from xpseq.tour._common import (
    Cells,
    Part,
    Row,
    format_fact,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["CALLS", "lesson_retracing", "eager_runs", "numpy_runs", "jax_traces", "torch_runs"]


CALLS = (((3,), "float64"), ((3,), "float64"), ((4,), "float64"), ((4,), "float64"),
         ((5,), "float64"), ((3,), "float32"))


# ------------------------------------------------------------------------ the code


def eager_runs(xp: Any, arrays: list[Any]) -> list[int]:
    """How many times the Python body of ``Σ tanh(x)`` has run after each eager call."""
    runs = 0

    def body(x: Any) -> Any:
        nonlocal runs
        runs += 1
        return xp.sum(xp.tanh(x))

    after = []
    for x in arrays:
        body(x)
        after.append(runs)
    return after


def numpy_runs() -> list[int]:
    """:func:`eager_runs` on NumPy arrays of the shapes and dtypes of :data:`CALLS`."""
    return eager_runs(np, [np.ones(shape, dtype=dtype) for shape, dtype in CALLS])


def jax_traces() -> list[int]:
    """How many times ``jax.jit`` has traced the Python body after each call of
    :data:`CALLS`."""
    import jax
    import jax.numpy as jnp

    traces = 0

    def body(x: Any) -> Any:
        nonlocal traces
        traces += 1                  # a Python side effect: runs only while tracing
        return jnp.sum(jnp.tanh(x))

    step = jax.jit(body)
    after = []
    for shape, dtype in CALLS:
        step(jnp.ones(shape, dtype=dtype))
        after.append(traces)
    return after


def torch_runs() -> list[int]:
    """:func:`eager_runs` on torch tensors of the shapes and dtypes of :data:`CALLS`."""
    import torch

    return eager_runs(torch, [torch.ones(shape, dtype=getattr(torch, dtype))
                              for shape, dtype in CALLS])


# ------------------------------------------------------------------------ the table


@register_lesson(9, "Tracing and retracing under jax.jit for new shapes",
                 code=(eager_runs, numpy_runs, jax_traces, torch_runs))
def lesson_retracing() -> tuple[str, list[Row], dict[str, Any]]:
    """How often the Python body runs: jax.jit per new signature, eager per call."""
    facts: dict[str, Any] = {"calls": [[list(s), d] for s, d in CALLS]}

    def part(key: str, count: Callable[[], list[int]], word: str) -> Part:
        def fill(facts: dict[str, Any]) -> Cells:
            after = facts[key] = count()
            return {f"c{i}": f"{word} {n}x" for i, n in enumerate(after)}
        return fill

    numpy_part = part("numpy_runs_after_each_call", numpy_runs, "body ran")
    jax_part = part("jax_traces_after_each_call", jax_traces, "traced")
    torch_part = part("torch_runs_after_each_call", torch_runs, "body ran")
    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [(f"c{i}", f"call {i + 1}: shape {s}, {d}"
                                          + (" (numpy, torch: eager)" if i == 0 else ""))
                                for i, (s, d) in enumerate(CALLS)])
    explanation = (
        f"jax.jit traces the Python function once per new input shape and dtype and then "
        f"replays the compiled program, so {len(CALLS)} calls ran the Python body "
        f"{format_fact(facts, 'jax_traces_after_each_call', lambda v: str(v[-1]))} times (a "
        f"side effect such as a counter or print happens only while tracing), while eager "
        f"numpy and torch ran it "
        f"{format_fact(facts, 'numpy_runs_after_each_call', lambda v: str(v[-1]))} times."
    )
    return explanation, rows, facts
