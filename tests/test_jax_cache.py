"""The command's JAX compilation cache works with what ``make demo`` installs
(``xpseq[jax]``, which brings ``filelock``, the lock JAX's cache needs): a second
``xpseq train`` of the same shapes reads every program back and compiles nothing new, and
no JAX warning is printed."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata

import pytest


def test_the_jax_extra_brings_the_lock_jaxs_cache_needs():
    required = [r.split(";")[0].strip() for r in metadata.requires("xpseq") or ()
                if 'extra == "jax"' in r]
    assert any(r.startswith("filelock") for r in required), required


@pytest.mark.slow                               # (two JAX trainings: about a minute)
def test_a_second_run_of_the_same_shapes_compiles_nothing(tmp_path):
    pytest.importorskip("jax")
    cache = tmp_path / "cache"
    env = dict(os.environ, XPSEQ_JAX_CACHE=str(cache), JAX_PLATFORMS="cpu")

    def train(out):
        done = subprocess.run([sys.executable, "-m", "xpseq", "train", "--quick", "--backend",
                               "jax", "--epochs", "1", "--hidden", "16", "--embed", "8",
                               "--no-progress", "--out", str(tmp_path / out)],
                              capture_output=True, text=True, timeout=600, env=env,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "Warning" not in done.stderr and "filelock" not in done.stderr, done.stderr
        return sorted(p.name for p in cache.rglob("*") if p.is_file())

    first = train("a.safetensors")
    assert first, "the first run cached no program"
    assert train("b.safetensors") == first        # every program read back, none added
