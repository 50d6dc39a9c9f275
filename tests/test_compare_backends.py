"""scripts/compare_backends.py: the harness runs, writes its files and its numbers hold
together (the right rows and fields, the speed-ups, the expected agreement with NumPy
float64, the bf16 and compiled rows, the device check). Tiny sizes: this checks the
harness, not the speed."""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import statistics
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = "scripts.compare_backends"
FIELDS = ("backend", "engine", "compiled", "dtype", "precision", "gradients", "forward_ms",
          "gradient_ms", "step_ms", "decode_ms", "compile_total_s", "loss_diff",
          "logits_diff", "grad_diff", "final_loss", "final_loss_diff", "trajectory",
          "speedups", "repeats_ms")
TIMINGS = ("forward_ms", "gradient_ms", "step_ms", "decode_ms")
DIFFS = ("loss_diff", "logits_diff", "grad_diff")
STEPS = 3
TINY = ["--embed", "4", "--hidden", "4", "--batch", "8", "--repeats", "1", "--pairs", "64"]

#: A long check (the benchmark script run whole on every backend): make test-slow.
pytestmark = pytest.mark.slow


def run_script(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", SCRIPT, *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict,
                                                           pathlib.Path, list[str]]:
    pytest.importorskip("matplotlib")
    names = ["numpy"] + [n for n in ("torch", "jax") if importlib.util.find_spec(n)]
    out = tmp_path_factory.mktemp("compare_backends")
    done = run_script(*TINY, "--steps", str(STEPS), "--backends", ",".join(names),
                      "--precision", "bf16", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((out / "compare_backends.json").read_text())
    return done, data, out, names


def test_writes_the_files_and_prints_the_table(run):
    done, data, out, _ = run
    for png in ("compare_backends.png", "compare_backends_speedup.png"):
        assert (out / png).read_bytes().startswith(b"\x89PNG")
    md = (out / "compare_backends.md").read_text()
    header = ("| backend | dtype | gradients | forward ms (speed-up) | gradient ms (speed-up) | "
              "step ms (speed-up) | decode ms (speed-up) | compile s |")
    assert header in md and header in done.stdout
    assert "(compare_backends_speedup.png)" in md
    assert f"loss after {STEPS} steps" in done.stdout
    # The settings the numbers depend on are printed.
    for text in (" cores (", "AVX-512", "AMX", "OPENBLAS_CORETYPE=", "OPENBLAS_NUM_THREADS",
                 "versions:", "device: --device cpu"):
        assert text in done.stdout
    assert data["environment"]["cpu_count"] >= 1


def test_the_header_names_the_processor(run):
    done, data, out, _ = run
    cpu = data["environment"]["cpu"]
    assert cpu
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.exists():                        # what lscpu calls the model name
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        assert not names or cpu == names[0]
    md_lines = (out / "compare_backends.md").read_text().splitlines()
    assert md_lines[2].startswith(f"- processor: {cpu}, ")
    assert done.stdout.splitlines()[0].startswith(f"processor: {cpu}, ")


def test_a_row_per_backend_and_dtype_with_every_field(run):
    _, data, _, names = run
    rows = data["rows"]
    expected = []
    for n in names:
        expected += [(n, d) for d in ("float32", "float64")]
        expected += [(n, "bf16")] if n != "numpy" else []
    assert [(r["engine"], r["dtype"]) for r in rows] == expected
    for r in rows:
        assert all(field in r for field in FIELDS), sorted(set(FIELDS) - set(r))
        assert len(r["trajectory"]) == STEPS
        for key in TIMINGS:
            assert r[key] > 0 and math.isfinite(r["speedups"][key])
        assert (r["compile_total_s"] is None) == (r["backend"] != "jax")


def test_the_speed_up_is_the_base_time_over_the_row_time(run):
    done, data, out, _ = run
    assert data["settings"]["speedup_base"] == "numpy float64"
    assert "higher is faster" in data["settings"]["speedup_label"]
    rows = data["rows"]
    base = next(r for r in rows if (r["engine"], r["dtype"]) == ("numpy", "float64"))
    for r in rows:
        for key in TIMINGS:
            raw = key.removesuffix("_ms")
            assert r[key] == pytest.approx(statistics.median(r["repeats_ms"][raw]))
            expected = (statistics.median(base["repeats_ms"][raw])
                        / statistics.median(r["repeats_ms"][raw]))
            assert r["speedups"][key] == pytest.approx(expected)
    assert all(base["speedups"][key] == 1.0 for key in TIMINGS)
    # The table says which way it goes.
    for text in (done.stdout, (out / "compare_backends.md").read_text()):
        assert "speed-up = numpy float64's time / this row's time" in text
        assert "higher is faster" in text


def test_bf16_rows_and_a_note_for_numpy(run):
    done, data, out, names = run
    bf16 = [r for r in data["rows"] if r["dtype"] == "bf16"]
    assert sorted(r["engine"] for r in bf16) == sorted(n for n in names if n != "numpy")
    for r in bf16:
        assert r["precision"] == "bf16" and r["param_dtype"] == "float32"
        # bfloat16 keeps 8 significant bits: close to float64, never equal.
        assert 0 < r["loss_diff"] < 0.05 and 0 < r["logits_diff"] < 0.1, r
        assert all(math.isfinite(x) for x in r["trajectory"])
    note = "numpy: no bf16 row"
    assert note in done.stdout and note in (out / "compare_backends.md").read_text()
    assert any(n.startswith(note) and "bfloat16" in n for n in data["notes"])


def test_differences_from_the_numpy_float64_reference(run):
    _, data, _, _ = run
    for r in data["rows"]:
        label = f"{r['engine']} {r['dtype']}"
        diffs = [r[key] for key in DIFFS]
        if (r["engine"], r["dtype"]) == ("numpy", "float64"):
            assert diffs == [0.0, 0.0, 0.0], label
        elif r["dtype"] == "float64":
            assert max(diffs) < 1e-10, (label, diffs)
        elif r["dtype"] == "float32":
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


def test_every_option_has_help():
    code = ("from scripts import compare_backends as c; "
            "print([a.dest for a in c.build_parser()._actions if not a.help])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("backends", [None, "torch"])
def test_an_unavailable_device_is_a_clear_error(backends, tmp_path):
    if backends == "torch":
        torch = pytest.importorskip("torch")
        if torch.cuda.device_count() > 9:
            pytest.skip("this machine has a cuda:9")
    args = ["--device", "cuda:9", "--out", str(tmp_path)]
    done = run_script(*args, *(["--backends", backends] if backends else []), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--device cuda:9" in done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())
    # A device that no library could name is refused before anything starts.
    done = run_script("--device", "tpu", timeout=60)
    assert done.returncode == 2 and "--device must be" in done.stderr


def test_compile_adds_the_compiled_torch_row(tmp_path):
    """The longest test here: about 3 minutes of torch.compile on 2 busy cores."""
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    # torch.compile unrolls the RNN's time steps: batches of 4 from 32 pairs have sequences
    # of 8 (191 s of this test on 2 busy cores; TINY's sequences of 16 took 303 s).
    done = run_script("--embed", "4", "--hidden", "4", "--batch", "4", "--pairs", "32",
                      "--repeats", "1", "--steps", "2", "--backends", "numpy,torch",
                      "--dtypes", "float32", "--compile", "--out", str(tmp_path), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads((tmp_path / "compare_backends.json").read_text())["rows"]
    assert [r["engine"] for r in rows] == ["numpy", "torch", "torch (compiled)"]
    eager, compiled = rows[1], rows[2]
    assert compiled["compiled"] and not eager["compiled"]
    assert compiled["compile_total_s"] > 0 and eager["compile_total_s"] is None
    assert compiled["compiled_graphs"] >= 1
    # The same math: compiled and eager float32 agree to float32 rounding.
    assert abs(compiled["loss"] - eager["loss"]) / abs(eager["loss"]) < 1e-5
    assert "| torch (compiled) | float32 |" in done.stdout
