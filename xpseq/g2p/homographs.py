"""Homographs chosen by rules: those that differ by stress by the word before them, those
that differ by their sounds by the words around them.

The front end asks the sense model (:mod:`xpseq.g2p.disambiguator`) first; of these rules
it keeps :func:`choose_sound` where it decides, since on held-out sentences (the dev part of
the homograph data's train split) the two together are right more often than the model
alone, and uses :func:`choose` only where no model answers (it is right less often than the
model where it decides).

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
*wind*, *tear*, *bass*, *close*, *use*, *wound*, *résumé*) are chosen by
:func:`choose_sound`, from the word before, the one before that and the word after (and
*résumé*'s accents, kept by :func:`xpseq.g2p.text.normalize` as the cue for the noun), by
the rules of the table :data:`SOUND_RULES` (each pronunciation with the contexts that pick
it, tried in order);
where its rules do not decide, the sense model does (``pronounce(..., lookup=True, beam=k,
n_best=k)`` lists a word's pronunciations).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

__all__ = ["choose", "variants", "choose_sound", "NOUN_CONTEXT", "VERB_CONTEXT",
           "SOUND_HOMOGRAPHS", "SOUND_RULES", "Cue", "ACCENT_CUES"]

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


# ------------------------------------------------- homographs that differ by their sounds

#: Words before which a homograph reads as a verb: ``to``, the modals, the subject
#: pronouns, negations (VERB_CONTEXT), and ``do``, ``did``, ``not``, ``let's``, the
#: pronouns' ``'ll``.
_VERBAL = VERB_CONTEXT | frozenset(
    "do does did not let's i'll you'll we'll they'll he'll she'll".split())
_DETERMINER = NOUN_CONTEXT
#: The subject pronouns: after them *read* may be either tense ("I read it yesterday").
_SUBJECTS = _VERBAL & frozenset("i you we they".split())


@dataclasses.dataclass(frozen=True)
class Cue:
    """A context that picks a pronunciation: each slot given (the word ``before``, the one
    before that, ``before2``, the word ``after``) holds one of its words."""

    before: frozenset[str] | None = None
    before2: frozenset[str] | None = None
    after: frozenset[str] | None = None

    def holds(self, before: str | None, before2: str | None, after: str | None) -> bool:
        return all(words is None or word in words for words, word in (
            (self.before, before), (self.before2, before2), (self.after, after)))


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _cue(before: str | frozenset[str] | None = None, before2: str | None = None,
         after: str | None = None) -> Cue:
    def of(x: str | frozenset[str] | None) -> frozenset[str] | None:
        return _words(x) if isinstance(x, str) else x
    return Cue(of(before), of(before2), of(after))


#: The rules of each sound homograph, in order: the first pronunciation (stress digits
#: kept, phones joined by spaces) one of whose cues holds is chosen; none holds, nothing
#: is chosen. A rule with an empty cue (``_cue()``) always holds.
SOUND_RULES: dict[str, tuple[tuple[str, tuple[Cue, ...]], ...]] = {
    "read": (
        ("R EH1 D", (_cue("he she it had has have was were been being is are already just "
                          "once"),                                  # past, participle
                     _cue("i you we they", before2="have has had"))),
        ("R IY1 D", (_cue(_VERBAL - _SUBJECTS),))),              # "I read": either
    "live": (
        ("L AY1 V", (_cue(after="music concert show broadcast performance audience album "
                                "stream wire bait coverage event recording feed tv "
                                "television update updates animals ammunition version"),
                     _cue("go goes went going gone is are was were be broadcast aired "
                          "streamed"),
                     _cue(_DETERMINER))),                           # the adjective
        ("L IH1 V", (_cue(_VERBAL | _words("who where long and")),))),
    "lead": (
        ("L EH1 D", (_cue(after="poisoning pipe pipes paint pencil weight weights bullet "
                                "bullets shot acid crystal free"),
                     _cue("of with"))),                              # the metal
        ("L IY1 D", (_cue(_VERBAL), _cue("the"),
                     _cue(after="to the us them you him her our their by off up")))),
    "wind": (
        ("W IH1 N D", (_cue(_DETERMINER),                            # the noun
                       _cue("of in against cold strong north south east west solar"))),
        ("W AY1 N D", (_cue(_VERBAL),
                       _cue(after="up down around it the back them through along"))),
        ("W IH1 N D", (_cue(),))),
    "tear": (
        ("T EH1 R", (_cue(after="down up apart off open it the out into through them"),
                     _cue(_VERBAL | _words("and")))),                # rip
        ("T IH1 R", (_cue(_DETERMINER),                              # a drop
                     _cue("single with in into of shed")))),
    "tears": (
        ("T EH1 R Z", (_cue(after="down up apart off open it the out into through them"),
                       _cue(_VERBAL | _words("and")), _cue("he she it"))),
        ("T IH1 R Z", (_cue(_DETERMINER), _cue("single with in into of shed")))),
    "bass": (
        ("B EY1 S", (_cue(after="guitar guitarist player line drum drums clef note notes "
                                "voice singer section amp speaker solo part"),)),  # music
        ("B AE1 S", (_cue(after="fishing fish boat swam swim swims took bit bites jumped"),
                     _cue("sea striped largemouth smallmouth large big"),
                     _cue(before2="caught catch catching"))),        # the fish
        ("B EY1 S", (_cue("plays play playing played sings sing the electric double"),))),
    "close": (
        ("K L OW1 Z", (_cue(_VERBAL | _words("and")),)),             # the verb
        ("K L OW1 S", (_cue("very so too a is are was were be stay get came come from"),
                       _cue(after="to friend friends call range by together enough "
                                  "relative relatives attention look"))),
        ("K L OW1 Z", (_cue(after="the your it them this that down off my his her our "
                                  "their"),))),
    "use": (
        ("Y UW1 S", (_cue(_DETERMINER),                              # the noun
                     _cue("of in for no much personal common daily external internal"))),
        ("Y UW1 Z", (_cue(_VERBAL),))),
    "wound": (
        ("W UW1 N D", (_cue(_DETERMINER),                            # an injury
                       _cue("gunshot stab knife head chest deep open flesh bullet"))),
        ("W AW1 N D", (_cue(after="up down around through the his her its their my our "
                                  "your it tight tightly"),         # wind's past
                       _cue("he she they we i you it was were had has have got be been "
                            "path road river trail")))),
}


def _rule(word: str, before: str | None, before2: str | None,
          after: str | None) -> str | None:
    """The pronunciation that the context chooses for a sound homograph by
    :data:`SOUND_RULES`, or ``None`` when no rule holds."""
    for pron, cues in SOUND_RULES.get(word, ()):
        if any(cue.holds(before, before2, after) for cue in cues):
            return pron
    return None


#: The words :func:`choose_sound` decides, each with its pronunciations the rules name.
SOUND_HOMOGRAPHS = ("read", "live", "lead", "wind", "tear", "tears", "bass", "close", "use",
                    "wound", "resume")

#: A spelling with accents that tells a homograph apart: ``résumé`` is the noun.
ACCENT_CUES = {"résumé": ("resume", "R EH1 Z AH0 M EY2")}


def choose_sound(word: str, prons: Sequence[Sequence[str]], before: str | None,
                 before2: str | None = None, after: str | None = None) -> int | None:
    """The index among ``prons`` (a sound homograph's pronunciations, stress digits kept)
    that its context chooses: the word before it (``before``), the one before that
    (``before2``) and the word after (``after``; each ``None`` beyond punctuation or the
    text's ends), or ``None`` when the rules do not decide. ``word`` may be a spelling of
    :data:`ACCENT_CUES` (``résumé``: the noun, whatever the context)."""
    if word in ACCENT_CUES:
        want: str | None = ACCENT_CUES[word][1]
    else:
        want = _rule(word, before, before2, after)
    if want is None:
        return None
    found = [i for i, p in enumerate(prons) if " ".join(p) == want]
    return found[0] if found else None
