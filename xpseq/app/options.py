"""The options more than one ``xpseq`` subcommand takes, as functions, and the parser.

Each ``*_option(s)(parser)`` function adds one option or group to a parser and returns what
it added, ``{dest: argparse.Action}`` (in the manner of OpenNMT-py's ``opts.py``). Each
subcommand's module in :mod:`xpseq.app.commands` builds its own parser from them and its
own options, and checks what its options mean together (``check_search``,
``check_compile`` here for the checks several share); ``train``'s many options are
:mod:`xpseq.app.commands.train_options`'. This module knows nothing of what a subcommand
does.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Any, Callable, Sequence

from xpseq import backends
from xpseq.core.decoding import LENGTH_PENALTIES
from xpseq.core.precision import Policy
from xpseq.search import MAX_BEAM

__all__ = ["Parser", "positive", "number_in", "seed_value", "beam_size", "DEFAULT_BACKEND",
           "DEFAULT_DECODE_BACKEND", "Actions", "actions_of", "global_options",
           "compile_option", "backend_option", "backend_options", "dtype_and_seed_options",
           "precision_option", "precision_of", "PRECISION_CHOICES", "beam_option",
           "n_best_option", "search_options", "decode_options", "check_search",
           "check_compile", "EXPORT_BACKEND", "check_export_backend"]

Actions = dict[str, argparse.Action]

# ----------------------------------------------------------------- parser and types


#: The characters besides "\n" at which ``str.splitlines`` breaks, as escapes.
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


class Parser(argparse.ArgumentParser):
    """Argument errors as one line (no usage dump), pointing at ``--help``; exit code 2.

    A mistyped subcommand, choice or option is told the nearest one (``did you mean
    'train'?``, ``did you mean --model?``), and an unknown option is refused before a
    missing required argument, so that the typo is what the line names.

    A value that reads as a negative number (``-1e-3``, ``-inf``, not only argparse's
    ``-1`` and ``-.5``) is a value, so that ``--lr -1e-3`` is refused for its range rather
    than as "expected one argument"."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(
            r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)
        self._commands: Any = None            # the subcommands' action, if any

    def add_subparsers(self, **kwargs: Any) -> Any:
        self._commands = super().add_subparsers(**kwargs)
        return self._commands

    def error(self, message: str) -> None:  # type: ignore[override]
        # One line whatever the user typed: the line breaks other than "\n" that an
        # echoed argument may hold (a carriage return, ...) are shown escaped.
        message = message.translate(_LINE_BREAKS)
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> Any:
        """As argparse's, but an option this parser does not know (``--modle``) is an
        error first, before a missing required argument, with the nearest option (``did
        you mean --model?``)."""
        args = list(sys.argv[1:] if args is None else args)
        unknown = self._unknown_options(args)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}"
                       f"{_did_you_mean(unknown, self._long_options())}")
        return super().parse_known_args(args, namespace)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's ``invalid choice`` (a subcommand or an option's value), with the
        nearest choice when one is close (``'trian'; did you mean 'train'?``)."""
        if action.choices is None or value in action.choices:
            return
        guess = _close_match(str(value), [str(c) for c in action.choices])
        hint = "" if guess is None else f"; did you mean {guess!r}?"
        raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint} (choose from "
                                     f"{', '.join(map(repr, action.choices))})")

    def _long_options(self) -> list[str]:
        return [o for a in self._actions for o in a.option_strings if o.startswith("--")]

    def _unknown_options(self, args: list[str]) -> list[str]:
        """The ``--name`` arguments (up to a ``--``) that are no option of this parser, nor
        the start of one (argparse takes a unique prefix, and refuses an ambiguous one
        itself). A parser of subcommands looks only at the arguments before the
        subcommand: what follows is the subcommand's to check."""
        known = self._long_options()
        takes_value = {o for a in self._actions for o in a.option_strings if a.nargs != 0}
        commands = self._commands is not None
        unknown, skip = [], False
        for arg in args:
            if skip:
                skip = False
                continue
            if arg == "--":
                break
            if not arg.startswith("-"):
                if commands:
                    break                     # the subcommand
                continue
            name = arg.split("=", 1)[0]
            if not arg.startswith("--") or len(arg) < 3 or " " in arg:
                continue                      # -h, a negative number, a sentence
            if name in known or (self.allow_abbrev and any(o.startswith(name) for o in known)):
                skip = commands and "=" not in arg and name in takes_value
                continue
            unknown.append(name)
        return unknown


def _close_match(word: str, candidates: Sequence[str]) -> str | None:
    """The candidate nearest ``word`` (``difflib.get_close_matches``, leading dashes
    aside), or ``None`` when none is close."""
    bare = {c.lstrip("-"): c for c in candidates}
    found = difflib.get_close_matches(word.lstrip("-"), list(bare), n=1, cutoff=0.6)
    return bare[found[0]] if found else None


def _did_you_mean(unknown: list[str], candidates: Sequence[str]) -> str:
    """``"; did you mean --model?"`` for the unknown options that have a near one."""
    guesses = {name: _close_match(name, candidates) for name in unknown}
    found = [(name, guess) for name, guess in guesses.items() if guess is not None]
    if not found:
        return ""
    if len(unknown) == 1:
        return f"; did you mean {found[0][1]}?"
    return "; did you mean " + ", ".join(f"{g} (for {n})" for n, g in found) + "?"


def positive(kind: type = int, *, at_most: float | None = None,
             why: str = "") -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` (``int`` or ``float``) above zero (and at most
    ``at_most``, ``why`` saying why), or an error ``expected a positive integer / number``
    (also used by the scripts)."""
    what = "a positive integer" if kind is int else "a positive number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        if at_most is not None and value > at_most:
            raise argparse.ArgumentTypeError(f"expected at most {at_most}{why}, got {text}")
        return value

    return parse


def number_in(low: float, high: float, *, high_open: bool = True) -> Callable[[str], float]:
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


def seed_value(text: str) -> int:
    """An argparse type: a seed, an int in ``[0, 2**32)``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") \
            from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**32), got {text}")
    return value


#: An argparse type: a beam size (or n-best) in [1, MAX_BEAM].
beam_size = positive(at_most=MAX_BEAM, why=" (memory grows with the beam)")

#: How every command picks its backend when --backend is not given.
#: How ``--backend``'s help names the default rule, for training and for decoding
#: (:data:`xpseq.backends.PREFERENCE`).
DEFAULT_BACKEND = ("(default: $XPSEQ_BACKEND, else the fastest installed for training: "
                   f"{', '.join(backends.PREFERENCE['train'])})")
DEFAULT_DECODE_BACKEND = ("(default: $XPSEQ_BACKEND, else the fastest installed for "
                          f"decoding: {', '.join(backends.PREFERENCE['decode'])})")

# -------------------------------------------------------------------------- groups


def actions_of(*actions: argparse.Action) -> Actions:
    """The options just added, ``{dest: action}``: what an ``*_options`` function returns."""
    return {a.dest: a for a in actions}


def global_options(parser: argparse.ArgumentParser, version: str) -> Actions:
    """``--version``, ``--threads``, ``--debug``: the options before the subcommand."""
    return actions_of(
        parser.add_argument("--version", action="version", version=version),
        parser.add_argument("--threads", type=positive(
                                at_most=backends.usable_cpus(),
                                why=" (the CPUs this process may use)"),
                            default=None, metavar="N",
                            help="threads of PyTorch and NumPy's BLAS (and XLA's, when "
                            "given); default: $OMP_NUM_THREADS, else 1 (measured on 2 "
                            "cores: a second thread gains at most 1.4x when the machine is "
                            "idle and costs 3x when it is busy; JAX gains nothing)"),
        parser.add_argument("--debug", action="store_true",
                            help="show the traceback of a failure instead of one line "
                            "(also: XPSEQ_DEBUG=1)"))


def compile_option(parser: argparse.ArgumentParser) -> Actions:
    """``--compile``: the torch backend with torch.compile (``backends.get("torch",
    compile=True)``)."""
    return actions_of(parser.add_argument(
        "--compile", action="store_true",
        help="run PyTorch's training step and decoder step through torch.compile (implies "
        "--backend torch; not stored in a checkpoint, so give it again with --resume). "
        f"{COMPILE_COST}"))


#: What ``--compile`` costs and gains, for its help (measured: xpseq.backends._torch).
COMPILE_COST = ("Each new batch shape is compiled first: at the benchmarks' sizes one to "
                "three minutes a shape, seconds once inductor's cache holds it; the RNN's "
                "training step then ran about twice as fast, the Transformer's no faster")


#: ``--backend``'s choice, of earlier releases, for a model that is an ONNX export's folder:
#: an export now decodes on onnxruntime by what it is. Still accepted, with a note
#: (:func:`check_export_backend`), and still asking that the model be an export.
EXPORT_BACKEND = "onnxruntime"


def backend_option(parser: argparse.ArgumentParser, backend_help: str, *,
                   export: bool = False) -> Actions:
    """``--backend`` (``export``: a subcommand whose model may be an ONNX export's folder,
    which accepts the deprecated :data:`EXPORT_BACKEND` too, and says so in the help)."""
    choices = (*backends.NAMES, EXPORT_BACKEND) if export else backends.NAMES
    if export:
        backend_help += ("; a model that is an ONNX export's folder (xpseq export --onnx DIR) "
                         "decodes on onnxruntime without it")
    return actions_of(parser.add_argument(                # (the deprecated one not shown)
        "--backend", choices=choices, default=None, help=backend_help,
        metavar="{" + ",".join(backends.NAMES) + "}"))


def backend_options(parser: argparse.ArgumentParser, backend_help: str, *,
                    export: bool = False) -> Actions:
    """``--backend``, ``--compile``, ``--dtype``, ``--seed``: what every model subcommand
    takes (``export``: as for :func:`backend_option`)."""
    return {**backend_option(parser, backend_help, export=export), **compile_option(parser),
            **dtype_and_seed_options(parser)}


def dtype_and_seed_options(parser: argparse.ArgumentParser) -> Actions:
    """``--dtype`` (of the parameters) and ``--seed``."""
    return actions_of(
        parser.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                            help="floating dtype of the parameters (default: float32)"),
        parser.add_argument("--seed", type=seed_value, default=0,
                            help="random seed (default: 0)"))


def check_export_backend(args: argparse.Namespace) -> None:
    """The deprecated ``--backend`` :data:`EXPORT_BACKEND`: a note on stderr that it is no
    longer needed (``args.backend`` keeps it: the model must then be an export)."""
    if args.backend == EXPORT_BACKEND:
        print(f"xpseq: note: --backend {EXPORT_BACKEND} is no longer needed and will be "
              "removed: a model that is an ONNX export's folder decodes on onnxruntime "
              "without it", file=sys.stderr)


#: ``--precision``'s choices: ``dtype`` computes in ``--dtype``; ``bf16`` is mixed precision.
PRECISION_CHOICES = ("dtype", "bf16")


def precision_option(parser: argparse.ArgumentParser, help: str | None = None) -> Actions:
    """``--precision``: what the matrix products and activations are computed in (``help``:
    a subcommand's own words for it)."""
    return actions_of(
        parser.add_argument("--precision", choices=PRECISION_CHOICES, default="dtype",
                            help=help or "dtype: compute in --dtype (default); bf16: mixed "
                            "precision, matrix products and activations in bfloat16 with "
                            "the parameters, softmax, layer-norm statistics and the loss in "
                            "float32 (jax and torch; fastest where the processor multiplies "
                            "bfloat16 natively: AVX512-BF16, AMX)"))


def precision_of(args: argparse.Namespace) -> Policy:
    """``--precision`` as the library's precision policy, made once here
    (``Policy(None)`` for ``dtype``)."""
    return Policy(None if args.precision == "dtype" else args.precision)


def beam_option(parser: Any) -> Actions:
    """``--beam K``: greedy (1, the default) or beam search (a parser or a group)."""
    return actions_of(parser.add_argument(
        "--beam", type=beam_size, default=1, metavar="K",
        help=f"beam size, at most {MAX_BEAM}; 1 is greedy search (default: 1)"))


def n_best_option(parser: Any, what: str) -> Actions:
    """``--n-best N``: print the N best answers, ``what`` saying how (a parser or a
    group)."""
    return actions_of(parser.add_argument("--n-best", type=beam_size, default=1, metavar="N",
                                          help=f"print the N best {what}"))


def search_options(parser: argparse.ArgumentParser, *, n_best: bool = True) -> Actions:
    """Greedy or beam search: ``--beam``, ``--length-penalty``, ``--alpha``, and
    ``--n-best`` for a command that prints the N best (``n_best``)."""
    g = parser.add_argument_group("search")
    actions = actions_of(
        *beam_option(g).values(),
        g.add_argument("--length-penalty", choices=LENGTH_PENALTIES, default="avg",
                       help="how beam search ranks hypotheses of different lengths "
                       "(default: avg)"),
        g.add_argument("--alpha", type=number_in(0.0, 10.0, high_open=False), default=0.6,
                       help="GNMT length penalty exponent, in [0, 10] (default: 0.6)"))
    if n_best:
        actions.update(n_best_option(
            g, "hypotheses (N <= K), a line each: index<TAB>rank<TAB>score<TAB>translation "
            "(index: the input line from 0; rank: 0 is the best; score: summed "
            "log-probability)"))
    return actions


def decode_options(parser: argparse.ArgumentParser, *, export: bool = False,
                   dtype_and_seed: bool = True, precision_help: str | None = None) -> Actions:
    """What a subcommand that decodes a model takes: ``--backend`` for decoding
    (``export``: its model may be an ONNX export's folder, :func:`backend_option`),
    ``--compile``, ``--dtype`` and ``--seed`` (unless ``dtype_and_seed`` is false) and
    ``--precision`` (``precision_help``: the subcommand's own words for it)."""
    actions = backend_option(parser, "backend to decode on " + DEFAULT_DECODE_BACKEND,
                             export=export)
    actions.update(compile_option(parser))
    if dtype_and_seed:
        actions.update(dtype_and_seed_options(parser))
    actions.update(precision_option(parser, precision_help))
    return actions


def check_search(args: argparse.Namespace) -> None:
    """What :func:`search_options` mean together: ``--n-best`` at most ``--beam``."""
    if getattr(args, "n_best", 1) > args.beam:
        args.parser.error(f"--n-best ({args.n_best}) cannot exceed --beam ({args.beam})")


def check_compile(args: argparse.Namespace) -> None:
    """``--compile`` is torch's: refused with another ``--backend``."""
    if args.compile and args.backend not in (None, "torch"):
        args.parser.error(f"--compile applies to --backend torch (torch.compile), not "
                          f"--backend {args.backend}: JAX always compiles with jax.jit, "
                          "and numpy and array_api_strict cannot compile")
