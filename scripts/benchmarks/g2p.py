"""``g2p`` (only with ``--only g2p``): the shipped G2P model's decoding speed.

The shipped G2P model (``xpseq.g2p``) decoding the 6,304 test words greedily (``--g2p-words``
for fewer), model loaded once, on one core: seconds on numpy, torch and JAX (the second
call; the first, with JAX's compilations, in the detail), target <= 10 s; the ratio is
against the same words decoded one per call on NumPy (``--g2p-loop-words`` of them,
scaled). Then what a user of ``xpseq g2p`` waits for: the command on the same words
from stdin, start-up and model loading included, on one core (``taskset``-style affinity
of this process, inherited), per backend: JAX with its compilation cache empty (a first
run) and warm (the next ones); and one word answered alone after the model is loaded
(``pronounce([word])``, the median of ``--g2p-loop-words`` calls), target < 50 ms.
PyTorch also with ``precision="bf16"`` (``--precision bf16``), its answers counted where
they differ from float32's.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from .context import Context
from .shared import Row


def run(context: Context) -> list[Row]:
    """The shipped G2P model (``xpseq.g2p``) decoding the 6,304 test words greedily, on one
    core, model loaded once: on each backend the whole list (JAX: the second call, and
    the first with its compilations), against the same words one per call on NumPy (on
    ``--g2p-loop-words`` of them, scaled to the whole list)."""
    from xpseq import g2p
    from xpseq.data.cmudict import load_g2p

    args = context.args
    words, _ = load_g2p().references("test")
    words = ["".join(w) for w in words][:args.g2p_words]
    loop_words = words[:args.g2p_loop_words]
    rows, seconds = [], {}
    model = g2p.load(backend="numpy")
    start = time.perf_counter()
    for w in loop_words:
        model.pronounce([w])
    per_word = (time.perf_counter() - start) / len(loop_words)
    answers = {}
    for name, precision in (("numpy", None), ("torch", None), ("jax", None),
                            ("torch", "bf16")):
        model = g2p.load(backend=name, precision=precision)
        start = time.perf_counter()
        first = model.pronounce(words)
        if precision:
            name = f"{name} bf16"
        seconds[f"{name} first"] = time.perf_counter() - start
        start = time.perf_counter()
        again = model.pronounce(words)
        seconds[name] = time.perf_counter() - start
        assert first == again
        answers[name] = again
        target, met = ("<= 10 s", seconds[name] <= 10.0) if len(words) == 6304 else ("—", None)
        if precision:
            differ = sum(a != b for a, b in zip(again, answers["torch"]))
            rows.append(Row("g2p", f"shipped model, {len(words)} test words greedy on torch, "
                            "--precision bf16", seconds[name], "s",
                            seconds["torch"] / seconds[name], "—", None,
                            f"ratio: against float32 on torch; {differ} of {len(words)} "
                            "answers differ from float32's"))
            continue
        rows.append(Row("g2p", f"shipped model, {len(words)} test words greedy on {name}",
                        seconds[name], "s", per_word * len(words) / seconds[name], target, met,
                        f"ratio: against one word per call on numpy ({1e3 * per_word:.1f} "
                        f"ms a word, {len(loop_words)} words); first call "
                        f"{seconds[name + ' first']:.1f} s"))
    single = {}
    for name in ("numpy", "torch", "jax"):
        model = g2p.load(backend=name)
        model.pronounce(loop_words[:1])
        times = []
        for w in loop_words:
            start = time.perf_counter()
            model.pronounce([w])
            times.append(time.perf_counter() - start)
        single[name] = statistics.median(times)
        rows.append(Row("g2p", f"one word alone after loading, {name} (median of "
                        f"{len(times)})", 1e3 * single[name], "ms", None, "< 50 ms",
                        single[name] < 0.05, f"slowest {1e3 * max(times):.1f} ms"))
    command = {}
    text = "".join(w + "\n" for w in words)
    with tempfile.TemporaryDirectory() as cache:
        for name, label, env, extra in (
                ("numpy", "numpy", {}, []), ("torch", "torch", {}, []),
                ("torch", "torch, --precision bf16", {}, ["--precision", "bf16"]),
                ("jax", "jax, empty compilation cache", {"XPSEQ_JAX_CACHE": cache}, []),
                ("jax", "jax, warm compilation cache", {"XPSEQ_JAX_CACHE": cache}, [])):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "xpseq", "g2p", "--backend", name,
                                   *extra],
                                  input=text, capture_output=True, text=True,
                                  env={**os.environ, **env})
            command[label] = time.perf_counter() - start
            if done.returncode != 0 or done.stdout.count("\n") != len(words):
                raise RuntimeError(f"xpseq g2p --backend {name} failed: {done.stderr}")
            target, met = (("< 10 s", command[label] < 10.0) if len(words) == 6304
                           else ("—", None))
            rows.append(Row("g2p", f"xpseq g2p < {len(words)} words, {label}, start-up "
                            "included", command[label], "s", None, target, met,
                            "one core (this process's affinity)"))
    context.record("g2p", {"seconds": seconds, "per_word_numpy": per_word,
                           "single_word_seconds": single, "command_seconds": command,
                           "words": len(words), "model": g2p.shipped()["model"]})
    return rows
