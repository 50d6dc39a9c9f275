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
*wind*, *tear*, *bass*, *close*, *use*, *wound*, *résumé*) are chosen by
:func:`choose_sound`, from the word before, the one before that and the word after (and
*résumé*'s accents, kept by :func:`xpseq.g2p.text.normalize` as the cue for the noun);
where its rules do not decide, the dictionary's first pronunciation is given
(``pronounce(..., lookup=True, beam=k, n_best=k)`` lists the others). No part-of-speech
tagger runs: none that ships its model in a package registry and works offline was found
dependable enough to add.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["choose", "variants", "choose_sound", "NOUN_CONTEXT", "VERB_CONTEXT",
           "SOUND_HOMOGRAPHS", "ACCENT_CUES"]

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


def _rule(word: str, before: str | None, before2: str | None,
          after: str | None) -> str | None:
    """The pronunciation (stress digits kept, phones joined by spaces) that the context
    chooses for a sound homograph, or ``None`` when it does not decide."""
    b, b2, a = before or "", before2 or "", after or ""
    if word == "read":
        if b in {"he", "she", "it", "had", "has", "have", "was", "were", "been", "being",
                 "is", "are", "already", "just", "once"} or (
                b2 in {"have", "has", "had"} and b in {"i", "you", "we", "they"}):
            return "R EH1 D"                                    # past, participle
        return "R IY1 D" if b in _VERBAL else None
    if word == "live":
        if a in {"music", "concert", "show", "broadcast", "performance", "audience", "album",
                 "stream", "wire", "bait", "coverage", "event", "recording", "feed", "tv",
                 "television", "update", "updates", "animals", "ammunition", "version"} \
                or b in {"go", "goes", "went", "going", "gone", "is", "are", "was", "were",
                         "be", "broadcast", "aired", "streamed"} or b in _DETERMINER:
            return "L AY1 V"                                    # the adjective
        return "L IH1 V" if b in _VERBAL | {"who", "where", "long", "and"} else None
    if word == "lead":
        if a in {"poisoning", "pipe", "pipes", "paint", "pencil", "weight", "weights",
                 "bullet", "bullets", "shot", "acid", "crystal", "free"} or b in {"of", "with"}:
            return "L EH1 D"                                    # the metal
        if b in _VERBAL or b == "the" or a in {"to", "the", "us", "them", "you", "him",
                                                "her", "our", "their", "by", "off", "up"}:
            return "L IY1 D"
        return None
    if word == "wind":
        if b in _DETERMINER or b in {"of", "in", "against", "cold", "strong", "north",
                                     "south", "east", "west", "solar"}:
            return "W IH1 N D"                                  # the noun
        if b in _VERBAL or a in {"up", "down", "around", "it", "the", "back", "them",
                                 "through", "along"}:
            return "W AY1 N D"
        return "W IH1 N D"
    if word in ("tear", "tears"):
        s = "" if word == "tear" else " Z"
        if a in {"down", "up", "apart", "off", "open", "it", "the", "out", "into",
                 "through", "them"} or b in _VERBAL | {"and"} or (
                word == "tears" and b in {"he", "she", "it"}):
            return "T EH1 R" + s                                # rip
        if b in _DETERMINER or b in {"single", "with", "in", "into", "of", "shed"}:
            return "T IH1 R" + s                                # a drop
        return None
    if word == "bass":
        if a in {"guitar", "guitarist", "player", "line", "drum", "drums", "clef", "note",
                 "notes", "voice", "singer", "section", "amp", "speaker", "solo", "part"}:
            return "B EY1 S"                                    # music
        if a in {"fishing", "fish", "boat", "swam", "swim", "swims", "took", "bit", "bites",
                 "jumped"} or b in {"sea", "striped", "largemouth", "smallmouth", "large",
                                    "big"} or b2 in {"caught", "catch", "catching"}:
            return "B AE1 S"                                    # the fish
        if b in {"plays", "play", "playing", "played", "sings", "sing", "the", "electric",
                 "double"}:
            return "B EY1 S"
        return None
    if word == "close":
        if b in _VERBAL | {"and"}:
            return "K L OW1 Z"                                  # the verb
        if b in {"very", "so", "too", "a", "is", "are", "was", "were", "be", "stay", "get",
                 "came", "come", "from"} or a in {"to", "friend", "friends", "call", "range",
                                                  "by", "together", "enough", "relative",
                                                  "relatives", "attention", "look"}:
            return "K L OW1 S"
        if a in {"the", "your", "it", "them", "this", "that", "down", "off", "my", "his",
                 "her", "our", "their"}:
            return "K L OW1 Z"
        return None
    if word == "use":
        if b in _DETERMINER or b in {"of", "in", "for", "no", "much", "personal",
                                     "common", "daily", "external", "internal"}:
            return "Y UW1 S"                                    # the noun
        return "Y UW1 Z" if b in _VERBAL else None
    if word == "wound":
        if b in _DETERMINER or b in {"gunshot", "stab", "knife", "head", "chest", "deep",
                                     "open", "flesh", "bullet"}:
            return "W UW1 N D"                                  # an injury
        if a in {"up", "down", "around", "through", "the", "his", "her", "its", "their",
                 "my", "our", "your", "it", "tight", "tightly"} or b in {
                    "he", "she", "they", "we", "i", "you", "it", "was", "were", "had", "has",
                    "have", "got", "be", "been", "path", "road", "river", "trail"}:
            return "W AW1 N D"                                  # wind's past
        return None
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
