"""``xpseq train``: the toy task, a TSV corpus or the G2P recipe, on one process or several
(``--devices``), its outputs checked and locked, ``--resume`` of the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any, Iterator, Sequence

from xpseq import backends, models
from xpseq.data import tokens
from xpseq.io import files
from xpseq.models.protocol import check_fits

from .. import options as opts
from .. import outputs
from ..errors import CommandError, explain_interruption, was_interrupted
from . import train_config, train_options
from .common import command_backend, g2p_split, read_tsv, toy_task_for


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``xpseq train``'s parser and options."""
    p = sub.add_parser("train", help="train a model and save a checkpoint",
                       description="Train an rnn or a Transformer (--model) on the toy task, "
                       "a TSV corpus or the CMU dictionary (--task) and write the checkpoint "
                       "--out M.safetensors as it trains, with a metrics log beside it "
                       "(M.metrics.csv). Toy and TSV runs stop early after 3 epochs without "
                       "a better dev loss; --task g2p follows its recipe. --config FILE.toml "
                       "takes the options from a file; --resume continues a run.")
    train_options.add_options(p, "training backend " + opts.DEFAULT_BACKEND)
    p.set_defaults(func=run, check=check, parser=p)
    return p


def defaults(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any] | None:
    """The options of ``--config FILE`` or of the run ``--resume`` continues, as the
    parser's defaults (:func:`~xpseq.app.commands.train_config.file_defaults`); ``None``
    without either."""
    return train_config.file_defaults(args, argv)


def check(args: argparse.Namespace) -> None:
    """``--out`` (required, except with ``--resume``, which continues its checkpoint) and
    ``--compile`` with torch only."""
    args.out = args.out or args.resume
    if not args.out:
        args.parser.error("the following arguments are required: --out")
    opts.check_compile(args)


def _parallel_backend(args: argparse.Namespace) -> backends.Backend | None:
    """The backend for ``train --devices N`` (N > 1). JAX: the host's cores become N CPU
    devices (``--xla_force_host_platform_device_count``, set before JAX starts). PyTorch:
    inside a process group (``torchrun``, or one this function started) the backend;
    otherwise it starts N processes that each run this command in a ``gloo`` group, waits
    for them and returns ``None``."""
    try:
        name = args.backend or ("torch" if args.compile else backends.default_name())
    except ValueError as err:
        raise CommandError(str(err)) from None
    if name not in ("jax", "torch"):
        raise CommandError(f"--devices {args.devices}: data parallelism needs --backend jax "
                           f"or torch; {name} trains on one process")
    if name == "jax":
        processes = _jax_processes(args.devices)
        local = args.devices // (processes[1] if processes else 1)
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags and "jax" not in sys.modules:
            os.environ["XLA_FLAGS"] = (f"{flags} --xla_force_host_platform_device_count="
                                       f"{local}").strip()
        backend = command_backend("jax")
        if processes:
            coordinator, count, index = processes
            backend.join_processes(coordinator, count, index)
            if index != 0:                               # one process prints and writes
                sys.stdout = sys.stderr = open(os.devnull, "w")
                args.writes = False
        return command_backend(name)
    from xpseq.train import parallel

    backend = command_backend(name, args.compile)
    group = backend.process_group()
    if group is None and "WORLD_SIZE" in os.environ:
        group = parallel.join_group()                          # started by torchrun
    if group is not None:
        if group[0] != 0:                                # one process prints and writes
            sys.stdout = sys.stderr = open(os.devnull, "w")
            args.writes = False
        return backend
    call = args.invocation
    parallel.spawn(_main_in_group, args.devices, call.entry, call.argv)
    return None


def _jax_processes(devices: int) -> tuple[str, int, int] | None:
    """``(coordinator, processes, this process's index)`` from ``XPSEQ_COORDINATOR``
    (``HOST:PORT`` of process 0), ``XPSEQ_PROCESSES`` and ``XPSEQ_PROCESS_ID``, for a JAX
    run over several machines (each runs the same command); ``None`` when unset."""
    names = ("XPSEQ_COORDINATOR", "XPSEQ_PROCESSES", "XPSEQ_PROCESS_ID")
    given = [n for n in names if os.environ.get(n)]
    if not given:
        return None
    if len(given) < 3:
        raise CommandError(f"a JAX run over several processes needs {', '.join(names)}; "
                           f"only {', '.join(given)} set")
    try:
        count, index = (int(os.environ[n]) for n in names[1:])
    except ValueError:
        raise CommandError("XPSEQ_PROCESSES and XPSEQ_PROCESS_ID must be integers") from None
    if count < 1 or not 0 <= index < count:
        raise CommandError(f"XPSEQ_PROCESS_ID must lie in [0, XPSEQ_PROCESSES = {count}), "
                           f"got {index}")
    if devices % count:
        raise CommandError(f"--devices {devices} must be a multiple of XPSEQ_PROCESSES "
                           f"({count}): each process brings as many devices")
    return os.environ["XPSEQ_COORDINATOR"], count, index


def _main_in_group(entry: Any, argv: Sequence[str]) -> None:
    """One process of ``train --devices N`` on torch: the command's entry point ``entry``
    (``xpseq.app.cli.main``: ``args.invocation``) on ``argv``, failing loudly."""
    code = entry(argv)
    if code:
        raise SystemExit(code)


def run(args: argparse.Namespace) -> int:
    if args.allow_data_change and not args.resume:
        raise CommandError("--allow-data-change is an option of --resume")
    inputs = {"--config": args.config, "--train": args.train_file, "--dev": args.dev_file}
    _check_names(args)                    # before anything is made (check_outputs makes
    outputs.check_outputs(args, inputs)   # the folder), any work, other processes started
    resumes_out = bool(args.resume) and os.path.exists(args.out) and os.path.samefile(
        args.resume, args.out)
    if args.force or resumes_out:         # checked above: the run may replace them
        for path in outputs.train_outputs(args.out).values():
            files.declare_output(path)    # (--resume M --out M continues M)
    args.writes = True                    # this process writes the checkpoint
    backend = (_parallel_backend(args) if args.devices > 1
               else command_backend(args.backend, args.compile))
    if backend is None:                   # the processes of a torch group did the work
        return 0
    if not args.writes:
        return _train(args, backend)
    with files.Lock(args.out):
        return _train(args, backend)


def _check_names(args: argparse.Namespace) -> None:
    """Refuse an ``--out`` whose name, or that of a file the run writes beside it (the
    metrics log, the TensorBoard folder, and with ``--task g2p`` the parameters of each
    epoch kept for averaging), is too long for its file system (:func:`files.check_name`):
    it would fail only once the training is done."""
    names = outputs.train_outputs(args.out)
    if args.task == "g2p":
        from xpseq.tasks.g2p_recipe import RECIPE
        from xpseq.train.callbacks import SaveCheckpoint

        epochs = args.epochs or RECIPE["epochs"]      # the longest name of an epoch's file
        names["the parameters of an epoch"] = SaveCheckpoint(args.out).epoch_path(epochs)
    for what, path in names.items():
        files.check_name(path, what="--out " + args.out + ("" if what == "--out" else
                                                           f" ({what} beside it)"))


#: The most distinct batch shapes an epoch of ``--task tsv`` has on a backend that compiles
#: each new shape (JAX; torch with ``--compile``), as the demo bounds its own: on an
#: 800-pair corpus, 2 epochs on JAX from a cold compilation cache took 30.3-30.8 s with the
#: 5 shapes the lengths gave and 17.8-23.2 s with 3, for 7.7 % more padded positions (on
#: NumPy and eager PyTorch the batches keep their own lengths).
TSV_COMPILED_SHAPES = 3


def _train(args: argparse.Namespace, backend: backends.Backend) -> int:
    """``train`` on ``backend``, once the outputs are checked (and locked)."""
    from xpseq.tasks import model_config, task_from_pairs, train_model
    from xpseq.tasks.experiment import training_config
    from xpseq.train.callbacks import EarlyStopping
    from xpseq.train.step import check_gradients, training_precision

    opts.precision_of(args).compute_dtype(backend.xp)   # no bfloat16: refused first
    try:                  # numpy has no autodiff; bfloat16 is trained by autodiff only
        gradients = check_gradients(backend, args.gradients, args.model or "rnn",
                                    opts.precision_of(args))
        if args.gradients is not None:
            training_precision(backend, gradients, opts.precision_of(args))
    except ValueError as err:
        raise CommandError(f"--gradients {args.gradients}: {err}") from None
    resumed = _resumed(args)
    data_files = {name: outputs.fingerprint(path)
                  for name, path in outputs.data_files(args).items()
                  if path and os.path.isfile(path)}    # (what is not is refused when read)
    if resumed is not None:
        outputs.check_same_data(args, resumed, data_files)
    if args.length is not None and args.task != "rot13":
        raise CommandError(f"--length is an option of --task rot13, not --task {args.task}")
    if args.vocab_size is not None and args.task != "tsv":
        raise CommandError(f"--vocab-size is an option of --task tsv with --tokens bpe or "
                           f"unigram, not --task {args.task}")
    if args.task == "g2p":
        return _train_g2p(args, backend, resumed, data_files)
    kind = args.model = args.model or "rnn"
    defaults = train_options.kind_defaults(kind)
    foreign = [f"--{n.replace('_', '-')}" for n in train_options.KIND_OPTIONS
               if n not in defaults and getattr(args, n) is not None]
    if foreign:
        raise CommandError(f"{', '.join(sorted(foreign))}: not an option of --model {kind}")
    if args.stress:
        raise CommandError("--stress is an option of --task g2p (the CMU dictionary's "
                           "stress marks)")
    if args.monitor == "dev_wer":
        raise CommandError("--monitor dev_wer is the G2P word error rate, an option of "
                           f"--task g2p; --task {args.task} watches dev_loss")
    if args.task == "toy":
        from xpseq.app.demo import FULL, QUICK

        spec = dict((QUICK if args.quick else FULL)["data"], seed=args.seed)
        shapes = (QUICK if args.quick else FULL)["shapes"]     # the demo's batch shapes
        task = toy_task_for(spec)
        metadata = {"task": "toy", "data": spec}
    elif args.task == "rot13":
        from xpseq.tasks.rot13 import DEFAULTS, SHAPES, rot13_task

        shapes = SHAPES                                 # compilations on JAX
        if args.train_file or args.dev_file or args.quick:
            raise CommandError("--task rot13 draws its strings; --train, --dev and --quick "
                               "are options of the other tasks")
        spec = dict(DEFAULTS, length=args.length or DEFAULTS["length"], seed=args.seed)
        task = rot13_task(**spec)
        metadata = {"task": "rot13", "data": spec}
    else:
        # each batch shape is a compilation where the backend compiles (JAX, --compile)
        shapes = TSV_COMPILED_SHAPES if backend.capabilities.compile != "none" else None
        if not args.train_file or not args.dev_file:
            raise CommandError("--task tsv needs --train FILE and --dev FILE")
        sides = _token_sides(args, resumed)
        train = read_tsv(args.train_file, sides, "--train")
        dev = read_tsv(args.dev_file, sides, "--dev")
        task = task_from_pairs(train, dev, {})
        # per side, [source, target] (and a subword side's tokenizer): how every door
        # splits and joins text for the model
        metadata = {"task": "tsv", **tokens.metadata_of(sides)}
    metadata["data_files"] = data_files
    if resumed is not None and resumed.vocabs:     # the run keeps its vocabularies
        from xpseq.data import Vocab
        from xpseq.tasks import Task

        task = Task(task.train, task.dev, task.test, Vocab.from_list(resumed.vocabs["src"]),
                    Vocab.from_list(resumed.vocabs["tgt"]))
    options = {name: getattr(args, name) for name in defaults}
    options.update({k: v for k, v in defaults.items() if options[k] is None})
    config = model_config(task, kind, **train_options.config_fields(kind, options))
    try:                  # the parameters, their gradients and Adam's two moments
        check_fits(models.of(config).param_shapes(config), 8 if args.dtype == "float64" else 4,
                   "train", copies=4, what="the parameters, their gradients and Adam's "
                   f"moments in {args.dtype}")
    except MemoryError as err:
        raise CommandError(str(err).removeprefix("train: ")) from None
    print(f"training on {backend.label} ({args.dtype}, {gradients} gradients): "
          f"{len(task.train)} sentence pairs, vocabularies {len(task.src_vocab)} / "
          f"{len(task.tgt_vocab)}, model {kind}", file=sys.stderr)
    settings = training_config(kind, epochs=options["epochs"], lr=options["lr"],
                               warmup=options.get("warmup"), seed=args.seed,
                               progress=not args.no_progress, devices=args.devices,
                               precision=opts.precision_of(args), gradients=args.gradients)
    metadata["options"] = _stored_options(args, options)
    watch = _epoch_watch(args, resumed)
    with _explained(watch, args.writes):
        _, result = train_model(task, backend, config, settings,
                                batch_size=options["batch_size"],
                                max_tokens=options.get("max_tokens"), shapes=shapes,
                                dtype=args.dtype, checkpoint=args.out, metadata=metadata,
                                callbacks=[EarlyStopping(patience=3), *_time_limit(args),
                                           watch, _metrics_log(args.out)],
                                resume=resumed)
    if _nothing_trained(args, resumed, result):
        return 0
    last = result.history[-1]
    print(f"saved {args.out}: {_epochs(len(result.history))}, train loss "
          f"{last['train_loss']:.4f}, dev loss {last['dev_loss']:.4f} ({result.stopped})")
    _note_time_limit(args.time_limit, result, options["epochs"], len(result.history))
    return 0


def _time_limit(args: argparse.Namespace) -> list[Any]:
    """``--time-limit MINUTES`` as the training's callback (the G2P recipe's own,
    :class:`xpseq.train.callbacks.TimeLimit`); none without it."""
    from xpseq.train.callbacks import TimeLimit

    return [] if args.time_limit is None else [TimeLimit(60.0 * args.time_limit)]


def _note_time_limit(minutes: float | None, result: Any, epochs: int, held: int | None,
                     why: str = "") -> None:
    """When the time limit stopped the run, a note on stderr saying what it stopped: the
    epochs done of those asked for, and the epoch the checkpoint holds (``held``, with
    ``why`` it holds that one)."""
    if result.stopped != "time_limit" or minutes is None:
        return
    done = len(result.history)
    print(f"xpseq: note: time limit {minutes:g} min reached during epoch {done} of at most "
          f"{epochs}: training stopped there (that epoch evaluated as it stood); the "
          f"checkpoint holds epoch {held}{why}", file=sys.stderr)


def _epochs(n: int) -> str:
    """``"1 epoch"``, ``"3 epochs"``."""
    return f"{n} epoch" if n == 1 else f"{n} epochs"


def _nothing_trained(args: argparse.Namespace, resumed: Any, result: Any) -> bool:
    """Say so (and return True) when ``--resume`` found the run already finished: no
    epoch ran and nothing was written."""
    if resumed is None or result.train_state["epoch"] > resumed.train_state["epoch"] \
            or result.stopped == "max_steps":
        return False
    print(f"nothing to train: {args.resume} already holds {_epochs(len(result.history))} "
          f"(--epochs {args.epochs}); it is unchanged. Give a larger --epochs to continue.")
    return True


def _token_sides(args: argparse.Namespace, resumed: Any) -> tuple[str, str]:
    """``--tokens``' sides: a subword side's tokenizer trained on ``--train``'s text with
    ``--vocab-size`` pieces (a resumed run keeps its own); one-line errors."""
    pair = tokens.modes(args.tokens)
    try:
        if resumed is not None and (resumed.metadata or {}).get("tokenizers"):
            return tokens.of_model(resumed.metadata)
        if not any(m in tokens.SUBWORD_MODES for m in pair):
            return tokens.train_sides(pair, [], vocab_size=args.vocab_size,
                                      option="--vocab-size")
        text = read_tsv(args.train_file, "word", "--train")      # words: whitespace as one
        return tokens.train_sides(pair, [(" ".join(s), " ".join(t)) for s, t in text],
                                  vocab_size=args.vocab_size, option="--vocab-size")
    except (ImportError, ValueError) as err:
        raise CommandError(str(err)) from None


def _stored_options(args: argparse.Namespace, effective: dict) -> dict:
    """The run's options as ``train --resume`` (and the record) reads them: every option of
    the command, with the model's and training's defaults filled in."""
    stored = {k: v for k, v in vars(args).items() if k not in train_options.NOT_STORED}
    stored.update(effective)
    return stored


def _resumed(args: argparse.Namespace) -> Any:
    """The checkpoint ``--resume`` names, loaded (``None`` without it); its parameters
    must have the run's ``--dtype``."""
    from xpseq.train import checkpoint

    if not args.resume:
        return None
    try:
        loaded = checkpoint.load(args.resume)
    except FileNotFoundError:
        raise CommandError(f"--resume {args.resume}: no such checkpoint") from None
    except checkpoint.CheckpointError as err:
        raise CommandError(str(err)) from None
    dtypes = sorted({str(a.dtype) for a in loaded.params.values()})
    if dtypes != [args.dtype]:
        raise CommandError(f"--resume {args.resume}: its parameters are {', '.join(dtypes)}, "
                           f"the run's --dtype {args.dtype}; a resumed run keeps its dtype")
    return loaded


def _epoch_watch(args: argparse.Namespace, resumed: Any) -> Any:
    """The callback that knows, when a Ctrl-C comes, the epoch under way and the one the
    checkpoint ``--out`` holds (:class:`.train_watch.EpochWatch`)."""
    from .train_watch import EpochWatch

    resumes_out = resumed is not None and os.path.exists(args.out) and os.path.samefile(
        args.resume, args.out)
    held = int(resumed.train_state.get("epoch", 0)) if resumes_out else None
    return EpochWatch(args.out, held, " --compile" if args.compile else "")


@contextlib.contextmanager
def _explained(watch: Any, writes: bool) -> Iterator[None]:
    """A Ctrl-C within says what it interrupted and how to continue, on its one line
    (:func:`xpseq.app.errors.explain_interruption`), in the process that ``writes`` the
    checkpoint."""
    try:
        yield
    except BaseException as err:
        if writes and (isinstance(err, KeyboardInterrupt) or was_interrupted()):
            explain_interruption(watch.interruption())
        raise


def _metrics_log(out: str) -> Any:
    """The metrics log of ``train --out M.safetensors``: ``M.metrics.csv``, and TensorBoard
    event files in ``M.tb/`` when tensorboardX or ``tensorboard`` is installed."""
    from xpseq.train.callbacks import MetricsLog

    written = outputs.train_outputs(out)
    return MetricsLog(written["the metrics log"],
                      tensorboard=written["the TensorBoard folder"])


def _train_g2p(args: argparse.Namespace, backend: backends.Backend, resumed: Any,
               data_files: dict) -> int:
    from xpseq.tasks import g2p_recipe

    if args.train_file or args.dev_file or args.quick:
        raise CommandError("--task g2p reads the CMU dictionary; --train, --dev and --quick "
                           "are options of the other tasks")
    kind = args.model or g2p_recipe.RECIPE["model"]
    overrides = {k: getattr(args, k) for k in train_options.KIND_OPTIONS
                 if getattr(args, k) is not None}
    if "layers" in overrides and kind == "transformer":
        overrides["encoder_layers"] = overrides["decoder_layers"] = overrides.pop("layers")
    foreign = sorted(f"--{k.replace('_', '-')}" for k in overrides
                     if k not in g2p_recipe.RECIPE and k not in g2p_recipe.MODELS[kind])
    if foreign:
        raise CommandError(f"{', '.join(foreign)}: not an option of the G2P recipe with "
                           f"--model {kind}")
    overrides["model"] = kind
    if args.time_limit is not None:
        overrides["time_limit_minutes"] = args.time_limit
    if args.monitor is not None:
        overrides["monitor"] = args.monitor
    if args.gradients is not None:                     # (the recipe has its own default)
        overrides["gradients"] = args.gradients
    split = g2p_split(args.stress)
    recipe, _ = g2p_recipe.recipe(**overrides)
    print(f"training G2P on {backend.label} ({args.dtype}): CMU dictionary, stress "
          f"{'kept' if args.stress else 'removed'}, {len(split.train)} train / "
          f"{len(split.dev)} dev / {len(split.test)} test words; at most "
          f"{recipe['epochs']} epochs or {recipe['time_limit_minutes']} minutes",
          file=sys.stderr)
    start = time.perf_counter()
    watch = _epoch_watch(args, resumed)
    with _explained(watch, args.writes):
        _, result, _ = g2p_recipe.train(split, backend, checkpoint=args.out, seed=args.seed,
                                        dtype=args.dtype, progress=not args.no_progress,
                                        devices=args.devices,
                                        callbacks=[watch, _metrics_log(args.out)],
                                        precision=opts.precision_of(args), resume=resumed,
                                        metadata={"options": _stored_options(args, {}),
                                                  "data_files": data_files}, **overrides)
    if _nothing_trained(args, resumed, result):
        return 0
    best = result.history[-1 if result.best_epoch is None else result.best_epoch - 1]
    wer = f", dev WER {best['dev_wer']:.2f} %" if "dev_wer" in best else ""
    print(f"saved {args.out}: the best of {_epochs(len(result.history))} (epoch "
          f"{result.best_epoch}, dev loss {best['dev_loss']:.4f}{wer}; {result.stopped}) in "
          f"{(time.perf_counter() - start) / 60:.1f} min")
    _note_time_limit(recipe["time_limit_minutes"], result, recipe["epochs"],
                     result.best_epoch or len(result.history),
                     f" (the best by {recipe['monitor']})" if result.best_epoch else "")
    return 0
