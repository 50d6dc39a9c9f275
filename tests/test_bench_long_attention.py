"""``scripts.bench_long_attention``: a short sweep runs each point in a process of its
own, records what its part of the benchmarks page renders, and a failing point stops its
path."""

from __future__ import annotations

import json
import types

import pytest
from helpers import load_script

bench = load_script("bench_long_attention")


@pytest.mark.slow                                     # (a process per point: ~20 s)
def test_a_short_sweep_records_times_memory_and_exponents(tmp_path, capsys):
    assert bench.main(["--paths", "numpy-plain,numpy-blockwise", "--modes", "forward,backward",
                       "--lengths", "512,2048,4096", "--block", "256", "--repeats", "1",
                       "--threads", "1", "--record", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*-long-attention.json")
    run = json.loads(path.read_text())
    points = {(p["mode"], p["path"], p["length"]): p for p in run["points"]}
    assert len(points) == 12 and all("median" in p and p["peak_bytes"] >= 0
                                     for p in points.values())
    # The plain path's weights alone: 4 heads x 4,096 x 4,096 float32 = 256 MiB.
    assert points[("forward", "numpy-plain", 4096)]["peak_bytes"] > 200 * 2**20
    assert points[("forward", "numpy-blockwise", 4096)]["peak_bytes"] < 100 * 2**20
    assert run["exponents"]["forward numpy-plain"]["peak_bytes"] > 1.5
    assert run["longest"]["backward numpy-blockwise"] == 4096
    run["file"] = path.name
    text = bench.page_block(run)
    assert "| 4,096 |" in text and "NumPy, blockwise" in text


def test_a_point_that_cannot_allocate_is_a_failure_not_a_crash():
    """The plain path at 16,384 tokens needs 4 GiB for its scores: under a 3 GiB limit
    the point's process reports the MemoryError, and the sweep goes on."""
    args = types.SimpleNamespace(memory_limit=3.0, threads=1, seed=0, warm_up=0, repeats=1,
                                 budget=1.0)
    result = bench.run_point(args, "numpy-plain", "forward", 16384, 512)
    assert "MemoryError" in result["error"] and "median" not in result


def _run_with(points, pairs):
    return {"file": "run.json", "machine": {}, "versions": {}, "threads": 1, "heads": 4,
            "depth": 64, "dtype": "float32", "block": 512, "command": "c", "points": points,
            "pairs": pairs, "exponents": {}, "longest": {}}


def test_ratios_come_from_calls_in_turns_where_there_are_some():
    """A ratio taken in turns replaces the separate points' ratio; where there is none the
    page marks the separate points' ratio with a star."""
    points = [{"mode": "forward", "path": p, "length": n, "median": m, "peak_bytes": 1}
              for p, n, m in (("torch-blockwise", 256, 3.0), ("torch-sdpa", 256, 2.0),
                              ("torch-blockwise", 512, 4.0), ("torch-sdpa", 512, 5.0))]
    pairs = [{"paths": ["torch-blockwise", "torch-sdpa"], "mode": "forward", "length": 256,
              "medians": [1.1, 1.0]}]
    run = _run_with(points, pairs)
    assert bench.ratio_of(run, "forward", "torch-blockwise", "torch-sdpa", 256) == \
        pytest.approx((1.1, True))
    assert bench.ratio_of(run, "forward", "torch-blockwise", "torch-sdpa", 512) == \
        pytest.approx((0.8, False))
    assert bench.ratio_of(run, "backward", "torch-blockwise", "torch-sdpa", 256) is None
    text = bench.page_block(run)
    assert "| 256 |  |  | 1.10 |  |" in text and "| 512 |  |  | 0.80* |  |" in text
    assert "taken in turns" in text


@pytest.mark.slow                                     # (three processes that import torch)
def test_a_pair_is_timed_in_turns_in_one_process(tmp_path):
    assert bench.main(["--paths", "torch-blockwise,torch-sdpa", "--modes", "forward",
                       "--lengths", "256", "--repeats", "3", "--threads", "1",
                       "--record", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*-long-attention.json")
    run = json.loads(path.read_text())
    (pair,) = run["pairs"]
    assert pair["paths"] == ["torch-blockwise", "torch-sdpa"] and pair["length"] == 256
    assert [len(s) for s in pair["seconds"]] == [3, 3] and min(pair["medians"]) > 0
    assert bench.main(["--paths", "torch-blockwise,torch-sdpa", "--modes", "forward",
                       "--lengths", "256", "--repeats", "1", "--threads", "1",
                       "--pair-below", "0", "--record", str(tmp_path / "none")]) == 0
    (path,) = (tmp_path / "none").glob("*-long-attention.json")
    assert json.loads(path.read_text())["pairs"] == []
