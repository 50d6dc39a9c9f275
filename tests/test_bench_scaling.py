"""The ``scaling`` section of scripts/bench.py: it measures training and greedy decoding
against length, batch and width on every engine at tiny sizes, writes its plots and rows,
fits the length exponent, keeps to its time budget and checks its options."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from helpers import load_script, show  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
PLOTS = ("scaling_length.png", "scaling_batch.png", "scaling_width.png", "scaling_greedy.png")
PNG = b"\x89PNG\r\n\x1a\n"


def _scaling():
    """The section's module and the entry script ``scripts.bench``."""
    bench = load_script("bench")
    from scripts import benchmarks

    return benchmarks.section("scaling"), bench


@pytest.mark.slow
def test_bench_scaling_measures_every_engine_and_kind_and_writes_the_plots(tmp_path):
    pytest.importorskip("jax")
    out, copies = tmp_path / "bench", tmp_path / "docs"
    done = subprocess.run(
        [sys.executable, "-m", "scripts.bench", "--only", "scaling",
         "--scaling-lengths", "4,8", "--scaling-batches", "2", "--scaling-widths", "8",
         "--scaling-fixed", "4,2,8", "--scaling-repeats", "1",
         "--scaling-precisions", "float32", "--out", str(out), "--plots-to", str(copies)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, show(done)
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, name
        assert (copies / name).read_bytes() == data, name
    report = json.loads((out / "bench.json").read_text())
    details = report["details"]["scaling"]
    points = details["points"]
    series = {(p["engine"], p["kind"]) for p in points}
    assert series == {(e, k) for e in ("numpy", "jax", "torch") for k in ("rnn", "transformer")}
    assert len(points) == 6 * (2 + 1 + 1)                   # two lengths, one batch, one width
    for p in points:
        assert p["tokens_per_s"] > 0 and p["memory_mib"] > 0 and p["held_mib"] > 0, p
        assert p["tokens"] == {"length": 2 * p["value"], "batch": 4 * p["value"],
                               "width": 8}[p["axis"]], p
    assert {(p["engine"], p["kind"]) for p in details["greedy"]} == {
        (e, k) for e in ("jax", "torch") for k in ("rnn", "transformer")}
    assert all(p["tokens"] == 2 * 4 and p["tokens_per_s"] > 0 for p in details["greedy"])
    assert details["skipped"] == [] and details["unsupported"] == {}
    rows = {r["measure"]: r for r in report["rows"]}
    assert rows["train transformer jax float32, length 8"]["unit"] == "tok/s"
    assert "peak memory" in rows["train rnn numpy float32, width 8"]["detail"]
    assert rows["greedy rnn torch float32, batch 2"]["value"] > 0
    assert rows["rnn numpy float32: time per step ∝ length^k"]["value"] == "not fitted"
    assert not any("bf16" in name for name in rows)
    assert "scaling" in report["section_seconds"]


@pytest.fixture
def one_torch_thread():
    """PyTorch on one thread for the test (two contend on a busy 2-core machine), then
    as it was."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_bf16_points_only_where_make_train_step_takes_precision(monkeypatch, tmp_path,
                                                                 one_torch_thread):
    """xpseq's ``make_train_step`` takes ``precision``: bf16 is measured on PyTorch and
    reported as not supported on NumPy (its own error says why). A ``make_train_step``
    without ``precision`` gets no bf16 points at all."""
    scaling, bench = _scaling()
    from scripts.benchmarks.context import Context

    import xpseq.train

    argv = ["--only", "scaling", "--scaling-lengths", "4,8", "--scaling-batches", "2,4",
            "--scaling-widths", "8,16", "--scaling-fixed", "4,2,8", "--scaling-repeats", "1",
            "--scaling-engines", "numpy,torch", "--scaling-kinds", "rnn",
            "--out", str(tmp_path)]
    assert scaling.bf16_supported()
    context = Context(bench.parse_args(argv))
    rows = {r.measure: r for r in scaling.run(context)}
    assert rows["train rnn numpy bf16"].value == "not supported"
    assert "bfloat16" in rows["train rnn numpy bf16"].detail
    points = context.details(["scaling"])["scaling"]["points"]
    measured = {(p["engine"], p["precision"]) for p in points}
    assert measured == {("numpy", "float32"), ("torch", "float32"), ("torch", "bf16")}
    assert len([p for p in points if p["precision"] == "bf16"]) == 6
    assert all(p["tokens_per_s"] > 0 and p["memory_mib"] > 0 for p in points)
    for name in PLOTS:
        assert (tmp_path / name).read_bytes().startswith(PNG), name

    real = xpseq.train.make_train_step

    def without_precision(config, optimizer, backend, **options):
        return real(config, optimizer, backend, **options)

    monkeypatch.setattr(xpseq.train, "make_train_step", without_precision)
    assert not scaling.bf16_supported()
    one_point = [*argv, "--scaling-lengths", "4", "--scaling-batches", "2",
                 "--scaling-widths", "8"]
    rows = scaling.run(Context(bench.parse_args(one_point)))
    assert [r.value for r in rows if "bf16" in r.measure] == ["not measured"]


def test_the_budget_cuts_the_rest_of_a_series_that_costs_too_much():
    scaling, _ = _scaling()
    slow, fast = scaling.Series("numpy", "rnn"), scaling.Series("torch", "rnn")
    calls = []

    def prepare(series, value):
        calls.append((series.engine, value))
        if series == slow:
            time.sleep(0.3)
        return scaling.Prepared(lambda: None, tokens=10 * value)

    result = scaling.measure_axis("length", [4, 1, 2], [slow, fast], prepare, repeats=2,
                                  budget=0.2)
    assert calls == [("numpy", 1), ("torch", 1), ("torch", 2), ("torch", 4)]
    assert [(p["engine"], p["value"]) for p in result.points] == [
        ("numpy", 1), ("torch", 1), ("torch", 2), ("torch", 4)]
    assert all(p["tokens_per_s"] > 0 for p in result.points)
    assert result.skipped == [{"axis": "length", "series": slow, "after": 1,
                               "seconds": pytest.approx(0.3, abs=0.25), "values": [2, 4]}]
    rows = scaling._series_rows(result, {"length": 32, "batch": 64, "width": 128}, "train")
    assert rows[-1].measure == "train rnn numpy float32, length 2,4"
    assert rows[-1].value == "skipped" and "over --scaling-budget" in rows[-1].detail


def test_fit_exponent_recovers_a_known_exponent():
    scaling, _ = _scaling()
    lengths = [8, 16, 32, 64, 128, 256]
    quadratic = [3e-6 * n ** 2 for n in lengths]
    quadratic[0], quadratic[1] = 5.0, 0.1                 # below FIT_FROM = 32: not used
    assert scaling.fit_exponent(lengths, quadratic) == pytest.approx(2.0, abs=1e-9)
    assert scaling.fit_exponent(lengths, [0.5 * n for n in lengths]) == pytest.approx(1.0,
                                                                                     abs=1e-9)
    assert scaling.fit_exponent(lengths, [n ** 1.5 for n in lengths],
                                smallest=1) == pytest.approx(1.5, abs=1e-9)
    assert scaling.fit_exponent([8, 16, 32], [1.0, 2.0, 4.0]) is None


def test_peak_memory_sees_a_known_allocation():
    scaling, _ = _scaling()
    memory = scaling.PeakMemory()
    if not memory.available:
        pytest.skip("no writable /proc/self/clear_refs")
    block = np.ones(16 * 2**20, dtype=np.float32)            # 64 MiB, every page touched
    assert 60 <= memory.peak_mib() <= 80
    del block
    memory.start()
    small = np.ones(2**10)
    assert memory.peak_mib() < 8
    assert scaling.nbytes({"a": small, "b": [small, (small, 3)]}) == 3 * small.nbytes


@pytest.mark.parametrize("argv, option", [
    (["--scaling-lengths", "8,x"], "--scaling-lengths"),
    (["--scaling-batches", "0,16"], "--scaling-batches"),
    (["--scaling-widths", "64,66"], "--scaling-widths"),
    (["--scaling-fixed", "32,64"], "--scaling-fixed"),
    (["--scaling-engines", "numpy,cupy"], "--scaling-engines"),
    (["--scaling-kinds", ","], "--scaling-kinds"),
    (["--scaling-precisions", "float16"], "--scaling-precisions"),
    (["--scaling-repeats", "0"], "--scaling-repeats"),
    (["--scaling-budget", "0"], "--scaling-budget"),
])
def test_bad_scaling_options_are_parser_errors_naming_the_option(argv, option, capsys):
    _, bench = _scaling()
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--only", "scaling", *argv])
    assert exit_info.value.code == 2
    assert option in capsys.readouterr().err


def test_scaling_options_are_parsed_sorted_and_in_a_fixed_order():
    _, bench = _scaling()
    args = bench.parse_args(["--scaling-lengths", "16,8,16", "--scaling-engines",
                             "torch,numpy", "--scaling-fixed", "8,4,16"])
    assert args.scaling_grid == {"length": [8, 16], "batch": [16, 32, 64, 128, 256, 512],
                                 "width": [64, 128, 256, 512]}
    assert args.scaling_engine_list == ["numpy", "torch"]
    assert args.scaling_fixed_sizes == {"length": 8, "batch": 4, "width": 16}
