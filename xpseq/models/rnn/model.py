"""The RNN encoder-decoder's public functions and its entry on the model protocol.

Every function checks its inputs (:func:`xpseq.models.protocol.check_params`) and runs the
kernels of :mod:`xpseq.models.rnn.forward`; :func:`loss_and_grad` runs the hand-derived backward of
:mod:`xpseq.models.rnn.backward`. ``MODEL`` is this kind on the model protocol.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping


from xpseq.core import kernels
from xpseq.core.loops import scan as python_scan
from xpseq.core.recurrent import hand_derived_recurrence

from ..protocol import (
    Model,
    ModelKernels,
    check_loss_inputs,
    check_params,
    hand_derived_loss_and_grad,
)
from .backward import hand_derived_decoder, loss_vjp
from .config import Seq2SeqConfig, dropout_shapes, group_params, init_params, param_shapes
from .forward import (
    attended_arrays,
    decoder,
    decoder_params,
    decoder_spec,
    decoder_step,
    encode_vjp,
    o_keep_mask,
    target_span,
)

__all__ = ["encode", "decode_step", "forward", "loss", "loss_and_grad", "MODEL"]

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
    state, o, weights = decoder_step(group_params(params, config), config, emb, state, encoded,
                                     keep, xp=xp)
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
    keep = o_keep_mask(keep)
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
    keep = o_keep_mask(keep)
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
    keep = o_keep_mask(keep)
    xp = _check_loss_inputs("loss_and_grad", params, config, batch, keep)
    return hand_derived_loss_and_grad(loss_vjp, params, config, batch, keep, xp=xp,
                                      seed_like=params["out.W"])


def _loss(params: Mapping[str, Any], config: Seq2SeqConfig, batch: Mapping[str, Any],
          keep: Any, *, scan: Callable[..., Any] | None, xp: Any,
          custom_vjp: Callable[..., Any] | None = None) -> Any:
    total, count = _nll_sum(params, config, batch, o_keep_mask(keep), scan=scan,
                            custom_vjp=custom_vjp, xp=xp, smoothing=config.label_smoothing)
    return total / xp.maximum(count, xp.ones_like(count))


def _nll_sum(params: Mapping[str, Any], config: Seq2SeqConfig, batch: Mapping[str, Any],
             keep: Any = None, *, scan: Callable[..., Any] | None, xp: Any,
             custom_vjp: Callable[..., Any] | None = None,
             smoothing: float = 0.0) -> tuple[Any, Any]:
    logits, _ = _forward(params, config, batch["src"], batch["src_len"], batch["tgt_in"], keep,
                         scan=scan, custom_vjp=custom_vjp, xp=xp,
                         span=None if custom_vjp is None else target_span(batch, config, xp))
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

    return encode_vjp(group_params(params, config), config, src, src_len, runner=runner, xp=xp,
                      fused=recurrence is None, scan=scan)[0]


def _forward(params: Mapping[str, Any], config: Seq2SeqConfig, src: Any, src_len: Any,
             tgt_in: Any, keep: Any, *, scan: Callable[..., Any] | None, xp: Any,
             custom_vjp: Callable[..., Any] | None = None,
             span: tuple[Any, Any] | None = None) -> tuple[Any, Any]:
    """The logits ``(B, T, V)`` and attention weights (``None`` with ``custom_vjp``, whose
    decoder loop runs only over ``span``: :func:`hand_derived_decoder`)."""
    encoded = _encode(params, config, src, src_len, scan=scan, custom_vjp=custom_vjp, xp=xp)
    g = group_params(params, config)
    emb = kernels.embedding(tgt_in, params["tgt_embed"], xp=xp)
    emb = xp.permute_dims(emb, (1, 0, 2))                                           # (T,B,E)
    keep_t = None if keep is None else xp.permute_dims(keep, (1, 0, 2))             # (T,B,D)

    if custom_vjp is not None:
        loop = hand_derived_decoder(config, scan=scan, custom_vjp=custom_vjp, xp=xp)
        o, weights = loop(decoder_params(g, config), attended_arrays(encoded), encoded["mask"],
                          encoded["state"], emb, keep_t, span), None
    else:
        def body(state: dict[str, Any],
                 inputs: tuple[Any, ...]) -> tuple[dict[str, Any], tuple[Any, ...]]:
            emb_t, keep_step = inputs
            state, o, weights = decoder_step(g, config, emb_t, state, encoded, keep_step,
                                             xp=xp)
            return state, (o, weights)

        _, (o, weights) = (scan or python_scan)(body, encoded["state"], (emb, keep_t))
    # One output projection for all steps at once: (B, T, D) @ (D, V).
    logits = kernels.linear(xp.permute_dims(o, (1, 0, 2)), params["out.W"], params["out.b"], xp=xp)
    if weights is not None:
        weights = xp.permute_dims(weights, (1, 0, 2))                                 # (B,T,S)
    return logits, weights


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


#: This kind on the model protocol.
MODEL = Model(kind="rnn", Config=Seq2SeqConfig, param_shapes=param_shapes,
              init_params=init_params, loss=loss, loss_and_grad=loss_and_grad,
              forward=forward, dropout_shapes=dropout_shapes,
              kernels=ModelKernels(loss=_loss, loss_vjp=loss_vjp, nll_sum=_nll_sum,
                                   encode=_encode, decoder=decoder,
                                   decoder_spec=decoder_spec))
