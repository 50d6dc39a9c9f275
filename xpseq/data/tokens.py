"""Text to tokens and tokens to text: the one place every door splits and joins.

A model reads and writes text the way it was trained: ``xpseq train --tokens`` (and
:func:`xpseq.data.read_parallel_tsv`'s ``tokens``) split each side of a corpus in one of
these modes, which the checkpoint stores per side (``metadata["tokens"] = [source,
target]``), and every door that reads text for a model or writes its output
(``xpseq translate``, ``evaluate``, ``heatmap``, :meth:`xpseq.Translator.translate`,
the ONNX export and its runtime) splits and joins here, in the model's modes
(:func:`of_model`):

``"word"``
    ``split``: the text split on whitespace, ``"the cat"`` -> ``["the", "cat"]``;
    ``join``: the tokens joined with single spaces.
``"char"``
    ``split``: the characters (Unicode code points, no normalisation), in order, with the
    word boundaries kept: each run of whitespace between two words is one token
    :data:`SPACE` (``"▁"``, U+2581, visible in a vocabulary file or a heatmap), and
    whitespace at either end is dropped, so ``"Save file"`` and ``" Save   file "`` are
    both ``["S", "a", "v", "e", "▁", "f", "i", "l", "e"]``. A literal ``"▁"`` in the text
    is not a space: it is the token :data:`LITERAL_SPACE` (``"\\▁"``, two characters, so
    no character of the text can be mistaken for it), and written back as ``"▁"``.
    ``join``: the tokens joined with nothing, :data:`SPACE` written as a space (runs of
    them as one, none at either end), :data:`LITERAL_SPACE` as ``"▁"``:
    ``["A", "b", "▁", "c"]`` -> ``"Ab c"``.

``"bpe"``, ``"unigram"``
    Subword pieces of a tokenizer trained on the training split's text
    (:mod:`xpseq.data.subword`, Hugging Face ``tokenizers``): ``"Save file"`` ->
    ``["▁Sa", "ve", "▁file"]``; ``join`` decodes them back (``"Save file"``). A subword
    side is a :class:`Side`: its mode and the tokenizer's JSON text, which the checkpoint
    stores beside the modes (``metadata["tokenizers"] = {"src": text or None, "tgt":
    ...}``, :func:`metadata_of`) and the export's ``model.json`` too; :func:`of_model`
    gives the sides back with their tokenizers, so every door splits and joins with them.
    :func:`train_sides` trains them.

Checkpoints written before per-side tokens store one string for both sides (``"word"``
or ``"char"``); their ``"char"`` models were trained on characters without word
boundaries, and :func:`of_model` reads that ``"char"`` as :data:`CHAR_NOSPACE`
(``"char-nospace"``: ``split`` drops all whitespace, ``join`` joins with nothing), so
they read and write text exactly as before. It is never offered by ``--tokens``:
:func:`modes` refuses it.

``join(split(text, mode), mode)`` is ``text`` with its whitespace normalised (``" ".join(
text.split())``; removed in ``"char-nospace"``); ``split(join(tokens, mode), mode) ==
tokens`` for tokens the mode can write.

>>> from xpseq.data import tokens
>>> tokens.split("Go on", "char"), tokens.join(["A", "b", "▁", "c"], "char")
(['G', 'o', '▁', 'o', 'n'], 'Ab c')
>>> tokens.modes("word,char")
('word', 'char')
>>> tokens.of_model({"task": "tsv", "tokens": "char"})     # an older checkpoint
('char-nospace', 'char-nospace')
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from . import subword
from .subword import SUBWORD_MODES

__all__ = ["MODES", "SUBWORD_MODES", "G2P_MODES", "CHAR_NOSPACE", "SPACE", "LITERAL_SPACE",
           "Side", "modes", "split", "join", "of_model", "sides", "stored", "stored_modes",
           "metadata_of", "train_sides", "text_of", "is_text_model"]

#: The tokenisations of a side that ``--tokens`` offers.
MODES: tuple[str, ...] = ("word", "char", *SUBWORD_MODES)
#: Characters without word boundaries: how a checkpoint that stores ``"tokens": "char"``
#: (one string, before per-side tokens) was trained. Read, never offered.
CHAR_NOSPACE = "char-nospace"
#: Every mode a stored model may name.
STORED_MODES: tuple[str, ...] = (*MODES, CHAR_NOSPACE)
#: What a G2P model (``xpseq train --task g2p``) reads and writes: a word's characters
#: (a word has no spaces, so no :data:`SPACE`), phones separated by spaces.
G2P_MODES = ("char", "word")
#: The char-mode token of a word boundary (a run of whitespace): U+2581.
SPACE = "\u2581"
#: The char-mode token of a literal U+2581 in the text: a backslash and U+2581.
LITERAL_SPACE = "\\" + SPACE


class Side(str):
    """A side's mode (a str: it equals ``"bpe"``) that carries its trained tokenizer's JSON
    text (``tokenizer``; ``None`` for word and char): what :func:`split` and :func:`join`
    need for a subword side. :func:`of_model` and :func:`train_sides` make them.

    Parameters
    ----------
    mode : str
        One of :data:`MODES`.
    tokenizer : str or None
        The tokenizer's JSON text (:func:`xpseq.data.subword.train`).

    Examples
    --------
    >>> Side("word") == "word"
    True
    """

    tokenizer: str | None

    def __new__(cls, mode: str, tokenizer: str | None = None) -> "Side":
        side = super().__new__(cls, mode)
        side.tokenizer = tokenizer
        return side


def _subword(mode: Any, where: str) -> subword.Subword:
    text = getattr(mode, "tokenizer", None)
    if text is None:
        raise ValueError(f"{where}: a {str(mode)!r} side needs its trained tokenizer (a Side "
                         "of xpseq.data.tokens.of_model or train_sides), got the bare mode")
    return subword.load(text, where)


def _pair(tokens: Any, where: str, accepted: tuple[str, ...]) -> tuple[str, str] | None:
    pair: Any = tokens
    if isinstance(tokens, str):
        pair = tokens.split(",") if "," in tokens else (tokens, tokens)
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or not all(isinstance(m, str) and m in accepted for m in pair)):
        return None
    return pair[0], pair[1]


def modes(tokens: Any, where: str = "tokens", *, stored: bool = False) -> tuple[str, str]:
    """``tokens`` as a ``(source, target)`` pair of modes.

    Parameters
    ----------
    tokens : str or pair
        ``"word"`` or ``"char"`` (both sides), ``"SOURCE,TARGET"`` (e.g. ``"word,char"``),
        or a ``(source, target)`` tuple or list of modes (:data:`MODES`).
    where : str
        Names the argument in the error.
    stored : bool
        Also accept :data:`CHAR_NOSPACE` (a mode a stored model names, as
        :func:`of_model` gives it), never offered to a user.

    Returns
    -------
    tuple of str
        ``(source, target)``.

    Raises
    ------
    ValueError
        Anything else (the message names ``where`` and the value).

    Examples
    --------
    >>> modes("char"), modes(["word", "char"])
    (('char', 'char'), ('word', 'char'))
    """
    pair = _pair(tokens, where, STORED_MODES if stored else MODES)
    if pair is None:
        raise ValueError(f"{where}: tokens must be 'word', 'char', 'bpe', 'unigram', or a "
                         "source and a target mode ('word,char' or a (source, target) pair), "
                         f"got {tokens!r}")
    return pair


def stored_modes(value: Any, where: str = "the model's metadata") -> tuple[str, str]:
    """The ``(source, target)`` modes a model's stored ``tokens`` entry names: one string
    for both sides (an older checkpoint: its ``"char"`` is :data:`CHAR_NOSPACE`), a
    ``[source, target]`` list (a checkpoint), or a ``{"src": ..., "tgt": ...}`` dict (an
    export's ``model.json``).

    Parameters
    ----------
    value : str, list or dict
        The stored entry.
    where : str
        Names the model in the error.

    Returns
    -------
    tuple of str
        ``(source, target)``, each one of :data:`STORED_MODES`.

    Raises
    ------
    ValueError
        An entry that names no mode or pair of modes.

    Examples
    --------
    >>> stored_modes("char"), stored_modes(["word", "char"])
    (('char-nospace', 'char-nospace'), ('word', 'char'))
    """
    if isinstance(value, str) and value in MODES:       # one string: before per-side tokens
        return (CHAR_NOSPACE, CHAR_NOSPACE) if value == "char" else (value, value)
    if isinstance(value, dict):
        value = [value.get("src"), value.get("tgt")]
    pair = (_pair(value, where, STORED_MODES)
            if isinstance(value, (list, tuple)) else None)
    if pair is None:
        raise ValueError(f"{where}: tokens must be 'word', 'char', 'bpe', 'unigram', or a "
                         "source and a target mode ('word,char' or a (source, target) pair), "
                         f"got {value!r}")
    return pair


def text_of(pair: Any) -> str:
    """The command's spelling of ``pair``: ``"char"`` for both sides alike, else
    ``"word,char"`` (:func:`modes` reads it back).

    Parameters
    ----------
    pair : str or pair
        As :func:`modes` takes it.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        As :func:`modes`.

    Examples
    --------
    >>> text_of(("char", "char")), text_of("word,char")
    ('char', 'word,char')
    """
    src, tgt = modes(pair)
    return src if src == tgt else f"{src},{tgt}"


def stored(pair: Any) -> list[str]:
    """``[source, target]``: how a checkpoint's metadata stores the modes.

    Parameters
    ----------
    pair : str or pair
        As :func:`modes` takes it.

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        As :func:`modes`.

    Examples
    --------
    >>> stored("char")
    ['char', 'char']
    """
    return list(modes(pair))


def _mode(mode: Any, where: str) -> str:
    if not isinstance(mode, str) or mode not in STORED_MODES:
        raise ValueError(f"{where}: mode must be 'word', 'char', 'bpe' or 'unigram', got "
                         f"{mode!r}")
    return mode


def _char_split(text: str) -> list[str]:
    out: list[str] = []
    for word in text.split():
        if out:
            out.append(SPACE)
        out.extend(LITERAL_SPACE if c == SPACE else c for c in word)
    return out


def split(text: str, mode: str) -> list[str]:
    """The tokens of ``text`` in ``mode`` (the module docstring says how).

    Parameters
    ----------
    text : str
        The text.
    mode : str
        ``"word"``, ``"char"`` (word boundaries as :data:`SPACE`), :data:`CHAR_NOSPACE`,
        or a subword :class:`Side` (with its tokenizer).

    Returns
    -------
    list of str

    Raises
    ------
    TypeError
        ``text`` is not a str.
    ValueError
        An unknown ``mode``, or a subword mode without its tokenizer.

    Examples
    --------
    >>> split(" the  cat ", "word"), split("a b", "char"), split("a b", "char-nospace")
    (['the', 'cat'], ['a', '▁', 'b'], ['a', 'b'])
    """
    if not isinstance(text, str):
        raise TypeError(f"split: text must be a str, got {type(text).__name__}")
    mode = _mode(mode, "split")
    if mode == "word":
        return text.split()
    if mode == "char":
        return _char_split(text)
    if mode in SUBWORD_MODES:
        return _subword(mode, "split").split(text)
    return [c for c in text if not c.isspace()]


def join(tokens: Sequence[str], mode: str) -> str:
    """``tokens`` as text in ``mode`` (the module docstring says how).

    Parameters
    ----------
    tokens : sequence of str
        The tokens (not one str).
    mode : str
        As :func:`split` takes it.

    Returns
    -------
    str

    Raises
    ------
    TypeError
        ``tokens`` is a bare str.
    ValueError
        An unknown ``mode``, or a subword mode without its tokenizer.

    Examples
    --------
    >>> join(["the", "cat"], "word"), join(["▁", "a", "▁", "▁", "b"], "char")
    ('the cat', 'a b')
    """
    if isinstance(tokens, (str, bytes)):
        raise TypeError("join: tokens must be a sequence of str tokens, got one "
                        f"{type(tokens).__name__}")
    mode = _mode(mode, "join")
    if mode == "word":
        return " ".join(tokens)
    if mode == CHAR_NOSPACE:
        return "".join(tokens)
    if mode in SUBWORD_MODES:
        return _subword(mode, "join").join(list(tokens))
    text = "".join(" " if t == SPACE else SPACE if t == LITERAL_SPACE else t for t in tokens)
    return " ".join(w for w in text.split(" ") if w)


def of_model(metadata: Mapping[str, Any] | None) -> tuple[str, str]:
    """The ``(source, target)`` modes a model was trained with, from its checkpoint's (or
    export's) metadata: its ``tokens`` (:func:`stored_modes`: a pair, or one mode for both
    sides as checkpoints before per-side tokens stored it, their ``"char"`` read as
    :data:`CHAR_NOSPACE`); a G2P model's :data:`G2P_MODES`; else words on both sides (the
    toy task, a model trained from Python on token lists).

    Parameters
    ----------
    metadata : mapping or None
        The checkpoint's metadata.

    Returns
    -------
    tuple of str

    Raises
    ------
    ValueError
        A ``tokens`` entry that is no mode or pair of modes.

    Examples
    --------
    >>> of_model(None), of_model({"task": "g2p"}), of_model({"tokens": ["word", "char"]})
    (('word', 'word'), ('char', 'word'), ('word', 'char'))
    """
    meta = metadata or {}
    value = meta.get("tokens")
    if value is None:
        return G2P_MODES if meta.get("task") == "g2p" else ("word", "word")
    where = "the model's metadata"
    return sides(stored_modes(value, where), meta.get("tokenizers"), where)


def sides(pair: Sequence[str], tokenizers: Mapping[str, Any] | None,
          where: str = "the model's metadata") -> tuple[str, str]:
    """``pair``'s modes, each subword side a :class:`Side` with its tokenizer from
    ``tokenizers`` (``{"src": text or None, "tgt": ...}``, as :func:`metadata_of` stores
    it); word and char sides as they are.

    Parameters
    ----------
    pair : pair of str
        ``(source, target)`` modes (:func:`stored_modes`).
    tokenizers : mapping or None
        The stored tokenizers.
    where : str
        Names the model in the error.

    Returns
    -------
    tuple of str

    Raises
    ------
    ValueError
        A subword side whose tokenizer is missing or is no tokenizer's JSON text.
    ImportError
        A subword side where ``tokenizers`` is not installed.

    Examples
    --------
    >>> sides(("word", "char"), None)
    ('word', 'char')
    """
    out = []
    for key, mode in zip(("src", "tgt"), pair):
        if mode not in SUBWORD_MODES:
            out.append(str(mode))
            continue
        text = tokenizers.get(key) if isinstance(tokenizers, Mapping) else None
        if not isinstance(text, str):
            raise ValueError(f"{where}: its {mode!r} {'source' if key == 'src' else 'target'}"
                             " side has no stored tokenizer (tokenizers."
                             f"{key})")
        subword.load(text, where)                        # checked (and kept) once
        out.append(Side(str(mode), text))
    return out[0], out[1]


def metadata_of(pair: Sequence[str]) -> dict[str, Any]:
    """What a checkpoint's metadata stores of ``pair``: ``{"tokens": [source, target]}``,
    and ``"tokenizers": {"src": text or None, "tgt": ...}`` where a side is subword.

    Parameters
    ----------
    pair : pair of str
        The sides (:func:`train_sides`); a subword side must be a :class:`Side`.

    Returns
    -------
    dict

    Raises
    ------
    ValueError
        A bad pair, or a subword side without its tokenizer.

    Examples
    --------
    >>> metadata_of(("word", "char"))
    {'tokens': ['word', 'char']}
    """
    src, tgt = modes(pair, "tokens")
    out: dict[str, Any] = {"tokens": [str(src), str(tgt)]}
    if src in SUBWORD_MODES or tgt in SUBWORD_MODES:
        texts: dict[str, str | None] = {}
        for key, side in (("src", src), ("tgt", tgt)):
            texts[key] = None
            if side in SUBWORD_MODES:
                _subword(side, "tokens")
                texts[key] = side.tokenizer                    # type: ignore[attr-defined]
        out["tokenizers"] = texts
    return out


def train_sides(tokens: Any, texts: Iterable[tuple[str, str]], *,
                vocab_size: Any = None, option: str = "vocab_size") -> tuple[str, str]:
    """The sides of ``tokens``, a tokenizer trained for each subword side on ``texts``.

    Parameters
    ----------
    tokens : str or pair
        As :func:`modes` takes it.
    texts : iterable of (str, str)
        The training split's ``(source, target)`` sentences (never dev or test).
    vocab_size : int or None
        Pieces per subword side (:func:`xpseq.data.subword.check_vocab_size`); ``None``:
        :data:`xpseq.data.subword.DEFAULT_VOCAB_SIZE`. Only for a subword side.
    option : str
        Names ``vocab_size`` in the error (``"--vocab-size"`` on the command).

    Returns
    -------
    tuple of str
        ``(source, target)``; a subword side is a :class:`Side` with its tokenizer.

    Raises
    ------
    ValueError
        A bad ``tokens`` or ``vocab_size``; a ``vocab_size`` where no side is subword.
    ImportError
        A subword side where ``tokenizers`` is not installed.

    Examples
    --------
    >>> train_sides("word,char", [("a b", "c d")])
    ('word', 'char')
    """
    pair = modes(tokens)
    wanted = [m for m in pair if m in SUBWORD_MODES]
    if not wanted:
        if vocab_size is not None:
            raise ValueError(f"{option} is for bpe or unigram tokens; tokens "
                             f"{text_of(pair)} have no subword side")
        return pair
    size = (subword.DEFAULT_VOCAB_SIZE if vocab_size is None
            else subword.check_vocab_size(vocab_size, option))
    texts = list(texts)
    out = []
    for i, mode in enumerate(pair):
        out.append(Side(mode, subword.train((t[i] for t in texts), mode, size))
                   if mode in SUBWORD_MODES else mode)
    return out[0], out[1]


def is_text_model(metadata: Mapping[str, Any] | None) -> bool:
    """Whether the model translates text that was tokenised for it (a TSV corpus, or a
    model trained from Python with ``tokens``): its output is scored as text (BLEU on the
    joined strings). The toy task and G2P are made of tokens, and so is a model whose
    metadata names no tokens.

    Parameters
    ----------
    metadata : mapping or None
        The checkpoint's metadata.

    Returns
    -------
    bool

    Examples
    --------
    >>> is_text_model({"task": "tsv", "tokens": ["char", "char"]}), is_text_model(None)
    (True, False)
    """
    meta = metadata or {}
    return meta.get("tokens") is not None and meta.get("task") not in ("toy", "g2p")
