"""The same model, initialisation and batches on every backend: speed-ups and agreement.

In float32 and float64, and when asked in bfloat16 mixed precision, through torch.compile
and on a GPU.

Run: ``.venv/bin/python -m scripts.compare_backends`` (about a minute on 2 cores with the
defaults, most of it JAX's compilations; ``--help`` lists the options: model size, batch,
steps, repeats, threads, backends, dtypes, device, precision, compile, toy pairs, output
folder, seed).

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
* ``compile s``: the first call's extra time (first call minus the median of the later
  ones) summed over the four functions above, for the rows that compile: JAX (tracing,
  lowering and XLA compilation) and, with ``--compile``, PyTorch through ``torch.compile``
  (a cold compile: that row starts with an empty Inductor cache);
* ``Δ loss``, ``Δ logits``, ``Δ grads``: the largest difference from the NumPy float64
  reference on the first batch, relative to the reference's largest magnitude
  (``max|a - ref| / max|ref|``; for the gradients the worst parameter array);
* ``loss after N steps``: the loss on the first batch after the N training steps (the
  batches cycle); the PNG plots each step's training loss.

Every time is the median of ``--repeats`` calls after a first (warm-up, compiling) call (the
step's: of steps 2..N), with the outputs waited for (``jax.block_until_ready``; on a CUDA
device ``torch.cuda.synchronize``) before the clock stops. Each is also given as a
**speed-up**: NumPy float64's time divided by this row's, measured in the same run, so that
higher is faster (``2.00×`` is twice as fast as NumPy float64, ``0.50×`` half as fast); when
NumPy float64 was not measured (``--backends`` without numpy, or a GPU) the base is the
first row, and the report names it.

``--device cuda`` (or ``gpu``, ``cuda:1``) places JAX's and PyTorch's arrays on that GPU
(``backends.get(name, device)``; the default is ``cpu``); NumPy and array_api_strict have
the CPU only and are left out with a note. A device that a backend named in
``--backends`` does not have is an error (exit status 2). ``--precision bf16`` adds a row
of bfloat16 mixed precision (``xpseq.core.precision``: float32 parameters and optimiser
state, matrix products and activations in bfloat16, softmax and the loss in float32) for
JAX and PyTorch; NumPy and array_api_strict have no bfloat16, which the report says.
``--compile`` adds rows of PyTorch through ``backends.get("torch", compile=True)`` (the
training step's pieces and the decoder step through ``torch.compile``, and the forward
pass and loss compiled the same way), labelled ``torch (compiled)``. Compiling the
unrolled RNN is slow on a CPU and grows with the sequence length more than with the model's
size: on a busy 2-core machine the float32 row spent 287 s compiling at the default sizes
(batches of src 64 × 16; forward 58 s, gradient 149 s, step 75 s, decode 6 s; it then ran
the step 1.66× as fast as eager torch), 306 s at embed 4, hidden 4 and the same length,
and about 3 minutes on sequences of 8; each dtype compiles again.

``--threads`` (default 1) sets ``torch.set_num_threads`` and, where the environment does not
set them already, ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS``
before NumPy is loaded (NumPy's BLAS); XLA sizes its own CPU thread pool. (On a busy 2-core
machine two OpenBLAS threads made NumPy and array_api_strict several times slower than one.)
The processor (its model name and its AVX-512, AVX512-BF16 and AMX features), the device,
the thread settings and the library versions open the report, and are stored. Outputs in
``--out`` (default ``out/compare_backends``): ``compare_backends.md``,
``compare_backends.json`` (every number, the raw repeats, settings and versions),
``compare_backends.png`` (the loss trajectories and their distance from NumPy float64's;
the timings on a log scale) and ``compare_backends_speedup.png`` (the speed-ups as bars,
the base at 1).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import pathlib
import re
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from . import _common as common
from .benchmarks.comparison import (
    DEFAULT_BACKENDS,
    SPEEDUP_NOTE,
    add_speedups,
    environment,
    environment_lines,
    grads_rel_diff,
    rel_diff,
    results_table,
    row_name,
    write_png,
    write_speedup_png,
)
from .benchmarks.devices import (
    DeviceError,
    cold_compiles,
    device_backend,
    device_name,
    library_device,
    make_sync,
)

if TYPE_CHECKING:  # NumPy is imported after the thread variables are set (main)
    import numpy as np

    from xpseq.backends import Backend
    from xpseq.models.rnn import Seq2SeqConfig

THREAD_VARS = common.BLAS_THREAD_VARS
BUCKET = 8  # batches are padded to multiples of this length
LEARNING_RATE = 1e-3
CLIP_NORM = 5.0
#: The backends with bfloat16 and automatic differentiation (``--precision bf16``).
REDUCED_PRECISION = ("jax", "torch")
PRECISIONS = ("bf16",)
DEVICE = re.compile(r"(cpu|cuda|gpu)(:\d+)?")
# The fields of every row of the JSON file.
ROW_FIELDS = ("backend", "engine", "compiled", "dtype", "precision", "param_dtype", "device",
              "gradients", "forward_ms", "gradient_ms", "step_ms", "decode_ms",
              "compile_total_s", "loss_diff", "logits_diff", "grad_diff", "grad_diff_param",
              "loss", "final_loss", "final_loss_diff", "trajectory", "speedups",
              "repeats_ms", "first_call_s", "compile_s", "step_traces", "compiled_graphs",
              "decode_mismatch", "seconds")


def build_parser() -> argparse.ArgumentParser:
    """The command line (every option with its help; ``--help`` adds the defaults)."""
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
    parser.add_argument("--dtypes", default="float32,float64",
                        help="comma-separated parameter dtypes, each a row per backend: "
                             "float32 and/or float64 (for bfloat16 see --precision)")
    parser.add_argument("--device", default="cpu",
                        help="where JAX and PyTorch compute: cpu, or a GPU: cuda or gpu "
                             "(either name, for both libraries), cuda:N / gpu:N; numpy and "
                             "array_api_strict have the CPU only and are left out on a GPU")
    parser.add_argument("--precision", default=None, choices=PRECISIONS,
                        help="also measure mixed precision: a bf16 row for JAX and PyTorch "
                             "(float32 parameters, bfloat16 matrix products and activations, "
                             "float32 softmax and loss); numpy and array_api_strict have no "
                             "bfloat16 (the report says so)")
    parser.add_argument("--compile", action="store_true",
                        help="also measure PyTorch through torch.compile "
                             "(backends.get('torch', compile=True)): rows 'torch (compiled)', "
                             "their cold compile time in the compile s column; slow: about 5 "
                             "minutes per dtype on a busy 2-core CPU, at the default sizes "
                             "as at tiny ones")
    parser.add_argument("--pairs", type=int, default=2000, help="toy training pairs")
    parser.add_argument("--out", default="out/compare_backends", help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="seeds the data and the init")
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    common.require_at_least(parser, args, ("embed", "hidden", "batch", "repeats", "threads",
                                           "pairs"))
    common.require_at_least(parser, args, ("steps",), 2, "the first step is the warm-up")
    args.dtypes = common.comma_list(args.dtypes)
    bad = [d for d in args.dtypes if d not in ("float32", "float64")]
    if bad or not args.dtypes:
        hint = " (bfloat16: --precision bf16)" if any("bf" in d for d in bad) else ""
        parser.error(f"--dtypes must name float32 and/or float64, got {bad or 'nothing'}"
                     + hint)
    if args.backends is not None:
        args.backends = common.comma_list(args.backends)
        unknown = [b for b in args.backends if b not in DEFAULT_BACKENDS]
        if unknown or not args.backends:
            parser.error(f"--backends: unknown {unknown or 'nothing'}; choose from "
                         f"{','.join(DEFAULT_BACKENDS)}")
        if args.compile and "torch" not in args.backends:
            parser.error("--compile measures torch.compile: --backends must include torch")
    args.device = args.device.strip().lower()
    if not DEVICE.fullmatch(args.device):
        parser.error(f"--device must be cpu, cuda, gpu, cuda:N or gpu:N, got {args.device!r}")
    return args


# -------------------------------------------------------------------- data, model


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row to measure: a backend (maybe compiled), a parameter dtype and a precision."""

    backend: Backend
    dtype: str                          # the parameters' dtype
    precision: str | None = None        # None: compute in ``dtype``; "bf16": mixed

    @property
    def engine(self) -> str:
        pieces = self.backend.capabilities.compile == "pieces"
        return self.backend.name + (" (compiled)" if pieces else "")

    @property
    def label(self) -> str:
        """What the dtype column shows: the dtype, or ``bf16`` for mixed precision."""
        return self.precision or self.dtype


def plan(names: Sequence[str], bes: Mapping[str, Backend], args: argparse.Namespace,
         compiled: Backend | None) -> tuple[list[Variant], list[str]]:
    """The rows to measure, in order (each backend's dtypes, then its bf16 row; the compiled
    torch rows last), and the notes on rows left out."""
    from xpseq.core.precision import Policy
    from xpseq.train.step import training_precision

    variants, notes = [], []
    for be in [bes[n] for n in names] + ([compiled] if compiled is not None else []):
        variants += [Variant(be, dtype) for dtype in args.dtypes]
        if args.precision is None:
            continue
        try:
            training_precision(be, be.gradients, Policy.of(args.precision))
        except ValueError as err:
            notes.append(f"{be.name}: no {args.precision} row: {err}")
            continue
        variants.append(Variant(be, "float32", args.precision))
    return variants, notes


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


def gradient_function(backend: Backend, config: Seq2SeqConfig,
                      precision: str | None = None) -> Callable[[dict, dict], tuple]:
    """``(params, batch) -> (loss, grads)`` the way each backend trains: JAX differentiates
    and jits the whole; compiled torch compiles the loss and differentiates it
    (torch.compile cannot compile through ``torch.autograd.grad``; AOTAutograd compiles the
    backward with the loss), as its training step does; ``precision`` casts the
    parameters on entry (:func:`xpseq.core.precision.cast_params`)."""
    from xpseq.core.precision import cast_params
    from xpseq.models.rnn import loss, loss_and_grad

    if backend.gradients != "autodiff":
        return lambda p, b: loss_and_grad(p, config, b)

    def loss_fn(p: dict, b: dict) -> Any:
        return loss(cast_params(p, precision, xp=backend.xp), config, b, scan=backend.scan)

    return backend.compile_program(backend.value_and_grad(backend.compile_piece(loss_fn)))


def measure(variant: Variant, config: Seq2SeqConfig,
            params64: Mapping[str, np.ndarray], batches: Sequence[Mapping[str, np.ndarray]],
            reference: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One row: timings, compile times, differences from the reference and training."""
    from xpseq.core.optim import adam
    from xpseq.core.precision import Policy, cast_params
    from xpseq.models.rnn import forward
    from xpseq.search import SearchOptions, search
    from xpseq.train import make_train_step

    started = time.perf_counter()
    be, sync = variant.backend, make_sync(variant.backend)
    dtype, precision = variant.dtype, variant.precision
    params = {k: be.asarray(v.astype(dtype), dtype=dtype) for k, v in params64.items()}
    data = [{k: be.asarray(v) for k, v in b.items()} for b in batches]
    first_np, first = batches[0], data[0]

    fwd = be.jit(lambda p, b: forward(cast_params(p, precision, xp=be.xp), config, b["src"],
                                      b["src_len"], b["tgt_in"], scan=be.scan)[0])
    grad_fn = gradient_function(be, config, precision)
    first_s, repeats_s, compile_s = {}, {}, {}

    first_s["forward"], repeats_s["forward"], logits = common.time_calls(
        lambda: fwd(params, first), args.repeats, sync)
    first_s["gradient"], repeats_s["gradient"], (value, grads) = common.time_calls(
        lambda: grad_fn(params, first), args.repeats, sync)
    options = SearchOptions(precision=precision)
    first_s["decode"], repeats_s["decode"], hyp = common.time_calls(
        lambda: search(params, config, first_np["src"], first_np["src_len"], be, options),
        args.repeats, sync)

    optimizer = adam(LEARNING_RATE)
    step = make_train_step(config, optimizer, be, clip_norm=CLIP_NORM,
                           precision=Policy.of(precision))
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
    compiles = be.capabilities.compile != "none"
    grads_np = {k: be.to_numpy(g) for k, g in grads.items()}
    grad_diff, grad_param = grads_rel_diff(grads_np, reference["grads"])
    loss_value = float(be.to_numpy(value))
    if precision is not None:                  # bfloat16 logits: NumPy has no bfloat16
        logits = be.xp.astype(logits, be.xp.float32)
    tokens = hyp.tokens
    mismatch = float((tokens != reference["decode_tokens"]).reshape(tokens.shape[0], -1)
                     .any(axis=1).mean())
    return {
        "backend": be.name, "engine": variant.engine,
        "compiled": be.capabilities.compile == "pieces",
        "dtype": variant.label, "precision": precision, "param_dtype": dtype,
        "device": device_name(be), "gradients": be.gradients,
        "forward_ms": medians_ms["forward"], "gradient_ms": medians_ms["gradient"],
        "step_ms": medians_ms["step"], "decode_ms": medians_ms["decode"],
        "compile_total_s": sum(compile_s.values()) if compiles else None,
        "loss_diff": abs(loss_value - reference["loss"]) / abs(reference["loss"]),
        "logits_diff": rel_diff(be.to_numpy(logits), reference["logits"]),
        "grad_diff": grad_diff, "grad_diff_param": grad_param,
        "loss": loss_value, "final_loss": final_loss, "final_loss_diff": None,
        "trajectory": trajectory, "speedups": {},
        "repeats_ms": {k: [1000 * t for t in v] for k, v in repeats_s.items()},
        "first_call_s": first_s, "compile_s": compile_s if compiles else None,
        "step_traces": step.traces - traces_before, "compiled_graphs": step.graphs,
        "decode_mismatch": mismatch, "seconds": time.perf_counter() - started,
    }


# ------------------------------------------------------------------------ reporting


def choose_backends(args: argparse.Namespace) -> tuple[list[str], dict[str, Backend],
                                                       Backend | None, list[str]]:
    """The backends to measure on ``--device``: their names, the backends, the compiled
    torch backend (``--compile``) and the notes on those left out.

    Raises
    ------
    DeviceError
        A backend named in ``--backends`` lacks the device, or none is left.
    """
    from xpseq import backends

    installed = backends.available()
    explicit = args.backends is not None
    names = list(args.backends) if explicit else [n for n in DEFAULT_BACKENDS if n in installed]
    missing = [n for n in names if n not in installed]
    if missing:
        raise ModuleNotFoundError(f"not installed: {missing}; installed: {installed}")
    notes, bes = [], {}
    for name in names:
        if library_device(name, args.device) is None:
            notes.append(f"{name}: left out (the CPU only; --device {args.device})")
            continue
        try:
            bes[name] = device_backend(name, args.device)
        except DeviceError as err:
            if explicit:
                raise
            notes.append(f"{name}: left out (--device {args.device}: {err})")
    if not bes:
        raise DeviceError("none of the backends has that device: " + "; ".join(notes))
    compiled = None
    if args.compile:
        if "torch" not in bes:
            raise DeviceError("--compile needs the torch backend on that device"
                              + "".join(f"; {n}" for n in notes))
        compiled = device_backend("torch", args.device, compile=True)
    return [n for n in names if n in bes], bes, compiled, notes


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wall = time.perf_counter()
    numpy_was_loaded = "numpy" in sys.modules
    set_here = common.set_blas_threads(args.threads, THREAD_VARS)

    from xpseq import backends
    from xpseq.models.rnn import Seq2SeqConfig, init_params
    from xpseq.search import SearchOptions, search
    from xpseq.tasks import toy_task

    try:
        names, bes, compiled, notes = choose_backends(args)
    except ModuleNotFoundError as err:
        print(err, file=sys.stderr)
        return 2
    except DeviceError as err:
        print(f"compare_backends.py: error: --device {args.device}: {err}", file=sys.stderr)
        return 2
    common.set_torch_threads(args.threads, names)

    env = environment([*bes.values(), *([compiled] if compiled else [])], args.device,
                      set_here, numpy_was_loaded)
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
    variants, precision_notes = plan(names, bes, args, compiled)
    notes += precision_notes
    for note in notes:
        print(f"note: {note}")

    reference = numpy_reference(config, params64, batches[0])
    numpy_be = backends.get("numpy")
    ref_params = {k: numpy_be.asarray(v, dtype="float64") for k, v in params64.items()}
    reference["decode_tokens"] = search(ref_params, config, batches[0]["src"],
                                        batches[0]["src_len"], numpy_be, SearchOptions()).tokens

    rows = []
    for variant in variants:
        # JAX's 64-bit mode for the float64 rows only: float32 runs with JAX's defaults.
        with cold_compiles(variant.backend), common.jax_x64_for(variant.dtype):
            row = measure(variant, config, params64, batches, reference, args)
        rows.append(row)
        compile_note = ("" if row["compile_total_s"] is None
                        else f" ({row['compile_total_s']:.1f} s compiling)")
        print(f"  {row_name(row)}: {row['seconds']:.1f} s{compile_note}", flush=True)
    base = add_speedups(rows)
    table = results_table(rows, args.steps, base, notes)
    total = time.perf_counter() - wall
    env["load_average_end"] = common.load_average()

    out = common.output_dir(pathlib.Path.cwd() / args.out)
    title = f"xpseq compare_backends: {setting}"
    md = "\n".join([f"# {title}", "", *(f"- {line}" for line in environment_lines(env)),
                    f"- total {total:.1f} s", "", table, "",
                    f"![speed-up vs {base} (higher is faster)](compare_backends_speedup.png)",
                    "", "![losses and timings](compare_backends.png)", ""])
    settings = dict(vars(args))
    settings.update(bucket=BUCKET, learning_rate=LEARNING_RATE, clip_norm=CLIP_NORM,
                    optimizer="adam", decode="greedy", batch_shape=[list(s) for s in shape],
                    n_batches=len(batches), n_params=int(n_params),
                    config=config.to_dict(), reference="numpy float64", speedup_base=base,
                    speedup_label=SPEEDUP_NOTE.format(base=base))
    result = {"settings": settings, "environment": env, "reference_loss": reference["loss"],
              "notes": notes, "rows": [{k: r[k] for k in ROW_FIELDS} for r in rows],
              "total_seconds": total}
    common.write_report(out, "compare_backends", md, result, indent=1)
    write_png(rows, out / "compare_backends.png", title)
    write_speedup_png(rows, out / "compare_backends_speedup.png", base, title)
    print()
    print(table)
    print(f"\nwrote {out / 'compare_backends.md'}, .json, .png and _speedup.png; total "
          f"{total:.1f} s; load average at end "
          + " ".join(f"{x:.2f}" for x in env["load_average_end"] or []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
