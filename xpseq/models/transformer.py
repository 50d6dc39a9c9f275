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

Incremental decoding: :func:`_encode` runs the encoder and projects the memory into each
decoder layer's cross-attention keys and values once; the decoder step keeps its own
self-attention keys and values in a cache of fixed capacity (``max_len`` steps), written
with ``where`` at the step's position, so that a step has one shape and compiles once.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, Mapping

import numpy as np

from xpseq.core import checks, kernels, vjp

from .protocol import (
    DictConfig,
    Grads,
    Model,
    ModelKernels,
    check_ids,
    check_pad_id,
    sub_params,
)

__all__ = ["TransformerConfig", "Config", "param_shapes", "init_params", "loss",
           "loss_and_grad", "cross_attention", "dropout_shapes", "MODEL"]

NORMS = ("pre", "post")
POSITIONS = ("sinusoidal", "learned")
ATTENTION = ("W_q", "W_k", "W_v", "W_o", "b_q", "b_k", "b_v", "b_o")
FF = ("W_1", "b_1", "W_2", "b_2")


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
    label_smoothing : float in ``[0, 1)``, for the training loss (the dev loss is the plain
        negative log-likelihood)
    max_len : int, the most positions a learned table holds (and a sentence may have)
    pad_id : int, the padding id of both vocabularies
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
    pad_id: int = 0

    def __post_init__(self) -> None:
        name = "TransformerConfig"
        for field in ("src_vocab", "tgt_vocab", "d_model", "heads", "encoder_layers",
                      "decoder_layers", "d_ff", "max_len"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name}: {field} must be a positive int, got {value!r}")
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
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not 0 <= value < 1:
                raise ValueError(f"{name}: {field} must be a number in [0, 1), got {value!r}")
        for field in ("share_embeddings", "tie_output"):
            if not isinstance(getattr(self, field), bool):
                raise TypeError(f"{name}: {field} must be a bool, got {getattr(self, field)!r}")
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ValueError(f"{name}: share_embeddings needs src_vocab == tgt_vocab, got "
                             f"{self.src_vocab} and {self.tgt_vocab}")
        check_pad_id(name, self)


Config = TransformerConfig


# ----------------------------------------------------------------------- parameters


def _attention_shapes(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.{n}": (d, d) if n.startswith("W") else (d,) for n in ATTENTION}


def _ln_shapes(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.g": (d,), f"{prefix}.b": (d,)}


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
    rng = np.random.default_rng(seed)
    d = config.d_model
    params = {}
    for name, shape in param_shapes(config).items():
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
    shapes = {"src_emb": (b, s, d), "tgt_emb": (b, t, d)}
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


def cross_attention(params: Mapping[str, Any], config: TransformerConfig, src: Any,
                    src_len: Any, tgt_in: Any) -> Any:
    """Every decoder layer's cross-attention weights under teacher forcing, for heatmaps:
    ``(decoder_layers, B, heads, T, S)``; each row sums to 1 over the real source
    positions and is exactly 0 at padding. (The search's ``attention`` is the last layer's,
    averaged over the heads.)"""
    batch = {"src": src, "src_len": src_len, "tgt_in": tgt_in, "tgt_out": tgt_in}
    xp = _check_inputs("cross_attention", params, config, batch, None)
    return _logits(params, config, src, src_len, tgt_in, xp=xp)[1]


def loss_and_grad(params: Mapping[str, Any], config: TransformerConfig,
                  batch: Mapping[str, Any], *,
                  keep: Mapping[str, Any] | None = None) -> tuple[Any, dict]:
    """:func:`loss` and its gradient from the hand-derived backward pass (the rules of
    :mod:`xpseq.core.vjp` chained through every layer): how NumPy trains the Transformer."""
    xp = _check_inputs("loss_and_grad", params, config, batch, keep)
    value, backprop = _loss_vjp(params, config, batch, keep, xp=xp)
    return value, backprop(xp.ones((), dtype=params["out.b"].dtype))


# ------------------------------------------------------- the model with its backprop
#
# Each function below computes its part through the (value, backprop) rules of
# xpseq.core.vjp; the autodiff backends and the search call the same functions and drop
# the callbacks, so the wiring is written once.


def _table(config: TransformerConfig, side: str) -> str:
    return "embed" if config.share_embeddings else f"{side}_embed"


def _embed_vjp(params: Mapping[str, Any], config: TransformerConfig, ids: Any, side: str,
               keep: Any, *, xp: Any, offset: Any = None) -> tuple[Any, Callable]:
    """``E[ids] · sqrt(d) + PE[positions]`` then dropout: ``(B, T, d)``, and
    ``backprop(dx, grads)``. ``offset`` (``(B,)``) shifts the positions (a decoder step)."""
    name = _table(config, side)
    scale = math.sqrt(config.d_model)
    emb, emb_bp = vjp.embedding(ids, params[name], xp=xp)
    steps = xp.arange(ids.shape[-1], dtype=xp.int64, device=None)
    positions = steps if offset is None else xp.expand_dims(offset, axis=-1) + steps
    if config.positions == "learned":
        pos, pos_bp = vjp.embedding(positions, params["pos"], xp=xp)
    else:
        pos = kernels.sinusoidal_positions(positions, config.d_model, emb.dtype, xp=xp)
    x = emb * scale + pos
    drop_bp = None
    if keep is not None:
        x, drop_bp = vjp.dropout(x, keep, config.dropout, xp=xp)

    def backprop(dx: Any, grads: Grads) -> None:
        if drop_bp is not None:
            (dx, _) = drop_bp(dx)
        grads.add(name, emb_bp(dx * scale)[1])
        if config.positions == "learned":
            d_pos = dx if offset is not None or dx.ndim == 2 else xp.sum(dx, axis=0)
            grads.add("pos", pos_bp(d_pos)[1])

    return x, backprop


def _sublayer_vjp(config: TransformerConfig, x: Any, ln: Mapping[str, Any], keep: Any,
                  body: Callable, *, xp: Any) -> tuple[Any, Callable]:
    """One residual sublayer, pre-LN ``x + drop(body(LN(x)))`` or post-LN
    ``LN(x + drop(body(x)))``; ``body(h) -> (y, body_bp)``. ``backprop(dy) ->
    (dx, (d_gain, d_bias))``, the layer norm's gradients included; ``body_bp`` is called
    with the gradient of ``body``'s output and returns the gradient of its input."""
    eps = 1e-5
    if config.norm == "pre":
        h, ln_bp = vjp.layer_norm(x, ln["g"], ln["b"], eps, xp=xp)
        y, body_bp = body(h)
    else:
        y, body_bp = body(x)
    drop_bp = None
    if keep is not None:
        y, drop_bp = vjp.dropout(y, keep, config.dropout, xp=xp)
    out = x + y
    if config.norm == "post":
        out, ln_bp = vjp.layer_norm(out, ln["g"], ln["b"], eps, xp=xp)

    def backprop(d_out: Any) -> tuple[Any, tuple[Any, Any]]:
        if config.norm == "post":
            d_out, d_g, d_b = ln_bp(d_out)
        d_y = d_out if drop_bp is None else drop_bp(d_out)[0]
        d_in = body_bp(d_y)
        if config.norm == "pre":
            d_h, d_g, d_b = ln_bp(d_in)
            return d_out + d_h, (d_g, d_b)
        return d_out + d_in, (d_g, d_b)

    return out, backprop


def _attention_body(params: Mapping[str, Any], prefix: str, config: TransformerConfig,
                    keep_scores: Any, grads_box: list, *, xp: Any,
                    memory: Any = None, need_weights: bool = False) -> Callable:
    """``body(h)`` for :func:`_sublayer_vjp`: self-attention over ``h`` (``memory=None``)
    or cross-attention from ``h`` to ``memory``; the memory's gradient and the weights go
    into ``grads_box`` (a one-element list holding a dict). Without ``need_weights`` the
    attention may run as the library's fused kernel (see
    :func:`xpseq.core.vjp.multi_head_attention`)."""
    p = sub_params(params, prefix)
    scale = 1.0 / math.sqrt(config.d_model // config.heads)

    def body(h: Any) -> tuple[Any, Callable]:
        kv = h if memory is None else memory
        (out, weights), att_bp = vjp.multi_head_attention(p, h, kv, kv, keep_scores,
                                                          config.heads, scale, xp=xp,
                                                          need_weights=need_weights)
        grads_box[0]["weights"] = weights

        def body_bp(d_out: Any) -> Any:
            dq, dk, dv, g = att_bp(d_out)
            grads_box[0]["grads"].add_all(prefix, g)
            if memory is None:
                return dq + dk + dv
            grads_box[0]["d_memory"] = dk + dv
            return dq

        return out, body_bp

    return body


def _ff_body(params: Mapping[str, Any], prefix: str, config: TransformerConfig,
             keep_hidden: Any, grads: Grads, *, xp: Any) -> Callable:
    p = sub_params(params, prefix)

    def body(h: Any) -> tuple[Any, Callable]:
        y, ff_bp = vjp.feed_forward(p, h, config.activation, keep_hidden, config.dropout,
                                    xp=xp)

        def body_bp(d_y: Any) -> Any:
            dh, g = ff_bp(d_y)
            grads.add_all(prefix, g)
            return dh

        return y, body_bp

    return body


def _encode_vjp(params: Mapping[str, Any], config: TransformerConfig, src: Any,
                src_len: Any, keep: Mapping[str, Any] | None, grads: Grads, *,
                xp: Any) -> tuple[Any, Any, Callable]:
    """The encoder: ``memory (B, S, d)`` after the final norm, the source keep-mask
    ``(B, 1, S)``, and ``backprop(d_memory)`` (gradients into ``grads``)."""
    keep = keep or {}
    src_keep = xp.expand_dims(kernels.sequence_mask(src_len, src.shape[1], xp=xp), axis=-2)
    x, emb_bp = _embed_vjp(params, config, src, "src", keep.get("src_emb"), xp=xp)
    tape = []
    for i in range(config.encoder_layers):
        box = [{"grads": grads}]
        x, att_bp = _sublayer_vjp(config, x, sub_params(params, f"enc{i}.ln1"),
                                  keep.get(f"enc{i}.att"),
                                  _attention_body(params, f"enc{i}.att", config, src_keep, box,
                                                  xp=xp), xp=xp)
        x, ff_bp = _sublayer_vjp(config, x, sub_params(params, f"enc{i}.ln2"),
                                 keep.get(f"enc{i}.ff"),
                                 _ff_body(params, f"enc{i}.ff", config,
                                          keep.get(f"enc{i}.ff_hidden"), grads, xp=xp), xp=xp)
        tape.append((i, att_bp, ff_bp))
    memory, final_bp = vjp.layer_norm(x, params["enc.ln.g"], params["enc.ln.b"], 1e-5, xp=xp)

    def backprop(d_memory: Any) -> None:
        dx, d_g, d_b = final_bp(d_memory)
        grads.add("enc.ln.g", d_g)
        grads.add("enc.ln.b", d_b)
        for i, att_bp, ff_bp in reversed(tape):
            dx, (d_g, d_b) = ff_bp(dx)
            grads.add(f"enc{i}.ln2.g", d_g)
            grads.add(f"enc{i}.ln2.b", d_b)
            dx, (d_g, d_b) = att_bp(dx)
            grads.add(f"enc{i}.ln1.g", d_g)
            grads.add(f"enc{i}.ln1.b", d_b)
        emb_bp(dx, grads)

    return memory, src_keep, backprop


def _decode_vjp(params: Mapping[str, Any], config: TransformerConfig, tgt_in: Any,
                memory: Any, src_keep: Any, keep: Mapping[str, Any] | None, grads: Grads, *,
                xp: Any, need_weights: bool = False) -> tuple[Any, Any, Callable]:
    """The decoder under teacher forcing: the final hidden states ``(B, T, d)``, each
    layer's cross-attention weights (a list of ``(B, h, T, S)``; ``None`` each without
    ``need_weights``), and ``backprop(dx) -> d_memory``."""
    keep = keep or {}
    t = tgt_in.shape[1]
    steps = xp.arange(t, dtype=xp.int64)
    causal = xp.expand_dims(steps, axis=-1) >= steps                     # (T, T): k <= q
    x, emb_bp = _embed_vjp(params, config, tgt_in, "tgt", keep.get("tgt_emb"), xp=xp)
    tape, weights = [], []
    for i in range(config.decoder_layers):
        self_box, cross_box = [{"grads": grads}], [{"grads": grads}]
        x, self_bp = _sublayer_vjp(
            config, x, sub_params(params, f"dec{i}.ln1"), keep.get(f"dec{i}.self"),
            _attention_body(params, f"dec{i}.self", config, causal, self_box, xp=xp), xp=xp)
        x, cross_bp = _sublayer_vjp(
            config, x, sub_params(params, f"dec{i}.ln2"), keep.get(f"dec{i}.cross"),
            _attention_body(params, f"dec{i}.cross", config, src_keep, cross_box, xp=xp,
                            memory=memory, need_weights=need_weights), xp=xp)
        x, ff_bp = _sublayer_vjp(config, x, sub_params(params, f"dec{i}.ln3"),
                                 keep.get(f"dec{i}.ff"),
                                 _ff_body(params, f"dec{i}.ff", config,
                                          keep.get(f"dec{i}.ff_hidden"), grads, xp=xp), xp=xp)
        weights.append(cross_box[0]["weights"])
        tape.append((i, self_bp, cross_bp, ff_bp, cross_box))
    out, final_bp = vjp.layer_norm(x, params["dec.ln.g"], params["dec.ln.b"], 1e-5, xp=xp)

    def backprop(d_out: Any) -> Any:
        dx, d_g, d_b = final_bp(d_out)
        grads.add("dec.ln.g", d_g)
        grads.add("dec.ln.b", d_b)
        d_memory = xp.zeros_like(memory)
        for i, self_bp, cross_bp, ff_bp, cross_box in reversed(tape):
            for bp, ln in ((ff_bp, "ln3"), (cross_bp, "ln2"), (self_bp, "ln1")):
                dx, (d_g, d_b) = bp(dx)
                grads.add(f"dec{i}.{ln}.g", d_g)
                grads.add(f"dec{i}.{ln}.b", d_b)
            d_memory = d_memory + cross_box[0]["d_memory"]
        emb_bp(dx, grads)
        return d_memory

    return out, weights, backprop


def _output_vjp(params: Mapping[str, Any], config: TransformerConfig, x: Any, *,
                xp: Any) -> tuple[Any, Callable]:
    name = _table(config, "tgt") if config.tie_output else "out.W"
    logits, bp = vjp.linear(x, params[name], params["out.b"], xp=xp)

    def backprop(d_logits: Any, grads: Grads) -> Any:
        dx, dW, db = bp(d_logits)
        grads.add(name, dW)
        grads.add("out.b", db)
        return dx

    return logits, backprop


def _loss_vjp(params: Mapping[str, Any], config: TransformerConfig, batch: Mapping[str, Any],
              keep: Mapping[str, Any] | None, *, xp: Any,
              smoothing: float | None = None) -> tuple[Any, Callable]:
    """The training loss (label-smoothed) and ``backprop(d_loss) -> grads``."""
    smoothing = config.label_smoothing if smoothing is None else smoothing
    grads = Grads()
    memory, src_keep, enc_bp = _encode_vjp(params, config, batch["src"], batch["src_len"],
                                           keep, grads, xp=xp)
    x, _, dec_bp = _decode_vjp(params, config, batch["tgt_in"], memory, src_keep, keep, grads,
                               xp=xp)
    logits, out_bp = _output_vjp(params, config, x, xp=xp)
    (total, count), nll_bp = vjp.nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp,
                                         smoothing=smoothing)
    denom = xp.maximum(count, xp.ones_like(count))

    def backprop(d_loss: Any) -> dict:
        grads.clear()
        d_logits, _ = nll_bp(d_loss / denom)
        enc_bp(dec_bp(out_bp(d_logits, grads)))
        return {name: grads[name] for name in params}

    return total / denom, backprop


# ------------------------------------------------------------------ protocol kernels


def _loss(params: Mapping[str, Any], config: TransformerConfig, batch: Mapping[str, Any],
          keep: Any, *, scan: Callable | None, xp: Any, custom_vjp: Callable | None = None) -> Any:
    return _loss_vjp(params, config, batch, keep, xp=xp)[0]


def _nll_sum(params: Mapping[str, Any], config: TransformerConfig, batch: Mapping[str, Any],
             keep: Any = None, *, scan: Callable | None, xp: Any,
             custom_vjp: Callable | None = None) -> tuple[Any, Any]:
    logits, _ = _logits(params, config, batch["src"], batch["src_len"], batch["tgt_in"], xp=xp,
                        need_weights=False)
    return kernels.nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp)


def _logits(params: Mapping[str, Any], config: TransformerConfig, src: Any, src_len: Any,
            tgt_in: Any, *, xp: Any, need_weights: bool = True) -> tuple[Any, Any]:
    """Teacher-forced logits ``(B, T, V)`` and every decoder layer's cross-attention
    weights ``(layers, B, h, T, S)`` (``None`` without ``need_weights``; no dropout)."""
    grads = Grads()
    memory, src_keep, _ = _encode_vjp(params, config, src, src_len, None, grads, xp=xp)
    x, weights, _ = _decode_vjp(params, config, tgt_in, memory, src_keep, None, grads, xp=xp,
                                need_weights=need_weights)
    logits = _output_vjp(params, config, x, xp=xp)[0]
    return logits, xp.stack(weights, axis=0) if need_weights else None


def _encode(params: Mapping[str, Any], config: TransformerConfig, src: Any, src_len: Any, *,
            scan: Callable | None, xp: Any, custom_vjp: Callable | None = None) -> dict:
    """The memory, the source keep-mask and, per decoder layer, the cross-attention keys
    and values ``(B, h, S, d/h)``, computed once per source batch."""
    memory, src_keep, _ = _encode_vjp(params, config, src, src_len, None, Grads(), xp=xp)
    encoded = {"memory": memory, "src_keep": src_keep}
    for i in range(config.decoder_layers):
        p = sub_params(params, f"dec{i}.cross")
        encoded[f"k{i}"] = kernels.split_heads(kernels.linear(memory, p["W_k"], p["b_k"], xp=xp),
                                               config.heads, xp=xp)
        encoded[f"v{i}"] = kernels.split_heads(kernels.linear(memory, p["W_v"], p["b_v"], xp=xp),
                                               config.heads, xp=xp)
    return encoded


def _cached_attention(p: Mapping[str, Any], q_in: Any, kh: Any, vh: Any, keep: Any,
                      config: TransformerConfig, *, xp: Any) -> tuple[Any, Any]:
    """Attention of one query position ``q_in (B, 1, d)`` over given per-head keys and
    values ``(B, h, K, d/h)`` with ``keep (B, 1, K)``: ``(B, 1, d)`` and the weights
    ``(B, h, 1, K)``."""
    qh = kernels.split_heads(kernels.linear(q_in, p["W_q"], p["b_q"], xp=xp), config.heads,
                             xp=xp)
    scores = kernels.dot_scores(qh, kh, 1.0 / math.sqrt(config.d_model // config.heads), xp=xp)
    keep_h = xp.broadcast_to(kernels.heads_keep(keep, config.heads, xp=xp), tuple(scores.shape))
    context, weights = kernels.attend(scores, vh, keep_h, xp=xp)
    return kernels.linear(kernels.merge_heads(context, xp=xp), p["W_o"], p["b_o"], xp=xp), weights


def _decoder(params: Mapping[str, Any], config: TransformerConfig, encoded: dict, *,
             attention: bool = True, max_len: int | None = None,
             xp: Any) -> tuple[Callable, dict]:
    """The decoder as the protocol's step with a key/value cache: ``state`` holds the step
    ``t (B,)`` and, per layer, the self-attention keys and values written so far.

    With ``max_len`` the cache has that fixed capacity, ``(B, h, max_len, d/h)``, and each
    step writes its position with ``where``: one shape, so a compiled loop traces the step
    once. With ``max_len=None`` (an eager loop) the cache grows by one position a step,
    ``(B, h, t, d/h)``, so that a step reads and writes only the positions decoded so far
    rather than the whole capacity (beam search also reorders the cache every step)."""
    capacity = None if max_len is None else int(max_len)
    memory = encoded["memory"]
    batch, heads, width = memory.shape[0], config.heads, config.d_model // config.heads
    positions = xp.arange(capacity or 0, dtype=xp.int64)
    zeros = xp.zeros((batch, heads, capacity or 0, width), dtype=memory.dtype)
    state = {"t": xp.zeros((batch,), dtype=xp.int64)}
    for i in range(config.decoder_layers):
        state[f"k{i}"], state[f"v{i}"] = zeros, zeros
    eps = 1e-5

    def sublayer(x: Any, ln: str, body: Callable) -> Any:
        g, b = params[f"{ln}.g"], params[f"{ln}.b"]
        if config.norm == "pre":
            return x + body(kernels.layer_norm(x, g, b, eps, xp=xp))
        return kernels.layer_norm(x + body(x), g, b, eps, xp=xp)

    def step(state: dict, y: Any) -> tuple:
        t = state["t"]
        x = _embed_vjp(params, config, xp.expand_dims(y, axis=-1), "tgt", None, xp=xp,
                       offset=t)[0]                                        # (B, 1, d)
        if capacity is None:                                               # grow
            length = state["k0"].shape[2] + 1
            seen = xp.ones((batch, 1, length), dtype=xp.bool)
        else:                                                              # write in place
            here = xp.reshape(positions, (1, 1, capacity, 1)) == xp.reshape(t, (batch, 1, 1, 1))
            seen = xp.expand_dims(xp.expand_dims(positions, axis=0)
                                  <= xp.expand_dims(t, axis=-1), axis=-2)  # (B, 1, L)
        new_state = {"t": t + 1}
        cross_weights = None
        for i in range(config.decoder_layers):
            p_self = sub_params(params, f"dec{i}.self")
            cache: dict = {}

            def self_body(h: Any, i: int = i, p_self: dict = p_self, cache: dict = cache) -> Any:
                k_new = kernels.split_heads(kernels.linear(h, p_self["W_k"], p_self["b_k"],
                                                           xp=xp), heads, xp=xp)
                v_new = kernels.split_heads(kernels.linear(h, p_self["W_v"], p_self["b_v"],
                                                           xp=xp), heads, xp=xp)
                if capacity is None:
                    cache["k"] = xp.concat([state[f"k{i}"], k_new], axis=2)
                    cache["v"] = xp.concat([state[f"v{i}"], v_new], axis=2)
                else:
                    cache["k"] = xp.where(here, k_new, state[f"k{i}"])
                    cache["v"] = xp.where(here, v_new, state[f"v{i}"])
                return _cached_attention(p_self, h, cache["k"], cache["v"], seen, config,
                                         xp=xp)[0]

            x = sublayer(x, f"dec{i}.ln1", self_body)
            new_state[f"k{i}"], new_state[f"v{i}"] = cache["k"], cache["v"]

            def cross_body(h: Any, i: int = i) -> Any:
                nonlocal cross_weights
                out, cross_weights = _cached_attention(
                    sub_params(params, f"dec{i}.cross"), h, encoded[f"k{i}"], encoded[f"v{i}"],
                    encoded["src_keep"], config, xp=xp)
                return out

            x = sublayer(x, f"dec{i}.ln2", cross_body)
            x = sublayer(x, f"dec{i}.ln3", lambda h, i=i: kernels.feed_forward(
                sub_params(params, f"dec{i}.ff"), h, config.activation, None, 0.0, xp=xp))
        x = kernels.layer_norm(x, params["dec.ln.g"], params["dec.ln.b"], eps, xp=xp)
        logits = _output_vjp(params, config, x, xp=xp)[0][:, 0, :]
        weights = xp.mean(cross_weights[:, :, 0, :], axis=1) if attention else None
        return kernels.log_softmax(logits, axis=-1, xp=xp), new_state, weights

    return step, state


# ------------------------------------------------------------------------- checks


def _check_inputs(fname: str, params: Mapping[str, Any], config: TransformerConfig,
                  batch: Mapping[str, Any], keep: Any) -> Any:
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"{fname}: config must be a TransformerConfig, got "
                        f"{type(config).__name__}")
    if not isinstance(params, Mapping):
        raise TypeError(f"{fname}: params must be a mapping of arrays, got "
                        f"{type(params).__name__}")
    shapes = param_shapes(config)
    missing = [n for n in shapes if n not in params]
    unknown = [n for n in params if n not in shapes]
    if missing or unknown:
        raise ValueError(f"{fname}: params do not match the config: missing {missing}, "
                         f"unknown {unknown}")
    absent = [k for k in ("src", "src_len", "tgt_in", "tgt_out") if k not in batch]
    if absent:
        raise ValueError(f"{fname}: batch is missing {absent}")
    arrays = dict(src=batch["src"], src_len=batch["src_len"], tgt=batch["tgt_in"],
                  tgt_out=batch["tgt_out"])
    xp = checks.namespace(fname, **arrays, **{n.replace(".", "_"): params[n] for n in shapes})
    first = params["out.b"]
    for name, shape in shapes.items():
        checks.check_floating(fname, name, params[name], xp)
        if params[name].dtype != first.dtype:
            raise TypeError(f"{fname}: {name} is {params[name].dtype} but out.b is "
                            f"{first.dtype}; all parameters must share one dtype")
        if tuple(params[name].shape) != shape:
            raise ValueError(f"{fname}: {name} must have shape {shape} for this config, got "
                             f"{tuple(params[name].shape)}")
    check_ids(fname, config, xp, **arrays)
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
              dropout_shapes=dropout_shapes,
              kernels=ModelKernels(loss=_loss, loss_vjp=_loss_vjp, nll_sum=_nll_sum,
                                   encode=_encode, decoder=_decoder,
                                   loss_vjp_compiles=True))
