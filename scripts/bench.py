"""Benchmarks of xpseq: every figure a ratio to a reference measured in the same run.

Run: ``python -m scripts.bench`` (or ``make bench``), about 2 minutes on 2 cores with the
defaults; ``--only train,beam,sdpa,flops,compile`` picks sections, ``--threads`` sets
``torch.set_num_threads`` (default 1), ``--help`` lists the sizes. Writes
``<out>/bench.md`` (the table, with the command that made it) and ``<out>/bench.json``
(``--out``, default ``out/bench``). Each timing is the median of ``--repeats`` repeats;
the implementations compared take turns within each repeat, so that the load of a shared
machine falls on all of them alike.

Each section is a module of ``scripts/benchmarks/`` (its docstring says what it measures,
how, and the project's targets; the script reports whether each is met), run with a
shared :class:`benchmarks.context.Context` that builds the task, batches and parameters
once:

``train``
    training throughput of xpseq on JAX and PyTorch (autodiff and hand-derived) against
    the same model in plain PyTorch (``scripts/native_torch.py``)
``beam``
    batched beam search against a per-sentence loop, and whether the translations differ
``sdpa``
    ``xpseq.core.scaled_dot_product_attention`` against PyTorch's and JAX's own
``flops``
    the training steps' GFLOP/s (the ``train`` timings) against a float32 matmul's
``compile``
    the jitted JAX training step's compile time and retraces
``transformer`` (only with ``--only transformer``)
    the Transformer's training against ``nn.Transformer``, its GFLOP/s, batched beam and
    greedy search
``parallel`` (only with ``--only parallel``)
    both model kinds on 2 devices against 1 (a JAX mesh, a torch gloo group)
``g2p`` (only with ``--only g2p``)
    the shipped G2P model decoding the test words on each backend, and its ONNX export
    on onnxruntime (one thread) in the same batches, its ids checked equal to NumPy's
``threads`` (only with ``--only threads``)
    what ``xpseq --threads 2`` is worth against 1, idle and busy
``profile`` (only with ``--only profile``)
    where the time goes: ``torch.profiler`` and JAX's gradient against its forward
``peers`` (only with ``--only peers``)
    both model kinds against the strongest peers: Keras 3 and Flax on JAX
    (``scripts/native_keras.py``, ``scripts/native_flax.py``) and the native PyTorch models
    under ``torch.compile``, each checked to have xpseq's loss and Adam step first
``precision`` (only with ``--only precision``)
    mixed bfloat16 training against float32 on JAX and PyTorch, both model kinds, and the
    float32 and bfloat16 matmul rates
``scaling`` (only with ``--only scaling``)
    how training throughput and peak memory grow with the sequence length, the batch size
    and the model width, and greedy decoding with the batch size, on every engine; the
    length exponents; plots (``--scaling-*`` options, ``--plots-to``)

Threads: the process is pinned to ``--threads`` CPUs (every thread, BLAS and XLA pools
included; ``--no-pin`` to leave it), because XLA has no exact thread-count setting and
otherwise runs a large matmul on every core. The ``compile``, ``parallel`` and ``threads``
sections run on all the process's CPUs, as XLA compiles in parallel and two devices or
threads need two cores. PyTorch uses ``--threads`` intra-op threads; for ``--threads 1``
the script also adds ``--xla_cpu_multi_thread_eigen=false`` to ``XLA_FLAGS`` (unless
``XLA_FLAGS`` mentions it already) before JAX starts. ``OMP_NUM_THREADS``,
``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` are printed, not changed (set them before
starting Python); ``OPENBLAS_CORETYPE`` is never touched. The ``train`` rows give each
implementation's CPU seconds per wall second.

Precision: the process runs with JAX's defaults, 64-bit mode off (unless the caller set
``JAX_ENABLE_X64``), as a JAX user runs float32 code; the float64 checks that some sections
make first turn it on around themselves only (``jax.enable_x64``). ``bench.json`` says
which (``environment.jax_x64``).

Records: ``--record DIR`` also keeps the run in ``DIR`` as a new file (the date, time,
processor and sections in its name). ``benchmarks/results/`` holds the recorded runs the
documentation quotes; ``python -m scripts.bench_page`` makes the benchmarks page's figures
from them. Every results file has the command, the date, the machine (processor, its
``/proc/cpuinfo`` flags), the versions, the thread settings, every section's rows and
every timed repeat (``timings``: per section, one ``{implementation: [seconds, ...]}`` per
comparison).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import pathlib
import sys
import time
from typing import Sequence

from . import _common as common
from . import benchmarks
from .benchmarks.context import Context
from .benchmarks.page import page_options, page_section  # noqa: F401  (its page part)
from .benchmarks.shared import Row, environment, results_table

SECTIONS, EXTRA_SECTIONS = benchmarks.SECTIONS, benchmarks.EXTRA_SECTIONS
#: The sections that run on all the process's CPUs: XLA compiles on every core it may use,
#: and two devices or threads need two cores.
UNPINNED = ("compile", "parallel", "threads")


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
    p.add_argument("--record", metavar="DIR", default=None,
                   help="also keep the results in DIR (e.g. benchmarks/results, where the "
                        "documentation's figures come from), as a new file named by the "
                        "date, time, processor and sections; an existing file is never "
                        "replaced")
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
    benchmarks.section("scaling").add_options(p)
    g.add_argument("--no-torch-compile", dest="torch_compile", action="store_false",
                   help="peers: leave out torch.compile, native PyTorch's and xpseq's "
                        "(a cold compile takes minutes; timed unless given)")
    g.add_argument("--peers-numpy", action="store_true",
                   help="peers: also time xpseq on NumPy (the hand-derived backward), for "
                        "reference")
    g.add_argument("--peers-kinds", default="rnn,transformer",
                   help="peers: the model kinds to compare (comma-separated; default: both)")
    args = p.parse_args(argv)
    args.peers_kinds = common.comma_list(args.peers_kinds)
    if not args.peers_kinds or set(args.peers_kinds) - {"rnn", "transformer"}:
        p.error(f"--peers-kinds: choose from rnn, transformer; got {args.peers_kinds}")
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
    benchmarks.section("scaling").check_options(p, args)
    return args


def run_sections(context: Context, sections: Sequence[str]
                 ) -> tuple[list[Row], dict, dict]:
    """Run each of ``sections`` in the order of ``SECTIONS + EXTRA_SECTIONS``, printing its
    table; returns all the rows, each section's seconds and each section's timed repeats
    (``common.TIMINGS``: a list of ``{implementation: [wall seconds, ...]}``)."""
    affinity = context.affinity
    rows: list[Row] = []
    seconds: dict[str, float] = {}
    timings: dict[str, list] = {}
    for name in SECTIONS + EXTRA_SECTIONS:
        if name not in sections:
            continue
        start, timed = time.perf_counter(), len(common.TIMINGS)
        if name in UNPINNED:
            affinity.release()
        new = benchmarks.section(name).run(context)
        affinity.pin()
        seconds[name] = time.perf_counter() - start
        timings[name] = common.TIMINGS[timed:]
        print(f"\n[{name}] {seconds[name]:.1f} s")
        print(results_table(new))
        rows += new
    return rows, seconds, timings


def record(folder: str, data: dict) -> pathlib.Path:
    """Write ``data`` (the run's JSON) as a new file of ``folder``:
    ``<date>T<time>-<processor>-<sections>.json``; never replaces a file."""
    import json
    import re

    env = data["environment"]
    cpu = re.sub(r"[^a-z0-9]+", "-", (env.get("cpu") or "unknown-cpu").lower()).strip("-")
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    sections = "-".join(data["section_seconds"]) or "none"
    path = common.output_dir(folder) / f"{stamp}-{cpu[:40]}-{sections}.json"
    with open(path, "x", encoding="utf-8") as f:          # "x": an existing file is an error
        f.write(json.dumps(data, indent=1, default=common.json_default) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if "parallel" in args.sections:       # the host's cores as JAX devices, before JAX starts
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=2".strip()
    affinity = common.pin_threads(args.threads, args.pin)

    pinned = affinity.pinned
    command = common.command_line("bench", argv)
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
          f"jax {env['jax']} (jaxlib {env['jaxlib']}); load average "
          f"{env['load_average_start']}")
    print(f"machine: {common.machine_text(env)}")
    context = Context(args, affinity)
    # The backends are made before any section, while the process is pinned.
    backends = context.jax, context.torch  # noqa: F841
    print(f"model: embed {args.embed}, hidden {args.hidden} per direction, vocab "
          f"{context.config.src_vocab}/{context.config.tgt_vocab}, batch {args.batch}, "
          f"float32; {len(context.epoch)} batches per epoch; repeats {args.repeats}")
    import jax                       # loaded by the context; its 64-bit mode as the run had it

    env["jax_x64"] = bool(jax.config.jax_enable_x64)
    env["cpu_flags"] = common.cpu_flags()
    rows, seconds, timings = run_sections(context, args.sections)
    total = time.perf_counter() - started
    env["load_average_end"] = common.load_average(2)
    table = results_table(rows)
    judged = [r for r in rows if r.met is not None]
    print(f"\nall sections, {total:.0f} s (load average at the end "
          f"{env['load_average_end']}); {sum(r.met for r in judged)} of {len(judged)} "
          f"targets met:\n\n{table}")
    threads = (f"torch threads {env['torch_threads']}, pinned to CPUs {pinned}; "
               + common.settings_text(env["env"]))
    markdown = (
        f"{common.made_by(command)} in {total:.0f} s on {common.machine_text(env)}; "
        f"load average {env['load_average_start']} at the start; "
        f"{threads}; torch {env['torch']}, jax {env['jax']}, numpy {env['numpy']}.\n"
        f"Ratios are xpseq / reference (higher is better); each time is the median of "
        f"{args.repeats} repeats.\n\n{table}\n")
    data = {"command": command, "date": datetime.date.today().isoformat(), "seconds": total,
            "section_seconds": seconds,
            "args": {k: v for k, v in vars(args).items() if k != "sdpa_shape"},
            "environment": env, "rows": [dataclasses.asdict(r) for r in rows],
            "details": context.details(benchmarks.DETAILS), "timings": timings}
    md, js = common.write_report(common.output_dir(args.out), "bench", markdown, data, indent=2)
    print(f"\nwrote {md} and {js}")
    if args.record:
        print(f"recorded {record(args.record, data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
