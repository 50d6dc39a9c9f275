"""The G2P model: a :class:`~xpseq.search.Decoder` that reads a word's characters and
writes its phones, with the CMU dictionary beside it (see :mod:`xpseq.g2p`)."""

from __future__ import annotations

import itertools
import json
import pathlib
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Sequence, cast

from xpseq import backends
from xpseq.core import values
from xpseq.core.precision import Policy
from xpseq.data.cmudict import word_tokens
from xpseq.export.decoders import load_decoder
from xpseq.io.reading import iterate
from xpseq.search import SearchOptions, options_for, translate
from xpseq.search.decoder import Decoder

from .ipa import text_to_ipa, to_ipa
from .lexicon import Entries, Lexicon
from .notes import emit
from .reading import read_texts
from .text import drop_format, fold

__all__ = ["G2P", "shipped", "UnknownCharacterWarning", "LongWordWarning",
           "NotAWordWarning", "MAX_WORD_LENGTH", "CHUNK", "MODEL_DIR"]

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


class UnknownCharacterWarning(UserWarning):
    """A word held characters the model never saw; they were left out.

    ``word`` is the word (surrounding whitespace removed) and ``characters`` the sorted
    list of the characters left out."""

    def __init__(self, message: str, *, word: str = "", characters: Sequence[str] = ()):
        super().__init__(message)
        self.word = word
        self.characters = list(characters)


class LongWordWarning(UserWarning):
    """A word had more than :data:`MAX_WORD_LENGTH` characters: it was answered with no
    phones (in running text: left out).

    ``word`` is the word (surrounding whitespace removed) and ``length`` its length."""

    def __init__(self, message: str, *, word: str = "", length: int = 0):
        super().__init__(message)
        self.word = word
        self.length = length


class NotAWordWarning(UserWarning):
    """A "word" had no letter and no digit (punctuation or symbols only: ``-``, ``...``,
    ``—``): it was answered with no phones, never with phones the model makes up for it.

    ``word`` is the word (surrounding whitespace and format characters removed)."""

    def __init__(self, message: str, *, word: str = ""):
        super().__init__(message)
        self.word = word


def _wordlike(key: str) -> bool:
    """Whether ``key`` (a word as the model reads it, :func:`~xpseq.g2p.text.fold`:
    ``"™"`` is ``"tm"``) holds a letter or a digit (a character of Unicode category L* or
    N*), which a word needs to be pronounced: ``"4th"`` and ``"r2d2"`` are words; ``"-"``,
    ``"..."``, ``"—"`` and ``"'"`` are not (:class:`NotAWordWarning`).

    >>> _wordlike("r2d2"), _wordlike("..."), _wordlike("")
    (True, False, False)
    """
    return any(unicodedata.category(c)[0] in "LN" for c in key)


def shipped() -> dict[str, Any]:
    """The shipped model's manifest.

    Returns
    -------
    dict
        ``files`` (its checkpoints, an ensemble when several), ``stress``, and the
        ``scores`` measured on the test split with the command that measured them;
        ``no_stress``, when present, is the stress-free model that ships beside a
        stressed one and answers ``stress=False`` (its files and scores).

    Raises
    ------
    FileNotFoundError
        The manifest is missing (a broken installation).

    Examples
    --------
    >>> from xpseq import g2p
    >>> g2p.shipped()["stress"]
    True
    """
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
        shipped model's scores both ways). A :class:`~xpseq.search.Decoder` decodes in its
        own precision: leave this ``None``.

    Raises
    ------
    FileNotFoundError
        A checkpoint or export that does not exist.
    ValueError
        No checkpoint named, a model that is not a G2P model (trained for another task),
        an ensemble whose members differ, or a ``precision`` the backend cannot give.

    Examples
    --------
    >>> from xpseq import g2p
    >>> model = g2p.G2P(backend="numpy")               # the shipped model
    >>> model.pronounce(["hello"], ipa=True)
    ['həˈloʊ']
    >>> model.unknown_characters("naïve∑")
    ['∑']
    """

    def __init__(self, model: str | pathlib.Path | Sequence[str | pathlib.Path] | Decoder
                 | None = None, *, backend: str | backends.Backend | None = None,
                 precision: Policy | str | None = None):
        #: The stress-free model that answers ``stress=False`` beside a stressed shipped
        #: one (the manifest's ``no_stress`` entry), loaded when first asked.
        self._plain_paths: list[pathlib.Path] = []
        self._plain: G2P | None = None
        self._backend = backend
        #: The CMU dictionary, read when first asked (shared with the stress-free model).
        self.dictionary = Lexicon()
        if isinstance(model, Decoder):
            if precision is not None:
                raise ValueError("G2P: a Decoder decodes in its own precision "
                                 f"({model.precision.name}); pass precision=None")
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
            what = " and ".join(map(str, paths)) or repr(decoder)
            raise ValueError(f"G2P: {what} is not a G2P model (it was not trained by xpseq "
                             "train --task g2p)")
        self.decoder = decoder
        self.paths = paths
        self.metadata = dict(meta)
        self.stress = bool(meta.get("stress"))
        self.src_vocab, self.tgt_vocab = decoder.src_vocab, decoder.tgt_vocab

    @property
    def precision(self) -> Policy:
        """The precision it decodes in (an export's: its own dtype, ``Policy(None)``)."""
        return self.decoder.precision

    def unknown_characters(self, word: str) -> list[str]:
        """The characters of ``word`` (as the model reads it: lower-cased, accents
        removed) that the model never saw, which :meth:`pronounce` leaves out.

        Parameters
        ----------
        word : str
            A word.

        Returns
        -------
        list of str
            The unknown characters, sorted, each once.

        Raises
        ------
        TypeError
            ``word`` is not a str.

        Examples
        --------
        >>> from xpseq import g2p
        >>> g2p.load(backend="numpy").unknown_characters("Zoë!")
        ['!']
        """
        if not isinstance(word, str):
            raise TypeError(f"unknown_characters: word must be a str, got "
                            f"{type(word).__name__}")
        return sorted({c for c in word_tokens(fold(word)) if c not in self.src_vocab})

    def lexicon(self, stress: bool | None = None) -> Entries:
        """The CMU dictionary, read once: word -> pronunciations.

        Parameters
        ----------
        stress : bool or None
            With the stress digits (``AH0``) or without; ``None``: as the model's.

        Returns
        -------
        dict
            Lower-case word -> its pronunciations in the dictionary's order, each a tuple
            of phones.

        Raises
        ------
        ValueError
            ``stress=True`` with a model trained without stress.
        FileNotFoundError
            The dictionary's data file is missing (a broken installation).

        Examples
        --------
        >>> from xpseq import g2p
        >>> g2p.load(backend="numpy").lexicon()["read"]
        [('R', 'EH1', 'D'), ('R', 'IY1', 'D')]
        """
        return self.dictionary.entries(self._stress(stress, "lexicon"))

    def _for(self, stress: bool) -> G2P:
        """The model that answers: this one, or for ``stress=False`` the stress-free model
        that ships beside a stressed shipped model."""
        if stress or not self._plain_paths:
            return self
        if self._plain is None:
            self._plain = G2P(self._plain_paths, backend=self._backend,
                              precision=self.precision)
            self._plain.dictionary = self.dictionary
        return self._plain

    def _stress(self, stress: Any, caller: str) -> bool:
        """``stress`` checked against the model: None is the model's own; True needs a
        model that predicts stress digits."""
        given = values.flag(caller, "stress", stress, optional=True)
        if given is None:
            return bool(self.stress)
        if given and not self.stress:
            raise ValueError(f"{caller}: stress=True, but the model "
                             f"({', '.join(pathlib.Path(p).name for p in self.paths)}) was "
                             "trained with stress removed, so it has no stress digits to "
                             "give; pass "
                             "stress=False (or None), or use a model trained with --stress")
        return given

    def pronounce(self, words: Iterable[str], *, beam: int = 1, n_best: int = 1,
                  lookup: bool = True, stress: bool | None = None, ipa: bool = False,
                  notes: Callable[[Warning], object] | None = None) -> list[Any]:
        """The phones of each word, in the order of ``words``.

        Parameters
        ----------
        words : iterable of str
            The words: a list, a tuple, a generator ... (not one str: ``["cat"]``, not
            ``"cat"``). Format characters (:func:`xpseq.g2p.text.drop_format`: a soft
            hyphen, a zero-width space or joiner, a byte-order mark) are dropped without
            a note (``"pro\\u00adnounce"`` is ``"pronounce"``). A word of more than
            :data:`MAX_WORD_LENGTH` characters (its surrounding whitespace removed) is
            answered with no phones and a :class:`LongWordWarning`; a word with no
            letter and no digit (``"-"``, ``"..."``, ``"—"``) with no phones and a
            :class:`NotAWordWarning`; an empty word with no phones and no warning.
        beam : int
            Beam size, at most :data:`xpseq.search.MAX_BEAM` (1: greedy search).
        n_best : int
            Pronunciations per word (``<= beam``).
        lookup : bool
            Answer the words of the CMU dictionary from it (its pronunciations, in the
            dictionary's order; the default, as :meth:`phonemize` does) and the others
            from the model; ``False``: every word from the model.
        stress : bool or None
            Give the vowels' stress digits (``AH0``, ``OW1``: 0 none, 1 primary, 2
            secondary), as the CMU dictionary writes them; ``False`` removes them
            (``AH``, ``OW``; n-best entries that become the same are given once);
            ``None`` (the default) as the model predicts: with stress for the shipped
            model. ``True`` with a model trained with stress removed is a ``ValueError``.
        ipa : bool
            Answer each pronunciation as one IPA string (``"həˈloʊ"``,
            :func:`xpseq.g2p.ipa.to_ipa`) instead of ARPAbet phones; ``stress=False``
            leaves the stress marks out.
        notes : callable, optional
            Called with each note (a ``Warning``: :class:`UnknownCharacterWarning`,
            :class:`LongWordWarning`, :class:`NotAWordWarning`) instead of raising it as
            a warning (:mod:`xpseq.g2p.notes`); ``None`` (the default): warnings.

        Returns
        -------
        list
            With ``n_best == 1 a list of phone lists (``list[list[str]]``), one per
            word; otherwise a list of ``n_best`` phone lists per word
            (``list[list[list[str]]]``, best first; from the dictionary, as many as it
            has, at most ``n_best``; an empty or over-long word, or one with no letter
            and no digit: one empty list). With
            ``ipa=True`` a string stands for each phone list.

        Raises
        ------
        TypeError
            ``words`` is one str, not iterable, or holds an item that is not a str (the
            error names its index and type); nothing is decoded then.
        ValueError
            A bad ``beam`` / ``n_best``; nothing is decoded then.

        Notes
        -----
        All the words are read and checked before any is decoded; :meth:`pronounce_iter`
        answers an iterable of any length chunk by chunk instead.

        Examples
        --------
        >>> from xpseq import g2p
        >>> model = g2p.load(backend="numpy")
        >>> model.pronounce(["hello", "zorblatt"])          # the dictionary, the model
        [['HH', 'AH0', 'L', 'OW1'], ['Z', 'AO1', 'R', 'B', 'L', 'AH0', 'T']]
        >>> model.pronounce(["hello"], lookup=False, ipa=True)
        ['ˈhɛloʊ']
        """
        options = options_for(beam, n_best, caller="pronounce")
        lookup = values.flag("pronounce", "lookup", lookup)
        stress, marks = _ipa_stress(stress, ipa, "pronounce")
        stress = self._stress(stress, "pronounce")
        listed = [_checked(i, word, "pronounce")
                  for i, word in enumerate(_iterable(words, "pronounce"))]
        answers, found = self._for(stress).answer(listed, options, n_best, lookup, stress)
        emit(found, notes)
        return [_in_ipa(a, n_best, marks) for a in answers] if ipa else answers

    def pronounce_iter(self, words: Iterable[str], *, beam: int = 1, n_best: int = 1,
                       lookup: bool = True, stress: bool | None = None,
                       chunk: int = CHUNK, ipa: bool = False,
                       notes: Callable[[Warning], object] | None = None) -> Iterator[Any]:
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
        beam, n_best, lookup, stress, ipa, notes : as for :meth:`pronounce`
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
            when this method is called. An item that is not a str: when its chunk is read
            (the answers of the chunks before it have been yielded by then), naming its
            index.

        Examples
        --------
        >>> from xpseq import g2p
        >>> answers = g2p.load(backend="numpy").pronounce_iter(iter(["cat", "dog"]), ipa=True)
        >>> next(answers), next(answers)
        ('ˈkæt', 'ˈdɔɡ')
        """
        options = options_for(beam, n_best, caller="pronounce_iter")
        lookup = values.flag("pronounce_iter", "lookup", lookup)
        stress, marks = _ipa_stress(stress, ipa, "pronounce_iter")
        stress = self._stress(stress, "pronounce_iter")
        chunk = values.integer("pronounce_iter", "chunk", chunk, low=1)
        items = _iterable(words, "pronounce_iter")
        model = self._for(stress)
        if lookup:
            model.lexicon(stress)           # its errors now, not at the first answer
        answers = model._answers(items, options, n_best, lookup, stress, chunk, notes)
        return (_in_ipa(a, n_best, marks) for a in answers) if ipa else answers

    def phonemize(self, text: str, *, lookup: bool = True, stress: bool | None = None,
                  beam: int = 1, ipa: bool = False,
                  notes: Callable[[Warning], object] | None = None) -> list[str]:
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
        ipa : bool
            Each word as one IPA string instead of its ARPAbet phones (as for
            :meth:`pronounce`).
        notes : callable, optional
            As for :meth:`pronounce` (a :class:`~xpseq.g2p.text.ControlCharacterWarning`
            too).

        Returns
        -------
        list of str
            Phones (with ``ipa=True``, a string per word); ``" "`` between two words, and
            around a punctuation mark, which is itself a token (``","``, ``"?"``,
            ``"..."``), which has no phones. A word none of whose characters
            the model knows (another script) is left out, with an
            :class:`UnknownCharacterWarning`, and so is a word of more than
            :data:`MAX_WORD_LENGTH` characters, with a :class:`LongWordWarning`. Format
            characters (a soft hyphen, a zero-width space: :func:`xpseq.g2p.text.drop_format`)
            are dropped before the words are split, and a CRLF line end is a line end,
            both without a note.

        Raises
        ------
        TypeError
            ``text`` is not a str.
        ValueError
            A bad ``beam``.
        ModuleNotFoundError
            num2words (for numbers) or the dictionary's package (for ``lookup``) is not
            installed (both are xpseq's own dependencies).

        Examples
        --------
        >>> from xpseq import g2p
        >>> " ".join(g2p.load(backend="numpy").phonemize("Dr. Smith, 9 a.m.", stress=False))
        'D AA K T ER   S M IH TH   ,   N AY N   EY EH M   .'
        """
        [phones] = self._phonemize([text], lookup, stress, beam, ipa, "phonemize", notes)
        return phones

    def phonemize_lines(self, lines: Iterable[str], *, lookup: bool = True,
                        stress: bool | None = None, beam: int = 1, ipa: bool = False,
                        notes: Callable[[Warning], object] | None = None) -> list[list[str]]:
        """:meth:`phonemize` of each of ``lines`` (texts), their words decoded together.

        Parameters
        ----------
        lines : iterable of str
            The texts.
        lookup, stress, beam, ipa, notes : as for :meth:`phonemize`

        Returns
        -------
        list of list of str
            One list of tokens per line, as :meth:`phonemize` gives it.

        Raises
        ------
        TypeError
            ``lines`` is one str or holds something that is not a str.
        ValueError
            A bad ``beam``.

        Examples
        --------
        >>> from xpseq import g2p
        >>> g2p.load(backend="numpy").phonemize_lines(["Hi.", "Bye!"], stress=False)
        [['HH', 'AY', ' ', '.'], ['B', 'AY', ' ', '!']]
        """
        return self._phonemize(_iterable(lines, "phonemize_lines"), lookup, stress, beam,
                               ipa, "phonemize_lines", notes)

    def _phonemize(self, texts: Iterable[Any], lookup: bool, stress: Any, beam: Any,
                   ipa: Any, caller: str,
                   notes: Callable[[Warning], object] | None = None) -> list[list[str]]:
        options = options_for(beam, 1, caller=caller)
        lookup = values.flag(caller, "lookup", lookup)
        stress, marks = _ipa_stress(stress, ipa, caller)
        stress = self._stress(stress, caller)
        model = self._for(stress)
        lines, found = read_texts(model, texts, lookup=lookup, stress=stress, options=options,
                                  caller=caller)
        emit(found, notes)
        return [text_to_ipa(tokens, stress=marks) for tokens in lines] if ipa else lines

    def _answers(self, items: Iterator[Any], options: Any, n_best: int, lookup: bool,
                 stress: bool, chunk: int,
                 notes: Callable[[Warning], object] | None) -> Iterator[Any]:
        """:meth:`pronounce_iter`'s generator: ``chunk`` checked words, their answers."""
        start = 0
        while True:
            words = [_checked(i, word, "pronounce_iter")
                     for i, word in enumerate(itertools.islice(items, chunk), start)]
            if not words:
                return
            start += len(words)
            answers, found = self.answer(words, options, n_best, lookup, stress)
            emit(found, notes)              # at the reader's line
            yield from answers

    def answer(self, words: list[str], options: SearchOptions, n_best: int, lookup: bool,
               stress: bool) -> tuple[list[Any], list[Warning]]:
        """The answers to ``words`` decoded together, and the notes on them: the one place
        where the policies for a word hold, and what :meth:`pronounce` and the text front
        end (:mod:`xpseq.g2p.reading`) call.

        Format characters (:func:`xpseq.g2p.text.drop_format`: a soft hyphen, a
        zero-width space or joiner, a byte-order mark) are dropped first, without a note.
        A word over :data:`MAX_WORD_LENGTH` is answered with no phones (a
        :class:`LongWordWarning`), and so is one with no letter and no digit (a
        :class:`NotAWordWarning`: ``-``, ``...``); an empty word with no phones and no
        note. A dictionary word comes from the dictionary (with ``lookup``); characters the
        model never saw are left out (an :class:`UnknownCharacterWarning` among the
        notes). The notes are returned, not raised: the public method that was called
        raises them (:func:`xpseq.g2p.notes.emit`).

        Parameters
        ----------
        words : list of str
            The words, already checked (each a str).
        options : SearchOptions
            The model's search.
        n_best : int
            Answers per word.
        lookup : bool
            Dictionary words from the dictionary.
        stress : bool
            With the stress digits; already checked against the model.

        Returns
        -------
        answers : list
            Per word a phone list, or with ``n_best > 1`` a list of them.
        notes : list of Warning
            What the caller should raise as warnings.

        Raises
        ------
        FloatingPointError
            The model's scores are not finite (:func:`xpseq.search.translate`'s check);
            the arguments are not checked again here (the public methods check them).

        Examples
        --------
        >>> from xpseq import g2p
        >>> from xpseq.search import SearchOptions
        >>> g2p.load(backend="numpy").answer(["cat"], SearchOptions(), 1, True, True)
        ([['K', 'AE1', 'T']], [])
        """
        answers: list[Any] = [None] * len(words)
        notes: list[Warning] = []
        todo = []
        lexicon = self.dictionary.entries(stress) if lookup else {}
        for i, word in enumerate(words):
            word = drop_format(word).strip()        # (format characters: silently)
            if len(word) > MAX_WORD_LENGTH:
                notes.append(LongWordWarning(
                    f"{word[:20]!r}... has {len(word)} characters, more than "
                    f"{MAX_WORD_LENGTH} (xpseq.g2p.MAX_WORD_LENGTH); answered with no phones",
                    word=word, length=len(word)))
                answers[i] = [[]]
                continue
            key = fold(word).strip()
            if word and not _wordlike(key):
                notes.append(NotAWordWarning(
                    f"{word!r} has no letter or digit: answered with no phones", word=word))
                answers[i] = [[]]
                continue
            if key in lexicon:
                answers[i] = [list(p) for p in lexicon[key][:n_best]]
                continue
            characters = word_tokens(key)
            tokens = [c for c in characters if c in self.src_vocab]
            if len(tokens) < len(characters):
                unknown = sorted(set(characters) - set(tokens))
                shown = ", ".join(map(repr, unknown))
                then = ("answered from the other characters" if tokens else
                        "no character is left: the word is left out (no phones)")
                notes.append(UnknownCharacterWarning(
                    f"{word!r}: the model knows no {shown}; {then}",
                    word=word, characters=unknown))
            if tokens:
                todo.append((i, tokens))
            else:
                answers[i] = [[]]
        for (i, _), hyps in zip(todo, self._decode([t for _, t in todo], options)):
            if self.stress and not stress:      # the digits removed, repeats given once
                hyps = [list(h) for h in dict.fromkeys(
                    tuple(p.rstrip("012") for p in h) for h in hyps)]
            answers[i] = [list(h) for h in hyps]
        return [a[0] for a in answers] if n_best == 1 else answers, notes

    def _decode(self, tokens: list[list[str]], options: Any) -> list[list[list[str]]]:
        """The n-best phone lists of each of ``tokens`` (character lists, all known to the
        model), decoded together.

        Words of the same length bucket (8 characters, with the ``</s>`` the encoder
        reads) are decoded together, so that a chunk's long words do not make its short
        ones pad to their length (a search costs its batch's longest source); each bucket's
        batches are padded as the decoder asks (:func:`xpseq.search.translate`: on JAX,
        to a few batch sizes, each a compilation)."""
        buckets: dict[int, list[int]] = {}
        for i, word in enumerate(tokens):
            buckets.setdefault(len(word) // 8, []).append(i)
        answers: list[Any] = [None] * len(tokens)
        with backends.blas_threads():           # (the caller's threads are restored)
            for _, where in sorted(buckets.items()):
                results = translate(self.decoder, [tokens[i] for i in where], options)
                for i, result in zip(where, results):
                    answers[i] = [list(h) for h in result["n_best"]]
        return answers


def _iterable(words: Any, caller: str) -> Iterator[Any]:
    """An iterator over ``words`` if it is an iterable of words (not one str); a
    TypeError naming ``caller`` otherwise."""
    return iterate(words, f"{caller}: words", of="str",
                   example="a list of words such as ['cat']")


def _checked(index: int, word: Any, caller: str) -> str:
    """``word`` (item ``index`` of ``words``) if it is a str."""
    if not isinstance(word, str):
        raise TypeError(f"{caller}: words[{index}] must be a str, got "
                        f"{type(word).__name__}")
    return word


def _ipa_stress(stress: Any, ipa: Any, caller: str) -> tuple[Any, bool]:
    """(the stress to decode with, whether IPA stress marks are written): IPA takes the
    stress digits for its vowels (ə is AH0) even where ``stress=False`` leaves the marks
    out."""
    stress = values.flag(caller, "stress", stress, optional=True)
    if not values.flag(caller, "ipa", ipa):
        return stress, False
    return (None if stress is False else stress), stress is not False


def _in_ipa(answer: list[Any], n_best: int, marks: bool) -> Any:
    """One word's answer (a phone list, or ``n_best`` of them) in IPA strings."""
    return (to_ipa(answer, stress=marks) if n_best == 1 else
            [to_ipa(a, stress=marks) for a in answer])
