"""Benchmarks of xpseq: every figure a ratio to a reference measured in the same run.

Run: ``python scripts/bench.py`` (or ``make bench``), about 2 minutes on 2 cores with the
defaults; ``--only train,beam,sdpa,flops,compile`` picks sections, ``--threads`` sets
``torch.set_num_threads`` (default 1), ``--help`` lists the sizes. Writes
``<out>/bench.md`` (the table, with the command that made it) and ``<out>/bench.json``
(``--out``, default ``out/bench``). Each timing is the median of ``--repeats`` repeats;
the implementations compared take turns within each repeat, so that the load of a shared
machine falls on all of them alike.

Sections (targets are the project's; the script reports whether each is met):

``train``
    Training throughput (target tokens per second) on the toy task, float32, Adam, no
    dropout, no clipping, the same bucketed batches and the same initial parameters:
    xpseq on JAX (jitted step; with JAX's autodiff, and with the encoder's recurrences
    differentiated by the hand-derived rules, ``gradients="hand-derived"``) and on PyTorch
    (eager; with autograd, and with the hand-derived backward of ``xpseq.core.vjp``, which
    records no tape) against
    ``scripts/native_torch.py``,
    the same model written in plain PyTorch (packed ``nn.LSTM(bidirectional=True)``,
    ``nn.LSTMCell`` decoder loop, ``torch.optim.Adam``). Before timing, the native loss must
    equal ``xpseq.models.loss`` in float64 to 1e-10. Targets: JAX (either way of
    differentiating) >= 1.3x native PyTorch, torch with the hand-derived backward >= 1x.
``beam``
    Beam search (k = 5, length penalty ``avg``) of ``--beam-sentences`` test sentences
    with a model trained ``--beam-train-steps`` steps: xpseq's batched search
    (``xpseq.tasks.translate``) on PyTorch and on JAX against the per-sentence beam
    loop of ``native_torch.beam_search_one`` (one decoder call per hypothesis), in
    sentences per second, and the number of sentences whose translations differ.
    Target: torch batched >= 30x the loop, 0 differing sentences.
``sdpa``
    ``xpseq.core.scaled_dot_product_attention`` against
    ``torch.nn.functional.scaled_dot_product_attention`` (eager) and
    ``jax.jit(jax.nn.dot_product_attention)`` (xpseq jitted too), float32, batch 32,
    8 heads, length 128, depth 64, without a mask and with a key-padding mask; the ratio
    is reference time / xpseq time, and the outputs must agree to 1e-5.
``flops``
    Achieved GFLOP/s of each training step (FLOPs counted below, over the timed batches,
    divided by the ``train`` timings) as a fraction of the float32 matmul GFLOP/s measured
    with ``torch.mm`` of two ``--matmul`` square matrices on ``--threads`` threads (NumPy's
    and JAX's matmul are printed beside it). Target: >= 50 % for xpseq.
``compile``
    xpseq's jitted JAX training step over two epochs of bucketed batches: the compile
    time (first call on a shape minus that shape's steady step time, median over the
    shapes; also the XLA compile alone, ``.lower().compile()``), the traces in the first
    epoch (one per batch shape) and in the second (retraces). Targets: <= 3 s, 0 retraces.
``transformer`` (only with ``--only transformer``)
    The Transformer (``xpseq.models.get("transformer")``, pre-LN, ReLU, label smoothing
    0.1) at the ``--transformer`` sizes (default d_model 256, 4 heads, 3 + 3 layers,
    d_ff 1024, batches of up to 3,000 target tokens), float32, Adam, no dropout:
    training throughput of xpseq on JAX (jitted; JAX's autodiff, and the hand-derived
    backward pass traced whole, ``gradients="hand-derived"``) and on PyTorch (autograd,
    and hand-derived) against ``scripts/native_torch.NativeTransformer``
    (``nn.Transformer(batch_first=True)`` with the same embeddings, positions and output
    layer, ``torch.optim.Adam``, eager), whose float64 loss must equal xpseq's to 1e-10
    first. Targets: JAX >= 1.5x, torch >= 0.9x. The step's GFLOP/s (FLOPs counted below)
    as a fraction of the fastest float32 ``--matmul`` matmul measured here (torch, NumPy
    or jitted JAX). Target: >= 50 % for xpseq-JAX. Then, with a model trained
    ``--transformer-train-steps`` steps: batched beam search (k = ``--beam-k``, the
    key/value cache) of ``--transformer-sentences`` test sentences against the same
    search called one sentence at a time, on PyTorch (target >= 10x, identical outputs),
    and batched greedy search in output tokens per second.
``parallel`` (only with ``--only parallel``)
    Training throughput of both model kinds (the ``train`` RNN and the ``transformer``
    sizes, ``--steps`` batches) on 2 devices against 1, float32: JAX on a mesh of the
    host's two cores as CPU devices (``--xla_force_host_platform_device_count=2``, set
    before JAX starts; one device is then a plain single-device run), PyTorch with 2
    processes of one thread each in a ``gloo`` group against one process; and PyTorch with
    2 intra-op threads in one process, for comparison. The 1-device runs are pinned to one
    CPU as in ``train`` (unpinned, XLA spreads even one device's work over both cores); the
    2-device runs have all the process's CPUs. Targets: >= 1.7x for the Transformer,
    >= 1.5x for the RNN model. Also JAX's 2 devices against its 1 device left on both
    cores (XLA's own threads), the fair comparison for a user with both cores.
``g2p`` (only with ``--only g2p``)
    The shipped G2P model (``xpseq.g2p``) decoding the 6,304 test words greedily, model
    loaded once, on one core: seconds on numpy, torch and JAX (the second call; the first,
    with JAX's compilations, in the detail), target <= 10 s; the ratio is against the
    same words decoded one per call on NumPy (``--g2p-loop-words`` of them, scaled).
``threads`` (only with ``--only threads``)
    What ``xpseq --threads`` (default 1) is worth: the seconds of the second epoch of
    ``xpseq --threads N train --task toy --epochs 2`` (the command's defaults: the RNN
    model, and ``--model transformer``), each in a fresh process on all the machine's
    cores, on numpy, torch and JAX, with 2 threads against 1; once on an idle machine and
    once with another process spinning on one core (a busy machine). The ratio is the
    1-thread seconds over the 2-thread seconds (above 1: the second thread helps).
``profile`` (only with ``--only profile``)
    Where the time goes: ``torch.profiler`` over the ``train`` steps of xpseq-torch
    (autograd and hand-derived) and native PyTorch, and over one batched beam search (the
    matrix products' share of the ATen operators' self time, ATen calls per step, the
    largest other operators); JAX's jitted gradient against its jitted loss, and native
    PyTorch's step against its forward pass, per batch.

FLOPs of one training step on a padded batch (B sentences, S source and T target
positions, embed E, H units per encoder direction, D = 2H, vocabulary V; a matmul of
(m, k) by (k, n) counts 2·m·k·n; element-wise work is not counted)::

    encoder    2 directions · (2·B·S·E·4H + 2·B·S·H·4H)       input and recurrent projections
    keys       2·B·S·2H·D                                     W m_j, once per sentence
    decoder    T · (2·B·(E + D)·4D + 2·B·D·4D)                 LSTMCell with input feeding
    attention  T · (2·B·S·D + 2·B·S·2H)                       scores and context
    combine    T · 2·B·(2H + D)·D                              o = tanh(W_u [a; s])
    output     2·B·T·D·V                                       logits
    step       3 · forward                                     backward ≈ 2 · forward

The Transformer's step (d = d_model, f = d_ff; the attention's score and weighted-sum
products count 2·B·Tq·Tk·d each)::

    encoder    layers · (4 · 2·B·S·d·d + 2 · 2·B·S·S·d + 2 · 2·B·S·d·f)
    decoder    layers · (4 · 2·B·T·d·d + 2 · 2·B·T·T·d          causal self-attention
                         + 2 · 2·B·T·d·d + 2 · 2·B·S·d·d          cross: q, o; k, v
                         + 2 · 2·B·T·S·d + 2 · 2·B·T·d·f)         cross scores, feed-forward
    output     2·B·T·d·V
    step       3 · forward

The padded shapes are counted for every implementation (the native encoder skips the
padding of packed sequences, so its figure is slightly generous to it).

Threads: the process is pinned to ``--threads`` CPUs (every thread, BLAS and XLA pools
included; ``--no-pin`` to leave it), because XLA has no exact thread-count setting and
otherwise runs a large matmul on every core. The ``compile`` section alone runs on all the
process's CPUs, as XLA compiles in parallel. PyTorch uses ``--threads`` intra-op threads;
for ``--threads 1`` the script also adds ``--xla_cpu_multi_thread_eigen=false`` to
``XLA_FLAGS`` (unless ``XLA_FLAGS`` mentions it already) before JAX starts.
``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` are printed, not
changed (set them before starting Python); ``OPENBLAS_CORETYPE`` is never touched. The
``train`` rows give each implementation's CPU seconds per wall second.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import math
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # scripts/: _common
import _common as common  # noqa: E402

SECTIONS = ("compile", "train", "flops", "beam", "sdpa")       # the order they run in
#: Sections run only when ``--only`` names them.
EXTRA_SECTIONS = ("profile", "transformer", "parallel", "g2p", "threads")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "OPENBLAS_CORETYPE", "XLA_FLAGS")
KEYS = common.BATCH_KEYS
#: xpseq on PyTorch with the hand-derived backward of xpseq.core.vjp instead of autograd
#: (``make_train_step(..., gradients="hand-derived")``).
HAND = "xpseq-torch, hand-derived backward"
#: xpseq on JAX whose encoder recurrences differentiate with the hand-derived rules inside
#: the jitted step (``gradients="hand-derived"`` on JAX: a ``jax.custom_vjp``).
HAND_JAX = "xpseq-jax, hand-derived recurrences"

# ------------------------------------------------------------------------- results


@dataclasses.dataclass
class Row:
    """One line of the results table."""

    section: str
    measure: str
    value: float | int | str
    unit: str = ""
    ratio: float | None = None
    target: str = "—"
    met: bool | None = None
    detail: str = ""

    def cells(self) -> list[str]:
        ratio = "—" if self.ratio is None else f"{self.ratio:.3g}x"
        met = {None: "—", True: "yes", False: "**no**"}[self.met]
        return [self.section, self.measure, f"{_fmt(self.value)} {self.unit}".strip(), ratio,
                self.target, met, self.detail]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or 1e-3 <= abs(value) < 1e6:
            return f"{value:.4g}" if abs(value) < 100 else f"{value:,.0f}"
        return f"{value:.2e}"
    return str(value)


def at_least(value: float, bound: float) -> tuple[str, bool]:
    return f">= {bound:g}x", value >= bound


def markdown_table(rows: Sequence[Row]) -> str:
    header = ["section", "measurement", "value", "ratio", "target", "met", "detail"]
    return common.markdown_table(header, (r.cells() for r in rows), rule="---")


# ------------------------------------------------------------------------- set-up


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = common.script_parser(__doc__, show_defaults=True)
    p.add_argument("--only", default=",".join(SECTIONS),
                   help="comma-separated sections: " + ",".join(SECTIONS + EXTRA_SECTIONS)
                   + " (profile only when named)")
    common.add_threads_option(p, help="torch.set_num_threads")
    p.add_argument("--no-pin", dest="pin", action="store_false",
                   help="leave the process on all its CPUs instead of pinning it to "
                        "--threads CPUs (pinned unless given: %(default)s)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (median reported)")
    p.add_argument("--out", default="out/bench", help="folder for bench.md and bench.json")
    g = p.add_argument_group("model and data")
    g.add_argument("--embed", type=int, default=32)
    g.add_argument("--hidden", type=int, default=64, help="units per encoder direction")
    g.add_argument("--batch", type=int, default=64)
    g.add_argument("--pairs", type=int, default=2000, help="toy training pairs (one epoch)")
    g.add_argument("--bucket", type=int, default=8, help="pad lengths to multiples of this")
    g.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    g.add_argument("--seed", type=int, default=0)
    g = p.add_argument_group("sections")
    g.add_argument("--steps", type=int, default=20, help="training steps per timed repeat")
    g.add_argument("--beam-sentences", type=int, default=300)
    g.add_argument("--beam-k", type=int, default=5)
    g.add_argument("--length-penalty", choices=("none", "avg"), default="avg")
    g.add_argument("--beam-train-steps", type=int, default=300,
                   help="xpseq-JAX training steps before the beam search")
    g.add_argument("--sdpa", default="32,8,128,64", help="batch,heads,length,depth")
    g.add_argument("--sdpa-iters", type=int, default=10, help="calls per timed repeat")
    g.add_argument("--matmul", type=int, default=1024, help="square matmul size")
    g.add_argument("--transformer", default="256,4,3,1024,3000",
                   help="transformer section: d_model,heads,layers (each side),d_ff,"
                        "max tokens per batch")
    g.add_argument("--transformer-train-steps", type=int, default=100,
                   help="xpseq-JAX Transformer training steps before its searches")
    g.add_argument("--transformer-sentences", type=int, default=100,
                   help="test sentences for the Transformer's beam and greedy searches")
    g.add_argument("--g2p-loop-words", type=int, default=200,
                   help="g2p: words decoded one per call for the baseline (default: 200)")
    g.add_argument("--g2p-words", type=int, default=None,
                   help="g2p: decode only the first N test words (default: all 6,304)")
    args = p.parse_args(argv)
    args.sections = common.comma_list(args.only)
    unknown = sorted(set(args.sections) - set(SECTIONS + EXTRA_SECTIONS))
    if unknown:
        p.error(f"unknown sections {unknown}; choose from {list(SECTIONS + EXTRA_SECTIONS)}")
    common.require_at_least(p, args, ("threads", "repeats", "embed", "hidden", "batch", "pairs",
                                      "bucket", "steps", "beam_sentences", "beam_k",
                                      "sdpa_iters", "matmul", "transformer_sentences"))
    common.require_at_least(p, args, ("beam_train_steps", "transformer_train_steps"),
                            minimum=0)
    try:
        args.sdpa_shape = tuple(int(x) for x in args.sdpa.split(","))
    except ValueError:
        args.sdpa_shape = ()
    if len(args.sdpa_shape) != 4 or min(args.sdpa_shape) < 1:
        p.error("--sdpa must be four positive ints: batch,heads,length,depth")
    try:
        args.transformer_sizes = tuple(int(x) for x in args.transformer.split(","))
    except ValueError:
        args.transformer_sizes = ()
    if len(args.transformer_sizes) != 5 or min(args.transformer_sizes) < 1:
        p.error("--transformer must be five positive ints: d_model,heads,layers,d_ff,"
                "max_tokens")
    return args


def environment() -> dict:
    """PyTorch's threads, the thread variables, the versions and the machine."""
    import torch

    return {
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "env": common.env_vars(THREAD_VARS, missing="unset"),
        **common.package_versions(("numpy", "torch", "jax", "jaxlib")), **common.machine(),
    }


def import_native() -> Any:
    import native_torch  # scripts/native_torch.py, next to this script

    return native_torch


# -------------------------------------------------------------------- shared state


class Bench:
    """The task, config, batches and trained parameters shared by the sections."""

    def __init__(self, args: argparse.Namespace):
        from xpseq import backends
        from xpseq.core.optim import adam
        from xpseq.models.rnn import Seq2SeqConfig, init_params
        from xpseq.tasks import toy_task

        self.args = args
        self.native = import_native()
        self.jax = backends.get("jax")
        self.torch = backends.get("torch")
        per_bucket = max(1, math.ceil(args.beam_sentences / 5))
        self.task = toy_task(n_train=args.pairs, n_dev=8, n_test_per_bucket=per_bucket,
                             seed=args.seed)
        self.config = Seq2SeqConfig(len(self.task.src_vocab), len(self.task.tgt_vocab),
                                    embed=args.embed, hidden=args.hidden, dropout=0.0)
        self.init64 = init_params(self.config, seed=args.seed)
        self.init32 = {k: v.astype(np.float32) for k, v in self.init64.items()}
        self.epoch = self.task.batches(self.task.train, args.batch, args.bucket)
        order = np.random.default_rng([args.seed, 1]).permutation(len(self.epoch))
        self.timed = [self.epoch[order[i % len(order)]] for i in range(args.steps)]
        self.optimizer = adam(args.lr)
        self.train_result: dict | None = None
        self.flops: dict | None = None
        self.profile: dict | None = None
        self.beam: dict | None = None
        self.transformer: dict | None = None
        self.parallel: dict | None = None
        self.g2p: dict | None = None
        self.threads: dict | None = None
        self.affinity: Any = None
        self.trained_loss: float | None = None
        self._trained: dict | None = None

    def jax_step(self, gradients: str | None = None) -> Any:
        from xpseq.train import make_train_step

        return make_train_step(self.config, self.optimizer, self.jax, clip_norm=None,
                               gradients=gradients)

    def torch_step(self, gradients: str | None = None) -> Any:
        from xpseq.train import make_train_step

        return make_train_step(self.config, self.optimizer, self.torch, clip_norm=None,
                               gradients=gradients)

    def tokens(self, batches: Sequence[dict]) -> int:
        return int(sum(np.sum(b["tgt_out"] != self.config.pad_id) for b in batches))

    def trained_params(self) -> dict:
        """NumPy float32 parameters after ``--beam-train-steps`` xpseq-JAX steps (the same
        compiled step as the other sections)."""
        if self._trained is None:
            be, step = self.jax, self.jax_step()
            params = {k: be.asarray(v, dtype="float32") for k, v in self.init32.items()}
            opt_state = self.optimizer.init(params)
            rng = np.random.default_rng([self.args.seed, 2])
            order: list[int] = []
            loss = None
            for _ in range(self.args.beam_train_steps):
                if not order:
                    order = list(rng.permutation(len(self.epoch)))
                batch = to_backend(be, self.epoch[order.pop()])
                params, opt_state, loss = step(params, opt_state, batch)
            self.trained_loss = None if loss is None else float(be.to_numpy(loss))
            self._trained = {k: be.to_numpy(v) for k, v in params.items()}
        return self._trained


def to_backend(be: Any, batch: dict) -> dict:
    return {k: be.asarray(batch[k]) for k in KEYS}


def to_torch(batch: dict) -> dict:
    import torch

    return {k: torch.as_tensor(batch[k]) for k in KEYS}



# ------------------------------------------------------------------------ sections


def run_compile(bench: Bench) -> list[Row]:
    """Compile time and traces of xpseq's jitted step over two epochs."""
    import jax

    be, step = bench.jax, bench.jax_step()
    params = {k: be.asarray(v, dtype="float32") for k, v in bench.init32.items()}
    opt_state = bench.optimizer.init(params)
    batches = [to_backend(be, b) for b in bench.epoch]
    shapes = [(b["src"].shape, b["tgt_in"].shape) for b in bench.epoch]
    already = step.traces
    epochs: list[list[tuple[float, bool]]] = []
    for _ in range(2):
        calls = []
        for batch in batches:
            before = step.traces
            start = time.perf_counter()
            params, opt_state, loss = step(params, opt_state, batch)
            float(be.to_numpy(loss))
            calls.append((time.perf_counter() - start, step.traces > before))
        epochs.append(calls)
    traces = [sum(traced for _, traced in calls) for calls in epochs]
    steady: dict[Any, float] = {}
    for shape in set(shapes):
        steady[shape] = statistics.median(t for (t, _), s in zip(epochs[1], shapes) if s == shape)
    compiles = [t - steady[s] for (t, traced), s in zip(epochs[0], shapes) if traced]
    rows = []
    if compiles:
        compile_s = statistics.median(compiles)
        typical = statistics.median(steady.values())
        rows.append(Row("compile", "JAX training-step compile (first call − steady step)",
                        compile_s, "s", None, "<= 3 s", compile_s <= 3.0,
                        f"median of {len(compiles)} shapes (max {max(compiles):.2f} s) on "
                        f"{common.usable_cpus()} CPUs; "
                        f"{compile_s / typical:.0f} steady steps of {1e3 * typical:.1f} ms"))
    else:
        rows.append(Row("compile", "JAX training-step compile", "not measured", detail=(
            f"every shape was compiled before this section ({already} traces)")))
    # The XLA compilation alone, ahead of time, for the first batch's shape.
    for label, gradients in (("", None), (f" ({HAND_JAX})", "hand-derived")):
        inner = bench.jax_step(gradients)
        outer = jax.jit(lambda p, o, b, inner=inner: inner(p, o, b))
        start = time.perf_counter()
        lowered = outer.lower(params, opt_state, batches[0])
        lower_s = time.perf_counter() - start
        start = time.perf_counter()
        lowered.compile()
        xla_s = time.perf_counter() - start
        rows.append(Row("compile", f"XLA compile alone (.lower().compile()){label}", xla_s,
                        "s", detail=f"tracing and lowering {lower_s:.2f} s; shape src "
                                    f"{shapes[0][0]}, tgt {shapes[0][1]}"))
    rows.append(Row("compile", "traces in epoch 1", traces[0], "",
                    detail=f"{len(batches)} batches, {len(set(shapes))} shapes, "
                           f"bucket {bench.args.bucket}"))
    rows.append(Row("compile", "retraces in epoch 2", traces[1], "", None, "0",
                    traces[1] == 0))
    return rows


def check_native_loss(bench: Bench) -> tuple[float, float]:
    """|native − xpseq| loss in float64 on the first timed batch, and one Adam step's
    largest parameter difference (native torch.optim.Adam vs xpseq-torch)."""
    import torch

    from xpseq.models.rnn import loss
    from xpseq.train import make_train_step

    native = bench.native
    batch = bench.timed[0]
    model = native.NativeSeq2Seq.from_xpseq(bench.init64, bench.config, torch.float64)
    reference = float(loss(bench.init64, bench.config, {k: batch[k] for k in KEYS}))
    loss_diff = abs(float(model.loss(to_torch(batch)).detach()) - reference)
    # One step each from the same float64 parameters.
    native.make_native_step(model, bench.args.lr)(to_torch(batch))
    be = bench.torch
    params = {k: be.asarray(v) for k, v in bench.init64.items()}
    step = make_train_step(bench.config, bench.optimizer, be, clip_norm=None)
    params, _, _ = step(params, bench.optimizer.init(params), to_backend(be, batch))
    step_diff = max(float((p.detach() - params[name]).abs().max())
                    for name, p in model.xpseq_parameters().items())
    return loss_diff, step_diff


def xpseq_loop(be: Any, step: Any, params: dict, optimizer: Any,
               batches: list) -> Callable[[], None]:
    """A timed repeat: ``step`` over ``batches`` from ``params``, carrying the parameters
    and optimiser state from one repeat to the next (every batch shape compiled first)."""
    state = {"params": params, "opt": optimizer.init(params)}
    seen: set = set()
    for b in batches:                                  # compile every shape (JAX), warm up
        key = (tuple(b["src"].shape), tuple(b["tgt_in"].shape))
        if key not in seen:
            seen.add(key)
            step(state["params"], state["opt"], b)

    def run() -> None:
        loss = None
        for b in batches:
            state["params"], state["opt"], loss = step(state["params"], state["opt"], b)
        float(be.to_numpy(loss))                       # wait for JAX's asynchronous steps

    run.state = state
    return run


def native_loop(native_step: Callable[[Any], Any], batches: list) -> Callable[[], None]:
    """A timed repeat of the native model: one ``native_step`` per batch (one warm-up
    step first)."""
    native_step(batches[0])

    def run() -> None:
        loss = None
        for b in batches:
            loss = native_step(b)
        float(loss)

    return run


def train_timings(bench: Bench) -> dict:
    """Seconds per repeat of ``--steps`` steps for xpseq-JAX, xpseq-torch and native."""
    if bench.train_result is not None:
        return bench.train_result
    native = bench.native
    args = bench.args
    loss_diff, step_diff = check_native_loss(bench)
    if not loss_diff <= 1e-10:
        raise SystemExit(f"the native model's float64 loss differs from xpseq's by "
                         f"{loss_diff:.3g} (> 1e-10): it is not the same model")
    impls: dict[str, Callable[[], Any]] = {}
    first_losses: dict[str, float] = {}
    for name, be, step in (("xpseq-jax", bench.jax, bench.jax_step()),
                           (HAND_JAX, bench.jax, bench.jax_step("hand-derived")),
                           ("xpseq-torch", bench.torch, bench.torch_step()),
                           (HAND, bench.torch, bench.torch_step("hand-derived"))):
        batches = [to_backend(be, b) for b in bench.timed]
        impls[name] = xpseq_loop(be, step, {k: be.asarray(v, dtype="float32")
                                            for k, v in bench.init32.items()},
                                 bench.optimizer, batches)
        state = impls[name].state
        first_losses[name] = float(be.to_numpy(step(state["params"], state["opt"],
                                                    batches[0])[2]))
    import torch

    model = native.NativeSeq2Seq.from_xpseq(bench.init32, bench.config, torch.float32)
    native_step = native.make_native_step(model, args.lr)
    torch_batches = [to_torch(b) for b in bench.timed]
    with torch.no_grad():
        first_losses["native-torch"] = float(model.loss(torch_batches[0]))
    impls["native-torch"] = native_loop(native_step, torch_batches)
    cpu: dict[str, list[float]] = {}
    times = common.take_turns(impls, args.repeats, cpu)
    tokens = bench.tokens(bench.timed)
    bench.train_result = {
        "times": times, "tokens": tokens, "loss_diff": loss_diff, "step_diff": step_diff,
        "cores_used": {n: sum(cpu[n]) / sum(t) for n, t in times.items()},
        "first_losses": first_losses,
        "tokens_per_s": {n: tokens / statistics.median(t) for n, t in times.items()},
        "seconds_per_step": {n: statistics.median(t) / len(bench.timed)
                             for n, t in times.items()},
    }
    return bench.train_result


def run_train(bench: Bench) -> list[Row]:
    r = train_timings(bench)
    tps = r["tokens_per_s"]
    native = tps["native-torch"]
    spread = {n: f"fastest/slowest repeat {min(t) / max(t):.2f}, CPU/wall "
                 f"{r['cores_used'][n]:.2f}" for n, t in r["times"].items()}
    detail = f"{bench.args.steps} steps, {r['tokens']} target tokens per repeat; {{}}"
    rows = [Row("train", "native loss check (float64, |native − xpseq.models.loss|)",
                r["loss_diff"], "", None, "<= 1e-10", r["loss_diff"] <= 1e-10,
                f"one Adam step: largest parameter difference {r['step_diff']:.1e}"),
            Row("train", "native PyTorch throughput", native, "tok/s",
                detail=detail.format(spread["native-torch"]))]
    for name, bound in (("xpseq-jax", 1.3), (HAND_JAX, 1.3), ("xpseq-torch", None),
                        (HAND, 1.0)):
        target, met = ("—", None) if bound is None else at_least(tps[name] / native, bound)
        rows.append(Row("train", f"{name} throughput vs native", tps[name], "tok/s",
                        tps[name] / native, target, met, detail.format(spread[name])))
    return rows


def step_flops(config: Any, batch: int, src: int, tgt: int) -> int:
    """FLOPs of one training step on a padded (batch, src) -> (batch, tgt) batch (see the
    module docstring)."""
    B, S, T = batch, src, tgt
    E, H, V = config.embed, config.hidden, config.tgt_vocab
    D, M = 2 * H, 2 * H
    encoder = 2 * (2 * B * S * E * 4 * H + 2 * B * S * H * 4 * H)
    keys = 2 * B * S * M * D
    decoder = T * (2 * B * (E + D) * 4 * D + 2 * B * D * 4 * D)
    attention = T * (2 * B * S * D + 2 * B * S * M)
    combine = T * 2 * B * (M + D) * D
    output = 2 * B * T * D * V
    return 3 * (encoder + keys + decoder + attention + combine + output)


def matmul_gflops(n: int, repeats: int) -> dict[str, float]:
    """Float32 ``n × n`` matmul GFLOP/s (median) with torch, NumPy and jitted JAX."""
    import jax
    import jax.numpy as jnp
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    reps = max(1, int(2e10 // (2 * n ** 3)))          # about 20 GFLOP per repeat
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    jmm = jax.jit(jnp.matmul)
    jmm(ja, jb).block_until_ready()

    def run_torch() -> None:
        for _ in range(reps):
            torch.mm(ta, tb)

    def run_numpy() -> None:
        for _ in range(reps):
            a @ b

    def run_jax() -> None:
        for _ in range(reps):
            jmm(ja, jb).block_until_ready()

    run_torch()
    run_numpy()
    times = common.take_turns({"torch": run_torch, "numpy": run_numpy, "jax": run_jax},
                       max(repeats, 3))
    return {k: reps * 2 * n ** 3 / statistics.median(t) / 1e9 for k, t in times.items()}


def run_flops(bench: Bench) -> list[Row]:
    r = train_timings(bench)
    flops = sum(step_flops(bench.config, b["src"].shape[0], b["src"].shape[1],
                           b["tgt_in"].shape[1]) for b in bench.timed)
    peak = matmul_gflops(bench.args.matmul, bench.args.repeats)
    n = bench.args.matmul
    rows = [Row("flops", f"float32 matmul {n}×{n}, torch.mm", peak["torch"], "GFLOP/s",
                detail=f"{bench.args.threads} torch thread(s); numpy {peak['numpy']:.1f}, "
                       f"jax {peak['jax']:.1f} GFLOP/s"),
            Row("flops", "training step FLOPs (mean over the timed batches)",
                flops / len(bench.timed) / 1e6, "MFLOP", detail="3 × forward, padded shapes")]
    for name in ("xpseq-jax", HAND_JAX, "xpseq-torch", HAND, "native-torch"):
        achieved = flops / statistics.median(r["times"][name]) / 1e9
        fraction = achieved / peak["torch"]
        target, met = ("—", None) if name == "native-torch" else (">= 0.5x", fraction >= 0.5)
        rows.append(Row("flops", f"{name} training step", achieved, "GFLOP/s", fraction,
                        target, met, "ratio = fraction of torch.mm GFLOP/s"))
    bench.flops = {"step_flops_total": flops, "matmul_gflops": peak}
    return rows


def beam_sources(bench: Bench) -> list[tuple[list[str], list[str]]]:
    """``--beam-sentences`` test pairs, taken from the length buckets in turn."""
    buckets = [list(pairs) for pairs in bench.task.test.values()]
    out = []
    while len(out) < bench.args.beam_sentences and any(buckets):
        for pairs in buckets:
            if pairs and len(out) < bench.args.beam_sentences:
                out.append(pairs.pop(0))
    return out


def run_beam(bench: Bench) -> list[Row]:
    import torch

    from xpseq.search import SearchOptions
    from xpseq.tasks import translate
    from xpseq.tasks.metrics import exact_match

    args, task = bench.args, bench.task
    params = bench.trained_params()
    pairs = beam_sources(bench)
    sources = [s for s, _ in pairs]
    # Translations only, as the loop gives: no attention weights kept per hypothesis.
    options = SearchOptions(method="beam", k=args.beam_k, length_penalty=args.length_penalty,
                            attention=False)
    model = bench.native.NativeSeq2Seq.from_xpseq(params, bench.config, torch.float32)
    src_ids = [task.src_vocab.encode(s, add_eos=True) for s in sources]
    outputs: dict[str, list] = {}
    on = {"xpseq-torch": (bench.torch, {k: bench.torch.asarray(v) for k, v in params.items()}),
          "xpseq-jax": (bench.jax, {k: bench.jax.asarray(v) for k, v in params.items()})}

    def batched(name: str) -> Callable[[], None]:
        be, p = on[name]

        def run() -> None:
            outputs[name] = translate(p, bench.config, sources, task.src_vocab,
                                      task.tgt_vocab, be, options)
        return run

    def loop() -> None:
        outputs["loop"] = [bench.native.beam_search_one(
            model, ids, k=args.beam_k, length_penalty=args.length_penalty) for ids in src_ids]

    fns = {"loop": loop, "xpseq-torch": batched("xpseq-torch"),
           "xpseq-jax": batched("xpseq-jax")}
    start = time.perf_counter()
    fns["xpseq-jax"]()                                 # compile the jitted searches
    jax_first = time.perf_counter() - start
    fns["xpseq-torch"]()
    times = common.take_turns(fns, args.repeats)
    rate = {n: len(sources) / statistics.median(t) for n, t in times.items()}
    differ = {n: [i for i, (o, ref) in enumerate(zip(outputs[n], outputs["loop"]))
                  if list(o["ids"]) != list(ref["ids"])] for n in ("xpseq-torch", "xpseq-jax")}
    score_gap = max(abs(o["score"] - ref["score"]) for o, ref in
                    zip(outputs["xpseq-torch"], outputs["loop"]))
    exact = exact_match([task.tgt_vocab.decode(o["ids"]) for o in outputs["loop"]],
                        [t for _, t in pairs])
    bench.beam = {"differ": differ, "score_gap_torch": score_gap, "exact_match": exact,
                  "jax_first_call_s": jax_first, "train_loss": bench.trained_loss}
    setting = (f"k={args.beam_k}, {args.length_penalty} penalty, {len(sources)} sentences, "
               f"model after {args.beam_train_steps} steps (exact match {100 * exact:.0f}%)")
    t_target, t_met = at_least(rate["xpseq-torch"] / rate["loop"], 30)
    return [
        Row("beam", "per-sentence beam loop (native PyTorch)", rate["loop"], "sent/s",
            detail=setting),
        Row("beam", "xpseq-torch batched beam vs loop", rate["xpseq-torch"], "sent/s",
            rate["xpseq-torch"] / rate["loop"], t_target, t_met),
        Row("beam", "xpseq-jax batched beam vs loop", rate["xpseq-jax"], "sent/s",
            rate["xpseq-jax"] / rate["loop"],
            detail=f"jitted; first call with compilation {jax_first:.1f} s"),
        Row("beam", "sentences differing, xpseq-torch vs loop", len(differ["xpseq-torch"]),
            "", None, "0", not differ["xpseq-torch"],
            f"largest score difference {score_gap:.1e}"),
        Row("beam", "sentences differing, xpseq-jax vs loop", len(differ["xpseq-jax"]), "",
            detail="float32 on another library: a near-tie may break differently"),
    ]


def run_sdpa(bench: Bench) -> list[Row]:
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    from xpseq.core import scaled_dot_product_attention as sdpa

    args = bench.args
    B, heads, L, d = args.sdpa_shape
    rng = np.random.default_rng(args.seed)
    q, k, v = (rng.standard_normal((B, heads, L, d)).astype(np.float32) for _ in range(3))
    lens = rng.integers(max(1, L // 2), L + 1, size=B)
    keep = np.arange(L)[None, :] < lens[:, None]                   # (B, L) key padding
    iters = args.sdpa_iters

    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    t_lens, t_mask = torch.from_numpy(lens), torch.from_numpy(keep[:, None, None, :])
    jq, jk, jv = (jnp.asarray(x) for x in (q, k, v))
    jq_t, jk_t, jv_t = (jnp.asarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))  # (B,L,N,d)
    j_lens, j_mask = jnp.asarray(lens), jnp.asarray(keep[:, None, None, :])
    x_plain = jax.jit(lambda q, k, v: sdpa(q, k, v, need_weights=False)[0])
    x_masked = jax.jit(lambda q, k, v, n: sdpa(q, k, v, valid_lens=n, need_weights=False)[0])
    r_plain = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v))
    r_masked = jax.jit(lambda q, k, v, m: jax.nn.dot_product_attention(q, k, v, mask=m))

    def torch_pair(masked: bool) -> tuple[Callable[[], Any], Callable[[], Any]]:
        def ours() -> Any:
            # need_weights=False: on PyTorch the core delegates to the fused kernel
            return sdpa(tq, tk, tv, valid_lens=t_lens if masked else None,
                        need_weights=False)[0]

        def ref() -> Any:
            return F.scaled_dot_product_attention(tq, tk, tv,
                                                  attn_mask=t_mask if masked else None)
        return ours, ref

    def jax_pair(masked: bool) -> tuple[Callable[[], Any], Callable[[], Any]]:
        def ours() -> Any:
            out = x_masked(jq, jk, jv, j_lens) if masked else x_plain(jq, jk, jv)
            return out.block_until_ready()

        def ref() -> Any:
            out = r_masked(jq_t, jk_t, jv_t, j_mask) if masked else r_plain(jq_t, jk_t, jv_t)
            return out.block_until_ready().transpose(0, 2, 1, 3)
        return ours, ref

    rows, worst = [], 0.0
    for lib, pair in (("torch", torch_pair), ("jax", jax_pair)):
        for masked in (False, True):
            ours, ref = pair(masked)
            a, b = np.asarray(ours()), np.asarray(ref())               # also warms up / jits
            diff = float(np.max(np.abs(a - b)))
            worst = max(worst, diff)

            def repeat(fn: Callable[[], Any]) -> Callable[[], None]:
                return lambda: [fn() for _ in range(iters)]

            times = common.take_turns({"xpseq": repeat(ours), "ref": repeat(ref)}, args.repeats)
            ms = {n: 1e3 * statistics.median(t) / iters for n, t in times.items()}
            ref_name = "F.scaled_dot_product_attention" if lib == "torch" else \
                "jax.nn.dot_product_attention (jit)"
            rows.append(Row("sdpa", f"{lib}, {'key-padding mask' if masked else 'no mask'}: "
                                    f"xpseq vs {ref_name}", ms["xpseq"], "ms",
                            ms["ref"] / ms["xpseq"],
                            detail=f"reference {ms['ref']:.2f} ms; max |Δ| {diff:.1e}; "
                                   "ratio = reference time / xpseq time"))
    rows.append(Row("sdpa", "outputs agree (max |Δ| over the four comparisons)", worst, "",
                    None, "<= 1e-5", worst <= 1e-5,
                    f"float32, batch {B}, {heads} heads, length {L}, depth {d}"))
    return rows


# -------------------------------------------------------------------- transformer


#: The Transformer trained or decoded by each implementation of the ``transformer`` section.
HAND_T = "xpseq-jax, hand-derived backward"
HAND_T_TORCH = "xpseq-torch, hand-derived backward"


def transformer_step_flops(config: Any, batch: int, src: int, tgt: int) -> int:
    """FLOPs of one Transformer training step on a padded (batch, src) -> (batch, tgt)
    batch (see the module docstring)."""
    B, S, T, d, f = batch, src, tgt, config.d_model, config.d_ff
    encoder = config.encoder_layers * (4 * 2 * B * S * d * d + 2 * 2 * B * S * S * d
                                       + 2 * 2 * B * S * d * f)
    decoder = config.decoder_layers * (
        4 * 2 * B * T * d * d + 2 * 2 * B * T * T * d              # causal self-attention
        + 2 * 2 * B * T * d * d + 2 * 2 * B * S * d * d            # cross: q, o; k, v
        + 2 * 2 * B * T * S * d + 2 * 2 * B * T * d * f)           # cross scores; FF
    output = 2 * B * T * d * config.tgt_vocab
    return 3 * (encoder + decoder + output)


def _train_transformer(kind: Any, config: Any, init32: dict, epoch: list, bench: Bench,
                       steps: int) -> dict:
    """NumPy float32 parameters after ``steps`` xpseq-JAX steps (hand-derived backward,
    the fastest measured below) over shuffled ``epoch`` batches, and the last loss."""
    from xpseq.core.optim import adam
    from xpseq.train import make_train_step

    be, optimizer = bench.jax, adam(bench.args.lr)
    step = make_train_step(config, optimizer, be, gradients="hand-derived")
    params = {k: be.asarray(v) for k, v in init32.items()}
    opt_state = optimizer.init(params)
    rng = np.random.default_rng([bench.args.seed, 3])
    order: list[int] = []
    loss = None
    for _ in range(steps):
        if not order:
            order = list(rng.permutation(len(epoch)))
        params, opt_state, loss = step(params, opt_state, to_backend(be, epoch[order.pop()]))
    return {"params": {k: be.to_numpy(v) for k, v in params.items()},
            "loss": None if loss is None else float(be.to_numpy(loss))}


def run_transformer(bench: Bench) -> list[Row]:
    """The ``transformer`` section: training throughput against native PyTorch, the step's
    GFLOP/s, batched beam search against a per-sentence loop, and greedy tokens/s."""
    import torch

    from xpseq import models
    from xpseq.core.optim import adam
    from xpseq.train import make_train_step

    args = bench.args
    d, heads, layers, d_ff, max_tokens = args.transformer_sizes
    kind = models.get("transformer")
    config = kind.Config(len(bench.task.src_vocab), len(bench.task.tgt_vocab), d_model=d,
                         heads=heads, encoder_layers=layers, decoder_layers=layers,
                         d_ff=d_ff, label_smoothing=0.1)
    # Measured first, before JAX has compiled anything else in this section.
    peak = matmul_gflops(args.matmul, args.repeats)
    init64 = kind.init_params(config, seed=args.seed)
    init32 = {k: v.astype(np.float32) for k, v in init64.items()}
    epoch = bench.task.batches(bench.task.train, 10**6, args.bucket, max_tokens)
    order = np.random.default_rng([args.seed, 2]).permutation(len(epoch))
    timed = [epoch[order[i % len(order)]] for i in range(args.steps)]
    native = bench.native.NativeTransformer.from_xpseq(init64, config, torch.float64)
    reference = float(kind.loss(init64, config, {k: timed[0][k] for k in KEYS}))
    loss_diff = abs(float(native.loss(to_torch(timed[0])).detach()) - reference)
    if not loss_diff <= 1e-10:
        raise SystemExit(f"the native Transformer's float64 loss differs from xpseq's by "
                         f"{loss_diff:.3g}: it is not the same model")
    optimizer = adam(args.lr)
    impls: dict[str, Callable[[], Any]] = {}
    for name, be, gradients in (("xpseq-jax", bench.jax, None),
                                (HAND_T, bench.jax, "hand-derived"),
                                ("xpseq-torch", bench.torch, None),
                                (HAND_T_TORCH, bench.torch, "hand-derived")):
        step = make_train_step(config, optimizer, be, clip_norm=None, gradients=gradients)
        impls[name] = xpseq_loop(be, step, {k: be.asarray(v) for k, v in init32.items()},
                                 optimizer, [to_backend(be, b) for b in timed])
    model = bench.native.NativeTransformer.from_xpseq(init32, config, torch.float32)
    impls["native-torch"] = native_loop(bench.native.make_native_step(model, args.lr),
                                        [to_torch(b) for b in timed])
    times = common.take_turns(impls, args.repeats)
    tokens = bench.tokens(timed)
    tps = {n: tokens / statistics.median(t) for n, t in times.items()}
    sizes = (f"d_model {d}, {heads} heads, {layers} + {layers} layers, d_ff {d_ff}, "
             f"{len(timed)} batches of up to {max_tokens} tokens ({tokens} target tokens)")
    rows = [Row("transformer", "native loss check (float64, |native − xpseq|)", loss_diff, "",
                None, "<= 1e-10", loss_diff <= 1e-10, "nn.Transformer loaded with xpseq's "
                "parameters, label smoothing 0.1"),
            Row("transformer", "native PyTorch throughput", tps["native-torch"], "tok/s",
                detail=sizes)]
    for name, bound in (("xpseq-jax", 1.5), (HAND_T, 1.5), ("xpseq-torch", 0.9),
                        (HAND_T_TORCH, 0.9)):
        target, met = at_least(tps[name] / tps["native-torch"], bound)
        rows.append(Row("transformer", f"{name} vs native torch", tps[name], "tok/s",
                        tps[name] / tps["native-torch"], target, met, sizes))

    # The step's achieved GFLOP/s against the fastest float32 matmul measured here.
    flops = sum(transformer_step_flops(config, b["src"].shape[0], b["src"].shape[1],
                                       b["tgt_in"].shape[1]) for b in timed)
    best_engine = max(peak, key=peak.get)
    rows.append(Row("transformer", f"float32 matmul {args.matmul}×{args.matmul}, fastest "
                    f"engine ({best_engine})", peak[best_engine], "GFLOP/s",
                    detail=", ".join(f"{k} {v:.1f}" for k, v in peak.items())))
    achieved = {n: flops / statistics.median(t) / 1e9 for n, t in times.items()}
    for name in ("xpseq-jax", HAND_T, "native-torch"):
        fraction = achieved[name] / peak[best_engine]
        target, met = ("—", None) if name == "native-torch" else at_least(fraction, 0.5)
        rows.append(Row("transformer", f"{name} training step", achieved[name], "GFLOP/s",
                        fraction, target, met, f"ratio = fraction of the {best_engine} matmul "
                        f"rate; {flops / len(timed) / 1e9:.2f} GFLOP per step"))
    trained = _train_transformer(kind, config, init32, epoch, bench,
                                 args.transformer_train_steps)
    rows += transformer_search_rows(bench, config, trained)
    bench.transformer = {"tokens_per_s": tps, "gflops": achieved, "matmul_gflops": peak,
                         "step_flops_total": flops, "train_loss": trained["loss"]}
    return rows


def transformer_search_rows(bench: Bench, config: Any, trained: dict) -> list[Row]:
    """Batched beam search (k = ``--beam-k``, the key/value cache) of
    ``--transformer-sentences`` test sentences against the same search called one sentence
    at a time, on PyTorch; the outputs must be identical. Then batched greedy search, in
    output tokens per second."""
    from xpseq.search import SearchOptions
    from xpseq.tasks import translate
    from xpseq.tasks.metrics import exact_match

    args, task = bench.args, bench.task
    pairs = beam_sources(bench)[:args.transformer_sentences]
    sources = [s for s, _ in pairs]
    beam = SearchOptions(method="beam", k=args.beam_k, length_penalty=args.length_penalty,
                         attention=False)
    greedy = SearchOptions(method="greedy", attention=False)
    on = {name: (be, {k: be.asarray(v) for k, v in trained["params"].items()})
          for name, be in (("torch", bench.torch), ("jax", bench.jax))}
    outputs: dict[str, list] = {}

    def decode(key: str, name: str, options: SearchOptions, batch_size: int) -> Callable:
        be, params = on[name]

        def run() -> None:
            outputs[key] = translate(params, config, sources, task.src_vocab, task.tgt_vocab,
                                     be, options, batch_size=batch_size)
        return run

    fns = {"loop": decode("loop", "torch", beam, 1),
           "torch beam": decode("torch beam", "torch", beam, 256),
           "jax beam": decode("jax beam", "jax", beam, 256),
           "torch greedy": decode("torch greedy", "torch", greedy, 256),
           "jax greedy": decode("jax greedy", "jax", greedy, 256)}
    for name in fns:                                   # compile (JAX) and warm up
        if name != "loop":
            fns[name]()
    times = common.take_turns(fns, args.repeats)
    rate = {n: len(sources) / statistics.median(t) for n, t in times.items()}
    differ = {n: sum(list(o["ids"]) != list(ref["ids"])
                     for o, ref in zip(outputs[n], outputs["loop"]))
              for n in ("torch beam", "jax beam")}
    exact = exact_match([task.tgt_vocab.decode(o["ids"]) for o in outputs["loop"]],
                        [t for _, t in pairs])
    loss = "untrained" if trained["loss"] is None else f"loss {trained['loss']:.3f}"
    setting = (f"k={args.beam_k}, {args.length_penalty} penalty, {len(sources)} sentences; "
               f"model after {args.transformer_train_steps} steps ({loss}, exact match "
               f"{100 * exact:.0f}%)")
    target, met = at_least(rate["torch beam"] / rate["loop"], 10)
    rows = [Row("transformer", "per-sentence beam loop (xpseq-torch, one sentence a call)",
                rate["loop"], "sent/s", detail=setting),
            Row("transformer", "xpseq-torch batched beam vs per-sentence loop",
                rate["torch beam"], "sent/s", rate["torch beam"] / rate["loop"], target, met,
                "key/value cache, batches of up to 256 sentences"),
            Row("transformer", "xpseq-jax batched beam vs per-sentence loop",
                rate["jax beam"], "sent/s", rate["jax beam"] / rate["loop"],
                detail="jitted; the loop is xpseq-torch's"),
            Row("transformer", "sentences differing, batched beam vs loop (torch)",
                differ["torch beam"], "", None, "0", differ["torch beam"] == 0),
            Row("transformer", "sentences differing, batched beam vs loop (jax)",
                differ["jax beam"], "",
                detail="float32 on another library: a near-tie may break differently")]
    for name in ("torch greedy", "jax greedy"):
        generated = sum(len(o["ids"]) + 1 for o in outputs[name])      # words and </s>
        rows.append(Row("transformer", f"xpseq-{name.split()[0]} batched greedy",
                        generated / statistics.median(times[name]), "tok/s",
                        detail=f"{len(sources)} sentences, {generated} output tokens"))
    return rows


# ----------------------------------------------------------------------- parallel


def _parallel_models(bench: Bench) -> dict[str, tuple[Any, list]]:
    """The RNN model of ``train`` and the Transformer of ``transformer``, each with its
    ``--steps`` timed batches (NumPy) and float32 initial parameters."""
    from xpseq import models

    d, heads, layers, d_ff, max_tokens = bench.args.transformer_sizes
    kind = models.get("transformer")
    config = kind.Config(len(bench.task.src_vocab), len(bench.task.tgt_vocab), d_model=d,
                         heads=heads, encoder_layers=layers, decoder_layers=layers,
                         d_ff=d_ff, label_smoothing=0.1)
    epoch = bench.task.batches(bench.task.train, 10**6, bench.args.bucket, max_tokens)
    order = np.random.default_rng([bench.args.seed, 2]).permutation(len(epoch))
    timed = [epoch[order[i % len(order)]] for i in range(bench.args.steps)]
    init = {k: v.astype(np.float32) for k, v in kind.init_params(config, bench.args.seed).items()}
    return {"rnn": (bench.config, bench.timed, bench.init32),
            "transformer": (config, timed, init)}


def _placed_loop(place: Any, config: Any, batches: list, init: dict, lr: float) -> Callable:
    """``xpseq_loop`` of ``config``'s step with the parameters and batches placed by
    ``place`` (an ``xpseq.train.parallel`` placement)."""
    from xpseq.core.optim import adam
    from xpseq.train import make_train_step

    optimizer = adam(lr)
    step = make_train_step(config, optimizer, place.backend, clip_norm=None,
                           group=place.group, mesh=place.mesh)
    return xpseq_loop(place.backend, step, place.params(init), optimizer,
                      [place.batch(b) for b in batches])


def _torch_group_timing(config: Any, batches: list, init: dict, lr: float, repeats: int,
                        out: str) -> None:
    """One process of a 2-process torch group: the timed repeats (each ends with a
    barrier); rank 0 writes the seconds to ``out``."""
    import json

    import torch.distributed as dist

    from xpseq import backends
    from xpseq.train.parallel import placement

    place = placement(backends.get("torch"), 2)
    run = _placed_loop(place, config, batches, init, lr)
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        run()
        dist.barrier()
        times.append(time.perf_counter() - start)
    if place.main:
        pathlib.Path(out).write_text(json.dumps(times))


def run_parallel(bench: Bench) -> list[Row]:
    """Training throughput on 2 devices against 1, both model kinds: JAX on a device mesh
    of the host's two cores, PyTorch with 2 processes of one thread (a gloo group); and
    PyTorch with 2 intra-op threads in one process and JAX's 1-device run left on both
    cores (XLA's own intra-op threads), for comparison. The other 1-device runs are pinned
    to ``--threads`` CPUs as in ``train``; the rest run on all the process's."""
    import json
    import tempfile

    import torch

    from xpseq.train.parallel import placement, spawn

    args = bench.args
    rows: list[Row] = []
    bench.parallel = {}
    for name, (config, batches, init) in _parallel_models(bench).items():
        tokens = bench.tokens(batches)
        jax_runs = {n: _placed_loop(placement(bench.jax, n), config, batches, init, args.lr)
                    for n in (1, 2)}
        one_torch = _placed_loop(placement(bench.torch, 1), config, batches, init, args.lr)

        def torch_two_threads(run: Callable = one_torch) -> None:
            torch.set_num_threads(2)
            try:
                run()
            finally:
                torch.set_num_threads(args.threads)

        def on_one_core(run: Callable) -> Callable[[], None]:
            def pinned() -> None:        # a 1-device run gets one core, as in `train`
                bench.affinity.pin()
                try:
                    run()
                finally:
                    bench.affinity.release()
            return pinned

        times = common.take_turns({"jax 1": on_one_core(jax_runs[1]), "jax 2": jax_runs[2],
                                   "jax 1 all cores": jax_runs[1],
                                   "torch 1": on_one_core(one_torch),
                                   "torch 2 threads": torch_two_threads}, args.repeats)
        with tempfile.TemporaryDirectory() as tmp:
            out = str(pathlib.Path(tmp) / "times.json")
            spawn(_torch_group_timing, 2, config, batches, init, args.lr, args.repeats, out)
            times["torch 2 processes"] = json.loads(pathlib.Path(out).read_text())
        rate = {n: tokens / statistics.median(t) for n, t in times.items()}
        bench.parallel[name] = {"tokens_per_s": rate, "tokens": tokens}
        bound = 1.7 if name == "transformer" else 1.5
        for label, base, two in (("jax 2 devices vs 1", "jax 1", "jax 2"),
                                 ("torch 2 processes vs 1", "torch 1", "torch 2 processes")):
            target, met = at_least(rate[two] / rate[base], bound)
            rows.append(Row("parallel", f"{name} {label}", rate[two], "tok/s",
                            rate[two] / rate[base], target, met,
                            f"1 device: {rate[base]:,.0f} tok/s; {len(batches)} batches, "
                            f"{tokens} target tokens"))
        rows.append(Row("parallel", f"{name} jax 2 devices vs 1 device on both cores",
                        rate["jax 2"], "tok/s", rate["jax 2"] / rate["jax 1 all cores"],
                        detail="the 1-device run unpinned: XLA's own threads on both cores "
                        f"({rate['jax 1 all cores']:,.0f} tok/s)"))
        rows.append(Row("parallel", f"{name} torch 2 intra-op threads vs 1",
                        rate["torch 2 threads"], "tok/s",
                        rate["torch 2 threads"] / rate["torch 1"],
                        detail="one process, torch.set_num_threads(2)"))
    return rows


# ------------------------------------------------------------------------ profile

#: The ATen operators that are matrix products (self time; the rest is element-wise work,
#: copies, reductions and the per-call overhead of an eager library).
MATMULS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm",
           "aten::mv", "aten::addmv", "aten::dot")


def torch_profile(fn: Callable[[], Any], calls: int) -> dict:
    """``fn`` once under ``torch.profiler``: the matrix products' share of the ATen
    operators' self CPU time, the ATen calls (nested ones included) per call of the
    profiled unit (``calls`` of them in ``fn``) and the largest other operators' shares."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
    others = sorted((e for e in events if e.key not in MATMULS),
                    key=lambda e: -e.self_cpu_time_total)[:4]
    return {"matmul_share": matmul / total,
            "aten_calls_per_call": sum(e.count for e in events) / calls,
            "top_others": [(e.key[6:], e.self_cpu_time_total / total) for e in others]}


def run_profile(bench: Bench) -> list[Row]:
    """Where the time goes, for the closing notes' "what limits it": torch.profiler over
    the eager training steps and the batched beam search, and JAX's gradient against its
    forward pass (jitted, same batches)."""
    import jax
    import torch

    from xpseq.models.rnn import loss as xpseq_loss

    args = bench.args
    train_timings(bench)                      # warms every implementation up
    rows = []
    impls = {}
    for name, gradients in (("xpseq-torch", None), (HAND, "hand-derived")):
        be, step = bench.torch, bench.torch_step(gradients)
        state = {"params": {k: be.asarray(v, dtype="float32") for k, v in bench.init32.items()}}
        state["opt"] = bench.optimizer.init(state["params"])
        batches = [to_backend(be, b) for b in bench.timed]

        def run(step: Any = step, state: dict = state, batches: list = batches) -> None:
            for b in batches:
                state["params"], state["opt"], _ = step(state["params"], state["opt"], b)
        impls[name] = run
    model = bench.native.NativeSeq2Seq.from_xpseq(bench.init32, bench.config, torch.float32)
    native_step = bench.native.make_native_step(model, args.lr)
    torch_batches = [to_torch(b) for b in bench.timed]

    def run_native() -> None:
        for b in torch_batches:
            native_step(b)
    impls["native-torch"] = run_native
    profiles = {}
    for name, fn in impls.items():
        fn()
        p = profiles[name] = torch_profile(fn, len(bench.timed))
        others = ", ".join(f"{k} {100 * v:.0f} %" for k, v in p["top_others"])
        rows.append(Row("profile", f"{name} step: matrix products' share of ATen time",
                        100 * p["matmul_share"], "%",
                        detail=f"{p['aten_calls_per_call']:,.0f} ATen calls per step; then "
                               f"{others}"))
    # JAX: the jitted loss against its jitted gradient; native's forward against its step.
    be = bench.jax
    params = {k: be.asarray(v, dtype="float32") for k, v in bench.init32.items()}
    batches = [to_backend(be, b) for b in bench.timed]

    def loss_of(p: dict, b: dict) -> Any:
        return xpseq_loss(p, bench.config, b, scan=be.scan)
    forward, gradient = jax.jit(loss_of), jax.jit(jax.value_and_grad(loss_of))

    def run_jax(fn: Any) -> Callable[[], None]:
        def run() -> None:
            jax.block_until_ready([fn(params, b) for b in batches])
        return run

    def native_forward() -> None:
        with torch.no_grad():
            for b in torch_batches:
                model.loss(b)
    fns = {"jax forward": run_jax(forward), "jax gradient": run_jax(gradient),
           "native forward": native_forward, "native step": run_native}
    for fn in fns.values():                  # compile every shape, warm up
        fn()
    times = {n: statistics.median(t) / len(bench.timed) * 1e3
             for n, t in common.take_turns(fns, args.repeats).items()}
    rows.append(Row("profile", "xpseq-jax gradient (jitted value_and_grad) vs its forward",
                    times["jax gradient"], "ms", times["jax gradient"] / times["jax forward"],
                    detail=f"forward {times['jax forward']:.2f} ms per batch; ratio = "
                           "gradient / forward"))
    rows.append(Row("profile", "native-torch step (forward, backward, Adam) vs its forward",
                    times["native step"], "ms", times["native step"] / times["native forward"],
                    detail=f"forward {times['native forward']:.2f} ms per batch; ratio = "
                           "step / forward"))
    # The batched beam search on PyTorch.
    from xpseq.search import SearchOptions
    from xpseq.tasks import translate

    params = bench.trained_params()
    sources = [s for s, _ in beam_sources(bench)]
    options = SearchOptions(method="beam", k=args.beam_k, length_penalty=args.length_penalty,
                            attention=False)
    tparams = {k: bench.torch.asarray(v) for k, v in params.items()}

    def search() -> None:
        translate(tparams, bench.config, sources, bench.task.src_vocab, bench.task.tgt_vocab,
                  bench.torch, options)
    search()
    p = torch_profile(search, 1)
    others = ", ".join(f"{k} {100 * v:.0f} %" for k, v in p["top_others"])
    rows.append(Row("profile", "xpseq-torch batched beam: matrix products' share",
                    100 * p["matmul_share"], "%",
                    detail=f"{len(sources)} sentences, {p['aten_calls_per_call']:,.0f} ATen "
                           f"calls; then {others}"))
    bench.profile = {"torch": profiles, "ms_per_batch": times, "beam": p}
    return rows


def run_g2p(bench: Bench) -> list[Row]:
    """The shipped G2P model (``xpseq.g2p``) decoding the 6,304 test words greedily, on one
    core, model loaded once: on each backend the whole list (JAX: the second call, and
    the first with its compilations), against the same words one per call on NumPy (on
    ``--g2p-loop-words`` of them, scaled to the whole list)."""
    from xpseq import g2p
    from xpseq.data.cmudict import load_g2p

    words, _ = load_g2p().references("test")
    words = ["".join(w) for w in words][:bench.args.g2p_words]
    loop_words = words[:bench.args.g2p_loop_words]
    rows, seconds = [], {}
    model = g2p.load(backend="numpy")
    start = time.perf_counter()
    for w in loop_words:
        model.pronounce([w])
    per_word = (time.perf_counter() - start) / len(loop_words)
    for name in ("numpy", "torch", "jax"):
        model = g2p.load(backend=name)
        start = time.perf_counter()
        first = model.pronounce(words)
        seconds[f"{name} first"] = time.perf_counter() - start
        start = time.perf_counter()
        again = model.pronounce(words)
        seconds[name] = time.perf_counter() - start
        assert first == again
        target, met = ("<= 10 s", seconds[name] <= 10.0) if len(words) == 6304 else ("—", None)
        rows.append(Row("g2p", f"shipped model, {len(words)} test words greedy on {name}",
                        seconds[name], "s", per_word * len(words) / seconds[name], target, met,
                        f"ratio: against one word per call on numpy ({1e3 * per_word:.1f} "
                        f"ms a word, {len(loop_words)} words); first call "
                        f"{seconds[name + ' first']:.1f} s"))
    bench.g2p = {"seconds": seconds, "per_word_numpy": per_word, "words": len(words),
                 "model": g2p.shipped()["model"]}
    return rows


def _epoch_seconds(backend: str, model: str, threads: int, folder: pathlib.Path,
                   quick: bool = False) -> float:
    """Seconds of the second epoch (the first compiles on JAX) of ``xpseq --threads
    {threads} train --task toy --epochs 2``, from the run's metrics log, in a fresh
    process: XLA's thread pool is fixed when JAX starts. The thread variables are left out
    of its environment, so that ``--threads`` alone decides."""
    out = folder / f"{backend}-{model}-{threads}.safetensors"       # (quick: small data)
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


def run_threads(bench: Bench) -> list[Row]:
    """``xpseq --threads 2`` against 1 for training, per backend and model kind, on an idle
    machine and with one core kept busy by another process (see the module docstring)."""
    import tempfile

    backends_, models, counts = ("numpy", "torch", "jax"), ("rnn", "transformer"), (1, 2)
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for load in ("idle", "busy"):
            spinner = (subprocess.Popen([sys.executable, "-c", "while True: pass"])
                       if load == "busy" else None)
            try:
                for _ in range(bench.args.repeats):       # the settings take turns
                    for backend in backends_:
                        for model in models:
                            for n in counts:
                                key = f"{load} {backend} {model} {n}"
                                seconds = _epoch_seconds(backend, model, n, pathlib.Path(tmp))
                                times.setdefault(key, []).append(seconds)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    median = {k: statistics.median(v) for k, v in times.items()}
    rows = []
    for load in ("idle", "busy"):
        for backend in backends_:
            for model in models:
                one, two = (median[f"{load} {backend} {model} {n}"] for n in counts)
                rows.append(Row("threads", f"toy {model} on {backend}, 2 threads vs 1, "
                                f"{load} machine", two, "s/epoch", one / two,
                                detail=f"1 thread: {one:.2f} s/epoch"))
    bench.threads = {"seconds": times, "median": median}
    return rows


RUNNERS: dict[str, Callable[[Bench], list[Row]]] = {
    "compile": run_compile, "train": run_train, "flops": run_flops, "beam": run_beam,
    "sdpa": run_sdpa, "profile": run_profile, "transformer": run_transformer,
    "parallel": run_parallel, "g2p": run_g2p, "threads": run_threads,
}


# ----------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if "parallel" in args.sections:       # the host's cores as JAX devices, before JAX starts
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=2".strip()
    affinity = common.pin_threads(args.threads, args.pin)

    pinned = affinity.pinned
    command = common.command_line("bench.py", argv)
    started = time.perf_counter()
    env = environment()
    env["load_average_start"] = common.load_average(2)
    env["pinned_cpus"] = pinned
    env["cpus_usable"] = len(affinity.all) or env["cpus_usable"]
    print(f"xpseq benchmarks: {command}")
    print(f"threads: torch {env['torch_threads']} intra-op ({env['torch_interop_threads']} "
          f"inter-op); process pinned to CPUs {pinned}; "
          + common.settings_text(env["env"]))
    print(f"versions: python {env['python']}, numpy {env['numpy']}, torch {env['torch']}, "
          f"jax {env['jax']} (jaxlib {env['jaxlib']}); CPU: {env['cpu']}, "
          f"{env['cpu_count']} cores ({env['cpus_usable']} usable); "
          f"load average {env['load_average_start']}")
    bench = Bench(args)
    bench.affinity = affinity
    print(f"model: embed {args.embed}, hidden {args.hidden} per direction, vocab "
          f"{bench.config.src_vocab}/{bench.config.tgt_vocab}, batch {args.batch}, "
          f"float32; {len(bench.epoch)} batches per epoch; repeats {args.repeats}")
    rows: list[Row] = []
    seconds: dict[str, float] = {}
    for name in SECTIONS + EXTRA_SECTIONS:
        if name not in args.sections:
            continue
        start = time.perf_counter()
        if name in ("compile", "parallel", "threads"):  # XLA compiles on every core it may
            affinity.release()          # use; two devices or threads need two cores
        new = RUNNERS[name](bench)
        affinity.pin()
        seconds[name] = time.perf_counter() - start
        print(f"\n[{name}] {seconds[name]:.1f} s")
        print(markdown_table(new))
        rows += new
    total = time.perf_counter() - started
    env["load_average_end"] = common.load_average(2)
    table = markdown_table(rows)
    judged = [r for r in rows if r.met is not None]
    print(f"\nall sections, {total:.0f} s (load average at the end "
          f"{env['load_average_end']}); {sum(r.met for r in judged)} of {len(judged)} "
          f"targets met:\n\n{table}")
    threads = (f"torch threads {env['torch_threads']}, pinned to CPUs {pinned}; "
               + common.settings_text(env["env"]))
    markdown = (
        f"{common.made_by(command)} in {total:.0f} s: {env['cpu']}, "
        f"{env['cpu_count']} cores, load average {env['load_average_start']} at the start; "
        f"{threads}; torch {env['torch']}, jax {env['jax']}, numpy {env['numpy']}.\n"
        f"Ratios are xpseq / reference (higher is better); each time is the median of "
        f"{args.repeats} repeats.\n\n{table}\n")
    details = {"train": bench.train_result, "beam": bench.beam, "flops": bench.flops,
               "profile": bench.profile, "transformer": bench.transformer,
               "parallel": bench.parallel, "g2p": bench.g2p, "threads": bench.threads}
    data = {"command": command, "date": datetime.date.today().isoformat(), "seconds": total,
            "section_seconds": seconds,
            "args": {k: v for k, v in vars(args).items() if k != "sdpa_shape"},
            "environment": env, "rows": [dataclasses.asdict(r) for r in rows],
            "details": details}
    md, js = common.write_report(common.output_dir(args.out), "bench", markdown, data, indent=2)
    print(f"\nwrote {md} and {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
