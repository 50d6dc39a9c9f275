"""A toy translation task: English (SVO, prepositions) to "Zhoric" (SOV, postpositions).

A small made-up language that an attention model can learn perfectly, and that cannot be
translated word by word: the verb moves to the end, adjectives move behind their nouns,
prepositions become postpositions and the subject takes a marker. Training sentences have
0-3 prepositional phrases; the length test has 4, more than anything seen in training.

Grammar
-------
English (``Adj?`` is optional)::

    S      -> NP V NP PP*               subject, verb, object, phrases (the data: 0-4)
    NP     -> "the" Adj? N
    PP     -> P NP

Zhoric::

    S_z    -> NP_z "zo" NP_z PP_z* V_z  subject, marker "zo", object, phrases, verb last
    NP_z   -> N_z Adj_z?                 no determiner; the adjective follows the noun
    PP_z   -> NP_z P_z                   a postposition after its noun phrase

Every English word maps one-to-one to a Zhoric word of the same class (N -> N_z, ...). The
phrases keep their English order (the first English phrase is the first Zhoric phrase);
only the verb moves, to the end. ``translate`` implements exactly these rules.

The generator draws the subject, verb, object, each phrase's preposition and each noun
uniformly; each noun phrase gets an adjective with probability 1/2, but a sentence keeps at
most :data:`MAX_ADJECTIVES` = 2 of them (those with the smallest draws, so every noun
phrase is equally likely to keep one). The cap makes length and phrase count agree: a
sentence with ``k`` phrases has ``5 + 3k`` to ``7 + 3k`` English words (never overlapping
another ``k``) and ``4 + 2k`` to ``6 + 2k`` Zhoric words. ``translate`` itself accepts any
number of adjectives.

Lexicon
-------
28 nouns, 12 adjectives, 12 verbs, 8 prepositions, plus "the" (English only) and the
subject marker "zo" (Zhoric only): 61 English and 61 Zhoric words, the two sets disjoint,
every Zhoric word invented for this module.

Example
-------
::

    English: the young teacher follows the dog across the bridge toward the dark forest
    Zhoric:  lekavi lito zo hanto kovin trana ondra nukri veno tambir

(``the young teacher`` -> ``lekavi lito`` + ``zo``; ``the dog`` -> ``hanto``;
``across the bridge`` -> ``kovin trana``; ``toward the dark forest`` -> ``ondra nukri
veno``; ``follows`` -> ``tambir`` at the end.)
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from xpseq.core import checks

__all__ = ["translate", "generate_pairs", "make_dataset", "ToyDataset", "NOUNS",
           "ADJECTIVES", "VERBS", "PREPOSITIONS", "DETERMINER", "SUBJECT_MARKER",
           "ENGLISH_WORDS", "ZHORIC_WORDS", "MAX_PHRASES", "MAX_ADJECTIVES"]

Pair = tuple[list[str], list[str]]

#: English noun -> Zhoric noun (28).
NOUNS: dict[str, str] = {
    "farmer": "tovak", "king": "sarun", "queen": "nelva", "cat": "pelu", "dog": "hanto",
    "horse": "bruna", "sheep": "bebo", "wolf": "ulka", "fox": "rinzo", "bird": "fipsa",
    "child": "dumo", "teacher": "lekavi", "baker": "pimol", "soldier": "vettar",
    "sailor": "tuzak", "house": "kebra", "tree": "olim", "river": "nashu",
    "village": "tesko", "mountain": "yamor", "garden": "zelpa", "bridge": "kovin",
    "boat": "harsu", "tower": "dastel", "field": "mubo", "stone": "kilpa",
    "window": "sorvi", "forest": "ondra",
}
#: English adjective -> Zhoric adjective (12).
ADJECTIVES: dict[str, str] = {
    "old": "gesh", "young": "lito", "red": "varu", "small": "mibi", "big": "dakka",
    "green": "velm", "quiet": "susa", "tall": "pondo", "dark": "nukri", "happy": "jolo",
    "brave": "karvi", "white": "bleno",
}
#: English verb -> Zhoric verb (12).
VERBS: dict[str, str] = {
    "sees": "vimet", "likes": "olsak", "follows": "tambir", "finds": "nekor",
    "helps": "fadim", "watches": "zuret", "carries": "bolgat", "paints": "sipra",
    "calls": "hulem", "meets": "yandu", "hears": "ostek", "visits": "ravdo",
}
#: English preposition -> Zhoric postposition (8).
PREPOSITIONS: dict[str, str] = {
    "near": "ki", "behind": "dava", "under": "soti", "above": "ulo", "beside": "pesu",
    "across": "trana", "toward": "veno", "around": "gulu",
}
#: The English determiner (dropped in Zhoric).
DETERMINER = "the"
#: The Zhoric particle after the subject noun phrase (no English counterpart).
SUBJECT_MARKER = "zo"
#: Phrase counts: training and dev use 0..3, the length test goes up to this.
MAX_PHRASES = 4
#: The generator keeps at most this many adjectives per sentence (see the module docstring).
MAX_ADJECTIVES = 2

_CLASSES = (("noun", NOUNS), ("adjective", ADJECTIVES), ("verb", VERBS),
            ("preposition", PREPOSITIONS))
#: Every English word of the lexicon (61).
ENGLISH_WORDS: frozenset[str] = frozenset(
    [DETERMINER, *NOUNS, *ADJECTIVES, *VERBS, *PREPOSITIONS])
#: Every Zhoric word of the lexicon (61).
ZHORIC_WORDS: frozenset[str] = frozenset(
    [SUBJECT_MARKER, *NOUNS.values(), *ADJECTIVES.values(), *VERBS.values(),
     *PREPOSITIONS.values()])

# Sorted word lists: the generator indexes into these, so the draws do not depend on the
# order in which the dictionaries above happen to be written.
_N, _A, _V, _P = (sorted(d) for d in (NOUNS, ADJECTIVES, VERBS, PREPOSITIONS))


def _check_lexicon() -> None:
    """Import-time guard: classes disjoint, the mapping one-to-one, the languages disjoint."""
    english = [DETERMINER, *(w for _, d in _CLASSES for w in d)]
    zhoric = [SUBJECT_MARKER, *(w for _, d in _CLASSES for w in d.values())]
    assert len(set(english)) == len(english), "an English word in two classes"
    assert len(set(zhoric)) == len(zhoric), "a Zhoric word used twice"
    assert not set(english) & set(zhoric), "English and Zhoric share a word"


_check_lexicon()


def _class_of(word: str) -> str:
    if word == DETERMINER:
        return f"the determiner {DETERMINER!r}"
    for name, table in _CLASSES:
        if word in table:
            return f"a {name}" if name != "adjective" else "an adjective"
    return "unknown"


def translate(english_tokens: Sequence[str]) -> list[str]:
    """Translate one English sentence of the toy grammar into Zhoric, by the rules above.

    Parameters
    ----------
    english_tokens : sequence of str, length L
        Lowercase words without punctuation, e.g. ``"the cat sees the dog".split()``.

    Returns
    -------
    list of str: the Zhoric words (for ``k`` phrases and ``a`` adjectives, ``4 + 2k + a``
    of them, against ``5 + 3k + a`` English words).

    Raises
    ------
    TypeError
        ``english_tokens`` is a string or holds a non-string.
    ValueError
        The sentence is not in the grammar. The message names the first position where
        parsing fails, as ``english_tokens[i] = 'word'``, and what was expected there
        (or that the sentence ended too early).
    """
    if isinstance(english_tokens, (str, bytes)):
        raise TypeError("translate: english_tokens must be a list of words, not a string "
                        "(split it first)")
    words = list(english_tokens)
    for i, w in enumerate(words):
        if not isinstance(w, str):
            raise TypeError(f"translate: english_tokens[{i}] is {type(w).__name__}, not str")
    pos = 0

    def fail(expected: str):
        if pos >= len(words):
            raise ValueError(f"translate: the sentence ends after {len(words)} words, "
                             f"expected {expected}: {' '.join(words)!r}")
        word = words[pos]
        found = _class_of(word)
        if found == "unknown":
            hint = (" (words must be lowercase)" if word.lower() in ENGLISH_WORDS
                    else "")
            found = f"a word not in the English lexicon{hint}"
        raise ValueError(f"translate: english_tokens[{pos}] = {word!r}: expected {expected}, "
                         f"found {found}")

    def take(table: dict[str, str], expected: str) -> str:
        nonlocal pos
        if pos >= len(words) or words[pos] not in table:
            fail(expected)
        pos += 1
        return table[words[pos - 1]]

    def noun_phrase() -> list[str]:
        nonlocal pos
        if pos >= len(words) or words[pos] != DETERMINER:
            fail(f"{DETERMINER!r} (a noun phrase)")
        pos += 1
        if pos < len(words) and words[pos] in ADJECTIVES:
            adjective = ADJECTIVES[words[pos]]
            pos += 1
            return [take(NOUNS, "a noun"), adjective]
        return [take(NOUNS, "an adjective or a noun")]

    subject = noun_phrase()
    verb = take(VERBS, "a verb")
    obj = noun_phrase()
    phrases: list[str] = []
    while pos < len(words):
        postposition = take(PREPOSITIONS, "a preposition or the end of the sentence")
        phrases += noun_phrase() + [postposition]
    return [*subject, SUBJECT_MARKER, *obj, *phrases, verb]


@dataclasses.dataclass(frozen=True)
class ToyDataset:
    """The toy task's splits; every English sentence occurs once in the whole dataset.

    Attributes
    ----------
    train : list of (English tokens, Zhoric tokens), 0-3 phrases each
    dev : list of pairs, 0-3 phrases each
    test : dict phrase count (0..4) -> list of pairs with exactly that many phrases;
        every ``test[4]`` sentence has more English words than any training sentence
        (17-19 against at most 16) and at least as many Zhoric words (12-14 against 4-12).
    """

    train: list[Pair]
    dev: list[Pair]
    test: dict[int, list[Pair]]


def _check_count(name: str, value, *, where: str) -> int:
    if not checks.is_int(value) or value < 0:
        raise ValueError(f"{where}: {name} must be a non-negative int, got {value!r}")
    return int(value)


def _check_phrases(phrases, *, where: str) -> tuple[int, ...]:
    if checks.is_int(phrases):
        phrases = (phrases,)
    elif isinstance(phrases, (str, bytes)) or not isinstance(phrases, Sequence):
        raise ValueError(f"{where}: phrases must be an int or a sequence of ints, "
                         f"got {phrases!r}")
    if len(phrases) == 0:
        raise ValueError(f"{where}: phrases is empty")
    for k in phrases:
        if not checks.is_int(k) or k < 0:
            raise ValueError(f"{where}: phrases must hold non-negative ints, got {k!r} "
                             f"in {phrases!r}")
    return tuple(int(k) for k in phrases)


def _sample_english(rng: np.random.Generator, n: int, phrases: tuple[int, ...]) -> list[list[str]]:
    """``n`` random English sentences. One ``(n, width)`` block of uniform draws, row by row:

    column 0 picks the phrase count, column 1 the verb, then 3 columns per noun phrase
    (subject, object, each phrase's; noun, adjective key, adjective) and 1 per preposition.
    """
    kmax = max(phrases)
    n_np = 2 + kmax
    u = rng.random((n, 2 + 3 * n_np + kmax))
    sentences = []
    for row in u:
        k = phrases[int(row[0] * len(phrases))]
        nps = 2 + k
        keys = row[2 + 1:2 + 3 * nps:3]                       # the adjective keys, (nps,)
        with_adj = {int(i) for i in np.argsort(keys, kind="stable")[:MAX_ADJECTIVES]
                    if keys[i] < 0.5}

        def np_words(i: int) -> list[str]:
            noun_u, _, adj_u = row[2 + 3 * i:5 + 3 * i]
            words = [DETERMINER]
            if i in with_adj:
                words.append(_A[int(adj_u * len(_A))])
            words.append(_N[int(noun_u * len(_N))])
            return words

        sentence = np_words(0) + [_V[int(row[1] * len(_V))]] + np_words(1)
        for j in range(k):
            sentence += [_P[int(row[2 + 3 * n_np + j] * len(_P))]] + np_words(2 + j)
        sentences.append(sentence)
    return sentences


def generate_pairs(n: int, *, phrases: int | Sequence[int], seed: int) -> list[Pair]:
    """``n`` random (English, Zhoric) pairs from ``numpy.random.default_rng(seed)``.

    Parameters
    ----------
    n : int >= 0
    phrases : int or sequence of int
        The number of prepositional phrases: exactly this int, or drawn uniformly from the
        entries of the sequence for each sentence (e.g. ``range(4)`` for 0-3).
    seed : int >= 0
        The same ``(n, phrases, seed)`` always gives the same pairs. Pairs may repeat
        (use :func:`make_dataset` for distinct sentences).

    Returns
    -------
    list of ``(english_tokens, zhoric_tokens)``, each a list of str, with
    ``zhoric_tokens == translate(english_tokens)``.
    """
    n = _check_count("n", n, where="generate_pairs")
    phrases = _check_phrases(phrases, where="generate_pairs")
    rng = np.random.default_rng(_check_count("seed", seed, where="generate_pairs"))
    return [(en, translate(en)) for en in _sample_english(rng, n, phrases)]


def _draw_distinct(rng: np.random.Generator, n: int, phrases: tuple[int, ...],
                   seen: set[tuple[str, ...]], *, what: str) -> list[Pair]:
    """``n`` pairs whose English sentences are not in ``seen`` (which is updated)."""
    out: list[Pair] = []
    attempts = 0
    while len(out) < n:
        if attempts > 50 * n + 1000:
            raise ValueError(f"make_dataset: could not find {n} distinct sentences for {what} "
                             f"(found {len(out)}); ask for fewer")
        need = n - len(out)
        for en in _sample_english(rng, need, phrases):
            attempts += 1
            key = tuple(en)
            if key not in seen and len(out) < n:
                seen.add(key)
                out.append((en, translate(en)))
    return out


def make_dataset(*, n_train: int = 12000, n_dev: int = 500, n_test_per_bucket: int = 300,
                 seed: int = 0) -> ToyDataset:
    """The toy task's train / dev / length-bucketed test splits.

    Parameters
    ----------
    n_train, n_dev : int
        Pairs with 0-3 phrases (uniform), for training and model selection.
    n_test_per_bucket : int
        Pairs for each phrase count 0, 1, 2, 3 and 4 (4 never occurs in train or dev).
    seed : int >= 0
        Everything is a function of the arguments. Smaller sizes (a quick run) give
        prefixes of the test buckets, since each split draws from its own stream
        (``numpy.random.SeedSequence(seed).spawn``): test buckets first, then dev, then
        train.

    Returns
    -------
    :class:`ToyDataset` in which every English sentence occurs once: no test or dev
    sentence is in train, and no sentence repeats within a split.
    """
    sizes = {name: _check_count(name, value, where="make_dataset") for name, value in
             (("n_train", n_train), ("n_dev", n_dev), ("n_test_per_bucket", n_test_per_bucket))}
    seed = _check_count("seed", seed, where="make_dataset")
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(7)]
    seen: set[tuple[str, ...]] = set()
    test = {k: _draw_distinct(streams[k], sizes["n_test_per_bucket"], (k,), seen,
                              what=f"test bucket {k}") for k in range(MAX_PHRASES + 1)}
    train_phrases = tuple(range(MAX_PHRASES))
    dev = _draw_distinct(streams[5], sizes["n_dev"], train_phrases, seen, what="dev")
    train = _draw_distinct(streams[6], sizes["n_train"], train_phrases, seen, what="train")
    return ToyDataset(train=train, dev=dev, test=test)
