"""The senses of Google's Wikipedia Homograph Data as CMU dictionary pronunciations.

The data names each reading of a homograph by a WORDID (``abstract_adj-nou``,
``abstract_vrb``) and gives its IPA; the dictionary lists the same word's pronunciations
in ARPAbet. :func:`build` pairs them once, each WORDID with the dictionary pronunciation
whose IPA (:func:`xpseq.g2p.ipa.to_ipa`) is nearest to the data's (edit distance over the
sounds, stress marks counted), no two WORDIDs of a word on one pronunciation; the pairs
are kept in ``homograph_senses.tsv`` beside this module (word, WORDID, phones and the
data's label of the sense: ``noun``, ``verb``, ``past`` ...), read by :func:`table` and
:func:`labels`. Where the dictionary has fewer pronunciations of a word than the data has
senses (*house* has only HH AW1 S, not the verb's HH AW1 Z), the senses left without one
take the data's own IPA in ARPAbet (:func:`xpseq.g2p.ipa.from_ipa`). Only the data's
transcriptions (``wordids.tsv``) are read, never its sentences. The data is Apache-2.0,
by Gorman, Mazovetskiy and Nikolaev (2018), "Improving homograph disambiguation with
machine learning", LREC 2018, pp. 1349-1352.
"""

from __future__ import annotations

import csv
import functools
import pathlib
from typing import Sequence

__all__ = ["TABLE", "table", "labels", "build", "distance"]

#: The table's file: word, WORDID, ARPAbet phones (stress digits kept) and the data's label
#: of the sense, tab-separated.
TABLE = pathlib.Path(__file__).with_name("homograph_senses.tsv")


@functools.lru_cache(maxsize=1)
def _rows() -> tuple[tuple[str, ...], ...]:
    """The table's rows: word, WORDID, phones, label."""
    with open(TABLE, encoding="utf-8", newline="") as f:
        return tuple(tuple(row) for row in csv.reader(f, delimiter="\t")
                     if row and not row[0].startswith("#"))


def _by(key: int) -> dict[str, dict[str, tuple[str, ...]]]:
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for row in _rows():
        out.setdefault(row[0], {})[row[key]] = tuple(row[2].split())
    return out


@functools.lru_cache(maxsize=1)
def table() -> dict[str, dict[str, tuple[str, ...]]]:
    """Word -> WORDID -> the dictionary pronunciation that is that sense."""
    return _by(1)


@functools.lru_cache(maxsize=1)
def labels() -> dict[str, dict[str, tuple[str, ...]]]:
    """Word -> the data's label of each of its senses (``noun``, ``verb``, ``past`` ...) ->
    the dictionary pronunciation of that sense: the sense model's targets."""
    return _by(3)


def _sounds(ipa: str) -> str:
    """An IPA string compared by its sounds: the data's ``'`` as ``ˈ``, length marks,
    syllable dots and ties dropped, ``r`` as ``ɹ``, ``g`` as ``ɡ``."""
    ipa = ipa.replace("'", "ˈ").replace("ː", "").replace(".", "").replace("\u0361", "")
    ipa = ipa.replace("ʤ", "dʒ").replace("ʧ", "tʃ")
    return ipa.replace("r", "ɹ").replace("g", "ɡ").replace("ɜ˞", "ɝ").replace("ə˞", "ɚ")


def _primary(phones: Sequence[str]) -> int:
    """Which vowel of ``phones`` has the primary stress."""
    vowels = [p for p in phones if p[-1].isdigit()]
    return next((i for i, p in enumerate(vowels) if p.endswith("1")), -1)


def distance(a: Sequence[str], b: Sequence[str]) -> int:
    """The edit distance between two strings, or two sequences of phones (insertions,
    deletions, substitutions)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def build(wordids: str | pathlib.Path,
          prons: dict[str, list[tuple[str, ...]]]) -> list[tuple[str, str, str, str]]:
    """The rows of the table from ``wordids.tsv`` and the dictionary's ``prons`` (word ->
    pronunciations, stress digits kept): for each word, the assignment of its WORDIDs to
    distinct pronunciations with the least total distance; where the dictionary has fewer
    pronunciations than the word has WORDIDs, each is given to the WORDID whose IPA in
    ARPAbet (:func:`xpseq.g2p.ipa.from_ipa`) is nearest to it, phone by phone (no two on
    one, none on another stressed vowel), and the WORDIDs left over are said by that
    ARPAbet."""
    import itertools

    from .ipa import from_ipa, to_ipa

    senses: dict[str, list[tuple[str, str]]] = {}
    label: dict[str, str] = {}
    with open(wordids, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            senses.setdefault(row["homograph"], []).append((row["wordid"],
                                                            row["pronunciation"]))
            label[row["wordid"]] = row["label"]
    rows = []
    for word, readings in senses.items():
        options: Sequence[tuple[str, ...]] = prons.get(word, [])
        if len(options) >= len(readings):         # a pronunciation for every sense
            said = [_sounds(to_ipa(p)) for p in options]
            cost = [[distance(_sounds(ipa), s) for s in said] for _, ipa in readings]
            best = min(itertools.permutations(range(len(options)), len(readings)),
                       key=lambda pick: sum(cost[k][i] for k, i in enumerate(pick)))
            given = dict(zip(range(len(readings)), best))
        else:                 # a sense for every pronunciation, nearest in ARPAbet phones
            arpabet = [from_ipa(ipa) for _, ipa in readings]
            cost = [[distance(a, p) for p in options] for a in arpabet]
            pick = min(itertools.permutations(range(len(readings)), len(options)),
                       key=lambda pick: sum(cost[k][i] for i, k in enumerate(pick)))
            given = {k: i for i, k in enumerate(pick)         # not on another stress
                     if _primary(options[i]) == _primary(arpabet[k])}
        rows += [(word, wordid, " ".join(options[given[k]] if k in given
                                         else from_ipa(ipa)), label[wordid])
                 for k, (wordid, ipa) in enumerate(readings)]
    return rows
