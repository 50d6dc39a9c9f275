"""``scaling`` (only with ``--only scaling``): how the cost of training and decoding grows
with the work.

Training, for both model kinds and every engine of ``--scaling-engines`` (xpseq on NumPy,
JAX and PyTorch, each with its default gradients: NumPy's hand-derived backward pass,
JAX's autodiff in a jitted step, PyTorch's autograd, eager), Adam at 1e-3, no dropout, no
clipping, float32 (and bf16 where :func:`xpseq.train.make_train_step` takes
``precision``; an engine that refuses it with a ``ValueError`` or ``TypeError`` gets a
"not supported" row): throughput in target tokens per second and the peak memory of a
training step, against one axis at a time, the other two at ``--scaling-fixed`` (length
32, batch 64, width 128):

``length``
    ``--scaling-lengths`` (8 to 256): the source and the target both that many tokens
``batch``
    ``--scaling-batches`` (16 to 512 sentences)
``width``
    ``--scaling-widths`` d (64 to 512): the RNN has embeddings of d/2 and d/2 LSTM units
    per encoder direction (a decoder state of d), general attention with input feeding;
    the Transformer d_model = d, d_ff = 4d, 4 heads, 2 + 2 layers, pre-LN

Then greedy decoding (``xpseq.search``, JAX and PyTorch, untrained parameters, width and
source length fixed) in output tokens per second against the batch size. ``SearchOptions``
has no output length of its own; ``max_len_a=0, max_len_b=L, min_len=L-1`` makes every
sentence exactly L tokens (its ``</s>`` included), L the fixed length.

Batches are synthetic: random ids 3 to 127 of a 128-word vocabulary on both sides, every
sentence the full length (no padding; PAD 0, BOS 1, EOS 2), ``tgt_in`` = ``<s> y_1 ..
y_{T-1}`` and ``tgt_out`` = ``y_1 .. y_{T-1} </s>``: B·T target tokens a step.

Timing: at each point every implementation is built and run once (JAX compiles), and once
more for its memory; then they take turns (``common.take_turns``), ``--scaling-repeats``
rounds of one step each, and the rate is the median's. A point's cost is its wall time:
building, compiling, the memory step and its timed steps. Values run in increasing order,
and when a point costs more than ``--scaling-budget`` seconds the rest of its series (the
larger values) is skipped, with a row saying so.

Peak memory of a training step, in this process, is two parts added: what the step holds
(the bytes of the parameters, Adam's state and the batch, counted from the arrays'
``nbytes``) and what it needs on top while it runs, read from Linux's ``/proc``: after the
warm-up step, a garbage collection and glibc's ``malloc_trim(0)`` give freed memory back to
the system, the resident-set high-water mark is reset (``5`` into
``/proc/self/clear_refs``), one more step runs, and its high-water mark (``VmHWM``) minus
the resident set before it (``VmRSS``) is the step's own peak: activations kept for the
backward pass, gradients, the new parameters and state before the old are freed. Trimming
first means the step's arrays land on fresh pages, so they show in the resident set; JAX's
compilation, the compiled program and whatever earlier points left resident are not
counted. (The first step's peak above the resident set before the point was built,
compilation included, is in ``bench.json`` as ``first_step_memory_mib``.) Memory that an
allocator kept from before and reuses does not show, so a reading can come out low (two
small JAX points of one run did). Where ``/proc/self/clear_refs`` cannot be written (not
Linux) memory is not measured.

Fit: the exponent k of "time per step ∝ length^k", the least-squares slope of log seconds
on log length over the lengths of at least 32 (``FIT_FROM``), per engine, kind and
precision. A cost linear in the length gives 1, a quadratic one 2. Neither model is purely
either: the RNN's recurrences take one step a token (linear), but its attention makes each
of the T target steps score and average all S source positions (S·T), and the
Transformer's matrix products with its weights are linear in the length while its
attention is quadratic. How much of each term there is decides where k falls between 1
and 2 at these sizes.

Plots (matplotlib, drawn without pyplot): ``scaling_length.png``, ``scaling_batch.png``,
``scaling_width.png`` (throughput and peak memory, log-log) and ``scaling_greedy.png`` in
``--out``, and copied to ``--plots-to`` when given; each names the processor.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import gc
import math
import pathlib
import shutil
import statistics
import textwrap
import time
from typing import Any, Callable, Sequence

from .. import _common as common
import numpy as np

from .context import Context
from .shared import Row, float32_on, on_backend

ENGINES = ("numpy", "jax", "torch")
KINDS = ("rnn", "transformer")
PRECISIONS = ("float32", "bf16")
AXES = ("length", "batch", "width")
#: The engines greedy decoding is measured on.
DECODERS = ("jax", "torch")
#: Both vocabularies' size: ids 0, 1, 2 are PAD, BOS and EOS.
VOCAB = 128
PAD, BOS, EOS = 0, 1, 2
#: The length fit uses the lengths of at least this many tokens.
FIT_FROM = 32
LABELS = {"length": "sequence length (tokens; source = target)",
          "batch": "batch size (sentences)",
          "width": "model width d (RNN decoder state, Transformer d_model)"}

# --------------------------------------------------------------------------- options


def add_options(parser: argparse.ArgumentParser) -> None:
    """The ``--scaling-*`` options (and ``--plots-to``) on ``parser``."""
    g = parser.add_argument_group("scaling section")
    g.add_argument("--scaling-lengths", default="8,16,32,64,128,256",
                   help="sequence lengths (source = target)")
    g.add_argument("--scaling-batches", default="16,32,64,128,256,512", help="batch sizes")
    g.add_argument("--scaling-widths", default="64,128,256,512",
                   help="model widths d (multiples of 4)")
    g.add_argument("--scaling-fixed", default="32,64,128",
                   help="length,batch,width held fixed while another axis varies")
    g.add_argument("--scaling-engines", default=",".join(ENGINES), help="engines")
    g.add_argument("--scaling-kinds", default=",".join(KINDS), help="model kinds")
    g.add_argument("--scaling-precisions", default=",".join(PRECISIONS),
                   help="precisions (bf16 only where make_train_step takes precision)")
    g.add_argument("--scaling-repeats", type=int, default=3,
                   help="timed steps per point (the median is reported)")
    g.add_argument("--scaling-budget", type=float, default=60.0,
                   help="seconds a point may cost before the rest of its series is skipped")
    g.add_argument("--plots-to", default=None,
                   help="a folder to copy the scaling plots to (besides --out)")


def _ints(parser: argparse.ArgumentParser, option: str, text: str,
          multiple: int = 1) -> list[int]:
    """The sorted distinct positive ints of ``option``'s value ``text`` (each a multiple of
    ``multiple``), or a parser error naming the option."""
    try:
        values = [int(x) for x in common.comma_list(text)]
    except ValueError:
        values = []
    if not values or min(values) < 1 or any(v % multiple for v in values):
        rule = "positive ints" if multiple == 1 else f"positive multiples of {multiple}"
        parser.error(f"{option} must be comma-separated {rule}, got {text!r}")
    return sorted(set(values))


def _names(parser: argparse.ArgumentParser, option: str, text: str,
           choices: Sequence[str]) -> list[str]:
    """The names of ``option``'s value ``text``, in ``choices``' order, or a parser error."""
    names = common.comma_list(text)
    unknown = sorted(set(names) - set(choices))
    if not names or unknown:
        parser.error(f"{option} must name some of {','.join(choices)}, got {text!r}")
    return [c for c in choices if c in names]


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check the ``--scaling-*`` options and keep them parsed: ``args.scaling_grid``
    (axis → values), ``scaling_fixed_sizes`` (axis → value), ``scaling_engine_list``,
    ``scaling_kind_list``, ``scaling_precision_list``."""
    args.scaling_grid = {
        "length": _ints(parser, "--scaling-lengths", args.scaling_lengths),
        "batch": _ints(parser, "--scaling-batches", args.scaling_batches),
        "width": _ints(parser, "--scaling-widths", args.scaling_widths, multiple=4)}
    try:
        fixed = [int(x) for x in args.scaling_fixed.split(",")]
    except ValueError:
        fixed = []
    if len(fixed) != 3 or min(fixed) < 1 or fixed[2] % 4:
        parser.error(f"--scaling-fixed must be three positive ints length,batch,width (the "
                     f"width a multiple of 4), got {args.scaling_fixed!r}")
    args.scaling_fixed_sizes = dict(zip(AXES, fixed))
    args.scaling_engine_list = _names(parser, "--scaling-engines", args.scaling_engines,
                                      ENGINES)
    args.scaling_kind_list = _names(parser, "--scaling-kinds", args.scaling_kinds, KINDS)
    args.scaling_precision_list = _names(parser, "--scaling-precisions",
                                         args.scaling_precisions, PRECISIONS)
    if args.scaling_repeats < 1:
        parser.error("--scaling-repeats must be at least 1")
    if not args.scaling_budget > 0:
        parser.error(f"--scaling-budget must be a positive number of seconds, got "
                     f"{args.scaling_budget}")


# --------------------------------------------------------------------------- memory


class PeakMemory:
    """The process's peak resident memory above a baseline, from Linux's ``/proc``.

    :meth:`start` gives freed memory back to the system (a garbage collection, glibc's
    ``malloc_trim(0)``), resets the high-water mark to the resident set and takes the
    resident set as the baseline; :meth:`peak_mib` is the high-water mark since then minus
    the baseline. Where ``/proc/self/clear_refs`` cannot be written, :attr:`available` is
    False and :meth:`peak_mib` None.
    """

    def __init__(self) -> None:
        self.available = True
        self.baseline = 0
        self.start()

    def start(self) -> None:
        """Give freed memory back, reset the high-water mark, take the baseline."""
        gc.collect()
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (AttributeError, OSError):                  # not glibc
            pass
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.baseline = _status_kib("VmRSS")
        except OSError:
            self.available = False

    def peak_mib(self) -> float | None:
        """MiB of the high-water mark since :meth:`start` above the baseline."""
        if not self.available:
            return None
        return (_status_kib("VmHWM") - self.baseline) / 1024


def nbytes(tree: Any) -> int:
    """The bytes of the arrays in ``tree`` (dicts, lists and tuples of arrays; other leaves
    count 0)."""
    if isinstance(tree, dict):
        return sum(nbytes(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(nbytes(v) for v in tree)
    return int(getattr(tree, "nbytes", 0))


def _status_kib(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


# ------------------------------------------------------------------- the workloads


@dataclasses.dataclass(frozen=True)
class Series:
    """One line of a plot: an engine, a model kind and a precision."""

    engine: str
    kind: str
    precision: str = "float32"

    @property
    def label(self) -> str:
        return f"{self.kind} {self.engine} {self.precision}"


@dataclasses.dataclass
class Prepared:
    """A point ready to time: ``run()`` does one step (or search) and waits for its result,
    ``tokens`` a call; ``memory``: MiB readings (``peak`` = ``held`` + ``step``, and
    ``first``; see the module docstring) or None."""

    run: Callable[[], Any]
    tokens: int
    memory: dict[str, float | None] | None = None


class Unsupported(Exception):
    """An engine refused a precision (its message says why)."""


def synthetic_batch(batch: int, length: int, rng: np.random.Generator) -> dict:
    """``batch`` random sentence pairs, every source and target ``length`` tokens, ids 3
    to ``VOCAB - 1``: ``src (B, S)``, ``src_len (B,)``, ``tgt_in`` (``<s> y_1 ..``) and
    ``tgt_out`` (``.. y_{T-1} </s>``) ``(B, T)``, NumPy int64, no padding."""
    src = rng.integers(3, VOCAB, size=(batch, length))
    words = rng.integers(3, VOCAB, size=(batch, length - 1))
    return {"src": src, "src_len": np.full(batch, length),
            "tgt_in": np.concatenate([np.full((batch, 1), BOS), words], axis=1),
            "tgt_out": np.concatenate([words, np.full((batch, 1), EOS)], axis=1)}


def model_config(kind: str, width: int, length: int) -> Any:
    """The config of model ``kind`` at ``width`` (see the module docstring), able to take
    sequences of ``length``."""
    from xpseq import models

    if kind == "rnn":
        return models.get("rnn").Config(VOCAB, VOCAB, embed=width // 2, hidden=width // 2,
                                        dropout=0.0)
    return models.get("transformer").Config(
        VOCAB, VOCAB, d_model=width, heads=4, encoder_layers=2, decoder_layers=2,
        d_ff=4 * width, dropout=0.0, max_len=max(512, length + 1))


def bf16_supported() -> bool:
    """Whether :func:`xpseq.train.make_train_step` takes ``precision``."""
    import inspect

    from xpseq.train import make_train_step

    return "precision" in inspect.signature(make_train_step).parameters


def prepare_training(backend: Any, series: Series, length: int, batch: int, width: int,
                     seed: int = 0) -> Prepared:
    """One training step of ``series`` at these sizes, run twice (warm-up, compilation on
    JAX; then the memory step), with its memory readings (see the module docstring).

    Raises :class:`Unsupported` when a bf16 step fails with ``ValueError`` or
    ``TypeError``."""
    from xpseq import models
    from xpseq.core.optim import adam
    from xpseq.core.precision import Policy
    from xpseq.train import make_train_step

    kind = models.get(series.kind)
    config = model_config(series.kind, width, length)
    optimizer = adam(1e-3)
    extra = {} if series.precision == "float32" else {"precision": Policy(series.precision)}
    data = synthetic_batch(batch, length, np.random.default_rng([seed, length, batch]))
    memory = PeakMemory()
    state: dict = {}

    def run() -> float:
        state["params"], state["opt"], loss = step(state["params"], state["opt"], arrays)
        return float(backend.to_numpy(loss))               # waits for JAX

    try:
        step = make_train_step(config, optimizer, backend, clip_norm=None, **extra)
        state["params"] = float32_on(backend, kind.init_params(config, seed=seed))
        state["opt"] = optimizer.init(state["params"])
        arrays = on_backend(backend, data)
        run()
    except (ValueError, TypeError) as error:
        if not extra:
            raise
        raise Unsupported(f"{type(error).__name__}: {error}") from error
    first = memory.peak_mib()
    held = nbytes([state, arrays]) / 2**20
    memory.start()
    run()
    transient = memory.peak_mib()
    return Prepared(run, batch * length, {
        "peak": None if transient is None else held + transient, "held": held,
        "step": transient, "first": first})


def prepare_greedy(backend: Any, series: Series, length: int, batch: int, width: int,
                   seed: int = 0) -> Prepared:
    """Greedy search of ``batch`` random sources of ``length`` tokens with untrained
    parameters, every output exactly ``length`` tokens; searched once (JAX compiles)."""
    from xpseq import models
    from xpseq.search import SearchOptions, search

    config = model_config(series.kind, width, length)
    params = float32_on(backend, models.get(series.kind).init_params(config, seed=seed))
    data = synthetic_batch(batch, length, np.random.default_rng([seed, length, batch]))
    options = SearchOptions(method="greedy", attention=False, max_len_a=0.0,
                            max_len_b=float(length), min_len=length - 1)

    def run() -> Any:
        return search(params, config, data["src"], data["src_len"], backend, options)

    generated = int(np.sum(run().lengths))
    if generated != batch * length:
        raise RuntimeError(f"greedy search gave {generated} tokens, not {batch} × {length}")
    return Prepared(run, generated)


# ------------------------------------------------------------------------ measuring


@dataclasses.dataclass
class AxisResult:
    """What :func:`measure_axis` measured: ``points`` (one dict per series and value),
    ``skipped`` (the series cut by the budget, with the values left out) and
    ``unsupported`` (series → the engine's message)."""

    points: list[dict]
    skipped: list[dict]
    unsupported: dict[Series, str]


def measure_axis(axis: str, values: Sequence[int], series: Sequence[Series],
                 prepare: Callable[[Series, int], Prepared], repeats: int,
                 budget: float, what: str = "") -> AxisResult:
    """Each series at each of ``values`` (in increasing order): ``prepare(series, value)``
    for every series still running, then ``repeats`` rounds in which they take turns, one
    call each. A series whose point costs more than ``budget`` seconds (preparing and its
    timed calls) runs no larger value. With ``what``, a line is printed after each value."""
    result = AxisResult([], [], {})
    running = list(series)
    values = sorted(values)
    for i, value in enumerate(values):
        ready: dict[Series, Prepared] = {}
        cost: dict[Series, float] = {}
        for s in running:
            start = time.perf_counter()
            try:
                ready[s] = prepare(s, value)
            except Unsupported as error:
                result.unsupported[s] = str(error)
                continue
            cost[s] = time.perf_counter() - start
        running = list(ready)
        times = common.take_turns({s.label: ready[s].run for s in running}, repeats)
        for s in running:
            seconds = times[s.label]
            median = statistics.median(seconds)
            cost[s] += sum(seconds)
            memory = ready[s].memory or {}
            result.points.append({
                "axis": axis, "value": value, "engine": s.engine, "kind": s.kind,
                "precision": s.precision, "seconds": median,
                "tokens_per_s": ready[s].tokens / median, "tokens": ready[s].tokens,
                "spread": min(seconds) / max(seconds), "point_seconds": cost[s],
                "memory_mib": memory.get("peak"), "held_mib": memory.get("held"),
                "step_memory_mib": memory.get("step"),
                "first_step_memory_mib": memory.get("first")})
        ready.clear()                                     # free this point's arrays
        if what:
            print(f"  scaling: {what}, {axis} {value}: {len(running)} series, "
                  f"{sum(cost.values()):.0f} s", flush=True)
        over = [s for s in running if cost[s] > budget]
        if over and i + 1 < len(values):
            for s in over:
                result.skipped.append({"axis": axis, "series": s, "after": value,
                                       "seconds": cost[s], "values": values[i + 1:]})
            running = [s for s in running if s not in over]
    return result


def fit_exponent(sizes: Sequence[float], seconds: Sequence[float],
                 smallest: float = FIT_FROM) -> float | None:
    """k in ``seconds ≈ c · size^k``: the least-squares slope of log ``seconds`` on log
    ``sizes`` over the sizes of at least ``smallest``; None with fewer than two distinct
    such sizes."""
    pairs = [(math.log(n), math.log(t)) for n, t in zip(sizes, seconds) if n >= smallest]
    if len({x for x, _ in pairs}) < 2:
        return None
    mx = statistics.fmean(x for x, _ in pairs)
    my = statistics.fmean(y for _, y in pairs)
    return (sum((x - mx) * (y - my) for x, y in pairs)
            / sum((x - mx) ** 2 for x, _ in pairs))


# ---------------------------------------------------------------------------- plots


STYLE = {"engine": {"numpy": "C0", "jax": "C1", "torch": "C2"},
         "kind": {"rnn": "-", "transformer": "--"},
         "precision": {"float32": "o", "bf16": "s"}}


def plot(path: pathlib.Path, points: Sequence[dict], axis: str, title: str,
         machine: str, *, memory: bool = True, fits: dict[str, float] | None = None,
         rate: str = "training throughput (target tokens/s)") -> pathlib.Path:
    """A log-log PNG of ``points`` against ``axis``: the rate and (with ``memory``) the
    peak memory, one line per engine × kind × precision (its fitted exponent, from
    ``fits`` by label, in the legend); the title names the processor (``machine``)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend
    from matplotlib.ticker import NullLocator

    width = 13 if memory else 8
    fig = Figure(figsize=(width, 5.5))
    panels = fig.subplots(1, 2 if memory else 1, squeeze=False)[0]
    lines: dict[str, list[dict]] = {}
    for p in points:
        lines.setdefault(f"{p['kind']} {p['engine']} {p['precision']}", []).append(p)
    for label, pts in lines.items():
        pts = sorted(pts, key=lambda p: p["value"])
        style = {"color": STYLE["engine"][pts[0]["engine"]],
                 "linestyle": STYLE["kind"][pts[0]["kind"]],
                 "marker": STYLE["precision"][pts[0]["precision"]], "markersize": 4}
        k = (fits or {}).get(label)
        name = label if k is None else f"{label}, k = {k:.2f}"
        panels[0].plot([p["value"] for p in pts], [p["tokens_per_s"] for p in pts],
                       label=name, **style)
        if memory:
            kept = [p for p in pts if p["memory_mib"] is not None and p["memory_mib"] > 0]
            panels[1].plot([p["value"] for p in kept], [p["memory_mib"] for p in kept],
                           label=label, **style)
    values = sorted({p["value"] for p in points})
    for panel in panels:
        panel.set_xscale("log")
        panel.set_yscale("log")
        panel.set_xticks(values, [str(v) for v in values])
        panel.xaxis.set_minor_locator(NullLocator())
        panel.set_xlabel(LABELS[axis])
        panel.grid(True, which="major", alpha=0.3)
        panel.legend(fontsize=7)
    panels[0].set_ylabel(rate)
    if memory:
        panels[1].set_ylabel("peak memory of a training step (MiB: arrays held + the "
                             "step's own peak)", fontsize=8)
    lines = textwrap.wrap(title, 14 * width) + textwrap.wrap(machine, 14 * width)
    fig.suptitle("\n".join(lines), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    return path


def write_plots(folder: pathlib.Path, details: dict, machine: str) -> list[pathlib.Path]:
    """The four PNGs of the section's ``details`` (what it records for ``bench.json``) in
    ``folder``; ``machine`` names the processor (:func:`_common.machine_text`)."""
    fixed, fits = details["fixed"], details["fits"]
    threads = f"{details['threads']} thread{'s' if details['threads'] > 1 else ''}"
    on = {axis: [p for p in details["points"] if p["axis"] == axis] for axis in AXES}
    return [
        plot(folder / "scaling_length.png", on["length"], "length",
             f"xpseq training against sequence length (batch {fixed['batch']}, width "
             f"{fixed['width']}; k: time per step ∝ length^k from {FIT_FROM}); {threads}",
             machine, fits=fits),
        plot(folder / "scaling_batch.png", on["batch"], "batch",
             f"xpseq training against batch size (length {fixed['length']}, width "
             f"{fixed['width']}); {threads}", machine),
        plot(folder / "scaling_width.png", on["width"], "width",
             f"xpseq training against model width (length {fixed['length']}, batch "
             f"{fixed['batch']}); {threads}", machine),
        plot(folder / "scaling_greedy.png", details["greedy"], "batch",
             f"xpseq greedy decoding against batch size (untrained, source and output "
             f"{fixed['length']} tokens, width {fixed['width']}); {threads}", machine,
             memory=False, rate="greedy decoding (output tokens/s)")]


# --------------------------------------------------------------------------- section


def _sizes(fixed: dict[str, int], axis: str, value: int) -> dict[str, int]:
    return {**fixed, axis: value}


def _series_rows(result: AxisResult, fixed: dict[str, int], what: str) -> list[Row]:
    """The rows of one axis: a point each, then the series the budget cut."""
    rows = []
    for p in result.points:
        size = _sizes(fixed, p["axis"], p["value"])
        others = ", ".join(f"{a} {size[a]}" for a in AXES if a != p["axis"])
        detail = f"{others}; {1e3 * p['seconds']:.1f} ms a call (fastest/slowest " \
                 f"{p['spread']:.2f})"
        if p["memory_mib"] is not None:
            detail += (f"; peak memory {p['memory_mib']:.1f} MiB (held "
                       f"{p['held_mib']:.1f} + step {p['step_memory_mib']:.1f})")
        rows.append(Row("scaling", f"{what} {p['kind']} {p['engine']} {p['precision']}, "
                        f"{p['axis']} {p['value']}", p["tokens_per_s"], "tok/s",
                        detail=detail))
    for s in result.skipped:
        rows.append(Row("scaling", f"{what} {s['series'].label}, {s['axis']} "
                        f"{','.join(map(str, s['values']))}", "skipped",
                        detail=f"{s['axis']} {s['after']} cost {s['seconds']:.1f} s, over "
                               f"--scaling-budget"))
    return rows


def run(context: Context) -> list[Row]:
    """Training throughput and peak memory against length, batch and width; the length
    exponents; greedy decoding against the batch size; the plots."""
    from xpseq import backends

    args = context.args
    fixed, grid = args.scaling_fixed_sizes, args.scaling_grid
    on = {name: backends.get("numpy") if name == "numpy" else getattr(context, name)
          for name in args.scaling_engine_list}
    rows: list[Row] = []
    precisions = list(args.scaling_precision_list)
    if "bf16" in precisions and not bf16_supported():
        precisions.remove("bf16")
        rows.append(Row("scaling", "bf16 training", "not measured",
                        detail="xpseq.train.make_train_step takes no precision here"))
    series = [Series(e, k, p) for p in precisions for e in on for k in args.scaling_kind_list]
    unsupported: dict[Series, str] = {}
    started, cpu_started = time.perf_counter(), time.process_time()
    results = {}
    for axis in AXES:
        live = [s for s in series if s not in unsupported]

        def prepare(s: Series, value: int, axis: str = axis) -> Prepared:
            size = _sizes(fixed, axis, value)
            return prepare_training(on[s.engine], s, size["length"], size["batch"],
                                    size["width"], args.seed)

        results[axis] = measure_axis(axis, grid[axis], live, prepare, args.scaling_repeats,
                                     args.scaling_budget, "training")
        unsupported.update(results[axis].unsupported)
        rows += _series_rows(results[axis], fixed, "train")
    for s, message in unsupported.items():
        rows.append(Row("scaling", f"train {s.label}", "not supported", detail=message))

    fits: dict[str, float] = {}
    for s in series:
        if s in unsupported:
            continue
        pts = [p for p in results["length"].points
               if (p["engine"], p["kind"], p["precision"]) == (s.engine, s.kind, s.precision)]
        k = fit_exponent([p["value"] for p in pts], [p["seconds"] for p in pts])
        used = [p["value"] for p in pts if p["value"] >= FIT_FROM]
        if k is None:
            rows.append(Row("scaling", f"{s.label}: time per step ∝ length^k", "not fitted",
                            detail=f"fewer than two lengths of at least {FIT_FROM} measured"))
            continue
        fits[s.label] = k
        rows.append(Row("scaling", f"{s.label}: time per step ∝ length^k", k,
                        detail=f"least squares of log seconds on log length, lengths "
                               f"{used[0]}–{used[-1]} ({len(used)} points); batch "
                               f"{fixed['batch']}, width {fixed['width']}"))

    decoders = [Series(e, k) for e in DECODERS if e in on for k in args.scaling_kind_list]
    greedy = measure_axis("batch", grid["batch"], decoders, lambda s, b: prepare_greedy(
        on[s.engine], s, fixed["length"], b, fixed["width"], args.seed),
        args.scaling_repeats, args.scaling_budget, "greedy decoding")
    rows += _series_rows(greedy, fixed, "greedy")
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    rows.append(Row("scaling", "the section's time", seconds, "s",
                    detail=f"{cpu:.0f} s of CPU time (this process); load average "
                           f"{common.load_average(2)} at the end"))

    memory_ok = all(p["memory_mib"] is not None for r in results.values() for p in r.points)
    details = {
        "seconds": seconds, "cpu_seconds": cpu, "fixed": fixed, "grid": grid,
        "repeats": args.scaling_repeats, "budget": args.scaling_budget, "vocab": VOCAB,
        "fit_from": FIT_FROM, "threads": args.threads,
        "points": [p for r in results.values() for p in r.points],
        "greedy": greedy.points, "fits": fits,
        "skipped": [{**s, "series": s["series"].label}
                    for r in [*results.values(), greedy] for s in r.skipped],
        "unsupported": {s.label: m for s, m in unsupported.items()},
        "memory": ("held arrays' nbytes + the step's VmHWM above VmRSS (/proc/self)"
                   if memory_ok else "not measured")}
    plots = write_plots(common.output_dir(args.out), details, common.machine_text())
    if args.plots_to:
        folder = common.output_dir(args.plots_to)
        for path in plots:
            shutil.copy2(path, folder / path.name)
    context.record("scaling", {**details, "plots": [str(p) for p in plots]})
    return rows
