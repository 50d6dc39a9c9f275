"""The scripts run from a fresh checkout and report what they should."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_seed_examples_script_passes_on_every_backend():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "seed_examples.py")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All seed checks pass on every backend." in done.stdout
    assert "[0.422319, 0.155362, 0.422319, 0.000000]" in done.stdout
    assert "FAIL" not in done.stdout


def test_train_reverse_script_runs_and_checkpoint_agrees():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "train_reverse.py"),
                           "--epochs", "1", "--backends", "torch"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torch:" in done.stdout and "greedy reversal exact on" in done.stdout
    assert "largest logit difference from numpy" in done.stdout
