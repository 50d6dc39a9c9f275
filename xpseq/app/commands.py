"""What each ``xpseq`` subcommand does (``cmd_<name>(args)``), and the helpers they share:
choosing and loading the backend, reading checkpoints, sentences and TSV files, the toy
and G2P tasks. The options and their defaults are :mod:`xpseq.app.options`'; what
``train`` may write, :mod:`xpseq.app.outputs`; standard input, :mod:`xpseq.app.stdin`; the
parser, the exit codes and the one-line errors :mod:`xpseq.app.cli`'s (which imports this
module, never the other way round); a :class:`~xpseq.app.errors.CommandError` is such a
line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys
import time
from typing import Any, Sequence

from xpseq import backends
from xpseq.core import checks

from . import options as opts
from . import outputs, stdin
from .errors import CommandError, oserror_message

# --------------------------------------------------------------------------- helpers


def _backend(name: str | None, compile: bool = False,
             purpose: str = "train") -> backends.Backend:
    """``--backend``, or the one default rule for ``purpose`` (``XPSEQ_BACKEND``, else the
    fastest installed for training or for decoding: :func:`xpseq.backends.default_name`);
    ``--compile`` (``compile``) is torch with torch.compile whatever the default. Every
    subcommand (and the demo) gets its backend here: ``train`` and ``demo`` for training,
    ``translate``, ``evaluate``, ``heatmap`` and ``g2p`` for decoding.

    The command is an application, and on JAX it enables 64-bit types for its own process
    (``jax_enable_x64``), before the backend is created, so that ``--dtype float64``
    computes in float64, and JAX's persistent compilation cache (:func:`_enable_jax_cache`);
    the library never changes JAX's configuration itself."""
    try:
        name = name or ("torch" if compile else backends.default_name(purpose))
        if name == "jax":
            _enable_jax_x64()
            _enable_jax_cache()
        backend = backends.get(name, compile=compile)
    except (ValueError, ModuleNotFoundError) as err:
        raise CommandError(str(err)) from None
    return backend


def _named(backend: backends.Backend) -> str:
    """The backend's name for a message: ``torch with torch.compile`` for ``--compile``."""
    pieces = backend.capabilities.compile == "pieces"
    return f"{backend.name} with torch.compile" if pieces else backend.name


def _enable_jax_x64() -> None:
    """``jax.config.update("jax_enable_x64", True)``, when JAX is installed (without it,
    :func:`xpseq.backends.get` says how to install it)."""
    try:
        import jax
    except ModuleNotFoundError:
        return
    jax.config.update("jax_enable_x64", True)


#: The environment variable that moves (a folder) or turns off (``0``, ``off``) the
#: command's persistent JAX compilation cache.
JAX_CACHE_ENV = "XPSEQ_JAX_CACHE"
#: The most the cache may hold; JAX removes the least recently used programs beyond it.
JAX_CACHE_BYTES = 2**30


def jax_cache_dir() -> pathlib.Path | None:
    """The folder of the command's persistent JAX compilation cache: ``$XPSEQ_JAX_CACHE``
    when it names one, ``None`` (no cache) when it is ``0``, ``off``, ``false`` or ``no``,
    else ``xpseq/jax`` in the user's cache folder (``$XDG_CACHE_HOME``, else
    ``~/.cache``)."""
    text = os.environ.get(JAX_CACHE_ENV, "").strip()
    if text.lower() in ("0", "off", "false", "no"):
        return None
    if text:
        return pathlib.Path(text).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join("~", ".cache")
    return pathlib.Path(base).expanduser() / "xpseq" / "jax"


def _enable_jax_cache() -> None:
    """JAX's persistent compilation cache for the command's own process, in
    :func:`jax_cache_dir` (at most :data:`JAX_CACHE_BYTES`): a program compiled once (a
    training step, a search) is read back in later runs instead of compiled again (JAX
    keeps those that took at least ``jax_persistent_cache_min_compile_time_secs``, 1 s by
    default, to compile). A cache folder the user gave JAX itself
    (``JAX_COMPILATION_CACHE_DIR``) is left as it is; a folder that cannot be made means no
    cache."""
    try:
        import jax
    except ModuleNotFoundError:
        return
    folder = jax_cache_dir()
    if folder is None or jax.config.jax_compilation_cache_dir is not None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    if jax.config.jax_compilation_cache_max_size == -1:             # JAX's: no limit
        jax.config.update("jax_compilation_cache_max_size", JAX_CACHE_BYTES)


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
        backend = _backend("jax")
        if processes:
            coordinator, count, index = processes
            backend.join_processes(coordinator, count, index)
            if index != 0:                               # one process prints and writes
                sys.stdout = sys.stderr = open(os.devnull, "w")
                args.writes = False
        return _backend(name)
    from xpseq.train import parallel

    backend = _backend(name, args.compile)
    group = backend.process_group()
    if group is None and "WORLD_SIZE" in os.environ:
        group = parallel.join_group()                          # started by torchrun
    if group is not None:
        if group[0] != 0:                                # one process prints and writes
            sys.stdout = sys.stderr = open(os.devnull, "w")
            args.writes = False
        return backend
    parallel.spawn(_main_in_group, args.devices, args.entry, args.argv)
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
    (``xpseq.app.cli.main``, which sets ``args.entry``) on ``argv``, failing loudly."""
    code = entry(argv)
    if code:
        raise SystemExit(code)


def _load(path: str, backend: backends.Backend, dtype: str):
    from xpseq.data import Vocab
    from xpseq.train import checkpoint as ckpt

    try:
        loaded = ckpt.load(path)
    except (FileNotFoundError, ckpt.CheckpointError) as err:
        raise CommandError(str(err)) from None
    if not loaded.vocabs:
        raise CommandError(f"{path}: the checkpoint holds no vocabularies; it cannot translate")
    params = {k: backend.asarray(v.astype(dtype)) for k, v in loaded.params.items()}
    return (loaded, params, Vocab.from_list(loaded.vocabs["src"]),
            Vocab.from_list(loaded.vocabs["tgt"]))


def _search_options(args: argparse.Namespace):
    from xpseq.search import SearchOptions

    precision = opts.precision_of(args)
    n_best = getattr(args, "n_best", 1)           # (evaluate and heatmap score the best)
    if args.beam == 1 and n_best == 1:
        return SearchOptions(precision=precision)
    return SearchOptions(method="beam", k=args.beam, n_best=n_best,
                         length_penalty=args.length_penalty, alpha=args.alpha,
                         precision=precision)


#: ``xpseq translate`` reads standard input in chunks of at most this many lines, each
#: answered (and stdout flushed) before the next is read.
TRANSLATE_CHUNK = 64


def _sentence_chunks(args: argparse.Namespace) -> Any:
    """The sentences of the arguments (one chunk), or of stdin as they come: chunks of at
    most :data:`TRANSLATE_CHUNK` lines, a chunk cut short when no more input is ready (so
    a pipe's first line is answered before it closes)."""
    return iter([args.sentences]) if args.sentences else stdin.chunks(TRANSLATE_CHUNK,
                                                                      "sentences")


def _tokens(lines: Sequence[str], args: argparse.Namespace, g2p: bool,
            first: int = 0) -> list[list[str]]:
    """Token lists of ``lines`` (numbered from ``first + 1`` in notes): words split on
    whitespace, or, for a G2P checkpoint, one word per line read as its (lower-cased)
    characters."""
    from xpseq.data.cmudict import word_tokens

    out = []
    for i, line in enumerate(lines, first + 1):
        tokens = word_tokens(line) if g2p else line.split()
        if len(tokens) > args.max_tokens:
            print(f"xpseq: note: sentence {i} has {len(tokens)} tokens; cut to the first "
                  f"{args.max_tokens} (--max-tokens)", file=sys.stderr)
            tokens = tokens[:args.max_tokens]
        out.append(tokens)
    return out


def _note_unknown(sentences: Sequence[Sequence[str]], vocab) -> None:
    _note_unknown_words({t for s in sentences for t in s if t not in vocab})


def _note_unknown_words(words: set[str]) -> None:
    unknown = sorted(words)
    if unknown:
        shown = ", ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else "")
        print(f"xpseq: note: {len(unknown)} unknown source word(s) read as <unk>: {shown}",
              file=sys.stderr)


def _translate_nonempty(decoder, sentences, options):
    from xpseq.tasks import translate

    keep = [i for i, s in enumerate(sentences) if s]
    done = translate(decoder, [sentences[i] for i in keep], options)
    out: list[dict | None] = [None] * len(sentences)
    for i, result in zip(keep, done):
        out[i] = result
    return out


#: What a toy checkpoint's metadata may say about its data, and the largest values read
#: from a file (the command builds the test set again from them).
TOY_DATA_LIMITS = {"n_train": 10**6, "n_dev": 10**5, "n_test_per_bucket": 10**5,
                   "seed": 2**32 - 1}


def _read_tsv(path: str, tokens: str) -> list:
    """The pairs of a TSV corpus, or a one-line error (missing, a folder, unreadable,
    malformed, or empty)."""
    from xpseq.data import read_parallel_tsv

    if os.path.isdir(path):
        raise CommandError(f"{path} is a folder, not a TSV file")
    try:
        pairs = read_parallel_tsv(path, tokens=tokens)
    except OSError as err:
        raise CommandError(oserror_message(err)) from None
    except ValueError as err:
        raise CommandError(str(err)) from None
    if not pairs:
        raise CommandError(f"{path}: no sentence pairs (the file is empty)")
    return pairs


def _toy_task(spec: Any):
    from xpseq.tasks import toy_task

    if not isinstance(spec, dict) or set(spec) - set(TOY_DATA_LIMITS):
        unknown = sorted(set(spec) - set(TOY_DATA_LIMITS)) if isinstance(spec, dict) else spec
        raise CommandError(f"the checkpoint's metadata describes its toy data with unknown "
                           f"entries {unknown!r}; expected some of {sorted(TOY_DATA_LIMITS)}")
    for key, value in spec.items():
        limit = TOY_DATA_LIMITS[key]
        if not checks.is_int(value) or not 0 <= value <= limit:
            raise CommandError(f"the checkpoint's metadata says {key} = {value!r}; expected an "
                               f"int in [0, {limit}]")
    return toy_task(**spec)


# ------------------------------------------------------------------------ commands


def _load_g2p(stress: bool, seed: int = 0):
    from xpseq.data.cmudict import load_g2p

    try:
        return load_g2p(stress=stress, seed=seed)
    except (ModuleNotFoundError, ValueError) as err:
        raise CommandError(str(err)) from None


def cmd_train(args: argparse.Namespace) -> int:
    if args.allow_data_change and not args.resume:
        raise CommandError("--allow-data-change is an option of --resume")
    inputs = {"--config": args.config, "--train": args.train_file, "--dev": args.dev_file}
    outputs.check_outputs(args, inputs)   # before any work, and before other processes start
    args.writes = True                    # this process writes the checkpoint
    backend = (_parallel_backend(args) if args.devices > 1
               else _backend(args.backend, args.compile))
    if backend is None:                   # the processes of a torch group did the work
        return 0
    if not args.writes:
        return _train(args, backend)
    with outputs.OutputLock(args.out):
        return _train(args, backend)


def _train(args: argparse.Namespace, backend: backends.Backend) -> int:
    """``train`` on ``backend``, once the outputs are checked (and locked)."""
    from xpseq.tasks import model_config, task_from_pairs, train_model
    from xpseq.tasks.experiment import training_config
    from xpseq.train.callbacks import EarlyStopping

    opts.precision_of(args).compute_dtype(backend.xp)   # no bfloat16: refused first
    resumed = _resumed(args)
    data_files = {name: outputs.fingerprint(path)
                  for name, path in outputs.data_files(args).items()
                  if path and os.path.isfile(path)}    # (what is not is refused when read)
    if resumed is not None:
        outputs.check_same_data(args, resumed, data_files)
    if args.task == "g2p":
        return _train_g2p(args, backend, resumed, data_files)
    kind = args.model = args.model or "rnn"
    defaults = opts.kind_defaults(kind)
    foreign = [f"--{n.replace('_', '-')}" for n in opts.KIND_OPTIONS
               if n not in defaults and getattr(args, n) is not None]
    if foreign:
        raise CommandError(f"{', '.join(sorted(foreign))}: not an option of --model {kind}")
    if args.stress or args.time_limit is not None or args.monitor is not None:
        raise CommandError("--stress, --time-limit and --monitor are options of --task g2p")
    if args.task == "toy":
        from xpseq.app.demo import FULL, QUICK

        spec = dict((QUICK if args.quick else FULL)["data"], seed=args.seed)
        shapes = (QUICK if args.quick else FULL)["shapes"]     # the demo's batch shapes
        task = _toy_task(spec)
        metadata = {"task": "toy", "data": spec}
    else:
        shapes = None
        if not args.train_file or not args.dev_file:
            raise CommandError("--task tsv needs --train FILE and --dev FILE")
        train = _read_tsv(args.train_file, args.tokens)
        dev = _read_tsv(args.dev_file, args.tokens)
        task = task_from_pairs(train, dev, {})
        metadata = {"task": "tsv", "tokens": args.tokens}
    metadata["data_files"] = data_files
    if resumed is not None and resumed.vocabs:     # the run keeps its vocabularies
        from xpseq.data import Vocab
        from xpseq.tasks import Task

        task = Task(task.train, task.dev, task.test, Vocab.from_list(resumed.vocabs["src"]),
                    Vocab.from_list(resumed.vocabs["tgt"]))
    options = {name: getattr(args, name) for name in defaults}
    options.update({k: v for k, v in defaults.items() if options[k] is None})
    print(f"training on {_named(backend)} ({args.dtype}): {len(task.train)} sentence pairs, "
          f"vocabularies {len(task.src_vocab)} / {len(task.tgt_vocab)}, model {kind}",
          file=sys.stderr)
    config = model_config(task, kind, **opts.config_fields(kind, options))
    settings = training_config(kind, epochs=options["epochs"], lr=options["lr"],
                               warmup=options.get("warmup"), seed=args.seed,
                               progress=not args.no_progress, devices=args.devices,
                               precision=opts.precision_of(args))
    metadata["options"] = _stored_options(args, options)
    _, result = train_model(task, backend, config, settings, batch_size=options["batch_size"],
                            max_tokens=options.get("max_tokens"), shapes=shapes,
                            dtype=args.dtype, checkpoint=args.out, metadata=metadata,
                            callbacks=[EarlyStopping(patience=3), _metrics_log(args.out)],
                            resume=resumed)
    if _nothing_trained(args, resumed, result):
        return 0
    last = result.history[-1]
    print(f"saved {args.out}: {len(result.history)} epochs, train loss "
          f"{last['train_loss']:.4f}, dev loss {last['dev_loss']:.4f} ({result.stopped})")
    return 0


def _nothing_trained(args: argparse.Namespace, resumed: Any, result: Any) -> bool:
    """Say so (and return True) when ``--resume`` found the run already finished: no
    epoch ran and nothing was written."""
    if resumed is None or result.train_state["epoch"] > resumed.train_state["epoch"] \
            or result.stopped == "max_steps":
        return False
    print(f"nothing to train: {args.resume} already holds {len(result.history)} epochs "
          f"(--epochs {args.epochs}); it is unchanged. Give a larger --epochs to continue.")
    return True


def _stored_options(args: argparse.Namespace, effective: dict) -> dict:
    """The run's options as ``train --resume`` (and the record) reads them: every option of
    the command, with the model's and training's defaults filled in."""
    stored = {k: v for k, v in vars(args).items() if k not in opts.NOT_STORED}
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
    overrides = {k: getattr(args, k) for k in opts.KIND_OPTIONS if getattr(args, k) is not None}
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
    split = _load_g2p(args.stress)
    recipe, _ = g2p_recipe.recipe(**overrides)
    print(f"training G2P on {_named(backend)} ({args.dtype}): CMU dictionary, stress "
          f"{'kept' if args.stress else 'removed'}, {len(split.train)} train / "
          f"{len(split.dev)} dev / {len(split.test)} test words; at most "
          f"{recipe['epochs']} epochs or {recipe['time_limit_minutes']} minutes",
          file=sys.stderr)
    start = time.perf_counter()
    _, result, _ = g2p_recipe.train(split, backend, checkpoint=args.out, seed=args.seed,
                             dtype=args.dtype, progress=not args.no_progress,
                             devices=args.devices, callbacks=[_metrics_log(args.out)],
                             precision=opts.precision_of(args),
                             resume=resumed,
                             metadata={"options": _stored_options(args, {}),
                                       "data_files": data_files}, **overrides)
    if _nothing_trained(args, resumed, result):
        return 0
    best = result.history[result.best_epoch - 1]
    wer = f", dev WER {best['dev_wer']:.2f} %" if "dev_wer" in best else ""
    print(f"saved {args.out}: the best of {len(result.history)} epochs (epoch "
          f"{result.best_epoch}, dev loss {best['dev_loss']:.4f}{wer}; {result.stopped}) in "
          f"{(time.perf_counter() - start) / 60:.1f} min")
    return 0


def _decoder(args: argparse.Namespace, path: str):
    """The model at ``path`` as a :class:`~xpseq.search.Decoder`, as ``--backend``,
    ``--compile`` and ``--dtype`` ask: a checkpoint on a backend, or with ``--backend
    onnxruntime`` an ONNX export's folder (one-line errors for what does not apply)."""
    from xpseq.search import CheckpointDecoder
    from xpseq.tasks.decoders import EXPORT_ENGINE

    from .export import onnx_export

    if args.backend == EXPORT_ENGINE:
        return onnx_export(path, args)
    backend = _backend(args.backend, args.compile, "decode")
    loaded, params, src_vocab, tgt_vocab = _load(path, backend, args.dtype)
    return CheckpointDecoder(params, loaded.config, src_vocab, tgt_vocab, backend,
                             metadata=loaded.metadata)


def cmd_translate(args: argparse.Namespace) -> int:
    """Translate the sentences of the arguments, or of stdin as they come
    (:func:`_sentence_chunks`): each chunk answered and stdout flushed before the next is
    read, so memory does not grow with the input. The unknown source words are summed up
    in one note at the end."""
    decoder = _decoder(args, args.checkpoint)
    g2p = decoder.metadata.get("task") == "g2p"
    options = dataclasses.replace(_search_options(args), attention=False)   # never printed
    unknown: set[str] = set()
    first = 0
    try:
        for lines in _sentence_chunks(args):
            sentences = _tokens(lines, args, g2p, first)
            unknown.update(t for s in sentences for t in s if t not in decoder.src_vocab)
            _print_translations(_translate_nonempty(decoder, sentences, options),
                                args.n_best, first)
            sys.stdout.flush()
            first += len(lines)
    finally:
        _note_unknown_words(unknown)
    return 0


def _print_translations(results: list[dict | None], n_best: int, first: int = 0) -> None:
    """``translate``'s output: a line a sentence, or with ``--n-best N`` its N best as
    ``index<TAB>rank<TAB>score<TAB>translation`` (sentences numbered from ``first``)."""
    for i, result in enumerate(results, first):
        if result is None:
            print("" if n_best == 1 else f"{i}\t0\t\t")
        elif n_best == 1:
            print(" ".join(result["tokens"]))
        else:
            for rank, (hyp, score) in enumerate(zip(result["n_best"],
                                                    result["n_best_scores"])):
                print(f"{i}\t{rank}\t{score:.4f}\t{' '.join(hyp)}")


def cmd_evaluate(args: argparse.Namespace) -> int:
    from xpseq.tasks import Task, bucket_table
    from xpseq.tasks.metrics import format_table

    backend = _backend(args.backend, args.compile, "decode")
    if args.shipped or len(args.checkpoint) > 1:
        return _evaluate_g2p_model(args, backend)
    if not args.checkpoint:
        raise CommandError("evaluate needs a CHECKPOINT (or --shipped, the shipped G2P model)")
    args.checkpoint = args.checkpoint[0]
    loaded, params, src_vocab, tgt_vocab = _load(args.checkpoint, backend, args.dtype)
    is_g2p = (loaded.metadata or {}).get("task") == "g2p"
    if args.task == "g2p" or (args.task is None and is_g2p):
        if not is_g2p:
            raise CommandError(f"{args.checkpoint} was not trained with --task g2p")
        if args.test_file:
            raise CommandError("a g2p checkpoint is scored on the dictionary's split "
                               "(--part); --test is for TSV checkpoints")
        return _evaluate_g2p(args, loaded.metadata, params, loaded.config, src_vocab,
                             tgt_vocab, backend)
    if args.test_file:
        pairs = _read_tsv(args.test_file, args.tokens)
        task = Task([], [], {"test": pairs}, src_vocab, tgt_vocab)
    else:
        from xpseq.app.demo import FULL

        meta = loaded.metadata or {}
        if meta.get("task") == "toy" and "data" in meta:
            spec = meta["data"]
        elif args.task == "toy":
            # A toy model trained from Python keeps no record of its data: the demo's
            # test sentences (seed --seed), read with the checkpoint's vocabularies.
            spec = dict(FULL["data"], seed=args.seed)
        else:
            raise CommandError("this checkpoint records no toy data (it was trained from "
                               "Python or on other data): pass --task toy for the demo's "
                               "test sentences, or --test FILE.tsv")
        toy = _toy_task(spec)
        task = Task([], [], toy.test, src_vocab, tgt_vocab)
    # The table's column: the attention of an rnn model, or the model kind.
    name = getattr(loaded.config, "attention", loaded.model.kind)
    name = "seq2seq" if name == "none" else name
    headers, rows, details = bucket_table({name: (params, loaded.config)}, task, backend,
                                          _search_options(args))
    print(format_table(headers, rows))
    first = next(iter(details[name].values()))
    print(f"\nBLEU: sacrebleu {first['signature']}")
    return 0


def _evaluate_g2p_model(args, backend) -> int:
    """``evaluate --shipped`` or several G2P checkpoints (an ensemble)."""
    from xpseq import g2p

    if args.shipped and args.checkpoint:
        raise CommandError("--shipped evaluates the shipped model; give no CHECKPOINT with it")
    if args.test_file or args.task not in (None, "g2p"):
        raise CommandError("the shipped model and ensembles of checkpoints are G2P models, "
                           "scored on the dictionary's split (no --test, --task g2p)")
    try:
        model = g2p.G2P(None if args.shipped else args.checkpoint, backend=backend)
    except (FileNotFoundError, ValueError) as err:
        raise CommandError(str(err)) from None
    return _evaluate_g2p(args, model.metadata, model.params, model.config, model.src_vocab,
                         model.tgt_vocab, backend)


def _evaluate_g2p(args, meta, params, config, src_vocab, tgt_vocab, backend) -> int:
    from xpseq.search import SearchOptions
    from xpseq.tasks import g2p_recipe
    from xpseq.tasks.metrics import format_table

    split = _load_g2p(bool(meta.get("stress")), int(meta.get("split_seed", 0)))
    k = args.beam if args.beam > 1 else 5
    searches = [("greedy", SearchOptions()),
                (f"beam k={k}", SearchOptions(method="beam", k=k,
                                              length_penalty=args.length_penalty,
                                              alpha=args.alpha))]
    rows = g2p_recipe.evaluate(params, config, split, src_vocab, tgt_vocab, backend,
                        part=args.part, searches=searches, limit=args.limit)
    print(f"G2P, CMU dictionary with stress {'kept' if meta.get('stress') else 'removed'}: "
          f"{rows[0]['words']} {args.part} words, decoded on {backend.name}")
    plain = ["PER % (stress removed)", "WER % (stress removed)"] if split.stress else []
    print(format_table(["search", "PER %", "WER %", *plain, "words", "seconds"],
                       [[r["search"], r["per"], r["wer"], *([r["per_no_stress"],
                         r["wer_no_stress"]] if plain else []), r["words"], r["seconds"]]
                        for r in rows]))
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from xpseq.data.cmudict import export_tsv

    if args.dataset == "toy":
        return _export_toy(args)
    if args.quick:
        raise CommandError("--quick is an option of the toy data")
    outputs.check_export(args, ("train", "dev", "test"))
    split = _load_g2p(args.stress, args.seed)
    try:
        paths = export_tsv(split, args.export)
    except OSError as err:
        raise CommandError(f"cannot write {args.export}: {err.strerror or err}") from None
    for part, path in paths.items():
        words = getattr(split, part)
        print(f"{path}: {len(words)} words, {sum(len(v) for v in words.values())} "
              "pronunciations")
    return 0


def _export_toy(args: argparse.Namespace) -> int:
    """``data toy --export DIR``: the toy task's pairs as TSV files that ``train --task tsv``
    reads (``train.tsv``, ``dev.tsv``, ``test-<phrases>.tsv``)."""
    from xpseq.app.demo import FULL, QUICK

    if args.stress:
        raise CommandError("--stress is an option of the g2p data")
    spec = dict((QUICK if args.quick else FULL)["data"], seed=args.seed)
    task = _toy_task(spec)
    parts = {"train": task.train, "dev": task.dev,
             **{f"test-{bucket}": pairs for bucket, pairs in task.test.items()}}
    outputs.check_export(args, tuple(parts))
    folder = pathlib.Path(args.export)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, pairs in parts.items():
            path = folder / f"{name}.tsv"
            path.write_text("".join(f"{' '.join(s)}\t{' '.join(t)}\n" for s, t in pairs),
                            encoding="utf-8")
            print(f"{path}: {len(pairs)} sentence pairs")
    except OSError as err:
        raise CommandError(f"cannot write {args.export}: {err.strerror or err}") from None
    return 0


#: The longest sentence ``heatmap`` draws, in words: wider, its columns cannot be read
#: (and 5,000 words took a minute and 3 GB to draw).
HEATMAP_MAX_WORDS = 100


def cmd_heatmap(args: argparse.Namespace) -> int:
    from xpseq.app.plots import ascii_heatmap, save_heatmap
    from xpseq.tasks import attention_labels

    decoder = _decoder(args, args.checkpoint)
    src_vocab = decoder.src_vocab
    tokens = args.sentence.split()
    if not tokens:
        raise CommandError("the sentence is empty")
    if len(tokens) > HEATMAP_MAX_WORDS:
        raise CommandError(f"the sentence has {len(tokens)} words; a heatmap draws at most "
                           f"{HEATMAP_MAX_WORDS} (xpseq translate takes longer text)")
    _note_unknown([tokens], src_vocab)
    [result] = _translate_nonempty(decoder, [tokens], _search_options(args))
    if result["attention"] is None:
        raise CommandError("this model has no attention (its decoder returns no weights)")
    source, output = attention_labels(tokens, result, src_vocab)
    print(" ".join(result["tokens"]))
    print(ascii_heatmap(result["attention"], source, output))
    if args.png:
        try:
            path = save_heatmap(args.png, result["attention"], source, output,
                                title=" ".join(tokens))
        except OSError as err:
            raise CommandError(f"cannot write {args.png}: {err.strerror or err}") from None
        print(f"wrote {path}")
    return 0


def cmd_g2p(args: argparse.Namespace) -> int:
    """Pronounce the words of the arguments, or of stdin as they come: chunks of at most
    :data:`xpseq.g2p.CHUNK` words, each answered (and stdout flushed) before the next is
    read, a chunk cut short when no more input is ready (so a pipe's first word is
    answered before it closes; memory does not grow with the input). A word longer than
    :data:`xpseq.g2p.MAX_WORD_LENGTH` gets a note and an empty answer. Stdin that is
    closed, not UTF-8, or holds a line over :data:`xpseq.app.stdin.LINE_BYTES` is a
    :class:`CommandError` (the lines before it answered)."""
    from xpseq import g2p
    from xpseq.tasks.decoders import EXPORT_ENGINE

    if args.text:                   # the arguments are one text; stdin a text a line
        chunks = stdin.chunks(64) if not args.words else iter([[" ".join(args.words)]])
    else:
        chunks = (stdin.chunks(g2p.CHUNK) if not args.words else
                  (args.words[i:i + g2p.CHUNK] for i in range(0, len(args.words),
                                                              g2p.CHUNK)))
    try:
        if args.backend == EXPORT_ENGINE:
            if not args.model or len(args.model) != 1:
                raise CommandError("--backend onnxruntime decodes one ONNX export: --model "
                                   "DIR (xpseq export --shipped --onnx DIR writes the "
                                   "shipped model's)")
            model = g2p.G2P(_decoder(args, args.model[0]))
        else:
            model = g2p.load(args.model or None,
                             backend=_backend(args.backend, args.compile, "decode"),
                             precision=opts.precision_of(args))
    except (FileNotFoundError, ValueError) as err:
        raise CommandError(str(err)) from None
    try:                # (--no-stress is stress=False; without it, the model's own)
        if args.lookup or (args.text and not args.model_only):    # a one-line error
            model.lexicon(args.stress)
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise CommandError(f"{'--text' if args.text else '--lookup'}: {err}") from None
    notes = _G2PNotes()
    try:
        for words in chunks:
            sys.stdout.write(_g2p_answer(model, words, args, notes))
            sys.stdout.flush()
    finally:
        notes.summary()
    return 0


#: ``xpseq g2p`` notes each of the first this many words with characters the model does
#: not know (and each of the first this many words too long), then sums up the others in
#: one line at the end.
G2P_NOTES_SHOWN = 10


def _g2p_answer(model: Any, words: Sequence[str], args: argparse.Namespace,
                notes: _G2PNotes) -> str:
    """The output lines of one chunk of ``words``: ``word<TAB>phones`` (``--n-best`` N
    lines a word), an empty line for an empty word, ``word<TAB>`` for a word longer than
    :data:`xpseq.g2p.MAX_WORD_LENGTH` (with a note); notes go to ``notes``."""
    import warnings

    from xpseq import g2p

    asked = []
    for word in words:
        notes.count += 1
        length = len(word.strip())
        if args.text:
            continue
        if length > g2p.MAX_WORD_LENGTH:
            notes.long_word(word.strip())
        elif length:
            asked.append(word)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", g2p.UnknownCharacterWarning)
        if args.text:
            try:
                texts = model.phonemize_lines(words, lookup=not args.model_only,
                                              stress=args.stress, beam=args.beam)
            except ValueError as err:
                raise CommandError(str(err)) from None
        else:
            answers = iter(model.pronounce(asked, beam=args.beam, n_best=args.n_best,
                                           lookup=args.lookup, stress=args.stress)
                           if asked else [])
    for warning in caught:          # pronounce names the characters it left out
        if issubclass(warning.category, g2p.UnknownCharacterWarning):
            notes.unknown(warning.message)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename,
                                 warning.lineno)
    if args.text:
        return "".join(" ".join("|" if t == " " else t for t in tokens) + "\n"
                       for tokens in texts)
    lines = []
    for word in (w.strip() for w in words):
        if not word:
            lines.append("")
        elif len(word) > g2p.MAX_WORD_LENGTH:
            lines.append(f"{word}\t")
        else:
            answer = next(answers)
            lines += [f"{word}\t{' '.join(phones)}"
                      for phones in ([answer] if args.n_best == 1 else answer)]
    return "".join(line + "\n" for line in lines)


class _G2PNotes:
    """The notes of ``xpseq g2p`` on stderr, so many words never flood it: the first
    :data:`G2P_NOTES_SHOWN` words of each kind (with characters the model does not know;
    too long) get a note each, the others one summary line at the end of the run."""

    def __init__(self) -> None:
        self.count = 0                      # words read so far, for the notes' numbers
        self.unknown_words = 0
        self.unknown_chars: set[str] = set()
        self.long_words = 0

    def unknown(self, warning: Any) -> None:
        self.unknown_words += 1
        if len(self.unknown_chars) < 1000:
            self.unknown_chars.update(getattr(warning, "characters", ()))
        if self.unknown_words <= G2P_NOTES_SHOWN:
            print(f"xpseq: note: {warning}", file=sys.stderr)

    def long_word(self, word: str) -> None:
        from xpseq.g2p import MAX_WORD_LENGTH

        self.long_words += 1
        if self.long_words <= G2P_NOTES_SHOWN:
            print(f"xpseq: note: word {self.count} ({word[:20]!r}...) has {len(word)} "
                  f"characters, more than {MAX_WORD_LENGTH}; its answer is empty",
                  file=sys.stderr)

    def summary(self) -> None:
        from xpseq.g2p import MAX_WORD_LENGTH

        more = self.unknown_words - G2P_NOTES_SHOWN
        if more > 0:
            chars = sorted(self.unknown_chars)
            shown = ", ".join(map(repr, chars[:20])) + (", ..." if len(chars) > 20 else "")
            print(f"xpseq: note: {more} more word(s) held characters the model does not "
                  f"know ({shown}); each was answered from its other characters",
                  file=sys.stderr)
        more = self.long_words - G2P_NOTES_SHOWN
        if more > 0:
            print(f"xpseq: note: {more} more word(s) had more than {MAX_WORD_LENGTH} "
                  "characters; their answers are empty", file=sys.stderr)


def cmd_demo(args: argparse.Namespace) -> int:
    from xpseq.app.demo import run_demo

    backend = _backend(args.backend, args.compile)
    return run_demo(backend, quick=args.quick, out=pathlib.Path(args.out), dtype=args.dtype,
                    seed=args.seed, progress=not args.no_progress)


def cmd_tour(args: argparse.Namespace) -> int:
    from xpseq.tour import main as tour

    argv = (["--lesson", str(args.lesson)] if args.lesson else []) + \
        (["--list"] if args.list else []) + (["--code"] if getattr(args, "code", False) else [])
    return tour(argv, prog=args.parser.prog)
