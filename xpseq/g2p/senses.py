"""The senses of Google's Wikipedia Homograph Data as CMU dictionary pronunciations.

The data names each reading of a homograph by a WORDID (``abstract_adj-nou``,
``abstract_vrb``) and gives its IPA; the dictionary lists the same word's pronunciations
in ARPAbet. :func:`build` pairs them once, each WORDID with the dictionary pronunciation
whose IPA (:func:`xpseq.g2p.ipa.to_ipa`) is nearest to the data's (edit distance over the
sounds, stress marks counted), no two WORDIDs of a word on one pronunciation; the pairs
are kept in ``homograph_senses.tsv`` beside this module (word, WORDID, phones), read by
:func:`table`. A WORDID whose word the dictionary lacks, or that has fewer pronunciations
than senses, is left out. Only the data's transcriptions (``wordids.tsv``) are read, never
its sentences. The data is Apache-2.0, by Gorman, Mazovetskiy and Nikolaev (2018),
"Improving homograph disambiguation with machine learning", LREC 2018, pp. 1349-1352.
"""

from __future__ import annotations

import csv
import functools
import pathlib
from typing import Sequence

__all__ = ["TABLE", "table", "build", "distance"]

#: The table's file: word, WORDID and ARPAbet phones (stress digits kept), tab-separated.
TABLE = pathlib.Path(__file__).with_name("homograph_senses.tsv")


@functools.lru_cache(maxsize=1)
def table() -> dict[str, dict[str, tuple[str, ...]]]:
    """Word -> WORDID -> the dictionary pronunciation that is that sense."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    with open(TABLE, encoding="utf-8", newline="") as f:
        for row in csv.reader(f, delimiter="\t"):
            if row and not row[0].startswith("#"):
                out.setdefault(row[0], {})[row[1]] = tuple(row[2].split())
    return out


def _sounds(ipa: str) -> str:
    """An IPA string compared by its sounds: the data's ``'`` as ``ˈ``, length marks,
    syllable dots and ties dropped, ``r`` as ``ɹ``, ``g`` as ``ɡ``."""
    ipa = ipa.replace("'", "ˈ").replace("ː", "").replace(".", "").replace("\u0361", "")
    ipa = ipa.replace("ʤ", "dʒ").replace("ʧ", "tʃ")
    return ipa.replace("r", "ɹ").replace("g", "ɡ").replace("ɜ˞", "ɝ").replace("ə˞", "ɚ")


def distance(a: str, b: str) -> int:
    """The edit distance between two strings (insertions, deletions, substitutions)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def build(wordids: str | pathlib.Path,
          prons: dict[str, list[tuple[str, ...]]]) -> list[tuple[str, str, str]]:
    """The rows of the table from ``wordids.tsv`` and the dictionary's ``prons`` (word ->
    pronunciations, stress digits kept): for each word, the assignment of its WORDIDs to
    distinct pronunciations with the least total distance."""
    import itertools

    from .ipa import to_ipa

    senses: dict[str, list[tuple[str, str]]] = {}
    with open(wordids, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            senses.setdefault(row["homograph"], []).append((row["wordid"],
                                                            row["pronunciation"]))
    rows = []
    for word, readings in senses.items():
        options: Sequence[tuple[str, ...]] = prons.get(word, [])
        if len(options) < len(readings):
            continue
        said = [_sounds(to_ipa(p)) for p in options]
        cost = [[distance(_sounds(ipa), s) for s in said] for _, ipa in readings]
        best = min(itertools.permutations(range(len(options)), len(readings)),
                   key=lambda pick: sum(cost[k][i] for k, i in enumerate(pick)))
        rows += [(word, wordid, " ".join(options[i]))
                 for (wordid, _), i in zip(readings, best)]
    return rows
