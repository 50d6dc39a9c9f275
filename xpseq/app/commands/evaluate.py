"""``xpseq evaluate``: BLEU and exact match by bucket, or a G2P model's PER and WER.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from xpseq import backends
from xpseq.data import tokens
from xpseq.io.progress import still
from xpseq.search import MAX_BEAM

from .. import options as opts
from ..errors import CommandError
from .common import (
    check_exist,
    command_backend,
    g2p_split,
    model_tokens,
    open_decoder,
    read_tsv,
    search_options_of,
    tokens_option,
    toy_task_for,
)

#: The beam of a G2P model's beam-search row when ``--beam`` is not given.
G2P_BEAM = 5


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``xpseq evaluate``'s parser and options."""
    p = sub.add_parser("evaluate", help="BLEU and exact match by bucket; PER and WER for G2P",
                       description="Translate a test set with a checkpoint and print corpus "
                       "BLEU (sacrebleu) and exact match per bucket: the toy task's phrase "
                       "counts 0-4, or one row for a TSV test file (split as the model was "
                       "trained; a model trained on a TSV corpus is scored on its plain-text "
                       "output with sacreBLEU's 13a tokenizer, or its char tokenizer for "
                       "characters). A G2P checkpoint (several: "
                       "their ensemble; --shipped: the shipped model, --shipped --no-stress "
                       "the stress-free one beside it) prints phone and word error rates on "
                       "the dictionary's test split (or --part dev), for greedy and beam "
                       "search (--beam).")
    opts.decode_options(p, export=True)
    p.add_argument("checkpoint", nargs="*", help="the checkpoint, or an ONNX export's folder "
                   "(several G2P checkpoints: their ensemble)")
    p.add_argument("--shipped", action="store_true",
                   help="evaluate the G2P model that ships with xpseq: the one that predicts "
                   "stress (xpseq g2p's default), also scored with its stress digits removed")
    p.add_argument("--no-stress", action="store_true",
                   help="with --shipped: evaluate the stress-free model that ships beside it "
                   "(the one that answers xpseq g2p --no-stress)")
    p.add_argument("--test", dest="test_file", help="test pairs as TSV (default: the toy "
                   "task's test buckets, for a toy checkpoint)")
    p.add_argument("--tokens", type=tokens_option, default=None,
                   metavar="{word,char}[,{word,char}]",
                   help="how --test lines are split into tokens, for a checkpoint that does "
                   "not store its tokens (default: as the model was trained, train --tokens)")
    p.add_argument("--task", choices=("toy", "tsv", "g2p"), default=None,
                   help="what the checkpoint was trained on (default: its metadata says)")
    p.add_argument("--part", choices=("test", "dev"), default="test",
                   help="g2p: the words to score (default: test)")
    p.add_argument("--limit", type=opts.positive(int), default=None, metavar="N",
                   help="g2p: score only the first N words")
    beam = opts.search_options(p, n_best=False)["beam"]
    # One --beam for both tables: BLEU is scored with it (greedy by default), a G2P model
    # greedy and with beam search of it (5 by default): no value is its default here.
    beam.default = None
    beam.help = (f"beam size, at most {MAX_BEAM}; 1 is greedy search (default: greedy "
                 f"search; a G2P model is scored both greedy and by beam search, with "
                 f"K = {G2P_BEAM})")
    p.set_defaults(func=run, check=check, parser=p)
    return p


def check(args: argparse.Namespace) -> None:
    """``--no-stress`` with ``--shipped`` only, and the checks of the shared options."""
    if args.no_stress and not args.shipped:
        args.parser.error("--no-stress selects the shipped stress-free G2P model: give it "
                          "with --shipped (a checkpoint is scored as it was trained)")
    opts.check_compile(args)
    opts.check_export_backend(args)


def run(args: argparse.Namespace) -> int:
    from xpseq import models
    from xpseq.tasks import Task, bucket_table

    if args.shipped or len(args.checkpoint) > 1:
        return _evaluate_g2p_model(args)
    if not args.checkpoint:
        raise CommandError("evaluate needs a CHECKPOINT (or --shipped, the shipped G2P model)")
    args.checkpoint = args.checkpoint[0]
    decoder = open_decoder(args, args.checkpoint)
    meta = decoder.metadata
    is_g2p = meta.get("task") == "g2p"
    if args.task == "g2p" or (args.task is None and is_g2p):
        if not is_g2p:
            raise CommandError(f"{args.checkpoint} was not trained with --task g2p")
        if args.test_file:
            raise CommandError("a g2p checkpoint is scored on the dictionary's split "
                               "(--part); --test is for TSV checkpoints")
        return _evaluate_g2p(args, decoder)
    if args.beam is None:
        args.beam = 1                                   # BLEU: greedy unless asked
    modes = model_tokens(decoder)
    text = modes[1] if tokens.is_text_model(meta) else None     # BLEU on the joined text
    if args.tokens is not None and "tokens" in meta:
        asked = tokens.modes(args.tokens, "--tokens")
        if tuple(map(str, asked)) != tuple(map(str, modes)):
            raise CommandError(f"--tokens {args.tokens}: {args.checkpoint} was trained with "
                               f"tokens {','.join(map(str, modes))} and reads its test set "
                               "that way; give no --tokens (it is for checkpoints that do "
                               "not store their tokens)")
    if args.test_file:
        pairs = read_tsv(args.test_file, args.tokens or modes, "--test")
        name = os.path.basename(args.test_file) or args.test_file
        task = Task([], [], {name: pairs}, decoder.src_vocab, decoder.tgt_vocab)
        with still(f"decoding {len(pairs)} test sentences"):
            headers, rows, details = bucket_table({"": decoder}, task, search_options_of(args),
                                                  text=text, buckets="test set")
        return _print_table(headers, rows, details[""])

    from xpseq.app.demo import FULL

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
    toy = toy_task_for(spec)
    task = Task([], [], toy.test, decoder.src_vocab, decoder.tgt_vocab)
    # The table's column: the attention of an rnn model, or the model kind.
    kind = models.of(decoder.config).kind
    name = decoder.config.attention if kind == "rnn" else kind
    name = "seq2seq" if name == "none" else name
    with still(f"decoding {sum(map(len, task.test.values()))} test sentences"):
        headers, rows, details = bucket_table({name: decoder}, task, search_options_of(args),
                                              text=text)
    return _print_table(headers, rows, details[name])


def _print_table(headers: list, rows: list, details: dict) -> int:
    """The table of scores and sacrebleu's signature under it."""
    from xpseq.tasks.metrics import format_table

    print(format_table(headers, rows))
    first = next(iter(details.values()))
    print(f"\nBLEU: sacrebleu {first['signature']}")
    return 0


def _evaluate_g2p_model(args: argparse.Namespace) -> int:
    """``evaluate --shipped`` or several G2P checkpoints (an ensemble)."""
    from xpseq import g2p

    if args.shipped and args.checkpoint:
        raise CommandError("--shipped evaluates the shipped model; give no CHECKPOINT with it")
    if args.test_file or args.task not in (None, "g2p"):
        given = "--test" if args.test_file else f"--task {args.task}"
        what = ("--shipped scores the shipped G2P model" if args.shipped else
                "several checkpoints are scored as one G2P ensemble")
        one_each = (f"; to compare models on a test set, evaluate each in its own call: "
                    f"xpseq evaluate {shlex.quote(args.checkpoint[0])} --test "
                    f"{shlex.quote(args.test_file)}"
                    if args.test_file and not args.shipped else "")
        raise CommandError(f"{what} on the CMU dictionary's test split, which takes no "
                           f"{given}{one_each}")
    check_exist(None if args.shipped else args.checkpoint)
    if args.backend == opts.EXPORT_BACKEND:
        raise CommandError(f"--backend {args.backend} decodes one ONNX export (xpseq export "
                           "--shipped --onnx DIR writes the shipped model's); the shipped "
                           "model and ensembles decode on " + ", ".join(backends.NAMES))
    backend = command_backend(args.backend, args.compile, "decode")
    try:
        if args.shipped:
            name, files = shipped_model(g2p.shipped(), stress=not args.no_stress)
            model = g2p.G2P([g2p.MODEL_DIR / f for f in files], backend=backend)
        else:
            name, model = None, g2p.G2P(args.checkpoint, backend=backend)
    except (FileNotFoundError, ValueError) as err:
        raise CommandError(str(err)) from None
    return _evaluate_g2p(args, model.decoder, name)


def shipped_model(manifest: dict, *, stress: bool) -> tuple[str, list[str]]:
    """The shipped G2P model that ``xpseq evaluate --shipped`` scores, in words, and its
    files.

    Parameters
    ----------
    manifest : dict
        The shipped models' manifest, :func:`xpseq.g2p.shipped`.
    stress : bool
        True: the model that answers by default (``--shipped``); False: the one that
        answers ``stress=False`` (``--shipped --no-stress``), the stress-free model that
        ships beside a stressed one (the manifest's ``no_stress`` entry), or the shipped
        model itself when it was trained without stress.

    Returns
    -------
    (str, list of str)
        ``"the shipped model (...)"`` or ``"the shipped stress-free model (...)"`` with the
        manifest's description of it (``"rnn, average of epochs 23-27"``), and the
        names of its files in :data:`xpseq.g2p.MODEL_DIR`.

    Raises
    ------
    ValueError
        ``stress`` is True but the shipped model was trained without stress.
    """
    entry = manifest
    if not stress and manifest.get("stress"):
        entry = manifest.get("no_stress") or manifest      # (else: its digits removed)
    elif stress and not manifest.get("stress"):
        raise ValueError("the shipped G2P model was trained without stress: evaluate it "
                         "with --shipped --no-stress")
    kind = "the shipped model" if entry.get("stress") else "the shipped stress-free model"
    described = f" ({entry['model']})" if entry.get("model") else ""
    return kind + described, list(entry["files"])


def _evaluate_g2p(args: argparse.Namespace, decoder: Any, name: str | None = None) -> int:
    """PER and WER of ``decoder`` (a G2P model; ``name``: the shipped one it is, in words)
    on the dictionary's split, greedy and beam search (``--beam``; 1: greedy only), in
    ``--precision``."""
    from xpseq.search import SearchOptions
    from xpseq.tasks import g2p_recipe
    from xpseq.tasks.metrics import format_table

    meta = decoder.metadata
    split = g2p_split(bool(meta.get("stress")), int(meta.get("split_seed", 0)))
    k = G2P_BEAM if args.beam is None else args.beam
    precision = opts.precision_of(args)
    searches = [("greedy", SearchOptions(precision=precision))]
    if k > 1:
        searches.append((f"beam k={k}", SearchOptions(method="beam", k=k,
                                                      length_penalty=args.length_penalty,
                                                      alpha=args.alpha, precision=precision)))
    bars = sys.stderr.isatty()           # a bar per search; else a line every few seconds
    how = f"greedy and beam search (k={k})" if k > 1 else "greedy search"
    with still(f"decoding the {args.part} words by {how}", enabled=not bars):
        rows = g2p_recipe.evaluate(decoder, split, part=args.part, searches=searches,
                                   limit=args.limit, progress=bars)
    print(f"G2P{', ' + name if name else ''}, CMU dictionary with stress "
          f"{'kept' if meta.get('stress') else 'removed'}: "
          f"{rows[0]['words']} {args.part} words, decoded on {decoder.name}")
    plain = ["PER % (stress removed)", "WER % (stress removed)"] if split.stress else []
    print(format_table(["search", "PER %", "WER %", *plain, "words", "seconds"],
                       [[r["search"], r["per"], r["wer"], *([r["per_no_stress"],
                         r["wer_no_stress"]] if plain else []), r["words"], r["seconds"]]
                        for r in rows]))
    if name and split.stress:
        print("xpseq: note: the stress-removed columns are this model's answers with their "
              "stress digits dropped; xpseq evaluate --shipped --no-stress scores the "
              "stress-free model that answers xpseq g2p --no-stress", file=sys.stderr)
    return 0
