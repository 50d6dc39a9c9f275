"""The ``transformer`` model kind: the encoder-decoder of Vaswani et al. (2017), as pure
functions over a parameter dict, written once against the array API.

Architecture (``d = d_model``, ``h = heads``)::

    embed     x = E[ids] · sqrt(d) + PE[position]    (sinusoidal, or learned ``pos``)
    encoder   encoder_layers × [self-attention over the real source positions, feed-forward]
              then a final layer norm (``enc.ln``)
    decoder   decoder_layers × [causal self-attention, cross-attention over the real source
              positions, feed-forward], then a final layer norm (``dec.ln``)
    output    logits = W_out x + b_out       (W_out = E_tgt with ``tie_output``)

    pre-LN    x = x + drop(sublayer(LN(x)))          (the default)
    post-LN   x = LN(x + drop(sublayer(x)))          (the original paper's order)

This is ``torch.nn.Transformer(batch_first=True)`` (its ``norm_first`` is ``norm="pre"``;
it, too, ends encoder and decoder with a layer norm in both orders) with embeddings, the
positions and an output ``nn.Linear`` around it; the tests load xpseq's parameters into one
and compare logits and gradients. Layout: torch packs the three input projections of
each attention into ``in_proj_weight (3d, d)`` = ``[W_q; W_k; W_v]`` (and ``in_proj_bias``
likewise); ``out_proj`` is ``W_o``, ``b_o``; ``linear1`` / ``linear2`` are ``ff.W_1`` /
``ff.W_2``; ``norm1, norm2 (, norm3)`` are ``ln1, ln2 (, ln3)``.

Every mask goes through the core's true-mask softmax: padded source keys get exactly zero
weight, the decoder sees no future token, and no row is empty (a source has at least one
real token; a target position sees itself). Dropout (rate ``dropout``) applies to the
embeddings, to each sublayer's output and inside the feed-forward block, as torch's layers
do, but not to the attention weights.

Initialisation (:func:`init_params`): Xavier-uniform for every matrix of the layers, as
``torch.nn.Transformer._reset_parameters``; zero biases, unit layer-norm gains; embeddings
``N(0, d^-1/2)`` (so that ``E · sqrt(d)`` has unit variance); the output layer as
``nn.Linear``'s default.

One decoder: :func:`_decoder_forward` maps target ids to logits with an optional
key/value cache, as fairseq's incremental state or Equinox's cache. Without a cache it runs
teacher forcing over a whole target (the training loss, whose hand-derived backward it
returns, and the dev loss); with one it runs a search step: one position per row, whose
self-attention reads the keys and values the cache holds of the positions before it.
:func:`_encode` projects the memory into each decoder layer's cross-attention keys and
values once per source batch (training does the same, once per batch). A compiled search
keeps the cache at a fixed capacity (``max_len`` steps), written with ``where`` at the
step's position, so that a step has one shape and compiles once; an eager search lets it
grow by a position a step.

Parameters are stored flat (``dec0.self.W_q``: the checkpoint's names); the layers read
them grouped into nested dicts (:func:`_group`), once per loss, encoding or search rather
than once per decoder step, and the hand-derived backward returns its gradients in the
same nesting, named and summed by :func:`xpseq.models.protocol.named_grads` (as the RNN's).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Container, Mapping

import array_api_compat as compat
import numpy as np

from xpseq.core import checks, kernels, shapes, vjp

from .protocol import (
    DictConfig,
    Model,
    ModelKernels,
    check_fits,
    check_loss_inputs,
    check_params,
    check_size,
    named_grads,
)

__all__ = ["TransformerConfig", "Config", "param_shapes", "init_params", "loss",
           "loss_and_grad", "forward", "cross_attention", "dropout_shapes", "MODEL"]

NORMS = ("pre", "post")
POSITIONS = ("sinusoidal", "learned")
ATTENTION = ("W_q", "W_k", "W_v", "W_o", "b_q", "b_k", "b_v", "b_o")
FF = ("W_1", "b_1", "W_2", "b_2")
LN = ("g", "b")
#: The epsilon of every layer norm (``torch.nn.LayerNorm``'s default).
LN_EPS = 1e-5


@dataclasses.dataclass(frozen=True)
class TransformerConfig(DictConfig):
    """Everything that fixes a Transformer's shape and computation.

    Parameters
    ----------
    src_vocab, tgt_vocab : int
    d_model : int, the width ``d`` (a multiple of ``heads``)
    heads : int
    encoder_layers, decoder_layers : int (``>= 1``)
    d_ff : int, the feed-forward block's hidden width
    dropout : float in ``[0, 1)``
    norm : {"pre", "post"}, where the layer norms sit (see the module docstring)
    positions : {"sinusoidal", "learned"}
    activation : {"relu", "gelu"} (GELU in its tanh form)
    share_embeddings : one embedding table for source and target (equal vocabularies)
    tie_output : the output layer's matrix is the target embedding table
    label_smoothing : float in ``[0, 1)``
        For the training loss (the dev loss is the plain negative log-likelihood).
    max_len : int, the most positions a learned table holds (and a sentence may have)

    Notes
    -----
    ``pad_id`` is :data:`xpseq.models.protocol.PAD_ID` (0), the id the data pads with.
    """

    src_vocab: int
    tgt_vocab: int
    d_model: int = 64
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 256
    dropout: float = 0.0
    norm: str = "pre"
    positions: str = "sinusoidal"
    activation: str = "relu"
    share_embeddings: bool = False
    tie_output: bool = False
    label_smoothing: float = 0.0
    max_len: int = 512

    def __post_init__(self) -> None:
        name = "TransformerConfig"
        for field, kind in (("src_vocab", "vocab"), ("tgt_vocab", "vocab"),
                            ("d_model", "width"), ("heads", "width"),
                            ("encoder_layers", "layers"), ("decoder_layers", "layers"),
                            ("d_ff", "width"), ("max_len", "width")):
            check_size(name, field, getattr(self, field), kind)
        if self.d_model % self.heads:
            raise ValueError(f"{name}: heads ({self.heads}) must divide d_model "
                             f"({self.d_model})")
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"{name}: sinusoidal positions need an even d_model, got "
                             f"{self.d_model}")
        for field, choices in (("norm", NORMS), ("positions", POSITIONS),
                               ("activation", tuple(kernels.ACTIVATIONS))):
            if getattr(self, field) not in choices:
                raise ValueError(f"{name}: {field} must be one of {list(choices)}, got "
                                 f"{getattr(self, field)!r}")
        for field in ("dropout", "label_smoothing"):
            value = getattr(self, field)
            if not checks.is_real(value) or not 0 <= value < 1:
                raise ValueError(f"{name}: {field} must be a number in [0, 1), got {value!r}")
        for field in ("share_embeddings", "tie_output"):
            if not isinstance(getattr(self, field), bool):
                raise TypeError(f"{name}: {field} must be a bool, got {getattr(self, field)!r}")
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ValueError(f"{name}: share_embeddings needs src_vocab == tgt_vocab, got "
                             f"{self.src_vocab} and {self.tgt_vocab}")


Config = TransformerConfig


# ----------------------------------------------------------------------- parameters


def _attention_shapes(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.{n}": (d, d) if n.startswith("W") else (d,) for n in ATTENTION}


def _ln_shapes(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.{n}": (d,) for n in LN}


def _ff_shapes(prefix: str, d: int, d_ff: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.W_1": (d_ff, d), f"{prefix}.b_1": (d_ff,), f"{prefix}.W_2": (d, d_ff),
            f"{prefix}.b_2": (d,)}


def param_shapes(config: TransformerConfig) -> dict[str, tuple[int, ...]]:
    """Names and shapes of every parameter, in a fixed order.

    ``src_embed`` / ``tgt_embed`` ``(V, d)`` (one ``embed`` with ``share_embeddings``),
    ``pos`` ``(max_len, d)`` with learned positions; per encoder layer ``i``:
    ``enc{i}.att.*`` (``W_q W_k W_v W_o (d, d)``, ``b_q b_k b_v b_o (d,)``),
    ``enc{i}.ln1.g/b``, ``enc{i}.ff.W_1 (d_ff, d) b_1 W_2 (d, d_ff) b_2``, ``enc{i}.ln2.g/b``;
    ``enc.ln.g/b``; per decoder layer: ``dec{i}.self.*``, ``dec{i}.cross.*``, ``dec{i}.ff.*``,
    ``dec{i}.ln1/ln2/ln3``; ``dec.ln.g/b``; ``out.W (V_tgt, d)`` (not with ``tie_output``)
    and ``out.b (V_tgt,)``.
    """
    c, d = config, config.d_model
    shapes: dict[str, tuple[int, ...]] = {}
    if c.share_embeddings:
        shapes["embed"] = (c.src_vocab, d)
    else:
        shapes.update({"src_embed": (c.src_vocab, d), "tgt_embed": (c.tgt_vocab, d)})
    if c.positions == "learned":
        shapes["pos"] = (c.max_len, d)
    for i in range(c.encoder_layers):
        shapes.update(_attention_shapes(f"enc{i}.att", d))
        shapes.update(_ln_shapes(f"enc{i}.ln1", d))
        shapes.update(_ff_shapes(f"enc{i}.ff", d, c.d_ff))
        shapes.update(_ln_shapes(f"enc{i}.ln2", d))
    shapes.update(_ln_shapes("enc.ln", d))
    for i in range(c.decoder_layers):
        shapes.update(_attention_shapes(f"dec{i}.self", d))
        shapes.update(_ln_shapes(f"dec{i}.ln1", d))
        shapes.update(_attention_shapes(f"dec{i}.cross", d))
        shapes.update(_ln_shapes(f"dec{i}.ln2", d))
        shapes.update(_ff_shapes(f"dec{i}.ff", d, c.d_ff))
        shapes.update(_ln_shapes(f"dec{i}.ln3", d))
    shapes.update(_ln_shapes("dec.ln", d))
    if not c.tie_output:
        shapes["out.W"] = (c.tgt_vocab, d)
    shapes["out.b"] = (c.tgt_vocab,)
    return shapes


def init_params(config: TransformerConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """A fresh parameter dict of NumPy float64 arrays (see the module docstring), drawn by
    one ``numpy.random.default_rng(seed)`` in the order of :func:`param_shapes`."""
    shapes = param_shapes(config)
    check_fits(shapes, 8, "init_params")                  # float64
    rng = np.random.default_rng(seed)
    d = config.d_model
    params = {}
    for name, shape in shapes.items():
        leaf = name.rsplit(".", 1)[-1]
        if name in ("embed", "src_embed", "tgt_embed", "pos"):
            params[name] = rng.standard_normal(shape) * d ** -0.5
        elif name == "out.W" or name == "out.b":
            bound = 1.0 / math.sqrt(d)
            params[name] = rng.uniform(-bound, bound, size=shape)
        elif leaf == "g":
            params[name] = np.ones(shape)
        elif len(shape) == 2:                          # Xavier-uniform
            bound = math.sqrt(6.0 / (shape[0] + shape[1]))
            params[name] = rng.uniform(-bound, bound, size=shape)
        else:
            params[name] = np.zeros(shape)
    return params


def dropout_shapes(config: TransformerConfig, src_shape: tuple[int, ...],
                   tgt_shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """The keep-masks of one training step (none without dropout): the embeddings, and
    per layer each sublayer's output and the feed-forward block's hidden layer."""
    if not config.dropout:
        return {}
    (b, s), (_, t) = src_shape, tgt_shape
    d, d_ff = config.d_model, config.d_ff
    shapes: dict[str, tuple[int, ...]] = {"src_emb": (b, s, d), "tgt_emb": (b, t, d)}
    for i in range(config.encoder_layers):
        shapes.update({f"enc{i}.att": (b, s, d), f"enc{i}.ff_hidden": (b, s, d_ff),
                       f"enc{i}.ff": (b, s, d)})
    for i in range(config.decoder_layers):
        shapes.update({f"dec{i}.self": (b, t, d), f"dec{i}.cross": (b, t, d),
                       f"dec{i}.ff_hidden": (b, t, d_ff), f"dec{i}.ff": (b, t, d)})
    return shapes


# ------------------------------------------------------------------------ public API


def loss(params: Mapping[str, Any], config: TransformerConfig, batch: Mapping[str, Any], *,
         keep: Mapping[str, Any] | None = None) -> Any:
    """The label-smoothed cross-entropy of the teacher-forced model, averaged once over the
    real target tokens (``batch``: ``src``, ``src_len``, ``tgt_in``, ``tgt_out``; ``keep``:
    the masks :func:`dropout_shapes` names, or ``None``)."""
    xp = _check_inputs("loss", params, config, batch, keep)
    return _loss(params, config, batch, keep, scan=None, xp=xp)


def forward(params: Mapping[str, Any], config: TransformerConfig, src: Any, src_len: Any,
            tgt_in: Any, *, need_weights: bool = True) -> tuple[Any, Any]:
    """Teacher-forced logits ``(B, T, V_tgt)`` of the whole target in one pass (causal
    self-attention, every position at once; no dropout), and the attention ``(B, T, S)``
    the search reports for that prefix: the last decoder layer's cross-attention weights,
    averaged over the heads (``None`` without ``need_weights``; every layer's and head's
    are :func:`cross_attention`'s). The model protocol's ``forward``, as
    :func:`xpseq.models.rnn.forward`.

    ``src (B, S)``, ``src_len (B,)``, ``tgt_in (B, T)`` (``<s> y_1 ... y_{T-1}``), padded.
    """
    batch = {"src": src, "src_len": src_len, "tgt_in": tgt_in}
    xp = _check_inputs("forward", params, config, batch, None, loss=False)
    last = (config.decoder_layers - 1,) if need_weights else ()
    logits, weights = _logits(params, config, src, src_len, tgt_in, xp=xp, weights_of=last)
    return logits, xp.mean(weights[-1], axis=1) if need_weights else None


def cross_attention(params: Mapping[str, Any], config: TransformerConfig, src: Any,
                    src_len: Any, tgt_in: Any) -> Any:
    """Every decoder layer's cross-attention weights under teacher forcing, for heatmaps:
    ``(decoder_layers, B, heads, T, S)``; each row sums to 1 over the real source
    positions and is exactly 0 at padding. (The search's ``attention`` is the last layer's,
    averaged over the heads.)"""
    batch = {"src": src, "src_len": src_len, "tgt_in": tgt_in}
    xp = _check_inputs("cross_attention", params, config, batch, None, loss=False)
    return xp.stack(_logits(params, config, src, src_len, tgt_in, xp=xp,
                            weights_of=range(config.decoder_layers))[1], axis=0)


def loss_and_grad(params: Mapping[str, Any], config: TransformerConfig,
                  batch: Mapping[str, Any], *,
                  keep: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """:func:`loss` and its gradient from the hand-derived backward pass (the rules of
    :mod:`xpseq.core.vjp` chained through every layer): how NumPy trains the Transformer."""
    xp = _check_inputs("loss_and_grad", params, config, batch, keep)
    value, backprop = _loss_vjp(params, config, batch, keep, xp=xp)
    one = params["out.b"]
    return value, backprop(xp.ones((), dtype=one.dtype, device=compat.device(one)))


# ------------------------------------------------------------------ nested parameters


def _table(config: TransformerConfig, side: str) -> str:
    return "embed" if config.share_embeddings else f"{side}_embed"


def _layout(config: TransformerConfig, leaf: Callable[[str], Any]) -> dict[str, Any]:
    """The parameters' nesting, ``leaf(name)`` at each flat name::

        {"src_embed", "tgt_embed", "pos" (learned positions only), "out": {"W", "b"},
         "enc": [{"att", "ln1", "ff", "ln2"} for each layer], "enc_ln",
         "dec": [{"self", "ln1", "cross", "ln2", "ff", "ln3"} for each layer], "dec_ln"}

    with an attention ``{W_q, W_k, W_v, W_o, b_q, b_k, b_v, b_o}``, a feed-forward block
    ``{W_1, b_1, W_2, b_2}`` and a layer norm ``{g, b}``. With ``share_embeddings`` both
    tables are ``embed``; with ``tie_output`` ``out.W`` is the target table."""
    def group(prefix: str, names: tuple[str, ...]) -> dict[str, Any]:
        return {n: leaf(f"{prefix}.{n}") for n in names}

    tree = {"src_embed": leaf(_table(config, "src")), "tgt_embed": leaf(_table(config, "tgt")),
            "enc": [{"att": group(f"enc{i}.att", ATTENTION), "ln1": group(f"enc{i}.ln1", LN),
                     "ff": group(f"enc{i}.ff", FF), "ln2": group(f"enc{i}.ln2", LN)}
                    for i in range(config.encoder_layers)],
            "enc_ln": group("enc.ln", LN),
            "dec": [{"self": group(f"dec{i}.self", ATTENTION), "ln1": group(f"dec{i}.ln1", LN),
                     "cross": group(f"dec{i}.cross", ATTENTION),
                     "ln2": group(f"dec{i}.ln2", LN), "ff": group(f"dec{i}.ff", FF),
                     "ln3": group(f"dec{i}.ln3", LN)}
                    for i in range(config.decoder_layers)],
            "dec_ln": group("dec.ln", LN),
            "out": {"W": leaf(_table(config, "tgt") if config.tie_output else "out.W"),
                    "b": leaf("out.b")}}
    if config.positions == "learned":
        tree["pos"] = leaf("pos")
    return tree


def _group(params: Mapping[str, Any], config: TransformerConfig) -> dict[str, Any]:
    """The flat parameter dict in :func:`_layout`'s nesting (the same arrays, no copies)."""
    return _layout(config, params.__getitem__)


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


def _self_attention(p: Mapping[str, Any], config: TransformerConfig, keep: Any,
                    extend: Callable[..., Any] | None, *, xp: Any) -> Callable[..., Any]:
    """``body(h)`` for :func:`_sublayer_vjp`: attention of ``h`` over itself, ``aux`` the
    keys and values attended over. ``extend(kh, vh) -> (kh, vh)`` places the new keys and
    values among those of earlier positions (a decoder step's cache); ``None`` attends to
    ``h``'s own (the encoder, teacher forcing: the only case that backpropagates)."""
    def body(h: Any) -> tuple[Any, ...]:
        kh, k_bp = vjp.heads(h, p["W_k"], p["b_k"], config.heads, xp=xp)
        vh, v_bp = vjp.heads(h, p["W_v"], p["b_v"], config.heads, xp=xp)
        if extend is not None:
            kh, vh = extend(kh, vh)
        (out, _), att_bp = vjp.attention_over_heads(p, h, kh, vh, keep, config.heads,
                                                    _scale(config), xp=xp)

        def body_bp(dy: Any) -> tuple[Any, dict[str, Any]]:
            dq, d_kh, d_vh, g = att_bp(dy)
            dk, g["W_k"], g["b_k"] = k_bp(d_kh)
            dv, g["W_v"], g["b_v"] = v_bp(d_vh)
            return dq + dk + dv, g

        return out, (kh, vh), body_bp

    return body


def _cross_attention(p: Mapping[str, Any], config: TransformerConfig, kv: tuple[Any, Any],
                     keep: Any, need_weights: bool, *, xp: Any) -> Callable[..., Any]:
    """``body(h)`` for :func:`_sublayer_vjp`: attention of ``h`` over the memory's keys and
    values ``kv`` (see :func:`_cross_keys_vjp`); ``aux`` the weights (``None`` without
    ``need_weights``); ``body_bp(dy) -> (dh, (g, d_kh, d_vh))``."""
    def body(h: Any) -> tuple[Any, ...]:
        (out, weights), att_bp = vjp.attention_over_heads(p, h, *kv, keep, config.heads,
                                                          _scale(config), xp=xp,
                                                          need_weights=need_weights)

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


def _encoder_vjp(g: Mapping[str, Any], config: TransformerConfig, src: Any, src_len: Any,
                 keep: Mapping[str, Any] | None, *, xp: Any) -> tuple[Any, Any, Callable[..., Any]]:
    """The encoder: ``memory (B, S, d)`` after the final norm, the source keep-mask
    ``(B, 1, S)``, and ``backprop(d_memory) -> grads`` (``src_embed``, ``pos``, ``enc``,
    ``enc_ln`` of :func:`_layout`)."""
    keep = keep or {}
    src_keep = xp.expand_dims(kernels.sequence_mask(src_len, src.shape[1], xp=xp, like=src,
                                                    axis=1), axis=-2)
    x, emb_bp = _embed_vjp(g["src_embed"], g.get("pos"), config, src, keep.get("src_emb"),
                           xp=xp)
    tape = []
    for i, p in enumerate(g["enc"]):
        x, _, att_bp = _sublayer_vjp(config, x, p["ln1"], keep.get(f"enc{i}.att"),
                                     _self_attention(p["att"], config, src_keep, None, xp=xp),
                                     xp=xp)
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


def _cross_keys_vjp(g: Mapping[str, Any], config: TransformerConfig, memory: Any, *,
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


def _decoder_forward(g: Mapping[str, Any], config: TransformerConfig, tgt: Any, cross: list[Any],
                     src_keep: Any, *, xp: Any, keep: Mapping[str, Any] | None = None,
                     cache: Mapping[str, Any] | None = None, capacity: int | None = None,
                     weights_of: Container[int] = (),
                     ) -> tuple[Any, list[Any], Any, Callable[..., Any]]:
    """The decoder from target ids to logits: the one forward of training (teacher forcing),
    of its hand-derived backward and of the search step.

    Parameters
    ----------
    g : the parameters grouped by :func:`_group`
    tgt : ``(B, T)`` target ids
    cross : each layer's cross-attention keys and values (:func:`_cross_keys_vjp`)
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
        steps = xp.arange(t, dtype=kernels.int_dtype(xp), device=device)
        self_keep = xp.expand_dims(steps, axis=-1) >= steps                  # (T, T): k <= q
        offset, new_cache = None, None
    else:
        if t != 1:
            raise ValueError(f"_decoder_forward: a cached step takes one position per row, "
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
                                                       xp=xp), xp=xp)
        if new_cache is not None:
            new_cache[f"k{i}"], new_cache[f"v{i}"] = kv
        x, w, cross_bp = _sublayer_vjp(config, x, p["ln2"], keep.get(f"dec{i}.cross"),
                                       _cross_attention(p["cross"], config, cross[i], src_keep,
                                                        i in weights_of, xp=xp), xp=xp)
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


def _loss_vjp(params: Mapping[str, Any], config: TransformerConfig, batch: Mapping[str, Any],
              keep: Mapping[str, Any] | None, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """The training loss (label-smoothed) and ``backprop(d_loss) -> grads``."""
    g = _group(params, config)
    memory, src_keep, enc_bp = _encoder_vjp(g, config, batch["src"], batch["src_len"], keep,
                                            xp=xp)
    cross, cross_bp = _cross_keys_vjp(g, config, memory, xp=xp)
    logits, _, _, dec_bp = _decoder_forward(g, config, batch["tgt_in"], cross, src_keep,
                                            keep=keep, xp=xp)
    (total, count), nll_bp = vjp.nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp,
                                         smoothing=config.label_smoothing)
    denom = xp.maximum(count, xp.ones_like(count))

    def backprop(d_loss: Any) -> dict[str, Any]:
        d_logits, _ = nll_bp(d_loss / denom)
        d_cross, dec_grads = dec_bp(d_logits)
        d_memory, cross_grads = cross_bp(d_cross)
        return named_grads(_layout(config, str), params,
                           (dec_grads, cross_grads, enc_bp(d_memory)))

    return total / denom, backprop


# ------------------------------------------------------------------ protocol kernels


def _loss(params: Mapping[str, Any], config: TransformerConfig, batch: Mapping[str, Any],
          keep: Any, *, scan: Callable[..., Any] | None, xp: Any,
          custom_vjp: Callable[..., Any] | None = None) -> Any:
    return _loss_vjp(params, config, batch, keep, xp=xp)[0]


def _nll_sum(params: Mapping[str, Any], config: TransformerConfig, batch: Mapping[str, Any],
             keep: Any = None, *, scan: Callable[..., Any] | None, xp: Any,
             custom_vjp: Callable[..., Any] | None = None) -> tuple[Any, Any]:
    logits, _ = _logits(params, config, batch["src"], batch["src_len"], batch["tgt_in"], xp=xp)
    return kernels.nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp)


def _logits(params: Mapping[str, Any], config: TransformerConfig, src: Any, src_len: Any,
            tgt_in: Any, *, xp: Any, weights_of: Container[int] = ()) -> tuple[Any, list[Any]]:
    """Teacher-forced logits ``(B, T, V)`` (no dropout) and per decoder layer its
    cross-attention weights ``(B, h, T, S)`` (``None`` for the layers not in
    ``weights_of``)."""
    g = _group(params, config)
    memory, src_keep, _ = _encoder_vjp(g, config, src, src_len, None, xp=xp)
    cross, _ = _cross_keys_vjp(g, config, memory, xp=xp)
    logits, weights, _, _ = _decoder_forward(g, config, tgt_in, cross, src_keep,
                                             weights_of=weights_of, xp=xp)
    return logits, weights


def _encode(params: Mapping[str, Any], config: TransformerConfig, src: Any, src_len: Any, *,
            scan: Callable[..., Any] | None, xp: Any,
            custom_vjp: Callable[..., Any] | None = None) -> dict[str, Any]:
    """The source keep-mask ``src_keep (B, 1, S)`` and, per decoder layer ``i``, the
    cross-attention keys and values ``k{i}``, ``v{i}`` ``(B, h, S, d/h)``, computed once
    per source batch."""
    g = _group(params, config)
    memory, src_keep, _ = _encoder_vjp(g, config, src, src_len, None, xp=xp)
    encoded = {"src_keep": src_keep}
    for i, (kh, vh) in enumerate(_cross_keys_vjp(g, config, memory, xp=xp)[0]):
        encoded[f"k{i}"], encoded[f"v{i}"] = kh, vh
    return encoded


def _decoder_spec(config: TransformerConfig) -> dict[str, dict[str, tuple[int | str, ...]]]:
    """The shapes of what :func:`_encode` returns and of the decoder's state, by dotted
    name (``"batch"``, ``"src_len"`` and ``"steps"`` symbolic): the source keep-mask
    ``(B, 1, S)`` and each decoder layer's cross-attention keys and values ``(B, h, S,
    d/h)``; the state's position ``t (B,)`` and each layer's key/value cache ``(B, h,
    steps, d/h)``, one step longer after each step."""
    heads, width = config.heads, config.d_model // config.heads
    encoded: dict[str, tuple[int | str, ...]] = {"src_keep": ("batch", 1, "src_len")}
    state: dict[str, tuple[int | str, ...]] = {"t": ("batch",)}
    for i in range(config.decoder_layers):
        for name in (f"k{i}", f"v{i}"):
            encoded[name] = ("batch", heads, "src_len", width)
            state[name] = ("batch", heads, "steps", width)
    return {"encoded": encoded, "state": state}


def _decoder(params: Mapping[str, Any], config: TransformerConfig, encoded: dict[str, Any], *,
             attention: bool = True, max_len: int | None = None,
             xp: Any) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The protocol's step: :func:`_decoder_forward` on one position with the key/value
    cache as its state (``t (B,)`` and each layer's self-attention keys and values), of
    fixed capacity ``max_len`` or, with ``max_len=None``, growing (see
    :func:`_decoder_forward`); the parameters are grouped once here, not at every step."""
    g = _group(params, config)
    capacity = max_len            # not int(max_len): a compiled step keeps it symbolic
    cross = [(encoded[f"k{i}"], encoded[f"v{i}"]) for i in range(config.decoder_layers)]
    like = cross[0][0]
    batch, width, device = like.shape[0], config.d_model // config.heads, compat.device(like)
    # Shaped after the cross keys (B, h, S, d/h), so that an unknown batch (a lazy array)
    # is taken from them; distinct arrays: no entry aliases another.
    state = {"t": xp.zeros_like(like[:, 0, 0, 0], dtype=kernels.int_dtype(xp))}
    for i in range(config.decoder_layers):
        state[f"k{i}"], state[f"v{i}"] = (
            xp.zeros_like(like[:, :, :0, :]) if capacity is None else
            xp.zeros((batch, config.heads, capacity, width), dtype=like.dtype, device=device)
            for _ in range(2))
    last = (config.decoder_layers - 1,) if attention else ()

    def step(state: dict[str, Any], y: Any) -> tuple[Any, ...]:
        logits, weights, state, _ = _decoder_forward(
            g, config, xp.expand_dims(y, axis=-1), cross, encoded["src_keep"], cache=state,
            capacity=capacity, weights_of=last, xp=xp)
        att = xp.mean(weights[-1][:, :, 0, :], axis=1) if attention else None
        return kernels.log_softmax(logits[:, 0, :], axis=-1, xp=xp), state, att

    return step, state


# ------------------------------------------------------------------------- checks


def _check_inputs(fname: str, params: Mapping[str, Any], config: TransformerConfig,
                  batch: Mapping[str, Any], keep: Any, *, loss: bool = True) -> Any:
    """The shared checks of :mod:`xpseq.models.protocol` (a whole training batch, or with
    ``loss=False`` only ``src``, ``src_len`` and ``tgt_in``), then this model's own: the
    learned positions' ``max_len`` and the dropout masks. Returns ``xp``."""
    if loss:
        xp = check_loss_inputs(fname, MODEL, params, config, batch)
    else:
        xp = check_params(fname, MODEL, params, config, src=batch["src"],
                          src_len=batch["src_len"], tgt=batch["tgt_in"])
    longest = max(batch["src"].shape[1], batch["tgt_in"].shape[1])
    if config.positions == "learned" and longest > config.max_len:
        raise ValueError(f"{fname}: a sequence of {longest} positions exceeds max_len = "
                         f"{config.max_len}")
    if keep is not None:
        expected = dropout_shapes(config, tuple(batch["src"].shape),
                                  tuple(batch["tgt_in"].shape))
        if not isinstance(keep, Mapping) or {k: tuple(v.shape) for k, v in keep.items()} \
                != expected:
            raise ValueError(f"{fname}: keep must map the names of dropout_shapes to bool "
                             f"masks of those shapes: {expected}")
    return xp


MODEL = Model(kind="transformer", Config=TransformerConfig, param_shapes=param_shapes,
              init_params=init_params, loss=loss, loss_and_grad=loss_and_grad,
              forward=forward, dropout_shapes=dropout_shapes,
              kernels=ModelKernels(loss=_loss, loss_vjp=_loss_vjp, nll_sum=_nll_sum,
                                   encode=_encode, decoder=_decoder,
                                   decoder_spec=_decoder_spec, loss_vjp_compiles=True))
