"""``threads`` (only with ``--only threads``): what ``xpseq --threads`` (default 1) is worth.

The seconds of the second epoch of ``xpseq --threads N train --task toy --epochs 2`` (the
command's defaults: the RNN model, and ``--model transformer``), each in a fresh process
on all the machine's cores, on numpy, torch and JAX, with 2 threads against 1; once on an
idle machine and once with another process spinning on one core (a busy machine). The
ratio is the 1-thread seconds over the 2-thread seconds (above 1: the second thread
helps).
"""

from __future__ import annotations

import csv
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

from .context import Context
from .shared import THREAD_VARS, Row

BACKENDS = ("numpy", "torch", "jax")
MODELS = ("rnn", "transformer")
COUNTS = (1, 2)


def epoch_seconds(backend: str, model: str, threads: int, folder: pathlib.Path,
                  quick: bool = False) -> float:
    """Seconds of the second epoch (the first compiles on JAX) of ``xpseq --threads
    {threads} train --task toy --epochs 2``, from the run's metrics log, in a fresh
    process: XLA's thread pool is fixed when JAX starts. The thread variables are left out
    of its environment, so that ``--threads`` alone decides. The checkpoint and its log
    are ``folder/{backend}-{model}-{threads}.*``; ``quick`` trains on the small data."""
    out = folder / f"{backend}-{model}-{threads}.safetensors"
    env = {k: v for k, v in os.environ.items()
           if k not in THREAD_VARS or k == "OPENBLAS_CORETYPE"}
    done = subprocess.run([sys.executable, "-m", "xpseq", "--threads", str(threads), "train",
                           "--task", "toy", "--backend", backend, "--model", model,
                           "--epochs", "2", "--no-progress", "--out", str(out),
                           *(["--quick"] if quick else [])],
                          env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"xpseq train on {backend} failed:\n{done.stderr[-2000:]}")
    with open(out.with_suffix(".metrics.csv"), newline="") as f:
        return float(list(csv.DictReader(f))[-1]["seconds"])


def run(context: Context) -> list[Row]:
    """``xpseq --threads 2`` against 1 for training, per backend and model kind, on an idle
    machine and with one core kept busy by another process (see the module docstring)."""
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for load in ("idle", "busy"):
            spinner = (subprocess.Popen([sys.executable, "-c", "while True: pass"])
                       if load == "busy" else None)
            try:
                for _ in range(context.args.repeats):     # the settings take turns
                    for backend in BACKENDS:
                        for model in MODELS:
                            for n in COUNTS:
                                key = f"{load} {backend} {model} {n}"
                                seconds = epoch_seconds(backend, model, n, pathlib.Path(tmp))
                                times.setdefault(key, []).append(seconds)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    median = {k: statistics.median(v) for k, v in times.items()}
    rows = []
    for load in ("idle", "busy"):
        for backend in BACKENDS:
            for model in MODELS:
                one, two = (median[f"{load} {backend} {model} {n}"] for n in COUNTS)
                rows.append(Row("threads", f"toy {model} on {backend}, 2 threads vs 1, "
                                f"{load} machine", two, "s/epoch", one / two,
                                detail=f"1 thread: {one:.2f} s/epoch"))
    context.record("threads", {"seconds": times, "median": median})
    return rows
