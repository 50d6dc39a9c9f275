"""The encoder-decoder with attention, as pure functions over a parameter dict.

Architecture (seed 003, the CS224N NMT model, and Bahdanau et al. 2015)::

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
``general`` ``sᵀ W m_j`` (Luong's general = seed 003's multiplicative); ``additive``
``vᵀ tanh(W_q s + W_k m_j)`` (Bahdanau). Padded source positions get exactly zero weight,
and padded steps never change the encoder state, in either direction.

Every function takes ``scan=`` (``backend.scan``: ``lax.scan`` on JAX, a Python loop
elsewhere); nothing here knows which library it runs on.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, Mapping

import numpy as np

from xpseq.core import _checks
from xpseq.core._scan import scan as python_scan
from xpseq.core.attention import _additive_from_projections, _dot_scores
from xpseq.core.layers import _dropout, _embedding, _linear
from xpseq.core.losses import _nll_sum
from xpseq.core.masking import _masked_softmax, _sequence_mask
from xpseq.core.recurrent import CELLS, STEPS, _run_sequence, cell_param_shapes, initial_zeros

__all__ = ["Seq2SeqConfig", "param_shapes", "init_params", "encode", "decode_step",
           "forward", "loss", "ATTENTIONS", "STYLES"]

ATTENTIONS = ("none", "dot", "general", "additive", "scaled_dot")
STYLES = ("luong", "bahdanau")


@dataclasses.dataclass(frozen=True)
class Seq2SeqConfig:
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
    input_feeding : bool
        Feed ``o_{t-1}`` into the cell with the embedding. Needs attention.
    dropout : float in ``[0, 1)``
        Dropout rate on ``o_t`` during training.
    pad_id : int
        The padding id of both vocabularies: ignored by the loss.
    """

    src_vocab: int
    tgt_vocab: int
    embed: int = 32
    hidden: int = 64
    cell: str = "lstm"
    attention: str = "general"
    style: str = "luong"
    input_feeding: bool = True
    dropout: float = 0.0
    pad_id: int = 0

    def __post_init__(self) -> None:
        for name in ("src_vocab", "tgt_vocab", "embed", "hidden"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"Seq2SeqConfig: {name} must be a positive int, got {value!r}")
        if self.cell not in CELLS:
            raise ValueError(f"Seq2SeqConfig: cell must be one of {list(CELLS)}, "
                             f"got {self.cell!r}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"Seq2SeqConfig: attention must be one of {list(ATTENTIONS)}, "
                             f"got {self.attention!r}")
        if self.style not in STYLES:
            raise ValueError(f"Seq2SeqConfig: style must be one of {list(STYLES)}, "
                             f"got {self.style!r}")
        if not isinstance(self.input_feeding, bool):
            raise TypeError(f"Seq2SeqConfig: input_feeding must be a bool, "
                            f"got {self.input_feeding!r}")
        if self.input_feeding and self.attention == "none":
            raise ValueError("Seq2SeqConfig: input_feeding feeds the attentional vector o_t back "
                             "into the cell; it needs attention other than 'none'")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, numbers.Real) \
                or not 0 <= self.dropout < 1:
            raise ValueError(f"Seq2SeqConfig: dropout must be a number in [0, 1), "
                             f"got {self.dropout!r}")
        if isinstance(self.pad_id, bool) or not isinstance(self.pad_id, numbers.Integral) \
                or not 0 <= self.pad_id < min(self.src_vocab, self.tgt_vocab):
            raise ValueError(f"Seq2SeqConfig: pad_id must be an id of both vocabularies, "
                             f"got {self.pad_id!r}")

    @property
    def decoder_size(self) -> int:
        """``D = 2H``: the decoder's units, equal to the size of the encoder's memory."""
        return 2 * self.hidden

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Seq2SeqConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"Seq2SeqConfig: unknown fields {unknown}")
        return cls(**data)


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
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(config).items():
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
           scan: Callable | None = None) -> dict:
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


def decode_step(params: Mapping[str, Any], config: Seq2SeqConfig, y_prev: Any, state: dict,
                encoded: dict, *, keep: Any = None) -> tuple[Any, dict, Any]:
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
    emb = _embedding(y_prev, params["tgt_embed"], xp=xp)
    state, o, weights = _decoder_step(params, config, emb, state, encoded, keep, xp=xp)
    return _linear(o, params["out.W"], params["out.b"], xp=xp), state, weights


def forward(params: Mapping[str, Any], config: Seq2SeqConfig, src: Any, src_len: Any,
            tgt_in: Any, *, keep: Any = None, scan: Callable | None = None) -> tuple[Any, Any]:
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
    xp = _check_inputs("forward", params, config, src=src, src_len=src_len, tgt=tgt_in)
    _check_keep("forward", config, keep, tgt_in, xp)
    return _forward(params, config, src, src_len, tgt_in, keep, scan=scan, xp=xp)


def loss(params: Mapping[str, Any], config: Seq2SeqConfig, batch: Mapping[str, Any], *,
         keep: Any = None, scan: Callable | None = None) -> Any:
    """Cross-entropy of the teacher-forced model, averaged once over the real target tokens.

    Parameters
    ----------
    batch : mapping with ``src (B, S)``, ``src_len (B,)``, ``tgt_in (B, T)`` and
        ``tgt_out (B, T)`` (``y_1 ... y_T`` = ``tgt_in`` shifted left, ending in ``</s>``,
        then ``pad_id``)
    keep, scan : as in :func:`forward`

    Returns
    -------
    0-d array: ``Σ nll(real tokens) / #real tokens``
    """
    missing = [k for k in ("src", "src_len", "tgt_in", "tgt_out") if k not in batch]
    if missing:
        raise ValueError(f"loss: batch is missing {missing}")
    xp = _check_inputs("loss", params, config, src=batch["src"], src_len=batch["src_len"],
                       tgt=batch["tgt_in"], tgt_out=batch["tgt_out"])
    if tuple(batch["tgt_out"].shape) != tuple(batch["tgt_in"].shape):
        raise ValueError(f"loss: tgt_out has shape {tuple(batch['tgt_out'].shape)} but tgt_in "
                         f"has {tuple(batch['tgt_in'].shape)}")
    if _checks.concrete(xp.all(batch["tgt_out"] == config.pad_id)):
        raise ValueError("loss: every target token is padding; there is nothing to average")
    _check_keep("loss", config, keep, batch["tgt_in"], xp)
    return _loss(params, config, batch, keep, scan=scan, xp=xp)


# ------------------------------------------------------------------- private kernels


def _loss(params: Mapping[str, Any], config: Seq2SeqConfig, batch: Mapping[str, Any],
          keep: Any, *, scan: Callable | None, xp: Any) -> Any:
    logits, _ = _forward(params, config, batch["src"], batch["src_len"], batch["tgt_in"], keep,
                         scan=scan, xp=xp)
    total, count = _nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp)
    return total / xp.maximum(count, xp.ones_like(count))


def _encode(params: Mapping[str, Any], config: Seq2SeqConfig, src: Any, src_len: Any, *,
            scan: Callable | None, xp: Any) -> dict:
    x = _embedding(src, params["src_embed"], xp=xp)                        # (B, S, E)
    zeros = initial_zeros(config.cell, src.shape[0], config.hidden, x, xp=xp)
    fwd_out, fwd_state = _run_sequence(config.cell, _sub(params, "enc_fwd"), x, src_len, zeros,
                                       reverse=False, scan=scan, xp=xp)
    bwd_out, bwd_state = _run_sequence(config.cell, _sub(params, "enc_bwd"), x, src_len, zeros,
                                       reverse=True, scan=scan, xp=xp)
    memory = xp.concat([fwd_out, bwd_out], axis=-1)                        # (B, S, 2H)
    cell_state = tuple(xp.concat([f, b], axis=-1) for f, b in zip(fwd_state, bwd_state))
    encoded = {"memory": memory, "mask": _sequence_mask(src_len, src.shape[1], xp=xp),
               "state": _state_dict(config, cell_state, xp=xp)}
    if config.attention == "general":
        encoded["keys"] = _linear(memory, params["att.W"], None, xp=xp)     # (B, S, D): W m_j
    elif config.attention == "additive":
        encoded["keys"] = _linear(memory, params["att.W_k"], None, xp=xp)   # (B, S, D)
    return encoded


def _forward(params: Mapping[str, Any], config: Seq2SeqConfig, src: Any, src_len: Any,
             tgt_in: Any, keep: Any, *, scan: Callable | None, xp: Any) -> tuple[Any, Any]:
    encoded = _encode(params, config, src, src_len, scan=scan, xp=xp)
    emb = xp.permute_dims(_embedding(tgt_in, params["tgt_embed"], xp=xp), (1, 0, 2))  # (T,B,E)
    keep_t = None if keep is None else xp.permute_dims(keep, (1, 0, 2))               # (T,B,D)

    def body(state: dict, inputs: tuple) -> tuple[dict, tuple]:
        emb_t, keep_step = inputs
        state, o, weights = _decoder_step(params, config, emb_t, state, encoded, keep_step, xp=xp)
        return state, (o, weights)

    _, (o, weights) = (scan or python_scan)(body, encoded["state"], (emb, keep_t))
    # One output projection for all steps at once: (B, T, D) @ (D, V).
    logits = _linear(xp.permute_dims(o, (1, 0, 2)), params["out.W"], params["out.b"], xp=xp)
    if weights is not None:
        weights = xp.permute_dims(weights, (1, 0, 2))                                 # (B,T,S)
    return logits, weights


def _decoder_step(params: Mapping[str, Any], config: Seq2SeqConfig, emb: Any, state: dict,
                  encoded: dict, keep: Any, *, xp: Any) -> tuple[dict, Any, Any]:
    """One step from an embedded input: returns (new state, o_t, attention weights)."""
    step = STEPS[config.cell]
    dec = _sub(params, "dec")
    cell_state = (state["h"], state["c"]) if config.cell == "lstm" else (state["h"],)
    feed = [state["o"]] if config.input_feeding else []
    weights = None
    if config.attention == "none":
        cell_state = step(_linear(emb, dec["W_ih"], dec["b_ih"], xp=xp), cell_state, dec, xp=xp)
        o = cell_state[0]
    elif config.style == "luong":
        x = xp.concat([emb, *feed], axis=-1)
        cell_state = step(_linear(x, dec["W_ih"], dec["b_ih"], xp=xp), cell_state, dec, xp=xp)
        context, weights = _attention(params, config, cell_state[0], encoded, xp=xp)
        o = xp.tanh(_linear(xp.concat([context, cell_state[0]], axis=-1), params["out.W_u"], None,
                            xp=xp))
    else:  # bahdanau: attend with the previous state, feed the context into the cell
        context, weights = _attention(params, config, cell_state[0], encoded, xp=xp)
        x = xp.concat([emb, context, *feed], axis=-1)
        cell_state = step(_linear(x, dec["W_ih"], dec["b_ih"], xp=xp), cell_state, dec, xp=xp)
        o = xp.tanh(_linear(xp.concat([context, cell_state[0]], axis=-1), params["out.W_u"], None,
                            xp=xp))
    if keep is not None and config.dropout > 0:
        o = _dropout(o, keep, config.dropout, xp=xp)
    new_state = _state_dict(config, cell_state, xp=xp, o=o)
    return new_state, o, weights


def _attention(params: Mapping[str, Any], config: Seq2SeqConfig, query: Any, encoded: dict, *,
               xp: Any) -> tuple[Any, Any]:
    """Context ``(B, 2H)`` and weights ``(B, S)`` for a query ``(B, D)``."""
    q = xp.expand_dims(query, axis=1)                                      # (B, 1, D)
    memory = encoded["memory"]
    kind = config.attention
    if kind == "dot":
        scores = _dot_scores(q, memory, None, xp=xp)
    elif kind == "scaled_dot":
        scores = _dot_scores(q, memory, 1.0 / math.sqrt(config.decoder_size), xp=xp)
    elif kind == "general":
        scores = _dot_scores(q, encoded["keys"], None, xp=xp)             # sᵀ (W m_j)
    else:  # additive
        pq = _linear(q, params["att.W_q"], None, xp=xp)
        scores = _additive_from_projections(pq, encoded["keys"], params["att.v"], xp=xp)
    weights = _masked_softmax(scores, xp.expand_dims(encoded["mask"], axis=1), xp=xp)  # (B,1,S)
    context = weights @ memory                                             # (B, 1, 2H)
    return xp.squeeze(context, axis=1), xp.squeeze(weights, axis=1)


def _state_dict(config: Seq2SeqConfig, cell_state: tuple, *, xp: Any, o: Any = None) -> dict:
    state = {"h": cell_state[0]}
    if config.cell == "lstm":
        state["c"] = cell_state[1]
    if config.input_feeding:
        state["o"] = xp.zeros_like(cell_state[0]) if o is None else o
    return state


def _sub(params: Mapping[str, Any], prefix: str) -> dict:
    """The entries ``prefix.name`` of ``params`` as ``{name: array}``."""
    start = prefix + "."
    return {k[len(start):]: v for k, v in params.items() if k.startswith(start)}


# ------------------------------------------------------------------------- checks


def _check_inputs(fname: str, params: Mapping[str, Any], config: Seq2SeqConfig,
                  **arrays: Any) -> Any:
    """Check the parameter dict against the config and the id arrays; return ``xp``."""
    if not isinstance(config, Seq2SeqConfig):
        raise TypeError(f"{fname}: config must be a Seq2SeqConfig, got {type(config).__name__}")
    if not isinstance(params, Mapping):
        raise TypeError(f"{fname}: params must be a mapping of arrays, got {type(params).__name__}")
    shapes = param_shapes(config)
    missing = [n for n in shapes if n not in params]
    unknown = [n for n in params if n not in shapes]
    if missing or unknown:
        raise ValueError(f"{fname}: params do not match the config: missing {missing}, "
                         f"unknown {unknown}")
    xp = _checks.namespace(fname, **arrays, **{n.replace(".", "_"): params[n] for n in shapes})
    first = params["out.W"]
    for name, shape in shapes.items():
        p = params[name]
        _checks.check_floating(fname, name, p, xp)
        if p.dtype != first.dtype:
            raise TypeError(f"{fname}: {name} is {p.dtype} but out.W is {first.dtype}; all "
                            "parameters must share one dtype")
        if tuple(p.shape) != shape:
            raise ValueError(f"{fname}: {name} must have shape {shape} for this config, got "
                             f"{tuple(p.shape)}")
    check_ids(fname, config, xp, **arrays)
    return xp


def check_ids(fname: str, config: Seq2SeqConfig, xp: Any, **arrays: Any) -> None:
    """Check token-id arrays (``src``, ``src_len``, ``tgt``, ``tgt_out``) against ``config``:
    integer dtypes, ranks, ids inside the vocabularies, ``1 <= src_len <= S``."""
    vocab = {"src": config.src_vocab, "tgt": config.tgt_vocab, "tgt_out": config.tgt_vocab}
    for name, ids in arrays.items():
        if not xp.isdtype(ids.dtype, "integral"):
            raise TypeError(f"{fname}: {name} must have an integer dtype, got {ids.dtype}")
        if name == "src_len":
            continue
        if ids.ndim not in (1, 2):
            raise ValueError(f"{fname}: {name} must have shape (batch,) or (batch, time), "
                             f"got {tuple(ids.shape)}")
        index = _checks.first_true_index((ids < 0) | (ids >= vocab[name]), xp)
        if index is not None:
            raise ValueError(f"{fname}: {name} ids must lie in [0, {vocab[name]}), got "
                             f"{int(ids[index])} at {index}")
    if "src" in arrays:
        src, src_len = arrays["src"], arrays["src_len"]
        if src.ndim != 2:
            raise ValueError(f"{fname}: src must have shape (batch, S), got {tuple(src.shape)}")
        if tuple(src_len.shape) != (src.shape[0],):
            raise ValueError(f"{fname}: src_len must have shape (batch,) = ({src.shape[0]},), "
                             f"got {tuple(src_len.shape)}")
        bad = _checks.first_true_index((src_len < 1) | (src_len > src.shape[1]), xp)
        if bad is not None:
            raise ValueError(f"{fname}: src_len must lie in [1, {src.shape[1]}] (a source needs "
                             f"a real token), got src_len[{bad[0]}] = {int(src_len[bad])}")
        if "tgt" in arrays and arrays["tgt"].shape[0] != src.shape[0]:
            raise ValueError(f"{fname}: tgt_in has batch {arrays['tgt'].shape[0]} but src has "
                             f"{src.shape[0]}")


def _check_keep(fname: str, config: Seq2SeqConfig, keep: Any, tgt_in: Any, xp: Any) -> None:
    if keep is None:
        return
    expected = (*tgt_in.shape, config.decoder_size)
    if keep.dtype != xp.bool or tuple(keep.shape) != expected:
        raise ValueError(f"{fname}: keep must be a bool array of shape (B, T, D) = {expected}, "
                         f"got {keep.dtype} {tuple(keep.shape)}")
