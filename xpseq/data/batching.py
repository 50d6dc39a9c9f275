"""Padded, length-bucketed batches of token ids (NumPy, int64).

A batch is a dict of NumPy arrays::

    src      (B, S)   source ids, padded with pad_id after src_len[b]
    src_len  (B,)     real source lengths (>= 1)
    tgt_in   (B, T)   <s> y_1 ... y_n, padded   (the decoder's teacher-forced input)
    tgt_out  (B, T)   y_1 ... y_n </s>, padded  (what it must predict)
    index    (B,)     the position of each row's pair in the input list

Pairs are sorted by length before they are cut into batches, so sentences of similar
length share a batch; ``S`` and ``T`` are rounded up to a multiple of ``bucket`` so that
an epoch has only a few distinct shapes (each new shape is a new trace under ``jax.jit``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from xpseq.core import checks

__all__ = ["make_batches", "PAD_ID", "BOS_ID", "EOS_ID", "UNK_ID"]

#: The reserved ids every xpseq vocabulary starts with.
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


def make_batches(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], batch_size: int, *,
                 bucket: int = 8, pad_id: int = PAD_ID, bos_id: int = BOS_ID,
                 eos_id: int = EOS_ID,
                 max_tokens: int | None = None) -> list[dict[str, np.ndarray]]:
    """Cut ``(source ids, target ids)`` pairs into padded batches.

    Parameters
    ----------
    pairs : sequence of ``(src, tgt)`` id sequences. ``src`` is used as given (append an
        end-of-sentence id yourself if the encoder should see one); ``tgt`` gets ``bos_id``
        in front for ``tgt_in`` and ``eos_id`` behind for ``tgt_out``.
    batch_size : int
        Sentences per batch (the last batch may be smaller); with ``max_tokens``, the most.
    bucket : int
        ``S`` and ``T`` are rounded up to a multiple of it (1 for no rounding).
    max_tokens : int, optional
        Batches by token count: a batch takes sentences (in length order) while its padded
        size ``B · max(S, T)`` stays within ``max_tokens``, so short sentences come many to
        a batch and long ones few (a sentence longer than ``max_tokens`` alone is a batch
        of one).

    Returns
    -------
    list of batches in order of increasing length (shuffle the order, not the contents).

    Raises
    ------
    ValueError
        An empty source, a negative id, or a bad ``batch_size`` / ``bucket``.
    """
    sizes = (("batch_size", batch_size), ("bucket", bucket))
    for name, value in sizes + ((("max_tokens", max_tokens),) if max_tokens is not None else ()):
        if not checks.is_int(value) or value < 1:
            raise ValueError(f"make_batches: {name} must be a positive int, got {value!r}")
    cleaned = []
    for i, pair in enumerate(pairs):
        try:
            src, tgt = pair
        except (TypeError, ValueError):
            raise ValueError(f"make_batches: pair {i} is not a (source, target) pair") from None
        src, tgt = [int(t) for t in src], [int(t) for t in tgt]
        if not src:
            raise ValueError(f"make_batches: pair {i} has an empty source")
        if min(src + tgt, default=0) < 0:
            raise ValueError(f"make_batches: pair {i} has a negative id")
        cleaned.append((src, tgt))
    order = sorted(range(len(cleaned)), key=lambda i: (len(cleaned[i][0]), len(cleaned[i][1]), i))
    batches = []
    for start, stop in _cuts(order, cleaned, batch_size, bucket, max_tokens):
        chunk = [cleaned[i] for i in order[start:stop]]
        S = _round_up(max(len(s) for s, _ in chunk), bucket)
        T = _round_up(max(len(t) for _, t in chunk) + 1, bucket)
        batch = {"src": np.full((len(chunk), S), pad_id, dtype=np.int64),
                 "src_len": np.array([len(s) for s, _ in chunk], dtype=np.int64),
                 "tgt_in": np.full((len(chunk), T), pad_id, dtype=np.int64),
                 "tgt_out": np.full((len(chunk), T), pad_id, dtype=np.int64),
                 "index": np.array(order[start:stop], dtype=np.int64)}
        for b, (src, tgt) in enumerate(chunk):
            batch["src"][b, :len(src)] = src
            batch["tgt_in"][b, :len(tgt) + 1] = [bos_id, *tgt]
            batch["tgt_out"][b, :len(tgt) + 1] = [*tgt, eos_id]
        batches.append(batch)
    return batches


def _cuts(order: list[int], pairs: list, batch_size: int, bucket: int,
          max_tokens: int | None) -> list[tuple[int, int]]:
    """``(start, stop)`` of each batch in ``order``: every ``batch_size`` sentences, or,
    with ``max_tokens``, as many as keep ``B · max(S, T)`` (padded) within it."""
    if max_tokens is None:
        return [(i, min(i + batch_size, len(order))) for i in range(0, len(order), batch_size)]
    cuts, start, longest = [], 0, 0
    for i, index in enumerate(order):
        src, tgt = pairs[index]
        width = max(_round_up(max(len(src), longest), bucket), _round_up(len(tgt) + 1, bucket))
        if i > start and ((i - start + 1) * max(width, longest) > max_tokens
                          or i - start == batch_size):
            cuts.append((start, i))
            start, longest = i, 0
            width = max(_round_up(len(src), bucket), _round_up(len(tgt) + 1, bucket))
        longest = max(longest, width)
    if order:
        cuts.append((start, len(order)))
    return cuts


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
