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

:func:`phonemize` reads running text (:mod:`xpseq.g2p.text` spells out its numbers,
:mod:`xpseq.g2p.homographs` chooses between noun and verb stress), answers its dictionary
words from the dictionary and the others from the model.

:func:`pronounce` decodes an iterable of words (a list, a generator ...) in batches with a
model loaded once (and kept for later calls) and returns the answers as a list;
:func:`pronounce_iter` yields them one by one, reading and decoding :data:`CHUNK` words at
a time, so that any number of words is answered with bounded memory. :class:`G2P` is that
loaded model, for another checkpoint (``xpseq train --task g2p`` writes them) or an
ensemble of several. Words are read lower-cased, accents removed (``café`` as ``cafe``:
:func:`xpseq.g2p.text.fold`), surrounding whitespace removed. One policy holds for a word
everywhere (:func:`pronounce`, :func:`pronounce_iter`, :func:`phonemize` and ``xpseq
g2p``): a character the model never saw is left out of the word with an
:class:`UnknownCharacterWarning` naming it (the word is still answered from the others);
a word of more than :data:`MAX_WORD_LENGTH` characters is answered with no phones, with a
:class:`LongWordWarning` (``warnings.simplefilter("error", LongWordWarning)`` makes it an
error); an empty word gives an empty pronunciation. ``lookup=True`` answers the words that are in
the CMU dictionary from it (their first pronunciation) and only the others from the
model, as g2p_en does; it needs the dictionary's package (``xpseq[g2p]``).

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
from collections.abc import Iterable, Iterator
from typing import Any, Sequence

from xpseq import backends
from xpseq.core.precision import Policy

from .converter import (
    CHUNK,
    G2P,
    MAX_WORD_LENGTH,
    MODEL_DIR,
    LongWordWarning,
    UnknownCharacterWarning,
    shipped,
)
from .text import ControlCharacterWarning

__all__ = ["G2P", "pronounce", "pronounce_iter", "phonemize", "load", "shipped",
           "UnknownCharacterWarning", "LongWordWarning", "ControlCharacterWarning", "MAX_WORD_LENGTH", "CHUNK",
           "MODEL_DIR"]

_LOADED: dict[tuple[Any, ...], G2P] = {}


def load(paths: str | Sequence[str] | None = None, *,
         backend: str | backends.Backend | None = None,
         precision: Policy | str | None = None) -> G2P:
    """A :class:`G2P`, loaded once per ``(paths, backend, precision)`` and kept (a torch
    backend with ``compile=True`` apart from the eager one)."""
    key = (None if paths is None else tuple(map(str, [paths] if isinstance(
        paths, (str, pathlib.Path)) else paths)),
        _backend_key(backend), Policy.of(precision, "G2P: precision"))
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


def pronounce(words: Iterable[str], *, beam: int = 1, n_best: int = 1, lookup: bool = False,
              stress: bool | None = None, backend: str | backends.Backend | None = None,
              model: str | Sequence[str] | None = None) -> list[Any]:
    """The phones of each word (see :meth:`G2P.pronounce`), with the shipped model or
    the checkpoint(s) ``model``, on ``backend`` (default: :func:`xpseq.backends.default`
    for decoding).

    Examples
    --------
    >>> from xpseq import g2p
    >>> g2p.pronounce(["hello", "xylophone"])
    [['HH', 'EH1', 'L', 'OW0'], ['Z', 'AY1', 'L', 'AH0', 'F', 'OW2', 'N']]
    >>> g2p.pronounce(["hello"], stress=False)         # the stress digits removed
    [['HH', 'EH', 'L', 'OW']]
    >>> g2p.pronounce(["read"], beam=5, n_best=2)      # two pronunciations, best first
    [[['R', 'EH1', 'D'], ['R', 'IY1', 'D']]]
    """
    return load(model, backend=backend)._pronounce(words, beam, n_best, lookup, stress)


def phonemize(text: str, *, lookup: bool = True, stress: bool | None = None, beam: int = 1,
              backend: str | backends.Backend | None = None,
              model: str | Sequence[str] | None = None) -> list[str]:
    """The phones of running ``text`` (see :meth:`G2P.phonemize`), with the shipped model
    or the checkpoint(s) ``model``, on ``backend`` (default:
    :func:`xpseq.backends.default` for decoding).

    Examples
    --------
    >>> from xpseq import g2p
    >>> " ".join(g2p.phonemize("I paid $5."))
    'AY1   P EY1 D   F AY1 V   D AA1 L ER0 Z   .'
    """
    return load(model, backend=backend).phonemize(text, lookup=lookup, stress=stress,
                                                  beam=beam)


def pronounce_iter(words: Iterable[str], *, beam: int = 1, n_best: int = 1,
                   lookup: bool = False, stress: bool | None = None, chunk: int = CHUNK,
                   backend: str | backends.Backend | None = None,
                   model: str | Sequence[str] | None = None) -> Iterator[Any]:
    """The phones of each word, yielded one by one, ``chunk`` words decoded at a time
    (see :meth:`G2P.pronounce_iter`), with the shipped model or the checkpoint(s)
    ``model``, on ``backend`` (default: :func:`xpseq.backends.default` for decoding)."""
    return load(model, backend=backend).pronounce_iter(words, beam=beam, n_best=n_best,
                                                       lookup=lookup, stress=stress,
                                                       chunk=chunk)
