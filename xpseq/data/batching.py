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
``shapes=K`` bounds them: at most ``K`` distinct ``(B, S, T)`` an epoch, the batches padded
further (longer, and with empty rows) where that costs the fewest padded positions.
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
                 eos_id: int = EOS_ID, max_tokens: int | None = None,
                 shapes: int | None = None,
                 rows: Sequence[int] | None = None) -> list[dict[str, np.ndarray]]:
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
    shapes : int, optional
        At most this many distinct batch shapes ``(B, S, T)`` (each a compilation under
        ``jax.jit``): the batches, in length order, are split into at most ``shapes`` runs of
        consecutive batches, and every batch of a run is padded to the run's largest ``B``,
        ``S`` and ``T``, the split chosen to add the fewest padded positions. A batch with
        fewer rows than its run's ``B`` gets empty rows: source ``pad_id`` (length 1),
        every target ``pad_id``, ``index`` -1. Padding is masked, so the loss per real
        target token is unchanged (with ``max_tokens``, a padded batch may hold more than
        ``max_tokens`` positions). ``None``: no bound.
    rows : sequence of int, optional
        The row counts a batch may have (a backend's compiled search sizes,
        :attr:`xpseq.backends.SearchPlan.batch_sizes`): each batch gets empty rows, as for
        ``shapes``, up to the smallest of them that holds it, and no batch takes more
        sentences than the largest. ``None``: any.

    Returns
    -------
    list of batches in order of increasing length (shuffle the order, not the contents).

    Raises
    ------
    ValueError
        An empty source, a negative id, or a bad ``batch_size`` / ``bucket`` /
        ``max_tokens`` / ``shapes``.
    """
    sizes: tuple[tuple[str, int], ...] = (("batch_size", batch_size), ("bucket", bucket))
    sizes += tuple((name, value) for name, value in (("max_tokens", max_tokens),
                                                     ("shapes", shapes)) if value is not None)
    for name, value in sizes:
        if not checks.is_int(value) or value < 1:
            raise ValueError(f"make_batches: {name} must be a positive int, got {value!r}")
    if rows is not None:
        if isinstance(rows, (str, bytes)) or not rows or not all(
                checks.is_int(r) and r >= 1 for r in rows):
            raise ValueError(f"make_batches: rows must be a non-empty sequence of positive "
                             f"ints, got {rows!r}")
        rows = sorted(rows)
        batch_size = min(batch_size, rows[-1])
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
    cuts = _cuts(order, cleaned, batch_size, bucket, max_tokens)
    shaped = [(stop - start, _round_up(max(len(cleaned[i][0]) for i in order[start:stop]), bucket),
               _round_up(max(len(cleaned[i][1]) for i in order[start:stop]) + 1, bucket))
              for start, stop in cuts]
    if shapes is not None:
        shaped = _bounded(shaped, shapes)
    if rows is not None:
        shaped = [(next(r for r in rows if r >= B), S, T) for B, S, T in shaped]
    batches = []
    for (start, stop), (B, S, T) in zip(cuts, shaped):
        chunk = [cleaned[i] for i in order[start:stop]]
        empty = B - len(chunk)                     # rows that only fill the shape
        batch = {"src": np.full((B, S), pad_id, dtype=np.int64),
                 "src_len": np.array([len(s) for s, _ in chunk] + [1] * empty, dtype=np.int64),
                 "tgt_in": np.full((B, T), pad_id, dtype=np.int64),
                 "tgt_out": np.full((B, T), pad_id, dtype=np.int64),
                 "index": np.array(order[start:stop] + [-1] * empty, dtype=np.int64)}
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


def _bounded(sizes: list[tuple[int, int, int]], shapes: int) -> list[tuple[int, int, int]]:
    """``sizes`` (each batch's ``(B, S, T)``, in order) padded to at most ``shapes`` distinct
    ones: the split into runs of consecutive batches, each padded to its largest ``B``,
    ``S`` and ``T``, with the fewest padded positions ``B · (S + T)`` in all (dynamic
    programming over where the runs end)."""
    n = len(sizes)
    if len(set(sizes)) <= shapes:
        return list(sizes)
    inf = float("inf")
    # cost[k][j]: the fewest positions for the first j batches in k runs; back[k][j]: where
    # the last of those runs starts.
    cost = [[0.0] + [inf] * n] + [[inf] * (n + 1) for _ in range(shapes)]
    back = [[0] * (n + 1) for _ in range(shapes + 1)]
    for j in range(1, n + 1):
        rows = longest_src = longest_tgt = count = 0
        for i in range(j - 1, -1, -1):             # the run sizes[i:j]
            B, S, T = sizes[i]
            rows, longest_src, longest_tgt = max(rows, B), max(longest_src, S), \
                max(longest_tgt, T)
            count += 1
            run = count * rows * (longest_src + longest_tgt)
            for k in range(1, shapes + 1):
                total = cost[k - 1][i] + run
                if total < cost[k][j]:
                    cost[k][j], back[k][j] = total, i
    k = min(range(1, shapes + 1), key=lambda k: cost[k][n])
    out: list[tuple[int, int, int]] = []
    j = n
    while j > 0:
        i = back[k][j]
        group = sizes[i:j]
        shape = (max(b for b, _, _ in group), max(s for _, s, _ in group),
                 max(t for _, _, t in group))
        out[:0] = [shape] * (j - i)
        j, k = i, k - 1
    return out


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
