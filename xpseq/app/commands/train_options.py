"""The options of ``xpseq train`` and their defaults, and the settings of a run that
``--config`` and ``--resume`` read (:mod:`.train_config`).

The defaults of ``train`` have one source each:

* model options: the model kind's ``Config`` defaults
  (:class:`xpseq.models.rnn.Seq2SeqConfig`, :class:`xpseq.models.transformer.TransformerConfig`),
  except where the toy and TSV tasks deliberately differ,
  :data:`xpseq.tasks.experiment.TOY_MODEL_DEFAULTS`;
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
from typing import Any, Mapping

from xpseq import models
from xpseq.backends import usable_cpus
from xpseq.core.recurrent import CELLS
from xpseq.data.subword import DEFAULT_VOCAB_SIZE as SUBWORD_DEFAULT
from xpseq.data.subword import VOCAB_SIZE_RANGE as SUBWORD_RANGE
from xpseq.data.subword import check_vocab_size
from xpseq.models.protocol import SIZE_LIMITS
from xpseq.models.rnn import ATTENTIONS, STYLES
from xpseq.models.transformer import ATTENTION_PATHS, AUTO_KEYS
from xpseq.tasks.experiment import TOY_MODEL_DEFAULTS, training_defaults
from xpseq.tasks.rot13 import DEFAULTS as ROT13_DEFAULTS
from xpseq.tasks.rot13 import LIMITS as ROT13_LIMITS
from xpseq.train.step import GRADIENTS

from .. import options as opts
from ..options import Actions, actions_of, number_in, positive
from .common import tokens_option

__all__ = ["add_options", "data_options", "run_options", "model_options",
           "training_options", "g2p_options", "MODEL_OPTIONS", "TRAINING_OPTIONS",
           "KIND_OPTIONS", "TOY_MODEL_DEFAULTS", "model_defaults", "kind_defaults",
           "config_fields", "NOT_CONFIGURABLE", "NOT_STORED", "RESUMABLE"]

_positive, _positive_float = positive(int), positive(float)


def _vocab_size(text: str) -> int:
    """``--vocab-size``' type: a whole number in :data:`xpseq.data.subword.VOCAB_SIZE_RANGE`."""
    try:
        return check_vocab_size(int(text), "")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from {SUBWORD_RANGE[0]} to {SUBWORD_RANGE[1]}, got "
            f"{text!r}") from None


#: The model sizes' bounds (:data:`xpseq.models.protocol.SIZE_LIMITS`), checked as typed.
_width = positive(at_most=SIZE_LIMITS["width"], why=" (the largest width xpseq takes)")
_layers = positive(at_most=SIZE_LIMITS["layers"], why=" (the most layers xpseq takes)")
_length = positive(at_most=ROT13_LIMITS["length"], why=" (the longest string of --task rot13)")

# ------------------------------------------------------------------------ defaults

#: The model options of ``train`` for each model kind (the command's names; ``layers``
#: sets the Transformer's ``encoder_layers`` and ``decoder_layers``).
MODEL_OPTIONS: dict[str, tuple[str, ...]] = {
    "rnn": ("attention", "style", "cell", "embed", "hidden", "dropout"),
    "transformer": ("d_model", "heads", "layers", "d_ff", "norm", "dropout",
                    "label_smoothing", "attention_path", "attention_block"),
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
#: The ``Config`` fields an option of the command sets, where they differ from its name.
_CONFIG_FIELDS = {"layers": ("encoder_layers", "decoder_layers"),
                  "attention_path": ("attention",)}


def model_defaults(kind: str) -> dict[str, Any]:
    """The defaults of ``kind``'s model options (:data:`MODEL_OPTIONS`): the ``Config``
    dataclass defaults of the kind, with
    :data:`xpseq.tasks.experiment.TOY_MODEL_DEFAULTS` on top."""
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


def data_options(parser: argparse.ArgumentParser) -> Actions:
    """What ``train`` learns from: ``--task``, ``--length``, ``--train``, ``--dev``,
    ``--tokens``, ``--quick``."""
    g = parser.add_argument_group("data")
    return actions_of(
        g.add_argument("--task", choices=("toy", "tsv", "g2p", "rot13"), default="toy",
                       help="the toy task, your own TSV corpus, grapheme-to-phoneme "
                       "conversion on the CMU dictionary, or rot13: random letter strings "
                       "up to --length letters and their ROT13, a long-sequence task for "
                       "--attention-path blockwise (default: toy)"),
        g.add_argument("--length", type=_length, default=None,
                       help="--task rot13: the letters of each dev and test string, source "
                       "and target alike, and of the longest training strings (default: "
                       f"{ROT13_DEFAULTS['length']})"),
        g.add_argument("--train", dest="train_file",
                       help="training pairs, source<TAB>target"),
        g.add_argument("--dev", dest="dev_file", help="dev pairs, source<TAB>target"),
        g.add_argument("--tokens", type=tokens_option, default="word",
                       metavar="{word,char,bpe,unigram}[,{word,char,bpe,unigram}]",
                       help="how --task tsv splits each side of a line into tokens: word "
                       "(at whitespace), char (every character, a space between words as "
                       "one token \u2581), or bpe or unigram (subword pieces of a tokenizer "
                       "trained on --train, with the 'tokenizers' package), for both sides, "
                       "or a pair SOURCE,TARGET such as char,word (spelling to phonemes) or "
                       "word,bpe. Stored in the checkpoint: translate, evaluate and heatmap "
                       "then read and print plain text the same way (default: word)"),
        g.add_argument("--vocab-size", type=_vocab_size, default=None,
                       help="--tokens bpe or unigram: the most subword pieces per side, "
                       f"from {SUBWORD_RANGE[0]} to {SUBWORD_RANGE[1]} (default: "
                       f"{SUBWORD_DEFAULT})"),
        g.add_argument("--quick", action="store_true", help="the small toy dataset"))


def run_options(parser: argparse.ArgumentParser) -> Actions:
    """Where ``train`` writes and how it runs: ``--out``, ``--config``, ``--resume``,
    ``--force``, ``--allow-data-change``, ``--devices``, ``--no-progress``."""
    g = parser.add_argument_group("run")
    resumable = ", ".join("--" + n.replace("_", "-") for n in RESUMABLE if n != "resume")
    return actions_of(
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
        g.add_argument("--devices", type=positive(at_most=usable_cpus(),
                                                  why=" (the CPUs this process may use)"),
                       default=1,
                       help="train data-parallel on N devices: on jax the host's cores (or "
                       "its accelerators), on torch N processes of one thread; under "
                       "torchrun, its process count; at most the CPUs this process may use "
                       f"({usable_cpus()} here) (default: 1)"),
        g.add_argument("--no-progress", action="store_true", help="no progress bars"))


def model_options(parser: argparse.ArgumentParser) -> Actions:
    """``--model`` and the options of each kind (:data:`MODEL_OPTIONS`); their defaults
    (:func:`model_defaults`) are in the help."""
    rnn, tf = model_defaults("rnn"), model_defaults("transformer")
    dropout = (rnn["dropout"] if rnn["dropout"] == tf["dropout"] else
               f"rnn {rnn['dropout']}, transformer {tf['dropout']}")
    g = parser.add_argument_group(
        "model", "--attention, --style, --cell, --embed and --hidden shape the rnn; "
        "--d-model, --heads, --layers, --d-ff, --norm, --label-smoothing, --attention-path "
        "and --attention-block the transformer. The defaults are those of --task toy and tsv (the model kinds' "
        "configurations, with dropout and label smoothing 0.1); --task g2p takes the "
        "recipe's (xpseq.tasks.g2p_recipe.RECIPE).")
    return actions_of(
        g.add_argument("--model", choices=tuple(MODEL_OPTIONS), default=None,
                       help="the model kind (default: rnn; for g2p the recipe's)"),
        g.add_argument("--attention", choices=ATTENTIONS, default=None,
                       help=f"rnn (default: {rnn['attention']})"),
        g.add_argument("--style", choices=STYLES, default=None,
                       help=f"rnn (default: {rnn['style']})"),
        g.add_argument("--cell", choices=tuple(CELLS), default=None,
                       help=f"rnn (default: {rnn['cell']})"),
        g.add_argument("--embed", type=_width, default=None,
                       help=f"rnn: embedding size (default: {rnn['embed']})"),
        g.add_argument("--hidden", type=_width, default=None,
                       help=f"rnn: units per encoder direction (default: {rnn['hidden']})"),
        g.add_argument("--d-model", type=_width, default=None,
                       help=f"transformer (default: {tf['d_model']})"),
        g.add_argument("--heads", type=_width, default=None,
                       help=f"transformer (default: {tf['heads']})"),
        g.add_argument("--layers", type=_layers, default=None,
                       help=f"transformer: encoder and decoder layers, each (default: "
                       f"{tf['layers']})"),
        g.add_argument("--d-ff", type=_width, default=None,
                       help=f"transformer (default: {tf['d_ff']})"),
        g.add_argument("--norm", choices=("pre", "post"), default=None,
                       help=f"transformer (default: {tf['norm']})"),
        g.add_argument("--attention-path", choices=ATTENTION_PATHS, default=None,
                       help="transformer: plain attends over the whole scores, blockwise by "
                       "blocks in memory linear in the length, auto blockwise above "
                       f"{AUTO_KEYS:,} keys (default: {tf['attention_path']})"),
        g.add_argument("--attention-block", type=_width, default=None,
                       help="transformer: queries and keys per block of the blockwise path "
                       f"(default: {tf['attention_block']})"),
        g.add_argument("--dropout", type=number_in(0.0, 1.0), default=None,
                       help=f"(default: {dropout})"),
        g.add_argument("--label-smoothing", type=number_in(0.0, 1.0), default=None,
                       help=f"transformer (default: {tf['label_smoothing']})"))


def training_options(parser: argparse.ArgumentParser) -> Actions:
    """``--epochs``, ``--lr``, ``--batch-size``, ``--warmup``, ``--max-tokens``,
    ``--gradients``, ``--time-limit``, ``--monitor``; their
    defaults (:data:`xpseq.tasks.experiment.TRAINING_DEFAULTS`) are in the help."""
    g = parser.add_argument_group(
        "training", "Defaults for --task toy and tsv: rnn: "
        f"{_defaults_text('rnn', TRAINING_OPTIONS['rnn'])}; transformer: "
        f"{_defaults_text('transformer', TRAINING_OPTIONS['transformer'])}; for --task "
        "g2p: the recipe's.")
    return actions_of(
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
                       "tokens a batch"),
        g.add_argument("--gradients", choices=GRADIENTS, default=None,
                       help="how the gradients are taken: autodiff, by the library (jax, "
                       "torch), or hand-derived, by xpseq's backward passes (the only way on "
                       "numpy and array_api_strict); the same values to rounding (default: "
                       "the backend's own, said on the first line)"),
        g.add_argument("--time-limit", type=_positive_float, default=None,
                       metavar="MINUTES",
                       help="stop training once this many minutes have passed (checked "
                       "after every step; the epoch under way is evaluated and saved, and "
                       "a note says what the limit stopped) (default: none; --task g2p: "
                       "the recipe's)"),
        g.add_argument("--monitor", choices=("dev_loss", "dev_wer"), default=None,
                       help="what early stopping watches (and with --task g2p the kept "
                       "epoch and the step-size decay): the dev loss, or the greedy WER on "
                       "the dev words (--task g2p only) (default: dev_loss; --task g2p: "
                       "dev_wer)"))


def g2p_options(parser: argparse.ArgumentParser) -> Actions:
    """What only ``train --task g2p`` takes: ``--stress``."""
    g = parser.add_argument_group("g2p")
    return actions_of(
        g.add_argument("--stress", action="store_true",
                       help="keep the stress marks (AH0, AH1, ...; default: removed)"))


def add_options(parser: argparse.ArgumentParser, backend_help: str) -> Actions:
    """Every option of ``train``, ``{dest: action}``: the backend, data, run, model,
    training and g2p groups."""
    return {**opts.backend_options(parser, backend_help), **opts.precision_option(parser),
            **data_options(parser), **run_options(parser), **model_options(parser),
            **training_options(parser), **g2p_options(parser)}


# ------------------------------------------------------------- stored run options

#: ``train`` options that a ``--config`` file cannot set.
NOT_CONFIGURABLE = ("out", "config", "resume", "func", "check", "parser", "invocation",
                    "debug", "command", "threads", "force", "allow_data_change", "writes")
#: ``train`` options that are not part of a run's stored settings.
NOT_STORED = NOT_CONFIGURABLE + ("no_progress", "compile")
#: What ``train --resume`` may change.
RESUMABLE = ("epochs", "time_limit", "out", "backend", "precision", "compile", "devices",
             "gradients",
             "no_progress", "resume")
