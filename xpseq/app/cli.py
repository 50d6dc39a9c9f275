"""The ``xpseq`` command: demo, train, translate, g2p, evaluate, heatmap, data, tour.

Every model subcommand takes ``--backend`` (numpy, jax, torch, array_api_strict; all of
them train, numpy and array_api_strict with hand-derived gradients, slowly), ``--dtype``
(float32 or float64) and ``--seed``.

Errors are one line on stderr and an exit code: 2 for bad arguments (``xpseq CMD: error:
...``; values are checked by the parser, before anything is created on disk), 1 for every
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
from typing import Any, Callable, Sequence

from xpseq import backends

from .commands import (
    TOY_DEFAULTS,
    TRANSFORMER_DEFAULTS,
    CommandError,
    _oserror,
    cmd_data,
    cmd_demo,
    cmd_evaluate,
    cmd_g2p,
    cmd_heatmap,
    cmd_tour,
    cmd_train,
    cmd_translate,
)

__all__ = ["main"]

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


#: How every command picks its backend when --backend is not given.
DEFAULT_BACKEND = "(default: $XPSEQ_BACKEND, else the fastest installed: jax, torch, numpy)"


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line (no usage dump), pointing at ``--help``; exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="xpseq", description="Sequence-to-sequence learning with attention, written once "
        "for NumPy, JAX and PyTorch.")
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--threads", type=_positive, default=None, metavar="N",
                        help="threads of PyTorch and NumPy's BLAS (and XLA's, when given); "
                        "default: $OMP_NUM_THREADS, else 1 (measured on 2 cores: a second "
                        "thread gains at most 1.4x when the machine is idle and costs 3x "
                        "when it is busy; JAX gains nothing)")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of a failure instead of one line (also: "
                        "XPSEQ_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser, backend_help: str) -> None:
        p.add_argument("--backend", choices=backends.NAMES, default=None, help=backend_help)
        p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                       help="floating dtype of the parameters (default: float32)")
        p.add_argument("--seed", type=_seed, default=0, help="random seed (default: 0)")

    def search(p: argparse.ArgumentParser) -> None:
        p.add_argument("--beam", type=_positive, default=1, metavar="K",
                       help="beam size; 1 is greedy search (default: 1)")
        p.add_argument("--length-penalty", choices=("none", "avg", "gnmt"), default="avg",
                       help="how beam search ranks hypotheses of different lengths "
                       "(default: avg)")
        p.add_argument("--alpha", type=_number_in(0.0, 10.0, high_open=False), default=0.6,
                       help="GNMT length penalty exponent, in [0, 10] (default: 0.6)")
        p.add_argument("--n-best", type=_positive, default=1, metavar="N",
                       help="print the N best hypotheses (N <= K), a line each: "
                       "index<TAB>rank<TAB>score<TAB>translation (index: the input line "
                       "from 0; rank: 0 is the best; score: summed log-probability)")

    p = sub.add_parser("demo", help="train attention and seq2seq on the toy task and compare",
                       description="The attention experiment end to end: trains the attention "
                       "model and the plain seq2seq baseline on the toy English->Zhoric task, "
                       "then prints the table by sentence length, greedy vs beam search, an "
                       "attention heatmap and teacher forcing vs autoregressive decoding.")
    common(p, "training backend " + DEFAULT_BACKEND)
    p.add_argument("--quick", action="store_true", help="a small smoke run (under a minute)")
    p.add_argument("--out", default="out", help="folder for the PNGs (default: out)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_demo, parser=p)

    p = sub.add_parser("train", help="train a model and save a checkpoint")
    common(p, "training backend " + DEFAULT_BACKEND)
    p.add_argument("--task", choices=("toy", "tsv", "g2p"), default="toy",
                   help="the toy task, your own TSV corpus, or grapheme-to-phoneme "
                   "conversion on the CMU dictionary (needs xpseq[g2p]) (default: toy)")
    p.add_argument("--train", dest="train_file", help="training pairs, source<TAB>target")
    p.add_argument("--dev", dest="dev_file", help="dev pairs, source<TAB>target")
    p.add_argument("--tokens", choices=("word", "char"), default="word",
                   help="how TSV lines are split into tokens (default: word)")
    p.add_argument("--out", help="the checkpoint to write (.safetensors; required, except "
                   "with --resume, which then writes the checkpoint it continues)")
    p.add_argument("--config", metavar="FILE.toml",
                   help="options from a TOML file (keys are the options' names, e.g. "
                   "model = \"transformer\", d_model = 128); options on the command line "
                   "win; the effective values are stored in the checkpoint")
    p.add_argument("--resume", metavar="CHECKPOINT",
                   help="continue the run that wrote CHECKPOINT (its stored options, "
                   "parameters, optimiser state and place in the data); only --epochs, "
                   "--time-limit, --out, --backend, --devices and --no-progress may change")
    p.add_argument("--attention", choices=("none", "dot", "general", "additive", "scaled_dot"),
                   default=None, help="(default: general)")
    p.add_argument("--style", choices=("luong", "bahdanau"), default=None,
                   help="(default: luong)")
    p.add_argument("--cell", choices=("lstm", "gru"), default=None, help="(default: lstm)")
    p.add_argument("--model", choices=("rnn", "transformer"), default=None,
                   help="the model kind (default: rnn; for g2p the recipe's); --attention, "
                   "--style, --cell, --embed and --hidden shape the rnn, --d-model, --heads, "
                   "--layers, --d-ff, --norm, --label-smoothing, --warmup and --max-tokens the "
                   "transformer")
    tdefaults = ", ".join(f"{k} {v}" for k, v in TRANSFORMER_DEFAULTS.items())
    p.add_argument("--d-model", type=_positive, default=None,
                   help=f"transformer options; defaults: {tdefaults}")
    p.add_argument("--heads", type=_positive, default=None)
    p.add_argument("--layers", type=_positive, default=None,
                   help="encoder and decoder layers, each")
    p.add_argument("--d-ff", type=_positive, default=None)
    p.add_argument("--norm", choices=("pre", "post"), default=None)
    p.add_argument("--label-smoothing", type=_number_in(0.0, 1.0), default=None)
    p.add_argument("--warmup", type=_positive, default=None,
                   help="warm-up steps of the inverse-square-root schedule")
    p.add_argument("--max-tokens", type=_positive, default=None,
                   help="batches by token count: at most this many padded tokens a batch")
    sizes = ", ".join(f"{k} {v}" for k, v in TOY_DEFAULTS.items() if k not in ("attention",
                                                                                "style", "cell"))
    p.add_argument("--embed", type=_positive, default=None,
                   help=f"model and training options; defaults for toy and tsv: {sizes}; "
                   "for g2p: xpseq.tasks.g2p.RECIPE")
    p.add_argument("--hidden", type=_positive, default=None)
    p.add_argument("--dropout", type=_number_in(0.0, 1.0), default=None)
    p.add_argument("--epochs", type=_positive, default=None)
    p.add_argument("--lr", type=_number_in(1e-12, 10.0, high_open=False), default=None,
                   help="Adam's step size, in [1e-12, 10]")
    p.add_argument("--batch-size", type=_positive, default=None)
    p.add_argument("--stress", action="store_true",
                   help="g2p: keep the stress marks (AH0, AH1, ...; default: removed)")
    p.add_argument("--time-limit", type=_positive_float, default=None, metavar="MINUTES",
                   help="g2p: stop training after this many minutes (default: the recipe's)")
    p.add_argument("--monitor", choices=("dev_loss", "dev_wer"), default=None,
                   help="g2p: what the kept epoch (and early stopping or the step-size decay, "
                   "if on) watch: the greedy WER on the dev words (default) or the dev loss")
    p.add_argument("--quick", action="store_true", help="the small toy dataset")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--devices", type=_positive, default=1,
                   help="train data-parallel on N devices: on jax the host's cores (or its "
                        "accelerators), on torch N processes of one thread; under torchrun, "
                        "its process count (default: 1)")
    p.set_defaults(func=cmd_train, parser=p)

    p = sub.add_parser("translate", help="translate sentences with a checkpoint",
                       description="Translate sentences given as arguments, or one per line "
                       "on stdin. Unknown words become <unk>; an empty line gives an empty line.")
    common(p, "backend to decode on " + DEFAULT_BACKEND)
    p.add_argument("checkpoint")
    p.add_argument("sentences", nargs="*", help="sentences (default: read stdin)")
    p.add_argument("--max-tokens", type=_positive, default=256,
                   help="cut longer sentences to this many tokens (default: 256)")
    search(p)
    p.set_defaults(func=cmd_translate, parser=p)

    p = sub.add_parser("g2p", help="pronounce English words with the shipped G2P model",
                       description="The ARPAbet phones of each word, given as arguments or one "
                       "per line on stdin, printed as word<TAB>phones in input order (N lines "
                       "a word with --n-best N). Words are read lower-cased; characters the "
                       "model does not know are left out with a note on stderr; an empty line "
                       "gives an empty line. No training, no network: the model ships with "
                       "xpseq (CMU dictionary, stress removed).")
    p.add_argument("words", nargs="*", help="words (default: read stdin)")
    p.add_argument("--backend", choices=backends.NAMES, default=None,
                   help="backend to decode on " + DEFAULT_BACKEND)
    p.add_argument("--model", action="append", metavar="PATH",
                   help="a checkpoint of xpseq train --task g2p instead of the shipped model "
                   "(repeat for an ensemble)")
    p.add_argument("--lookup", action="store_true",
                   help="answer words of the CMU dictionary from it, the others from the "
                   "model")
    p.add_argument("--beam", type=_positive, default=1, metavar="K",
                   help="beam size; 1 is greedy search (default: 1)")
    p.add_argument("--n-best", type=_positive, default=1, metavar="N",
                   help="print the N best pronunciations (N <= K)")
    p.set_defaults(func=cmd_g2p, parser=p)

    p = sub.add_parser("evaluate", help="BLEU and exact match by bucket; PER and WER for G2P",
                       description="Translate a test set with a checkpoint and print corpus "
                       "BLEU (sacrebleu) and exact match per bucket: the toy task's phrase "
                       "counts 0-4, or one row for a TSV test file. A G2P checkpoint prints "
                       "phone and word error rates on the dictionary's test split, for "
                       "greedy and beam search (k = --beam, 5 by default).")
    common(p, "backend to decode on " + DEFAULT_BACKEND)
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
    search(p)
    p.set_defaults(func=cmd_evaluate, parser=p)

    p = sub.add_parser("data", help="export a task's data as TSV (the G2P split, the toy task)",
                       description="g2p: write the seeded CMU dictionary split as train.tsv, "
                       "dev.tsv and test.tsv (word<TAB>phones, one line per pronunciation), "
                       "so that other G2P tools train and score on exactly the same words. "
                       "toy: write the toy task's pairs (the demo's, or --quick's) as "
                       "train.tsv, dev.tsv and test-0.tsv ... test-4.tsv (by phrase count), "
                       "source<TAB>target, which train --task tsv reads.")
    p.add_argument("dataset", choices=("g2p", "toy"))
    p.add_argument("--export", required=True, metavar="DIR", help="the folder to write")
    p.add_argument("--stress", action="store_true", help="g2p: keep the stress marks")
    p.add_argument("--quick", action="store_true", help="toy: the small toy dataset")
    p.add_argument("--seed", type=_seed, default=0,
                   help="the split's seed (g2p; default: 0, the published split) or the toy "
                   "data's")
    p.set_defaults(func=cmd_data, parser=p)

    p = sub.add_parser("heatmap", help="the attention of one translation, in the terminal "
                       "and as a PNG",
                       description="Translate one sentence and draw its attention weights: "
                       "rows are the generated words, columns the source words.")
    common(p, "backend to decode on " + DEFAULT_BACKEND)
    p.add_argument("checkpoint")
    p.add_argument("sentence", help="the source sentence (quoted)")
    p.add_argument("--png", help="also write the heatmap to this PNG")
    search(p)
    p.set_defaults(func=cmd_heatmap, parser=p)

    p = sub.add_parser("tour", help="the autodiff tour: numpy by hand, jax, torch side by side",
                       description="Lessons on how automatic differentiation differs between "
                       "JAX (function transforms), PyTorch (a tape) and NumPy (gradients "
                       "derived by hand), each measured at run time on the installed versions.")
    p.add_argument("--lesson", type=_positive, metavar="N", help="run lesson N only")
    p.add_argument("--list", action="store_true", help="list the lessons")
    p.set_defaults(func=cmd_tour, parser=p)
    return parser


def positive(kind: type = int) -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` (``int`` or ``float``) above zero, or an error
    ``expected a positive integer / number`` (also used by the scripts)."""
    what = "a positive integer" if kind is int else "a positive number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


_positive, _positive_float = positive(int), positive(float)


def _number_in(low: float, high: float, *, high_open: bool = True) -> Callable[[str], float]:
    """An argparse type: a finite float in ``[low, high)`` (or ``[low, high]``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        inside = low <= value < high if high_open else low <= value <= high
        if not inside:
            bracket = ")" if high_open else "]"
            raise argparse.ArgumentTypeError(f"expected a number in [{low:g}, {high:g}"
                                             f"{bracket}, got {text}")
        return value

    return parse


def _seed(text: str) -> int:
    """An argparse type: a seed, an int in ``[0, 2**32)``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") \
            from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**32), got {text}")
    return value


#: ``train`` options that a ``--config`` file cannot set.
NOT_CONFIGURABLE = ("out", "config", "resume", "func", "parser", "argv", "debug", "command",
                    "threads")
#: ``train`` options that are not part of a run's stored settings.
NOT_STORED = NOT_CONFIGURABLE + ("no_progress",)
#: What ``train --resume`` may change.
RESUMABLE = ("epochs", "time_limit", "out", "backend", "devices", "no_progress", "resume")


def _as_arguments(options: dict, parser: argparse.ArgumentParser, where: str) -> list[str]:
    """``{name: value}`` as the command-line words of ``parser``'s options (``--name
    value``; a flag for ``True``, nothing for ``False`` or ``None``), so that the parser
    checks them as it checks typed ones."""
    flags = {a.dest: a for a in parser._actions if a.option_strings}
    words = []
    for key, value in options.items():
        dest = key.replace("-", "_")
        dest = {"train": "train_file", "dev": "dev_file"}.get(dest, dest)
        action = flags.get(dest)
        if action is None or dest in NOT_CONFIGURABLE:
            known = sorted(a.option_strings[-1].lstrip("-") for d, a in flags.items()
                           if d not in NOT_CONFIGURABLE + ("help",))
            raise CommandError(f"{where}: {key!r} is not an option of train; known: "
                               f"{', '.join(known)}")
        if value is None or value is False:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            if value is not True:
                raise CommandError(f"{where}: {key} is a flag, true or false; got {value!r}")
            words.append(action.option_strings[0])
        elif isinstance(value, (dict, list)):
            raise CommandError(f"{where}: {key} must be a number or a string, got {value!r}")
        else:
            words += [action.option_strings[0], str(value)]
    return words


def _train_arguments(argv: list[str], args: argparse.Namespace,
                     parser: argparse.ArgumentParser) -> list[str]:
    """``train --config FILE`` / ``--resume CHECKPOINT``: the stored or written options in
    front of the typed ones (which come later and so win)."""
    index = argv.index("train")
    typed = argv[index + 1:]
    if args.config and args.resume:
        raise CommandError("--config starts a run and --resume continues one; give one")
    if args.config:
        try:
            import tomllib
        except ModuleNotFoundError:                       # Python 3.10
            import tomli as tomllib
        try:
            with open(args.config, "rb") as f:
                options = tomllib.load(f)
        except tomllib.TOMLDecodeError as err:
            raise CommandError(f"{args.config}: not valid TOML: {err}") from None
        return argv[:index + 1] + _as_arguments(options, parser, args.config) + typed
    from xpseq.train import checkpoint

    try:
        loaded = checkpoint.load(args.resume)
    except checkpoint.CheckpointError as err:
        raise CommandError(str(err)) from None
    stored = (loaded.metadata or {}).get("options")
    if not isinstance(stored, dict) or loaded.opt_state is None:
        raise CommandError(f"{args.resume}: not a checkpoint of xpseq train that can be "
                           "continued (it records no options or no optimiser state)")
    defaults = {a.dest: a.default for a in parser._actions if a.dest != "help"}
    changed = sorted(k for k, v in vars(args).items()
                     if k in defaults and v != defaults[k] and k not in RESUMABLE)
    if changed:
        raise CommandError(f"--resume continues the stored run; it cannot change "
                           f"{', '.join('--' + c.replace('_', '-') for c in changed)} "
                           f"(only --epochs, --time-limit, --out, --backend, --devices)")
    out = [] if args.out else ["--out", args.resume]
    return argv[:index + 1] + _as_arguments(stored, parser, str(args.resume)) + typed + out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(argv)
    if args.command == "train" and (args.config or args.resume):
        try:
            argv = _train_arguments(argv, args, args.parser)
        except CommandError as err:
            print(f"xpseq: error: {err}", file=sys.stderr)
            return 1
        resume = args.resume
        args, extra = parser.parse_known_args(argv)
        args.resume = resume
    if args.command == "train" and not args.out:
        args.parser.error("the following arguments are required: --out")
    backends.set_threads(args.threads, jax=args.threads is not None)
    args.argv = argv
    debug = args.debug or os.environ.get("XPSEQ_DEBUG", "") not in ("", "0")
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
    if getattr(args, "n_best", 1) > getattr(args, "beam", 1):
        command_parser.error(f"--n-best ({args.n_best}) cannot exceed --beam ({args.beam})")
    try:
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


def _one_line(err: BaseException) -> str:
    """An exception as one line: its message (with the kind of failure where the message
    alone would not say), and a hint to ``--debug`` for what the command did not expect."""
    if isinstance(err, CommandError):
        return str(err)
    if isinstance(err, OSError) and err.errno is not None:
        if err.filename is not None:
            return _oserror(err)
        return f"cannot write the output: {err.strerror}"
    text = " ".join(str(err).split()) or type(err).__name__
    expected = (ValueError, TypeError, FloatingPointError, FileNotFoundError)
    if isinstance(err, expected):
        return text
    return f"{type(err).__name__}: {text} (run with --debug for the traceback)"


if __name__ == "__main__":
    sys.exit(main())
