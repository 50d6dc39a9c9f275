"""The G2P recipe end to end: train on the CMU dictionary, score the test split, write tables.

Run: ``python -m scripts.g2p_recipe`` (needs ``pip install "xpseq[g2p]"``, which
``make``'s set-up installs). ``make g2p`` runs the shipped model's recipe:
``--stress --runs rnn:1 --minutes 98``. On the seeded split (stress removed unless
``--stress``):

1. *train* each run of ``--runs`` (default: the Transformer, then the LSTM model; ``rnn:1``
   is the LSTM model of seed 1, ``rnn:3:distilled`` a student trained on the answers of a
   teacher) with ``xpseq.tasks.g2p_recipe.RECIPE`` for ``--minutes`` (default 45 for the
   Transformer and 60 for the LSTM model), data-parallel on ``--devices`` (default 2: the
   machine's two cores as two JAX devices), or side by side one per core (``--parallel``);
   the dev WER of greedy search after every epoch (the learning curve), the last epochs
   kept for averaging, the last state kept for ``--resume``;
2. *evaluate*: for each run, its best dev epoch and the average of its last epochs, scored
   on the dev words to choose; then the test words with greedy and beam search, and the
   ensemble of the runs' chosen models (log-probabilities averaged at every step); with
   ``--stress`` also scored with the stress digits removed;
3. *ship*: the model or ensemble with the lowest dev WER (``--ship-single``: the best
   single model) goes into the package (``xpseq/g2p/model``, float16 storage when that
   leaves the test WER unchanged), with ``shipped.json``: its files and its test scores,
   which ``xpseq g2p`` and the README use. A stressed model keeps the stress-free one that
   ships beside it for ``stress=False`` unless its dev WER with the digits removed is
   within 0.3 points of that one's.

Writes ``<out>/results.md`` (the tables, the learning curves and the command),
``<out>/results.json``, and per run ``<out>/<run>.safetensors`` (the best epoch),
``<out>/<run>.epoch<N>.safetensors`` (the last epochs), ``<out>/<run>.avg.safetensors``,
``<out>/<run>.state.safetensors`` (the last epoch's whole state) and ``<out>/<run>.run.json``
(its record). ``--phase train``, ``evaluate`` or ``ship`` runs one phase (each reads what
the one before wrote). A member trained in an earlier session may join an ensemble through
its record (``<run>.run.json`` with ``"averaged": [first, last]``, listed in
``training.json``) and its averaged model ``<run>.avg.safetensors`` alone.
``--train-words`` / ``--test-words`` cut the data for quick checks
(the results are then not comparable).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

from xpseq.app.cli import positive  # (imports no array library)

from . import _common as common

ROOT = pathlib.Path(__file__).resolve().parent.parent


def parse_args(argv=None) -> argparse.Namespace:
    p = common.script_parser(__doc__)
    p.add_argument("--runs", default="transformer,rnn",
                   help="comma-separated runs to train: a model kind (transformer, rnn), "
                   "or KIND:SEED for a run of that seed, named KIND-seedSEED (rnn:1,rnn:2: "
                   "two LSTM models, the members of an ensemble) (default: %(default)s)")
    p.add_argument("--teacher", type=lambda v: common.comma_list(v), default=None,
                   metavar="FILES", help="the teacher of the :distilled runs: checkpoints "
                   "in --out, comma-separated for an ensemble (default: the model that "
                   "--phase evaluate chose)")
    p.add_argument("--ship-single", action="store_true",
                   help="ship the single model with the lowest dev WER (no ensemble: one "
                   "model's decoding speed)")
    p.add_argument("--resume", action="store_true",
                   help="continue each run of --runs from its last epoch "
                   "(<out>/<run>.state.safetensors, written after every epoch) for "
                   "--minutes more, its learning curve and epoch files kept")
    p.add_argument("--parallel", action="store_true",
                   help="train the runs side by side, each in its own process on its own "
                   "core (one device, one thread each), instead of one after the other")
    p.add_argument("--phase", choices=("all", "train", "evaluate", "ship"), default="all",
                   help="train, evaluate (reads what train wrote), ship (copies the chosen "
                   "model into --ship-to), or all three (default)")
    p.add_argument("--ship-to", default=str(ROOT / "xpseq" / "g2p" / "model"),
                   help="the folder of the shipped model (default: the package's)")
    p.add_argument("--backend", default="jax", choices=("jax", "torch", "numpy"),
                   help="training and decoding backend (default: jax)")
    p.add_argument("--devices", type=positive(int), default=2,
                   help="data-parallel devices for training (default: 2)")
    p.add_argument("--minutes", default="transformer=45,rnn=60",
                   help="training minutes: one number for every run, or KIND=MINUTES pairs "
                   "(default: %(default)s)")
    p.add_argument("--stress", action="store_true", help="keep the stress marks")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="change a recipe option of every run (xpseq.tasks.g2p_recipe.RECIPE, "
                   "or the model kind's in MODELS), e.g. --set lr=2e-3 --set hidden=64")
    p.add_argument("--beam", type=int, default=5, help="beam size (default: 5)")
    p.add_argument("--dev-words", type=positive(int), default=None,
                   help="dev words scored after every epoch (default: all)")
    p.add_argument("--train-words", type=positive(int), default=None,
                   help="train on the first N training words only (quick checks)")
    p.add_argument("--test-words", type=positive(int), default=None,
                   help="score the first N test words only (quick checks)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/g2p", help="output folder (default: out/g2p)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    from xpseq.tasks.g2p_campaign import Run

    try:
        args.runs = [Run.parse(r).name for r in common.comma_list(args.runs)]
    except ValueError as err:
        p.error(f"--runs: {err}")
    if not args.runs:
        p.error("--runs names no run")
    if len(set(args.runs)) < len(args.runs):
        p.error(f"--runs names a run twice: {args.runs}")
    common.require_at_least(p, args, ("beam",), 2, "greedy search is always scored")
    try:
        if "=" in args.minutes:
            pairs = [item.split("=") for item in common.comma_list(args.minutes)]
            args.minutes = {k: positive(float)(v) for k, v in pairs}
        else:
            args.minutes = dict.fromkeys({Run.from_name(r).kind for r in args.runs},
                                         positive(float)(args.minutes))
    except (ValueError, argparse.ArgumentTypeError) as err:
        p.error(f"--minutes takes a positive number or KIND=MINUTES pairs: {err}")
    missing = sorted({Run.from_name(r).kind for r in args.runs} - set(args.minutes))
    if missing:
        p.error(f"--minutes gives no time for {missing}")
    args.overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            p.error(f"--set takes KEY=VALUE, got {item!r}")
        try:
            args.overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            args.overrides[key] = value
    return args


def load_split(args: argparse.Namespace):
    from xpseq.data.cmudict import G2PSplit, load_g2p

    split = load_g2p(stress=args.stress, seed=0)
    if args.train_words is None:
        return split
    keep = dict(list(split.train.items())[:args.train_words])
    return G2PSplit(train=keep, dev=split.dev, test=split.test, stress=split.stress,
                    seed=split.seed)


def train_runs(args: argparse.Namespace, campaign, argv: list[str] | None = None) -> None:
    """Train each run of ``--runs`` (one after the other, or side by side with
    ``--parallel``); ``<out>/training.json`` lists the records of every run there (those
    of earlier calls too: train one run again alone)."""
    from xpseq.tasks.g2p_campaign import Run

    if args.parallel and len(args.runs) > 1:
        train_side_by_side(args, campaign.out, argv)
    else:
        for name in args.runs:
            run = Run.from_name(name)
            campaign.train(run, minutes=args.minutes[run.kind], overrides=args.overrides,
                           devices=args.devices, resume=args.resume,
                           progress=not args.no_progress, teacher=args.teacher)
    records = campaign.records()
    common.write_report(campaign.out, "training", json.dumps(
        records, indent=1, default=common.json_default), records, indent=1)


def train_side_by_side(args: argparse.Namespace, out: pathlib.Path,
                       argv: list[str] | None) -> None:
    """``--parallel``: each run in a process of this script (``--phase train``, that run
    alone, one device), pinned to a core of its own while there are cores enough (then
    round robin), with one XLA and one BLAS thread; its output goes to
    ``<out>/<run>.log``. Waits for all; a run that fails is an error naming its log."""
    argv = list(sys.argv[1:] if argv is None else argv)
    drop = {"--runs", "--phase", "--devices"}
    base, skip = [], False
    for item in argv:                                # this call's options, less those
        if skip:
            skip = False
            continue
        key = item.split("=", 1)[0]
        if key in drop:
            skip = "=" not in item
            continue
        if key == "--parallel":
            continue
        base.append(item)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [None]
    env = {**os.environ, "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "")
                                       + " --xla_cpu_multi_thread_eigen=false").strip(),
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    from xpseq.tasks.g2p_campaign import Run

    running = []
    for i, name in enumerate(args.runs):
        spec = Run.from_name(name).spec(args.seed)
        command = [sys.executable, "-m", __spec__.name, *base,
                   "--runs", spec, "--phase", "train", "--devices", "1"]
        core = cores[i % len(cores)]
        log = open(out / f"{name}.log", "w", encoding="utf-8")
        running.append((name, log, subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT,
            env={**env, "XPSEQ_RECIPE_CORE": "" if core is None else str(core)})))
        print(f"   {name}: started on core {core}, log {out / f'{name}.log'}", flush=True)
    failed = []
    for name, log, process in running:
        if process.wait() != 0:
            failed.append(name)
        log.close()
    if failed:
        raise RuntimeError(f"--parallel: the run(s) {failed} failed; see "
                           + ", ".join(str(out / f"{n}.log") for n in failed))


def main(argv=None) -> int:
    args = parse_args(argv)
    core = os.environ.pop("XPSEQ_RECIPE_CORE", "")
    if core and hasattr(os, "sched_setaffinity"):        # a run of --parallel: its core
        os.sched_setaffinity(0, {int(core)})
    if args.backend == "jax" and args.devices > 1:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = (f"{flags} --xla_force_host_platform_device_count="
                                       f"{args.devices}").strip()
    from xpseq import backends

    backend = backends.get(args.backend)
    if args.backend == "torch":
        import torch
        torch.set_num_threads(1)
    from xpseq.tasks.g2p_campaign import Campaign, report

    campaign = Campaign(common.output_dir(args.out), load_split(args), backend, seed=args.seed,
                        beam=args.beam, dev_words=args.dev_words, test_words=args.test_words,
                        log=lambda line: print(line, flush=True))
    command = common.command_line("g2p_recipe", argv)
    print(f"{command} ({common.machine_text()})", flush=True)
    if args.phase in ("all", "train"):
        train_runs(args, campaign, argv)
    if args.phase in ("all", "evaluate"):
        results = campaign.evaluate(args.runs, single=args.ship_single)
        text = report(results, f"{common.made_by(command)} ({common.machine_text()}; "
                               "float32).")
        md, js = common.write_report(campaign.out, "results", text + "\n", results, indent=1)
        print("\n" + text)
        print(f"wrote {md} and {js}")
    if args.phase in ("all", "ship"):
        results = json.loads((campaign.out / "results.json").read_text(encoding="utf-8"))
        manifest = campaign.ship(results, args.ship_to, command=command)
        print(f"shipped {manifest['model']} ({manifest['storage']}) to {args.ship_to}: test "
              f"WER {manifest['scores']['greedy']['wer']:.2f} % greedy", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
