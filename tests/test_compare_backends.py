"""scripts/compare_backends.py: the harness runs, writes its three files and its numbers hold
together (the right rows and fields, the expected agreement with NumPy float64). Tiny
sizes: this checks the harness, not the speed."""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "compare_backends.py"
FIELDS = ("backend", "dtype", "gradients", "forward_ms", "gradient_ms", "step_ms", "decode_ms",
          "jax_compile_s", "loss_diff", "logits_diff", "grad_diff", "final_loss",
          "final_loss_diff", "trajectory", "ratios")
TIMINGS = ("forward_ms", "gradient_ms", "step_ms", "decode_ms")
DIFFS = ("loss_diff", "logits_diff", "grad_diff")
STEPS = 3

#: A long check (the benchmark script run whole on every backend): make test-slow.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict,
                                                           pathlib.Path, list[str]]:
    pytest.importorskip("matplotlib")
    names = ["numpy"] + [n for n in ("torch", "jax") if importlib.util.find_spec(n)]
    out = tmp_path_factory.mktemp("compare_backends")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--embed", "4", "--hidden", "4", "--batch", "8",
         "--steps", str(STEPS), "--repeats", "1", "--pairs", "64", "--backends", ",".join(names),
         "--out", str(out)],
        capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((out / "compare_backends.json").read_text())
    return done, data, out, names


def test_writes_the_three_files_and_prints_the_table(run):
    done, data, out, _ = run
    assert (out / "compare_backends.png").read_bytes().startswith(b"\x89PNG")
    md = (out / "compare_backends.md").read_text()
    header = "| backend | dtype | gradients | forward ms | gradient ms | step ms | decode ms |"
    assert header in md and header in done.stdout
    assert f"loss after {STEPS} steps" in done.stdout
    # The settings the numbers depend on are printed.
    for text in (" cores (", "AVX-512", "OPENBLAS_CORETYPE=", "OPENBLAS_NUM_THREADS",
                 "versions:"):
        assert text in done.stdout
    assert data["environment"]["cpu_count"] >= 1


def test_a_row_per_backend_and_dtype_with_every_field(run):
    _, data, _, names = run
    rows = data["rows"]
    assert [(r["backend"], r["dtype"]) for r in rows] == [
        (n, d) for n in names for d in ("float32", "float64")]
    for r in rows:
        assert all(field in r for field in FIELDS), sorted(set(FIELDS) - set(r))
        assert len(r["trajectory"]) == STEPS
        for key in TIMINGS:
            assert r[key] > 0 and math.isfinite(r["ratios"][key])
        assert (r["jax_compile_s"] is None) == (r["backend"] != "jax")
    numpy64 = next(r for r in rows if (r["backend"], r["dtype"]) == ("numpy", "float64"))
    assert all(numpy64["ratios"][key] == 1.0 for key in TIMINGS)


def test_differences_from_the_numpy_float64_reference(run):
    _, data, _, _ = run
    for r in data["rows"]:
        label = f"{r['backend']} {r['dtype']}"
        diffs = [r[key] for key in DIFFS]
        if (r["backend"], r["dtype"]) == ("numpy", "float64"):
            assert diffs == [0.0, 0.0, 0.0], label
        elif r["dtype"] == "float64":
            assert max(diffs) < 1e-10, (label, diffs)
        else:
            assert max(diffs) < 1e-3, (label, diffs)
            assert max(diffs) > 0, (label, "float32 cannot match float64 exactly")


def test_losses_after_training_are_finite_and_float64_agrees(run):
    _, data, _, _ = run
    rows = data["rows"]
    assert all(math.isfinite(x) for r in rows for x in [r["final_loss"], *r["trajectory"]])
    float64 = [r for r in rows if r["dtype"] == "float64"]
    ref = float64[0]["final_loss"]
    assert max(abs(r["final_loss"] - ref) / abs(ref) for r in float64) < 1e-8
    assert all(r["final_loss_diff"] < 1e-8 for r in float64)
    # The Adam steps moved the model: the loss on the first batch has changed.
    assert ref != float64[0]["trajectory"][0]
