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
:func:`xpseq.g2p.text.fold`), surrounding whitespace removed, and have
at most :data:`MAX_WORD_LENGTH` characters (a longer one is a ``ValueError``); a
character the model never saw is left out of the word with a
:class:`UnknownCharacterWarning` naming it (the word is still answered from the others);
an empty word gives an empty pronunciation. ``lookup=True`` answers the words that are in
the CMU dictionary from it (their first pronunciation) and only the others from the
model, as g2p_en does; it needs the dictionary's package (``xpseq[g2p]``).

The shipped model's files are listed in ``model/shipped.json`` next to this module, with
the scores the README states (:func:`shipped`).
"""

from __future__ import annotations

import itertools
import json
import pathlib
import warnings
from collections.abc import Iterable, Iterator
from typing import Any, Sequence, cast

from xpseq import backends
from xpseq.core import checks
from xpseq.core.precision import Policy
from xpseq.search.decoder import Decoder

__all__ = ["G2P", "pronounce", "pronounce_iter", "phonemize", "load", "shipped",
           "UnknownCharacterWarning", "MAX_WORD_LENGTH", "CHUNK", "MODEL_DIR"]

#: The folder of the shipped model: ``shipped.json`` and the checkpoints it names.
MODEL_DIR = pathlib.Path(__file__).resolve().parent / "model"

#: The most characters a word may have (surrounding whitespace removed). The longest word
#: of the CMU dictionary has 28 (``antidisestablishmentarianism``; of its 126,052 words 53
#: have more than 17), so 64 leaves room for any English word, name or compound, while
#: bounding the work of one word: the search runs up to ``2 n + 5`` steps for ``n``
#: characters, each step attending over all of them, so the work grows as ``n²`` (a
#: 10,000-letter "word" took two minutes; one of 64 letters takes well under a second).
MAX_WORD_LENGTH = 64

#: Words decoded together by :func:`pronounce_iter` (and ``xpseq g2p``), by default.
CHUNK = 512

#: Batch sizes a compiling backend decodes (see :meth:`G2P._decode`): the last is the
#: batch size of a longer list, whose remainder takes the smallest size that holds it.
_PADDED_SIZES = (16, 64, 128, 256)

_LOADED: dict[tuple[Any, ...], G2P] = {}


class UnknownCharacterWarning(UserWarning):
    """A word held characters the model never saw; they were left out.

    ``word`` is the word (surrounding whitespace removed) and ``characters`` the sorted
    list of the characters left out."""

    def __init__(self, message: str, *, word: str = "", characters: Sequence[str] = ()):
        super().__init__(message)
        self.word = word
        self.characters = list(characters)


def shipped() -> dict[str, Any]:
    """The shipped model's manifest: ``files`` (its checkpoints, an ensemble when several),
    ``stress``, and the ``scores`` measured on the test split with the command that
    measured them; ``no_stress``, when present, is the stress-free model that ships beside
    a stressed one and answers ``stress=False`` (its files and scores)."""
    path = MODEL_DIR / "shipped.json"
    if not path.is_file():
        raise FileNotFoundError(f"no shipped G2P model: {path} is missing (a broken "
                                "installation?)")
    return cast(dict[str, Any], json.loads(path.read_text(encoding="utf-8")))


class G2P:
    """A G2P model (one checkpoint, several decoded as an ensemble, or an ONNX export)
    through its :class:`~xpseq.search.Decoder`.

    Parameters
    ----------
    model : checkpoint paths (``xpseq train --task g2p`` writes them), an ONNX export's
        folder (``xpseq export --onnx DIR``; ``xpseq export --shipped --onnx DIR`` for the
        shipped model: decoded by onnxruntime in the same search loops), a
        :class:`~xpseq.search.Decoder`, or ``None`` for the shipped model. Several
        checkpoints make an ensemble (the same vocabularies and stress marks).
    backend : a checkpoint's backend: a name or object; ``None`` for the default backend for
        decoding (:func:`xpseq.backends.default`, ``"decode"``). See
        :func:`xpseq.load_decoder`.
    precision : ``None`` (float32, the default) or ``"bf16"``: decode with the matrix
        products and activations in bfloat16 (:mod:`xpseq.core.precision`; JAX and
        PyTorch only). Faster where the processor multiplies bfloat16 natively, slower
        where it does not; the answers may differ from float32's (the G2P guide gives the
        shipped model's scores both ways).
    """

    def __init__(self, model: str | pathlib.Path | Sequence[str | pathlib.Path] | Decoder
                 | None = None, *, backend: str | backends.Backend | None = None,
                 precision: Policy | str | None = None):
        from xpseq.tasks.decoders import load_decoder

        #: The stress-free model that answers ``stress=False`` beside a stressed shipped
        #: one (the manifest's ``no_stress`` entry), loaded when first asked.
        self._plain_paths: list[pathlib.Path] = []
        self._plain: G2P | None = None
        self._lexicons: dict[bool, dict[str, Any]] = {}
        precision = Policy.of(precision, "G2P: precision")
        if isinstance(model, Decoder):
            decoder, paths = model, []
        else:
            if model is None:
                manifest = shipped()
                model = [MODEL_DIR / name for name in manifest["files"]]
                self._plain_paths = [MODEL_DIR / name for name in
                                     (manifest.get("no_stress") or {}).get("files", [])]
            elif isinstance(model, (str, pathlib.Path)):
                model = [model]
            paths = [pathlib.Path(p) for p in model]
            if not paths:
                raise ValueError("G2P: model must name at least one checkpoint")
            try:
                decoder = load_decoder(paths, backend=backend, precision=precision)
            except ValueError as err:
                raise ValueError("G2P: " + str(err).removeprefix("load_decoder: ")) from None
        meta = decoder.metadata
        if meta.get("task") != "g2p":
            what = " and ".join(map(str, paths)) or str(getattr(decoder, "folder", decoder))
            raise ValueError(f"G2P: {what} is not a G2P model (it was not trained by xpseq "
                             "train --task g2p)")
        self.decoder = decoder
        self.paths = paths
        self.metadata = dict(meta)
        self.stress = bool(meta.get("stress"))
        self.src_vocab, self.tgt_vocab = decoder.src_vocab, decoder.tgt_vocab

    @property
    def backend(self) -> backends.Backend | None:
        """The backend its checkpoint decodes on (``None`` for an export: onnxruntime)."""
        return getattr(self.decoder, "backend", None)

    @property
    def params(self) -> Any:
        """The checkpoint's parameters on :attr:`backend` (a list for an ensemble)."""
        return self._checkpoint("params")

    @property
    def config(self) -> Any:
        """The checkpoint's configuration (an :class:`~xpseq.search.Ensemble` for
        several)."""
        return self._checkpoint("config")

    def _checkpoint(self, name: str) -> Any:
        if not hasattr(self.decoder, name):
            raise TypeError(f"G2P.{name}: {self.decoder!r} is an ONNX export; it has graphs, "
                            "not parameters")
        return getattr(self.decoder, name)

    @property
    def precision(self) -> Policy:
        """The precision it decodes in (an export's: its own dtype, ``Policy(None)``)."""
        return getattr(self.decoder, "precision", Policy(None))

    @property
    def compiles_programs(self) -> bool:
        """Whether its decoder compiles whole searches (JAX), one per batch shape."""
        backend = getattr(self.decoder, "backend", None)
        return backend is not None and backend.capabilities.compile == "program"

    def unknown_characters(self, word: str) -> list[str]:
        """The characters of ``word`` (as the model reads it) that the model never saw."""
        from xpseq.data.cmudict import word_tokens

        from .text import fold

        return sorted({c for c in word_tokens(fold(word)) if c not in self.src_vocab})

    def lexicon(self, stress: bool | None = None) -> dict[str, Any]:
        """The CMU dictionary, read once: word -> pronunciations (with stress digits as the
        model's when ``stress`` is None)."""
        return self._read_lexicon(self._stress(stress, "lexicon"))

    def _read_lexicon(self, stress: bool) -> dict[str, Any]:
        """The CMU dictionary with or without its stress digits, read once (unchecked
        against the model: the homograph rule reads the stressed one for any model)."""
        if stress not in self._lexicons:
            from xpseq.data.cmudict import read_cmudict

            self._lexicons[stress] = read_cmudict(stress=stress)
        return self._lexicons[stress]

    def _for(self, stress: bool) -> G2P:
        """The model that answers: this one, or for ``stress=False`` the stress-free model
        that ships beside a stressed shipped model."""
        if stress or not self._plain_paths:
            return self
        if self._plain is None:
            self._plain = G2P(self._plain_paths, backend=self.backend,
                              precision=self.precision)
        return self._plain

    def _stress(self, stress: Any, caller: str) -> bool:
        """``stress`` checked against the model: None is the model's own; True needs a
        model that predicts stress digits."""
        if stress is None:
            return self.stress
        if not isinstance(stress, bool):
            raise TypeError(f"{caller}: stress must be True, False or None, got "
                            f"{type(stress).__name__}")
        if stress and not self.stress:
            raise ValueError(f"{caller}: stress=True, but the model "
                             f"({', '.join(pathlib.Path(p).name for p in self.paths)}) was "
                             "trained with stress removed, so it has no stress digits to "
                             "give; pass "
                             "stress=False (or None), or use a model trained with --stress")
        return stress

    def pronounce(self, words: Iterable[str], *, beam: int = 1, n_best: int = 1,
                  lookup: bool = False, stress: bool | None = None) -> list[Any]:
        """The phones of each word, in the order of ``words``.

        Parameters
        ----------
        words : iterable of str
            The words: a list, a tuple, a generator ... (not one str: ``["cat"]``, not
            ``"cat"``). Each has at most :data:`MAX_WORD_LENGTH` characters once its
            surrounding whitespace is removed.
        beam : int
            Beam size, at most :data:`xpseq.search.MAX_BEAM` (1: greedy search).
        n_best : int
            Pronunciations per word (``<= beam``).
        lookup : bool
            Answer the words of the CMU dictionary from it (its pronunciations, in the
            dictionary's order) and the others from the model.
        stress : bool or None
            Give the vowels' stress digits (``AH0``, ``OW1``: 0 none, 1 primary, 2
            secondary), as the CMU dictionary writes them; ``False`` removes them
            (``AH``, ``OW``; n-best entries that become the same are given once);
            ``None`` (the default) as the model predicts: with stress for the shipped
            model. ``True`` with a model trained with stress removed is a ``ValueError``.

        Returns
        -------
        list
            With ``n_best == 1`` a list of phone lists (``list[list[str]]``), one per
            word; otherwise a list of ``n_best`` phone lists per word
            (``list[list[list[str]]]``, best first; from the dictionary, as many as it
            has, at most ``n_best``; an empty word: one empty list).

        Raises
        ------
        TypeError
            ``words`` is one str, not iterable, or holds an item that is not a str (the
            error names its index and type); nothing is decoded then.
        ValueError
            A word longer than :data:`MAX_WORD_LENGTH` (the error names its index and
            length), or a bad ``beam`` / ``n_best``; nothing is decoded then.

        Notes
        -----
        All the words are read and checked before any is decoded; :meth:`pronounce_iter`
        answers an iterable of any length chunk by chunk instead.
        """
        return self._pronounce(words, beam, n_best, lookup, stress)

    def _pronounce(self, words: Any, beam: Any, n_best: Any, lookup: bool,
                   stress: Any = None) -> list[Any]:
        """:meth:`pronounce`, called by it or by :func:`pronounce`: a warning points at
        the caller of either."""
        from xpseq.search import options_for

        options = options_for(beam, n_best, caller="pronounce")
        stress = self._stress(stress, "pronounce")
        listed = [_checked(i, word, "pronounce")
                  for i, word in enumerate(_iterable(words, "pronounce"))]
        return self._for(stress)._answer(listed, options, n_best, lookup, stress,
                                         stacklevel=4)

    def pronounce_iter(self, words: Iterable[str], *, beam: int = 1, n_best: int = 1,
                       lookup: bool = False, stress: bool | None = None,
                       chunk: int = CHUNK) -> Iterator[Any]:
        """The phones of each word, one answer at a time, in the order of ``words``.

        What :meth:`pronounce` returns as a list, yielded one word at a time:
        ``words`` is read ``chunk`` words at a time, each chunk decoded together and its
        answers yielded before the next chunk is read, so that a generator of any
        length (the lines of a large file) is answered with memory that does not grow
        with it, and the first answers come before the last words are read.

        Parameters
        ----------
        words : iterable of str
            As for :meth:`pronounce` (a generator is read lazily: at most ``chunk``
            words ahead of the answers).
        beam, n_best, lookup, stress : as for :meth:`pronounce`
        chunk : int
            Words decoded together (default :data:`CHUNK`, 512): more is faster per
            word, up to a few hundred, and holds more words at once.

        Yields
        ------
        list
            Per word, what :meth:`pronounce` has in its list: a phone list
            (``list[str]``), or with ``n_best > 1`` a list of phone lists.

        Raises
        ------
        TypeError, ValueError
            ``words`` not an iterable of str, a bad ``beam`` / ``n_best`` / ``chunk``:
            when this method is called. An item that is not a str, or a word longer than
            :data:`MAX_WORD_LENGTH`: when its chunk is read (the answers of the chunks
            before it have been yielded by then), naming its index.
        """
        from xpseq.search import options_for

        options = options_for(beam, n_best, caller="pronounce_iter")
        stress = self._stress(stress, "pronounce_iter")
        if not checks.is_int(chunk) or chunk < 1:
            raise ValueError(f"pronounce_iter: chunk must be a positive int, got {chunk!r}")
        items = _iterable(words, "pronounce_iter")
        model = self._for(stress)
        if lookup:
            model.lexicon(stress)           # its errors now, not at the first answer
        return model._answers(items, options, n_best, lookup, stress, chunk)

    def phonemize(self, text: str, *, lookup: bool = True, stress: bool | None = None,
                  beam: int = 1) -> list[str]:
        """The phones of running ``text``, in order, as g2p_en gives them.

        The text is read as :func:`xpseq.g2p.text.normalize` says (numbers, currency,
        percentages, dates and times spelled out; accents removed; apostrophes and
        hyphens kept inside words); each word is answered from the CMU dictionary if it
        has it (its first pronunciation; ``lookup=False`` asks the model for every word),
        a hyphenated word it lacks part by part (``x-wing``: ``x`` then ``wing``), an
        abbreviation it lacks letter by letter, and any other word by the model. A
        dictionary word spelled like another that differs by stress (*the* ˈrecord, *to*
        reˈcord) is chosen by the word before it (:mod:`xpseq.g2p.homographs`).

        Parameters
        ----------
        text : str
            Running text, any length (decoded together: see :func:`phonemize_lines`
            for many lines).
        lookup : bool
            Dictionary words from the dictionary (default), or every word from the model.
        stress : bool or None
            As for :meth:`pronounce`.
        beam : int
            Beam size of the model's search (1: greedy).

        Returns
        -------
        list of str
            Phones; ``" "`` between two words, and around a punctuation mark, which is
            itself a token (``","``, ``"?"``, ``"..."``). A word none of whose characters
            the model knows (another script) is left out, with an
            :class:`UnknownCharacterWarning`.

        Raises
        ------
        TypeError
            ``text`` is not a str.
        ValueError
            A word of more than :data:`MAX_WORD_LENGTH` characters, a bad ``beam``.
        ModuleNotFoundError
            num2words (for numbers) or the dictionary's package (for ``lookup``) is not
            installed: ``pip install "xpseq[g2p]"``.
        """
        [phones] = self._phonemize([text], lookup, stress, beam, "phonemize")
        return phones

    def phonemize_lines(self, lines: Iterable[str], *, lookup: bool = True,
                        stress: bool | None = None, beam: int = 1) -> list[list[str]]:
        """:meth:`phonemize` of each of ``lines`` (texts), their words decoded together:
        one list of tokens per line."""
        return self._phonemize(_iterable(lines, "phonemize_lines"), lookup, stress, beam,
                               "phonemize_lines")

    def _phonemize(self, texts: Iterable[Any], lookup: bool, stress: Any, beam: Any,
                   caller: str) -> list[list[str]]:
        from xpseq.search import options_for

        from . import homographs
        from .text import normalize

        options = options_for(beam, 1, caller=caller)
        stress = self._stress(stress, caller)
        if self._for(stress) is not self:
            return self._for(stress)._phonemize(texts, lookup, stress, beam, caller)
        lexicon = self.lexicon(stress) if lookup else {}
        lines = []
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"{caller}: text must be a str, got {type(text).__name__}")
            lines.append(normalize(text))
        asked: dict[str, list[str] | None] = {}      # the model's words, each once

        def parts(token: str) -> list[str]:
            """What to pronounce for a word: itself, or its parts or letters."""
            if token in lexicon or not lookup:
                return [token]
            if "-" in token.strip("-"):
                return [p for part in token.split("-") if part for p in parts(part)]
            if token.endswith(".") and len(token) > 2:           # n.b.: the letters n. b.
                return [c + "." for c in token if c != "."]
            return [token]

        words = {t: parts(t) for line in lines for t in line if _is_word(t)}
        for token, pieces in words.items():
            for piece in pieces:
                if piece not in lexicon:
                    if len(piece) > MAX_WORD_LENGTH:
                        raise ValueError(f"{caller}: the word {piece[:20]!r}... has "
                                         f"{len(piece)} characters; a word may have at "
                                         f"most {MAX_WORD_LENGTH}")
                    asked[piece] = None
        found = self._answer(list(asked), options, 1, False, stress, stacklevel=4)
        asked.update(zip(asked, found))
        stressed = self._read_lexicon(True) if lookup else {}   # homographs: digits kept

        def said(token: str, previous: str | None) -> list[str]:
            if token in lexicon:
                choice = homographs.choose(stressed[token], previous)
                if choice is not None:
                    return [p if stress else p.rstrip("012") for p in stressed[token][choice]]
            return [p for piece in words[token] for p in (
                lexicon[piece][0] if piece in lexicon else asked[piece] or [])]

        out = []
        for line in lines:
            tokens: list[str] = []
            previous = None                 # the word before, None after punctuation
            for token in line:
                if _is_word(token):
                    phones, previous = said(token, previous), token
                else:
                    phones, previous = [token], None
                if phones:
                    tokens += ([" "] if tokens else []) + list(phones)
            out.append(tokens)
        return out

    def _answers(self, items: Iterator[Any], options: Any, n_best: int, lookup: bool,
                 stress: bool, chunk: int) -> Iterator[Any]:
        """:meth:`pronounce_iter`'s generator: ``chunk`` checked words, their answers."""
        start = 0
        while True:
            words = [_checked(i, word, "pronounce_iter")
                     for i, word in enumerate(itertools.islice(items, chunk), start)]
            if not words:
                return
            start += len(words)
            yield from self._answer(words, options, n_best, lookup, stress, stacklevel=3)

    def _answer(self, words: list[str], options: Any, n_best: int, lookup: bool,
                stress: bool, *, stacklevel: int) -> list[Any]:
        """The answers to checked ``words`` (decoded together), as :meth:`pronounce`;
        a warning points ``stacklevel`` frames up (the caller of ``pronounce``, the
        reader of ``pronounce_iter``)."""
        from xpseq.data.cmudict import word_tokens

        from .text import fold

        answers: list[Any] = [None] * len(words)
        todo = []
        lexicon = self.lexicon(stress) if lookup else {}
        for i, word in enumerate(words):
            key = fold(word).strip()
            if key in lexicon:
                answers[i] = [list(p) for p in lexicon[key][:n_best]]
                continue
            characters = word_tokens(key)
            tokens = [c for c in characters if c in self.src_vocab]
            if len(tokens) < len(characters):
                unknown = sorted(set(characters) - set(tokens))
                shown = ", ".join(map(repr, unknown))
                warnings.warn(UnknownCharacterWarning(
                    f"{word.strip()!r}: the model knows no {shown}; answered from the "
                    "other characters", word=word.strip(), characters=unknown),
                    stacklevel=stacklevel)
            if tokens:
                todo.append((i, tokens))
            else:
                answers[i] = [[]]
        for (i, _), hyps in zip(todo, self._decode([t for _, t in todo], options)):
            if self.stress and not stress:      # the digits removed, repeats given once
                hyps = [list(h) for h in dict.fromkeys(
                    tuple(p.rstrip("012") for p in h) for h in hyps)]
            answers[i] = [list(h) for h in hyps]
        return [a[0] for a in answers] if n_best == 1 else answers

    def _decode(self, tokens: list[list[str]], options: Any) -> list[list[list[str]]]:
        """The n-best phone lists of each of ``tokens`` (character lists, all known to the
        model), decoded together.

        Words of the same length bucket (8 characters, with the ``</s>`` the encoder
        reads) are decoded together, so that a chunk's long words do not make its short
        ones pad to their length (a search costs its batch's longest source). On a
        backend that compiles its search (JAX: one program per batch shape) each bucket
        is decoded in batches of :data:`_PADDED_SIZES`' largest, and its remainder padded
        to the smallest size there that holds it, with copies of its shortest word whose
        answers are dropped: chunks of every size then need a handful of programs (batch
        sizes 16, 64 and 256 per length bucket), not one each."""
        from xpseq.search import translate

        buckets: dict[int, list[int]] = {}
        for i, word in enumerate(tokens):
            buckets.setdefault(len(word) // 8, []).append(i)
        answers: list[Any] = [None] * len(tokens)
        with backends.blas_threads():           # (the caller's threads are restored)
            for _, where in sorted(buckets.items()):
                asked = [tokens[i] for i in where]
                if self.compiles_programs:
                    full, rest = divmod(len(asked), _PADDED_SIZES[-1])
                    size = full * _PADDED_SIZES[-1] + (
                        next(s for s in _PADDED_SIZES if s >= rest) if rest else 0)
                    asked += [min(asked, key=len)] * (size - len(asked))
                results = translate(self.decoder, asked, options,
                                    batch_size=_PADDED_SIZES[-1])
                for i, result in zip(where, results):
                    answers[i] = [list(h) for h in result["n_best"]]
        return answers


def _is_word(token: str) -> bool:
    """Whether a token of :func:`xpseq.g2p.text.normalize` is a word (not punctuation)."""
    return any(c.isalpha() for c in token)


def _iterable(words: Any, caller: str) -> Iterator[Any]:
    """An iterator over ``words`` if it is an iterable of words (not one str); a
    TypeError otherwise."""
    if isinstance(words, (str, bytes)):
        raise TypeError(f"{caller}: words must be a sequence of str (a list of words such "
                        f"as ['cat'], not one {type(words).__name__})")
    try:
        return iter(words)
    except TypeError:
        raise TypeError(f"{caller}: words must be an iterable of str (a list, a tuple, a "
                        f"generator ...), got {type(words).__name__}") from None


def _checked(index: int, word: Any, caller: str) -> str:
    """``word`` (item ``index`` of ``words``) if it is a str of at most
    :data:`MAX_WORD_LENGTH` characters, surrounding whitespace removed."""
    if not isinstance(word, str):
        raise TypeError(f"{caller}: words[{index}] must be a str, got "
                        f"{type(word).__name__}")
    length = len(word.strip())
    if length > MAX_WORD_LENGTH:
        raise ValueError(f"{caller}: words[{index}] has {length} characters; a word may "
                         f"have at most {MAX_WORD_LENGTH} (xpseq.g2p.MAX_WORD_LENGTH)")
    return word


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
