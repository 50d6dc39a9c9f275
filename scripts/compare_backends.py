"""The same model, initialisation and batches on every backend, in float32 and float64.

Run: ``.venv/bin/python scripts/compare_backends.py`` (about a minute on 2 cores with the
defaults, most of it JAX's compilations; ``--help`` lists the options: model size, batch,
steps, repeats, threads, backends, dtypes, toy pairs, output folder, seed).

The demo's attention model (bi-LSTM encoder, LSTM decoder, Luong "general" attention with
input feeding) is initialised once in float64 by ``init_params`` and cast to each dtype; the
batches are the toy task's (``--pairs`` pairs, padded to multiples of 8), keeping the full
batches of the most common shape so that JAX compiles each function once. For every
installed backend (``--backends``) and dtype (``--dtypes``) it measures:

* ``forward ms``: teacher-forced logits (``forward``; ``jax.jit`` on JAX);
* ``gradient ms``: the loss and its gradient: ``jax.value_and_grad`` under ``jax.jit``,
  torch's autograd tape, and on NumPy and array_api_strict the hand-derived backward pass
  (``loss_and_grad``);
* ``step ms``: one training step (``make_train_step``: gradient, clipping to norm 5, Adam
  1e-3), the median of steps 2..N of the ``--steps`` training steps;
* ``decode ms``: greedy search on the first batch's sources;
* ``JAX compile s``: the first call's extra time (first call minus the median of the later
  ones: tracing, lowering and XLA compilation) summed over the four functions above;
* ``Δ loss``, ``Δ logits``, ``Δ grads``: the largest difference from the NumPy float64
  reference on the first batch, relative to the reference's largest magnitude
  (``max|a - ref| / max|ref|``; for the gradients the worst parameter array);
* ``loss after N steps``: the loss on the first batch after the N training steps (the
  batches cycle); the PNG plots each step's training loss.

Every time is the median of ``--repeats`` calls after a first (warm-up, compiling) call (the
step's: of steps 2..N), with JAX outputs waited for (``jax.block_until_ready``) before the
clock stops; each is also printed as a ratio to NumPy float64's in the same run (to the
fastest row when NumPy float64 was not measured). ``--threads`` (default 1) sets
``torch.set_num_threads`` and, where the environment does not set them already,
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` before NumPy is loaded
(NumPy's BLAS); XLA sizes its own CPU thread pool. (On a busy 2-core machine two OpenBLAS
threads made NumPy and array_api_strict several times slower than one.) The thread settings,
versions and CPU count are printed and stored. Outputs in ``--out`` (default
``out/compare_backends``): ``compare_backends.md``, ``compare_backends.json`` (every number,
the raw repeats, settings and versions) and ``compare_backends.png`` (the loss trajectories
and their distance from NumPy float64's; the timings on a log scale).
"""

from __future__ import annotations

import argparse
import collections
import math
import pathlib
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # scripts/: _common
import _common as common  # noqa: E402

if TYPE_CHECKING:  # NumPy is imported after the thread variables are set (main)
    import numpy as np

    from xpseq.backends import Backend
    from xpseq.models.rnn import Seq2SeqConfig

THREAD_VARS = common.BLAS_THREAD_VARS
BUCKET = 8  # batches are padded to multiples of this length
LEARNING_RATE = 1e-3
CLIP_NORM = 5.0
DEFAULT_BACKENDS = ("numpy", "jax", "torch", "array_api_strict")
TIMINGS = (("forward_ms", "forward ms"), ("gradient_ms", "gradient ms"),
           ("step_ms", "step ms"), ("decode_ms", "decode ms"))
DIFFS = (("loss_diff", "Δ loss"), ("logits_diff", "Δ logits"), ("grad_diff", "Δ grads"))
# The fields of every row of the JSON file.
ROW_FIELDS = ("backend", "dtype", "gradients", "forward_ms", "gradient_ms", "step_ms",
              "decode_ms", "jax_compile_s", "loss_diff", "logits_diff", "grad_diff",
              "grad_diff_param", "loss", "final_loss", "final_loss_diff", "trajectory", "ratios",
              "repeats_ms", "first_call_s", "compile_s", "step_traces", "decode_mismatch",
              "seconds")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.script_parser(__doc__, show_defaults=True)
    parser.add_argument("--embed", type=int, default=32, help="embedding size")
    parser.add_argument("--hidden", type=int, default=64, help="units per encoder direction")
    parser.add_argument("--batch", type=int, default=64, help="sentences per batch")
    parser.add_argument("--steps", type=int, default=20, help="training steps (at least 2)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per figure")
    common.add_threads_option(parser, help="torch threads and (unless set) OMP/OpenBLAS/MKL "
                                           "threads")
    parser.add_argument("--backends", default=None,
                        help="comma-separated; default: every installed one of "
                             + ",".join(DEFAULT_BACKENDS))
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--pairs", type=int, default=2000, help="toy training pairs")
    parser.add_argument("--out", default="out/compare_backends", help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="seeds the data and the init")
    args = parser.parse_args(argv)
    common.require_at_least(parser, args, ("embed", "hidden", "batch", "repeats", "threads",
                                           "pairs"))
    common.require_at_least(parser, args, ("steps",), 2, "the first step is the warm-up")
    args.dtypes = common.comma_list(args.dtypes)
    bad = [d for d in args.dtypes if d not in ("float32", "float64")]
    if bad or not args.dtypes:
        parser.error(f"--dtypes must name float32 and/or float64, got {bad or 'nothing'}")
    if args.backends is not None:
        args.backends = common.comma_list(args.backends)
        unknown = [b for b in args.backends if b not in DEFAULT_BACKENDS]
        if unknown or not args.backends:
            parser.error(f"--backends: unknown {unknown or 'nothing'}; choose from "
                         f"{','.join(DEFAULT_BACKENDS)}")
    return args


# --------------------------------------------------------------------------- timing


def make_sync(backend: Backend) -> Callable[[Any], Any]:
    """Wait for a backend's results: JAX dispatches asynchronously, the others do not."""
    if backend.name == "jax":
        import jax

        return jax.block_until_ready
    return lambda tree: tree


# ------------------------------------------------------------------- differences


def rel_diff(actual: Any, reference: Any) -> float:
    """``max|a - ref| / max|ref|`` in float64 (the absolute difference if ``ref`` is 0)."""
    import numpy as np

    a = np.asarray(actual, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    diff = float(np.max(np.abs(a - ref))) if ref.size else 0.0
    return diff / scale if scale > 0 else diff


def grads_rel_diff(grads: Mapping[str, Any], reference: Mapping[str, Any]) -> tuple[float, str]:
    """The worst :func:`rel_diff` over the parameter arrays, and that array's name."""
    return max(((rel_diff(grads[k], reference[k]), k) for k in reference),
               key=lambda item: item[0])


# -------------------------------------------------------------------- data, model


def pick_batches(task: Any, batch_size: int) -> list[dict[str, np.ndarray]]:
    """The full batches of the most common (source, target) shape, without ``index``."""
    batches = [b for b in task.batches(task.train, batch_size, BUCKET)
               if b["src"].shape[0] == batch_size]
    if not batches:
        raise SystemExit(f"no full batch of {batch_size}: raise --pairs or lower --batch")
    shapes = collections.Counter((b["src"].shape, b["tgt_in"].shape) for b in batches)
    most = shapes.most_common(1)[0][0]
    return [{k: b[k] for k in common.BATCH_KEYS} for b in batches
            if (b["src"].shape, b["tgt_in"].shape) == most]


def numpy_reference(config: Seq2SeqConfig, params64: Mapping[str, np.ndarray],
                    batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """NumPy float64 logits, loss and hand-derived gradients on ``batch``."""
    from xpseq import backends
    from xpseq.models.rnn import forward, loss_and_grad

    be = backends.get("numpy")
    params = {k: be.asarray(v, dtype="float64") for k, v in params64.items()}
    b = {k: be.asarray(v) for k, v in batch.items()}
    logits, _ = forward(params, config, b["src"], b["src_len"], b["tgt_in"], scan=be.scan)
    value, grads = loss_and_grad(params, config, b)
    return {"logits": be.to_numpy(logits), "loss": float(be.to_numpy(value)),
            "grads": {k: be.to_numpy(g) for k, g in grads.items()}}


def gradient_function(backend: Backend, config: Seq2SeqConfig) -> Callable[[dict, dict], tuple]:
    """``(params, batch) -> (loss, grads)`` the way each backend trains."""
    from xpseq.models.rnn import loss, loss_and_grad

    if backend.gradients == "autodiff":
        fn = backend.value_and_grad(lambda p, b: loss(p, config, b, scan=backend.scan))
        return backend.jit(fn)
    return lambda p, b: loss_and_grad(p, config, b)


def measure(backend: Backend, dtype: str, config: Seq2SeqConfig,
            params64: Mapping[str, np.ndarray], batches: Sequence[Mapping[str, np.ndarray]],
            reference: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One row: timings, compile times, differences from the reference and training."""
    from xpseq.core.optim import adam
    from xpseq.models.rnn import forward
    from xpseq.search import SearchOptions, search
    from xpseq.train import make_train_step

    started = time.perf_counter()
    be, sync = backend, make_sync(backend)
    params = {k: be.asarray(v.astype(dtype), dtype=dtype) for k, v in params64.items()}
    data = [{k: be.asarray(v) for k, v in b.items()} for b in batches]
    first_np, first = batches[0], data[0]

    fwd = be.jit(lambda p, b: forward(p, config, b["src"], b["src_len"], b["tgt_in"],
                                      scan=be.scan)[0])
    grad_fn = gradient_function(be, config)
    first_s, repeats_s, compile_s = {}, {}, {}

    first_s["forward"], repeats_s["forward"], logits = common.time_calls(
        lambda: fwd(params, first), args.repeats, sync)
    first_s["gradient"], repeats_s["gradient"], (value, grads) = common.time_calls(
        lambda: grad_fn(params, first), args.repeats, sync)
    options = SearchOptions()
    first_s["decode"], repeats_s["decode"], hyp = common.time_calls(
        lambda: search(params, config, first_np["src"], first_np["src_len"], be, options),
        args.repeats, sync)

    optimizer = adam(LEARNING_RATE)
    step = make_train_step(config, optimizer, be, clip_norm=CLIP_NORM)
    traces_before = step.traces
    state, opt_state = params, optimizer.init(params)
    step_s, trajectory = [], []
    for i in range(args.steps):
        start = time.perf_counter()
        state, opt_state, step_loss = sync(step(state, opt_state, data[i % len(data)]))
        step_s.append(time.perf_counter() - start)
        trajectory.append(float(be.to_numpy(step_loss)))
    first_s["step"], repeats_s["step"] = step_s[0], step_s[1:]
    final_loss = float(be.to_numpy(sync(grad_fn(state, first))[0]))

    medians_ms = {k: 1000 * statistics.median(v) for k, v in repeats_s.items()}
    for k in first_s:
        compile_s[k] = max(first_s[k] - medians_ms[k] / 1000, 0.0)
    grads_np = {k: be.to_numpy(g) for k, g in grads.items()}
    grad_diff, grad_param = grads_rel_diff(grads_np, reference["grads"])
    loss_value = float(be.to_numpy(value))
    tokens = hyp.tokens
    mismatch = float((tokens != reference["decode_tokens"]).reshape(tokens.shape[0], -1)
                     .any(axis=1).mean())
    return {
        "backend": be.name, "dtype": dtype, "gradients": be.gradients,
        "forward_ms": medians_ms["forward"], "gradient_ms": medians_ms["gradient"],
        "step_ms": medians_ms["step"], "decode_ms": medians_ms["decode"],
        "jax_compile_s": sum(compile_s.values()) if be.compiles else None,
        "loss_diff": abs(loss_value - reference["loss"]) / abs(reference["loss"]),
        "logits_diff": rel_diff(be.to_numpy(logits), reference["logits"]),
        "grad_diff": grad_diff, "grad_diff_param": grad_param,
        "loss": loss_value, "final_loss": final_loss, "final_loss_diff": None,
        "trajectory": trajectory, "ratios": {},
        "repeats_ms": {k: [1000 * t for t in v] for k, v in repeats_s.items()},
        "first_call_s": first_s, "compile_s": compile_s if be.compiles else None,
        "step_traces": step.traces - traces_before, "decode_mismatch": mismatch,
        "seconds": time.perf_counter() - started,
    }


def add_ratios(rows: list[dict[str, Any]]) -> str:
    """Fill each row's ``ratios`` (timing / base) and ``final_loss_diff``; return the base."""
    base_row = next((r for r in rows if r["backend"] == "numpy" and r["dtype"] == "float64"),
                    None)
    for key, _ in TIMINGS:
        base = base_row[key] if base_row else min(r[key] for r in rows)
        for r in rows:
            r["ratios"][key] = r[key] / base if base > 0 else math.inf
    if base_row is not None:
        for r in rows:
            r["final_loss_diff"] = (abs(r["final_loss"] - base_row["final_loss"])
                                    / abs(base_row["final_loss"]))
    return "numpy float64" if base_row else "the fastest row of each column"


# ------------------------------------------------------------------------ reporting


def environment(names: Sequence[str],
                set_here: Mapping[str, str], numpy_was_loaded: bool) -> dict[str, Any]:
    """Versions, CPU count, thread settings and load: what the numbers depend on."""
    versions = common.package_versions(("xpseq", "numpy", "jax", "jaxlib", "torch",
                                        "array-api-strict", "array-api-compat", "matplotlib"))
    threads: dict[str, Any] = common.env_vars(THREAD_VARS)
    threads["set_by_script"] = sorted(set_here)
    threads["numpy_loaded_before_setting"] = numpy_was_loaded
    threads.update(common.env_vars(("XLA_FLAGS",)))
    if "torch" in names:
        import torch

        threads["torch.get_num_threads"] = torch.get_num_threads()
        threads["torch.get_num_interop_threads"] = torch.get_num_interop_threads()
    if "jax" in names:
        import jax

        threads["jax.devices"] = [str(d) for d in jax.devices()]
    return {"versions": versions, "threads": threads, **common.machine(),
            "load_average_start": common.load_average()}


def environment_lines(env: Mapping[str, Any]) -> list[str]:
    threads = env["threads"]
    versions = common.versions_text(env["versions"])
    thread_vars = common.settings_text({v: threads[v] for v in THREAD_VARS})
    if threads["set_by_script"]:
        thread_vars += f" (set by --threads: {', '.join(threads['set_by_script'])})"
    if threads["numpy_loaded_before_setting"]:
        thread_vars += " (NumPy was loaded before: its BLAS threads are as they were then)"
    lines = [f"CPU: {common.machine_text(env)}; load average at start "
             + " ".join(f"{x:.2f}" for x in env["load_average_start"] or []),
             f"threads: {thread_vars}"]
    if "torch.get_num_threads" in threads:
        lines.append(f"torch.get_num_threads() = {threads['torch.get_num_threads']}, "
                     f"interop {threads['torch.get_num_interop_threads']}")
    if "jax.devices" in threads:
        lines.append(f"jax.devices() = {threads['jax.devices']}; XLA_FLAGS="
                     f"{threads['XLA_FLAGS'] or 'unset'} (XLA sizes its own CPU thread pool)")
    lines.append(f"versions: {versions}")
    lines.append(f"platform: {env['platform']}")
    if env.get("load_average_end"):
        lines.append("load average at end " + " ".join(f"{x:.2f}" for x in env["load_average_end"]))
    return lines


def _ms(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _diff(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}"


def markdown_table(rows: Sequence[Mapping[str, Any]], steps: int, base: str) -> str:
    headers = ["backend", "dtype", "gradients", *(label for _, label in TIMINGS),
               "JAX compile s", *(label for _, label in DIFFS), f"loss after {steps} steps"]
    table = []
    for r in rows:
        cells = [r["backend"], r["dtype"], r["gradients"]]
        cells += [f"{_ms(r[k])} ({r['ratios'][k]:.2f}×)" for k, _ in TIMINGS]
        cells.append("–" if r["jax_compile_s"] is None else f"{r['jax_compile_s']:.2f}")
        cells += [_diff(r[k]) for k, _ in DIFFS]
        cells.append(f"{r['final_loss']:.8f}")
        table.append(cells)
    lines = [common.markdown_table(headers, table), ""]
    compiles = [f"{r['backend']} {r['dtype']} " + " / ".join(f"{r['compile_s'][k]:.2f}" for k in
                                              ("forward", "gradient", "step", "decode"))
                for r in rows if r["compile_s"] is not None]
    if compiles:
        lines.append("JAX compile s (forward / gradient / step / decode): "
                     + "; ".join(compiles) + ".")
    lines.append(f"Times are medians of the repeats; (×) is the ratio to {base} in this run. "
                 "Δ is max|a − ref| / max|ref| against NumPy float64 on the first batch (Δ grads: "
                 "the worst parameter array).")
    return "\n".join(lines)


def write_png(rows: Sequence[Mapping[str, Any]], path: pathlib.Path, title: str) -> None:
    """Loss trajectories (top left), their distance from NumPy float64's (bottom left) and
    the timings (right, log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig = plt.figure(figsize=(14, 6.5))
    grid = fig.add_gridspec(2, 2, height_ratios=(3, 2))
    top, bottom, right = (fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0]),
                          fig.add_subplot(grid[:, 1]))
    colours = {name: f"C{i}" for i, name in enumerate(DEFAULT_BACKENDS)}
    reference = next((r["trajectory"] for r in rows
                      if r["backend"] == "numpy" and r["dtype"] == "float64"), None)
    floor = 1e-18
    for r in rows:
        style = {"color": colours.get(r["backend"], "k"), "alpha": 0.8,
                 "linestyle": "-" if r["dtype"] == "float64" else "--",
                 "linewidth": 2.5 if r["dtype"] == "float64" else 1.2,
                 "label": f"{r['backend']} {r['dtype']}"}
        steps = range(1, len(r["trajectory"]) + 1)
        top.plot(steps, r["trajectory"], **style)
        if reference is not None:
            gaps = [max(abs(a - b) / abs(b), floor) for a, b in zip(r["trajectory"], reference)]
            bottom.plot(steps, gaps, marker="o", markersize=3, **style)
    top.set_ylabel("training loss")
    top.set_title("loss at each step, before its update (same init, same batches)")
    top.legend(fontsize=8, ncol=2)
    bottom.set_yscale("log")
    bottom.set_xlabel("training step")
    bottom.set_ylabel(f"|loss - ref| / ref\n(0 drawn at {floor:g})")
    if reference is None:
        bottom.set_title("no NumPy float64 row to compare with")
    for axis in (top, bottom):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    width = 0.8 / max(len(rows), 1)
    for i, r in enumerate(rows):
        xs = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(TIMINGS))]
        right.bar(xs, [r[k] for k, _ in TIMINGS], width, color=colours.get(r["backend"], "k"),
                  alpha=1.0 if r["dtype"] == "float64" else 0.5,
                  hatch="" if r["dtype"] == "float64" else "//",
                  label=f"{r['backend']} {r['dtype']}")
    right.set_xticks(range(len(TIMINGS)), [label for _, label in TIMINGS])
    right.set_yscale("log")
    right.set_ylabel("ms (median of the repeats; log scale)")
    right.set_title("timings (JAX: after compilation)")
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wall = time.perf_counter()
    numpy_was_loaded = "numpy" in sys.modules
    set_here = common.set_blas_threads(args.threads, THREAD_VARS)

    from xpseq import backends
    from xpseq.models.rnn import Seq2SeqConfig, init_params
    from xpseq.search import SearchOptions, search
    from xpseq.tasks import toy_task

    installed = backends.available()
    if args.backends is None:
        names = [n for n in DEFAULT_BACKENDS if n in installed]
    else:
        missing = [n for n in args.backends if n not in installed]
        if missing:
            print(f"not installed: {missing}; installed: {installed}", file=sys.stderr)
            return 2
        names = args.backends
    common.set_torch_threads(args.threads, names)

    env = environment(names, set_here, numpy_was_loaded)
    for line in environment_lines(env):
        print(line)

    task = toy_task(n_train=args.pairs, n_dev=10, n_test_per_bucket=1, seed=args.seed)
    batches = pick_batches(task, args.batch)
    config = Seq2SeqConfig(len(task.src_vocab), len(task.tgt_vocab), embed=args.embed,
                           hidden=args.hidden)
    params64 = init_params(config, args.seed)
    n_params = sum(v.size for v in params64.values())
    shape = (batches[0]["src"].shape, batches[0]["tgt_in"].shape)
    setting = (f"embed {args.embed}, hidden {args.hidden} ({n_params} parameters), "
               f"{len(batches)} batches of src {shape[0]} / tgt {shape[1]} from {args.pairs} "
               f"toy pairs, {args.steps} steps, {args.repeats} repeats, seed {args.seed}")
    print(f"model and data: {setting}")

    reference = numpy_reference(config, params64, batches[0])
    numpy_be = backends.get("numpy")
    ref_params = {k: numpy_be.asarray(v, dtype="float64") for k, v in params64.items()}
    reference["decode_tokens"] = search(ref_params, config, batches[0]["src"],
                                        batches[0]["src_len"], numpy_be, SearchOptions()).tokens

    rows = []
    for name in names:
        be = backends.get(name)
        for dtype in args.dtypes:
            row = measure(be, dtype, config, params64, batches, reference, args)
            rows.append(row)
            print(f"  {name} {dtype}: {row['seconds']:.1f} s", flush=True)
    base = add_ratios(rows)
    table = markdown_table(rows, args.steps, base)
    total = time.perf_counter() - wall
    env["load_average_end"] = common.load_average()

    out = common.output_dir(pathlib.Path.cwd() / args.out)
    title = f"xpseq compare_backends: {setting}"
    md = "\n".join([f"# {title}", "", *(f"- {line}" for line in environment_lines(env)),
                    f"- total {total:.1f} s", "", table, ""])
    settings = dict(vars(args))
    settings.update(bucket=BUCKET, learning_rate=LEARNING_RATE, clip_norm=CLIP_NORM,
                    optimizer="adam", decode="greedy", batch_shape=[list(s) for s in shape],
                    n_batches=len(batches), n_params=int(n_params),
                    config=config.to_dict(), reference="numpy float64", ratio_base=base)
    result = {"settings": settings, "environment": env, "reference_loss": reference["loss"],
              "rows": [{k: r[k] for k in ROW_FIELDS} for r in rows], "total_seconds": total}
    common.write_report(out, "compare_backends", md, result, indent=1)
    write_png(rows, out / "compare_backends.png", title)
    print()
    print(table)
    print(f"\nwrote {out / 'compare_backends.md'}, .json and .png; total {total:.1f} s; "
          + "load average at end " + " ".join(f"{x:.2f}" for x in env["load_average_end"] or []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
