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
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, cast

import array_api_compat as compat
import numpy as np

from xpseq.core import checks, delegation, kernels, tree, vjp
from xpseq.core.loops import scan as python_scan
from xpseq.core.recurrent import CELLS, cell_param_shapes, hand_derived_recurrence

from .protocol import (
    DictConfig,
    Model,
    ModelKernels,
    check_fits,
    check_loss_inputs,
    check_params,
    check_size,
    named_grads,
    nest_by_prefix,
)

__all__ = ["Seq2SeqConfig", "Config", "param_shapes", "init_params", "encode", "decode_step",
           "forward", "loss", "loss_and_grad", "dropout_shapes", "ATTENTIONS", "STYLES",
           "MODEL"]

ATTENTIONS = ("none", "dot", "general", "additive", "scaled_dot")
STYLES = ("luong", "bahdanau")


@dataclasses.dataclass(frozen=True)
class Seq2SeqConfig(DictConfig):
    """Everything that fixes a model's shape and computation.

    Parameters
    ----------
    src_vocab, tgt_vocab : int
        Vocabulary sizes (ids ``0 .. V-1``).
    embed : int
        Embedding size ``E`` of both vocabularies.
    hidden : int
        Units per encoder direction ``H``; the decoder has ``D = 2H``.
    cell : {"lstm", "gru"}
    attention : {"none", "dot", "general", "additive", "scaled_dot"}
    style : {"luong", "bahdanau"}
        Where the attention query comes from (see the module docstring). Ignored by
        ``attention="none"``.
    input_feeding : bool, optional
        Feed ``o_{t-1}`` into the cell with the embedding. Needs attention. By default
        (``None``) it is on exactly when there is attention.
    dropout : float in ``[0, 1)``
        Dropout rate on ``o_t`` during training.
    label_smoothing : float in ``[0, 1)``
        For the training loss: each token's target is ``(1 - ε) onehot(y) + ε / V``
        (the dev loss is the plain negative log-likelihood).
    """

    src_vocab: int
    tgt_vocab: int
    embed: int = 32
    hidden: int = 64
    cell: str = "lstm"
    attention: str = "general"
    style: str = "luong"
    input_feeding: bool | None = None
    dropout: float = 0.0
    label_smoothing: float = 0.0

    def __post_init__(self) -> None:
        for name, kind in (("src_vocab", "vocab"), ("tgt_vocab", "vocab"), ("embed", "width"),
                           ("hidden", "width")):
            check_size("Seq2SeqConfig", name, getattr(self, name), kind)
        if self.cell not in CELLS:
            raise ValueError(f"Seq2SeqConfig: cell must be one of {list(CELLS)}, "
                             f"got {self.cell!r}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"Seq2SeqConfig: attention must be one of {list(ATTENTIONS)}, "
                             f"got {self.attention!r}")
        if self.style not in STYLES:
            raise ValueError(f"Seq2SeqConfig: style must be one of {list(STYLES)}, "
                             f"got {self.style!r}")
        if self.input_feeding is None and self.attention in ATTENTIONS:
            object.__setattr__(self, "input_feeding", self.attention != "none")
        if not isinstance(self.input_feeding, bool):
            raise TypeError(f"Seq2SeqConfig: input_feeding must be a bool, "
                            f"got {self.input_feeding!r}")
        if self.input_feeding and self.attention == "none":
            raise ValueError("Seq2SeqConfig: input_feeding feeds the attentional vector o_t back "
                             "into the cell; it needs attention other than 'none'")
        for name in ("dropout", "label_smoothing"):
            value = getattr(self, name)
            if not checks.is_real(value) or not 0 <= value < 1:
                raise ValueError(f"Seq2SeqConfig: {name} must be a number in [0, 1), "
                                 f"got {value!r}")

    @property
    def decoder_size(self) -> int:
        """``D = 2H``: the decoder's units, equal to the size of the encoder's memory."""
        return 2 * self.hidden


# ----------------------------------------------------------------------- parameters


def param_shapes(config: Seq2SeqConfig) -> dict[str, tuple[int, ...]]:
    """Names and shapes of every parameter, in a fixed order.

    ===================  ===========================  =======================================
    name                 shape                        role
    ===================  ===========================  =======================================
    src_embed            (V_src, E)                   source embeddings
    tgt_embed            (V_tgt, E)                   target embeddings
    enc_fwd.W_ih ...     see ``cell_param_shapes``    forward encoder cell (input E, H units)
    enc_bwd.W_ih ...                                  backward encoder cell
    dec.W_ih ...                                      decoder cell (input I_dec, D units)
    att.W                (D, 2H)                      ``general`` only
    att.W_q, att.W_k     (D, D), (D, 2H)              ``additive`` only
    att.v                (D,)                         ``additive`` only
    out.W_u              (D, 2H + D)                  with attention: ``o = tanh(W_u [a; s])``
    out.W, out.b         (V_tgt, D), (V_tgt,)         the output layer
    ===================  ===========================  =======================================

    ``I_dec = E`` (+ ``2H`` for Bahdanau-style attention) (+ ``D`` with input feeding).
    """
    c = config
    D, M = c.decoder_size, 2 * c.hidden
    dec_in = c.embed + (M if c.attention != "none" and c.style == "bahdanau" else 0) \
        + (D if c.input_feeding else 0)
    shapes: dict[str, tuple[int, ...]] = {
        "src_embed": (c.src_vocab, c.embed),
        "tgt_embed": (c.tgt_vocab, c.embed),
    }
    for prefix, n_in, n_hidden in (("enc_fwd", c.embed, c.hidden), ("enc_bwd", c.embed, c.hidden),
                                   ("dec", dec_in, D)):
        for name, shape in cell_param_shapes(c.cell, n_in, n_hidden).items():
            shapes[f"{prefix}.{name}"] = shape
    if c.attention == "general":
        shapes["att.W"] = (D, M)
    elif c.attention == "additive":
        shapes.update({"att.W_q": (D, D), "att.W_k": (D, M), "att.v": (D,)})
    if c.attention != "none":
        shapes["out.W_u"] = (D, M + D)
    shapes.update({"out.W": (c.tgt_vocab, D), "out.b": (c.tgt_vocab,)})
    return shapes


def init_params(config: Seq2SeqConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """A fresh parameter dict of NumPy float64 arrays: the same start on every backend.

    Embeddings are drawn from ``N(0, 1)``; every other parameter uniformly from
    ``(-1/sqrt(n), 1/sqrt(n))`` with ``n`` the units of its cell or the fan-in of its linear
    map (PyTorch's defaults). One ``numpy.random.default_rng(seed)`` draws them in the
    order of :func:`param_shapes`.
    """
    shapes = param_shapes(config)
    check_fits(shapes, 8, "init_params")                  # float64
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in shapes.items():
        if name.endswith("embed"):
            params[name] = rng.standard_normal(shape)
        else:
            if name.startswith(("enc_", "dec.")):
                fan = config.hidden if name.startswith("enc_") else config.decoder_size
            else:
                fan = shape[-1] if len(shape) == 2 else shape[0]
            bound = 1.0 / math.sqrt(fan)
            params[name] = rng.uniform(-bound, bound, size=shape)
    return params


# ------------------------------------------------------------------------ public API


def encode(params: Mapping[str, Any], config: Seq2SeqConfig, src: Any, src_len: Any, *,
           scan: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Run the bi-directional encoder.

    Parameters
    ----------
    params : parameter dict (arrays of one library, see :func:`param_shapes`)
    config : Seq2SeqConfig
    src : integer array, shape ``(B, S)``; ids at positions ``>= src_len`` are padding
    src_len : integer array, shape ``(B,)``, values in ``[1, S]``
    scan : ``backend.scan``, optional

    Returns
    -------
    dict with
        ``memory`` ``(B, S, 2H)``: ``[h→; h←]`` per position, zero at padding;
        ``mask`` ``(B, S)`` bool: the real source positions;
        ``keys`` ``(B, S, D)``: the memory projected for ``general``/``additive`` scores;
        ``state``: the decoder's initial state (a dict with ``h``, ``c`` for the LSTM, and
        ``o``, zeros, with input feeding).
    """
    xp = _check_inputs("encode", params, config, src=src, src_len=src_len)
    return _encode(params, config, src, src_len, scan=scan, xp=xp)


def decode_step(params: Mapping[str, Any], config: Seq2SeqConfig, y_prev: Any,
                state: dict[str, Any], encoded: dict[str, Any], *,
                keep: Any = None) -> tuple[Any, dict[str, Any], Any]:
    """One decoder step.

    Parameters
    ----------
    y_prev : integer array, shape ``(B,)``: the previous target token (``<s>`` first)
    state : dict, the decoder state (``encoded["state"]`` at the first step)
    encoded : the dict returned by :func:`encode`
    keep : bool array ``(B, D)``, optional: a dropout keep-mask for ``o_t``

    Returns
    -------
    logits : ``(B, V_tgt)``
    state : the new state dict
    weights : ``(B, S)`` attention weights (``None`` with ``attention="none"``)
    """
    xp = _check_inputs("decode_step", params, config, tgt=y_prev)
    if y_prev.ndim != 1:
        raise ValueError(f"decode_step: y_prev must have shape (batch,), got {tuple(y_prev.shape)}")
    emb = kernels.embedding(y_prev, params["tgt_embed"], xp=xp)
    state, o, weights = _decoder_step(_group(params, config), config, emb, state, encoded, keep,
                                      xp=xp)
    return kernels.linear(o, params["out.W"], params["out.b"], xp=xp), state, weights


def forward(params: Mapping[str, Any], config: Seq2SeqConfig, src: Any, src_len: Any,
            tgt_in: Any, *, keep: Any = None,
            scan: Callable[..., Any] | None = None) -> tuple[Any, Any]:
    """Teacher forcing over a whole target: the decoder reads the gold prefix.

    Parameters
    ----------
    src, src_len : as in :func:`encode`
    tgt_in : integer array, shape ``(B, T)``: ``<s> y_1 ... y_{T-1}`` (the gold target
        shifted right), padded
    keep : bool array ``(B, T, D)``, optional: dropout keep-masks for every ``o_t``
    scan : ``backend.scan``, optional

    Returns
    -------
    logits : ``(B, T, V_tgt)``
    weights : ``(B, T, S)`` attention weights (``None`` with ``attention="none"``)
    """
    keep = _keep_mask(keep)
    xp = _check_inputs("forward", params, config, src=src, src_len=src_len, tgt=tgt_in)
    _check_keep("forward", config, keep, tgt_in, xp)
    return _forward(params, config, src, src_len, tgt_in, keep, scan=scan, xp=xp)


def loss(params: Mapping[str, Any], config: Seq2SeqConfig, batch: Mapping[str, Any], *,
         keep: Any = None, scan: Callable[..., Any] | None = None,
         custom_vjp: Callable[..., Any] | None = None) -> Any:
    """Cross-entropy of the teacher-forced model, averaged once over the real target tokens.

    Parameters
    ----------
    batch : mapping with ``src (B, S)``, ``src_len (B,)``, ``tgt_in (B, T)`` and
        ``tgt_out (B, T)`` (``y_1 ... y_T`` = ``tgt_in`` shifted left, ending in ``</s>``,
        then ``pad_id``)
    keep : bool array ``(B, T, D)`` (or ``{"o": it}``, as :func:`dropout_shapes` names it),
        optional: dropout keep-masks for every ``o_t``
    scan : as in :func:`forward`
    custom_vjp : ``backend.custom_vjp``, optional: run the encoder's recurrences and the
        decoder's loop with their hand-derived gradients (see
        :func:`xpseq.core.recurrent.hand_derived_recurrence`); the values are the same

    Returns
    -------
    0-d array: ``Σ nll(real tokens) / #real tokens``
    """
    keep = _keep_mask(keep)
    xp = _check_loss_inputs("loss", params, config, batch, keep)
    return _loss(params, config, batch, keep, scan=scan, custom_vjp=custom_vjp, xp=xp)


def loss_and_grad(params: Mapping[str, Any], config: Seq2SeqConfig, batch: Mapping[str, Any],
                  *, keep: Any = None) -> tuple[Any, dict[str, Any]]:
    """:func:`loss` and its gradient from the hand-derived backward pass, on any backend.

    The rules of :mod:`xpseq.core.vjp`, composed through the encoder, every decoder step
    (backpropagation through time) and the output layer, in plain array API code: this is
    how the numpy backend trains, and it runs on JAX, PyTorch and array_api_strict arrays
    too (the parity tests compare it with ``jax.grad`` and ``torch.autograd``).

    Parameters
    ----------
    params, config, batch, keep : as in :func:`loss`

    Returns
    -------
    loss : 0-d array
    grads : dict with the names and shapes of ``params``
    """
    keep = _keep_mask(keep)
    xp = _check_loss_inputs("loss_and_grad", params, config, batch, keep)
    value, backprop = _loss_vjp(params, config, batch, keep, xp=xp)
    seed = params["out.W"]
    return value, backprop(xp.ones((), dtype=seed.dtype, device=compat.device(seed)))


def dropout_shapes(config: Seq2SeqConfig, src_shape: tuple[int, ...],
                   tgt_shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """The dropout keep-masks of one training step: ``{"o": (B, T, D)}`` for the
    attentional vectors ``o_t``, or none without dropout."""
    return {"o": (*tgt_shape, config.decoder_size)} if config.dropout > 0 else {}


# ------------------------------------------------------------------- private kernels


def _loss(params: Mapping[str, Any], config: Seq2SeqConfig, batch: Mapping[str, Any],
          keep: Any, *, scan: Callable[..., Any] | None, xp: Any,
          custom_vjp: Callable[..., Any] | None = None) -> Any:
    total, count = _nll_sum(params, config, batch, _keep_mask(keep), scan=scan,
                            custom_vjp=custom_vjp, xp=xp, smoothing=config.label_smoothing)
    return total / xp.maximum(count, xp.ones_like(count))


def _nll_sum(params: Mapping[str, Any], config: Seq2SeqConfig, batch: Mapping[str, Any],
             keep: Any = None, *, scan: Callable[..., Any] | None, xp: Any,
             custom_vjp: Callable[..., Any] | None = None,
             smoothing: float = 0.0) -> tuple[Any, Any]:
    logits, _ = _forward(params, config, batch["src"], batch["src_len"], batch["tgt_in"], keep,
                         scan=scan, custom_vjp=custom_vjp, xp=xp,
                         span=None if custom_vjp is None else _target_span(batch, config, xp))
    return kernels.nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp, smoothing=smoothing)


def _encode(params: Mapping[str, Any], config: Seq2SeqConfig, src: Any, src_len: Any, *,
            scan: Callable[..., Any] | None, xp: Any,
            custom_vjp: Callable[..., Any] | None = None) -> dict[str, Any]:
    recurrence = None if custom_vjp is None else hand_derived_recurrence(
        config.cell, scan=scan, custom_vjp=custom_vjp, xp=xp)

    def runner(cell: str, p: dict[str, Any], x: Any, lengths: Any, state0: tuple[Any, ...], *,
               reverse: bool, xp: Any) -> tuple[Any, ...]:
        return kernels.run_sequence(cell, p, x, lengths, state0, reverse=reverse, scan=scan,
                                    recurrence=recurrence, xp=xp), None

    return _encode_vjp(_group(params, config), config, src, src_len, runner=runner, xp=xp,
                       fused=recurrence is None)[0]


def _decoder(params: Mapping[str, Any], config: Seq2SeqConfig, encoded: dict[str, Any], *,
             attention: bool = True, max_len: int | None = None,
             xp: Any) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The decoder as the protocol's pure step over ``encoded``, and its first state."""
    g = _group(params, config)

    def step(state: dict[str, Any], y: Any) -> tuple[Any, ...]:
        emb = kernels.embedding(y, params["tgt_embed"], xp=xp)
        state, o, weights = _decoder_step(g, config, emb, state, encoded, None, xp=xp)
        logits = kernels.linear(o, params["out.W"], params["out.b"], xp=xp)
        return kernels.log_softmax(logits, axis=-1, xp=xp), state, weights if attention else None

    return step, encoded["state"]


def _decoder_spec(config: Seq2SeqConfig) -> dict[str, dict[str, tuple[int | str, ...]]]:
    """The shapes of what :func:`_encode` returns and of the decoder's state, by dotted
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


def _forward(params: Mapping[str, Any], config: Seq2SeqConfig, src: Any, src_len: Any,
             tgt_in: Any, keep: Any, *, scan: Callable[..., Any] | None, xp: Any,
             custom_vjp: Callable[..., Any] | None = None,
             span: tuple[Any, Any] | None = None) -> tuple[Any, Any]:
    """The logits ``(B, T, V)`` and attention weights (``None`` with ``custom_vjp``, whose
    decoder loop runs only over ``span``: :func:`_hand_derived_decoder`)."""
    encoded = _encode(params, config, src, src_len, scan=scan, custom_vjp=custom_vjp, xp=xp)
    g = _group(params, config)
    emb = kernels.embedding(tgt_in, params["tgt_embed"], xp=xp)
    emb = xp.permute_dims(emb, (1, 0, 2))                                           # (T,B,E)
    keep_t = None if keep is None else xp.permute_dims(keep, (1, 0, 2))             # (T,B,D)

    if custom_vjp is not None:
        decoder = _hand_derived_decoder(config, scan=scan, custom_vjp=custom_vjp, xp=xp)
        o, weights = decoder(_decoder_params(g, config), _attended(encoded), encoded["mask"],
                             encoded["state"], emb, keep_t, span), None
    else:
        def body(state: dict[str, Any],
                 inputs: tuple[Any, ...]) -> tuple[dict[str, Any], tuple[Any, ...]]:
            emb_t, keep_step = inputs
            state, o, weights = _decoder_step(g, config, emb_t, state, encoded, keep_step,
                                              xp=xp)
            return state, (o, weights)

        _, (o, weights) = (scan or python_scan)(body, encoded["state"], (emb, keep_t))
    # One output projection for all steps at once: (B, T, D) @ (D, V).
    logits = kernels.linear(xp.permute_dims(o, (1, 0, 2)), params["out.W"], params["out.b"], xp=xp)
    if weights is not None:
        weights = xp.permute_dims(weights, (1, 0, 2))                                 # (B,T,S)
    return logits, weights


def _decoder_step(g: Mapping[str, Any], config: Seq2SeqConfig, emb: Any,
                  state: dict[str, Any], encoded: dict[str, Any], keep: Any, *,
                  xp: Any) -> tuple[dict[str, Any], Any, Any]:
    """One step from an embedded input: returns (new state, o_t, attention weights)."""
    return _decoder_step_parts(g, config, emb, state, encoded, keep, xp=xp)[:3]


def _decoder_params(g: Mapping[str, Any], config: Seq2SeqConfig) -> dict[str, Any]:
    """The grouped parameters a decoder step reads: the cell, ``out.W_u`` (with attention)
    and additive attention's ``att.W_q`` and ``att.v``."""
    used: dict[str, Any] = {"dec": dict(g["dec"])}
    if config.attention != "none":
        used["out"] = {"W_u": g["out"]["W_u"]}
    if config.attention == "additive":
        used["att"] = {k: g["att"][k] for k in ("W_q", "v")}
    return used


def _attended(encoded: Mapping[str, Any]) -> dict[str, Any]:
    """What attention reads of the encoder's output: the memory (and the projected keys)."""
    return {k: encoded[k] for k in ("memory", "keys") if k in encoded}


def _hand_derived_decoder(config: Seq2SeqConfig, *, scan: Callable[..., Any] | None,
                          custom_vjp: Callable[..., Any], xp: Any) -> Callable[..., Any]:
    """The decoder's time loop with its hand-derived gradient attached.

    Returns ``decoder(p, attended, mask, state0, emb, keep, span) -> o`` over
    :func:`_decoder_params`'s ``p``, :func:`_attended`'s memory (and keys), the source
    ``mask (B, S)``, the first state, time-major ``emb (T, B, E)``, ``keep (T, B, D)``
    (or ``None``) and ``span``, with ``o (T, B, D)``: the loop :func:`_forward` runs, made
    ``custom_vjp(fn, fwd, bwd)`` (``backend.custom_vjp``; JAX differentiates the rest of the
    loss itself) with :func:`_decoder_loop_rules`.

    ``span`` is ``(start, stop)`` (:func:`_target_span`) or ``None`` for every step: the
    loops run only over the steps in it, and ``o`` is zero outside it. The loss reads no
    step outside it (every target there is padding), so the loss and its gradient are those
    of every step.
    """
    return cast(Callable[..., Any], custom_vjp(*_decoder_loop_rules(config, scan=scan, xp=xp)))


def _decoder_loop_rules(config: Seq2SeqConfig, *, scan: Callable[..., Any] | None,
                        xp: Any) -> tuple[Callable[..., Any], ...]:
    """``(decoder, fwd, bwd)``: the decoder's time loop (as :func:`_hand_derived_decoder`
    takes it) and its hand-derived gradient in ``custom_vjp``'s convention,
    ``fwd(*args) -> (o, residuals)`` and ``bwd(residuals, d_o) -> d_args``.

    The forward loop keeps what :func:`_decoder_step_parts` saves at every step; the
    backward loop runs :func:`_decoder_step_back` in a reverse ``scan`` and carries only
    the state's gradient. Every step's ``Σ aᵀ b`` (the weights' gradients, and the memory's
    and keys') leaves the loop unsummed and becomes one product over all steps after it,
    where a library's differentiation of the loop adds a small product into a running sum
    at every step; the embeddings' gradient is one product after the loop too. Each array
    leaves the backward loop once (an LSTM's gate gradient is also ``W_hh h``'s), and the
    products' operands the forward loop saved are read from its stack, not stacked again.
    """
    loop = scan or python_scan

    def run(p: dict[str, Any], attended: dict[str, Any], mask: Any, state0: dict[str, Any],
            emb: Any, keep: Any, span: Any, save: bool) -> Any:
        encoded = {**attended, "mask": mask}

        def body(state: dict[str, Any], inputs: tuple[Any, ...]) -> tuple[Any, ...]:
            emb_t, keep_t = inputs
            new, o, _, saved = _decoder_step_parts(p, config, emb_t, state, encoded, keep_t,
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
        refs: dict[str, Any] = {}           # the body's products: their keys, their operands

        def body(d_state: dict[str, Any], inputs: tuple[Any, ...]) -> tuple[Any, ...]:
            saved_t, keep_t, d_o_t = inputs
            d_xw, d_prev, outer, summed = _decoder_step_back(p, config, encoded, saved_t,
                                                             keep_t, d_state, d_o_t, xp=xp)
            keyed = [(key, pair) for key, pairs in outer.items() for pair in pairs]
            refs["keys"] = [key for key, _ in keyed]
            fresh, refs["where"] = tree.locate([d_xw, *(a for _, ab in keyed for a in ab)],
                                               saved_t)
            return d_prev, (fresh, summed)

        start = {k: xp.zeros_like(v) for k, v in state0.items()}
        d_state0, (fresh, summed) = loop(body, start, (saved, keep, d_o), reverse=True,
                                         span=span)
        d_xw, *found = (tree.resolve(w, fresh, saved) for w in refs["where"])
        outer: Outer = {}
        for i, key in enumerate(refs["keys"]):
            outer.setdefault(key, []).append((found[2 * i], found[2 * i + 1]))
        grads = _step_gradients(outer, summed, xp=xp)
        d_emb = d_xw @ p["dec"]["W_ih"][:, :config.embed]                       # (T, B, E)
        d_encoded = grads.pop("encoded", {})
        d_attended = {k: d_encoded.get(k, xp.zeros_like(v)) for k, v in attended.items()}
        d_p = {part: {k: grads[part][k] for k in names} for part, names in p.items()}  # p's order
        return d_p, d_attended, None, d_state0, d_emb, None, None

    return decoder, fwd, bwd


def _target_span(batch: Mapping[str, Any], config: Seq2SeqConfig,
                 xp: Any) -> tuple[Any, Any]:
    """The decoder steps the loss reads: from the first to the last where some row of
    ``tgt_out`` is a real token (:func:`xpseq.core.kernels.valid_span`)."""
    return kernels.valid_span(xp.permute_dims(batch["tgt_out"] != config.pad_id, (1, 0)),
                              xp=xp)


# ------------------------------------------------------------------ nested parameters


def _layout(config: Seq2SeqConfig, leaf: Callable[[str], Any]) -> dict[str, Any]:
    """The parameters' nesting, ``leaf(name)`` at each flat name, by the names' first part::

        {"src_embed", "tgt_embed", "enc_fwd": cell, "enc_bwd": cell, "dec": cell,
         "att": {"W"} or {"W_q", "W_k", "v"} (general / additive only),
         "out": {"W_u" (with attention), "W", "b"}}

    with a cell ``{W_ih, b_ih, W_hh, b_hh}``."""
    return nest_by_prefix(param_shapes(config), leaf)


def _group(params: Mapping[str, Any], config: Seq2SeqConfig) -> dict[str, Any]:
    """The flat parameter dict in :func:`_layout`'s nesting (the same arrays, no copies)."""
    return _layout(config, params.__getitem__)


# ------------------------------------------------- the same kernels with their backprop
#
# Each ``*_vjp`` below runs the model's forward computation once, through the
# (value, backprop) rules of :mod:`xpseq.core.vjp`, and returns its value together with a
# backprop callback. JAX and PyTorch call them too and drop the callback (``_encode`` and
# ``_decoder_step`` above), so the model's wiring is written once; only NumPy and
# array_api_strict ever call the callbacks. Each callback returns the gradients of its
# inputs and those of the parameters it used, nested as :func:`_layout` nests them (as the
# Transformer's do); :func:`xpseq.models.protocol.named_grads` names and sums them.


def _loss_vjp(params: Mapping[str, Any], config: Seq2SeqConfig, batch: Mapping[str, Any],
              keep: Any, *, xp: Any) -> tuple[Any, Callable[..., Any]]:
    """:func:`loss` and its backprop: ``backprop(d_loss) -> grads``.

    The encoder's two directions are :func:`xpseq.core.vjp.run_sequence`; the decoder's
    loop runs :func:`_decoder_loop_rules`' forward and backward, whose weight gradients are
    one product over all steps after the loop (backpropagation through time).
    """
    keep = _keep_mask(keep)
    g = _group(params, config)
    src, src_len, tgt_in = batch["src"], batch["src_len"], batch["tgt_in"]
    encoded, encode_bp = _encode_vjp(g, config, src, src_len, runner=vjp.run_sequence, xp=xp)
    emb, emb_bp = vjp.embedding(tgt_in, g["tgt_embed"], xp=xp)                # (B, T, E)
    _, decoder_fwd, decoder_bwd = _decoder_loop_rules(config, scan=None, xp=xp)
    o, residuals = decoder_fwd(_decoder_params(g, config), _attended(encoded), encoded["mask"],
                               encoded["state"], xp.permute_dims(emb, (1, 0, 2)),
                               None if keep is None else xp.permute_dims(keep, (1, 0, 2)),
                               _target_span(batch, config, xp))
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
        return named_grads(_layout(config, str), params, trees)

    return total / denom, backprop


def _encode_vjp(g: Mapping[str, Any], config: Seq2SeqConfig, src: Any, src_len: Any, *,
                runner: Callable[..., Any], xp: Any,
                fused: bool = False) -> tuple[dict[str, Any], Callable[..., Any]]:
    """The encoder's value (see :func:`encode`) from the grouped parameters ``g`` and
    ``backprop(d_encoded, d_state) -> grads`` (``src_embed``, ``enc_fwd``, ``enc_bwd`` and
    the attention's keys projection). ``runner`` runs one direction:
    :func:`xpseq.core.vjp.run_sequence`, or the ``scan``-based runner (which returns no
    backprop) on the autodiff backends; ``fused``: both in one call of the library's kernel
    where :func:`xpseq.core.delegation.fused_recurrence` applies (no backprop then)."""
    x, emb_bp = vjp.embedding(src, g["src_embed"], xp=xp)                  # (B, S, E)
    zeros = kernels.initial_zeros(config.cell, config.hidden, x, xp=xp)
    directions = [(g["enc_fwd"], False), (g["enc_bwd"], True)]
    both = fused and delegation.fused_recurrence(config.cell, directions, x, src_len, zeros, xp=xp)
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


#: A decoder step's gradients left as products (``(part, name) -> [(a, b), ...]``, each
#: pair standing for ``Σ aᵀ b``) and those it sums itself (``(part, name) -> array``); see
#: :func:`_decoder_step_back`.
Outer = dict[tuple[str, str], list[tuple[Any, Any]]]
Summed = dict[tuple[str, str], Any]


def _decoder_step_parts(g: Mapping[str, Any], config: Seq2SeqConfig, emb: Any,
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


def _decoder_step_back(g: Mapping[str, Any], config: Seq2SeqConfig, encoded: dict[str, Any],
                       saved: dict[str, Any], keep: Any, d_state: dict[str, Any], d_o: Any, *,
                       xp: Any) -> tuple[Any, dict[str, Any], Outer, Summed]:
    """The backward pass of one decoder step from what :func:`_decoder_step_parts` saved,
    given ``d_state`` (the next step's state's gradient) and ``d_o`` (``o_t``'s from the
    output layer).

    Returns ``(d_xw, d_state_prev, outer, summed)``. ``d_xw`` is the gradient of ``W_ih x
    + b_ih``; the embedding's part of ``dx = d_xw W_ih`` is left to the caller. The
    gradients whose matrix products the caller may form for many steps at once are in
    ``outer``: ``(part, name) -> [(a, b), ...]``, each pair standing for ``Σ aᵀ b`` over the
    batch (``("encoded", "memory" | "keys")``: one outer product per sentence). The rest,
    already summed over the batch, are in ``summed``: the biases, and additive attention's
    ``v`` and keys."""
    dec, kind, luong = g["dec"], config.attention, config.style == "luong"
    outer: Outer = {}
    summed: Summed = {}
    if config.input_feeding:
        d_o = d_o + d_state["o"]
    if keep is not None and config.dropout > 0:
        d_o = kernels.dropout(d_o, keep, config.dropout, xp=xp)
    d_h = d_state["h"]
    d_context = None
    if kind == "none":
        d_h = d_h + d_o
    else:
        o = saved["tanh"]
        d_pre = d_o * (1.0 - o * o)
        outer[("out", "W_u")] = [(d_pre, saved["u"])]
        d_u = d_pre @ g["out"]["W_u"]
        width = encoded["memory"].shape[-1]
        d_context, d_h = d_u[..., :width], d_h + d_u[..., width:]
        if luong:
            d_h = d_h + _attend_back(g, config, encoded, saved["att"], d_context, outer,
                                     summed, xp=xp)
    d_cell = (d_h, d_state["c"]) if config.cell == "lstm" else (d_h,)
    d_xw, d_hw, d_direct = vjp.CELL_BACKS[config.cell](saved["cell"], saved["state"], *d_cell,
                                                       xp=xp)
    outer[("dec", "W_ih")] = [(d_xw, saved["x"])]
    outer[("dec", "W_hh")] = [(d_hw, saved["state"][0])]
    summed[("dec", "b_ih")] = xp.sum(d_xw, axis=0)
    summed[("dec", "b_hh")] = xp.sum(d_hw, axis=0)
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
            d_prev["h"] = d_prev["h"] + _attend_back(
                g, config, encoded, saved["att"], d_context + d_rest[..., :width], outer,
                summed, xp=xp)
            d_rest = d_rest[..., width:]
        if config.input_feeding:
            d_prev["o"] = d_rest
    return d_xw, d_prev, outer, summed


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


def _attend_back(g: Mapping[str, Any], config: Seq2SeqConfig, encoded: dict[str, Any],
                 saved: dict[str, Any], d_context: Any, outer: Outer,
                 summed: Summed, *, xp: Any) -> Any:
    """The query's gradient from the context's; the memory's and keys' and the attention's
    own weights' go into ``outer`` and ``summed`` (see :func:`_decoder_step_back`).

    ``c = Σ_j w_j m_j`` gives ``dw_j = dc · m_j`` and ``dm_j += w_j dc``; the masked
    softmax, ``ds_j = w_j (dw_j - Σ_k w_k dw_k)``; a dot score ``s_j = λ q · k_j`` (``k =
    m`` or the keys ``W m``), ``dq = λ Σ_j ds_j k_j`` and ``dk_j += λ ds_j q``; the additive
    score ``s_j = v · a_j`` with ``a_j = tanh(W_q q + k_j)``, ``dv = Σ_j ds_j a_j``,
    ``dk_j = ds_j v ⊙ (1 - a_j²)`` and ``W_q q`` the sum of those over ``j``."""
    memory, kind, q, w = encoded["memory"], config.attention, saved["query"], saved["weights"]
    outer.setdefault(("encoded", "memory"), []).append((w, d_context))
    d_w = xp.squeeze(memory @ xp.expand_dims(d_context, axis=-1), axis=-1)     # (B, S)
    d_s = vjp.softmax_back(w, d_w, xp=xp)
    if kind == "additive":
        hidden = saved["hidden"]                                               # (B, S, h)
        summed[("att", "v")] = xp.sum(xp.expand_dims(d_s, axis=-1) * hidden, axis=(0, 1))
        d_keys = xp.expand_dims(d_s, axis=-1) * g["att"]["v"] * (1.0 - hidden * hidden)
        summed[("encoded", "keys")] = d_keys
        d_pq = xp.sum(d_keys, axis=1)                                          # (B, h)
        outer[("att", "W_q")] = [(d_pq, q)]
        return d_pq @ g["att"]["W_q"]
    if kind == "scaled_dot":
        d_s = d_s * (1.0 / math.sqrt(config.decoder_size))
    keys_name = "memory" if kind in ("dot", "scaled_dot") else "keys"
    outer.setdefault(("encoded", keys_name), []).append((d_s, q))
    return xp.squeeze(xp.expand_dims(d_s, axis=1) @ encoded[keys_name], axis=1)


def _step_gradients(outer: Outer, summed: Summed, *, xp: Any) -> dict[str, dict[str, Any]]:
    """:func:`_decoder_step_back`'s gradients over all steps as ``{part: {name: array}}``:
    every array has a leading axis of steps; each of ``outer``'s products is formed
    (:func:`_outer_sum`) and added up, each of ``summed``'s summed over the steps."""
    grads: dict[str, dict[str, Any]] = {}
    for (part, name), pairs in outer.items():
        grads.setdefault(part, {})[name] = sum(
            _outer_sum(a, b, batched=part == "encoded", xp=xp) for a, b in pairs)
    for (part, name), value in summed.items():
        grads.setdefault(part, {})[name] = xp.sum(value, axis=0)
    return grads


def _outer_sum(a: Any, b: Any, *, batched: bool, xp: Any) -> Any:
    """``Σ aᵀ b`` over the steps and rows of ``a (T, B, X)`` and ``b (T, B, Y)``, giving
    ``(X, Y)``: one product for all steps (a ``tensordot``, which XLA's CPU backend runs
    faster than the product of the flattened ``(T B, X)ᵀ`` and ``(T B, Y)``); or,
    ``batched``, one outer product per row summed over the steps, ``(B, X, Y)``."""
    if batched:
        return xp.permute_dims(a, (1, 2, 0)) @ xp.permute_dims(b, (1, 0, 2))
    return xp.tensordot(a, b, axes=([0, 1], [0, 1]))


def _state_dict(config: Seq2SeqConfig, cell_state: tuple[Any, ...], *, xp: Any,
                o: Any = None) -> dict[str, Any]:
    state = {"h": cell_state[0]}
    if config.cell == "lstm":
        state["c"] = cell_state[1]
    if config.input_feeding:
        state["o"] = xp.zeros_like(cell_state[0]) if o is None else o
    return state


# ------------------------------------------------------------------------- checks


def _check_inputs(fname: str, params: Mapping[str, Any], config: Seq2SeqConfig,
                  **arrays: Any) -> Any:
    """Check the parameter dict against the config and the id arrays; return ``xp``."""
    return check_params(fname, MODEL, params, config, **arrays)


def _check_loss_inputs(fname: str, params: Mapping[str, Any], config: Seq2SeqConfig,
                       batch: Mapping[str, Any], keep: Any) -> Any:
    xp = check_loss_inputs(fname, MODEL, params, config, batch)
    _check_keep(fname, config, keep, batch["tgt_in"], xp)
    return xp


def _check_keep(fname: str, config: Seq2SeqConfig, keep: Any, tgt_in: Any, xp: Any) -> None:
    if keep is None:
        return
    expected = (*tgt_in.shape, config.decoder_size)
    if keep.dtype != xp.bool or tuple(keep.shape) != expected:
        raise ValueError(f"{fname}: keep must be a bool array of shape (B, T, D) = {expected}, "
                         f"got {keep.dtype} {tuple(keep.shape)}")


def _keep_mask(keep: Any) -> Any:
    """The ``o_t`` keep-mask from an array or from ``{"o": array}`` (the protocol's form)."""
    return keep.get("o") if isinstance(keep, Mapping) else keep


Config = Seq2SeqConfig

#: This kind on the model protocol.
MODEL = Model(kind="rnn", Config=Seq2SeqConfig, param_shapes=param_shapes,
              init_params=init_params, loss=loss, loss_and_grad=loss_and_grad,
              forward=forward, dropout_shapes=dropout_shapes,
              kernels=ModelKernels(loss=_loss, loss_vjp=_loss_vjp, nll_sum=_nll_sum,
                                   encode=_encode, decoder=_decoder,
                                   decoder_spec=_decoder_spec))
