"""Peak memory and time of attention against sequence length: the plain path (the whole
``(Q, K)`` scores), the blockwise path (:func:`xpseq.core.blockwise_attention`) on each
library, and the libraries' own kernels (``torch.nn.functional.scaled_dot_product_attention``,
``jax.nn.dot_product_attention``).

Run: ``python -m scripts.bench_long_attention [--lengths 256,...,65536] [--record
benchmarks/long-attention]``. Self-attention, batch 1, 4 heads, depth 64, float32, no mask;
``forward`` times the context, ``backward`` the context and the gradients of ``sum(context
* g)`` with respect to q, k and v (the blockwise path's hand-derived rule, attached as a
``jax.custom_vjp`` and a ``torch.autograd.Function``; NumPy runs the rule itself; the plain
path and the peers by automatic differentiation, NumPy's by the hand-derived rules of the
plain path). JAX's functions are jitted and compiled before the clock starts. On PyTorch
the blockwise path is ``blockwise.hand_derived_attention``, which delegates to PyTorch's
fused kernel where it computes the same function in linear memory
(:func:`xpseq.core.delegation.fused_blockwise_attention`: here, unmasked, always), so
``torch-blockwise`` against ``torch-sdpa`` measures what xpseq adds around that kernel.

Each point runs in a fresh process limited to ``--memory-limit`` GiB of address space (an
allocation beyond it fails there, cleanly, instead of waking the kernel's out-of-memory
killer); its peak memory is the growth of the process's peak resident set over the call
(``VmHWM`` reset before it through ``/proc/self/clear_refs``) during the first call, the
inputs already made (later calls would reuse memory the first freed to the allocator). A
path stops at its first failure. Up to ``--warm-up`` tokens that first call is not timed;
the time is the median of up to ``--repeats`` later calls (above it, of the first call
and later ones), fewer when they would take more than ``--budget`` seconds, but at least
one timed call: the longest lengths are one call each, which the results say. JAX's
functions are compiled before the first call.

The ratios to a library's own kernel come from calls taken in turns: where both paths of a
pair (``jax-blockwise`` and ``jax-dpa``, ``torch-blockwise`` and ``torch-sdpa``) ran a length
in under ``--pair-below`` seconds a call, one more process makes both calls and alternates
them (each called once first, untimed; then up to ``--repeats`` calls each, within
``--budget`` seconds for the two), so that a shared machine's load falls on both alike; its
medians give the ratio. Longer calls are compared from their separate points.

Threads: ``--threads`` (default 2, this machine's cores) for every library: torch's
intra-op pool, NumPy's BLAS and XLA's process affinity. glibc's allocator settings
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) are recorded with the run.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

from . import _common as common

PATHS = ("numpy-plain", "numpy-blockwise", "torch-plain", "torch-blockwise", "torch-sdpa",
         "jax-plain", "jax-blockwise", "jax-dpa")
MODES = ("forward", "backward")
LENGTHS = tuple(256 * 2 ** i for i in range(9))               # 256 .. 65,536
HEADS, DEPTH = 4, 64
#: glibc's allocator settings, recorded with each run (they change how fast a loop that
#: allocates and frees blocks of a few MiB runs: the benchmarks page says how).
MALLOC_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


# ------------------------------------------------------------------ one point, in a child


def peak_rss() -> tuple[int, int]:
    """``(VmRSS, VmHWM)`` of this process in bytes."""
    fields = {}
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def reset_peak() -> None:
    """Make ``VmHWM`` start again from the current resident set."""
    pathlib.Path("/proc/self/clear_refs").write_text("5")


def make_call(path: str, mode: str, length: int, block: int, seed: int) -> Callable[[], Any]:
    """The function timed at one point: returns its result, synchronised."""
    import numpy as np

    import xpseq.core as C
    from xpseq import backends
    from xpseq.core import blockwise, vjp

    rng = np.random.default_rng(seed)
    q, k, v, g = (rng.standard_normal((1, HEADS, length, DEPTH)).astype(np.float32)
                  for _ in range(4))
    library, kind = path.split("-")
    scale = 1.0 / math.sqrt(DEPTH)
    backward = mode == "backward"

    if library == "numpy":
        xp = backends.get("numpy").xp
        if kind == "blockwise":
            if not backward:
                return lambda: C.blockwise_attention(q, k, v, block_q=block, block_k=block)[0]

            def numpy_blockwise() -> Any:
                out, bp = vjp.blockwise_attention(q, k, v, blockwise.BlockMask(), scale,
                                                  block, block, xp=xp)
                return bp(g)
            return numpy_blockwise
        if not backward:
            return lambda: C.scaled_dot_product_attention(q, k, v, need_weights=False)[0]

        def numpy_plain() -> Any:
            s, score_bp = vjp.dot_scores(q, k, scale, xp=xp)
            (out, _), attend_bp = vjp.attend(s, v, None, xp=xp)
            ds, dv, _ = attend_bp(g)
            return (*score_bp(ds), dv)
        return numpy_plain

    if library == "torch":
        import torch
        import torch.nn.functional as F

        tq, tk, tv, tg = (torch.from_numpy(x).requires_grad_(backward) for x in (q, k, v, g))
        be = backends.get("torch")
        attention: Callable[..., Any]
        if kind == "blockwise":
            fn = blockwise.hand_derived_attention(causal=False, scale=scale, block_q=block,
                                                  block_k=block, custom_vjp=be.custom_vjp,
                                                  xp=be.xp)
            attention = lambda a, b, c: fn(a, b, c, None, None)  # noqa: E731
        elif kind == "sdpa":
            attention = F.scaled_dot_product_attention
        else:   # the generic body: need_weights=True keeps the core off the fused kernel
            attention = lambda a, b, c: C.scaled_dot_product_attention(  # noqa: E731
                a, b, c, need_weights=True)[0]
        if not backward:
            def torch_forward() -> Any:
                with torch.no_grad():
                    return attention(tq, tk, tv)
            return torch_forward

        def torch_backward() -> Any:
            return torch.autograd.grad((attention(tq, tk, tv) * tg).sum(), (tq, tk, tv))
        return torch_backward

    import jax
    import jax.numpy as jnp

    jq, jk, jv, jg = (jnp.asarray(x) for x in (q, k, v, g))
    be = backends.get("jax")
    if kind == "blockwise":
        fn = blockwise.hand_derived_attention(causal=False, scale=scale, block_q=block,
                                              block_k=block, custom_vjp=be.custom_vjp, xp=be.xp)
        attention = lambda a, b, c: fn(a, b, c, None, None)  # noqa: E731
    elif kind == "dpa":            # (B, T, N, d) layout
        def attention(a: Any, b: Any, c: Any) -> Any:
            t = (0, 2, 1, 3)
            return jnp.transpose(jax.nn.dot_product_attention(
                *(jnp.transpose(x, t) for x in (a, b, c))), t)
    else:
        attention = lambda a, b, c: C.scaled_dot_product_attention(  # noqa: E731
            a, b, c, need_weights=False)[0]
    if backward:
        compiled = jax.jit(jax.grad(lambda a, b, c: jnp.sum(attention(a, b, c) * jg),
                                    argnums=(0, 1, 2))).lower(jq, jk, jv).compile()
    else:
        compiled = jax.jit(attention).lower(jq, jk, jv).compile()
    return lambda: jax.block_until_ready(compiled(jq, jk, jv))


#: What a point that cannot run raises (RuntimeError: torch's and XLA's allocation failures).
FAILURES = (MemoryError, RuntimeError, ValueError)


def failure(error: BaseException) -> str:
    """A point's failure in one line."""
    return f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"


def seconds_of(call: Callable[[], Any]) -> float:
    """The wall-clock seconds of one ``call()``."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def paired_point(args: Any) -> dict[str, Any]:
    """Time ``--path`` and ``--pair`` at one (mode, length) in turns in this process: each
    called once untimed, then alternately up to ``--repeats`` calls each while the calls
    so far take at most ``--budget`` seconds (at least one each)."""
    result: dict[str, Any] = {"paths": [args.path, args.pair], "mode": args.mode,
                              "length": args.length, "block": args.block}
    try:
        calls = [make_call(path, args.mode, args.length, args.block, args.seed)
                 for path in (args.path, args.pair)]
        for call in calls:
            call()
        seconds: list[list[float]] = [[], []]
        while len(seconds[0]) < args.repeats and (not seconds[0] or
                                                  sum(map(sum, seconds)) <= args.budget):
            for call, taken in zip(calls, seconds):
                taken.append(seconds_of(call))
    except FAILURES as error:
        return {**result, "error": failure(error)}
    result.update(seconds=seconds, medians=[statistics.median(t) for t in seconds])
    return result


def point(args: Any) -> dict[str, Any]:
    """Time one (path, mode, length) in this process; the result as a dict."""
    limit = int(args.memory_limit * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    common.pin_threads(args.threads, pin=True)
    if args.pair:
        return paired_point(args)
    result: dict[str, Any] = {"path": args.path, "mode": args.mode, "length": args.length,
                              "block": args.block}
    try:
        call = make_call(args.path, args.mode, args.length, args.block, args.seed)
        rss, _ = peak_rss()
        reset_peak()
        start = time.perf_counter()
        out = call()
        first = time.perf_counter() - start
        peak = peak_rss()[1] - rss      # the first call's: later ones reuse freed memory
        del out
        seconds = [] if args.length <= args.warm_up else [first]
        while len(seconds) < args.repeats and (not seconds or
                                               sum(seconds) + first <= args.budget):
            seconds.append(seconds_of(call))
    except FAILURES as error:
        return {**result, "error": failure(error)}
    result.update(seconds=seconds, median=statistics.median(seconds), peak_bytes=peak)
    return result


# ----------------------------------------------------------------- the sweep, in the parent


def run_point(args: Any, path: str, mode: str, length: int, block: int,
              pair: str | None = None) -> dict[str, Any]:
    """One point (with ``pair``: two paths in turns) in a child process (a crash is a
    failure of that point)."""
    command = [sys.executable, "-m", __spec__.name, "--point", "--path", path, "--mode", mode,
               "--length", str(length), "--block", str(block), "--repeats", str(args.repeats),
               "--budget", str(args.budget), "--threads", str(args.threads),
               "--memory-limit", str(args.memory_limit), "--seed", str(args.seed),
               "--warm-up", str(args.warm_up), *(["--pair", pair] if pair else [])]
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        where = {"paths": [path, pair]} if pair else {"path": path}
        return {**where, "mode": mode, "length": length, "block": block,
                "error": f"exit code {done.returncode}: {tail}"}
    return dict(json.loads(lines[-1]))


def exponent(points: list[dict[str, Any]], key: str) -> float | None:
    """The least-squares slope of log(key) against log(length) over the points from 2,048
    on (below, fixed costs dominate), or ``None`` with fewer than two."""
    pts = [(math.log(p["length"]), math.log(p[key])) for p in points
           if "error" not in p and p["length"] >= 2048 and p.get(key, 0) > 0]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    return (sum((x - mx) * (y - my) for x, y in pts)
            / sum((x - mx) ** 2 for x, _ in pts))


def sweep(args: Any) -> dict[str, Any]:
    """Every path and mode over the lengths, each path stopping at its first failure or once
    a call would take more than ``--max-seconds`` (its time times 4.5 per doubling). The
    paths take turns at each length, so that a shared machine's load falls on the paths a
    ratio compares at about the same time."""
    results: list[dict[str, Any]] = []
    for mode in args.modes:
        last: dict[str, dict[str, Any]] = {}
        stopped: set[str] = set()
        for length in args.lengths:
            for path in args.paths:
                if path in stopped:
                    continue
                prev = last.get(path)
                if prev is not None and "median" in prev and \
                        prev["median"] * 4.5 > args.max_seconds:
                    results.append({"path": path, "mode": mode, "length": length,
                                    "skipped": f"would take over {args.max_seconds:.0f} s"})
                    stopped.add(path)
                    continue
                point = last[path] = run_point(args, path, mode, length, args.block)
                results.append(point)
                shown = (point.get("error") or
                         f"{point['median'] * 1e3:10.1f} ms  "
                         f"{point['peak_bytes'] / 2**20:9.1f} MiB  ({len(point['seconds'])} calls)")
                print(f"{mode:8s} {path:16s} {length:6d}  {shown}", flush=True)
                if "error" in point:
                    stopped.add(path)
    return {"points": results}


def finished(points: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """The points that ran (those with a median), by ``(mode, path, length)``."""
    return {(p["mode"], p["path"], p["length"]): p for p in points if "median" in p}


def pairs(args: Any, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pair of :data:`OWN_KERNELS` in turns (:func:`paired_point`) at the modes and
    lengths where both of its points ran in under ``--pair-below`` seconds a call."""
    at = finished(points)
    rows = []
    for mode in args.modes:
        for ours, theirs in OWN_KERNELS:
            for length in args.lengths:
                a, b = at.get((mode, ours, length)), at.get((mode, theirs, length))
                if a is None or b is None or max(a["median"], b["median"]) > args.pair_below:
                    continue
                r = run_point(args, ours, mode, length, args.block, pair=theirs)
                rows.append(r)
                shown = r.get("error") or (
                    f"{r['medians'][0] * 1e3:10.1f} ms against {r['medians'][1] * 1e3:.1f} ms: "
                    f"{r['medians'][0] / r['medians'][1]:.2f}  ({len(r['seconds'][0])} calls each)")
                print(f"in turns {mode:8s} {ours}/{theirs} {length:6d}  {shown}", flush=True)
    return rows


def ratio_of(run: dict[str, Any], mode: str, ours: str, theirs: str,
             length: int) -> tuple[float, bool] | None:
    """``(time of ours ÷ time of theirs, whether taken in turns)`` at one mode and length:
    from the run's calls in turns where there are some, else from the separate points;
    ``None`` where either did not run."""
    for r in run.get("pairs") or []:
        if (r["paths"] == [ours, theirs] and r["mode"] == mode and r["length"] == length
                and "medians" in r):
            return r["medians"][0] / r["medians"][1], True
    at = finished(run["points"])
    a, b = at.get((mode, ours, length)), at.get((mode, theirs, length))
    return None if a is None or b is None else (a["median"] / b["median"], False)


def block_sweep(args: Any) -> list[dict[str, Any]]:
    """The blockwise path at ``--block-length`` for each of ``--blocks``: what the default
    block size is chosen by."""
    rows = []
    for mode in args.modes:
        for path in (p for p in args.paths if p.endswith("blockwise")):
            for block in args.blocks:
                r = run_point(args, path, mode, args.block_length, block)
                rows.append(r)
                shown = r.get("error") or f"{r['median'] * 1e3:9.1f} ms"
                print(f"blocks {mode:8s} {path:16s} {block:5d}  {shown}", flush=True)
    return rows


def table(points: list[dict[str, Any]], mode: str, paths: list[str]) -> str:
    """Milliseconds and MiB per length (columns: paths) for one mode, as markdown."""
    lengths = sorted({p["length"] for p in points if p["mode"] == mode})
    at = {(p["path"], p["length"]): p for p in points if p["mode"] == mode}
    rows = []
    for length in lengths:
        cells = []
        for path in paths:
            p = at.get((path, length))
            if p is None:
                cells.append("")
            elif "error" in p:
                cells.append("fails")
            elif "skipped" in p:
                cells.append("not run")
            else:
                cells.append(f"{p['median'] * 1e3:,.0f} ms / {p['peak_bytes'] / 2**20:,.0f} MiB")
        rows.append([f"{length:,}", *cells])
    return common.markdown_table(["length", *paths], rows)


# ------------------------------------------------------------------------------ page
#
# Its part of the benchmarks page (``scripts.bench_page`` assembles the page): the newest
# recorded run's tables, fitted exponents and ratios in the block "long-attention" (and the
# newest run with glibc's allocator settings changed in "long-attention-malloc"), and the
# first one's curves in a chart.

#: The paths' names on the page, in its columns' order.
PATH_LABELS = {"numpy-plain": "NumPy, plain", "numpy-blockwise": "NumPy, blockwise",
              "torch-plain": "PyTorch, plain", "torch-blockwise": "PyTorch, blockwise",
              "torch-sdpa": "PyTorch's SDPA", "jax-plain": "JAX, plain",
              "jax-blockwise": "JAX, blockwise", "jax-dpa": "jax.nn.dot_product_attention"}
OWN_KERNELS = (("jax-blockwise", "jax-dpa"), ("torch-blockwise", "torch-sdpa"))


def newest_run(folder: pathlib.Path) -> dict[str, Any] | None:
    """The newest recorded run of ``folder`` (by name), with ``file`` added; ``None`` if
    there is none."""
    files = sorted(folder.glob("*.json"))
    if not files:
        return None
    data = json.loads(files[-1].read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "points" not in data:
        raise ValueError(f"{files[-1]}: not a results file of scripts/bench_long_attention.py")
    data["file"] = files[-1].name
    return data


def page_block(run: dict[str, Any]) -> str:
    """The run's tables (time and peak memory by length, forward and backward), fitted
    exponents, longest lengths and ratios to the libraries' own kernels."""
    points = [p for p in run["points"] if "median" in p]
    at = finished(points)
    paths = [p for p in PATH_LABELS if any(q["path"] == p for q in run["points"])]
    lines = [f"Run `{run['file']}`: {common.machine_text(run['machine'])}; "
             f"{common.versions_text(run['versions'])}; {run['threads']} threads; batch 1, "
             f"{run['heads']} heads, depth {run['depth']}, {run['dtype']}, self-attention, "
             f"blocks of {run['block']}"
             + "".join(f"; {name}={value}" for name, value in (run.get("malloc") or {}).items()
                       if value is not None)
             + f". `{run['command']}`", ""]
    for mode in ("forward", "backward"):
        lines += [f"**{mode}** (time / peak memory; a blank: failed or not run)", ""]
        lengths = sorted({p["length"] for p in points if p["mode"] == mode})
        rows = []
        for n in lengths:
            cells = []
            for path in paths:
                p = at.get((mode, path, n))
                cells.append("" if p is None else
                             f"{p['median']:.3g} s / {p['peak_bytes'] / 2**20:,.0f} MiB")
            rows.append([f"{n:,}", *cells])
        lines += [common.markdown_table(["length", *(PATH_LABELS[p] for p in paths)], rows), ""]
    rows = []
    for path in paths:
        cells = [PATH_LABELS[path]]
        for mode in ("forward", "backward"):
            fit = run["exponents"].get(f"{mode} {path}", {})
            cells += ["-" if fit.get(k) is None else f"{fit[k]:.2f}"
                      for k in ("median", "peak_bytes")]
            longest = run["longest"].get(f"{mode} {path}")
            cells.append("-" if longest is None else f"{longest:,}")
        rows.append(cells)
    lines += ["**Exponents** of time and memory against length (least squares from 2,048 "
              "tokens on) and the longest length each path ran:", "",
              common.markdown_table(["path", "forward time", "forward memory",
                                     "forward longest", "backward time", "backward memory",
                                     "backward longest"], rows), ""]
    rows = []
    for n in sorted({p["length"] for p in points}):
        cells = []
        for ours, theirs in OWN_KERNELS:
            for mode in ("forward", "backward"):
                r = ratio_of(run, mode, ours, theirs, n)
                cells.append("" if r is None else f"{r[0]:.2f}" + ("" if r[1] else "*"))
        if any(cells):
            rows.append([f"{n:,}", *cells])
    turns = ("calls taken in turns in one process; * from the separate points above"
             if run.get("pairs") else "from the separate points above")
    lines += [f"**Ratios**, time of xpseq's blockwise path ÷ the library's own kernel (below "
              f"1: xpseq faster; {turns}):", "",
              common.markdown_table(["length", "JAX forward", "JAX backward",
                                     "PyTorch forward", "PyTorch backward"], rows)]
    sweep = run.get("block_sweep") or []
    if sweep:
        columns = sorted({(p["mode"], p["path"]) for p in sweep},
                         key=lambda c: (c[0] != "forward", list(PATH_LABELS).index(c[1])))
        found = {(p["mode"], p["path"], p["block"]): p for p in sweep if "median" in p}
        rows = [[f"{b:,}", *("" if (m, p, b) not in found else
                             f"{found[(m, p, b)]['median']:.3g} s" for m, p in columns)]
                for b in sorted({p["block"] for p in sweep})]
        length = sweep[0]["length"]
        lines += ["", f"**Block sizes** at {length:,} tokens, time per call (what the default "
                  "block size is chosen by):", "",
                  common.markdown_table(["block", *(f"{PATH_LABELS[p]}, {m}" for m, p in columns)],
                                        rows)]
    return "\n".join(lines)


def draw_page_chart(run: dict[str, Any], path: pathlib.Path) -> None:
    """Time and peak memory against length, forward and backward, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    for col, mode in enumerate(("forward", "backward")):
        for path_name, label in PATH_LABELS.items():
            pts = sorted((p["length"], p["median"], p["peak_bytes"]) for p in run["points"]
                         if p["mode"] == mode and p["path"] == path_name and "median" in p)
            if not pts:
                continue
            # colour: the library; line: plain (dashed), blockwise (solid), own (dotted)
            style = "-" if "blockwise" in path_name else ("--" if "plain" in path_name
                                                          else ":")
            colour = {"numpy": "#1f77b4", "torch": "#d62728", "jax": "#2ca02c"}[
                path_name.split("-")[0]]
            n, t, m = zip(*pts)
            axes[0][col].plot(n, t, style, color=colour, marker="o", markersize=3, label=label)
            axes[1][col].plot(n, [b / 2**20 for b in m], style, color=colour, marker="o",
                              markersize=3, label=label)
        axes[0][col].set_title(f"{mode}: seconds per call")
        axes[1][col].set_title(f"{mode}: peak memory (MiB)")
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.3)
        axes[1][col].set_xlabel("sequence length (queries = keys)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Attention against length: {run['file']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": "xpseq scripts/bench_page.py"})
    plt.close(fig)


def page_options(parser: argparse.ArgumentParser, root: pathlib.Path) -> None:
    """The folders of its recorded runs and the chart's path."""
    parser.add_argument("--long-attention", default=str(root / "benchmarks" / "long-attention"),
                        help="the folder of scripts/bench_long_attention.py's recorded runs")
    parser.add_argument("--long-attention-malloc",
                        default=str(root / "benchmarks" / "long-attention-malloc"),
                        help="its runs with glibc's allocator settings changed")
    parser.add_argument("--long-chart",
                        default=str(root / "docs" / "_static" / "long_attention.png"))


def page_section(args: argparse.Namespace) -> common.PageSection | None:
    """The blocks ``long-attention`` and ``long-attention-malloc``, each from the newest run
    of its folder (a page may lack them), and the first one's chart."""
    runs = {"long-attention": newest_run(pathlib.Path(args.long_attention)),
            "long-attention-malloc": newest_run(pathlib.Path(args.long_attention_malloc))}
    found = {name: run for name, run in runs.items() if run is not None}
    if not found:
        return None
    first = runs["long-attention"]
    return common.PageSection(
        source="scripts.bench_long_attention", runs=len(found),
        page={name: page_block(run) for name, run in found.items()}, optional=True,
        quotes="\n".join(json.dumps(run) for run in found.values()),
        charts=[] if first is None else [(lambda path: draw_page_chart(first, path),
                                          pathlib.Path(args.long_chart))])


def main(argv: list[str] | None = None) -> int:
    parser = common.script_parser(__doc__)
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--block", type=int, default=None,
                        help="blockwise block size (default: xpseq's DEFAULT_BLOCK)")
    parser.add_argument("--blocks", default="",
                        help="also sweep these block sizes at --block-length (e.g. 64,128,256,512)")
    parser.add_argument("--block-length", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=20.0,
                        help="stop repeating a point after this many seconds")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="do not start a point expected to take longer")
    parser.add_argument("--warm-up", type=int, default=8192,
                        help="an untimed first call at lengths up to this")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--memory-limit", type=float, default=20.0, help="GiB per point")
    parser.add_argument("--pair-below", type=float, default=10.0,
                        help="time a path and the library's own kernel in turns where both "
                             "take under this many seconds a call (0: never)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", metavar="DIR",
                        help="also write the results as DIR/<time>-<cpu>-long-attention.json")
    parser.add_argument("--point", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pair", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.block is None:
        from xpseq.core.blockwise import DEFAULT_BLOCK
        args.block = DEFAULT_BLOCK
    if args.point:
        print(json.dumps(point(args)))
        return 0
    args.paths = common.comma_list(args.paths)
    args.modes = common.comma_list(args.modes)
    args.lengths = [int(n) for n in common.comma_list(args.lengths)]
    args.blocks = [int(n) for n in common.comma_list(args.blocks)] if args.blocks else []
    unknown = sorted(set(args.paths) - set(PATHS)) + sorted(set(args.modes) - set(MODES))
    if unknown:
        parser.error(f"unknown path or mode: {', '.join(unknown)}")
    machine = common.machine()
    versions = common.package_versions(("xpseq", "numpy", "torch", "jax", "jaxlib"))
    print(f"machine: {common.machine_text()}; {common.versions_text(versions)}; "
          f"threads {args.threads}; {common.settings_text(common.env_vars(MALLOC_VARS))}",
          flush=True)
    blocks = block_sweep(args) if args.blocks else []
    data = sweep(args)
    points = data["points"]
    in_turns = pairs(args, points)
    exponents = {f"{mode} {path}": {key: exponent([p for p in points if p["path"] == path
                                                    and p["mode"] == mode], key)
                                    for key in ("median", "peak_bytes")}
                 for mode in args.modes for path in args.paths}
    longest = {f"{mode} {path}": max((p["length"] for p in points if p["path"] == path
                                      and p["mode"] == mode and "median" in p), default=None)
               for mode in args.modes for path in args.paths}
    tables = {mode: table(points, mode, args.paths) for mode in args.modes}
    for mode in args.modes:
        print(f"\n{mode}\n{tables[mode]}")
    print("\nexponents (time, memory) from 2,048 on:")
    for name, fit in exponents.items():
        shown = ", ".join("-" if e is None else f"{e:.2f}" for e in fit.values())
        print(f"  {name:26s} {shown}   longest {longest[name]}")
    if args.record:
        path = common.record(args.record, "long-attention", {
            "command": common.command_line("bench_long_attention", argv),
            "machine": machine, "versions": versions, "threads": args.threads,
            "heads": HEADS, "depth": DEPTH, "dtype": "float32", "block": args.block,
            "memory_limit_gib": args.memory_limit,
            "malloc": common.env_vars(MALLOC_VARS), "block_sweep": blocks, "points": points,
            "pairs": in_turns,
            "exponents": exponents, "longest": longest, "tables": tables})
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
