"""The G2P recipe end to end: train on the CMU dictionary, score the test split, write tables.

Run: ``python scripts/g2p_recipe.py`` (needs ``pip install "xpseq[g2p]"``, which
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
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # scripts/: _common
import _common as common  # noqa: E402

from xpseq.app.cli import positive  # noqa: E402  (imports no array library)


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


def teacher_split(args: argparse.Namespace, backend, split, out: pathlib.Path):
    """The split whose training words are pronounced by the teacher (each word once, its
    answer the teacher's greedy search): what a ``:distilled`` run trains on (Kim & Rush
    2016, sequence-level knowledge distillation). The teacher is ``--teacher`` (files in
    ``--out``), by default the model that ``--phase evaluate`` chose (``results.json``);
    its answers are written once to ``<out>/teacher.tsv`` and read back after."""
    from xpseq import g2p as g2p_models
    from xpseq.data.cmudict import G2PSplit

    path = out / "teacher.tsv"
    if not path.is_file():
        files = args.teacher or json.loads((out / "results.json").read_text(
            encoding="utf-8"))["choice"]["files"]
        teacher = g2p_models.G2P([out / f for f in files], backend=backend)
        words = list(split.train)
        start = time.perf_counter()
        answers = teacher.pronounce(words, lookup=False)
        print(f"   teacher {' + '.join(files)}: {len(words)} training words in "
              f"{time.perf_counter() - start:.0f} s", flush=True)
        path.write_text("".join(f"{w}\t{' '.join(a)}\n" for w, a in zip(words, answers)),
                        encoding="utf-8")
    train = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        word, _, phones = line.partition("\t")
        train[word] = phones.split()
    missing = [w for w in split.train if w not in train]
    if missing:
        raise ValueError(f"{path} lacks {len(missing)} training words (from another "
                         "split? remove it to decode them again)")
    # A word the teacher gave no phones keeps its dictionary pronunciations.
    return G2PSplit(train={w: [tuple(train[w])] if train[w] else split.train[w]
                           for w in split.train}, dev=split.dev, test=split.test,
                    stress=split.stress, seed=split.seed)


def load_split(args: argparse.Namespace):
    from xpseq.data.cmudict import G2PSplit, load_g2p

    split = load_g2p(stress=args.stress, seed=0)
    if args.train_words is None:
        return split
    keep = dict(list(split.train.items())[:args.train_words])
    return G2PSplit(train=keep, dev=split.dev, test=split.test, stress=split.stress,
                    seed=split.seed)


def train_runs(args: argparse.Namespace, backend, split, out: pathlib.Path,
               argv: list[str] | None = None) -> list[dict]:
    """Train each run of ``--runs`` (one after the other, or side by side with
    ``--parallel``); each run's record (recipe, learning curve) goes to
    ``<out>/<run>.run.json``, and ``<out>/training.json`` lists the records of every run
    there (those of earlier calls too: train one run again alone)."""
    from xpseq.tasks import g2p_recipe

    known = set(g2p_recipe.RECIPE).union(*g2p_recipe.MODELS.values())
    unknown = sorted(set(args.overrides) - known)
    if unknown:
        raise ValueError(f"--set: unknown recipe options {unknown}; known: {sorted(known)}")
    if args.parallel and len(args.runs) > 1:
        train_side_by_side(args, out, argv)
    else:
        for name in args.runs:
            data = (teacher_split(args, backend, split, out) if name.endswith("-distilled")
                    else split)
            train_one(args, backend, data, out, name)
    records = [json.loads(p.read_text(encoding="utf-8"))
               for p in sorted(out.glob("*.run.json"))]
    common.write_report(out, "training", json.dumps(records, indent=1,
                                                    default=common.json_default),
                        records, indent=1)
    return records


def train_one(args: argparse.Namespace, backend, split, out: pathlib.Path, name: str) -> dict:
    from xpseq.tasks import g2p_recipe
    from xpseq.tasks.g2p_campaign import Run
    from xpseq.train import callbacks as cb
    from xpseq.train import checkpoint

    class LastState(cb.SaveCheckpoint):
        """After every epoch the run's whole state (parameters, optimiser, progress), for
        ``--resume``; never the best epoch's parameters that the run ends with."""

        def on_train_end(self, loop) -> None:
            pass

    run = Run.from_name(name)
    kind, seed = run.kind, run.seed_or(args.seed)
    # A model option of the other kind is not this run's.
    mine = {k: v for k, v in args.overrides.items()
            if k in g2p_recipe.RECIPE or k in g2p_recipe.MODELS[kind]}
    print(f"\n== {name}: {len(split.train)} train / {len(split.dev)} dev words, "
          f"{backend.name} on {args.devices} device(s), seed {seed}, "
          f"{args.minutes[kind]} min", flush=True)
    state_path, record_path = out / f"{name}.state.safetensors", out / f"{name}.run.json"
    resumed, before = None, 0.0
    if args.resume:
        if not state_path.is_file():
            raise FileNotFoundError(f"--resume: {state_path} is missing (run {name} was "
                                    f"not trained in {out})")
        resumed = checkpoint.load(state_path)
        if record_path.is_file():
            earlier = json.loads(record_path.read_text(encoding="utf-8"))
        else:                  # a run stopped before its end wrote no record: the state's
            history = [{**h, "minutes": h["elapsed"] / 60}
                       for h in resumed.train_state["history"]]
            earlier = {"history": history,
                       "train_minutes": history[-1]["minutes"] if history else 0.0}
        before = earlier["train_minutes"]
        print(f"   resumed from {state_path.name}: epoch {resumed.train_state['epoch']}, "
              f"step {resumed.train_state['step']}, {before:.1f} minutes so far", flush=True)
    else:
        for old in out.glob(f"{name}.epoch*.safetensors"):    # an earlier run's
            old.unlink()
    task = g2p_recipe.g2p_task(split)
    last = LastState(state_path, vocabs={"src": task.src_vocab.to_list(),
                                         "tgt": task.tgt_vocab.to_list()})
    start = time.perf_counter()
    config, result, task = g2p_recipe.train(
        split, backend, checkpoint=str(out / f"{name}.safetensors"), seed=seed,
        progress=not args.no_progress, dev_words=args.dev_words, devices=args.devices,
        callbacks=[last], resume=resumed,
        **{**mine, "model": kind, "time_limit_minutes": args.minutes[kind]})
    # Minutes since the run began: an earlier call's epochs keep theirs.
    prior = {h["epoch"]: h["minutes"] for h in earlier["history"]} if resumed else {}
    for h in result.history:
        h["minutes"] = prior.get(h["epoch"], before + h["elapsed"] / 60)
    options, fields = g2p_recipe.recipe(**{**mine, "model": kind})
    keep = options["keep_epochs"]
    epochs = sorted(out.glob(f"{name}.epoch*.safetensors"),
                    key=lambda p: int(p.suffixes[-2][len(".epoch"):]))
    for old in epochs[:max(len(epochs) - keep, 0)]:      # a resumed run's older ones
        old.unlink()
    record = {"name": name, "kind": kind, "seed": seed,
              "distilled": name.endswith("-distilled"),
              "recipe": {**options, **fields, "devices": args.devices,
                         "time_limit_minutes": args.minutes[kind]},
              "parameters": int(sum(v.size for v in result.params.values())),
              "train_pairs": len(task.train),
              "train_minutes": before + (time.perf_counter() - start) / 60,
              "resumed": (earlier.get("resumed", 0) + 1) if resumed is not None else 0,
              "epochs": len(result.history), "best_epoch": result.best_epoch,
              "stopped": result.stopped, "history": result.history}
    (out / f"{name}.run.json").write_text(json.dumps(record, indent=1,
                                                     default=common.json_default) + "\n",
                                          encoding="utf-8")
    return record


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
        command = [sys.executable, str(pathlib.Path(__file__).resolve()), *base,
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


#: The first recipe's test scores (an LSTM, constant step size halved on plateaus, early
#: stopping on the dev WER; 45 minutes on one core): the first row of the ablation.
FIRST_RECIPE_SCORES = {"greedy": (6.94, 28.63), "beam": (6.84, 28.39)}

#: Published results on the CMU dictionary, for context only: older dictionary versions
#: and other splits (PER %, WER %).
PUBLISHED = [
    ("Sequitur joint-sequence (Bisani & Ney 2008)", "5.88", "24.53",
     "CMUdict 106,837 / 12,000 split, no stress"),
    ("Yao & Zweig 2015, bi-LSTM", "5.45", "23.55", "same split"),
    ("Toshniwal & Livescu 2016, global attention ensemble", "4.69", "20.24", "same split"),
    ("CMUSphinx g2p-seq2seq, Transformer", "", "30.2", "current dictionary, its own split"),
    ("Phonetisaurus", "", "33.9", "current dictionary, its own split"),
]


def evaluate_runs(args: argparse.Namespace, backend, split, out: pathlib.Path) -> dict:
    from xpseq.search import SearchOptions
    from xpseq.tasks.g2p_campaign import choose, score
    from xpseq.train import checkpoint

    greedy = ("greedy", SearchOptions())
    beam = (f"beam k={args.beam}", SearchOptions(method="beam", k=args.beam,
                                                 length_penalty="avg"))
    runs = json.loads((out / "training.json").read_text(encoding="utf-8"))
    runs = [r for r in runs if r.get("name", r["kind"]) in args.runs]

    rows, chosen, options = [], [], []
    for run in runs:
        kind = run.get("name", run["kind"])          # the run's file stem
        epochs = sorted(out.glob(f"{kind}.epoch*.safetensors"),
                        key=lambda p: int(p.suffixes[-2][len(".epoch"):]))
        files = {}                                   # candidate -> its file in out
        if (out / f"{kind}.safetensors").is_file():
            files[f"{kind}, best epoch ({run['best_epoch']})"] = f"{kind}.safetensors"
        if len(epochs) > 1:
            averaged = checkpoint.average(epochs)
            checkpoint.save(out / f"{kind}.avg.safetensors", config=averaged.config,
                            params=averaged.params, vocabs=averaged.vocabs,
                            train_state=averaged.train_state, metadata=averaged.metadata)
            first, last = (int(p.suffixes[-2][len(".epoch"):]) for p in (epochs[0], epochs[-1]))
            files[f"{kind}, average of epochs {first}-{last}"] = f"{kind}.avg.safetensors"
            if run.get("averaged") != [first, last]:     # so that it may join later
                run["averaged"] = [first, last]
                (out / f"{kind}.run.json").write_text(json.dumps(
                    run, indent=1, default=common.json_default) + "\n", encoding="utf-8")
        elif run.get("averaged") and (out / f"{kind}.avg.safetensors").is_file():
            # A member of an earlier session: its average (and record) kept, its epochs not.
            first, last = run["averaged"]
            files[f"{kind}, average of epochs {first}-{last}"] = f"{kind}.avg.safetensors"
        if not files:
            raise FileNotFoundError(f"{out}: run {kind} has no checkpoint to score (its "
                                    f"{kind}.safetensors or epoch files)")
        dev = {}
        for name, file in files.items():
            dev[name] = score([out / file], split, backend, "dev", greedy, args.dev_words)
            test = score([out / file], split, backend, "test", greedy, args.test_words)
            rows.append({"model": name, "dev_wer": dev[name]["wer"], **test})
            print(f"   {name}: dev WER {dev[name]['wer']:.2f} %, test greedy PER "
                  f"{test['per']:.2f} % WER {test['wer']:.2f} %", flush=True)
        name = min(dev, key=lambda n: dev[n]["wer"])
        test = score([out / files[name]], split, backend, "test", beam, args.test_words)
        rows.append({"model": name, "dev_wer": dev[name]["wer"], **test})
        print(f"   {name}, {beam[0]}: test PER {test['per']:.2f} % WER {test['wer']:.2f} %",
              flush=True)
        if not run.get("distilled"):             # a student is no ensemble member
            chosen.append((name, files[name]))
        options.append({"model": name, "files": [files[name]], "dev_wer": dev[name]["wer"],
                        "dev_wer_no_stress": dev[name].get("wer_no_stress"),
                        "member": not run.get("distilled")})
    if len(chosen) > 1:
        ensemble = [out / file for _, file in chosen]
        name = "ensemble: " + " + ".join(n for n, _ in chosen)
        on_dev = score(ensemble, split, backend, "dev", greedy, args.dev_words)
        dev_wer = on_dev["wer"]
        for search in (greedy, beam):
            test = score(ensemble, split, backend, "test", search, args.test_words)
            rows.append({"model": name, "dev_wer": dev_wer, **test})
            print(f"   {name}, {search[0]}: test PER {test['per']:.2f} % WER "
                  f"{test['wer']:.2f} %", flush=True)
        options.append({"model": name, "files": [f for o in options if o["member"]
                                                 for f in o["files"]], "dev_wer": dev_wer,
                        "dev_wer_no_stress": on_dev.get("wer_no_stress")})
    return {"runs": runs, "rows": rows, "options": options,
            "choice": dict(choose(options, single=args.ship_single))}


def ship(args: argparse.Namespace, backend, split, out: pathlib.Path, results: dict,
         command: str) -> dict:
    """Copy the chosen model into the package folder ``--ship-to`` with float16 storage if
    that leaves its greedy dev WER within ``g2p_campaign.FLOAT16_TOLERANCE`` points of
    float32's (else float32; the test words take no part), and write the manifest
    ``shipped.json`` (``g2p_campaign.manifest``) with the stored model's test scores."""
    from xpseq.search import SearchOptions
    from xpseq.tasks.g2p_campaign import manifest as shipped_manifest
    from xpseq.tasks.g2p_campaign import score, stores_in_float16, stress_free_beside
    from xpseq.train import checkpoint

    choice = results["choice"]
    folder = pathlib.Path(args.ship_to)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "shipped.json"
    previous = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    plain, why = stress_free_beside(previous, choice, stress=args.stress)
    if previous is not None and args.stress:
        print(f"   {why}", flush=True)
    searches = [("greedy", SearchOptions()),
                (f"beam k={args.beam}", SearchOptions(method="beam", k=args.beam,
                                                      length_penalty="avg"))]
    float32_wer = choice["dev_wer"]

    def store(dtype: str) -> tuple[list[str], dict]:
        for old in folder.glob("*.safetensors"):
            if plain is None or old.name not in plain["files"]:
                old.unlink()
        names = []
        for name in choice["files"]:
            ckpt = checkpoint.load(out / name)
            target = folder / name.replace(".avg", "")
            if plain is not None and target.name in plain["files"]:
                raise ValueError(f"ship: {target.name} is the name of the model without "
                                 "stress that ships beside it")
            checkpoint.save(target, config=ckpt.config, vocabs=ckpt.vocabs,
                            params={k: v.astype(dtype) for k, v in ckpt.params.items()},
                            metadata={**(ckpt.metadata or {}), "shipped_from": name})
            names.append(target.name)
        stored = [folder / n for n in names]              # as a user loads them
        dev_wer = score(stored, split, backend, "dev", searches[0], args.dev_words)["wer"]
        if dtype == "float16" and not stores_in_float16(float32_wer, dev_wer):
            return names, {"dev_wer": dev_wer}
        scores = {}
        for label, options in searches:
            row = score(stored, split, backend, "test", (label, options), args.test_words)
            scores[label] = {k: v for k, v in row.items() if k != "search"}
        return names, {**scores, "dev_wer": dev_wer}

    dtype = "float16"
    names, scores = store(dtype)
    print(f"   float16 storage: greedy dev WER {float32_wer:.2f} -> {scores['dev_wer']:.2f} %",
          flush=True)
    if "greedy" not in scores:
        print("   (more than the tolerance): shipping float32", flush=True)
        dtype = "float32"
        names, scores = store(dtype)
    scores.pop("dev_wer")
    manifest = shipped_manifest(names, choice, stress=args.stress, storage=dtype,
                                scores=scores, command=command, no_stress=plain)
    (folder / "shipped.json").write_text(json.dumps(manifest, indent=1) + "\n",
                                         encoding="utf-8")
    return manifest


def markdown(results: dict, command: str) -> str:
    from xpseq.tasks.metrics import format_table

    lines = [f"{common.made_by(command)} ({common.machine_text()}; float32).", ""]
    table = [["first recipe: LSTM, step size halved on plateaus (earlier run)", "",
              "greedy", *FIRST_RECIPE_SCORES["greedy"], ""],
             ["first recipe: LSTM, step size halved on plateaus (earlier run)", "",
              "beam k=5", *FIRST_RECIPE_SCORES["beam"], ""]]
    stress = any("wer_no_stress" in r for r in results["rows"])
    for r in results["rows"]:
        table.append([r["model"], f"{r['dev_wer']:.2f}", r["search"], f"{r['per']:.2f}",
                      f"{r['wer']:.2f}", r["words"]] + ([
                          f"{r['per_no_stress']:.2f}", f"{r['wer_no_stress']:.2f}"]
                          if stress else []))
    if stress:
        table = [row + ["", ""] if len(row) == 6 else row for row in table]
        lines += ["With stress kept (dev WER and the first columns: stress digits must match; "
                  "the last two: the predictions' digits and the references' removed).", ""]
    lines += [format_table(["model", "dev WER %", "search", "test PER %", "test WER %",
                            "test words"] + (["test PER % (stress removed)",
                                              "test WER % (stress removed)"] if stress else []),
                           table), ""]
    for run in results["runs"]:
        lines += [f"Learning curve, {run.get('name', run['kind'])} ({run['parameters']:,} "
                  f"parameters, seed {run.get('seed', 0)}, "
                  f"{run['recipe']['devices']} devices, stopped: {run['stopped']}; dev "
                  "WER/PER: greedy search on the dev words after every epoch):", ""]
        curve = [[f"{h['epoch']}{' (best)' if h['epoch'] == run['best_epoch'] else ''}",
                  f"{h['minutes']:.1f}", h["steps"], f"{h['train_loss']:.4f}",
                  f"{h['dev_loss']:.4f}", h.get("dev_per", ""), h.get("dev_wer", "")]
                 for h in run["history"]]
        lines += [format_table(["epoch", "minutes", "steps", "train loss", "dev loss",
                                "dev PER %", "dev WER %"], curve), ""]
    lines += ["Published results, for context only (older dictionary, other splits):", "",
              format_table(["system", "PER %", "WER %", "data"], PUBLISHED), ""]
    return "\n".join(lines)


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
    out = common.output_dir(args.out)
    split = load_split(args)
    print(f"{common.command_line('g2p_recipe.py', argv)} ({common.machine_text()})",
          flush=True)
    command = common.command_line("g2p_recipe.py", argv)
    if args.phase in ("all", "train"):
        train_runs(args, backend, split, out, argv)
    if args.phase in ("all", "evaluate"):
        results = evaluate_runs(args, backend, split, out)
        text = markdown(results, command)
        md, js = common.write_report(out, "results", text + "\n", results, indent=1)
        print("\n" + text)
        print(f"wrote {md} and {js}")
    if args.phase in ("all", "ship"):
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
        manifest = ship(args, backend, split, out, results, command)
        print(f"shipped {manifest['model']} ({manifest['storage']}) to {args.ship_to}: test "
              f"WER {manifest['scores']['greedy']['wer']:.2f} % greedy", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
