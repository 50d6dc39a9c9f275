"""Pronunciations of English words, from the model that ships with xpseq.

No training and no network: the package holds a grapheme-to-phoneme model trained on the
CMU Pronouncing Dictionary (stress removed; its recipe, its scores on the dictionary's
held-out test words and the command that reproduces it are in the README and the G2P
guide)::

    >>> from xpseq import g2p
    >>> g2p.pronounce(["xylophone", "Dijkstra"])          # doctest: +SKIP
    [['Z', 'AY', 'L', 'AH', 'F', 'OW', 'N'], ['D', 'IY', 'K', 'S', 'T', 'R', 'AH']]

:func:`pronounce` decodes a list of words in batches with a model loaded once (and kept
for later calls); :class:`G2P` is that loaded model, for another checkpoint (``xpseq
train --task g2p`` writes them) or an ensemble of several. Words are read lower-cased,
surrounding whitespace removed; a character the model never saw is left out of the word
with a :class:`UnknownCharacterWarning` naming it (the word is still answered from the
others); an empty word gives an empty pronunciation. ``lookup=True`` answers the words
that are in the CMU dictionary from it (their first pronunciation) and only the others
from the model, as g2p_en does; it needs the dictionary's package (``xpseq[g2p]``).

The shipped model's files are listed in ``model/shipped.json`` next to this module, with
the scores the README states (:func:`shipped`).
"""

from __future__ import annotations

import json
import pathlib
import warnings
from typing import Sequence

from xpseq import backends

__all__ = ["G2P", "pronounce", "load", "shipped", "UnknownCharacterWarning", "MODEL_DIR"]

#: The folder of the shipped model: ``shipped.json`` and the checkpoints it names.
MODEL_DIR = pathlib.Path(__file__).resolve().parent / "model"

_LOADED: dict[tuple, G2P] = {}


class UnknownCharacterWarning(UserWarning):
    """A word held characters the model never saw; they were left out."""


def shipped() -> dict:
    """The shipped model's manifest: ``files`` (its checkpoints, an ensemble when several),
    ``stress``, and the ``scores`` measured on the test split with the command that
    measured them."""
    path = MODEL_DIR / "shipped.json"
    if not path.is_file():
        raise FileNotFoundError(f"no shipped G2P model: {path} is missing (a broken "
                                "installation?)")
    return json.loads(path.read_text(encoding="utf-8"))


class G2P:
    """A G2P model (one checkpoint, or several decoded as an ensemble) on a backend.

    Parameters
    ----------
    paths : checkpoint paths (``xpseq train --task g2p`` writes them); ``None`` for the
        shipped model. Several make an ensemble (their vocabularies must be the same).
    backend : a backend name or object; ``None`` for NumPy
    """

    def __init__(self, paths: str | Sequence[str] | None = None, *,
                 backend: str | backends.Backend | None = None):
        from xpseq.data import Vocab
        from xpseq.search import Ensemble
        from xpseq.train import checkpoint

        if paths is None:
            manifest = shipped()
            paths = [MODEL_DIR / name for name in manifest["files"]]
        elif isinstance(paths, (str, pathlib.Path)):
            paths = [paths]
        paths = [pathlib.Path(p) for p in paths]
        if not paths:
            raise ValueError("G2P: paths must name at least one checkpoint")
        self.backend = backends.get(backend or "numpy") if not isinstance(
            backend, backends.Backend) else backend
        loaded = [checkpoint.load(p) for p in paths]
        for ckpt in loaded:
            meta = ckpt.metadata or {}
            if meta.get("task") != "g2p" or ckpt.vocabs is None:
                raise ValueError(f"G2P: {ckpt.path} is not a G2P checkpoint (it was not "
                                 "written by xpseq train --task g2p)")
            if ckpt.vocabs != loaded[0].vocabs:
                raise ValueError(f"G2P: {ckpt.path} and {loaded[0].path} have different "
                                 "vocabularies; an ensemble needs one")
            if bool(meta.get("stress")) != bool((loaded[0].metadata or {}).get("stress")):
                raise ValueError(f"G2P: {ckpt.path} and {loaded[0].path} differ in stress "
                                 "marks")
        self.paths = paths
        self.metadata = loaded[0].metadata
        self.stress = bool(loaded[0].metadata.get("stress"))
        self.src_vocab = Vocab.from_list(loaded[0].vocabs["src"])
        self.tgt_vocab = Vocab.from_list(loaded[0].vocabs["tgt"])
        params = [{k: self.backend.asarray(v.astype("float32")) for k, v in c.params.items()}
                  for c in loaded]
        if len(loaded) == 1:
            self.params, self.config = params[0], loaded[0].config
        else:
            self.params, self.config = params, Ensemble([c.config for c in loaded])
        self._lexicon: dict | None = None

    def unknown_characters(self, word: str) -> list[str]:
        """The characters of ``word`` (as the model reads it) that the model never saw."""
        from xpseq.tasks.g2p_recipe import word_tokens

        return sorted({c for c in word_tokens(word) if c not in self.src_vocab})

    def lexicon(self) -> dict:
        """The CMU dictionary (stress as the model's), read once: word -> pronunciations."""
        if self._lexicon is None:
            from xpseq.data.cmudict import read_cmudict

            self._lexicon = read_cmudict(stress=self.stress)
        return self._lexicon

    def pronounce(self, words: Sequence[str], *, beam: int = 1, n_best: int = 1,
                  lookup: bool = False) -> list:
        """The phones of each word, in the order of ``words``.

        Parameters
        ----------
        words : sequence of str
        beam : beam size (1: greedy search)
        n_best : pronunciations per word (``<= beam``)
        lookup : answer the words of the CMU dictionary from it (its pronunciations, in
            the dictionary's order) and the others from the model

        Returns
        -------
        With ``n_best == 1`` a list of phone lists, one per word; otherwise a list of
        ``n_best`` phone lists per word (best first; from the dictionary, as many as it
        has, at most ``n_best``).
        """
        from xpseq.search import options_for
        from xpseq.tasks.experiment import translate
        from xpseq.tasks.g2p_recipe import word_tokens

        if isinstance(words, str) or not all(isinstance(w, str) for w in words):
            raise TypeError("pronounce: words must be a sequence of str (a list of words, "
                            "not one string)")
        options = options_for(beam, n_best, caller="pronounce")
        answers: list = [None] * len(words)
        todo = []
        lexicon = self.lexicon() if lookup else {}
        for i, word in enumerate(words):
            key = word.strip().lower()
            if key in lexicon:
                answers[i] = [list(p) for p in lexicon[key][:n_best]]
                continue
            unknown = self.unknown_characters(word)
            if unknown:
                shown = ", ".join(map(repr, unknown))
                warnings.warn(f"{word.strip()!r}: the model knows no {shown}; answered from "
                              "the other characters", UnknownCharacterWarning, stacklevel=2)
            tokens = [c for c in word_tokens(word) if c in self.src_vocab]
            if tokens:
                todo.append((i, tokens))
            else:
                answers[i] = [[]]
        results = translate(self.params, self.config, [t for _, t in todo], self.src_vocab,
                            self.tgt_vocab, self.backend, options) if todo else []
        for (i, _), result in zip(todo, results):
            answers[i] = [list(h) for h in result["n_best"]]
        return [a[0] for a in answers] if n_best == 1 else answers


def load(paths: str | Sequence[str] | None = None, *,
         backend: str | backends.Backend | None = None) -> G2P:
    """A :class:`G2P`, loaded once per ``(paths, backend)`` and kept."""
    key = (None if paths is None else tuple(map(str, [paths] if isinstance(
        paths, (str, pathlib.Path)) else paths)), str(getattr(backend, "name", backend)))
    if key not in _LOADED:
        _LOADED[key] = G2P(paths, backend=backend)
    return _LOADED[key]


def pronounce(words: Sequence[str], *, beam: int = 1, n_best: int = 1, lookup: bool = False,
              backend: str | backends.Backend | None = None,
              model: str | Sequence[str] | None = None) -> list:
    """The phones of each word (see :meth:`G2P.pronounce`), with the shipped model or
    the checkpoint(s) ``model``, on ``backend`` (default NumPy)."""
    return load(model, backend=backend).pronounce(words, beam=beam, n_best=n_best,
                                                  lookup=lookup)
