"""The RNN encoder-decoder's forward kernels, over grouped parameters.

The encoder (:func:`encode_vjp`, with its backprop callback for the hand-derived path),
one decoder step (:func:`decoder_step_parts`, which also returns what its backward reads)
and its attention (:func:`_attend_parts`); the decoder as the model protocol's pure step
(:func:`decoder`) and the shapes of its state (:func:`decoder_spec`). Every function
takes ``xp``; none knows which library it runs on. The architecture is in the package's
docstring (:mod:`xpseq.models.rnn`).

These are the package's internals, shared with :mod:`xpseq.models.rnn.backward` and
:mod:`xpseq.models.rnn.model`; the public API is the package's (:mod:`xpseq.models.rnn`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from xpseq.core import checks, delegation, kernels, vjp

from .config import Seq2SeqConfig, group_params

# No __all__: the package's function ``forward`` (xpseq.models.rnn.forward) hides this
# module's name in the API reference, and its names are the package's internals (above).


def decoder_step(g: Mapping[str, Any], config: Seq2SeqConfig, emb: Any,
                 state: dict[str, Any], encoded: dict[str, Any], keep: Any, *,
                 xp: Any) -> tuple[dict[str, Any], Any, Any]:
    """One step from an embedded input ``emb (B, E)``: ``(new state, o_t (B, D), attention
    weights (B, S) or None)``."""
    return decoder_step_parts(g, config, emb, state, encoded, keep, xp=xp)[:3]


def decoder(params: Mapping[str, Any], config: Seq2SeqConfig, encoded: dict[str, Any], *,
            attention: bool = True, max_len: int | None = None,
            xp: Any) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The decoder as the protocol's pure step over ``encoded``, and its first state."""
    g = group_params(params, config)

    def step(state: dict[str, Any], y: Any) -> tuple[Any, ...]:
        emb = kernels.embedding(y, params["tgt_embed"], xp=xp)
        state, o, weights = decoder_step(g, config, emb, state, encoded, None, xp=xp)
        logits = kernels.linear(o, params["out.W"], params["out.b"], xp=xp)
        return kernels.log_softmax(logits, axis=-1, xp=xp), state, weights if attention else None

    return step, encoded["state"]


def decoder_spec(config: Seq2SeqConfig) -> dict[str, dict[str, tuple[int | str, ...]]]:
    """The shapes of what :func:`encode_vjp` returns and of the decoder's state, by dotted
    name (``"batch"`` and ``"src_len"`` symbolic): the memory ``(B, S, 2H)``, its keep-mask,
    the keys attention projects once (``general``, ``additive``: ``(B, S, D)``), and the
    state ``h`` (and ``c`` for an LSTM, ``o`` with input feeding), each ``(B, D)``."""
    D, M = config.decoder_size, 2 * config.hidden
    state: dict[str, tuple[int | str, ...]] = {"h": ("batch", D)}
    if config.cell == "lstm":
        state["c"] = ("batch", D)
    if config.input_feeding:
        state["o"] = ("batch", D)
    encoded: dict[str, tuple[int | str, ...]] = {"memory": ("batch", "src_len", M),
                                                  "mask": ("batch", "src_len")}
    encoded.update({f"state.{k}": v for k, v in state.items()})
    if config.attention in ("general", "additive"):
        encoded["keys"] = ("batch", "src_len", D)
    return {"encoded": encoded, "state": state}


def decoder_params(g: Mapping[str, Any], config: Seq2SeqConfig) -> dict[str, Any]:
    """The grouped parameters a decoder step reads: the cell, ``out.W_u`` (with attention)
    and additive attention's ``att.W_q`` and ``att.v``."""
    used: dict[str, Any] = {"dec": dict(g["dec"])}
    if config.attention != "none":
        used["out"] = {"W_u": g["out"]["W_u"]}
    if config.attention == "additive":
        used["att"] = {k: g["att"][k] for k in ("W_q", "v")}
    return used


def attended_arrays(encoded: Mapping[str, Any]) -> dict[str, Any]:
    """What attention reads of the encoder's output: the memory ``(B, S, 2H)`` (and the
    projected keys ``(B, S, D)``)."""
    return {k: encoded[k] for k in ("memory", "keys") if k in encoded}


def target_span(batch: Mapping[str, Any], config: Seq2SeqConfig,
                xp: Any) -> tuple[Any, Any]:
    """The decoder steps the loss reads: from the first to the last where some row of
    ``tgt_out`` is a real token (:func:`xpseq.core.kernels.valid_span`)."""
    return kernels.valid_span(xp.permute_dims(batch["tgt_out"] != config.pad_id, (1, 0)),
                              xp=xp)


def encode_vjp(g: Mapping[str, Any], config: Seq2SeqConfig, src: Any, src_len: Any, *,
               runner: Callable[..., Any], xp: Any, fused: bool = False,
               scan: Callable[..., Any] | None = None
               ) -> tuple[dict[str, Any], Callable[..., Any]]:
    """The encoder's value (see :func:`xpseq.models.rnn.model.encode`: ``memory (B, S, 2H)``,
    ``mask (B, S)``, ``keys``, ``state``) from ``src (B, S)``, the grouped parameters ``g`` and
    ``backprop(d_encoded, d_state) -> grads`` (``src_embed``, ``enc_fwd``, ``enc_bwd`` and
    the attention's keys projection). ``runner`` runs one direction:
    :func:`xpseq.models.rnn.backward.run_sequence`, or the ``scan``-based runner (which
    returns no backprop) on the autodiff backends; ``fused``: both directions at once (no
    backprop then), by the library's kernel where
    :func:`xpseq.core.delegation.fused_recurrence` applies, else on NumPy's arrays in one
    loop over time (:func:`xpseq.core.kernels.run_both_directions` with ``scan``)."""
    x, emb_bp = vjp.embedding(src, g["src_embed"], xp=xp)                  # (B, S, E)
    zeros = kernels.initial_zeros(config.cell, config.hidden, x, xp=xp)
    directions = [(g["enc_fwd"], False), (g["enc_bwd"], True)]
    # One loop for both directions where every step is a trip through Python on NumPy's
    # arrays (NumPy's search: 1.43x -> 1.29x the phonemize cost of the homograph model).
    # Not where the loop is compiled: JAX's scan of two 2-D products a step was 10-15 %
    # faster than one stacked product for batches of 64 and 256 sentences, and an export
    # keeps the graph of 2-D products (onnxruntime's Gemm) that its benchmarks measured.
    both = fused and (
        delegation.fused_recurrence(config.cell, directions, x, src_len, zeros, xp=xp)
        or (checks.library(xp) in ("numpy", "array_api_strict")
            and kernels.run_both_directions(config.cell, g["enc_fwd"], g["enc_bwd"], x,
                                            src_len, zeros, scan=scan, xp=xp)))
    runs: list[Any] = [(run, None) for run in both] if both else [
        runner(config.cell, p, x, src_len, zeros, reverse=r, xp=xp) for p, r in directions]
    ((fwd_out, fwd_state), fwd_bp), ((bwd_out, bwd_state), bwd_bp) = runs
    memory, memory_bp = vjp.concat([fwd_out, bwd_out], xp=xp)                # (B, S, 2H)
    joined = [vjp.concat([f, b], xp=xp) for f, b in zip(fwd_state, bwd_state)]
    encoded = {"memory": memory, "mask": kernels.sequence_mask(src_len, src.shape[1], xp=xp,
                                                              like=src, axis=1),
               "state": _state_dict(config, tuple(s for s, _ in joined), xp=xp)}
    keys_name = {"general": "W", "additive": "W_k"}.get(config.attention)
    if keys_name:                                      # (B, S, D): W m_j, once per sentence
        encoded["keys"], keys_bp = vjp.linear(memory, g["att"][keys_name], None, xp=xp)

    def backprop(d_encoded: dict[str, Any], d_state: dict[str, Any]) -> dict[str, Any]:
        grads: dict[str, Any] = {}
        d_memory = d_encoded["memory"]
        if keys_name:
            d_keys_memory, d_W, _ = keys_bp(d_encoded["keys"])
            d_memory = d_memory + d_keys_memory
            grads["att"] = {keys_name: d_W}
        d_fwd_out, d_bwd_out = memory_bp(d_memory)
        names = ("h", "c") if config.cell == "lstm" else ("h",)
        halves = [bp(d_state[n]) for n, (_, bp) in zip(names, joined)]
        dx_fwd, _, grads["enc_fwd"] = fwd_bp(d_fwd_out, tuple(f for f, _ in halves))
        dx_bwd, _, grads["enc_bwd"] = bwd_bp(d_bwd_out, tuple(b for _, b in halves))
        grads["src_embed"] = emb_bp(dx_fwd + dx_bwd)[1]
        return grads

    return encoded, backprop


def decoder_step_parts(g: Mapping[str, Any], config: Seq2SeqConfig, emb: Any,
                       state: dict[str, Any], encoded: dict[str, Any], keep: Any, *,
                       xp: Any) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
    """One decoder step: ``(new_state, o_t, attention weights or None, saved)``, where
    ``saved`` (a dict of arrays) is what :func:`_decoder_step_back` needs: the step's
    input ``x``, the cell state it started from, the cell's gates, the attention's values
    and ``u = [a_t; s_t]`` and ``tanh(W_u u)``."""
    dec, kind, luong = g["dec"], config.attention, config.style == "luong"
    cell_state = (state["h"], state["c"]) if config.cell == "lstm" else (state["h"],)
    saved: dict[str, Any] = {"state": cell_state}
    weights = None
    pieces = [emb]
    if kind != "none" and not luong:   # bahdanau: attend with the previous state
        context, weights, saved["att"] = _attend_parts(g, config, cell_state[0], encoded, xp=xp)
        pieces.append(context)
    if config.input_feeding:
        pieces.append(state["o"])
    saved["x"] = x = xp.concat(pieces, axis=-1)
    xw = kernels.linear(x, dec["W_ih"], dec["b_ih"], xp=xp)
    parts = kernels.PARTS[config.cell]
    new_cell, saved["cell"] = parts(xw, cell_state, dec, xp=xp)
    if kind == "none":
        o = new_cell[0]
    else:
        if luong:                      # luong: attend with the new state
            context, weights, saved["att"] = _attend_parts(g, config, new_cell[0], encoded,
                                                           xp=xp)
        saved["u"] = u = xp.concat([context, new_cell[0]], axis=-1)
        saved["tanh"] = o = xp.tanh(kernels.linear(u, g["out"]["W_u"], None, xp=xp))
    if keep is not None and config.dropout > 0:
        o = kernels.dropout(o, keep, config.dropout, xp=xp)
    return _state_dict(config, new_cell, xp=xp, o=o), o, weights, saved


def _attend_parts(g: Mapping[str, Any], config: Seq2SeqConfig, query: Any,
                  encoded: dict[str, Any], *, xp: Any) -> tuple[Any, Any, dict[str, Any]]:
    """Context ``(B, 2H)`` and weights ``(B, S)`` for a query ``(B, D)``, and what
    :func:`_attend_back` needs (the query, the weights, additive attention's ``tanh``)."""
    memory, kind = encoded["memory"], config.attention
    q = xp.expand_dims(query, axis=1)                                      # (B, 1, D)
    saved: dict[str, Any] = {"query": query}
    if kind in ("dot", "scaled_dot"):
        scale = None if kind == "dot" else 1.0 / math.sqrt(config.decoder_size)
        scores = kernels.dot_scores(q, memory, scale, xp=xp)
    elif kind == "general":
        scores = kernels.dot_scores(q, encoded["keys"], None, xp=xp)       # sᵀ (W m_j)
    else:  # additive: vᵀ tanh(W_q s + W_k m_j)
        pq = kernels.linear(query, g["att"]["W_q"], None, xp=xp)
        saved["hidden"] = hidden = xp.tanh(xp.expand_dims(pq, axis=1) + encoded["keys"])
        scores = xp.expand_dims(hidden @ g["att"]["v"], axis=1)            # (B, 1, S)
    weights = kernels.masked_softmax(scores, xp.expand_dims(encoded["mask"], axis=1), xp=xp)
    context = xp.squeeze(weights @ memory, axis=1)                         # (B, 2H)
    saved["weights"] = weights = xp.squeeze(weights, axis=1)               # (B, S)
    return context, weights, saved


def _state_dict(config: Seq2SeqConfig, cell_state: tuple[Any, ...], *, xp: Any,
                o: Any = None) -> dict[str, Any]:
    state = {"h": cell_state[0]}
    if config.cell == "lstm":
        state["c"] = cell_state[1]
    if config.input_feeding:
        state["o"] = xp.zeros_like(cell_state[0]) if o is None else o
    return state


def o_keep_mask(keep: Any) -> Any:
    """The ``o_t`` keep-mask ``(B, T, D)`` from an array or from ``{"o": array}`` (the
    protocol's form); ``None`` stays ``None``."""
    return keep.get("o") if isinstance(keep, Mapping) else keep
