"""``xpseq translate``: sentences of the arguments, or of standard input as they come."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, Sequence

from .. import options as opts
from .. import stdin
from .common import (
    model_tokens,
    note_unknown_words,
    open_decoder,
    search_options_of,
    translate_nonempty,
)

#: ``xpseq translate`` reads standard input in chunks of at most this many lines, each
#: answered (and stdout flushed) before the next is read.
TRANSLATE_CHUNK = 64


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``xpseq translate``'s parser and options."""
    p = sub.add_parser("translate", help="translate sentences with a checkpoint",
                       description="Translate sentences given as arguments, or one per line "
                       "on stdin, as plain text: the input is split into tokens and the "
                       "output joined the way the model was trained (train --tokens: words, "
                       "or characters, so 'Save' is read as S a v e and the answer printed "
                       "without spaces). Unknown tokens become <unk>; an empty line gives an "
                       "empty line.")
    opts.decode_options(p, export=True)
    p.add_argument("checkpoint", help="a checkpoint of xpseq train (.safetensors), or an "
                   "ONNX export's folder (xpseq export --onnx DIR)")
    p.add_argument("sentences", nargs="*", help="sentences (default: read stdin)")
    p.add_argument("--max-tokens", type=opts.positive(int), default=256,
                   help="cut longer sentences to this many tokens (default: 256)")
    opts.search_options(p)
    p.set_defaults(func=run, check=check, parser=p, more="sentences")
    return p


def check(args: argparse.Namespace) -> None:
    opts.check_search(args)
    opts.check_compile(args)
    opts.check_export_backend(args)


def _sentence_chunks(args: argparse.Namespace) -> Any:
    """The sentences of the arguments (one chunk), or of stdin as they come: chunks of at
    most :data:`TRANSLATE_CHUNK` lines, a chunk cut short when no more input is ready (so
    a pipe's first line is answered before it closes)."""
    return iter([args.sentences]) if args.sentences else stdin.chunks(TRANSLATE_CHUNK,
                                                                      "sentences")


def _tokens(lines: Sequence[str], args: argparse.Namespace, g2p: bool, mode: str = "word",
            first: int = 0) -> list[list[str]]:
    """Token lists of ``lines`` (numbered from ``first + 1`` in notes), split as the model
    reads its source (``mode``, :func:`xpseq.data.tokens.split`: words, or characters), or,
    for a G2P checkpoint, one word per line read as its (lower-cased) characters."""
    from xpseq.data import tokens as tok
    from xpseq.data.cmudict import word_tokens

    out = []
    for i, line in enumerate(lines, first + 1):
        tokens = word_tokens(line) if g2p else tok.split(line, mode)
        if len(tokens) > args.max_tokens:
            print(f"xpseq: note: sentence {i} has {len(tokens)} tokens; cut to the first "
                  f"{args.max_tokens} (--max-tokens)", file=sys.stderr)
            tokens = tokens[:args.max_tokens]
        out.append(tokens)
    return out


def run(args: argparse.Namespace) -> int:
    """Translate the sentences of the arguments, or of stdin as they come
    (:func:`_sentence_chunks`): each chunk answered and stdout flushed before the next is
    read, so memory does not grow with the input. The unknown source words are summed up
    in one note at the end."""
    decoder = open_decoder(args, args.checkpoint)
    g2p = decoder.metadata.get("task") == "g2p"
    src_mode, tgt_mode = model_tokens(decoder)
    options = dataclasses.replace(search_options_of(args), attention=False)   # never printed
    unknown: set[str] = set()
    first = 0
    try:
        for lines in _sentence_chunks(args):
            sentences = _tokens(lines, args, g2p, src_mode, first)
            unknown.update(t for s in sentences for t in s if t not in decoder.src_vocab)
            _print_translations(translate_nonempty(decoder, sentences, options),
                                args.n_best, first, tgt_mode)
            sys.stdout.flush()
            first += len(lines)
    finally:
        note_unknown_words(unknown, src_mode)
    return 0


def _print_translations(results: list[dict | None], n_best: int, first: int = 0,
                        mode: str = "word") -> None:
    """``translate``'s output: a line a sentence, or with ``--n-best N`` its N best as
    ``index<TAB>rank<TAB>score<TAB>translation`` (sentences numbered from ``first``); the
    tokens joined as the model writes its target (``mode``,
    :func:`xpseq.data.tokens.join`)."""
    from xpseq.data import tokens as tok

    for i, result in enumerate(results, first):
        if result is None:
            print("" if n_best == 1 else f"{i}\t0\t\t")
        elif n_best == 1:
            print(tok.join(result["tokens"], mode))
        else:
            for rank, (hyp, score) in enumerate(zip(result["n_best"],
                                                    result["n_best_scores"])):
                print(f"{i}\t{rank}\t{score:.4f}\t{tok.join(hyp, mode)}")
