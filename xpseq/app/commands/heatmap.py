"""``xpseq heatmap``: the attention of one translation, in the terminal and as a PNG."""

from __future__ import annotations

import argparse
from typing import Any

from xpseq.io import files, reading

from .. import options as opts
from ..errors import CommandError
from .common import (
    model_tokens,
    note_unknown,
    open_decoder,
    search_options_of,
    translate_nonempty,
)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``xpseq heatmap``'s parser and options."""
    p = sub.add_parser("heatmap", help="the attention of one translation, in the terminal "
                       "(and as a PNG with --png)",
                       description="Translate one sentence, print the translation and draw "
                       "its attention weights in the terminal (rows are the generated words, "
                       "columns the source words), and with --png as an image too. The model "
                       "must have attention: an rnn with attention, or a Transformer (its last "
                       "layer's cross-attention, averaged over the heads). The sentence is "
                       "split as the model was trained (words, or characters) and the "
                       "translation printed as text.")
    opts.decode_options(p)
    p.add_argument("checkpoint", help="a checkpoint of xpseq train (.safetensors)")
    p.add_argument("sentence", help="the source sentence (quoted)")
    p.add_argument("--png", help="also write the heatmap to this PNG (never over the "
                   "checkpoint or a file xpseq did not write, unless --force)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --png file that xpseq did not write")
    opts.search_options(p, n_best=False)
    p.set_defaults(func=run, check=check, parser=p)
    return p


def check(args: argparse.Namespace) -> None:
    opts.check_search(args)
    opts.check_compile(args)


#: The longest sentence ``heatmap`` draws, in tokens (words, or a character model's
#: characters): wider, its columns cannot be read (and 5,000 words took a minute and 3 GB
#: to draw).
HEATMAP_MAX_WORDS = 100


def run(args: argparse.Namespace) -> int:
    from xpseq.app.plots import ascii_heatmap, save_heatmap
    from xpseq.data import tokens as tok
    from xpseq.data.cmudict import word_tokens
    from xpseq.tasks import attention_labels

    if args.png is not None:            # before any work; the door checks again when it writes
        files.check(args.png, kind="png", inputs=[args.checkpoint], force=args.force,
                    what="--png")
    decoder = open_decoder(args, args.checkpoint)
    src_vocab = decoder.src_vocab
    src_mode, tgt_mode = model_tokens(decoder)
    what = "characters" if src_mode == "char" else "words"
    tokens = (word_tokens(args.sentence) if decoder.metadata.get("task") == "g2p"
              else tok.split(args.sentence, src_mode))
    if not tokens:
        raise CommandError("the sentence is empty")
    if len(tokens) > HEATMAP_MAX_WORDS:
        raise CommandError(f"the sentence has {len(tokens)} {what}; a heatmap draws at most "
                           f"{HEATMAP_MAX_WORDS} (xpseq translate takes longer text)")
    note_unknown([tokens], src_vocab, src_mode)
    [result] = translate_nonempty(decoder, [tokens], search_options_of(args))
    if result["attention"] is None:
        raise CommandError("this model has no attention (its decoder returns no weights)")
    source, output = attention_labels(tokens, result, src_vocab)
    source = [reading.shown(label, 24) for label in source]    # text, never terminal codes
    print(tok.join(result["tokens"], tgt_mode))
    print(ascii_heatmap(result["attention"], source, output))
    if args.png is not None:
        try:
            title = reading.shown(" ".join(args.sentence.split()))
            path = save_heatmap(args.png, result["attention"], source, output, title=title,
                                force=args.force)
        except OSError as err:
            raise CommandError(f"cannot write {args.png}: {err.strerror or err}") from None
        print(f"wrote {path}")
    return 0
