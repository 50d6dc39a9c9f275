"""The benchmarks page and the README quote only recorded runs: scripts.bench_page assembles
their results blocks, each benchmark's part from its recorded runs (scripts.bench's from
benchmarks/results/, made by scripts.benchmarks.page), and its check fails on a stale block
or on a figure in the prose that no recorded run has."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest

from helpers import ROOT, load_script

page = load_script("bench_page")
results = load_script("benchmarks.page")      # scripts.bench's part of the page

PAGE = """# Benchmarks

Prose with a recorded figure, {prose}.

<!-- results: summary -->
<!-- end results: summary -->

<!-- results: runs -->
<!-- end results: runs -->
"""
README = """# xpseq

**Speed**: text {speed}.

<!-- results: readme -->
<!-- end results: readme -->

## Documentation

Not about speed: 6.9e-16 and 3.14 are left alone here.
"""


@pytest.fixture(autouse=True)
def _no_changed_measurements(request, monkeypatch):
    """The made-up runs of these tests follow no change of xpseq's code: ``CHANGED`` is
    the real page's, kept only for the test of the committed pages."""
    if "committed_pages" not in request.node.name:
        monkeypatch.setattr(results, "CHANGED", {})


def _run(ratio: float, *, x64: bool = False, stamp: str = "1", cpu: str = "Test CPU") -> dict:
    """A minimal results file of bench.py: the train section's JAX row and a peers row."""
    rows = [
        {"section": "train", "measure": "xpseq-jax throughput vs native", "value": 1000.0 * ratio,
         "unit": "tok/s", "ratio": ratio, "target": ">= 1.3x", "met": ratio >= 1.3,
         "detail": "20 steps"},
        {"section": "peers", "measure": "rnn best xpseq vs the fastest peer of any kind",
         "value": 900.0, "unit": "tok/s", "ratio": 0.9, "target": ">= 1x", "met": False,
         "detail": "xpseq-jax against keras-jax (1,000 tok/s)"},
    ]
    return {"command": "python scripts/bench.py --only train,peers", "date": "2026-12-03",
            "seconds": 100.0, "section_seconds": {"train": 50.0, "peers": 50.0},
            "args": {"repeats": 5},
            "environment": {"cpu": cpu, "cpu_features": ["avx2"], "cpu_count": 2,
                            "cpus_usable": 2, "openblas_coretype": None, "jax_x64": x64,
                            "torch": "2.13.0", "jax": "0.10.2", "torch_threads": 1,
                            "pinned_cpus": [0], "env": {"XLA_FLAGS": "unset"},
                            "load_average_start": [0.5, 0.5, 0.5]},
            "rows": rows, "timings": {"train": [{"a": [1.0, 1.1]}], "peers": []}}


def _folder(tmp_path: pathlib.Path, runs: list[dict], prose: str = "1.20–1.30×",
            speed: str = "0.90×") -> list[str]:
    results = tmp_path / "results"
    results.mkdir(parents=True)
    for i, run in enumerate(runs):
        (results / f"2026-12-03T00000{i}-run.json").write_text(json.dumps(run))
    (tmp_path / "page.md").write_text(PAGE.format(prose=prose))
    (tmp_path / "README.md").write_text(README.format(speed=speed))
    return ["--results", str(results), "--page", str(tmp_path / "page.md"),
            "--readme", str(tmp_path / "README.md"), "--chart", str(tmp_path / "chart.png")]


def test_the_committed_pages_quote_only_recorded_runs(capsys):
    """The real page and README: their blocks are what the committed runs give, and their
    prose has no figure that is not in a run."""
    assert sorted((ROOT / "benchmarks" / "results").glob("*.json")), "no recorded runs"
    assert page.main(["--check"]) == 0, capsys.readouterr().err


def test_summary_is_the_range_over_the_default_runs_and_x64_runs_stand_apart(tmp_path):
    runs = [_run(1.2), _run(1.3), _run(0.5, x64=True)]
    args = _folder(tmp_path, runs)
    assert page.main(args) == 0
    text = (tmp_path / "page.md").read_text()
    summary = page.block(text, "summary")
    assert "| xpseq-JAX (autodiff) ÷ the same model in eager PyTorch | 1.20–1.30× " \
           "(met in 1 of 2) | not recorded | ≥ 1.3x |" in summary
    assert "0.90× ✗ (keras-jax)" in summary                # the peers row names who won
    assert "2 recorded runs with JAX's defaults" in summary
    assert "| xpseq-JAX (autodiff) ÷ the same model in eager PyTorch, LSTM + attention | " \
           "1.20–1.30× | 0.50× |" in summary               # the x64 comparison
    assert page.block(text, "runs").count("### ") == 3     # every run's table
    readme = (tmp_path / "README.md").read_text()
    assert "0.90× ✗ (keras-jax)" in page.block(readme, "readme")
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"
    assert page.main([*args, "--check"]) == 0


def test_check_fails_on_a_figure_no_run_has_and_on_a_stale_block(tmp_path, capsys):
    args = _folder(tmp_path, [_run(1.2), _run(1.3)], prose="1.57× and 1.20–1.30×")
    assert page.main(args) == 0
    assert page.main([*args, "--check"]) == 1
    assert "figures in no recorded run: 1.57×" in capsys.readouterr().err

    args = _folder(tmp_path / "b", [_run(1.2)], speed="2.1× as fast")
    assert page.main(args) == 0
    assert page.main([*args, "--check"]) == 1
    err = capsys.readouterr().err
    assert "README.md: figures in no recorded run: 2.1×" in err
    assert "3.14" not in err                               # only the README's part on speed

    args = _folder(tmp_path / "c", [_run(1.2)])
    assert page.main(args) == 0
    results = pathlib.Path(args[1])
    run = _run(1.4)
    (results / "2026-12-03T999999-new.json").write_text(json.dumps(run))   # a new run
    assert page.main([*args, "--check"]) == 1
    assert "its results blocks differ from the 2 recorded runs" in capsys.readouterr().err


def test_a_changed_measurement_counts_only_the_runs_of_the_current_code(tmp_path,
                                                                       monkeypatch):
    """A row of ``CHANGED`` (its xpseq code changed after earlier runs measured it): the
    summary's range counts the runs from the first run of the new code on, says so, and
    every run's own table keeps what it measured."""
    key = ("train", "xpseq-jax throughput vs native")
    monkeypatch.setattr(results, "CHANGED", {key: ("2026-12-03T000001", "the step changed")})
    args = _folder(tmp_path, [_run(1.2), _run(1.4), _run(1.5)], prose="1.40–1.50×")
    assert page.main(args) == 0
    text = (tmp_path / "page.md").read_text()
    summary = page.block(text, "summary")
    row = "| xpseq-JAX (autodiff) ÷ the same model in eager PyTorch | 1.40–1.50× ✓ "
    assert row in summary
    assert ("Since run `2026-12-03T000001`, the step changed: the rows built on "
            "“xpseq-jax throughput vs native” count that run and later ones (1 earlier run "
            "left out" in summary)
    assert "0.90× ✗ (keras-jax)" in summary                # other rows: every run
    assert "| 1,200 tok/s | 1.2x |" in page.block(text, "runs")
    assert page.main([*args, "--check"]) == 0


def test_runs_are_grouped_by_processor_and_bad_files_refused(tmp_path):
    other = _run(2.0, cpu="Other CPU")
    args = _folder(tmp_path, [_run(1.2), other])
    assert page.main(args) == 0
    summary = page.block((tmp_path / "page.md").read_text(), "summary")
    assert summary.index("**Test CPU") < summary.index("**Other CPU")
    assert "| 1.20× (met in 0 of 1)" not in summary and "1.20× ✗" in summary
    assert "2.00× ✓" in summary
    bad = copy.deepcopy(other)
    del bad["rows"]
    (pathlib.Path(args[1]) / "zz.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="not a results file of scripts/bench.py"):
        page.main(args)


def test_the_readme_shows_the_processor_with_the_most_runs_and_names_the_others(tmp_path):
    """The README keeps its length whatever the number of processors: one processor's
    table (the one with the most recorded runs), and a pointer to the page for the rest."""
    runs = [dict(run, file=f"{i}.json")
            for i, run in enumerate([_run(1.2, cpu="Other CPU"), _run(1.4), _run(1.5)])]
    block = results.readme_block(runs)
    assert "Test CPU" in block and "Other CPU" not in block
    assert "the benchmarks page has the runs of 1 other processor too" in block
    rules = [line for line in block.splitlines() if line.startswith("| ---")]
    assert rules == ["| --- " * 4 + "|"]
    alone = results.readme_block(runs[1:])
    assert "other processor" not in alone and alone.count("\n| ---") == 1


def test_bench_record_keeps_a_new_file_and_never_replaces_one(tmp_path, monkeypatch):
    bench = load_script("bench")
    data = _run(1.2)
    path = bench.record(str(tmp_path / "rec"), data)
    assert path.name.endswith("-test-cpu-train-peers.json")
    assert json.loads(path.read_text())["timings"] == data["timings"]

    class Frozen(bench.datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 12, 3, 12, 0, 0)

    monkeypatch.setattr(bench.datetime, "datetime", Frozen)
    first = bench.record(str(tmp_path / "rec"), data)
    first.write_text("the user's edit")
    with pytest.raises(FileExistsError):
        bench.record(str(tmp_path / "rec"), data)
    assert first.read_text() == "the user's edit"
