"""The same model, initialisation and batches on every backend: speed-ups and agreement.

In float32 and float64, and when asked in bfloat16 mixed precision, through torch.compile
and on a GPU.

Run: ``.venv/bin/python scripts/compare_backends.py`` (about a minute on 2 cores with the
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
import contextlib
import dataclasses
import math
import pathlib
import re
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

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
#: The backends with the CPU only (left out, with a note, on a GPU).
CPU_ONLY = ("numpy", "array_api_strict")
#: The backends with bfloat16 and automatic differentiation (``--precision bf16``).
REDUCED_PRECISION = ("jax", "torch")
PRECISIONS = ("bf16",)
DEVICE = re.compile(r"(cpu|cuda|gpu)(:\d+)?")
TIMINGS = (("forward_ms", "forward ms"), ("gradient_ms", "gradient ms"),
           ("step_ms", "step ms"), ("decode_ms", "decode ms"))
DIFFS = (("loss_diff", "Δ loss"), ("logits_diff", "Δ logits"), ("grad_diff", "Δ grads"))
#: How the speed-up is labelled in the table, the JSON (``speedup_label``) and the plot.
SPEEDUP_NOTE = ("speed-up = {base}'s time / this row's time, measured in this run: higher "
                "is faster (2.00× is twice as fast as {base}, 0.50× half as fast)")
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


# --------------------------------------------------------------------------- devices


def library_device(name: str, device: str) -> str | None:
    """``device`` (``--device``: cpu, cuda[:N] or gpu[:N]) as backend ``name`` spells it
    for ``backends.get``: torch's ``cuda:N``, JAX's ``gpu:N``; None where the backend has
    the CPU only and ``device`` is a GPU."""
    kind, colon, index = device.partition(":")
    if kind == "cpu":
        return "cpu"
    if name == "torch":
        return "cuda" + colon + index
    if name == "jax":
        return "gpu" + colon + index
    return None


class DeviceError(Exception):
    """A backend asked for has not got the ``--device`` asked for."""


def device_backend(name: str, device: str, compile: bool = False) -> Backend:
    """``backends.get(name, device, compile=compile)``, its device resolved (JAX resolves
    its device on first use, so this asks for it now).

    Raises
    ------
    DeviceError
        The library does not see that device (the message says what it sees).
    """
    from xpseq import backends

    try:
        be = backends.get(name, library_device(name, device), compile=compile)
        if name == "jax":
            be.device  # noqa: B018  (JAX resolves its device when first asked)
        elif name == "torch" and be.device.type == "cuda":
            import torch

            count = torch.cuda.device_count()
            if (be.device.index or 0) >= count:
                raise ValueError(f"this PyTorch sees {count} CUDA device(s)")
    except ValueError as err:
        raise DeviceError(f"{name}: {err}") from None
    return be


def device_name(be: Backend) -> str:
    """The device a backend computes on, as its library names it, with a GPU's model."""
    if be.name in CPU_ONLY:
        return "cpu"
    device = be.device
    if be.name == "torch" and device.type == "cuda":
        import torch

        return f"{device} ({torch.cuda.get_device_name(device)})"
    if be.name == "jax" and device.platform != "cpu":
        return f"{device} ({getattr(device, 'device_kind', device.platform)})"
    return str(device)


# --------------------------------------------------------------------------- timing


def make_sync(backend: Backend) -> Callable[[Any], Any]:
    """Wait for a backend's results: JAX dispatches asynchronously, and so does PyTorch on
    a CUDA device; on the CPU PyTorch, NumPy and array_api_strict return finished arrays."""
    if backend.name == "jax":
        import jax

        return jax.block_until_ready
    if backend.name == "torch" and backend.device.type == "cuda":
        import torch

        def sync(tree: Any) -> Any:
            torch.cuda.synchronize(backend.device)
            return tree

        return sync
    return lambda tree: tree


@contextlib.contextmanager
def cold_compiles(backend: Backend) -> Iterator[None]:
    """For a compiled torch backend, a new, empty Inductor cache folder
    (``torch._inductor.utils.fresh_cache``), so that its compile time is a cold compile's
    and not a load of an earlier run's kernels; nothing for the other backends.

    (Inductor's ``force_disable_caches`` would be colder still, but it also compiles each
    of the unrolled RNN's many identical kernels again: at this script's tiny test sizes
    that took over 20 minutes on a loaded 2-core machine.)"""
    if backend.capabilities.compile != "pieces":
        yield
        return
    from torch._inductor.utils import fresh_cache

    with fresh_cache():
        yield


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


def is_reference(row: Mapping[str, Any]) -> bool:
    """NumPy float64's row: the reference of the differences and the speed-ups' base."""
    return row["engine"] == "numpy" and row["dtype"] == "float64"


def row_name(row: Mapping[str, Any]) -> str:
    return f"{row['engine']} {row['dtype']}"


def add_speedups(rows: list[dict[str, Any]]) -> str:
    """Fill each row's ``speedups`` (base time / this row's time: higher is faster) and
    ``final_loss_diff``; return the base's name (NumPy float64, else the first row)."""
    reference = next((r for r in rows if is_reference(r)), None)
    base_row = reference or rows[0]
    for key, _ in TIMINGS:
        for r in rows:
            r["speedups"][key] = base_row[key] / r[key] if r[key] > 0 else math.inf
    if reference is not None:
        for r in rows:
            r["final_loss_diff"] = (abs(r["final_loss"] - reference["final_loss"])
                                    / abs(reference["final_loss"]))
    return row_name(base_row)


# ------------------------------------------------------------------------ reporting


def environment(bes: Sequence[Backend], device: str,
                set_here: Mapping[str, str], numpy_was_loaded: bool) -> dict[str, Any]:
    """The processor, versions, devices, thread settings and load: what the numbers
    depend on."""
    names = {be.name for be in bes}
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
    devices = {be.name: device_name(be) for be in bes}
    return {"versions": versions, "threads": threads, **common.machine(),
            "device": device, "devices": devices,
            "load_average_start": common.load_average()}


def environment_lines(env: Mapping[str, Any]) -> list[str]:
    threads = env["threads"]
    versions = common.versions_text(env["versions"])
    thread_vars = common.settings_text({v: threads[v] for v in THREAD_VARS})
    if threads["set_by_script"]:
        thread_vars += f" (set by --threads: {', '.join(threads['set_by_script'])})"
    if threads["numpy_loaded_before_setting"]:
        thread_vars += " (NumPy was loaded before: its BLAS threads are as they were then)"
    devices = ", ".join(f"{name} {where}" for name, where in env["devices"].items())
    lines = [f"processor: {common.machine_text(env)}; load average at start "
             + " ".join(f"{x:.2f}" for x in env["load_average_start"] or []),
             f"versions: {versions}",
             f"device: --device {env['device']} ({devices})",
             f"threads: {thread_vars}"]
    if "torch.get_num_threads" in threads:
        lines.append(f"torch.get_num_threads() = {threads['torch.get_num_threads']}, "
                     f"interop {threads['torch.get_num_interop_threads']}")
    if "jax.devices" in threads:
        lines.append(f"jax.devices() = {threads['jax.devices']}; XLA_FLAGS="
                     f"{threads['XLA_FLAGS'] or 'unset'} (XLA sizes its own CPU thread pool)")
    lines.append(f"platform: {env['platform']}")
    if env.get("load_average_end"):
        lines.append("load average at end " + " ".join(f"{x:.2f}" for x in env["load_average_end"]))
    return lines


def _ms(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _diff(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}"


def _speedup(value: float) -> str:
    return f"{value:.2f}×" if value < 100 else f"{value:.0f}×"


def timing_header(label: str) -> str:
    """``step ms (speed-up)``: a timing column's header (its cells ``time (speed-up×)``)."""
    return f"{label} (speed-up)"


def results_table(rows: Sequence[Mapping[str, Any]], steps: int, base: str,
                   notes: Sequence[str] = ()) -> str:
    headers = ["backend", "dtype", "gradients", *(timing_header(label) for _, label in TIMINGS),
               "compile s", *(label for _, label in DIFFS), f"loss after {steps} steps"]
    table = []
    for r in rows:
        cells = [r["engine"], r["dtype"], r["gradients"]]
        cells += [f"{_ms(r[k])} ({_speedup(r['speedups'][k])})" for k, _ in TIMINGS]
        cells.append("–" if r["compile_total_s"] is None else f"{r['compile_total_s']:.2f}")
        cells += [_diff(r[k]) for k, _ in DIFFS]
        cells.append(f"{r['final_loss']:.8f}")
        table.append(cells)
    lines = [common.markdown_table(headers, table), ""]
    compiles = [f"{row_name(r)} " + " / ".join(f"{r['compile_s'][k]:.2f}" for k in
                                             ("forward", "gradient", "step", "decode"))
                for r in rows if r["compile_s"] is not None]
    if compiles:
        lines.append("compile s (forward / gradient / step / decode; JAX: jax.jit, torch "
                     "(compiled): torch.compile, cold): " + "; ".join(compiles) + ".")
    lines.append(f"Times in ms are medians of the repeats; the {SPEEDUP_NOTE.format(base=base)}. "
                 "Δ is max|a − ref| / max|ref| against NumPy float64 on the first batch (Δ "
                 "grads: the worst parameter array); bf16 is mixed precision (float32 "
                 "parameters, bfloat16 matrix products and activations).")
    lines += [f"Note: {note}" for note in notes]
    return "\n".join(lines)


def _colours(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    engines = list(DEFAULT_BACKENDS) + [r["engine"] for r in rows]
    return {name: f"C{i}" for i, name in enumerate(dict.fromkeys(engines))}


def _style(row: Mapping[str, Any]) -> dict[str, Any]:
    """Line and bar styles by dtype: float64 solid, float32 dashed, bf16 dotted."""
    return {"float64": {"linestyle": "-", "linewidth": 2.5, "alpha": 1.0, "hatch": ""},
            "float32": {"linestyle": "--", "linewidth": 1.2, "alpha": 0.6, "hatch": "//"},
            }.get(row["dtype"], {"linestyle": ":", "linewidth": 1.5, "alpha": 0.4,
                                 "hatch": ".."})


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
    colours = _colours(rows)
    reference = next((r["trajectory"] for r in rows if is_reference(r)), None)
    floor = 1e-18
    for r in rows:
        s = _style(r)
        style = {"color": colours[r["engine"]], "alpha": 0.8, "linestyle": s["linestyle"],
                 "linewidth": s["linewidth"], "label": row_name(r)}
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
        s = _style(r)
        xs = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(TIMINGS))]
        right.bar(xs, [r[k] for k, _ in TIMINGS], width, color=colours[r["engine"]],
                  alpha=s["alpha"], hatch=s["hatch"], label=row_name(r))
    right.set_xticks(range(len(TIMINGS)), [label for _, label in TIMINGS])
    right.set_yscale("log")
    right.set_ylabel("ms (median of the repeats; log scale)")
    right.set_title("timings (lower is faster; JAX and torch (compiled): after compilation)")
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_speedup_png(rows: Sequence[Mapping[str, Any]], path: pathlib.Path, base: str,
                      title: str) -> None:
    """The speed-ups as horizontal bars, one panel per timing (the step's first), one bar per
    row drawn from the base's 1× (a line) to its value: to the right faster, to the left
    slower; log scale, each bar labelled with its value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    order = sorted(TIMINGS, key=lambda t: t[0] != "step_ms")
    fig, axes = plt.subplots(1, len(order), figsize=(4 * len(order), 2.4 + 0.4 * len(rows)),
                             sharey=True, squeeze=False)
    colours = _colours(rows)
    names = [row_name(r) for r in rows]
    values = [r["speedups"][k] for r in rows for k, _ in order]
    low, high = min(min(values), 1.0), max(max(values), 1.0)
    for axis, (key, label) in zip(axes[0], order):
        ys = range(len(rows))
        for y, r in zip(ys, rows):
            s = _style(r)
            value = r["speedups"][key]
            # From the base's 1× to the value: right is faster, left slower.
            axis.barh(y, value - 1.0, left=1.0, color=colours[r["engine"]], alpha=s["alpha"],
                      hatch=s["hatch"], edgecolor="k", linewidth=0.5)
            axis.text(value, y, f" {_speedup(value)}", va="center", fontsize=8)
        axis.axvline(1.0, color="k", linewidth=1)
        axis.set_xscale("log")
        axis.set_xlim(low / 1.5, high * 2.5)
        axis.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        axis.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        axis.set_title(f"{label}: speed-up", fontsize=10)
        axis.set_xlabel(f"× vs {base} (log; higher is faster)", fontsize=8)
    axes[0][0].set_yticks(range(len(rows)), names, fontsize=8)
    axes[0][0].invert_yaxis()
    fig.suptitle(f"speed-up vs {base} = its time / the row's (1× = as fast; higher is faster)"
                 f"\n{title}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
