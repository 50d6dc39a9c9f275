"""The scripts run from a fresh checkout and report what they should."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from helpers import load_script

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_report_names_the_processor_and_its_matrix_units():
    common = load_script("_common")
    # A Sapphire Rapids' flags (abridged) and an older AVX2-only processor's.
    xeon = "fpu sse2 avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8"
    assert common.cpu_features(xeon) == ["avx2", "fma", "avx512f", "avx512_vnni",
                                         "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"]
    assert common.cpu_features("fpu sse2 avx2 fma") == ["avx2", "fma"]
    env = {"cpu": "Intel(R) Xeon(R) Platinum 8481C", "cpu_count": 2, "cpus_usable": 2,
           "cpu_features": common.cpu_features(xeon), "openblas_coretype": "SapphireRapids"}
    assert common.machine_text(env) == (
        "Intel(R) Xeon(R) Platinum 8481C, 2 cores (2 usable); AVX-512, AVX512-BF16, AMX "
        "(avx2 fma avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8); "
        "OPENBLAS_CORETYPE=SapphireRapids")
    env.update(cpu_features=["avx2", "fma"], openblas_coretype=None)
    assert "no AVX-512, no AVX512-BF16, no AMX (avx2 fma); OPENBLAS_CORETYPE=unset" in \
        common.machine_text(env)
    here = common.machine()
    assert set(here) >= {"cpu", "cpu_features", "cpu_count", "openblas_coretype"}


@pytest.mark.slow  # a script run whole, every backend
def test_attention_examples_script_passes_on_every_backend():
    done = subprocess.run([sys.executable, "-m", "scripts.attention_examples"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All checks pass on every backend." in done.stdout
    assert "[0.422319, 0.155362, 0.422319, 0.000000]" in done.stdout
    assert "FAIL" not in done.stdout


@pytest.mark.slow  # a script run whole, every backend
def test_train_reverse_script_runs_and_checkpoint_agrees():
    done = subprocess.run([sys.executable, "-m", "scripts.train_reverse",
                           "--epochs", "1", "--backends", "numpy"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "numpy:" in done.stdout and "greedy reversal exact on" in done.stdout
    assert "largest logit difference from numpy" in done.stdout


@pytest.mark.slow  # a script run whole, every backend
def test_epoch_seconds_script_reports_ratios_to_numpy():
    done = subprocess.run([sys.executable, "-m", "scripts.epoch_seconds",
                           "--pairs", "64", "--epochs", "2", "--dtypes", "float64",
                           "--backends", "numpy,array_api_strict"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| float64")]
    assert [r.split("|")[2].strip() for r in rows] == ["numpy", "array_api_strict"]
    assert rows[0].split("|")[5].strip() == "1.00x"
    # The same hand-derived steps on both: the same losses.
    assert rows[0].split("|")[6] == rows[1].split("|")[6]


@pytest.mark.slow  # a script run whole, every backend
def test_device_check_runs_the_parity_cases_on_a_chosen_device():
    # No GPU here: the same checks on torch's CPU device (the script's dry run).
    done = subprocess.run([sys.executable, "-m", "scripts.device_check",
                           "--devices", "torch=cpu"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(("ok", "FAIL"))]
    assert len(lines) == 3 * 6 and all(line.startswith("ok") for line in lines)
    assert sum("loss on the device: cpu" in line for line in lines) == 3
    assert done.stdout.rstrip().endswith("all checks passed")


def test_device_check_says_when_there_is_no_gpu():
    done = subprocess.run([sys.executable, "-m", "scripts.device_check"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={"PATH": "", "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no GPU found" in done.stderr
