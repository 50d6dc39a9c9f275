"""Subword tokenizers (BPE and unigram) with Hugging Face ``tokenizers``: trained, stored
as text, split and joined.

``xpseq train --tokens bpe`` (or ``unigram``, per side: ``word,bpe``) trains one tokenizer
per subword side on the training split's text (never dev or test), with ``--vocab-size``
pieces at most (:data:`DEFAULT_VOCAB_SIZE` by default). Why this library: a trained
tokenizer serialises to one JSON string (``Tokenizer.to_str`` / ``Tokenizer.from_str``)
that the checkpoint's metadata and the export's ``model.json`` hold with no extra file; it
trains in memory from an iterator (``train_from_iterator``); it offers both BPE and
unigram; and its ``Metaspace`` pre-tokenizer and decoder turn the pieces back into the
text exactly (a piece that starts a word begins with ``"▁"``, U+2581, so
``["▁Sa", "ve", "▁file"]`` is ``"Save file"``).

The text is split as char mode splits it: at whitespace, runs of it one boundary, none at
either end, no Unicode normalisation. What the tokenizer cannot piece together
(characters not in the training text) is a piece the model's vocabulary lacks, read as
``"<unk>"``. A literal ``"▁"`` in the text is the
tokenizer's word boundary, read as a space (as SentencePiece reads it).

``tokenizers`` is imported only here, and only when a subword side is trained or used;
without it, :func:`train` and :func:`load` raise ImportError with one line that names the
package and how to install it.

>>> from xpseq.data import subword
>>> text = subword.train(["the cat sat", "the cat ran"] * 20, "bpe", 30)
>>> pieces = subword.load(text).split("the cat sat")
>>> subword.load(text).join(pieces)
'the cat sat'
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from xpseq.io.install import install_hint

from .vocab import UNK

__all__ = ["SUBWORD_MODES", "DEFAULT_VOCAB_SIZE", "VOCAB_SIZE_RANGE", "MISSING",
           "check_vocab_size", "train", "load", "Subword"]

#: The subword tokenisations of a side.
SUBWORD_MODES: tuple[str, ...] = ("bpe", "unigram")
#: Pieces per side when ``--vocab-size`` is not given.
DEFAULT_VOCAB_SIZE = 1000
#: The smallest and largest ``--vocab-size``.
VOCAB_SIZE_RANGE = (16, 1_000_000)
#: The one line that says the package is missing and how to install it.
MISSING = ("bpe and unigram tokens need the 'tokenizers' package (Hugging Face): "
           + install_hint("subword"))


def _library() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise ImportError(MISSING) from None
    return tokenizers


def check_vocab_size(value: Any, option: str = "vocab_size") -> int:
    """``value`` as a number of pieces per side.

    Parameters
    ----------
    value : int
        A whole number in :data:`VOCAB_SIZE_RANGE` (a NumPy integer is read as one).
    option : str
        Names the option in the error (``"--vocab-size"`` on the command).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        Anything else (the message names ``option`` and the value).

    Examples
    --------
    >>> check_vocab_size(500)
    500
    """
    import numbers

    low, high = VOCAB_SIZE_RANGE
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
            or not low <= int(value) <= high):
        raise ValueError(f"{option} must be a whole number from {low} to {high}, "
                         f"got {value!r}")
    return int(value)


def _normal(text: str) -> str:
    return " ".join(text.split())


def train(texts: Iterable[str], mode: str, vocab_size: int = DEFAULT_VOCAB_SIZE) -> str:
    """A ``mode`` tokenizer trained on ``texts``, as its JSON text.

    Parameters
    ----------
    texts : iterable of str
        The training split's sentences of one side.
    mode : ``"bpe"`` or ``"unigram"``
        The kind of tokenizer.
    vocab_size : int
        The most pieces it has, ``"<unk>"`` included (:func:`check_vocab_size`).

    Returns
    -------
    str
        ``Tokenizer.to_str()``: what :func:`load` reads.

    Raises
    ------
    ImportError
        ``tokenizers`` is not installed (:data:`MISSING`).
    ValueError
        An unknown ``mode`` or a bad ``vocab_size``.

    Examples
    --------
    >>> text = train(["a b", "a c"], "unigram", 16)
    >>> load(text).join(load(text).split(" a  b "))
    'a b'
    """
    if mode not in SUBWORD_MODES:
        raise ValueError(f"train: mode must be 'bpe' or 'unigram', got {mode!r}")
    vocab_size = check_vocab_size(vocab_size)
    lib = _library()
    from tokenizers import decoders, models, pre_tokenizers, trainers

    if mode == "bpe":
        tokenizer = lib.Tokenizer(models.BPE(unk_token=UNK))
        trainer: Any = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[UNK],
                                           show_progress=False)
    else:
        tokenizer = lib.Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=[UNK],
                                          unk_token=UNK, show_progress=False)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator((_normal(t) for t in texts), trainer=trainer)
    return tokenizer.to_str()


class Subword:
    """A trained tokenizer: :meth:`split` text into its pieces, :meth:`join` them back.
    Made by :func:`load`."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def split(self, text: str) -> list[str]:
        """The pieces of ``text`` (its whitespace normalised first)."""
        normal = _normal(text)
        if not normal:
            return []
        return list(self.tokenizer.encode(normal, add_special_tokens=False).tokens)

    def join(self, pieces: Sequence[str]) -> str:
        """``pieces`` as text (the Metaspace decoder; single spaces, none at either end)."""
        return _normal(self.tokenizer.decoder.decode(list(pieces))) if pieces else ""


_LOADED: dict[str, Subword] = {}


def load(text: str, where: str = "tokenizer") -> Subword:
    """The tokenizer whose JSON text (:func:`train`) is ``text``; the same object for the
    same text (a few are kept).

    Parameters
    ----------
    text : str
        ``Tokenizer.to_str()`` of a trained tokenizer.
    where : str
        Names the model in the error.

    Returns
    -------
    Subword

    Raises
    ------
    ImportError
        ``tokenizers`` is not installed (:data:`MISSING`).
    ValueError
        ``text`` is not a tokenizer's JSON text.

    Examples
    --------
    >>> load(train(["a b"] * 3, "bpe", 16)).join(["▁a", "▁b"])
    'a b'
    """
    if not isinstance(text, str):
        raise ValueError(f"{where}: a subword side's tokenizer must be its JSON text, got "
                         f"{type(text).__name__}")
    if text in _LOADED:
        return _LOADED[text]
    lib = _library()
    try:
        loaded = Subword(lib.Tokenizer.from_str(text))
    except Exception as err:       # the library's own error type: one line, naming where
        raise ValueError(f"{where}: not a tokenizer's JSON text "
                         f"({str(err).splitlines()[0] if str(err) else type(err).__name__})"
                         ) from None
    if len(_LOADED) >= 8:
        _LOADED.pop(next(iter(_LOADED)))
    _LOADED[text] = loaded
    return loaded
