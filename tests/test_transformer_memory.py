"""The Transformer's training memory under each library's own differentiation
(``scripts/bench_transformer_memory.py``): with the blockwise attention's hand-derived rule
attached through ``backend.custom_vjp`` (what training does by default), one loss
gradient's peak memory grows about linearly with the length on JAX and on PyTorch, eager
and under torch.compile, where the plain path's grows with its square. Slow tier: a process per point."""

from __future__ import annotations

import types

import pytest
from helpers import load_script

bench = load_script("bench_transformer_memory")
ARGS = types.SimpleNamespace(memory_limit=16.0, threads=1, seed=0)


@pytest.mark.slow                                     # (six processes: about two minutes)
@pytest.mark.parametrize("engine", ["jax-rule", "torch-rule", "torch-compile"])
def test_one_gradients_memory_grows_about_linearly_with_the_rule(engine):
    pytest.importorskip(engine.split("-")[0])
    short, long = (bench.run_point(ARGS, engine, "blockwise", n) for n in (2048, 8192))
    assert "error" not in short and "error" not in long, (short, long)
    growth = long["peak_bytes"] / short["peak_bytes"]
    # 4x the length: about 4x the memory (the plain path's (Q, K) arrays would give 16x)
    assert growth < 6, f"{engine}: {short['peak_bytes'] / 2**20:.0f} MiB at 2,048 tokens, " \
                       f"{long['peak_bytes'] / 2**20:.0f} MiB at 8,192 (x{growth:.1f})"


def test_the_report_names_a_failed_point_and_the_exponents():
    points = [{"engine": "jax-rule", "path": "blockwise", "length": n,
               "peak_bytes": n * 2**12, "seconds": 1.0} for n in (2048, 4096)]
    points.append({"engine": "jax-rule", "path": "plain", "length": 2048, "error": "oom"})
    text = bench.report(points, ["jax-rule"], ["plain", "blockwise"])
    assert "| 2,048 | fails | 8 MiB, 1.0 s |" in text
    assert text.splitlines()[-1] == "| exponent |  | 1.00 |"
