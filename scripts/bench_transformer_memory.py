"""Peak memory of one Transformer loss gradient against sequence length, for each way xpseq
differentiates it: JAX's and PyTorch's own autodiff (with the blockwise attention's
hand-derived rule attached through ``backend.custom_vjp``, as training does by default, and
without it, differentiating through the blockwise loops), PyTorch's autodiff of the loss
compiled by ``torch.compile`` (``torch-compile``: the rule attached, the loss compiled as
the training step compiles it, ``backends.get("torch", compile=True)``'s
``compile_piece``) and the hand-derived backward (``loss_and_grad``, how NumPy trains), on
the plain and the blockwise attention paths.

Run: ``python -m scripts.bench_transformer_memory [--lengths 1024,2048,4096] [--record
benchmarks/transformer-memory]``. The model: ``TransformerConfig(d_model=64, heads=4,
encoder_layers=1, decoder_layers=1, d_ff=128, attention=PATH, attention_block=512)``,
batch 1, source and target of L tokens, float32. Each point runs in a fresh process
limited to ``--memory-limit`` GiB of address space; its peak is the growth of the peak
resident set (``VmHWM``, reset through ``/proc/self/clear_refs``) over the first gradient,
the inputs made and JAX's program compiled before it (``torch.compile`` compiles on its
first call: there the second gradient is measured). Each point's process runs with glibc's
mmap threshold fixed at 128 KiB (``MALLOC_MMAP_THRESHOLD_``, unless it is set; recorded
with the run): a freed array of that size or more goes back to the system, so the
measured call cannot run on memory an earlier call freed (the second gradient under
``torch.compile`` would otherwise reuse the first's). The exponents are least-squares
slopes of log(peak) against log(L) from 2,048 tokens on. Threads: ``--threads`` for every
library (default 1).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

from . import _common as common
from .bench_long_attention import peak_rss, reset_peak

#: engine: how the gradient is taken (``-rule``: the blockwise attention's hand-derived
#: rule attached through backend.custom_vjp; ``-traced``: autodiff through its loops).
ENGINES = ("jax-rule", "jax-traced", "torch-rule", "torch-traced", "torch-compile",
           "hand-derived")
PATHS = ("plain", "blockwise")
#: glibc's mmap threshold for each point's process, unless the caller set one (bytes).
MMAP_THRESHOLD = str(128 * 1024)


def make_call(engine: str, path: str, length: int, seed: int) -> Callable[[], Any]:
    """One loss gradient of the model at ``length`` tokens, ready to call."""
    import numpy as np

    from xpseq import backends, models

    T = models.get("transformer")
    config = T.Config(src_vocab=64, tgt_vocab=64, d_model=64, heads=4, encoder_layers=1,
                      decoder_layers=1, d_ff=128, attention=path, attention_block=512,
                      max_len=length)
    rng = np.random.default_rng(seed)
    batch = {"src": rng.integers(3, 64, (1, length)), "src_len": np.array([length]),
             "tgt_in": rng.integers(3, 64, (1, length)),
             "tgt_out": rng.integers(3, 64, (1, length))}
    params = {k: v.astype(np.float32) for k, v in T.init_params(config, seed).items()}
    if engine == "hand-derived":
        return lambda: T.loss_and_grad(params, config, batch)
    name, how = engine.split("-")
    be = backends.get(name, compile=how == "compile")
    rule = be.custom_vjp if how in ("rule", "compile") else None

    def loss(p: Any, b: Any) -> Any:
        return T.kernels.loss(p, config, b, None, scan=be.scan, custom_vjp=rule, xp=be.xp)

    p, b = be.asarray_tree(params), be.asarray_tree(batch)
    if name == "jax":
        import jax

        compiled = jax.jit(jax.value_and_grad(loss)).lower(p, b).compile()
        return lambda: jax.block_until_ready(compiled(p, b))
    grad = be.value_and_grad(be.compile_piece(loss))
    if how == "compile":
        grad(p, b)                                   # torch.compile compiles on this call
    return lambda: grad(p, b)


def point(args: Any) -> dict[str, Any]:
    """One (engine, path, length) in this process."""
    limit = int(args.memory_limit * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    common.pin_threads(args.threads, pin=True)
    result: dict[str, Any] = {"engine": args.engine, "path": args.path, "length": args.length}
    try:
        call = make_call(args.engine, args.path, args.length, args.seed)
        rss, _ = peak_rss()
        reset_peak()
        start = time.perf_counter()
        call()
        result["seconds"] = time.perf_counter() - start
        result["peak_bytes"] = peak_rss()[1] - rss
    except (MemoryError, RuntimeError, ValueError) as error:     # RuntimeError: torch, XLA
        result["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return result


def mmap_threshold() -> str:
    """glibc's mmap threshold for each point's process: the caller's, else
    :data:`MMAP_THRESHOLD`."""
    return os.environ.get("MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD)


def run_point(args: Any, engine: str, path: str, length: int) -> dict[str, Any]:
    """One point in a child process (a crash is a failure of that point)."""
    command = [sys.executable, "-m", __spec__.name, "--point", "--engine", engine, "--path", path,
               "--length", str(length), "--threads", str(args.threads),
               "--memory-limit", str(args.memory_limit), "--seed", str(args.seed)]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": mmap_threshold()}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"engine": engine, "path": path, "length": length,
                "error": f"exit code {done.returncode}: {tail}"}
    return dict(json.loads(lines[-1]))


def exponent(points: list[dict[str, Any]]) -> float | None:
    """The least-squares slope of log(peak) against log(length) from 2,048 tokens on."""
    pts = [(math.log(p["length"]), math.log(p["peak_bytes"])) for p in points
           if "error" not in p and p["length"] >= 2048 and p.get("peak_bytes", 0) > 0]
    if len(pts) < 2:
        return None
    mx, my = statistics.fmean(x for x, _ in pts), statistics.fmean(y for _, y in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def report(points: list[dict[str, Any]], engines: list[str], paths: list[str]) -> str:
    """MiB and seconds per length (rows) and engine/path (columns), and the exponents."""
    lengths = sorted({p["length"] for p in points})
    columns = [(e, p) for e in engines for p in paths]
    by = {(p["engine"], p["path"], p["length"]): p for p in points}

    def cell(key: tuple[str, str, int]) -> str:
        p = by.get(key)
        if p is None:
            return ""
        if "error" in p:
            return "fails"
        return f"{p['peak_bytes'] / 2**20:,.0f} MiB, {p['seconds']:.1f} s"

    rows = [[f"{n:,}", *(cell((e, p, n)) for e, p in columns)] for n in lengths]
    slopes = []
    for e, p in columns:
        found = exponent([q for q in points if q["engine"] == e and q["path"] == p])
        slopes.append("" if found is None else f"{found:.2f}")
    rows.append(["exponent", *slopes])
    return common.markdown_table(["L", *(f"{e}, {p}" for e, p in columns)], rows)


def main(argv: list[str] | None = None) -> None:
    parser = common.script_parser(__doc__)
    parser.add_argument("--lengths", type=common.comma_list, default="1024,2048,4096")
    parser.add_argument("--engines", type=common.comma_list, default=",".join(ENGINES))
    parser.add_argument("--paths", type=common.comma_list, default=",".join(PATHS))
    parser.add_argument("--memory-limit", type=float, default=20.0,
                        help="GiB of address space per point")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", help="folder to keep the run in (benchmarks/...)")
    common.add_threads_option(parser, help="threads of every library (torch, XLA, BLAS)")
    parser.add_argument("--point", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.point:
        print(json.dumps(point(args)), flush=True)
        return
    for name in args.engines:
        if name not in ENGINES:
            parser.error(f"--engines: unknown {name!r}; choose from {', '.join(ENGINES)}")
    points = []
    for engine in args.engines:
        for path in args.paths:
            for length in (int(n) for n in args.lengths):
                result = run_point(args, engine, path, length)
                points.append(result)
                shown = result.get("error") or (f"{result['peak_bytes'] / 2**20:9.1f} MiB "
                                                f"{result['seconds']:7.1f} s")
                print(f"{engine:13s} {path:9s} {length:6d}  {shown}", flush=True)
                if "error" in result:
                    break
    text = report(points, list(args.engines), list(args.paths))
    print(text)
    if args.record:
        data = {"command": common.command_line("bench_transformer_memory", argv),
                "machine": common.machine(),
                "versions": common.package_versions(["numpy", "jax", "jaxlib", "torch"]),
                "threads": args.threads, "points": points, "table": text,
                "malloc": {"MALLOC_MMAP_THRESHOLD_": mmap_threshold()}}
        print(f"recorded: {common.record(args.record, 'transformer-memory', data)}")


if __name__ == "__main__":
    main()
