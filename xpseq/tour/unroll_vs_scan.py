"""Lesson 10: an unrolled Python loop vs ``lax.scan``, trace size and compile time.

The program size and compile time of an RNN loop grow with the sequence length when the
loop is unrolled, and stay flat under ``lax.scan``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from xpseq import backends
from xpseq.tour._common import (
    Cells,
    Part,
    Row,
    as_floats,
    format_fact,
    normal_samples,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["LENGTHS", "lesson_unroll_vs_scan", "rnn_step", "eager_loop", "jax_unrolled",
           "jax_scanned", "jax_program"]


LENGTHS = (4, 8, 16, 32)
_HIDDEN = 4


# ------------------------------------------------------------------------ the code


def rnn_step(W: Any, h: Any, x_t: Any) -> Any:
    """``h' = tanh(W h + x_t)``, written once."""
    xp = array_namespace(W, h, x_t)
    return xp.tanh(W @ h + x_t)


def eager_loop(name: str, W: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, float]:
    """The RNN over ``xs`` by xpseq's ``backend.scan`` on backend ``name`` (an eager Python
    loop there): the final state and the milliseconds it took."""
    be = backends.get(name)
    Wb, h0 = be.asarray(W), be.asarray(np.zeros(W.shape[0]))
    start = time.perf_counter()
    h, _ = be.scan(lambda h, x_t: (rnn_step(Wb, h, x_t), None), h0, be.asarray(xs))
    return be.to_numpy(h), 1e3 * (time.perf_counter() - start)


def jax_unrolled(W: Any, xs: Any) -> Any:
    """The RNN as a Python loop: tracing it copies the step into the program T times.

    ``W`` is an argument, not a captured constant: array_api_compat looks up the namespace
    of a concrete jax array by creating one, which a trace would record as an equation."""
    import jax.numpy as jnp

    h = jnp.zeros(W.shape[0], dtype=xs.dtype)
    for t in range(xs.shape[0]):
        h = rnn_step(W, h, xs[t])
    return h


def jax_scanned(W: Any, xs: Any) -> Any:
    """The RNN by ``lax.scan``: the step is traced once, whatever T."""
    import jax
    import jax.numpy as jnp

    return jax.lax.scan(lambda h, x_t: (rnn_step(W, h, x_t), None),
                        jnp.zeros(W.shape[0], dtype=xs.dtype), xs)[0]


def jax_program(f: Any, W: np.ndarray, xs: np.ndarray) -> tuple[int, float, np.ndarray]:
    """The size of ``f``'s traced program (jaxpr equations), its compile time in
    milliseconds, and its result."""
    import jax
    import jax.numpy as jnp

    Wj, xsj = jnp.asarray(W), jnp.asarray(xs)
    eqns = len(jax.make_jaxpr(f)(Wj, xsj).jaxpr.eqns)
    start = time.perf_counter()
    compiled = jax.jit(f).lower(Wj, xsj).compile()
    return eqns, 1e3 * (time.perf_counter() - start), np.asarray(compiled(Wj, xsj))


# ------------------------------------------------------------------------ the table


@register_lesson(10, "An unrolled Python loop vs lax.scan: trace size and compile time",
                 code=(rnn_step, eager_loop, jax_unrolled, jax_scanned, jax_program))
def lesson_unroll_vs_scan() -> tuple[str, list[Row], dict[str, Any]]:
    """Program size and compile time of an RNN loop, unrolled vs lax.scan."""
    W = 0.5 * normal_samples(101, _HIDDEN, _HIDDEN)
    xs_all = normal_samples(102, max(LENGTHS), _HIDDEN)
    facts: dict[str, Any] = {"lengths": list(LENGTHS), "W": W.tolist(),
                             "xs": xs_all.tolist()}

    def eager(name: str) -> Part:
        def part(facts: dict[str, Any]) -> Cells:
            cells, times, finals = {}, [], []
            for T in LENGTHS:
                h, ms = eager_loop(name, W, xs_all[:T])
                times.append(ms)
                finals.append(as_floats(h))
                cells[f"T{T}"] = f"eager loop {ms:.2f} ms"
            facts[f"{name}_eager_ms"] = times
            facts[f"{name}_final_h"] = finals
            return cells
        return part

    def jax_part(facts: dict[str, Any]) -> Cells:
        record: dict[str, list] = {k: [] for k in ("unrolled_eqns", "scan_eqns",
                                                   "unrolled_compile_ms", "scan_compile_ms",
                                                   "final_diff")}
        cells = {}
        for T in LENGTHS:
            results = []
            for kind, f in (("unrolled", jax_unrolled), ("scan", jax_scanned)):
                eqns, ms, h = jax_program(f, W, xs_all[:T])
                record[f"{kind}_eqns"].append(eqns)
                record[f"{kind}_compile_ms"].append(ms)
                results.append(h)
            record["final_diff"].append(float(np.max(np.abs(results[0] - results[1]))))
            facts.setdefault("jax_final_h", []).append(as_floats(results[1]))
            cells[f"T{T}"] = (f"{record['unrolled_eqns'][-1]} / {record['scan_eqns'][-1]} eqns, "
                              f"{record['unrolled_compile_ms'][-1]:.0f} / "
                              f"{record['scan_compile_ms'][-1]:.0f} ms")
        facts.update({f"jax_{k}": v for k, v in record.items()})
        return cells

    columns = run_columns(facts, numpy=eager("numpy"), jax=jax_part, torch=eager("torch"))
    rows = table_rows(columns, [(f"T{T}", f"T = {T}" + (": jaxpr eqns and compile time, unrolled / "
                                                        "scan (numpy, torch: no compiler)"
                                                        if T == LENGTHS[0] else ""))
                                for T in LENGTHS])
    explanation = (
        f"Tracing an unrolled Python loop copies the step into the program once per time "
        f"step ({format_fact(facts, 'jax_unrolled_eqns')} equations for T = {list(LENGTHS)}), so "
        f"compile time grows with the sequence ("
        f"{format_fact(facts, 'jax_unrolled_compile_ms', lambda v: f'{v[0]:.0f} → {v[-1]:.0f} ms')}"
        f"), while lax.scan traces the step once "
        f"({format_fact(facts, 'jax_scan_eqns')} equations, "
        f"{format_fact(facts, 'jax_scan_compile_ms', lambda v: f'{v[0]:.0f} → {v[-1]:.0f} ms')})."
    )
    return explanation, rows, facts
