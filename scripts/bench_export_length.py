"""Peak memory and time of an ONNX export decoding one long source, against its length: how
long an input an export decodes in a given memory.

Run: ``python -m scripts.bench_export_length [--lengths 1024,2048,4096,8192] [--memory 24]
[--record benchmarks/export-length]``. The model: the Transformer of
``scripts/bench_transformer_memory.py`` (``d_model=64, heads=4``, one layer each side,
``d_ff=128``), its parameters as initialised (memory and time do not depend on their
values), saved as a checkpoint and exported by :func:`xpseq.export.onnx` in float32. Each
point runs in a fresh process limited to ``--memory-limit`` GiB of address space: it opens
the export with :class:`xpseq.export.runtime.OnnxModel` (one onnxruntime thread), then
runs the encoder graph on one source of L tokens and ``--steps`` decoder steps; its peak is
the growth of the peak resident set (``VmHWM``, reset through ``/proc/self/clear_refs``)
over those calls. The export attends plainly (the whole ``(L, L)`` scores of the encoder's
self-attention, per head), so the peak grows with L²: the script fits the exponent of the
two longest points (the local slope of log peak against log L) and solves for the longest
source that fits in ``--memory`` GiB. A decoder step holds the source's
keys and values and one row of scores: linear in L.
"""

from __future__ import annotations

import json
import math
import pathlib
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

from . import _common as common
from .bench_long_attention import peak_rss, reset_peak

CONFIG = dict(src_vocab=64, tgt_vocab=64, d_model=64, heads=4, encoder_layers=1,
              decoder_layers=1, d_ff=128)


def make_export(folder: pathlib.Path, max_len: int) -> pathlib.Path:
    """The model's checkpoint and its float32 export, in ``folder``."""
    import numpy as np

    from xpseq import export, models
    from xpseq.train import checkpoint as ckpt

    T = models.get("transformer")
    config = T.Config(**CONFIG, max_len=max_len)
    params = {k: np.asarray(v, dtype=np.float32) for k, v in T.init_params(config, 0).items()}
    words = [f"w{i}" for i in range(CONFIG["src_vocab"] - 4)]
    vocabs = {"src": ["<pad>", "<s>", "</s>", "<unk>", *words],
              "tgt": ["<pad>", "<s>", "</s>", "<unk>", *words]}
    path = ckpt.save(folder / "model.safetensors", config=config, params=params,
                     vocabs=vocabs)
    return export.onnx(path, folder / "onnx", dtype="float32")


def point(args: Any) -> dict[str, Any]:
    """One length in this process."""
    import numpy as np

    limit = int(args.memory_limit * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    result: dict[str, Any] = {"length": args.length}
    try:
        from xpseq.export.runtime import OnnxModel

        model = OnnxModel(args.folder, threads=1)
        rng = np.random.default_rng(args.seed)
        src = rng.integers(4, CONFIG["src_vocab"], (1, args.length))
        src_len = np.array([args.length])
        rss, _ = peak_rss()
        reset_peak()
        start = time.perf_counter()
        encoded, state = model.encode(src, src_len)
        result["encode_seconds"] = time.perf_counter() - start
        y = np.array([1])
        for _ in range(args.steps):
            log_probs, state, _ = model.step(encoded, state, y)
            y = np.argmax(log_probs, axis=-1)
        result["seconds"] = time.perf_counter() - start
        result["peak_bytes"] = peak_rss()[1] - rss
    except Exception as error:  # noqa: BLE001 (onnxruntime's allocation failures vary)
        result["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return result


def run_point(args: Any, folder: pathlib.Path, length: int) -> dict[str, Any]:
    """One length in a child process (a crash is a failure of that length)."""
    command = [sys.executable, "-m", __spec__.name, "--point", "--folder", str(folder),
               "--length", str(length), "--steps", str(args.steps),
               "--memory-limit", str(args.memory_limit), "--seed", str(args.seed)]
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"length": length, "error": f"exit code {done.returncode}: {tail}"}
    return dict(json.loads(lines[-1]))


def longest(points: list[dict[str, Any]], memory_gib: float) -> tuple[float | None, int | None]:
    """The local exponent (the slope of log peak against log L between the two longest
    measured points: the encoder's L² terms dominate more the longer the source, so this
    is steeper than a fit over all points, and the estimate it gives is the safer one)
    and the longest source whose peak fits in ``memory_gib``, scaled from the longest
    point by that exponent."""
    ok = sorted((p for p in points if "error" not in p and p.get("peak_bytes", 0) > 0),
                key=lambda p: p["length"])
    if len(ok) < 2:
        return None, None
    a, b = ok[-2], ok[-1]
    slope = (math.log(b["peak_bytes"] / a["peak_bytes"])
             / math.log(b["length"] / a["length"]))
    factor = (memory_gib * 2 ** 30 / b["peak_bytes"]) ** (1 / slope)
    return slope, int(b["length"] * factor)


def main(argv: list[str] | None = None) -> None:
    parser = common.script_parser(__doc__)
    parser.add_argument("--lengths", type=common.comma_list, default="1024,2048,4096,8192")
    parser.add_argument("--steps", type=int, default=8, help="decoder steps after encoding")
    parser.add_argument("--memory", type=float, default=24.0,
                        help="GiB: the memory the longest source is solved for")
    parser.add_argument("--memory-limit", type=float, default=12.0,
                        help="GiB of address space for each point's process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", default=None, help="folder for a recorded run")
    parser.add_argument("--point", action="store_true", help=argparse_hidden())
    parser.add_argument("--folder", default=None, help=argparse_hidden())
    parser.add_argument("--length", type=int, default=0, help=argparse_hidden())
    args = parser.parse_args(argv)
    if args.point:
        print(json.dumps(point(args)))
        return
    common.require_at_least(parser, args, ["steps"], 0)
    lengths = [int(n) for n in args.lengths]
    points = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_export(pathlib.Path(tmp), max(lengths) + 16)
        for length in lengths:
            found = run_point(args, folder, length)
            points.append(found)
            if "error" in found:
                print(f"{length:>7,}: fails ({found['error']})")
                break
            print(f"{length:>7,}: {found['peak_bytes'] / 2**20:>9,.0f} MiB, encode "
                  f"{found['encode_seconds']:.2f} s, with {args.steps} steps "
                  f"{found['seconds']:.2f} s", flush=True)
    slope, most = longest(points, args.memory)
    if slope is not None:
        print(f"local exponent {slope:.2f}; longest source in {args.memory:g} GiB: "
              f"{most:,} tokens (extrapolated from the longest point)")
    if args.record:
        data = {"command": common.command_line("bench_export_length", argv),
                "machine": common.machine(),
                "versions": common.package_versions(["numpy", "onnxruntime", "ndonnx"]),
                "config": CONFIG, "steps": args.steps, "points": points,
                "exponent": slope, "memory_gib": args.memory, "longest": most}
        print(f"recorded: {common.record(args.record, 'export-length', data)}")


def argparse_hidden() -> str:
    """The help of an option the script passes to its own child processes."""
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
