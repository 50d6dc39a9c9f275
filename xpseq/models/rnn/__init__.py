"""The encoder-decoder with attention, as pure functions over a parameter dict.

The ``rnn`` model kind. Architecture (the CS224N NMT model, and Bahdanau et al. 2015)::

    encoder   x_j = E_src[src_j];  a bi-directional LSTM/GRU with H units per direction
              memory_j = [h→_j; h←_j]                                     (B, S, 2H)
              the decoder starts from [h→_final; h←_final] (and the same for c)
    decoder   D = 2H units; y_{t-1} embedded by E_tgt

    luong     s_t = cell([E_tgt y_{t-1}; o_{t-1}], s_{t-1})     (o_{t-1}: input feeding)
              α_t = softmax over real source positions of score(s_t, memory)
              a_t = Σ_j α_tj memory_j
              o_t = dropout(tanh(W_u [a_t; s_t]))
    bahdanau  α_t = softmax(score(s_{t-1}, memory));  a_t = Σ_j α_tj memory_j
              s_t = cell([E_tgt y_{t-1}; a_t (; o_{t-1})], s_{t-1})
              o_t = dropout(tanh(W_u [a_t; s_t]))
    none      s_t = cell([E_tgt y_{t-1}], s_{t-1});  o_t = dropout(s_t)  (plain seq2seq)

    logits_t = W_out o_t + b_out

Scores (query ``s``, key ``m_j``): ``dot`` ``sᵀ m_j``; ``scaled_dot`` ``sᵀ m_j / sqrt(D)``;
``general`` ``sᵀ W m_j`` (Luong's general, the multiplicative score); ``additive``
``vᵀ tanh(W_q s + W_k m_j)`` (Bahdanau). Padded source positions get exactly zero weight,
and padded steps never change the encoder state, in either direction.

Every function takes ``scan=`` (``backend.scan``: ``lax.scan`` on JAX, a Python loop
elsewhere); nothing here knows which library it runs on. ``MODEL`` is this kind on the
model protocol (:mod:`xpseq.models.protocol`).

The package: :mod:`xpseq.models.rnn.config` (the configuration and parameters),
:mod:`xpseq.models.rnn.forward` (the forward kernels and the decoder's spec),
:mod:`xpseq.models.rnn.backward` (the hand-derived backward pass) and
:mod:`xpseq.models.rnn.model` (the public functions below and ``MODEL``). The names that
``forward`` and ``backward`` share with the other modules are public (no leading underscore)
but internal: the API is what this package exports.
"""

from __future__ import annotations

from .config import (
    ATTENTIONS,
    STYLES,
    Config,
    Seq2SeqConfig,
    dropout_shapes,
    init_params,
    param_shapes,
)
from .model import MODEL, decode_step, encode, forward, loss, loss_and_grad

__all__ = ["Seq2SeqConfig", "Config", "param_shapes", "init_params", "encode", "decode_step",
           "forward", "loss", "loss_and_grad", "dropout_shapes", "ATTENTIONS", "STYLES",
           "MODEL"]
