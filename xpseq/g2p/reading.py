"""Running text to phones: the text front end of :meth:`xpseq.g2p.G2P.phonemize`.

One pipeline, in four steps::

    normalize   the text as tokens: numbers, currency, dates and times spelled out,
                accents removed, punctuation its own token    (xpseq.g2p.text.normalize)
    pieces      what to say for each word: itself when the dictionary has it (or without
                lookup), else a hyphenated word's parts or an abbreviation's letters
    answer      the dictionary's pronunciation (a homograph chosen by the words around it:
                xpseq.g2p.homographs), the model's for every other piece, all of
                the text's decoded together and each once
    join        the phones of each line, " " between words and around punctuation

The model answers under the one policy of :meth:`xpseq.g2p.G2P.answer` (unknown
characters left out, an over-long word left out, each with its note); the notes come back
with the phones, for the caller to raise (:func:`xpseq.g2p.notes.emit`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from xpseq.search import SearchOptions

from . import disambiguator, homographs
from .lexicon import Lexicon
from .text import normalize_noting

__all__ = ["read_texts", "is_word", "contexts", "homograph_reading", "WordModel"]


class WordModel(Protocol):
    """What the text front end needs of a G2P model (:class:`xpseq.g2p.G2P` is one): the
    dictionary, and the answers and notes for words (:meth:`xpseq.g2p.G2P.answer`)."""

    dictionary: Lexicon

    def answer(self, words: list[str], options: SearchOptions, n_best: int, lookup: bool,
               stress: bool) -> tuple[list[Any], list[Warning]]: ...


def is_word(token: str) -> bool:
    """Whether a token of :func:`xpseq.g2p.text.normalize` is a word (it holds a letter;
    its numbers are spelled out already); any other token is punctuation, kept as itself
    with no phones."""
    return any(c.isalpha() for c in token)


def read_texts(model: WordModel, texts: Iterable[Any], *, lookup: bool, stress: bool,
               options: SearchOptions, caller: str) -> tuple[list[list[str]], list[Warning]]:
    """The phones of each of ``texts`` (see :meth:`xpseq.g2p.G2P.phonemize`) and the
    notes on them: ``model`` answers the words the dictionary does not (every word
    without ``lookup``), decoded together with the search ``options``; ``stress`` is
    already checked against the model."""
    lines: list[list[str]] = []
    notes: list[Warning] = []
    for text in texts:                                                   # normalize
        if not isinstance(text, str):
            raise TypeError(f"{caller}: text must be a str, got {type(text).__name__}")
        tokens, noted = normalize_noting(text)
        lines.append(tokens)
        notes += noted
    lexicon = model.dictionary.entries(stress) if lookup else {}
    pieces = {t: _pieces(t, lexicon, lookup) for line in lines for t in line if is_word(t)}
    asked = list(dict.fromkeys(p for said in pieces.values() for p in said  # each once
                               if p not in lexicon))
    answers, found = model.answer(asked, options, 1, False, stress)      # answer
    heard = dict(zip(asked, answers))
    stressed = model.dictionary.entries(True) if lookup else {}   # homographs: digits kept
    ruled = set()                             # where the context rules decide: not asked
    for li, line in enumerate(lines):
        for i, token, before, before2, after in contexts(line):
            spelled = homographs.ACCENT_CUES.get(token, (token,))[0]
            if spelled in lexicon and homographs.choose_sound(
                    token, stressed[spelled], before, before2, after) is not None:
                ruled.add((li, i))
    learned = disambiguator.readings(lines, stressed, skip=ruled) if lookup else {}

    def said(where: tuple[int, int], token: str, before: str | None, before2: str | None,
             after: str | None) -> list[str]:
        spelled = homographs.ACCENT_CUES.get(token, (token,))[0]   # résumé: resume
        chosen = homograph_reading(token, before, before2, after,
                                   stressed[spelled] if spelled in lexicon else None,
                                   learned.get(where))
        if chosen is not None:
            return [p if stress else p.rstrip("012") for p in chosen]
        return [p for piece in pieces[token] for p in (
            lexicon[piece][0] if piece in lexicon else heard[piece])]

    return [_join(li, line, said) for li, line in enumerate(lines)], notes + found  # join


def homograph_reading(token: str, before: str | None, before2: str | None, after: str | None,
                      prons: Sequence[Sequence[str]] | None,
                      learned: Sequence[str] | None) -> tuple[str, ...] | None:
    """The pronunciation the front end gives ``token`` (stress digits kept), or ``None`` to
    say it as any other word: the context rules of :func:`xpseq.g2p.homographs.choose_sound`
    where they decide, else the sense model's reading ``learned``
    (:func:`xpseq.g2p.disambiguator.readings`; ``None`` when it was not asked), else the
    stress rule of :func:`xpseq.g2p.homographs.choose`.

    Parameters
    ----------
    token : str
        The word as :func:`xpseq.g2p.normalize` gives it (``résumé`` keeps its accents).
    before, before2, after : str or None
        The word before it, the one before that and the word after (``None`` beyond
        punctuation or the text's ends).
    prons : sequence of phone sequences, or None
        Its dictionary pronunciations, stress digits kept (``None``: not in the dictionary).
    learned : sequence of str, or None
        What the sense model chose.
    """
    if prons is not None:
        choice = homographs.choose_sound(token, prons, before, before2, after)
        if choice is None and learned is None:
            choice = homographs.choose(prons, before)
        if choice is not None:
            return tuple(prons[choice])
    return None if learned is None else tuple(learned)


def _pieces(token: str, lexicon: Mapping[str, Any], lookup: bool) -> list[str]:
    """What to pronounce for a word: itself, or its parts or letters (``résumé``: the
    dictionary's ``resume``, its accents a cue for :mod:`~xpseq.g2p.homographs`)."""
    if token in homographs.ACCENT_CUES:
        return [homographs.ACCENT_CUES[token][0]]
    if token in lexicon or not lookup:
        return [token]
    if "-" in token.strip("-"):
        return [p for part in token.split("-") if part for p in _pieces(part, lexicon, lookup)]
    if token.endswith(".") and len(token) > 2:           # n.b.: the letters n. b.
        return [c + "." for c in token if c != "."]
    return [token]


def contexts(line: list[str]) -> Iterator[tuple[int, str, str | None, str | None,
                                                  str | None]]:
    """``(index, word, before, before2, after)`` for each word of a line: its neighbours
    within the clause (``None`` beyond punctuation or the line's ends)."""
    words = [t if is_word(t) else None for t in line]
    for i, token in enumerate(line):
        if words[i] is not None:
            before = words[i - 1] if i >= 1 else None
            before2 = words[i - 2] if i >= 2 and before is not None else None
            after = words[i + 1] if i + 1 < len(line) else None
            yield i, token, before, before2, after


def _join(li: int, line: list[str], said: Any) -> list[str]:
    """Line ``li``'s phones: ``said((li, i), word, before, before2, after)`` for each word
    (:func:`contexts`), punctuation as itself, ``" "`` between."""
    spoken = {i: said((li, i), token, before, before2, after)
              for i, token, before, before2, after in contexts(line)}
    tokens: list[str] = []
    for i, token in enumerate(line):
        phones = spoken[i] if i in spoken else [token]
        if phones:
            tokens += ([" "] if tokens else []) + list(phones)
    return tokens
