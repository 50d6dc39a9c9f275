"""Parallel corpora as UTF-8 TSV files: one ``source<TAB>target`` pair per line.

Tokenisation, per side (``tokens="word"``, ``"char"``, ``"SOURCE,TARGET"`` or a
``(source, target)`` pair of them, e.g. ``("char", "word")`` for spelling -> phonemes;
:mod:`xpseq.data.tokens` splits and joins, as it does for every door that reads text for a
model):

``"word"``
    The side split on whitespace: ``"the cat"`` -> ``["the", "cat"]``.
``"char"``
    The side's characters (Unicode code points, no normalisation), in order, each run of
    whitespace between two words one token ``"▁"`` (U+2581, :data:`xpseq.data.tokens.SPACE`),
    whitespace at either end dropped: ``"Save  file"`` -> ``["S", "a", "v", "e", "▁",
    "f", "i", "l", "e"]``. A literal ``"▁"`` in the text is the token ``"\\▁"``
    (:data:`xpseq.data.tokens.LITERAL_SPACE`), never a space.

Blank (whitespace-only) lines are skipped; a byte-order mark at the start of the file is
ignored. Every other line must hold exactly one tab with a non-empty side on either side;
otherwise reading stops with a ValueError ``"<path>:<line>: <what is wrong>"`` (lines
counted from 1), e.g. ``corpus.tsv:17: expected source<TAB>target, found 2 tabs``.
"""

from __future__ import annotations

import errno
import os
from typing import Iterable, Sequence

from xpseq.io import files

from . import tokens as tok

__all__ = ["read_parallel_tsv", "write_parallel_tsv", "tsv_text"]

Pair = tuple[list[str], list[str]]


def read_parallel_tsv(path: str | os.PathLike, *, tokens="word") -> list[Pair]:
    """Read a parallel corpus (see the module docstring for the format and tokenisation).

    Parameters
    ----------
    path : str or path-like
    tokens : ``"word"``, ``"char"``, ``"SOURCE,TARGET"`` or a ``(source, target)`` pair
        (a pair may name a stored model's modes, :func:`xpseq.data.tokens.of_model`; a
        ``"bpe"`` or ``"unigram"`` side is the :class:`xpseq.data.tokens.Side` of
        :func:`xpseq.data.tokens.train_sides`, which carries its tokenizer)

    Returns
    -------
    list of ``(source_tokens, target_tokens)``, each a non-empty list of str, in file order.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist (the message names it).
    ValueError
        A bad ``tokens`` (a subword side without its tokenizer), or a malformed line: no
        tab, more than one tab, an empty side, or bytes that are not UTF-8. The message
        starts with ``"<path>:<line>: "``.
    """
    src_mode, tgt_mode = _sides(tokens, "read_parallel_tsv")
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(errno.ENOENT, "read_parallel_tsv: no such file", name)
    pairs: list[Pair] = []
    files.note_input(name)                  # no write of this run replaces it
    with open(name, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{name}:{lineno}: not valid UTF-8 ({e.reason} at byte "
                                 f"{e.start} of the line)") from None
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            tabs = line.count("\t")
            if tabs != 1:
                found = "no tab" if tabs == 0 else f"{tabs} tabs"
                raise ValueError(f"{name}:{lineno}: expected source<TAB>target, found {found}")
            source, target = line.split("\t")
            src, tgt = tok.split(source, src_mode), tok.split(target, tgt_mode)
            for side, toks in (("source", src), ("target", tgt)):
                if not toks:
                    raise ValueError(f"{name}:{lineno}: the {side} side is empty")
            pairs.append((src, tgt))
    return pairs


def _sides(tokens, where: str) -> tuple[str, str]:
    """``tokens``' two modes; a subword side must carry its tokenizer."""
    pair = tok.modes(tokens, where, stored=True)
    for mode in pair:
        if mode in tok.SUBWORD_MODES and getattr(mode, "tokenizer", None) is None:
            raise ValueError(f"{where}: tokens: a {str(mode)!r} side needs its trained "
                             "tokenizer (the sides of xpseq.data.tokens.train_sides)")
    return pair


def _join(toks: Sequence[str], mode: str, where: str) -> str:
    if isinstance(toks, (str, bytes)):
        raise TypeError(f"{where} is a string; expected a list of tokens")
    toks = list(toks)
    if not toks:
        raise ValueError(f"{where} is empty (it could not be read back)")
    for i, t in enumerate(toks):
        if not isinstance(t, str):
            raise TypeError(f"{where}: token {i} is {type(t).__name__} {t!r}, not str")
        if mode == "word" and (not t or any(c.isspace() for c in t)):
            raise ValueError(f"{where}: token {i} {t!r} is empty or holds whitespace "
                             "(it would not read back as one word)")
        if mode == "char" and not ((len(t) == 1 and not t.isspace() and t != tok.SPACE)
                                   or t == tok.LITERAL_SPACE
                                   or (t == tok.SPACE and 0 < i < len(toks) - 1
                                       and toks[i - 1] != tok.SPACE)):
            raise ValueError(f"{where}: token {i} {t!r} is not one non-whitespace character "
                             f"or a {tok.SPACE!r} between two words")
        if mode == tok.CHAR_NOSPACE and (len(t) != 1 or t.isspace()):
            raise ValueError(f"{where}: token {i} {t!r} is not one non-whitespace character")
    return tok.join(toks, mode)


def write_parallel_tsv(path: str | os.PathLike, pairs: Iterable[tuple[Sequence[str],
                       Sequence[str]]], *, tokens="word", force: bool = False) -> int:
    """Write ``(source_tokens, target_tokens)`` pairs as a UTF-8 TSV file ("\\n" newlines),
    whole or not at all, through :func:`xpseq.io.files.write` (an existing file is
    replaced only with ``force``; an input of the current run never).

    Each side is joined by :func:`xpseq.data.tokens.join` (words with single spaces,
    characters with nothing and ``"▁"`` as a space), so that :func:`read_parallel_tsv`
    with the same ``tokens`` gives the pairs back.

    Returns
    -------
    int: the number of lines written.

    Raises
    ------
    ValueError
        A bad ``tokens``; an empty side; a word token that is empty or holds whitespace; a
        char token that is not one non-whitespace character (or ``"▁"`` between two
        words). Nothing is written then.
    TypeError
        A pair that is not two token lists, or a non-string token.
    """
    text, count = tsv_text(pairs, tokens=tokens)
    files.write(path, text.encode("utf-8"), kind="tsv", force=force)
    return count


def tsv_text(pairs: Iterable[tuple[Sequence[str], Sequence[str]]], *,
             tokens="word") -> tuple[str, int]:
    """The text of :func:`write_parallel_tsv`'s file and its number of lines (its checks
    and errors)."""
    src_mode, tgt_mode = _sides(tokens, "write_parallel_tsv")
    lines = []
    for i, pair in enumerate(pairs):
        try:
            src, tgt = pair
        except (TypeError, ValueError):
            raise TypeError(f"write_parallel_tsv: pairs[{i}] is not a (source, target) "
                            "pair") from None
        lines.append(_join(src, src_mode, f"write_parallel_tsv: pairs[{i}] source") + "\t"
                     + _join(tgt, tgt_mode, f"write_parallel_tsv: pairs[{i}] target") + "\n")
    return "".join(lines), len(lines)
