"""The Transformer's layers, each as a (value, backprop) pair over grouped parameters.

The embedding, a pre- or post-LN sublayer, self- and cross-attention, the feed-forward
block, the encoder, the cross-attention keys and values, and one decoder for teacher forcing
and for a search step with its key/value cache (:func:`decoder_forward`); :func:`loss_vjp`
composes them into the loss and its hand-derived gradient. JAX and PyTorch run the same
functions and drop the callbacks. The attention layer's chain of rules is
:func:`xpseq.models.transformer.backward.attention_over_heads`. ``scan`` (the backend's
``backend.scan``, or ``None`` for the arrays' own loop) is blockwise attention's loop over
blocks.

:func:`encoder_vjp`, :func:`cross_keys_vjp`, :func:`decoder_forward` and :func:`loss_vjp`
are shared with :mod:`xpseq.models.transformer.model`: public names, internal to the
package (its API is what :mod:`xpseq.models.transformer` exports)."""

from __future__ import annotations

import math
from typing import Any, Callable, Container, Mapping

import array_api_compat as compat

from xpseq.core import kernels, shapes, vjp

from ..protocol import (
    named_grads,
)
from .backward import attention_over_heads
from .config import (
    AUTO_KEYS,
    LN_EPS,
    TransformerConfig,
    group_params,
    param_layout,
)

__all__ = ["encoder_vjp", "cross_keys_vjp", "decoder_forward", "loss_vjp"]

# ------------------------------------------------------- the layers with their backprop
#
# Each function computes its part through the (value, backprop) rules of xpseq.core.vjp;
# the autodiff backends and the search run the same functions and drop the callbacks, so
# the wiring is written once. A backprop returns the gradient of its input and those of
# its parameters, nested as they are.


def _embed_vjp(table: Any, pos: Any, config: TransformerConfig, ids: Any, keep: Any, *,
               xp: Any, offset: Any = None) -> tuple[Any, Callable[..., Any]]:
    """``E[ids] · sqrt(d) + PE[positions]`` then dropout: ``(B, T, d)`` from ``ids (B, T)``
    at positions ``0 .. T-1``, shifted by ``offset (B,)`` (a decoder step); ``pos`` is the
    learned table or ``None``. ``backprop(dx) -> (d_table, d_pos or None)``."""
    scale = math.sqrt(config.d_model)
    emb, emb_bp = vjp.embedding(ids, table, xp=xp)
    steps = shapes.positions(ids, -1, xp=xp)
    positions = steps if offset is None else xp.expand_dims(offset, axis=-1) + steps
    if pos is not None:
        pe, pos_bp = vjp.embedding(positions, pos, xp=xp)
    else:
        pe = kernels.sinusoidal_positions(positions, config.d_model, emb.dtype, xp=xp)
    x = emb * scale + pe
    drop_bp = None
    if keep is not None:
        x, drop_bp = vjp.dropout(x, keep, config.dropout, xp=xp)

    def backprop(dx: Any) -> tuple[Any, Any]:
        if drop_bp is not None:
            (dx, _) = drop_bp(dx)
        d_table = emb_bp(dx * scale)[1]
        if pos is None:
            return d_table, None
        d_pe = dx if offset is not None or dx.ndim == 2 else xp.sum(dx, axis=0)
        return d_table, pos_bp(d_pe)[1]

    return x, backprop


def _sublayer_vjp(config: TransformerConfig, x: Any, ln: Mapping[str, Any], keep: Any,
                  body: Callable[..., Any], *, xp: Any) -> tuple[Any, Any, Callable[..., Any]]:
    """One residual sublayer, pre-LN ``x + drop(body(LN(x)))`` or post-LN
    ``LN(x + drop(body(x)))``, with ``body(h) -> (y, aux, body_bp)`` and
    ``body_bp(dy) -> (dh, g)``. Returns ``(out, aux, backprop)``;
    ``backprop(d_out) -> (dx, {"g", "b"}, g)``."""
    if config.norm == "pre":
        h, ln_bp = vjp.layer_norm(x, ln["g"], ln["b"], LN_EPS, xp=xp)
        y, aux, body_bp = body(h)
    else:
        y, aux, body_bp = body(x)
    drop_bp = None
    if keep is not None:
        y, drop_bp = vjp.dropout(y, keep, config.dropout, xp=xp)
    out = x + y
    if config.norm == "post":
        out, ln_bp = vjp.layer_norm(out, ln["g"], ln["b"], LN_EPS, xp=xp)

    def backprop(d_out: Any) -> tuple[Any, dict[str, Any], Any]:
        if config.norm == "post":
            d_out, d_g, d_b = ln_bp(d_out)
        d_y = d_out if drop_bp is None else drop_bp(d_out)[0]
        d_in, g = body_bp(d_y)
        if config.norm == "pre":
            d_h, d_g, d_b = ln_bp(d_in)
            return d_out + d_h, {"g": d_g, "b": d_b}, g
        return d_out + d_in, {"g": d_g, "b": d_b}, g

    return out, aux, backprop


def _scale(config: TransformerConfig) -> float:
    """Scaled dot-product attention's ``1 / sqrt(d_model / heads)``."""
    return 1.0 / math.sqrt(config.d_model // config.heads)


def _block(config: TransformerConfig, keys: Any) -> int | None:
    """The block size of blockwise attention over ``keys`` keys (``config.attention``), or
    ``None`` for the plain path (which a length unknown at trace time also takes)."""
    if config.attention == "plain" or not isinstance(keys, int):
        return None
    if config.attention == "blockwise" or keys > AUTO_KEYS:
        return config.attention_block
    return None


def _self_attention(p: Mapping[str, Any], config: TransformerConfig, keep: Any,
                    extend: Callable[..., Any] | None, *, xp: Any, causal: bool = False,
                    custom_vjp: Callable[..., Any] | None = None,
                    scan: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """``body(h)`` for :func:`_sublayer_vjp`: attention of ``h`` over itself, ``aux`` the
    keys and values attended over. ``extend(kh, vh) -> (kh, vh)`` places the new keys and
    values among those of earlier positions (a decoder step's cache); ``None`` attends to
    ``h``'s own (the encoder, teacher forcing: the only case that backpropagates).
    ``causal``: each position attends to itself and those before it. ``custom_vjp``
    (``backend.custom_vjp``, under a library's own differentiation): the blockwise path's
    context carries its hand-derived backward
    (:func:`xpseq.core.blockwise.hand_derived_attention`). ``scan``: the blockwise path's
    loop over blocks (``backend.scan``)."""
    def body(h: Any) -> tuple[Any, ...]:
        kh, k_bp = vjp.heads(h, p["W_k"], p["b_k"], config.heads, xp=xp)
        vh, v_bp = vjp.heads(h, p["W_v"], p["b_v"], config.heads, xp=xp)
        if extend is not None:
            kh, vh = extend(kh, vh)
        block = _block(config, kh.shape[-2])
        (out, _), att_bp = attention_over_heads(p, h, kh, vh, keep, config.heads,
                                                _scale(config), xp=xp, causal=causal,
                                                need_weights=block is None, block=block,
                                                custom_vjp=custom_vjp, scan=scan)

        def body_bp(dy: Any) -> tuple[Any, dict[str, Any]]:
            dq, d_kh, d_vh, g = att_bp(dy)
            dk, g["W_k"], g["b_k"] = k_bp(d_kh)
            dv, g["W_v"], g["b_v"] = v_bp(d_vh)
            return dq + dk + dv, g

        return out, (kh, vh), body_bp

    return body


def _cross_attention(p: Mapping[str, Any], config: TransformerConfig, kv: tuple[Any, Any],
                     keep: Any, need_weights: bool, *, xp: Any,
                     custom_vjp: Callable[..., Any] | None = None,
                     scan: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """``body(h)`` for :func:`_sublayer_vjp`: attention of ``h`` over the memory's keys and
    values ``kv`` (see :func:`cross_keys_vjp`); ``aux`` the weights (``None`` without
    ``need_weights``); ``body_bp(dy) -> (dh, (g, d_kh, d_vh))``; ``custom_vjp`` and
    ``scan`` as in :func:`_self_attention`."""
    def body(h: Any) -> tuple[Any, ...]:
        block = None if need_weights else _block(config, kv[0].shape[-2])
        (out, weights), att_bp = attention_over_heads(p, h, *kv, keep, config.heads,
                                                      _scale(config), xp=xp,
                                                      need_weights=need_weights, block=block,
                                                      custom_vjp=custom_vjp, scan=scan)

        def body_bp(dy: Any) -> tuple[Any, tuple[Any, ...]]:
            dh, d_kh, d_vh, g = att_bp(dy)
            return dh, (g, d_kh, d_vh)

        return out, weights, body_bp

    return body


def _feed_forward(p: Mapping[str, Any], config: TransformerConfig, keep_hidden: Any, *,
                  xp: Any) -> Callable[..., Any]:
    """``body(h)`` for :func:`_sublayer_vjp`: the position-wise feed-forward block."""
    def body(h: Any) -> tuple[Any, ...]:
        y, ff_bp = vjp.feed_forward(p, h, config.activation, keep_hidden, config.dropout,
                                    xp=xp)
        return y, None, ff_bp

    return body


def encoder_vjp(g: Mapping[str, Any], config: TransformerConfig, src: Any, src_len: Any,
                keep: Mapping[str, Any] | None, *, xp: Any,
                custom_vjp: Callable[..., Any] | None = None,
                scan: Callable[..., Any] | None = None,
                ) -> tuple[Any, Any, Callable[..., Any]]:
    """The encoder: ``memory (B, S, d)`` after the final norm, the source keep-mask
    ``(B, 1, S)``, and ``backprop(d_memory) -> grads`` (``src_embed``, ``pos``, ``enc``,
    ``enc_ln`` of :func:`param_layout`); ``custom_vjp`` and ``scan`` as in
    :func:`_self_attention`."""
    keep = keep or {}
    src_keep = xp.expand_dims(kernels.sequence_mask(src_len, src.shape[1], xp=xp, like=src,
                                                    axis=1), axis=-2)
    x, emb_bp = _embed_vjp(g["src_embed"], g.get("pos"), config, src, keep.get("src_emb"),
                           xp=xp)
    tape = []
    for i, p in enumerate(g["enc"]):
        x, _, att_bp = _sublayer_vjp(config, x, p["ln1"], keep.get(f"enc{i}.att"),
                                     _self_attention(p["att"], config, src_keep, None, xp=xp,
                                                     custom_vjp=custom_vjp, scan=scan), xp=xp)
        x, _, ff_bp = _sublayer_vjp(config, x, p["ln2"], keep.get(f"enc{i}.ff"),
                                    _feed_forward(p["ff"], config, keep.get(f"enc{i}.ff_hidden"),
                                                  xp=xp), xp=xp)
        tape.append((att_bp, ff_bp))
    memory, final_bp = vjp.layer_norm(x, g["enc_ln"]["g"], g["enc_ln"]["b"], LN_EPS, xp=xp)

    def backprop(d_memory: Any) -> dict[str, Any]:
        dx, d_g, d_b = final_bp(d_memory)
        layers: list[Any] = []
        for att_bp, ff_bp in reversed(tape):
            dx, ln2, ff = ff_bp(dx)
            dx, ln1, att = att_bp(dx)
            layers.insert(0, {"att": att, "ln1": ln1, "ff": ff, "ln2": ln2})
        grads = {"enc": layers, "enc_ln": {"g": d_g, "b": d_b}}
        grads["src_embed"], d_pos = emb_bp(dx)
        if d_pos is not None:
            grads["pos"] = d_pos
        return grads

    return memory, src_keep, backprop


def cross_keys_vjp(g: Mapping[str, Any], config: TransformerConfig, memory: Any, *,
                   xp: Any) -> tuple[list[Any], Callable[..., Any]]:
    """Each decoder layer's cross-attention keys and values ``(B, h, S, d/h)``, projected
    from ``memory (B, S, d)`` once for all target positions (a training batch, a search),
    and ``backprop(d_kv) -> (d_memory, grads)`` (``d_kv`` a list like the first result)."""
    kv, rules = [], []
    for p in g["dec"]:
        kh, k_bp = vjp.heads(memory, p["cross"]["W_k"], p["cross"]["b_k"], config.heads, xp=xp)
        vh, v_bp = vjp.heads(memory, p["cross"]["W_v"], p["cross"]["b_v"], config.heads, xp=xp)
        kv.append((kh, vh))
        rules.append((k_bp, v_bp))

    def backprop(d_kv: list[Any]) -> tuple[Any, dict[str, Any]]:
        d_memory, layers = None, []
        for (k_bp, v_bp), (d_kh, d_vh) in zip(rules, d_kv):
            dk, d_Wk, d_bk = k_bp(d_kh)
            dv, d_Wv, d_bv = v_bp(d_vh)
            d_memory = dk + dv if d_memory is None else d_memory + dk + dv
            layers.append({"cross": {"W_k": d_Wk, "b_k": d_bk, "W_v": d_Wv, "b_v": d_bv}})
        return d_memory, {"dec": layers}

    return kv, backprop


def decoder_forward(g: Mapping[str, Any], config: TransformerConfig, tgt: Any, cross: list[Any],
                    src_keep: Any, *, xp: Any, keep: Mapping[str, Any] | None = None,
                    cache: Mapping[str, Any] | None = None, capacity: int | None = None,
                    weights_of: Container[int] = (),
                    custom_vjp: Callable[..., Any] | None = None,
                    scan: Callable[..., Any] | None = None,
                    ) -> tuple[Any, list[Any], Any, Callable[..., Any]]:
    """The decoder from target ids to logits: the one forward of training (teacher forcing),
    of its hand-derived backward and of the search step.

    Parameters
    ----------
    g : the parameters grouped by :func:`group_params`
    tgt : ``(B, T)`` target ids
    cross : each layer's cross-attention keys and values (:func:`cross_keys_vjp`)
    src_keep : ``(B, 1, S)`` the real source positions
    keep : the dropout keep-masks of :func:`dropout_shapes`, or ``None``
    cache : ``None`` for teacher forcing: ``tgt`` is a whole input ``<s> y_1 ...`` and each
        position attends to itself and those before it. Or the step's state ``{"t": (B,),
        "k{i}", "v{i}": (B, h, L, d/h)}``: ``tgt`` is one position per row, ``(B, 1)`` at
        position ``t``, and attends to the keys and values the cache holds of positions
        ``< t`` and to its own, which it adds: written with ``where`` at ``t`` in a cache
        of fixed ``capacity`` (``L = capacity``: one shape, so that a compiled loop traces
        the step once), or appended with ``capacity=None`` (``L = t``: an eager loop reads
        only the positions decoded so far).
    weights_of : the layers whose cross-attention weights to return
    custom_vjp : as in :func:`_self_attention` (teacher forcing under autodiff)
    scan : ``backend.scan``, optional: blockwise attention's loop over blocks (``None``:
        :func:`xpseq.core.delegation.scan`)

    Returns
    -------
    logits : ``(B, T, V_tgt)``
    weights : per layer the cross-attention weights ``(B, h, T, S)`` (``None`` for the
        layers not in ``weights_of``)
    cache : the next step's state (``None`` without a cache)
    backprop : ``backprop(d_logits) -> (d_cross, grads)`` (teacher forcing only)
    """
    keep = keep or {}
    t, device = tgt.shape[1], compat.device(tgt)
    here = None         # bound on every path: torch.compile reads extend's closure whole
    if cache is None:
        self_keep, offset, new_cache = None, None, None                # causal: k <= q
    else:
        if t != 1:
            raise ValueError(f"decoder_forward: a cached step takes one position per row, "
                             f"got tgt of shape {tuple(tgt.shape)}")
        offset, new_cache = cache["t"], {"t": cache["t"] + 1}
        self_keep = None                                             # growing: every key
        if capacity is not None:                                     # fixed: k <= t
            positions = xp.arange(capacity, dtype=offset.dtype, device=device)
            here = xp.reshape(positions, (1, 1, capacity, 1)) == xp.reshape(offset,
                                                                             (-1, 1, 1, 1))
            self_keep = xp.expand_dims(xp.expand_dims(positions, axis=0)
                                       <= xp.expand_dims(offset, axis=-1), axis=-2)  # (B, 1, L)

    def extend(i: int) -> Callable[..., Any] | None:
        if cache is None:
            return None
        old_k, old_v = cache[f"k{i}"], cache[f"v{i}"]
        if capacity is None:
            return lambda kh, vh: (xp.concat([old_k, kh], axis=2), xp.concat([old_v, vh], axis=2))
        return lambda kh, vh: (xp.where(here, kh, old_k), xp.where(here, vh, old_v))

    x, emb_bp = _embed_vjp(g["tgt_embed"], g.get("pos"), config, tgt, keep.get("tgt_emb"),
                           xp=xp, offset=offset)
    tape, weights = [], []
    for i, p in enumerate(g["dec"]):
        x, kv, self_bp = _sublayer_vjp(config, x, p["ln1"], keep.get(f"dec{i}.self"),
                                       _self_attention(p["self"], config, self_keep, extend(i),
                                                       xp=xp, causal=cache is None,
                                                       custom_vjp=custom_vjp, scan=scan), xp=xp)
        if new_cache is not None:
            new_cache[f"k{i}"], new_cache[f"v{i}"] = kv
        x, w, cross_bp = _sublayer_vjp(config, x, p["ln2"], keep.get(f"dec{i}.cross"),
                                       _cross_attention(p["cross"], config, cross[i], src_keep,
                                                        i in weights_of, xp=xp,
                                                        custom_vjp=custom_vjp, scan=scan),
                                       xp=xp)
        x, _, ff_bp = _sublayer_vjp(config, x, p["ln3"], keep.get(f"dec{i}.ff"),
                                    _feed_forward(p["ff"], config, keep.get(f"dec{i}.ff_hidden"),
                                                  xp=xp), xp=xp)
        weights.append(w)
        tape.append((self_bp, cross_bp, ff_bp))
    x, final_bp = vjp.layer_norm(x, g["dec_ln"]["g"], g["dec_ln"]["b"], LN_EPS, xp=xp)
    logits, out_bp = vjp.linear(x, g["out"]["W"], g["out"]["b"], xp=xp)

    def backprop(d_logits: Any) -> tuple[list[Any], dict[str, Any]]:
        dx, d_W, d_b = out_bp(d_logits)
        dx, d_g, d_b_ln = final_bp(dx)
        layers: list[Any]
        d_cross: list[Any]
        layers, d_cross = [], []
        for self_bp, cross_bp, ff_bp in reversed(tape):
            dx, ln3, ff = ff_bp(dx)
            dx, ln2, (cross_g, d_kh, d_vh) = cross_bp(dx)
            dx, ln1, self_g = self_bp(dx)
            layers.insert(0, {"self": self_g, "ln1": ln1, "cross": cross_g, "ln2": ln2,
                              "ff": ff, "ln3": ln3})
            d_cross.insert(0, (d_kh, d_vh))
        grads = {"out": {"W": d_W, "b": d_b}, "dec_ln": {"g": d_g, "b": d_b_ln}, "dec": layers}
        grads["tgt_embed"], d_pos = emb_bp(dx)
        if d_pos is not None:
            grads["pos"] = d_pos
        return d_cross, grads

    return logits, weights, new_cache, backprop


def loss_vjp(params: Mapping[str, Any], config: TransformerConfig, batch: Mapping[str, Any],
             keep: Mapping[str, Any] | None, *, xp: Any,
             custom_vjp: Callable[..., Any] | None = None,
             scan: Callable[..., Any] | None = None) -> tuple[Any, Callable[..., Any]]:
    """The training loss (label-smoothed) and ``backprop(d_loss) -> grads``. With
    ``custom_vjp`` (the loss differentiated by a library's autodiff), blockwise attention
    carries its own backward rule (see :func:`_self_attention`); ``scan`` (``backend.scan``,
    or ``None`` for the arrays' own loop) is its loop over blocks."""
    g = group_params(params, config)
    memory, src_keep, enc_bp = encoder_vjp(g, config, batch["src"], batch["src_len"], keep,
                                           xp=xp, custom_vjp=custom_vjp, scan=scan)
    cross, cross_bp = cross_keys_vjp(g, config, memory, xp=xp)
    logits, _, _, dec_bp = decoder_forward(g, config, batch["tgt_in"], cross, src_keep,
                                           keep=keep, xp=xp, custom_vjp=custom_vjp,
                                           scan=scan)
    (total, count), nll_bp = vjp.nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp,
                                         smoothing=config.label_smoothing)
    denom = xp.maximum(count, xp.ones_like(count))

    def backprop(d_loss: Any) -> dict[str, Any]:
        d_logits, _ = nll_bp(d_loss / denom)
        d_cross, dec_grads = dec_bp(d_logits)
        d_memory, cross_grads = cross_bp(d_cross)
        return named_grads(param_layout(config, str), params,
                           (dec_grads, cross_grads, enc_bp(d_memory)))

    return total / denom, backprop
