"""Lesson 9: tracing and retracing under ``jax.jit`` for new shapes.

How often the Python body of a function runs: once per new input shape and dtype under
``jax.jit``, once per call in eager NumPy and torch.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from xpseq.tour._common import Cells, Part, Row, _columns, _fact, _jax, _lesson, _table, _torch

__all__ = ["CALLS", "lesson_retracing"]


CALLS = (((3,), "float64"), ((3,), "float64"), ((4,), "float64"), ((4,), "float64"),
         ((5,), "float64"), ((3,), "float32"))


@_lesson(9, "Tracing and retracing under jax.jit for new shapes")
def lesson_retracing() -> tuple[str, list[Row], dict[str, Any]]:
    """How often the Python body runs: jax.jit per new signature, eager per call."""
    facts: dict[str, Any] = {"calls": [[list(s), d] for s, d in CALLS]}

    def eager(name: str, make: Callable[[tuple[int, ...], str], Any], xp: Any) -> Part:
        def part(facts: dict[str, Any]) -> Cells:
            runs = 0

            def body(x: Any) -> Any:
                nonlocal runs
                runs += 1
                return xp.sum(xp.tanh(x))

            after = []
            for shape, dtype in CALLS:
                body(make(shape, dtype))
                after.append(runs)
            facts[f"{name}_runs_after_each_call"] = after
            return {f"c{i}": f"body ran {n}x" for i, n in enumerate(after)}
        return part

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
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
        facts["jax_traces_after_each_call"] = after
        return {f"c{i}": f"traced {n}x" for i, n in enumerate(after)}

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        make = lambda s, d: torch.ones(s, dtype=getattr(torch, d))      # noqa: E731
        return eager("torch", make, torch)(facts)

    columns = _columns(facts, numpy=eager("numpy", lambda s, d: np.ones(s, dtype=d), np),
                       jax=jax_part, torch=torch_part)
    rows = _table(columns, [(f"c{i}", f"call {i + 1}: shape {s}, {d}"
                                      + (" (numpy, torch: eager)" if i == 0 else ""))
                            for i, (s, d) in enumerate(CALLS)])
    explanation = (
        f"jax.jit traces the Python function once per new input shape and dtype and then "
        f"replays the compiled program, so {len(CALLS)} calls ran the Python body "
        f"{_fact(facts, 'jax_traces_after_each_call', lambda v: str(v[-1]))} times (a "
        f"side effect such as a counter or print happens only while tracing), while eager "
        f"numpy and torch ran it "
        f"{_fact(facts, 'numpy_runs_after_each_call', lambda v: str(v[-1]))} times."
    )
    return explanation, rows, facts
