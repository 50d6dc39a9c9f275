"""The options of the ``xpseq`` command: argument groups as functions, and their defaults.

Each ``*_options(parser)`` function adds one group of options to a parser and returns what
it added, ``{dest: argparse.Action}`` (in the manner of OpenNMT-py's ``opts.py``);
:mod:`xpseq.app.cli` puts the groups together into the subcommands. What each subcommand
does is :mod:`xpseq.app.commands`'; this module knows nothing of it.

The defaults of ``train`` have one source each:

* model options: the model kind's ``Config`` defaults
  (:class:`xpseq.models.rnn.Seq2SeqConfig`, :class:`xpseq.models.transformer.TransformerConfig`),
  except where the toy and TSV tasks deliberately differ, :data:`TOY_MODEL_DEFAULTS`;
* training options: :data:`xpseq.tasks.experiment.TRAINING_DEFAULTS`, which
  ``Translator.train`` and ``train_model`` read too;
* ``--task g2p``: the recipe, :data:`xpseq.tasks.g2p_recipe.RECIPE` and ``MODELS``.

The parser's default of each model and training option is ``None``, "not given", so that
``train`` can tell a typed value from the kind's or the recipe's default
(:func:`kind_defaults` fills them in).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
from typing import Any, Callable, Mapping, Sequence

from xpseq import backends, models
from xpseq.core.decoding import LENGTH_PENALTIES
from xpseq.core.precision import Policy
from xpseq.core.recurrent import CELLS
from xpseq.models.rnn import ATTENTIONS, STYLES
from xpseq.search import MAX_BEAM
from xpseq.tasks.experiment import training_defaults

__all__ = ["Parser", "positive", "number_in", "seed_value", "DEFAULT_BACKEND",
           "DEFAULT_DECODE_BACKEND", "global_options", "compile_option", "backend_option",
           "backend_options", "precision_option",
           "precision_of", "PRECISION_CHOICES", "search_options", "data_options",
           "run_options", "model_options", "training_options", "g2p_options", "train_options",
           "MODEL_OPTIONS", "TRAINING_OPTIONS", "KIND_OPTIONS", "TOY_MODEL_DEFAULTS",
           "model_defaults", "kind_defaults", "config_fields", "NOT_CONFIGURABLE",
           "NOT_STORED", "RESUMABLE", "option_values"]

Actions = dict[str, argparse.Action]

# ----------------------------------------------------------------- parser and types


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


_positive, _positive_float = positive(int), positive(float)
#: An argparse type: a beam size (or n-best) in [1, MAX_BEAM].
beam_size = positive(at_most=MAX_BEAM, why=" (memory grows with the beam)")

#: How every command picks its backend when --backend is not given.
#: How ``--backend``'s help names the default rule, for training and for decoding
#: (:data:`xpseq.backends.PREFERENCE`).
DEFAULT_BACKEND = ("(default: $XPSEQ_BACKEND, else the fastest installed for training: "
                   f"{', '.join(backends.PREFERENCE['train'])})")
DEFAULT_DECODE_BACKEND = ("(default: $XPSEQ_BACKEND, else the fastest installed for "
                          f"decoding: {', '.join(backends.PREFERENCE['decode'])})")

# ------------------------------------------------------------------------ defaults

#: The model options of ``train`` for each model kind (the command's names; ``layers``
#: sets the Transformer's ``encoder_layers`` and ``decoder_layers``).
MODEL_OPTIONS: dict[str, tuple[str, ...]] = {
    "rnn": ("attention", "style", "cell", "embed", "hidden", "dropout"),
    "transformer": ("d_model", "heads", "layers", "d_ff", "norm", "dropout",
                    "label_smoothing"),
}
#: The training options of ``train`` for each model kind (their defaults:
#: :data:`xpseq.tasks.experiment.TRAINING_DEFAULTS`; ``max_tokens``, batching by token
#: count, is off by default).
TRAINING_OPTIONS: dict[str, tuple[str, ...]] = {
    "rnn": ("epochs", "lr", "batch_size"),
    "transformer": ("epochs", "lr", "batch_size", "warmup", "max_tokens"),
}
#: Every model and training option of ``train``, of any kind.
KIND_OPTIONS: tuple[str, ...] = tuple(sorted(set().union(*MODEL_OPTIONS.values(),
                                                        *TRAINING_OPTIONS.values())))
#: Where the toy and TSV tasks' models (``xpseq train``, ``xpseq demo``) differ from their
#: kind's ``Config`` defaults: dropout 0.1, and label smoothing 0.1 for the Transformer.
TOY_MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "rnn": {"dropout": 0.1},
    "transformer": {"dropout": 0.1, "label_smoothing": 0.1},
}
#: The ``Config`` fields an option of the command sets, where they differ from its name.
_CONFIG_FIELDS = {"layers": ("encoder_layers", "decoder_layers")}


def model_defaults(kind: str) -> dict[str, Any]:
    """The defaults of ``kind``'s model options (:data:`MODEL_OPTIONS`): the ``Config``
    dataclass defaults of the kind, with :data:`TOY_MODEL_DEFAULTS` on top."""
    fields = {f.name: f.default for f in dataclasses.fields(models.get(kind).Config)
              if f.default is not dataclasses.MISSING}
    out = dict(TOY_MODEL_DEFAULTS[kind])
    for name in MODEL_OPTIONS[kind]:
        if name in out:
            continue
        values = {fields[field] for field in _CONFIG_FIELDS.get(name, (name,))}
        if len(values) != 1:
            raise ValueError(f"{kind}: the Config fields that --{name.replace('_', '-')} "
                             f"sets have different defaults ({sorted(values)})")
        out[name] = values.pop()
    return {name: out[name] for name in MODEL_OPTIONS[kind]}


def kind_defaults(kind: str) -> dict[str, Any]:
    """Every model and training option of ``kind`` with its default (``None``: off)."""
    table = training_defaults(kind)
    return {**model_defaults(kind), **{name: table.get(name) for name in TRAINING_OPTIONS[kind]}}


def config_fields(kind: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Model options by the command's names as ``kind``'s ``Config`` fields (``layers`` ->
    ``encoder_layers`` and ``decoder_layers``); training options are left out."""
    out = {}
    for name in MODEL_OPTIONS[kind]:
        if name in values:
            out.update({field: values[name] for field in _CONFIG_FIELDS.get(name, (name,))})
    return out


def _defaults_text(kind: str, names: tuple[str, ...]) -> str:
    defaults = kind_defaults(kind)
    return ", ".join(f"{n} {defaults[n]}" for n in names if defaults[n] is not None)


# -------------------------------------------------------------------------- groups


def _added(*actions: argparse.Action) -> Actions:
    return {a.dest: a for a in actions}


def global_options(parser: argparse.ArgumentParser, version: str) -> Actions:
    """``--version``, ``--threads``, ``--debug``: the options before the subcommand."""
    return _added(
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
    return _added(parser.add_argument(
        "--compile", action="store_true",
        help="run PyTorch's training step and decoder step through torch.compile (implies "
        "--backend torch; not stored in a checkpoint, so give it again with --resume). "
        f"{COMPILE_COST}"))


#: What ``--compile`` costs and gains, for its help (measured: xpseq.backends._torch).
COMPILE_COST = ("Each new batch shape is compiled first: at the benchmarks' sizes one to "
                "three minutes a shape, seconds once inductor's cache holds it; the RNN's "
                "training step then ran about twice as fast, the Transformer's no faster")


def backend_option(parser: argparse.ArgumentParser, backend_help: str, *,
                   extra: tuple[str, ...] = ()) -> Actions:
    """``--backend`` (``extra``: backends of this subcommand alone, e.g. ``onnxruntime``)."""
    return _added(parser.add_argument("--backend", choices=(*backends.NAMES, *extra),
                                      default=None, help=backend_help))


def backend_options(parser: argparse.ArgumentParser, backend_help: str, *,
                    extra: tuple[str, ...] = ()) -> Actions:
    """``--backend``, ``--compile``, ``--dtype``, ``--seed``: what every model subcommand
    takes (``extra``: backends of this subcommand alone, e.g. ``onnxruntime``)."""
    return _added(
        *backend_option(parser, backend_help, extra=extra).values(),
        *compile_option(parser).values(),
        parser.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                            help="floating dtype of the parameters (default: float32)"),
        parser.add_argument("--seed", type=seed_value, default=0,
                            help="random seed (default: 0)"))


#: ``--precision``'s choices: ``dtype`` computes in ``--dtype``; ``bf16`` is mixed precision.
PRECISION_CHOICES = ("dtype", "bf16")


def precision_option(parser: argparse.ArgumentParser, help: str | None = None) -> Actions:
    """``--precision``: what the matrix products and activations are computed in (``help``:
    a subcommand's own words for it)."""
    return _added(
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


def search_options(parser: argparse.ArgumentParser, *, n_best: bool = True) -> Actions:
    """Greedy or beam search: ``--beam``, ``--length-penalty``, ``--alpha``, and
    ``--n-best`` for a command that prints the N best (``n_best``)."""
    g = parser.add_argument_group("search")
    actions = _added(
        g.add_argument("--beam", type=beam_size, default=1, metavar="K",
                       help=f"beam size, at most {MAX_BEAM}; 1 is greedy search (default: 1)"),
        g.add_argument("--length-penalty", choices=LENGTH_PENALTIES, default="avg",
                       help="how beam search ranks hypotheses of different lengths "
                       "(default: avg)"),
        g.add_argument("--alpha", type=number_in(0.0, 10.0, high_open=False), default=0.6,
                       help="GNMT length penalty exponent, in [0, 10] (default: 0.6)"))
    if n_best:
        actions.update(_added(g.add_argument(
            "--n-best", type=beam_size, default=1, metavar="N",
            help="print the N best hypotheses (N <= K), a line each: "
            "index<TAB>rank<TAB>score<TAB>translation (index: the input line from 0; rank: "
            "0 is the best; score: summed log-probability)")))
    return actions


def data_options(parser: argparse.ArgumentParser) -> Actions:
    """What ``train`` learns from: ``--task``, ``--train``, ``--dev``, ``--tokens``,
    ``--quick``."""
    g = parser.add_argument_group("data")
    return _added(
        g.add_argument("--task", choices=("toy", "tsv", "g2p"), default="toy",
                       help="the toy task, your own TSV corpus, or grapheme-to-phoneme "
                       "conversion on the CMU dictionary (needs xpseq[g2p]) (default: toy)"),
        g.add_argument("--train", dest="train_file",
                       help="training pairs, source<TAB>target"),
        g.add_argument("--dev", dest="dev_file", help="dev pairs, source<TAB>target"),
        g.add_argument("--tokens", choices=("word", "char"), default="word",
                       help="how TSV lines are split into tokens (default: word)"),
        g.add_argument("--quick", action="store_true", help="the small toy dataset"))


def run_options(parser: argparse.ArgumentParser) -> Actions:
    """Where ``train`` writes and how it runs: ``--out``, ``--config``, ``--resume``,
    ``--force``, ``--allow-data-change``, ``--devices``, ``--no-progress``."""
    g = parser.add_argument_group("run")
    resumable = ", ".join("--" + n.replace("_", "-") for n in RESUMABLE if n != "resume")
    return _added(
        g.add_argument("--out", help="the checkpoint to write (.safetensors; required, "
                       "except with --resume, which then writes the checkpoint it "
                       "continues)"),
        g.add_argument("--config", metavar="FILE.toml",
                       help="options from a TOML file (top-level keys are the options' "
                       "names, e.g. model = \"transformer\", d_model = 128; relative paths "
                       "of train and dev are read from the file's folder); options on the "
                       "command line win; the effective values are stored in the checkpoint"),
        g.add_argument("--resume", metavar="CHECKPOINT",
                       help="continue the run that wrote CHECKPOINT (its stored options, "
                       "parameters, optimiser state and place in the data); only "
                       f"{resumable} may change"),
        g.add_argument("--force", action="store_true",
                       help="replace an existing --out (and the metrics log beside it) that "
                       "is not an xpseq checkpoint; never a folder, a special file or one of "
                       "the run's inputs"),
        g.add_argument("--allow-data-change", action="store_true",
                       help="with --resume: continue although the data files differ from "
                       "those the run began with (their size and SHA-256 are stored in the "
                       "checkpoint)"),
        g.add_argument("--devices", type=_positive, default=1,
                       help="train data-parallel on N devices: on jax the host's cores (or "
                       "its accelerators), on torch N processes of one thread; under "
                       "torchrun, its process count (default: 1)"),
        g.add_argument("--no-progress", action="store_true", help="no progress bars"))


def model_options(parser: argparse.ArgumentParser) -> Actions:
    """``--model`` and the options of each kind (:data:`MODEL_OPTIONS`); their defaults
    (:func:`model_defaults`) are in the help."""
    rnn, tf = model_defaults("rnn"), model_defaults("transformer")
    dropout = (rnn["dropout"] if rnn["dropout"] == tf["dropout"] else
               f"rnn {rnn['dropout']}, transformer {tf['dropout']}")
    g = parser.add_argument_group(
        "model", "--attention, --style, --cell, --embed and --hidden shape the rnn; "
        "--d-model, --heads, --layers, --d-ff, --norm and --label-smoothing the "
        "transformer. The defaults are those of --task toy and tsv (the model kinds' "
        "configurations, with dropout and label smoothing 0.1); --task g2p takes the "
        "recipe's (xpseq.tasks.g2p_recipe.RECIPE).")
    return _added(
        g.add_argument("--model", choices=tuple(MODEL_OPTIONS), default=None,
                       help="the model kind (default: rnn; for g2p the recipe's)"),
        g.add_argument("--attention", choices=ATTENTIONS, default=None,
                       help=f"rnn (default: {rnn['attention']})"),
        g.add_argument("--style", choices=STYLES, default=None,
                       help=f"rnn (default: {rnn['style']})"),
        g.add_argument("--cell", choices=tuple(CELLS), default=None,
                       help=f"rnn (default: {rnn['cell']})"),
        g.add_argument("--embed", type=_positive, default=None,
                       help=f"rnn: embedding size (default: {rnn['embed']})"),
        g.add_argument("--hidden", type=_positive, default=None,
                       help=f"rnn: units per encoder direction (default: {rnn['hidden']})"),
        g.add_argument("--d-model", type=_positive, default=None,
                       help=f"transformer (default: {tf['d_model']})"),
        g.add_argument("--heads", type=_positive, default=None,
                       help=f"transformer (default: {tf['heads']})"),
        g.add_argument("--layers", type=_positive, default=None,
                       help=f"transformer: encoder and decoder layers, each (default: "
                       f"{tf['layers']})"),
        g.add_argument("--d-ff", type=_positive, default=None,
                       help=f"transformer (default: {tf['d_ff']})"),
        g.add_argument("--norm", choices=("pre", "post"), default=None,
                       help=f"transformer (default: {tf['norm']})"),
        g.add_argument("--dropout", type=number_in(0.0, 1.0), default=None,
                       help=f"(default: {dropout})"),
        g.add_argument("--label-smoothing", type=number_in(0.0, 1.0), default=None,
                       help=f"transformer (default: {tf['label_smoothing']})"))


def training_options(parser: argparse.ArgumentParser) -> Actions:
    """``--epochs``, ``--lr``, ``--batch-size``, ``--warmup``, ``--max-tokens``; their
    defaults (:data:`xpseq.tasks.experiment.TRAINING_DEFAULTS`) are in the help."""
    g = parser.add_argument_group(
        "training", "Defaults for --task toy and tsv: rnn: "
        f"{_defaults_text('rnn', TRAINING_OPTIONS['rnn'])}; transformer: "
        f"{_defaults_text('transformer', TRAINING_OPTIONS['transformer'])}; for --task "
        "g2p: the recipe's.")
    return _added(
        g.add_argument("--epochs", type=_positive, default=None,
                       help="at most this many epochs"),
        g.add_argument("--lr", type=number_in(1e-12, 10.0, high_open=False), default=None,
                       help="Adam's step size, in [1e-12, 10]"),
        g.add_argument("--batch-size", type=_positive, default=None),
        g.add_argument("--warmup", type=_positive, default=None,
                       help="transformer: warm-up steps of the inverse-square-root "
                       "schedule"),
        g.add_argument("--max-tokens", type=_positive, default=None,
                       help="transformer: batches by token count: at most this many padded "
                       "tokens a batch"))


def g2p_options(parser: argparse.ArgumentParser) -> Actions:
    """What only ``train --task g2p`` takes: ``--stress``, ``--time-limit``,
    ``--monitor``."""
    g = parser.add_argument_group("g2p")
    return _added(
        g.add_argument("--stress", action="store_true",
                       help="keep the stress marks (AH0, AH1, ...; default: removed)"),
        g.add_argument("--time-limit", type=_positive_float, default=None,
                       metavar="MINUTES",
                       help="stop training after this many minutes (default: the "
                       "recipe's)"),
        g.add_argument("--monitor", choices=("dev_loss", "dev_wer"), default=None,
                       help="what the kept epoch (and early stopping or the step-size "
                       "decay, if on) watch: the greedy WER on the dev words (default) or "
                       "the dev loss"))


def train_options(parser: argparse.ArgumentParser, backend_help: str) -> Actions:
    """Every option of ``train``, ``{dest: action}``: the backend, data, run, model,
    training and g2p groups."""
    return {**backend_options(parser, backend_help), **precision_option(parser),
            **data_options(parser), **run_options(parser), **model_options(parser),
            **training_options(parser), **g2p_options(parser)}


# ------------------------------------------------------------- stored run options

#: ``train`` options that a ``--config`` file cannot set.
NOT_CONFIGURABLE = ("out", "config", "resume", "func", "parser", "argv", "entry", "debug",
                    "command", "threads", "force", "allow_data_change", "writes")
#: ``train`` options that are not part of a run's stored settings.
NOT_STORED = NOT_CONFIGURABLE + ("no_progress", "compile")
#: What ``train --resume`` may change.
RESUMABLE = ("epochs", "time_limit", "out", "backend", "precision", "compile", "devices",
             "no_progress", "resume")
#: Names a file may give an option by, besides its own (``--train`` stores ``train_file``).
_ALIASES = {"train": "train_file", "dev": "dev_file"}


def option_values(values: Mapping[str, Any], actions: Mapping[str, argparse.Action],
                  where: str) -> dict[str, Any]:
    """``{name: value}`` from a TOML file (``--config``) or a checkpoint's stored options
    (``--resume``) as ``{dest: value}`` of the options ``actions``, each value checked and
    converted as the parser checks a typed one (its type and choices), ready for
    ``parser.set_defaults``. Names take ``-`` or ``_`` (``batch-size``, ``batch_size``);
    ``None`` values are left out. ``where`` names the source in errors.

    Raises
    ------
    ValueError
        A name that is no option (or one a file cannot set, :data:`NOT_CONFIGURABLE`), a
        flag that is not ``true`` / ``false``, a table or a list.
    argparse.ArgumentError
        A value that the option's type or choices refuse (the command's exit code 2); its
        message names ``where`` and the key.
    """
    out = {}
    for key, value in values.items():
        dest = key.replace("-", "_")
        dest = _ALIASES.get(dest, dest)
        action = actions.get(dest)
        if action is None or dest in NOT_CONFIGURABLE or not action.option_strings:
            known = sorted(a.option_strings[-1].lstrip("-") for d, a in actions.items()
                           if d not in NOT_CONFIGURABLE and a.option_strings)
            raise ValueError(f"{where}: {key!r} is not an option of train; known: "
                             f"{', '.join(known)}")
        if value is None:
            continue
        if action.nargs == 0:                                  # a flag
            if not isinstance(value, bool):
                raise ValueError(f"{where}: {key} is a flag, true or false; got {value!r}")
            out[dest] = value
            continue
        if isinstance(value, dict):
            raise ValueError(f"{where}: [{key}] is a table; options are top-level keys "
                             f"(e.g. epochs = 10), not tables")
        if isinstance(value, list):
            raise ValueError(f"{where}: {key} must be a number or a string, got {value!r}")
        try:
            out[dest] = _checked(action, str(value))
        except argparse.ArgumentError as err:
            raise argparse.ArgumentError(None, f"{where}: {key} = {value!r}: "
                                         f"{err.message}") from None
    return out


def _checked(action: argparse.Action, text: str) -> Any:
    """``text`` converted by ``action``'s type and checked against its choices, or the
    ``argparse.ArgumentError`` the parser would raise for it typed."""
    try:
        value = action.type(text) if callable(action.type) else text
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentError(action, str(err)) from None
    except (TypeError, ValueError):
        raise argparse.ArgumentError(action, f"invalid value: {text!r}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(repr(c) for c in action.choices)
        raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from "
                                     f"{choices})")
    return value
