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

One decoder: :func:`xpseq.models.transformer.layers.decoder_forward` maps target ids to
logits with an optional key/value cache, as fairseq's incremental state or Equinox's cache.
Without a cache it runs teacher forcing over a whole target (the training loss, whose
hand-derived backward it returns, and the dev loss); with one it runs a search step: one
position per row, whose self-attention reads the keys and values the cache holds of the
positions before it. The model's ``encode`` kernel projects the memory into each decoder
layer's cross-attention keys and values once per source batch (training does the same, once
per batch). A compiled search keeps the cache at a fixed capacity (``max_len`` steps),
written with ``where`` at the step's position, so that a step has one shape and compiles
once; an eager search lets it grow by a position a step.

Parameters are stored flat (``dec0.self.W_q``: the checkpoint's names); the layers read them
grouped into nested dicts (:func:`xpseq.models.transformer.config.group_params`), once per
loss, encoding or search rather than once per decoder step, and the hand-derived backward
returns its gradients in the same nesting, named and summed by
:func:`xpseq.models.protocol.named_grads` (as the RNN's).

The package: :mod:`xpseq.models.transformer.config` (the configuration and parameters),
:mod:`xpseq.models.transformer.layers` (the layers with their backprop, and the
hand-derived loss) and :mod:`xpseq.models.transformer.model` (the public functions and
``MODEL``). The names that ``layers`` shares with ``model`` are public (no leading
underscore) but internal: the API is what this package exports.
"""

from __future__ import annotations

from .config import (
    ATTENTION_PATHS,
    AUTO_KEYS,
    NORMS,
    POSITIONS,
    Config,
    TransformerConfig,
    dropout_shapes,
    init_params,
    param_shapes,
)
from .model import MODEL, cross_attention, forward, loss, loss_and_grad

__all__ = ["TransformerConfig", "Config", "param_shapes", "init_params", "loss",
           "loss_and_grad", "forward", "cross_attention", "dropout_shapes", "NORMS",
           "POSITIONS", "ATTENTION_PATHS", "AUTO_KEYS", "MODEL"]
