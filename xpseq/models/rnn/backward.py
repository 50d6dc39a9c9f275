"""The RNN encoder-decoder's backward pass, derived by hand.

Backpropagation through time over the decoder, in two loops. The forward loop runs
:func:`~xpseq.models.rnn.forward.decoder_step_parts` at every step and stacks what each step
saved (a tree: the step's input ``x``, the cell state it started from, the cell's gates, the
attention's values, ``u = [a_t; s_t]`` and ``tanh(W_u u)``). The backward loop runs
:func:`_decoder_step_back` in reverse and carries only the state's gradient.

A weight's gradient is a sum over steps of products ``aᵀ b``. Rather than add a small
product into a running sum at every step (what a library's differentiation of the loop
does), each step returns its fresh factors and every product is formed once for all steps
after the loop. Which factors meet in which product is a :class:`Term` list, a pure function
of the config (:func:`gradient_terms`) computed before either loop runs: each factor is
named either by its path in the forward step's saved tree (:class:`Saved`, read from the
forward loop's stack, never stacked twice) or by the name under which the backward step
returns it (:class:`Fresh`). Nothing inside a loop body decides the layout.

The encoder's two directions backpropagate through time in :func:`run_sequence`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, cast

import array_api_compat as compat

from xpseq.core import kernels, vjp
from xpseq.core.loops import scan as python_scan
from xpseq.core.loops import span_steps

from ..protocol import named_grads
from .config import Seq2SeqConfig, group_params, param_layout
from .forward import (
    attended_arrays,
    decoder_params,
    decoder_step_parts,
    encode_vjp,
    o_keep_mask,
    target_span,
)

__all__ = ["Saved", "Fresh", "Term", "gradient_terms", "fresh_names", "hand_derived_decoder",
           "run_sequence", "loss_vjp"]


@dataclasses.dataclass(frozen=True, init=False)
class Saved:
    """A factor the forward step saved, by its path in the step's saved tree:
    ``Saved("x")``, ``Saved("state", 0)`` (the ``h`` a step started from),
    ``Saved("att", "weights")``."""

    path: tuple[str | int, ...]

    def __init__(self, *path: str | int) -> None:
        object.__setattr__(self, "path", path)

    def find(self, saved: Any) -> Any:
        """The array at this path in ``saved`` (one step's tree, or the loop's stack)."""
        for key in self.path:
            saved = saved[key]
        return saved


@dataclasses.dataclass(frozen=True)
class Fresh:
    """A factor the backward step computes and returns under ``name``."""

    name: str


@dataclasses.dataclass(frozen=True)
class Term:
    """One addend of the gradient of ``(part, name)`` over all steps.

    With ``b``: the product ``Σ_t aₜᵀ bₜ`` over the steps and the rows of ``a (T, B, X)``
    and ``b (T, B, Y)``, giving ``(X, Y)``; ``batched``: one product per row instead,
    ``(B, X, Y)`` (the memory's and keys' gradients, one per sentence). Without ``b``:
    ``a`` summed over ``axes`` of its stack (``0`` is the steps).
    """

    part: str
    name: str
    a: Saved | Fresh
    b: Saved | Fresh | None = None
    batched: bool = False
    axes: tuple[int, ...] = (0, 1)


def gradient_terms(config: Seq2SeqConfig) -> tuple[Term, ...]:
    """The decoder's gradients over all steps, as terms (see the module docstring).

    ``part`` ``"encoded"`` names the encoder's outputs attention reads (``memory``,
    ``keys``); the others name parameters as :func:`~xpseq.models.rnn.config.param_layout`
    nests them. An LSTM's gate gradient is both ``W_ih x``'s and ``W_hh h``'s (``d_xw``); a
    GRU's recurrent half differs (``d_hw``).
    """
    kind = config.attention
    hw = Fresh("d_xw") if config.cell == "lstm" else Fresh("d_hw")
    terms = [Term("dec", "W_ih", Fresh("d_xw"), Saved("x")),
             Term("dec", "b_ih", Fresh("d_xw")),
             Term("dec", "W_hh", hw, Saved("state", 0)),
             Term("dec", "b_hh", hw)]
    if kind == "none":
        return tuple(terms)
    terms.append(Term("out", "W_u", Fresh("d_pre"), Saved("u")))
    terms.append(Term("encoded", "memory", Saved("att", "weights"), Fresh("d_context"),
                      batched=True))
    if kind == "additive":
        terms += [Term("att", "v", Fresh("d_v"), axes=(0,)),
                  Term("encoded", "keys", Fresh("d_keys"), axes=(0,)),
                  Term("att", "W_q", Fresh("d_pq"), Saved("att", "query"))]
    else:
        keys = "memory" if kind in ("dot", "scaled_dot") else "keys"
        terms.append(Term("encoded", keys, Fresh("d_s"), Saved("att", "query"), batched=True))
    return tuple(terms)


def fresh_names(terms: tuple[Term, ...]) -> tuple[str, ...]:
    """The names the backward step returns: every :class:`Fresh` factor of ``terms``, once."""
    names = [f.name for t in terms for f in (t.a, t.b) if isinstance(f, Fresh)]
    return tuple(dict.fromkeys(names))


def hand_derived_decoder(config: Seq2SeqConfig, *, scan: Callable[..., Any] | None,
                         custom_vjp: Callable[..., Any], xp: Any) -> Callable[..., Any]:
    """The decoder's time loop with its hand-derived gradient attached.

    Returns ``decoder(p, attended, mask, state0, emb, keep, span) -> o`` over
    :func:`~xpseq.models.rnn.forward.decoder_params`'s ``p``,
    :func:`~xpseq.models.rnn.forward.attended_arrays`'s memory (and keys), the source
    ``mask (B, S)``, the first state, time-major ``emb (T, B, E)``, ``keep (T, B, D)`` (or
    ``None``) and ``span``, with ``o (T, B, D)``: the loop the teacher-forced forward runs,
    made ``custom_vjp(fn, fwd, bwd)`` (``backend.custom_vjp``; JAX differentiates the rest
    of the loss itself) with :func:`_decoder_loop_rules`.

    ``span`` is ``(start, stop)`` (:func:`~xpseq.models.rnn.forward.target_span`) or ``None``
    for every step: the loops run only over the steps in it, and ``o`` is zero outside it. The loss
    reads no step outside it (every target there is padding), so the loss and its gradient
    are those of every step.
    """
    return cast(Callable[..., Any], custom_vjp(*_decoder_loop_rules(config, scan=scan, xp=xp)))


def _decoder_loop_rules(config: Seq2SeqConfig, *, scan: Callable[..., Any] | None,
                        xp: Any) -> tuple[Callable[..., Any], ...]:
    """``(decoder, fwd, bwd)``: the decoder's time loop (as :func:`hand_derived_decoder`
    takes it) and its hand-derived gradient in ``custom_vjp``'s convention,
    ``fwd(*args) -> (o, residuals)`` and ``bwd(residuals, d_o) -> d_args``.

    The forward loop stacks what every step saved; the backward loop runs
    :func:`_decoder_step_back` in reverse, carries only the state's gradient and stacks the
    fresh factors :func:`gradient_terms` names; :func:`_gradients` forms the terms after it.
    The embeddings' gradient is one product after the loop too.
    """
    loop = scan or python_scan
    terms = gradient_terms(config)
    names = fresh_names(terms)

    def run(p: dict[str, Any], attended: dict[str, Any], mask: Any, state0: dict[str, Any],
            emb: Any, keep: Any, span: Any, save: bool) -> Any:
        encoded = {**attended, "mask": mask}

        def body(state: dict[str, Any], inputs: tuple[Any, ...]) -> tuple[Any, ...]:
            emb_t, keep_t = inputs
            new, o, _, saved = decoder_step_parts(p, config, emb_t, state, encoded, keep_t,
                                                  xp=xp)
            return new, ((o, saved) if save else o)

        return loop(body, state0, (emb, keep), span=span)[1]

    def decoder(p: dict[str, Any], attended: dict[str, Any], mask: Any,
                state0: dict[str, Any], emb: Any, keep: Any, span: Any) -> Any:
        return run(p, attended, mask, state0, emb, keep, span, False)

    def fwd(p: dict[str, Any], attended: dict[str, Any], mask: Any, state0: dict[str, Any],
            emb: Any, keep: Any, span: Any) -> tuple[Any, ...]:
        o, saved = run(p, attended, mask, state0, emb, keep, span, True)
        return o, (p, attended, mask, state0, saved, keep, span)

    def bwd(residuals: tuple[Any, ...], d_o: Any) -> tuple[Any, ...]:
        p, attended, mask, state0, saved, keep, span = residuals
        encoded = {**attended, "mask": mask}

        def body(d_state: dict[str, Any], inputs: tuple[Any, ...]) -> tuple[Any, ...]:
            saved_t, keep_t, d_o_t = inputs
            d_prev, fresh = _decoder_step_back(p, config, encoded, saved_t, keep_t, d_state,
                                               d_o_t, xp=xp)
            return d_prev, tuple(fresh[n] for n in names)

        start = {k: xp.zeros_like(v) for k, v in state0.items()}
        d_state0, stacked = loop(body, start, (saved, keep, d_o), reverse=True, span=span)
        fresh = dict(zip(names, stacked))
        grads = _gradients(terms, fresh, saved, xp=xp)
        d_emb = fresh["d_xw"] @ p["dec"]["W_ih"][:, :config.embed]                # (T, B, E)
        d_encoded = grads.pop("encoded", {})
        d_attended = {k: d_encoded.get(k, xp.zeros_like(v)) for k, v in attended.items()}
        d_p = {part: {k: grads[part][k] for k in used} for part, used in p.items()}  # p's order
        return d_p, d_attended, None, d_state0, d_emb, None, None

    return decoder, fwd, bwd


def _decoder_step_back(g: Mapping[str, Any], config: Seq2SeqConfig, encoded: dict[str, Any],
                       saved: dict[str, Any], keep: Any, d_state: dict[str, Any], d_o: Any, *,
                       xp: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The backward pass of one decoder step from what
    :func:`~xpseq.models.rnn.forward.decoder_step_parts` saved, given ``d_state`` (the next
    step's state's gradient) and ``d_o`` (``o_t``'s from the output layer).

    Returns ``(d_state_prev, fresh)``: ``fresh`` holds the step's factors of
    :func:`gradient_terms` by name: ``d_xw`` (the gradient of ``W_ih x + b_ih``; the
    embedding's part of ``dx = d_xw W_ih`` is left to the caller), ``d_hw`` (a GRU's
    ``W_hh h + b_hh``), ``d_pre`` (``W_u u``'s), ``d_context`` and the attention's own
    (:func:`_attend_back`)."""
    dec, kind, luong = g["dec"], config.attention, config.style == "luong"
    fresh: dict[str, Any] = {}
    if config.input_feeding:
        d_o = d_o + d_state["o"]
    if keep is not None and config.dropout > 0:
        d_o = kernels.dropout(d_o, keep, config.dropout, xp=xp)
    d_h = d_state["h"]
    if kind == "none":
        d_h = d_h + d_o
    else:
        o = saved["tanh"]
        fresh["d_pre"] = d_pre = d_o * (1.0 - o * o)
        d_u = d_pre @ g["out"]["W_u"]
        width = encoded["memory"].shape[-1]
        fresh["d_context"], d_h = d_u[..., :width], d_h + d_u[..., width:]
        if luong:
            d_h = d_h + _attend_back(g, config, encoded, saved["att"], fresh, xp=xp)
    d_cell = (d_h, d_state["c"]) if config.cell == "lstm" else (d_h,)
    d_xw, d_hw, d_direct = vjp.CELL_BACKS[config.cell](saved["cell"], saved["state"], *d_cell,
                                                       xp=xp)
    fresh["d_xw"], fresh["d_hw"] = d_xw, d_hw
    d_h_prev = d_hw @ dec["W_hh"]
    if d_direct[0] is not None:
        d_h_prev = d_h_prev + d_direct[0]
    d_prev = {"h": d_h_prev}
    if config.cell == "lstm":
        d_prev["c"] = d_direct[1]
    if saved["x"].shape[-1] > config.embed:            # the attention's and o's columns
        d_rest = d_xw @ dec["W_ih"][:, config.embed:]
        if kind != "none" and not luong:
            width = encoded["memory"].shape[-1]
            fresh["d_context"] = fresh["d_context"] + d_rest[..., :width]
            d_prev["h"] = d_prev["h"] + _attend_back(g, config, encoded, saved["att"], fresh,
                                                     xp=xp)
            d_rest = d_rest[..., width:]
        if config.input_feeding:
            d_prev["o"] = d_rest
    return d_prev, fresh


def _attend_back(g: Mapping[str, Any], config: Seq2SeqConfig, encoded: dict[str, Any],
                 saved: dict[str, Any], fresh: dict[str, Any], *, xp: Any) -> Any:
    """The query's gradient from the context's (``fresh["d_context"]``); the factors of the
    memory's, keys' and attention's own gradients go into ``fresh`` (``d_s``; additive:
    ``d_v``, ``d_keys``, ``d_pq``).

    ``c = Σ_j w_j m_j`` gives ``dw_j = dc · m_j`` and ``dm_j += w_j dc``; the masked
    softmax, ``ds_j = w_j (dw_j - Σ_k w_k dw_k)``; a dot score ``s_j = λ q · k_j`` (``k =
    m`` or the keys ``W m``), ``dq = λ Σ_j ds_j k_j`` and ``dk_j += λ ds_j q``; the additive
    score ``s_j = v · a_j`` with ``a_j = tanh(W_q q + k_j)``, ``dv = Σ_j ds_j a_j``,
    ``dk_j = ds_j v ⊙ (1 - a_j²)`` and ``W_q q`` the sum of those over ``j``."""
    memory, kind, w = encoded["memory"], config.attention, saved["weights"]
    d_context = fresh["d_context"]
    d_w = xp.squeeze(memory @ xp.expand_dims(d_context, axis=-1), axis=-1)     # (B, S)
    d_s = vjp.softmax_back(w, d_w, xp=xp)
    if kind == "additive":
        hidden = saved["hidden"]                                               # (B, S, h)
        fresh["d_v"] = xp.sum(xp.expand_dims(d_s, axis=-1) * hidden, axis=(0, 1))
        fresh["d_keys"] = d_keys = (xp.expand_dims(d_s, axis=-1) * g["att"]["v"]
                                    * (1.0 - hidden * hidden))
        fresh["d_pq"] = d_pq = xp.sum(d_keys, axis=1)                          # (B, h)
        return d_pq @ g["att"]["W_q"]
    if kind == "scaled_dot":
        d_s = d_s * (1.0 / math.sqrt(config.decoder_size))
    fresh["d_s"] = d_s
    keys = "memory" if kind in ("dot", "scaled_dot") else "keys"
    return xp.squeeze(xp.expand_dims(d_s, axis=1) @ encoded[keys], axis=1)


def _gradients(terms: tuple[Term, ...], fresh: Mapping[str, Any], saved: Any, *,
               xp: Any) -> dict[str, dict[str, Any]]:
    """The terms over all steps as ``{part: {name: array}}``, from the backward loop's
    stacked ``fresh`` factors and the forward loop's stacked ``saved`` tree."""
    def factor(ref: Saved | Fresh) -> Any:
        return ref.find(saved) if isinstance(ref, Saved) else fresh[ref.name]

    grads: dict[str, dict[str, Any]] = {}
    for t in terms:
        a = factor(t.a)
        if t.b is None:           # axis by axis, the rows of each step first: the sums a
            value = a             # loop that summed every step's rows would form
            for axis in sorted(t.axes, reverse=True):
                value = xp.sum(value, axis=axis)
        elif t.batched:       # (T, B, X) and (T, B, Y) -> (B, X, Y)
            value = xp.permute_dims(a, (1, 2, 0)) @ xp.permute_dims(factor(t.b), (1, 0, 2))
        else:                 # one tensordot (XLA's CPU backend runs it faster than the
            value = xp.tensordot(a, factor(t.b), axes=([0, 1], [0, 1]))  # flattened product)
        part = grads.setdefault(t.part, {})
        part[t.name] = value if t.name not in part else part[t.name] + value
    return grads


def run_sequence(cell: str, p: Mapping[str, Any], xs: Any, lengths: Any,
                 state0: tuple[Any, ...], *, reverse: bool,
                 xp: Any) -> tuple[tuple[Any, tuple[Any, ...]], Callable[..., Any]]:
    """Backpropagation through time for :func:`xpseq.core.recurrent.run_sequence`.

    The forward loop is the runner's (:func:`xpseq.core.kernels.keep_valid` after every
    cell step); each step keeps its gates and the state it started from. Backward walks
    the steps in the opposite order. A step
    ``s_t = valid ? cell(s_{t-1}) : s_{t-1}`` routes ``ds_t`` into the cell where the step
    is real and straight through to ``s_{t-1}`` where it is padding; the output ``h`` of a
    real step adds its ``d_outputs`` to ``dh``. The input projection ``xw = xs W_ihᵀ + b_ih``
    of all steps is one :func:`xpseq.core.vjp.linear`, and so is its backward. The encoder's
    runner in :func:`loss_vjp` (:func:`~xpseq.models.rnn.forward.encode_vjp`).

    Returns ``((outputs (B, T, H), final_state), backprop)`` with
    ``backprop(d_outputs, d_final) -> (dxs, d_state0, {"W_ih", "b_ih", "W_hh", "b_hh"})``.
    The loop carries only the state's gradient (:func:`xpseq.core.vjp.sequence_step_back`
    each step);
    ``W_hh``'s and ``b_hh``'s gradients are one product and one sum over all steps after it
    (padded steps add zeros). The steps that are padding in every row (a batch padded past
    its longest sequence) are not run: their outputs and gradients are zero
    (:func:`xpseq.core.loops.span_steps`).
    """
    parts_of = kernels.PARTS[cell]
    steps = xs.shape[1]
    xw, linear_bp = vjp.linear(xs, p["W_ih"], p["b_ih"], xp=xp)               # (B, T, G H)
    valid = xp.expand_dims(kernels.sequence_mask(lengths, steps, xp=xp), axis=-1)  # (B, T, 1)
    # The steps that are padding in every row change nothing: they are skipped.
    run = span_steps(kernels.valid_span(xp.permute_dims(valid, (1, 0, 2)), xp=xp), steps)
    order = list(reversed(run)) if reverse else list(run)
    state, saved = tuple(state0), []
    outputs = [xp.zeros_like(state0[0])] * steps
    for t in order:
        new, parts = parts_of(xw[:, t, :], state, p, xp=xp)
        saved.append((t, parts, state))
        state, outputs[t] = kernels.keep_valid(new, state, valid[:, t, :], xp=xp)
    out = xp.stack(outputs, axis=1) if steps else xp.zeros(
        (xs.shape[0], 0, state0[0].shape[-1]), dtype=xs.dtype, device=compat.device(xs))

    def backprop(d_outputs: Any, d_final: tuple[Any, ...]) -> tuple[Any, ...]:
        grads = {"W_hh": xp.zeros_like(p["W_hh"]), "b_hh": xp.zeros_like(p["b_hh"])}
        if not steps:
            return (xp.zeros_like(xs), tuple(d_final),
                    {**grads, "W_ih": xp.zeros_like(p["W_ih"]),
                     "b_ih": xp.zeros_like(p["b_ih"])})
        d_state = tuple(d_final)
        d_xw: list[Any] = [xp.zeros_like(xw[:, 0, :])] * steps
        d_hw, h_prev = [], []
        for t, parts, prev in reversed(saved):
            d_state, d_xw[t], d_hw_t = vjp.sequence_step_back(
                cell, parts, prev, p["W_hh"], d_state, d_outputs[:, t, :], valid[:, t, :],
                xp=xp)
            d_hw.append(d_hw_t)
            h_prev.append(prev[0])
        if d_hw:
            dhw = xp.stack(d_hw, axis=0)                                 # (steps run, B, G H)
            grads = {"W_hh": xp.tensordot(dhw, xp.stack(h_prev, axis=0), axes=([0, 1], [0, 1])),
                     "b_hh": xp.sum(dhw, axis=(0, 1))}
        dxs, grads["W_ih"], grads["b_ih"] = linear_bp(xp.stack(d_xw, axis=1))
        return dxs, d_state, grads

    return (out, state), backprop


def loss_vjp(params: Mapping[str, Any], config: Seq2SeqConfig, batch: Mapping[str, Any],
             keep: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """The loss and its backprop: ``backprop(d_loss) -> grads``.

    The encoder's two directions are :func:`run_sequence`; the decoder's loop
    runs :func:`_decoder_loop_rules`' forward and backward. JAX and PyTorch run the same
    forward (:func:`~xpseq.models.rnn.forward.encode_vjp`,
    :func:`~xpseq.models.rnn.forward.decoder_step_parts`) and drop the callbacks; only NumPy
    and array_api_strict call them. Each callback returns its gradients nested as
    :func:`~xpseq.models.rnn.config.param_layout` nests the parameters;
    :func:`xpseq.models.protocol.named_grads` names and sums them.
    """
    keep = o_keep_mask(keep)
    g = group_params(params, config)
    src, src_len, tgt_in = batch["src"], batch["src_len"], batch["tgt_in"]
    encoded, encode_bp = encode_vjp(g, config, src, src_len, runner=run_sequence, xp=xp)
    emb, emb_bp = vjp.embedding(tgt_in, g["tgt_embed"], xp=xp)                # (B, T, E)
    _, decoder_fwd, decoder_bwd = _decoder_loop_rules(config, scan=None, xp=xp)
    o, residuals = decoder_fwd(decoder_params(g, config), attended_arrays(encoded), encoded["mask"],
                               encoded["state"], xp.permute_dims(emb, (1, 0, 2)),
                               None if keep is None else xp.permute_dims(keep, (1, 0, 2)),
                               target_span(batch, config, xp))
    logits, out_bp = vjp.linear(xp.permute_dims(o, (1, 0, 2)), g["out"]["W"], g["out"]["b"],
                                xp=xp)
    (total, count), nll_bp = vjp.nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp,
                                         smoothing=config.label_smoothing)
    denom = xp.maximum(count, xp.ones_like(count))

    def backprop(d_loss: Any) -> dict[str, Any]:
        d_logits, _ = nll_bp(d_loss / denom)
        d_out, d_W, d_b = out_bp(d_logits)
        d_p, d_encoded, _, d_state, d_emb, _, _ = decoder_bwd(
            residuals, xp.permute_dims(d_out, (1, 0, 2)))
        trees: list[Any] = [{"out": {"W": d_W, "b": d_b}}, d_p,
                            {"tgt_embed": emb_bp(xp.permute_dims(d_emb, (1, 0, 2)))[1]},
                            encode_bp(d_encoded, d_state)]
        return named_grads(param_layout(config, str), params, trees)

    return total / denom, backprop

