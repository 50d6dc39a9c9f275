"""``xpseq g2p``: pronunciations of words or running text, standard input answered as it
comes, with notes on what the model cannot read.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from xpseq.io import reading

from .. import options as opts
from .. import stdin
from ..errors import CommandError
from .common import check_exist, command_backend, open_decoder


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``xpseq g2p``'s parser and options."""
    from xpseq import g2p

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
                       "word<TAB> (nothing; with --text the word is left out), and so does "
                       "a word with no letter and no digit (- or ...; with --text it is "
                       "punctuation, kept as itself). Invisible format characters (soft "
                       "hyphen, zero-width space and joiners, word joiner, BOM) are dropped "
                       "silently, joining what they stood between; a line may end in CRLF. "
                       "Input "
                       "that is not UTF-8 stops the run with an error naming its line (the "
                       "answers printed before it stay). No "
                       "training, no network: the model ships with xpseq (CMU dictionary, "
                       "stress digits kept: AH0 L OW1; --no-stress removes them); --model "
                       "uses checkpoints of xpseq train --task g2p instead. Words of the CMU "
                       "dictionary are answered from it, the others from the model "
                       "(--model-only: all from the model). --text reads running text "
                       "instead of words.")
    p.add_argument("words", nargs="*", help="words (default: read stdin, one word a line)")
    opts.decode_options(p, export=True, dtype_and_seed=False, precision_help=(
        "dtype: decode in float32 (default); bf16: matrix products and activations in "
        "bfloat16 (jax and torch; faster where the processor multiplies bfloat16 natively, "
        "AVX512-BF16 or AMX; the answers may differ from float32's, see the G2P guide)"))
    p.add_argument("--model", action="append", metavar="PATH",
                   help="a checkpoint of xpseq train --task g2p instead of the shipped model "
                   "(repeat for an ensemble), or an ONNX export's folder (xpseq export "
                   "--shipped --onnx DIR writes the shipped model's)")
    p.add_argument("--lookup", action="store_true",
                   help="answer words of the CMU dictionary from it, the others from the "
                   "model (the default; --model-only turns it off)")
    p.add_argument("--ipa", action="store_true",
                   help="print IPA (həˈloʊ) instead of ARPAbet phones (HH AH0 L OW1): "
                   "one string a word, stress marks ˈ ˌ at the start of the syllable "
                   "(none with --no-stress); the table is in the G2P guide")
    opts.beam_option(p)
    opts.n_best_option(p, "pronunciations (N <= K)")
    p.add_argument("--no-stress", dest="stress", action="store_false", default=None,
                   help="remove the vowels' stress digits (AH0 -> AH); by default they "
                   "are printed, as the CMU dictionary writes them")
    p.add_argument("--text", action="store_true",
                   help="read running text (each argument a text, or each line of "
                   "stdin): numbers, dates, times, currency and percentages spelled out, "
                   "dictionary words from the dictionary, the others from the model; "
                   "prints a line of phones per text, | between words and around "
                   "punctuation, which is kept (HH AH0 L OW1 | , | W ER1 L D)")
    p.add_argument("--model-only", action="store_true",
                   help="every word from the model, none from the dictionary")
    p.set_defaults(func=run, check=check, parser=p, more="words")
    return p


def check(args: argparse.Namespace) -> None:
    """What the options of ``g2p`` mean together."""
    if args.text and args.n_best > 1:
        args.parser.error("--text gives one pronunciation per word: --n-best is an option "
                          "of words, not of --text")
    if args.model_only and args.lookup:
        args.parser.error("--lookup (dictionary words from the dictionary, the default) "
                          "and --model-only (every word from the model) exclude each other")
    opts.check_search(args)
    opts.check_compile(args)
    opts.check_export_backend(args)


def run(args: argparse.Namespace) -> int:
    """Pronounce the words of the arguments, or of stdin as they come: chunks of at most
    :data:`xpseq.g2p.CHUNK` words, each answered (and stdout flushed) before the next is
    read, a chunk cut short when no more input is ready (so a pipe's first word is
    answered before it closes; memory does not grow with the input). A word longer than
    :data:`xpseq.g2p.MAX_WORD_LENGTH` gets a note and an empty answer, in word and text
    mode alike (the library's policy), and so does a word with no letter and no digit
    (in text mode: punctuation, printed as itself). A line's CRLF end and its format
    characters (:func:`xpseq.g2p.text.drop_format`) go without a note. Stdin that is
    closed, not UTF-8, or holds a line over :data:`xpseq.app.stdin.LINE_BYTES` is a
    :class:`CommandError` (the lines before it answered)."""
    from xpseq import g2p
    from xpseq.export.decoders import is_export

    if not args.words and sys.stdin is not None and sys.stdin.isatty():
        print(f"xpseq g2p: reading {'texts' if args.text else 'words'} from the terminal, "
              f"one a line (Ctrl-D ends; xpseq g2p {'--text ' if args.text else ''}"
              f"{'TEXT' if args.text else 'WORD'}... answers arguments)", file=sys.stderr)
    if args.text:                   # each argument a text; stdin a text a line
        chunks = stdin.chunks(64) if not args.words else iter([list(args.words)])
    else:
        chunks = (stdin.chunks(g2p.CHUNK) if not args.words else
                  (args.words[i:i + g2p.CHUNK] for i in range(0, len(args.words),
                                                              g2p.CHUNK)))
    check_exist(args.model)
    try:
        one = args.model[0] if args.model and len(args.model) == 1 else None
        if args.backend == opts.EXPORT_BACKEND and one is None:
            raise CommandError(f"--backend {args.backend} decodes one ONNX export: --model "
                               "DIR (xpseq export --shipped --onnx DIR writes the shipped "
                               "model's)")
        if one is not None and (is_export(one) or args.backend == opts.EXPORT_BACKEND):
            model = g2p.G2P(open_decoder(args, one))
        else:
            model = g2p.load(args.model or None,
                             backend=command_backend(args.backend, args.compile, "decode"),
                             precision=opts.precision_of(args))
    except (FileNotFoundError, ValueError) as err:
        raise CommandError(str(err)) from None
    try:                # (--no-stress is stress=False; without it, the model's own)
        if not args.model_only:                                   # a one-line error
            model.lexicon(args.stress)
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise CommandError(f"the CMU dictionary (--model-only does without): {err}") from None
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
    lines a word), an empty line for an empty word; the library's policy for a word
    holds (:mod:`xpseq.g2p`: a word over :data:`xpseq.g2p.MAX_WORD_LENGTH` characters, or
    one with no letter and no digit, is answered ``word<TAB>``, nothing), and its notes
    are handed to ``notes`` (``notes=``, instead of warnings)."""
    # Text is data: what is not text (controls, ESC sequences, bidi overrides) is dropped
    # with a note, format characters (a soft hyphen) and a CRLF line end silently; a
    # word's inner whitespace (a tab) is one space, so that every output line is exactly
    # word<TAB>phones.
    words = [notes.cleaned(word, text=args.text) for word in words]
    asked = [] if args.text else [word for word in words if word.strip()]
    if args.text:
        try:
            texts = model.phonemize_lines(words, lookup=not args.model_only,
                                          stress=args.stress, beam=args.beam, ipa=args.ipa,
                                          notes=notes.take)
        except ValueError as err:
            raise CommandError(str(err)) from None
    else:
        answers = iter(model.pronounce(asked, beam=args.beam, n_best=args.n_best,
                                       lookup=not args.model_only, stress=args.stress,
                                       ipa=args.ipa, notes=notes.take)
                       if asked else [])
    if args.text:
        if args.ipa:        # words a space apart, punctuation as written
            return "".join(" ".join(t for t in tokens if t != " ") + "\n" for tokens in texts)
        return "".join(" ".join("|" if t == " " else t for t in tokens) + "\n"
                       for tokens in texts)
    lines = []
    for word in (w.strip() for w in words):
        if not word:
            lines.append("")
            continue
        answer = next(answers)
        lines += [f"{word}\t{phones if args.ipa else ' '.join(phones)}"
                  for phones in ([answer] if args.n_best == 1 else answer)]
    return "".join(line + "\n" for line in lines)


class _G2PNotes:
    """The notes of ``xpseq g2p`` on stderr, so many words never flood it: the first
    :data:`G2P_NOTES_SHOWN` words of each kind (with characters the model does not know;
    too long; with no letter and no digit) get a note each, the others one summary line
    at the end of the run."""

    def __init__(self) -> None:
        self.unknown_words = 0
        self.unknown_chars: set[str] = set()
        self.long_words = 0
        self.not_words = 0
        self.control_lines = 0

    def cleaned(self, line: str, *, text: bool) -> str:
        """``line`` without what is not text (a note for each of the first lines that
        held some), without a CRLF line end and format characters (silently:
        :func:`xpseq.g2p.text.unix_newlines`, :func:`xpseq.g2p.text.drop_format`); in
        word mode its whitespace runs made one space."""
        from xpseq.g2p.text import drop_format, unix_newlines

        kept, dropped = reading.clean_text(unix_newlines(line))
        kept = drop_format(kept)
        if dropped:
            self.control_lines += 1
            if self.control_lines <= G2P_NOTES_SHOWN:
                found = ", ".join(dict.fromkeys(reading.shown(c) for c in dropped))
                print(f"xpseq: note: {reading.shown(line)}: {len(dropped)} control "
                      f"character(s) dropped ({found})", file=sys.stderr)
        return kept if text else " ".join(kept.split())

    def take(self, note: Warning) -> None:
        """One note of the library on the words (what it would have warned), counted and
        shown as its kind says; another kind is shown as it comes."""
        from xpseq import g2p

        if isinstance(note, g2p.UnknownCharacterWarning):
            self.unknown(note)
        elif isinstance(note, g2p.LongWordWarning):
            self.long_word(note)
        elif isinstance(note, g2p.NotAWordWarning):
            self.not_a_word(note)
        else:
            print(f"xpseq: note: {reading.escaped(str(note))}", file=sys.stderr)

    def unknown(self, warning: Any) -> None:
        self.unknown_words += 1
        if len(self.unknown_chars) < 1000:
            self.unknown_chars.update(getattr(warning, "characters", ()))
        if self.unknown_words <= G2P_NOTES_SHOWN:
            print(f"xpseq: note: {warning}", file=sys.stderr)

    def long_word(self, warning: Any) -> None:
        self.long_words += 1
        if self.long_words <= G2P_NOTES_SHOWN:
            print(f"xpseq: note: {warning}", file=sys.stderr)

    def not_a_word(self, warning: Any) -> None:
        self.not_words += 1
        if self.not_words <= G2P_NOTES_SHOWN:
            print(f"xpseq: note: {warning}", file=sys.stderr)

    def summary(self) -> None:
        from xpseq.g2p import MAX_WORD_LENGTH

        more = self.unknown_words - G2P_NOTES_SHOWN
        if more > 0:
            chars = sorted(self.unknown_chars)
            shown = ", ".join(map(repr, chars[:20])) + (", ..." if len(chars) > 20 else "")
            print(f"xpseq: note: {more} more word(s) held characters the model does not "
                  f"know ({shown}); each was answered from its other characters",
                  file=sys.stderr)
        more = self.control_lines - G2P_NOTES_SHOWN
        if more > 0:
            print(f"xpseq: note: {more} more line(s) held control characters; they were "
                  "dropped", file=sys.stderr)
        more = self.long_words - G2P_NOTES_SHOWN
        if more > 0:
            print(f"xpseq: note: {more} more word(s) had more than {MAX_WORD_LENGTH} "
                  "characters; their answers are empty", file=sys.stderr)
        more = self.not_words - G2P_NOTES_SHOWN
        if more > 0:
            print(f"xpseq: note: {more} more word(s) had no letter or digit; their "
                  "answers are empty", file=sys.stderr)
