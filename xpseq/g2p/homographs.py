"""Homographs that differ by stress, chosen by the word before them.

Many English nouns and verbs are spelled alike and told apart by stress: *a* ˈrecord, *to*
reˈcord; *the* ˈpresent, *we* preˈsent; ˈobject / obˈject, ˈproject / proˈject,
ˈcontract / conˈtract. The CMU dictionary lists both pronunciations; which is which is read
from the dictionary itself: the *first-stress* variant has its primary stress on the first
vowel, the *later-stress* variant an unstressed or secondary first vowel and a primary
stress after it, with as many vowels (755 words of the dictionary have both).
:func:`choose` picks one by the word before:

* after a determiner or possessive (``a``, ``the``, ``this``, ``my``, ``their`` ...),
  the first-stress variant (a noun or adjective: *the* ˈrecord, *a* ˈperfect day);
* after ``to``, a modal (``will``, ``can``, ``must`` ...), a subject pronoun (``i``,
  ``we``, ``they`` ...) or a negation (``don't``, ``won't``), the later-stress variant
  (a verb: *to* reˈcord, *they* obˈject, *will* perˈfect);
* anywhere else, nothing is chosen (the dictionary's first entry stays).

Homographs that differ by their sounds rather than their stress (*read*, *live*, *lead*,
*tear*, *wind*, *close*) are not chosen: the dictionary's first pronunciation is given
(``pronounce(..., lookup=True, beam=k, n_best=k)`` lists the others). No part-of-speech tagger
runs: none that ships its model in a package registry and works offline was found
dependable enough to add.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["choose", "variants", "NOUN_CONTEXT", "VERB_CONTEXT"]

#: Words after which a stress homograph is read as a noun (first-stress variant).
NOUN_CONTEXT = frozenset(
    "a an the this that these those my your his her its our their every each no some "
    "any another".split())

#: Words after which a stress homograph is read as a verb (later-stress variant).
VERB_CONTEXT = frozenset(
    "to will would can could shall should may might must i you we they please don't "
    "didn't doesn't won't can't cannot wouldn't shouldn't couldn't".split())


def _stresses(pron: Sequence[str]) -> list[str]:
    return [p[-1] for p in pron if p[-1].isdigit()]


def variants(prons: Sequence[Sequence[str]]) -> tuple[int, int] | None:
    """The indices of the first-stress and the later-stress variant among a word's
    pronunciations (stress digits kept), or ``None`` if it has not both (the first of
    each kind, with the same number of vowels, at least two)."""
    first = [i for i, p in enumerate(prons)
             if len(_stresses(p)) >= 2 and _stresses(p)[0] == "1"]
    later = [i for i, p in enumerate(prons)
             if len(_stresses(p)) >= 2 and _stresses(p)[0] != "1" and "1" in _stresses(p)]
    for i in first:
        for j in later:
            if len(_stresses(prons[i])) == len(_stresses(prons[j])):
                return i, j
    return None


def choose(prons: Sequence[Sequence[str]], previous: str | None) -> int | None:
    """The index of the pronunciation to give a word (``prons``: its pronunciations, stress
    digits kept) after the word ``previous`` (lower case; ``None`` at the start of a
    text or after punctuation), or ``None`` when the rule does not decide."""
    if previous is None or (previous not in NOUN_CONTEXT and previous not in VERB_CONTEXT):
        return None
    pair = variants(prons)
    if pair is None:
        return None
    return pair[0] if previous in NOUN_CONTEXT else pair[1]
