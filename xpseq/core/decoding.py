"""Greedy and batched beam search over a pure step function, written once.

A *step function* maps the decoder state and the previous tokens to log-probabilities::

    step(state, y_prev) -> (logp, state, attention)
        state      a pytree (dict/tuple) of arrays with leading size N
        y_prev     (N,) integer token ids
        logp       (N, V) log-probabilities of the next token
        attention  (N, S) weights over the source, or None

Both searches run a fixed number of steps ``max_len`` with *finished* masks, so that they
work under ``jax.jit`` (pass ``scan=backend.scan``); eagerly (``scan=None``) they stop as
soon as every sentence is finished, with the same results.

Beam search keeps ``k`` live hypotheses per sentence in arrays of shape ``(B, k, ...)``:

* every step expands all ``B·k`` live beams over the vocabulary and ranks the ``k·V``
  candidates of each sentence by score (a stable sort: ties go to the lower beam, then
  the lower token id);
* candidates ending in ``</s>`` that rank above the ``k``-th live continuation are
  *finished*: they move to a pool of the ``k`` best finished hypotheses (ranked by the
  length-penalised score) and are frozen there; the best ``k`` other candidates stay live;
* at a sentence's maximum length its ``k`` best candidates are finished without ``</s>``;
* a sentence stops when no live hypothesis can still beat the ``k``-th finished one:
  log-probabilities are ``<= 0``, so a live hypothesis's raw score only falls; with a
  length penalty the bound uses the longest length it could still reach. This rule cannot
  miss a better hypothesis.

Length penalties (``length``: tokens including ``</s>``): ``"none"`` ranks by the summed
log-probability, ``"avg"`` by its mean per token, ``"gnmt"`` by
``score / ((5 + length) / 6) ** alpha`` (Wu et al. 2016). With ``k = 1`` and no penalty,
beam search is greedy search.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import array_api_compat as compat

from . import checks
from .kernels import int_dtype, log_softmax, take_along_last
from .tree import flatten, map_leaves

__all__ = ["greedy_search", "beam_search", "Hypotheses", "tile_beams", "ensemble_step",
           "LENGTH_PENALTIES"]

LENGTH_PENALTIES = ("none", "avg", "gnmt")


class Hypotheses(NamedTuple):
    """Search results, best first. ``n`` is 1 for greedy search, ``n_best`` for beams.

    Attributes
    ----------
    tokens
        ``(B, n, L)`` integer ids; positions at and after ``lengths`` are ``pad_id``
    lengths
        ``(B, n)`` generated tokens, ``</s>`` included when it was generated
    scores
        ``(B, n)`` summed log-probabilities
    ranking
        ``(B, n)`` the length-penalised scores the hypotheses were ranked by
    attention
        ``(B, n, L, S)`` attention weights of every generated token (zero after
        ``lengths``), or ``None`` when the step function returns none
    """

    tokens: Any
    lengths: Any
    scores: Any
    ranking: Any
    attention: Any


def tile_beams(tree: Any, k: int) -> Any:
    """Repeat every array of a tree k times along axis 0, one copy per beam.

    ``(B, ...) -> (B·k, ...)``: the copies of sentence ``b`` at rows ``b·k .. b·k + k - 1``."""
    def tile(x: Any) -> Any:
        xp = compat.array_namespace(x)
        index = xp.arange(x.shape[0] * k, dtype=int_dtype(xp), device=compat.device(x)) // k
        return xp.take(x, index, axis=0)

    return map_leaves(tile, tree)


def ensemble_step(steps: Any) -> Callable[..., Any]:
    """One step function that averages the steps of several models.

    ``ensemble_step([step_1, ..., step_m])`` runs each member on its own part of the state
    (a tuple ``(state_1, ..., state_m)``) and returns the mean of their log-probabilities,
    renormalised (``log_softmax`` of the mean: the normalised geometric mean of the
    members' distributions), and the mean of the attention weights of the members that
    return any (``None`` if none does).

    An ensemble of one gives its member's log-probabilities unchanged; members must share
    the target vocabulary and see the same source batch.
    """
    steps = tuple(steps)
    if not steps or not all(callable(s) for s in steps):
        raise ValueError(f"ensemble_step: steps must be a non-empty sequence of step "
                         f"functions, got {steps!r}")

    def step(state: tuple[Any, ...], y_prev: Any) -> tuple[Any, ...]:
        logps, states, weights = [], [], []
        for member, member_state in zip(steps, state):
            logp, new_state, attn = member(member_state, y_prev)
            logps.append(logp)
            states.append(new_state)
            if attn is not None:
                weights.append(attn)
        attention = None if not weights else sum(weights[1:], weights[0]) / len(weights)
        if len(logps) == 1:
            return logps[0], tuple(states), attention
        mean = sum(logps[1:], logps[0]) / len(logps)
        return log_softmax(mean, axis=-1, xp=compat.array_namespace(mean)), tuple(states), \
            attention

    return step


def greedy_search(step: Callable[..., Any], state: Any, *, batch_size: int, bos_id: int,
                  eos_id: int, max_len: int, max_lens: Any = None, min_len: int = 0,
                  pad_id: int = 0,
                  scan: Callable[..., Any] | None = None,
                  narrow: Callable[[Any], Callable[..., Any]] | None = None) -> Hypotheses:
    """Pick the most probable token at every step until ``</s>`` or the length limit.

    Parameters
    ----------
    step : callable
        The step function (module docstring), for ``N = batch_size`` rows.
    state : array or nested dict/tuple of arrays
        The initial decoder state (leading size ``batch_size``).
    batch_size : int
    bos_id, eos_id, pad_id : int
    max_len : int
        The most steps (static: the length ``L`` of the returned arrays).
    max_lens : integer array ``(B,)``, optional
        A per-sentence limit ``<= max_len`` (e.g. a function of the source length).
    min_len : int
        ``</s>`` is not allowed before this many tokens.
    scan : callable or None
        ``backend.scan`` to run under ``jax.jit``; ``None`` for an eager Python loop
        that stops when every sentence is finished.
    narrow : callable or None
        For an eager loop: ``narrow(rows)`` is the step function of the batch's rows
        ``rows`` alone (an ascending integer array of row indices), called when at most
        :data:`NARROW_AT` of the rows the steps run on are unfinished, so that finished
        sentences stop costing steps (the results are the same). ``None`` (and under
        ``scan``): every step runs on the whole batch.

    Returns
    -------
    Hypotheses
        With ``n = 1``.
    """
    _check_common("greedy_search", batch_size, max_len, min_len, bos_id, eos_id, pad_id)
    xp, like = _namespace_of(state)
    B, L = batch_size, max_len
    device = compat.device(like)
    limits = _limits(max_lens, B, L, xp, device)
    positions = xp.arange(L, dtype=int_dtype(xp), device=device)
    probe = step(state, xp.full((B,), bos_id, dtype=int_dtype(xp), device=device))
    S = None if probe[2] is None else probe[2].shape[-1]
    carry = {
        "state": state,
        "y": xp.full((B,), bos_id, dtype=int_dtype(xp), device=device),
        "finished": xp.zeros((B,), dtype=xp.bool, device=device),
        # The scores in the log-probabilities' dtype (float32 for a bfloat16 model).
        "score": xp.zeros((B,), dtype=probe[0].dtype, device=device),
        "length": xp.zeros((B,), dtype=int_dtype(xp), device=device),
        "tokens": xp.full((B, L), pad_id, dtype=int_dtype(xp), device=device),
    }
    if S is not None:
        carry["attention"] = xp.zeros((B, L, S), dtype=probe[2].dtype, device=device)

    def update(c: dict[str, Any], t: Any, stepped: tuple[Any, Any, Any]) -> dict[str, Any]:
        logp, new_state, att = stepped
        logp = _forbid_eos(logp, t, min_len, eos_id, xp)
        y = xp.argmax(logp, axis=-1)
        live = ~c["finished"]
        y = xp.where(live, y, pad_id)
        picked = xp.squeeze(take_along_last(logp, xp.expand_dims(xp.where(live, y, 0), axis=-1),
                                            xp=xp), axis=-1)
        at_t = positions == t
        new = {
            "state": new_state,
            "y": y,
            "score": c["score"] + xp.where(live, picked, 0.0),
            "length": c["length"] + xp.astype(live, int_dtype(xp)),
            "tokens": xp.where(at_t & live[:, None], y[:, None], c["tokens"]),
            "finished": c["finished"] | (y == eos_id) | (t + 1 >= limits),
        }
        if S is not None:
            write = (at_t & live[:, None])[..., None]
            new["attention"] = xp.where(write, att[:, None, :], c["attention"])
        return new

    if scan is not None:
        c, _ = scan(lambda c, t: (update(c, t, step(c["state"], c["y"])), None), carry,
                    xp.arange(L, dtype=int_dtype(xp), device=device))
    else:
        c = _greedy_loop(step, update, carry, probe, L, narrow, xp, device)
    attention = c.get("attention")
    return Hypotheses(c["tokens"][:, None, :], c["length"][:, None], c["score"][:, None],
                      c["score"][:, None],
                      None if attention is None else attention[:, None, ...])


def beam_search(step: Callable[..., Any], state: Any, *, batch_size: int, k: int, bos_id: int,
                eos_id: int, max_len: int, max_lens: Any = None, min_len: int = 0,
                pad_id: int = 0, length_penalty: str = "none", alpha: float = 0.6,
                n_best: int = 1, scan: Callable[..., Any] | None = None) -> Hypotheses:
    """Batched beam search over ``batch_size × k`` hypotheses in array operations.

    Parameters
    ----------
    step : callable
        The step function (module docstring), for ``N = batch_size · k`` rows
        (sentence ``b``'s beams at rows ``b·k .. b·k + k - 1``; see :func:`tile_beams`).
    state : array or nested dict/tuple of arrays
        The initial decoder state with leading size ``batch_size · k`` (tiled).
    k : int
        Beam size.
    length_penalty : {"none", "avg", "gnmt"}
        How finished hypotheses of different lengths are ranked.
    alpha : float
        The exponent of ``"gnmt"``.
    n_best : int
        How many hypotheses to return per sentence, ``1 <= n_best <= k``.
    batch_size, bos_id, eos_id, pad_id, max_len, max_lens, min_len, scan
        As in :func:`greedy_search`.

    Returns
    -------
    Hypotheses
        With ``n = n_best``, best first by ``ranking``.
    """
    fname = "beam_search"
    _check_common(fname, batch_size, max_len, min_len, bos_id, eos_id, pad_id)
    for name, value in (("k", k), ("n_best", n_best)):
        if not checks.is_int(value) or value < 1:
            raise ValueError(f"{fname}: {name} must be a positive int, got {value!r}")
    if n_best > k:
        raise ValueError(f"{fname}: n_best ({n_best}) cannot exceed the beam size k ({k})")
    if length_penalty not in LENGTH_PENALTIES:
        raise ValueError(f"{fname}: length_penalty must be one of {list(LENGTH_PENALTIES)}, "
                         f"got {length_penalty!r}")
    if not checks.is_real(alpha) or not alpha >= 0:
        raise ValueError(f"{fname}: alpha must be a number >= 0, got {alpha!r}")
    xp, like = _namespace_of(state)
    B, K, L = batch_size, k, max_len
    device = compat.device(like)
    limits = _limits(max_lens, B, L, xp, device)
    positions = xp.arange(L, dtype=int_dtype(xp), device=device)
    # the first beam row of each sentence b
    rows = xp.reshape(xp.arange(B, dtype=int_dtype(xp), device=device) * K, (B, 1))
    probe = step(state, xp.full((B * K,), bos_id, dtype=int_dtype(xp), device=device))
    V = probe[0].shape[-1]
    S = None if probe[2] is None else probe[2].shape[-1]
    dtype = probe[0].dtype          # the log-probabilities' (float32 for a bfloat16 model)
    neg_inf = -math.inf
    if scan is None:                # an eager loop's first step is the probe's
        step = _answering_first(step, probe)

    def penalised(raw: Any, length: Any) -> Any:
        if length_penalty == "none":
            return raw
        n = xp.astype(length, dtype)
        if length_penalty == "avg":
            return raw / n
        return raw / ((5.0 + n) / 6.0) ** alpha

    # Only beam 0 is alive at the start, so the first step expands one hypothesis.
    first = xp.reshape(xp.arange(K, dtype=int_dtype(xp), device=device) == 0, (1, K))
    carry = {
        "state": state,
        "y": xp.full((B * K,), bos_id, dtype=int_dtype(xp), device=device),
        "live_score": xp.where(first, xp.zeros((B, K), dtype=dtype, device=device), neg_inf),
        "live_tokens": xp.full((B, K, L), pad_id, dtype=int_dtype(xp), device=device),
        "pool_tokens": xp.full((B, K, L), pad_id, dtype=int_dtype(xp), device=device),
        "pool_score": xp.full((B, K), neg_inf, dtype=dtype, device=device),
        "pool_rank": xp.full((B, K), neg_inf, dtype=dtype, device=device),
        "pool_length": xp.zeros((B, K), dtype=int_dtype(xp), device=device),
        "done": xp.zeros((B,), dtype=xp.bool, device=device),
    }
    if S is not None:
        carry["live_attention"] = xp.zeros((B, K, L, S), dtype=probe[2].dtype, device=device)
        carry["pool_attention"] = xp.zeros((B, K, L, S), dtype=probe[2].dtype, device=device)

    def body(c: dict[str, Any], t: Any) -> tuple[dict[str, Any], None]:
        logp, new_state, att = step(c["state"], c["y"])
        logp = _forbid_eos(logp, t, min_len, eos_id, xp)
        cand = xp.reshape(c["live_score"][..., None] + xp.reshape(logp, (B, K, V)), (B, K * V))
        order = xp.argsort(-cand, axis=-1, stable=True)[:, :2 * K]      # best first, stable
        cand_score = take_along_last(cand, order, xp=xp)                 # (B, 2K)
        parent, token = order // V, order % V
        final = t + 1 >= limits                                          # (B,) last step
        is_eos = token == eos_id
        not_eos = xp.astype(~is_eos, int_dtype(xp))
        live_before = xp.cumulative_sum(not_eos, axis=-1) - not_eos
        rank = xp.reshape(xp.arange(2 * K, dtype=int_dtype(xp), device=device), (1, 2 * K))
        accept = xp.where(final[:, None], rank < K, is_eos & (live_before < K))
        accept = accept & ~c["done"][:, None] & (cand_score > neg_inf)
        at_t = positions == t
        cand_tokens = xp.where(at_t, token[..., None], _pick(c["live_tokens"], parent, xp))
        length = xp.zeros((B, 2 * K), dtype=int_dtype(xp), device=device) + (t + 1)
        cand_rank = xp.where(accept, penalised(cand_score, length), neg_inf)
        # Merge the accepted candidates into the pool of the k best finished hypotheses.
        merged_rank = xp.concat([c["pool_rank"], cand_rank], axis=-1)      # (B, 3K)
        keep = xp.argsort(-merged_rank, axis=-1, stable=True)[:, :K]
        both: Callable[[Any, Any], Any] = (  # noqa: E731
            lambda pool, new: _pick(xp.concat([pool, new], axis=1), keep, xp))
        out = {
            "pool_rank": take_along_last(merged_rank, keep, xp=xp),
            "pool_score": take_along_last(
                xp.concat([c["pool_score"], cand_score], axis=-1), keep, xp=xp),
            "pool_length": take_along_last(
                xp.concat([c["pool_length"], length], axis=-1), keep, xp=xp),
            "pool_tokens": both(c["pool_tokens"], cand_tokens),
        }
        # The k best candidates that did not end in </s> stay live (stable: best first).
        live = xp.argsort(xp.astype(is_eos, xp.int8), axis=-1, stable=True)[:, :K]
        live_parent = take_along_last(parent, live, xp=xp)
        out["live_score"] = take_along_last(cand_score, live, xp=xp)
        out["live_tokens"] = _pick(cand_tokens, live, xp)
        out["y"] = xp.reshape(take_along_last(token, live, xp=xp), (-1,))
        beam_rows = xp.reshape(live_parent + rows, (-1,))
        out["state"] = map_leaves(lambda x: xp.take(x, beam_rows, axis=0), new_state)
        if S is not None:
            att = xp.reshape(att, (B, K, S))
            cand_att = xp.where(at_t[:, None], _pick(att, parent, xp)[:, :, None, :],
                                _pick(c["live_attention"], parent, xp))
            out["pool_attention"] = both(c["pool_attention"], cand_att)
            out["live_attention"] = _pick(cand_att, live, xp)
        # Stop when no live hypothesis can beat the k-th finished one.
        best_live = out["live_score"][:, 0]
        if length_penalty == "none":
            bound = best_live
        else:
            bound = penalised(best_live, limits)    # the longest length it could still reach
        out["done"] = c["done"] | final | (out["pool_rank"][:, K - 1] >= bound)
        return out, None

    c = _run(body, carry, L, scan, xp, device, lambda c: c["done"])
    n = n_best
    attention = c.get("pool_attention")
    tokens = c["pool_tokens"][:, :n, :]
    return Hypotheses(tokens, c["pool_length"][:, :n], c["pool_score"][:, :n],
                      c["pool_rank"][:, :n], None if attention is None else attention[:, :n, ...])


# ------------------------------------------------------------------------- helpers


def _pick(x: Any, index: Any, xp: Any) -> Any:
    """``x[b, index[b, j], ...]`` for ``x (B, M, ...)``, ``index (B, J)``."""
    B, M = x.shape[0], x.shape[1]
    offsets = xp.reshape(xp.arange(B, dtype=int_dtype(xp), device=compat.device(x)) * M, (B, 1))
    flat = xp.reshape(x, (B * M, *x.shape[2:]))
    picked = xp.take(flat, xp.reshape(index + offsets, (-1,)), axis=0)
    return xp.reshape(picked, (B, index.shape[1], *x.shape[2:]))


#: :func:`greedy_search`'s eager loop narrows its steps to the unfinished sentences when at
#: most this fraction of the rows they run on is unfinished.
NARROW_AT = 0.75


def _greedy_loop(step: Callable[..., Any], update: Callable[..., Any], c: dict[str, Any],
                 first: tuple[Any, Any, Any], steps: int,
                 narrow: Callable[[Any], Callable[..., Any]] | None, xp: Any,
                 device: Any) -> dict[str, Any]:
    """Greedy search's eager loop: :func:`greedy_search`'s ``update`` after each step
    (the first step's output is ``first``, the probe of the initial state) until every
    sentence is finished. With ``narrow``, the steps run on ``active``, the rows still
    unfinished when it last narrowed, in that order (the state holds those rows alone);
    ``where`` gives each row of the batch its place in ``active`` (any place for a row
    not in it: those rows are finished and ``update`` leaves them as they are)."""
    ints = int_dtype(xp)
    batch = c["y"].shape[0]
    active: Any = None                  # None: every row of the batch
    where: Any = None
    out: Any = first
    for t in range(steps):
        if out is None:
            out = step(c["state"], c["y"] if active is None
                       else xp.take(c["y"], active, axis=0))
        if active is not None:           # back to the whole batch's rows
            logp, new_state, att = out
            out = (xp.take(logp, where, axis=0), new_state,
                   None if att is None else xp.take(att, where, axis=0))
        c = update(c, xp.asarray(t, dtype=ints, device=device), out)
        out = None
        live = ~c["finished"]
        unfinished = int(xp.sum(xp.astype(live, ints)))
        if unfinished == 0:
            break
        size = batch if active is None else active.shape[0]
        if narrow is not None and unfinished <= NARROW_AT * size:
            # The unfinished rows, ascending: ``nonzero(live)[0]``, but of the size counted
            # above (a library may not know the size of a ``nonzero`` result).
            rows = xp.argsort(xp.astype(~live, xp.int8), stable=True)[:unfinished]
            local = rows if active is None else xp.take(where, rows, axis=0)
            c = {**c, "state": map_leaves(lambda x: xp.take(x, local, axis=0), c["state"])}
            active, step = rows, narrow(rows)
            where = xp.maximum(xp.cumulative_sum(xp.astype(live, ints)) - 1, 0)
    return c


def _answering_first(step: Callable[..., Any], first: tuple[Any, Any, Any]) -> Callable[..., Any]:
    """``step``, whose first call answers ``first`` (what ``step`` gave for the same
    arguments, computed already) instead of computing it again."""
    pending = [first]

    def once(state: Any, y: Any) -> tuple[Any, Any, Any]:
        return pending.pop() if pending else step(state, y)

    return once


def _run(body: Callable[..., Any], carry: dict[str, Any], steps: int,
         scan: Callable[..., Any] | None, xp: Any, device: Any,
         finished: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """Run ``body`` for ``steps`` steps: under ``scan`` all of them, eagerly until done."""
    ts = xp.arange(steps, dtype=int_dtype(xp), device=device)
    if scan is not None:
        carry, _ = scan(body, carry, ts)
        return carry
    for t in range(steps):
        carry, _ = body(carry, ts[t])
        if bool(xp.all(finished(carry))):
            break
    return carry


def _forbid_eos(logp: Any, t: Any, min_len: int, eos_id: int, xp: Any) -> Any:
    if min_len <= 0:
        return logp
    column = xp.arange(logp.shape[-1], dtype=int_dtype(xp), device=compat.device(logp)) == eos_id
    return xp.where(column & (t < min_len), -math.inf, logp)


def _limits(max_lens: Any, batch: int, max_len: int, xp: Any, device: Any) -> Any:
    if max_lens is None:
        return xp.full((batch,), max_len, dtype=int_dtype(xp), device=device)
    if tuple(max_lens.shape) != (batch,):
        raise ValueError(f"max_lens must have shape (batch,) = ({batch},), "
                         f"got {tuple(max_lens.shape)}")
    return xp.minimum(xp.astype(max_lens, int_dtype(xp)),
                      xp.full((batch,), max_len, dtype=int_dtype(xp), device=device))


def _namespace_of(state: Any) -> tuple[Any, Any]:
    leaves, _ = flatten(state)
    floats = [x for x in leaves if compat.array_namespace(x).isdtype(x.dtype, "real floating")]
    if not floats:
        raise TypeError("the decoder state must hold at least one floating array")
    return compat.array_namespace(*leaves), floats[0]


def _check_common(fname: str, batch_size: int, max_len: int, min_len: int, *ids: int) -> None:
    for name, value in (("batch_size", batch_size), ("max_len", max_len)):
        if not checks.is_int(value) or value < 1:
            raise ValueError(f"{fname}: {name} must be a positive int, got {value!r}")
    if not checks.is_int(min_len) or min_len < 0:
        raise ValueError(f"{fname}: min_len must be an int >= 0, got {min_len!r}")
    if min_len >= max_len:
        raise ValueError(f"{fname}: min_len ({min_len}) must be below max_len ({max_len})")
    for value in ids:
        if not checks.is_int(value) or value < 0:
            raise ValueError(f"{fname}: token ids must be ints >= 0, got {value!r}")
