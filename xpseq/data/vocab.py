"""Vocabularies: tokens (str) to ids (int) and back.

Every vocabulary starts with the four reserved tokens, at the ids
:mod:`xpseq.data.batching` uses::

    0 <pad>   PAD_ID     padding
    1 <s>     BOS_ID     start of sentence (the decoder's first input)
    2 </s>    EOS_ID     end of sentence
    3 <unk>   UNK_ID     any token not in the vocabulary

followed by the tokens of the data, by descending frequency and then alphabetically, so
the same data always gives the same ids. A vocabulary is saved as its token list
(:meth:`Vocab.to_list`, e.g. in a checkpoint's metadata) and restored with
:meth:`Vocab.from_list`.
"""

from __future__ import annotations

import collections
import operator
from typing import Iterable, Sequence

from xpseq.core import checks

from .batching import BOS_ID, EOS_ID, PAD_ID, UNK_ID

__all__ = ["Vocab", "RESERVED_TOKENS", "PAD", "BOS", "EOS", "UNK"]

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
#: The first four tokens of every vocabulary, in id order.
RESERVED_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
assert [RESERVED_TOKENS.index(t) for t in (PAD, BOS, EOS, UNK)] == [PAD_ID, BOS_ID, EOS_ID,
                                                                     UNK_ID]
# Ids that ``decode(..., skip_special=True)`` drops (<unk> stays: it stands for a real token).
_SKIPPED_IDS = frozenset((PAD_ID, BOS_ID, EOS_ID))


def _check_tokens(tokens, where: str) -> list[str]:
    """``tokens`` as a list of str; a bare string or a non-string token is a TypeError."""
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"{where}: expected a sequence of tokens, got a {type(tokens).__name__} "
                        f"{tokens[:40]!r} (split it into tokens first)")
    tokens = list(tokens)
    for i, t in enumerate(tokens):
        if not isinstance(t, str):
            raise TypeError(f"{where}: token {i} is {type(t).__name__} {t!r}, not str")
    return tokens


class Vocab:
    """A fixed token <-> id mapping whose first four tokens are the reserved ones.

    Parameters
    ----------
    tokens : sequence of str, length V >= 4
        Token ``i`` gets id ``i``. The first four must be ``<pad> <s> </s> <unk>`` and no
        token may repeat (ValueError otherwise). Usually made by :meth:`build` or
        :meth:`from_list`.

    Two vocabularies are equal when their token lists are equal.
    """

    __slots__ = ("_tokens", "_ids")

    def __init__(self, tokens: Sequence[str]):
        tokens = _check_tokens(tokens, "Vocab")
        if tuple(tokens[:4]) != RESERVED_TOKENS:
            raise ValueError(f"Vocab: the first four tokens must be {list(RESERVED_TOKENS)}, "
                             f"got {tokens[:4]}")
        ids: dict[str, int] = {}
        for i, t in enumerate(tokens):
            if t in ids:
                raise ValueError(f"Vocab: token {t!r} appears twice (ids {ids[t]} and {i})")
            ids[t] = i
        self._tokens: tuple[str, ...] = tuple(tokens)
        self._ids = ids

    @classmethod
    def build(cls, sequences: Iterable[Sequence[str]], *, min_count: int = 1) -> Vocab:
        """The vocabulary of ``sequences`` (an iterable of token lists).

        Tokens seen at least ``min_count`` times follow the reserved four, by descending
        count and then alphabetically. Reserved tokens in the data are counted as already
        present (they keep ids 0-3).

        Raises
        ------
        TypeError
            A sequence is a string (not split into tokens) or holds a non-string.
        ValueError
            ``min_count`` is not a positive int.
        """
        if (not checks.is_int(min_count)
                or min_count < 1):
            raise ValueError(f"Vocab.build: min_count must be a positive int, got {min_count!r}")
        if isinstance(sequences, (str, bytes)):
            raise TypeError("Vocab.build: sequences must be an iterable of token lists, "
                            "got a string")
        counts: collections.Counter[str] = collections.Counter()
        for i, seq in enumerate(sequences):
            counts.update(_check_tokens(seq, f"Vocab.build: sequence {i}"))
        kept = sorted((t for t, c in counts.items() if c >= min_count and t not in
                       RESERVED_TOKENS), key=lambda t: (-counts[t], t))
        return cls([*RESERVED_TOKENS, *kept])

    @classmethod
    def from_list(cls, tokens: Sequence[str]) -> Vocab:
        """Restore a vocabulary saved with :meth:`to_list` (the same validation as the
        constructor: ValueError unless the first four are the reserved tokens)."""
        return cls(tokens)

    def to_list(self) -> list[str]:
        """All tokens in id order (a new list; JSON-serialisable)."""
        return list(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocab):
            return NotImplemented
        return self._tokens == other._tokens

    def __hash__(self) -> int:
        return hash(self._tokens)

    def __repr__(self) -> str:
        preview = " ".join(self._tokens[4:12])
        more = " ..." if len(self) > 12 else ""
        return f"Vocab(size={len(self)}, tokens after the reserved: {preview}{more})"

    def id(self, token: str) -> int:
        """The id of ``token``; ``UNK_ID`` (3) if it is not in the vocabulary."""
        if not isinstance(token, str):
            raise TypeError(f"Vocab.id: token must be str, got {type(token).__name__} "
                            f"{token!r}")
        return self._ids.get(token, UNK_ID)

    def token(self, id: int) -> str:
        """The token with id ``id`` (0 <= id < len(self); IndexError otherwise)."""
        if not checks.is_int(id):
            raise TypeError(f"Vocab.token: id must be an int, got {type(id).__name__} {id!r}")
        if not 0 <= id < len(self._tokens):
            raise IndexError(f"Vocab.token: id {int(id)} is out of range for a vocabulary of "
                             f"size {len(self._tokens)}")
        return self._tokens[id]

    def encode(self, tokens: Sequence[str], *, add_eos: bool = False) -> list[int]:
        """Token list (length L) -> id list (length L, or L + 1 with ``add_eos``).

        Tokens not in the vocabulary become ``UNK_ID`` (3); ``add_eos`` appends ``EOS_ID``
        (2), e.g. for the encoder's input. A string instead of a token list is a TypeError.
        """
        tokens = _check_tokens(tokens, "Vocab.encode")
        ids = [self._ids.get(t, UNK_ID) for t in tokens]
        if add_eos:
            ids.append(EOS_ID)
        return ids

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True,
               skip_special: bool = True) -> list[str]:
        """Id sequence (list or 1-D array, length L) -> token list (length <= L).

        Parameters
        ----------
        stop_at_eos : bool
            Stop at the first ``EOS_ID``; it and everything after it are dropped.
        skip_special : bool
            Drop ``<pad>``, ``<s>`` and ``</s>`` (``<unk>`` is kept: it stands for a token).

        Raises
        ------
        IndexError
            An id outside ``0 .. len(self) - 1`` (the message names it and the size).
        TypeError
            A non-integer id.
        """
        out = []
        for k, i in enumerate(ids):
            try:
                i = operator.index(i)
            except TypeError:
                raise TypeError(f"Vocab.decode: ids[{k}] is {type(i).__name__} {i!r}, "
                                "not an int") from None
            if stop_at_eos and i == EOS_ID:
                break
            if skip_special and i in _SKIPPED_IDS:
                continue
            out.append(self.token(i))
        return out
