"""The ``xpseq`` command: demo, train, translate, g2p, evaluate, heatmap, data, tour.

Every model subcommand takes ``--backend`` (numpy, jax, torch, array_api_strict; all of
them train, numpy and array_api_strict with hand-derived gradients, slowly), ``--compile``
(torch with ``torch.compile``), ``--dtype`` (float32 or float64) and ``--seed``.

Errors are one line on stderr and an exit code: 2 for bad arguments (``xpseq CMD: error:
...``; values are checked by the parser, before anything is created on disk; a mistyped
subcommand, choice or option names the nearest one, ``did you mean --model?``), 1 for every
other failure (``xpseq: error: ...``: missing or unreadable files, damaged checkpoints, a
diverging run, a full disk ...), 130 when interrupted. Output cut short by its reader
(``xpseq translate ... | head -1``) ends quietly with 141, as a program killed by SIGPIPE
would. ``xpseq --debug CMD`` (or ``XPSEQ_DEBUG=1``) shows the traceback instead.

Input text is split on whitespace into tokens, as in training. Words the model never saw
become ``<unk>`` (listed in a note on stderr); an empty line translates to an empty line;
a sentence longer than ``--max-tokens`` is cut to that many tokens, with a note.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any, NamedTuple, Sequence

from xpseq import backends

from . import options as opts
from .commands import (
    cmd_data,
    cmd_demo,
    cmd_evaluate,
    cmd_g2p,
    cmd_heatmap,
    cmd_tour,
    cmd_train,
    cmd_translate,
)
from .errors import CommandError, oserror_message
from .export import cmd_export
from .options import DEFAULT_BACKEND, DEFAULT_DECODE_BACKEND, positive

__all__ = ["main", "build", "positive"]   # positive: also the scripts' argparse type

_positive = positive(int)

# -------------------------------------------------------------------------- parser


def _version() -> str:
    """``xpseq VERSION`` and the versions of the array libraries installed."""
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    found = [f"{n} {v}" for n in ("numpy", "jax", "torch", "array-api-strict")
             if (v := version(n))]
    return f"xpseq {version('xpseq') or 'unknown'} ({', '.join(found)})"


class Command(NamedTuple):
    """The command's parser, its ``train`` subparser and train's options by dest (what
    ``--config`` and ``--resume`` fill in)."""

    parser: argparse.ArgumentParser
    train: argparse.ArgumentParser
    train_options: dict[str, argparse.Action]


def build() -> Command:
    """The ``xpseq`` parser: the global options, then one subparser per subcommand, each
    built from the groups of :mod:`xpseq.app.options`."""
    parser = opts.Parser(
        prog="xpseq", description="Sequence-to-sequence learning with attention, written once "
        "for NumPy, JAX and PyTorch.")
    opts.global_options(parser, _version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _demo(sub)
    train, train_options = _train(sub)
    _translate(sub)
    _g2p(sub)
    _evaluate(sub)
    _data(sub)
    _export(sub)
    _heatmap(sub)
    _tour(sub)
    return Command(parser, train, train_options)


def _demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="train seq2seq, attention and a Transformer on the toy "
                       "task and compare them",
                       description="The attention experiment end to end: trains three models "
                       "on the toy English->Zhoric task, the plain seq2seq baseline (an LSTM "
                       "without attention), the attention LSTM (Luong general attention) and a "
                       "small Transformer, then prints BLEU and exact match by sentence length "
                       "(0-4 phrases; 4 is longer than anything in training), greedy vs beam "
                       "search, an attention heatmap and teacher forcing vs autoregressive "
                       "decoding, and writes the heatmap, the loss curves and the three "
                       "checkpoints to --out.")
    opts.backend_options(p, "training backend " + DEFAULT_BACKEND)
    p.add_argument("--quick", action="store_true",
                   help="a small smoke run: less data, smaller models, one epoch (under a "
                   "minute)")
    p.add_argument("--out", default="out", metavar="DIR",
                   help="folder for the PNGs and the three checkpoints (default: out)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_demo, parser=p)


def _train(sub: Any) -> tuple[argparse.ArgumentParser, dict[str, argparse.Action]]:
    p = sub.add_parser("train", help="train a model and save a checkpoint",
                       description="Train an rnn or a Transformer (--model) on the toy task, "
                       "a TSV corpus or the CMU dictionary (--task) and write the checkpoint "
                       "--out M.safetensors as it trains, with a metrics log beside it "
                       "(M.metrics.csv). Toy and TSV runs stop early after 3 epochs without "
                       "a better dev loss; --task g2p follows its recipe. --config FILE.toml "
                       "takes the options from a file; --resume continues a run.")
    actions = opts.train_options(p, "training backend " + DEFAULT_BACKEND)
    p.set_defaults(func=cmd_train, parser=p)
    return p, actions


def _translate(sub: Any) -> None:
    p = sub.add_parser("translate", help="translate sentences with a checkpoint",
                       description="Translate sentences given as arguments, or one per line "
                       "on stdin. Unknown words become <unk>; an empty line gives an empty line.")
    opts.backend_options(p, "backend to decode on " + DEFAULT_DECODE_BACKEND + "; onnxruntime: "
                         "CHECKPOINT is an ONNX export (the folder of xpseq export --onnx)",
                         extra=("onnxruntime",))
    opts.precision_option(p)
    p.add_argument("checkpoint", help="a checkpoint of xpseq train (.safetensors), or with "
                   "--backend onnxruntime an ONNX export's folder")
    p.add_argument("sentences", nargs="*", help="sentences (default: read stdin)")
    p.add_argument("--max-tokens", type=_positive, default=256,
                   help="cut longer sentences to this many tokens (default: 256)")
    opts.search_options(p)
    p.set_defaults(func=cmd_translate, parser=p)


def _g2p(sub: Any) -> None:
    from xpseq import g2p

    from .commands import G2P_NOTES_SHOWN

    p = sub.add_parser("g2p", help="pronounce English words with the shipped G2P model (or "
                       "your own)",
                       description="The ARPAbet phones of each word, given as arguments or one "
                       "per line on stdin (UTF-8), printed as word<TAB>phones in input order (N "
                       "lines a word with --n-best N). Stdin is answered as it comes, in chunks "
                       f"of at most {g2p.CHUNK} words (fewer when no more input is ready yet), "
                       "so answers start before the input ends and memory does not grow with "
                       "it. Words are read lower-cased; characters the model does not know are "
                       "left out with a note on stderr (a note for each of the first "
                       f"{G2P_NOTES_SHOWN} such words, then one line at the end for the rest); "
                       "an empty line gives an empty line; a word of more than "
                       f"{g2p.MAX_WORD_LENGTH} characters gets a note and the answer "
                       "word<TAB> (nothing). Input that is not UTF-8 stops the run with an "
                       "error naming its line (the answers printed before it stay). No "
                       "training, no network: the model ships with xpseq (CMU dictionary, "
                       "stress digits kept: AH0 L OW1; --no-stress removes them); --model "
                       "uses checkpoints of xpseq train --task g2p instead. --text reads "
                       "running text instead of words.")
    p.add_argument("words", nargs="*", help="words (default: read stdin, one word a line)")
    opts.backend_option(p, "backend to decode on " + DEFAULT_DECODE_BACKEND + "; onnxruntime: "
                        "--model DIR is an ONNX export (xpseq export --shipped --onnx DIR "
                        "writes the shipped model's)", extra=("onnxruntime",))
    opts.compile_option(p)
    opts.precision_option(p, "dtype: decode in float32 (default); bf16: matrix products and "
                          "activations in bfloat16 (jax and torch; faster where the "
                          "processor multiplies bfloat16 natively, AVX512-BF16 or AMX; the "
                          "answers may differ from float32's, see the G2P guide)")
    p.add_argument("--model", action="append", metavar="PATH",
                   help="a checkpoint of xpseq train --task g2p instead of the shipped model "
                   "(repeat for an ensemble)")
    p.add_argument("--lookup", action="store_true",
                   help="answer words of the CMU dictionary from it, the others from the "
                   "model")
    p.add_argument("--beam", type=opts.beam_size, default=1, metavar="K",
                   help=f"beam size, at most {opts.MAX_BEAM}; 1 is greedy search (default: 1)")
    p.add_argument("--n-best", type=opts.beam_size, default=1, metavar="N",
                   help="print the N best pronunciations (N <= K)")
    p.add_argument("--no-stress", dest="stress", action="store_false", default=None,
                   help="remove the vowels' stress digits (AH0 -> AH); by default they "
                   "are printed, as the CMU dictionary writes them")
    p.add_argument("--text", action="store_true",
                   help="read running text (the arguments as one text, or each line of "
                   "stdin): numbers, dates, times, currency and percentages spelled out, "
                   "dictionary words from the dictionary, the others from the model; "
                   "prints a line of phones per text, | between words and around "
                   "punctuation, which is kept (HH AH0 L OW1 | , | W ER1 L D)")
    p.add_argument("--model-only", action="store_true",
                   help="with --text: every word from the model, none from the dictionary")
    p.set_defaults(func=cmd_g2p, parser=p)


def _evaluate(sub: Any) -> None:
    p = sub.add_parser("evaluate", help="BLEU and exact match by bucket; PER and WER for G2P",
                       description="Translate a test set with a checkpoint and print corpus "
                       "BLEU (sacrebleu) and exact match per bucket: the toy task's phrase "
                       "counts 0-4, or one row for a TSV test file. A G2P checkpoint (several: "
                       "their ensemble; --shipped: the shipped model) prints phone and word "
                       "error rates on the dictionary's test split (or --part dev), for "
                       "greedy and beam search (k = --beam, 5 by default).")
    opts.backend_options(p, "backend to decode on " + DEFAULT_DECODE_BACKEND)
    opts.precision_option(p)
    p.add_argument("checkpoint", nargs="*", help="the checkpoint (several G2P checkpoints: "
                   "their ensemble)")
    p.add_argument("--shipped", action="store_true",
                   help="evaluate the G2P model that ships with xpseq")
    p.add_argument("--test", dest="test_file", help="test pairs as TSV (default: the toy "
                   "task's test buckets, for a toy checkpoint)")
    p.add_argument("--tokens", choices=("word", "char"), default="word")
    p.add_argument("--task", choices=("toy", "tsv", "g2p"), default=None,
                   help="what the checkpoint was trained on (default: its metadata says)")
    p.add_argument("--part", choices=("test", "dev"), default="test",
                   help="g2p: the words to score (default: test)")
    p.add_argument("--limit", type=_positive, default=None, metavar="N",
                   help="g2p: score only the first N words")
    opts.search_options(p, n_best=False)
    p.set_defaults(func=cmd_evaluate, parser=p)


def _data(sub: Any) -> None:
    p = sub.add_parser("data", help="export a task's data as TSV (the G2P split, the toy task)",
                       description="g2p: write the seeded CMU dictionary split as train.tsv, "
                       "dev.tsv and test.tsv (word<TAB>phones, one line per pronunciation), "
                       "so that other G2P tools train and score on exactly the same words. "
                       "toy: write the toy task's pairs (the demo's, or --quick's) as "
                       "train.tsv, dev.tsv and test-0.tsv ... test-4.tsv (by phrase count), "
                       "source<TAB>target, which train --task tsv reads.")
    p.add_argument("dataset", choices=("g2p", "toy"))
    p.add_argument("--export", required=True, metavar="DIR", help="the folder to write")
    p.add_argument("--force", action="store_true",
                   help="replace TSV files of the same names already in DIR")
    p.add_argument("--stress", action="store_true", help="g2p: keep the stress marks")
    p.add_argument("--quick", action="store_true", help="toy: the small toy dataset")
    p.add_argument("--seed", type=opts.seed_value, default=0,
                   help="the split's seed (g2p; default: 0, the published split) or the toy "
                   "data's")
    p.set_defaults(func=cmd_data, parser=p)


def _export(sub: Any) -> None:
    p = sub.add_parser("export", help="write a checkpoint as ONNX graphs that onnxruntime runs",
                       description="Trace the model of a checkpoint (an LSTM or GRU "
                       "encoder-decoder or a Transformer; --shipped: the shipped G2P model) "
                       "with ndonnx, from the same code it trains with, and write "
                       "DIR/encoder.onnx, DIR/step.onnx (one decoder step, its state as inputs "
                       "and outputs: a Transformer's key/value cache) and DIR/model.json "
                       "(vocabularies, search defaults, shapes). Batch and lengths are "
                       "symbolic; float16 parameters stay float16. xpseq translate and xpseq "
                       "g2p decode DIR with --backend onnxruntime. Needs pip install "
                       "'xpseq[onnx]'. Nothing in DIR is overwritten.")
    p.add_argument("checkpoint", nargs="?", help="a checkpoint of xpseq train (.safetensors)")
    p.add_argument("--shipped", action="store_true",
                   help="export the G2P model that ships with xpseq")
    p.add_argument("--onnx", required=True, metavar="DIR", help="the folder to write")
    p.add_argument("--dtype", choices=("float32", "float64"), default=None,
                   help="what the graphs compute in (default: float64 for a float64 "
                   "checkpoint, else float32)")
    p.set_defaults(func=cmd_export, parser=p)


def _heatmap(sub: Any) -> None:
    p = sub.add_parser("heatmap", help="the attention of one translation, in the terminal "
                       "(and as a PNG with --png)",
                       description="Translate one sentence, print the translation and draw "
                       "its attention weights in the terminal (rows are the generated words, "
                       "columns the source words), and with --png as an image too. The model "
                       "must have attention: an rnn with attention, or a Transformer (its last "
                       "layer's cross-attention, averaged over the heads).")
    opts.backend_options(p, "backend to decode on " + DEFAULT_DECODE_BACKEND)
    opts.precision_option(p)
    p.add_argument("checkpoint", help="a checkpoint of xpseq train (.safetensors)")
    p.add_argument("sentence", help="the source sentence (quoted)")
    p.add_argument("--png", help="also write the heatmap to this PNG")
    opts.search_options(p, n_best=False)
    p.set_defaults(func=cmd_heatmap, parser=p)


def _tour(sub: Any) -> None:
    p = sub.add_parser("tour", help="the autodiff tour: numpy by hand, jax, torch side by side",
                       description="Lessons on how JAX (function transforms), PyTorch (a "
                       "tape) and NumPy (xpseq's gradients derived by hand) differ: gradients "
                       "and their edge cases, dtypes and precision, tracing and compilation, "
                       "random numbers. Each runs the same small computation on all three and "
                       "prints what it measured on the installed versions, side by side.")
    p.add_argument("--lesson", type=_positive, metavar="N", help="run lesson N only")
    p.add_argument("--list", action="store_true", help="list the lessons")
    p.add_argument("--code", action="store_true",
                   help="print each lesson's code (numpy, jax, torch) before its table")
    p.set_defaults(func=cmd_tour, parser=p)


# ------------------------------------------------------- --config and --resume


def _typed_train_options(argv: list[str]) -> dict[str, Any]:
    """The options of ``train`` given on the command line ``argv``, ``{dest: value}``: a
    parse by a parser whose train options have no defaults (an option left out is then
    missing from the result)."""
    fresh = build()
    for action in fresh.train_options.values():
        action.default = argparse.SUPPRESS
    args, _ = fresh.parser.parse_known_args(argv)
    return {k: v for k, v in vars(args).items() if k in fresh.train_options}


def _read_toml(path: str) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:                       # Python 3.10
        import tomli as tomllib
    if os.path.isdir(path):
        raise CommandError(f"--config {path}: a folder, not a TOML file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CommandError(f"--config {path}: no such file") from None
    except OSError as err:
        raise CommandError(f"--config {path}: {err.strerror or err}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise CommandError(f"--config {path}: not UTF-8 (line {line}: {err.reason} at byte "
                           f"{err.start})") from None
    except tomllib.TOMLDecodeError as err:
        raise CommandError(f"--config {path}: not valid TOML: {err}") from None


#: Options whose value is a path: read from a ``--config`` file, a relative one is taken
#: from the file's folder.
_PATH_OPTIONS = ("train_file", "dev_file")


def _config_defaults(cmd: Command, path: str) -> dict:
    """The options of the ``--config`` file ``path``, checked, with its relative data
    paths resolved against the file's folder."""
    values = opts.option_values(_read_toml(path), cmd.train_options, path)
    folder = os.path.dirname(path)
    for dest in _PATH_OPTIONS:
        if dest in values and not os.path.isabs(values[dest]):
            values[dest] = os.path.join(folder, values[dest])
    return values


def _option_name(cmd: Command, dest: str) -> str:
    """``--train`` for ``train_file``: the option as typed."""
    action = cmd.train_options.get(dest)
    return action.option_strings[0] if action is not None else "--" + dest.replace("_", "-")


def _stored_options(path: str) -> dict:
    """The options a checkpoint of ``xpseq train`` stored, for ``--resume``."""
    from xpseq.train import checkpoint

    try:
        loaded = checkpoint.load(path)
    except FileNotFoundError:
        raise CommandError(f"--resume {path}: no such checkpoint") from None
    except checkpoint.CheckpointError as err:
        raise CommandError(str(err)) from None
    stored = (loaded.metadata or {}).get("options")
    if not isinstance(stored, dict) or loaded.opt_state is None:
        raise CommandError(f"{path}: not a checkpoint of xpseq train that can be "
                           "continued (it records no options or no optimiser state)")
    return {k: v for k, v in stored.items() if k not in opts.NOT_STORED}


def _file_defaults(cmd: Command, argv: list[str], args: argparse.Namespace) -> dict:
    """``train --config FILE`` / ``--resume CHECKPOINT``: the file's or the stored run's
    options, checked as typed ones are, as train's defaults (so that the options typed on
    the command line win). ``--resume`` refuses a typed option that would change the run
    (any but :data:`~xpseq.app.options.RESUMABLE`)."""
    if args.config and args.resume:
        raise CommandError("--config starts a run and --resume continues one; give one")
    if args.config:
        return _config_defaults(cmd, args.config)
    stored = opts.option_values(_stored_options(args.resume), cmd.train_options,
                                str(args.resume))
    # Compared by value, whatever was typed: --seed 0 on a run of seed 5 is a change,
    # --seed 5 is not.
    changed = sorted(_option_name(cmd, dest) for dest, value in
                     _typed_train_options(argv).items()
                     if dest not in opts.RESUMABLE and dest not in opts.NOT_STORED
                     and value != stored.get(dest, cmd.train_options[dest].default))
    if changed:
        may = ", ".join(_option_name(cmd, n) for n in opts.RESUMABLE if n != "resume")
        raise CommandError(f"--resume continues the stored run; it cannot change "
                           f"{', '.join(changed)} (only {may})")
    return stored


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]] | int:
    """``argv`` parsed, with the options of ``train --config`` / ``--resume`` merged in
    (``parser.set_defaults``); an exit code where that failed."""
    cmd = build()
    args, extra = cmd.parser.parse_known_args(argv)
    if args.command != "train":
        return args, extra
    if args.config or args.resume:
        try:
            defaults = _file_defaults(cmd, argv, args)
        except argparse.ArgumentError as err:         # a value its option refuses
            cmd.train.error(str(err))
        except (CommandError, ValueError) as err:
            print(f"xpseq: error: {err}", file=sys.stderr)
            return 1
        cmd.train.set_defaults(**defaults)
        args, extra = cmd.parser.parse_known_args(argv)
        args.out = args.out or args.resume
    if not args.out:
        args.parser.error("the following arguments are required: --out")
    return args, extra


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parsed = _parse(argv)
    if isinstance(parsed, int):
        return parsed
    args, extra = parsed
    debug = args.debug or os.environ.get("XPSEQ_DEBUG", "") not in ("", "0")
    try:
        backends.set_threads(args.threads, jax=args.threads is not None)
    except ValueError as err:                 # OMP_NUM_THREADS beyond the CPUs
        if debug:
            raise
        print(f"xpseq: error: {_one_line(err)}", file=sys.stderr)
        return 1
    args.argv, args.entry = argv, main        # train --devices N reruns it in each process
    command_parser = args.parser
    if extra:
        # translate: words after an option are more sentences (argparse does not
        # intermix positionals and options with subcommands).
        if args.command == "translate" and not any(e.startswith("-") for e in extra):
            args.sentences = list(args.sentences) + extra
        elif args.command == "g2p" and not any(e.startswith("-") for e in extra):
            args.words = list(args.words) + extra
        else:
            command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "g2p" and args.text and (args.n_best > 1 or args.lookup):
        command_parser.error("--text gives one pronunciation per word, dictionary words "
                             "from the dictionary (--model-only turns that off); --n-best "
                             "and --lookup are options of words, not of --text")
    if args.command == "g2p" and args.model_only and not args.text:
        command_parser.error("--model-only is an option of --text (words alone come from "
                             "the model unless --lookup)")
    if getattr(args, "n_best", 1) > getattr(args, "beam", 1):
        command_parser.error(f"--n-best ({args.n_best}) cannot exceed --beam ({args.beam})")
    if getattr(args, "compile", False) and args.backend not in (None, "torch"):
        command_parser.error(f"--compile applies to --backend torch (torch.compile), not "
                             f"--backend {args.backend}: JAX always compiles with jax.jit, "
                             "and numpy and array_api_strict cannot compile")
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _notes(warnings.showwarning)
            code = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, and keep Python from complaining
        # again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("xpseq: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 (one line for every failure; --debug for more)
        if debug:
            raise
        print(f"xpseq: error: {_one_line(err)}", file=sys.stderr)
        return 1


def _notes(show: Any) -> Any:
    """A ``warnings.showwarning`` that prints xpseq's own warnings (e.g. a checkpoint whose
    metadata no digest covers) as one ``xpseq: note: ...`` line, and hands the others
    to ``show``."""
    def showwarning(message: Warning | str, category: type[Warning], filename: str,
                    lineno: int, file: Any = None, line: str | None = None) -> None:
        if category.__module__.split(".")[0] == "xpseq":
            print(f"xpseq: note: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


def _one_line(err: BaseException) -> str:
    """An exception as one line: its message (with the kind of failure where the message
    alone would not say), and a hint to ``--debug`` for what the command did not expect."""
    if isinstance(err, CommandError):
        return str(err)
    if isinstance(err, OSError) and err.errno is not None:
        if err.filename is not None:
            return oserror_message(err)
        return f"cannot write the output: {err.strerror}"
    text = " ".join(str(err).split()) or type(err).__name__
    expected = (ValueError, TypeError, FloatingPointError, FileNotFoundError)
    if isinstance(err, expected):
        return text
    return f"{type(err).__name__}: {text} (run with --debug for the traceback)"


if __name__ == "__main__":
    sys.exit(main())
