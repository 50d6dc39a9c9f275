"""``g2p`` (only with ``--only g2p``): the shipped G2P model's decoding speed.

The shipped G2P model (``xpseq.g2p``) decoding the 6,304 test words greedily (``--g2p-words``
for fewer), model loaded once, on one core: seconds on numpy, torch and JAX, and on
onnxruntime (below), each the median of ``--repeats`` calls, the engines taking turns
within each repeat (the first call, with JAX's compilations, is in the detail), target
<= 10 s; the ratio is against the same words decoded one per call on NumPy
(``--g2p-loop-words`` of them, scaled). PyTorch also with ``precision="bf16"``
(``--precision bf16``), its answers counted where they differ from float32's.

onnxruntime: the shipped model exported once into a temporary folder
(:func:`xpseq.export.onnx`, float32; the export timed in a row of its own) and decoded by
``G2P(folder)``: the same ``pronounce``, its batches (length
buckets, ``translate``'s batches) searched by :class:`xpseq.export.runtime.OnnxModel`
with ``--threads`` threads (the process's ``xpseq.backends.set_threads``). Its ids are
checked equal to NumPy float32's word by word (as the greedy phone lists: one phone an
id); the project's target is onnxruntime at least as fast
as the fastest float32 xpseq engine of the same run. What one batch costs (the largest of
the decoding, its encoder and one decoder step from ``<s>``, on numpy, torch and
onnxruntime, median of 20 calls taking turns) and where onnxruntime spends its time in
each (its own profiler: per operator type, and the costliest nodes) come with it.

Then what a user of ``xpseq g2p`` waits for: the command on the same words from stdin,
start-up and model loading included, on one core (``taskset``-style affinity of this
process, inherited), per backend: JAX with its compilation cache empty (a first run) and
warm (the next ones); and one word answered alone after the model is loaded
(``pronounce([word])``, the median of ``--g2p-loop-words`` calls), target < 50 ms.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

from .. import _common as common

from .context import Context
from .shared import Row, at_least

#: The float32 engines onnxruntime is measured against (bf16 gives other answers).
FLOAT32 = ("numpy", "torch", "jax")
#: Calls of the one-batch timings (median), the encoder and the step taking turns.
BATCH_CALLS = 20


def largest_batch(model: Any, words: list[str]) -> tuple[Any, Any]:
    """``(src, src_len)`` of the largest batch ``model.pronounce(words)`` decodes: the
    words' characters (and ``</s>``) in batches of up to 256 of one length bucket, as
    ``xpseq.search.translate`` makes them."""
    from xpseq.data import make_batches
    from xpseq.data.cmudict import word_tokens

    pairs = [(model.src_vocab.encode(word_tokens(w), add_eos=True), []) for w in words]
    batch = max(make_batches(pairs, 256, bucket=8), key=lambda b: b["src"].size)
    return batch["src"], batch["src_len"]


def onnxruntime_missing() -> str | None:
    """What the onnxruntime rows lack (``xpseq[onnx]``), or ``None``."""
    missing = [m for m in ("ndonnx", "onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
    return f"not installed: {', '.join(missing)} (pip install 'xpseq[onnx]')" if missing \
        else None


#: Operators whose kernel time is their subgraphs' nodes' (profiled on their own).
CONTAINERS = ("Loop", "If", "Scan")


def op_profile(folder: pathlib.Path, graph: str, feeds: dict, calls: int,
               threads: int) -> dict[str, Any]:
    """Where onnxruntime's kernel time goes in ``folder``'s ``graph`` (``"encoder"`` or
    ``"step"``) run ``calls`` times on ``feeds`` with ``threads`` threads (onnxruntime's own
    profiler; the nodes inside a ``Loop`` or ``If`` counted, not the node around them):
    ``{"ops": {op type: % of the time}, "nodes": [[node, op type, input shapes, %], ...]}``
    (the five costliest nodes)."""
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.enable_profiling = True
    opts.profile_file_prefix = str(folder / f"profile-{graph}")
    session = onnxruntime.InferenceSession(str(folder / f"{graph}.onnx"), opts,
                                           providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for _ in range(calls):
        session.run(None, {n: feeds[n] for n in names})
    events = json.loads(pathlib.Path(session.end_profiling()).read_text())
    by_op: collections.Counter = collections.Counter()
    by_node: collections.Counter = collections.Counter()
    shapes: dict[str, str] = {}
    for e in events:
        op = e.get("args", {}).get("op_name")
        if (e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time")
                or op in CONTAINERS):
            continue
        node = e["name"][:-len("_kernel_time")]
        by_op[op] += e["dur"]
        by_node[(node, op)] += e["dur"]
        shapes[node] = ", ".join("×".join(map(str, list(s.values())[0]))
                                 for s in e["args"].get("input_type_shape", []))
    total = sum(by_op.values()) or 1
    return {"ops": {op: 100 * d / total for op, d in by_op.most_common()},
            "nodes": [[node, op, shapes[node], 100 * d / total]
                      for (node, op), d in by_node.most_common(5)]}


def one_batch(models: dict[str, Any], onnx_model: Any, src: Any, src_len: Any,
              folder: pathlib.Path, threads: int) -> dict[str, Any]:
    """What decoding one batch costs on numpy, torch and onnxruntime: the encoder and one
    decoder step from ``<s>`` (ms, median of :data:`BATCH_CALLS` calls taking turns), and
    where onnxruntime's time goes in each (:func:`op_profile`)."""
    import numpy as np

    from xpseq import models as kinds

    fns: dict[str, Callable[[], Any]] = {}
    for name in ("numpy", "torch"):
        model = models[name]
        decoder = model.decoder                   # a CheckpointDecoder: the arrays
        be, config, params = decoder.backend, decoder.config, decoder.params
        kernels = kinds.of(config).kernels
        s, n = be.asarray(src), be.asarray(src_len)
        enc = kernels.encode(params, config, s, n, scan=be.scan, xp=be.xp)
        step, state = kernels.decoder(params, config, enc, max_len=None, xp=be.xp)
        y = be.asarray(np.ones(src.shape[0], dtype=np.int64))
        fns[f"{name} encoder"] = (lambda kernels=kernels, params=params, config=config, s=s,
                                  n=n, be=be: kernels.encode(params, config, s, n,
                                                             scan=be.scan, xp=be.xp))
        fns[f"{name} step"] = lambda step=step, state=state, y=y: step(state, y)
    enc, state = onnx_model.encode(src, src_len)
    y = np.ones(src.shape[0], dtype=np.int64)
    fns["onnxruntime encoder"] = lambda: onnx_model.encode(src, src_len)
    fns["onnxruntime step"] = lambda: onnx_model.step(enc, state, y)
    for fn in fns.values():
        fn()
    times = common.take_turns(fns, BATCH_CALLS)
    inputs = {"src": np.asarray(src, dtype=np.int64),
              "src_len": np.asarray(src_len, dtype=np.int64)}
    return {"shape": list(src.shape),
            "ms": {k: 1e3 * statistics.median(t) for k, t in times.items()},
            "onnxruntime_profile": {
                "encoder": op_profile(folder, "encoder", inputs, BATCH_CALLS, threads),
                "step": op_profile(folder, "step", {**enc, **state, "y_prev": y},
                                   BATCH_CALLS, threads)}}


def run(context: Context) -> list[Row]:
    """The shipped G2P model (``xpseq.g2p``) decoding the 6,304 test words greedily, on one
    core, model loaded once: on each backend and on onnxruntime the whole list (the median
    of ``--repeats`` calls, taking turns; the first call apart), against the same words one
    per call on NumPy (on ``--g2p-loop-words`` of them, scaled to the whole list)."""
    from xpseq import backends, g2p
    from xpseq.data.cmudict import load_g2p

    args = context.args
    words, _ = load_g2p().references("test")
    words = ["".join(w) for w in words][:args.g2p_words]
    loop_words = words[:args.g2p_loop_words]
    rows, seconds = [], {}
    model = g2p.load(backend="numpy")
    start = time.perf_counter()
    for w in loop_words:
        model.pronounce([w], lookup=False)
    per_word = (time.perf_counter() - start) / len(loop_words)
    engines = {"numpy": g2p.load(backend="numpy"), "torch": g2p.load(backend="torch"),
               "jax": g2p.load(backend="jax"),
               "torch bf16": g2p.load(backend="torch", precision="bf16")}
    threads = backends.threads_set() or 1   # what G2P(folder) (an export) takes
    with contextlib.ExitStack() as stack:
        missing = onnxruntime_missing()
        onnx: dict[str, Any] = {"missing": missing, "threads": threads}
        if missing is None:
            from xpseq import export
            from xpseq.export.runtime import OnnxModel

            folder = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory())) / "g2p"
            start = time.perf_counter()
            export.onnx(g2p.MODEL_DIR / g2p.shipped()["files"][0], folder, dtype="float32")
            onnx["export_seconds"] = time.perf_counter() - start
            onnx["megabytes"] = {f.name: f.stat().st_size / 1e6 for f in folder.glob("*")}
            onnx["versions"] = common.package_versions(("onnxruntime", "ndonnx", "onnx"))
            # xpseq's G2P on the export: the same pronounce, its batches searched by
            # OnnxModel.search with `threads` threads.
            engines["onnxruntime"] = g2p.G2P(folder)
        answers = {}
        names = list(engines)
        for name in names:
            start = time.perf_counter()
            answers[name] = engines[name].pronounce(words, lookup=False)
            seconds[f"{name} first"] = time.perf_counter() - start
        again: dict[str, list] = {}

        def timed(name: str) -> Callable[[], None]:
            return lambda: again.__setitem__(name, engines[name].pronounce(words, lookup=False))

        times = common.take_turns({name: timed(name) for name in names}, args.repeats)
        for name in names:
            seconds[name] = statistics.median(times[name])
            assert again[name] == answers[name], name
        for name in names:
            target, met = (("<= 10 s", seconds[name] <= 10.0) if len(words) == 6304
                           else ("—", None))
            turns = (f"median of {args.repeats}, taking turns; first call "
                     f"{seconds[name + ' first']:.1f} s")
            if name == "torch bf16":
                differ = sum(a != b for a, b in zip(answers[name], answers["torch"]))
                rows.append(Row("g2p", f"shipped model, {len(words)} test words greedy on "
                                "torch, --precision bf16", seconds[name], "s",
                                seconds["torch"] / seconds[name], "—", None,
                                f"ratio: against float32 on torch; {differ} of {len(words)} "
                                f"answers differ from float32's; {turns}"))
                continue
            label = (f"onnxruntime, {threads} thread{'s' * (threads > 1)}"
                     if name == "onnxruntime" else name)
            rows.append(Row("g2p", f"shipped model, {len(words)} test words greedy on {label}",
                            seconds[name], "s", per_word * len(words) / seconds[name], target,
                            met, f"ratio: against one word per call on numpy "
                            f"({1e3 * per_word:.1f} ms a word, {len(loop_words)} words); "
                            + turns))
        if missing is not None:
            rows.append(Row("g2p", "shipped model greedy on onnxruntime", missing, "", None,
                            "—", None, "no ONNX export, no onnxruntime rows"))
        else:
            fastest = min(FLOAT32, key=lambda n: seconds[n])
            ratio = seconds[fastest] / seconds["onnxruntime"]
            rows.append(Row("g2p", f"onnxruntime ({threads} thread{'s' * (threads > 1)}) vs "
                            "the fastest xpseq engine "
                            f"({fastest}), {len(words)} words greedy",
                            f"{seconds['onnxruntime']:.3g} vs {seconds[fastest]:.3g}", "s",
                            ratio, *at_least(ratio, 1.0),
                            "ratio: the fastest float32 engine's time / onnxruntime's, "
                            "each the median above; "
                            + ", ".join(f"{k} {v}" for k, v in onnx["versions"].items()
                                        if k != "python")))
            # Greedy phone lists are equal exactly where the ids are (an id is one phone).
            onnx["equal"] = sum(a == b for a, b in zip(answers["numpy"],
                                                       answers["onnxruntime"]))
            onnx["words"] = len(words)
            rows.append(Row("g2p", "words whose ids equal numpy float32's, onnxruntime",
                            onnx["equal"], f"of {onnx['words']}", None, f"{onnx['words']}",
                            onnx["equal"] == onnx["words"],
                            "compared as phone lists, one phone an id"))
            rows.append(Row("g2p", "ONNX export of the shipped model (xpseq.export.onnx, "
                            "float32)", onnx["export_seconds"], "s", None, "—", None,
                            ", ".join(f"{k} {v:.1f} MB" for k, v in
                                      sorted(onnx["megabytes"].items()))))
            src, src_len = largest_batch(engines["numpy"], words)
            onnx["batch"] = one_batch(engines, OnnxModel(folder, threads=threads), src,
                                      src_len, folder, threads)
            ms = onnx["batch"]["ms"]
            shape = "×".join(map(str, onnx["batch"]["shape"]))
            for part in ("encoder", "step"):
                profile = onnx["batch"]["onnxruntime_profile"][part]
                top = ", ".join(f"{op} {share:.0f} %"
                                for op, share in list(profile["ops"].items())[:4])
                nodes = ", ".join(f"{node} ({op} of {shapes}) {share:.0f} %"
                                  for node, op, shapes, share in profile["nodes"][:4])
                rows.append(Row("g2p", f"one batch ({shape} characters), the {part}"
                                f"{' (one step from <s>)' if part == 'step' else ''}: "
                                "onnxruntime / numpy / torch",
                                " / ".join(f"{ms[f'{e} {part}']:.3g}" for e in
                                           ("onnxruntime", "numpy", "torch")), "ms",
                                ms[f"numpy {part}"] / ms[f"onnxruntime {part}"], "—", None,
                                f"ratio: numpy / onnxruntime; median of {BATCH_CALLS} calls; "
                                f"onnxruntime's time by operator: {top}; costliest nodes: "
                                + nodes))
    single = {}
    for name in FLOAT32:
        model = engines[name]
        model.pronounce(loop_words[:1], lookup=False)
        times_one = []
        for w in loop_words:
            start = time.perf_counter()
            model.pronounce([w], lookup=False)
            times_one.append(time.perf_counter() - start)
        single[name] = statistics.median(times_one)
        rows.append(Row("g2p", f"one word alone after loading, {name} (median of "
                        f"{len(times_one)})", 1e3 * single[name], "ms", None, "< 50 ms",
                        single[name] < 0.05, f"slowest {1e3 * max(times_one):.1f} ms"))
    command = {}
    text = "".join(w + "\n" for w in words)
    with tempfile.TemporaryDirectory() as cache:
        for name, label, env, extra in (
                ("numpy", "numpy", {}, []), ("torch", "torch", {}, []),
                ("torch", "torch, --precision bf16", {}, ["--precision", "bf16"]),
                ("jax", "jax, empty compilation cache", {"XPSEQ_JAX_CACHE": cache}, []),
                ("jax", "jax, warm compilation cache", {"XPSEQ_JAX_CACHE": cache}, [])):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "xpseq", "g2p", "--model-only",
                                   "--backend", name, *extra],
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
                           "words": len(words), "repeats": args.repeats,
                           "onnxruntime": onnx, "model": g2p.shipped()["model"]})
    return rows
