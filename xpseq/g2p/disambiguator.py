"""Homographs told apart by a model that xpseq trained: which sense of *read*, *bass*,
*record* a sentence means, from the words around it.

The model is one of the library's own: the bidirectional LSTM encoder with attention of
:mod:`xpseq.models.rnn`, trained by the library's training loop
(:func:`xpseq.tasks.experiment.train_model`; the command is ``python -m
scripts.train_homographs``) on the train split of Google's Wikipedia Homograph Data, the
mean of three epochs' parameters (:func:`xpseq.train.checkpoint.average`). Its source is
the words around the homograph, the homograph itself marked (:func:`source`); its target
is one token, the sense's label in the data (``noun``, ``verb``, ``past``, ``music``
...). One model serves every homograph: the labels that
name parts of speech are shared, so that what it learned about nouns and verbs also
answers for the dictionary's other noun/verb stress pairs (*record*, *permit*,
*conduct*), which are asked with the word itself hidden (:data:`HIDDEN`), as a part of its
training was.

:meth:`Disambiguator.choose` scores each candidate label by the model's first decoding
step (the log-probability of each label after ``<s>``) and keeps the most probable of
those the word has. The checkpoint, its vocabularies and the data's licence notice and
citation ship in ``homograph_model/`` beside this module:

    Kyle Gorman, Gleb Mazovetskiy and Vitaly Nikolaev (2018). Improving homograph
    disambiguation with machine learning. LREC 2018, pages 1349-1352. (Apache-2.0)
"""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Container, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["MODEL", "WINDOW", "MARK", "HIDDEN", "NOUN_LABELS", "source", "sentence_words",
           "Disambiguator", "shipped", "readings"]

#: The shipped checkpoint.
MODEL = pathlib.Path(__file__).with_name("homograph_model") / "senses.safetensors"
#: Words on each side of the homograph that the model reads.
WINDOW = 8
#: The token before the homograph's own token in a source.
MARK = "<homograph>"
#: The homograph's own token when the word is hidden (a word the data does not cover).
HIDDEN = "=?"
#: The labels that say a first-stress reading (a noun or an adjective, *a ˈrecord*) when a
#: dictionary's stress pair is asked with the word hidden; ``verb`` says the other.
NOUN_LABELS = ("noun", "adjective-noun", "adjective")


def source(words: Sequence[str], index: int, *, hidden: bool = False,
           window: int = WINDOW) -> list[str]:
    """The model's source for the homograph ``words[index]``: up to ``window`` words
    before it, :data:`MARK`, the homograph as ``"=" + word`` (:data:`HIDDEN` if ``hidden``),
    then up to ``window`` words after it, all in lower case.

    Parameters
    ----------
    words : sequence of str
        A sentence's tokens as :func:`xpseq.g2p.normalize` gives them (punctuation kept).
    index : int
        Where the homograph is, ``0 <= index < len(words)``.
    hidden : bool
        Hide the homograph itself (the context alone decides).
    window : int
        Words read on each side (a model's own: :attr:`Disambiguator.window`).

    Returns
    -------
    list of str

    Examples
    --------
    >>> source(["i", "read", "it", "."], 1)
    ['i', '<homograph>', '=read', 'it', '.']
    """
    if not 0 <= index < len(words):
        raise ValueError(f"source: index must be in [0, {len(words)}) for {len(words)} "
                         f"words, got {index}")
    left = [w.lower() for w in words[max(0, index - window):index]]
    right = [w.lower() for w in words[index + 1:index + 1 + window]]
    return [*left, MARK, HIDDEN if hidden else "=" + words[index].lower(), *right]


class Disambiguator:
    """A trained sense model on NumPy.

    Parameters
    ----------
    path : str or Path
        An xpseq checkpoint with vocabularies whose target tokens are sense labels
        (:data:`MODEL` by default).
    """

    def __init__(self, path: str | pathlib.Path = MODEL):
        from xpseq import backends, models
        from xpseq.data import Vocab
        from xpseq.train import checkpoint

        self.backend = backends.get("numpy")
        loaded = checkpoint.load(path, self.backend)
        if not loaded.vocabs:
            raise ValueError(f"Disambiguator: {path} holds no vocabularies")
        self.config = loaded.config
        self.params = {k: np.asarray(v) for k, v in loaded.params.items()}
        self.model = models.of(self.config)
        self.src_vocab = Vocab.from_list(loaded.vocabs["src"])
        self.tgt_vocab = Vocab.from_list(loaded.vocabs["tgt"])
        #: Words read on each side of the homograph (stored with the model).
        self.window = int((loaded.metadata or {}).get("window", WINDOW))

    @property
    def labels(self) -> list[str]:
        """The sense labels the model can say."""
        from xpseq.data.vocab import RESERVED_TOKENS

        return self.tgt_vocab.to_list()[len(RESERVED_TOKENS):]

    def scores(self, sources: Sequence[Sequence[str]]) -> np.ndarray:
        """The log-probabilities ``(N, V_tgt)`` of the first target token after each
        source (token lists): the model's encoder and one decoder step from ``<s>``, run
        by its kernels as the search runs them."""
        from xpseq.data.batching import BOS_ID

        if not sources:
            return np.zeros((0, len(self.tgt_vocab)))
        ids = [self.src_vocab.encode(list(s), add_eos=True) for s in sources]
        width = max(len(i) for i in ids)
        src = np.zeros((len(ids), width), dtype=np.int64)
        for row, i in enumerate(ids):
            src[row, :len(i)] = i
        src_len = np.array([len(i) for i in ids], dtype=np.int64)
        kernels, xp = self.model.kernels, self.backend.xp
        encoded = kernels.encode(self.params, self.config, src, src_len,
                                 scan=self.backend.scan, xp=xp)
        step, state = kernels.decoder(self.params, self.config, encoded, attention=False,
                                      max_len=1, xp=xp)
        log_probs, _, _ = step(state, np.full((len(ids),), BOS_ID, dtype=np.int64))
        return np.asarray(log_probs)

    def choose(self, sources: Sequence[Sequence[str]],
               candidates: Sequence[Sequence[str | Sequence[str]]]) -> list[int]:
        """For each source, the index of its most probable candidate label.

        Parameters
        ----------
        sources : sequence of token lists (:func:`source`)
        candidates : for each source, its labels in order; a candidate may be a sequence
            of labels, scored by the best of them (:data:`NOUN_LABELS`). A label the model
            does not know scores lowest.

        Returns
        -------
        list of int
        """
        if len(sources) != len(candidates):
            raise ValueError(f"Disambiguator.choose: {len(sources)} sources but "
                             f"{len(candidates)} candidate lists")
        logits = self.scores(sources)
        out = []
        for row, options in zip(logits, candidates):
            best = []
            for option in options:
                names = [option] if isinstance(option, str) else list(option)
                ids = [self.tgt_vocab.id(n) for n in names if n in self.tgt_vocab]
                best.append(max((float(row[i]) for i in ids), default=-np.inf))
            out.append(int(np.argmax(best)))
        return out


@functools.lru_cache(maxsize=1)
def shipped() -> Disambiguator | None:
    """The shipped model, read once; ``None`` if the package lacks it."""
    return Disambiguator(MODEL) if MODEL.exists() else None


def sentence_words(sentence: str, start: int, end: int) -> tuple[list[str], int]:
    """A sentence's words as the front end reads them and the index of the homograph at
    UTF-8 byte offsets ``start:end`` (as the Wikipedia Homograph Data gives it): the text
    before and after it are normalized apart (:func:`xpseq.g2p.normalize`), so that the
    homograph stays one word whatever surrounds it.

    Examples
    --------
    >>> sentence_words("They read 2 books.", 5, 9)
    (['they', 'read', 'two', 'books', '.'], 1)
    """
    import warnings

    from .text import normalize

    data = sentence.encode("utf-8")
    if not 0 <= start < end <= len(data):
        raise ValueError(f"sentence_words: need 0 <= start < end <= {len(data)} (the "
                         f"sentence's UTF-8 bytes), got start={start}, end={end}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        left = normalize(data[:start].decode("utf-8", "replace"))
        right = normalize(data[end:].decode("utf-8", "replace"))
    return [*left, data[start:end].decode("utf-8", "replace").lower(), *right], len(left)


def readings(lines: Sequence[Sequence[str]],
             prons: Mapping[str, Sequence[Sequence[str]]],
             model: Disambiguator | None = None,
             skip: Container[tuple[int, int]] = ()) -> dict[tuple[int, int], tuple[str, ...]]:
    """The pronunciation the model gives each homograph of ``lines``, asked all at once.

    A homograph is a word of the sense table (:func:`xpseq.g2p.senses.labels`: the
    Wikipedia data's words, asked with the word shown) or another word of ``prons`` with a
    first-stress and a later-stress pronunciation (:func:`xpseq.g2p.homographs.variants`:
    asked with the word hidden, a noun or adjective against a verb).

    Parameters
    ----------
    lines : sequence of token lists
        Texts as :func:`xpseq.g2p.normalize` gives them.
    prons : mapping
        The dictionary: word -> its pronunciations, stress digits kept.
    model : Disambiguator, optional
        The model (by default :func:`shipped`; without one, the result is empty).
    skip : container of ``(line, token index)``
        Homographs not to ask (those the caller's rules decide).

    Returns
    -------
    dict
        ``(line, token index) -> phones`` (stress digits kept) for each homograph.
    """
    from .homographs import variants
    from .senses import labels

    table = labels()
    asked: list[tuple[int, int, bool]] = []                # line, index, word hidden
    options: list[list[str | Sequence[str]]] = []
    phones: list[list[tuple[str, ...]]] = []
    for li, line in enumerate(lines):
        for i, token in enumerate(line):
            if (li, i) in skip:
                continue
            if token in table:
                asked.append((li, i, False))
                options.append([*table[token]])
                phones.append(list(table[token].values()))
            elif token in prons and (pair := variants(prons[token])) is not None:
                asked.append((li, i, True))
                options.append([NOUN_LABELS, "verb"])
                phones.append([tuple(prons[token][k]) for k in pair])
    model = shipped() if model is None and asked else model    # read on the first asked
    if model is None or not asked:
        return {}
    sources = [source(lines[li], i, hidden=hidden, window=model.window)
               for li, i, hidden in asked]
    chosen = model.choose(sources, options)
    return {(li, i): p[c] for (li, i, _), p, c in zip(asked, phones, chosen)}
