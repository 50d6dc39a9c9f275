"""The Transformer's public functions and its entry on the model protocol: each public
function checks its inputs (:func:`_check_inputs`) and runs the layers of
:mod:`xpseq.models.transformer.layers`."""

from __future__ import annotations

from typing import Any, Callable, Container, Mapping

import array_api_compat as compat

from xpseq.core import kernels

from ..protocol import (
    Model,
    ModelKernels,
    check_loss_inputs,
    check_params,
    hand_derived_loss_and_grad,
)
from .config import (
    TransformerConfig,
    dropout_shapes,
    group_params,
    init_params,
    param_shapes,
)
from .layers import (
    cross_keys_vjp,
    decoder_forward,
    encoder_vjp,
    loss_vjp,
)

__all__ = ["loss", "loss_and_grad", "forward", "cross_attention", "MODEL"]

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
    return hand_derived_loss_and_grad(loss_vjp, params, config, batch, keep, xp=xp,
                                      seed_like=params["out.b"])


# ------------------------------------------------------------------ protocol kernels


def _loss(params: Mapping[str, Any], config: TransformerConfig, batch: Mapping[str, Any],
          keep: Any, *, scan: Callable[..., Any] | None, xp: Any,
          custom_vjp: Callable[..., Any] | None = None) -> Any:
    return loss_vjp(params, config, batch, keep, xp=xp, custom_vjp=custom_vjp, scan=scan)[0]


def _nll_sum(params: Mapping[str, Any], config: TransformerConfig, batch: Mapping[str, Any],
             keep: Any = None, *, scan: Callable[..., Any] | None, xp: Any,
             custom_vjp: Callable[..., Any] | None = None) -> tuple[Any, Any]:
    logits, _ = _logits(params, config, batch["src"], batch["src_len"], batch["tgt_in"], xp=xp,
                        scan=scan)
    return kernels.nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp)


def _logits(params: Mapping[str, Any], config: TransformerConfig, src: Any, src_len: Any,
            tgt_in: Any, *, xp: Any, weights_of: Container[int] = (),
            scan: Callable[..., Any] | None = None) -> tuple[Any, list[Any]]:
    """Teacher-forced logits ``(B, T, V)`` (no dropout) and per decoder layer its
    cross-attention weights ``(B, h, T, S)`` (``None`` for the layers not in
    ``weights_of``); ``scan``: blockwise attention's loop (``backend.scan``)."""
    g = group_params(params, config)
    memory, src_keep, _ = encoder_vjp(g, config, src, src_len, None, xp=xp, scan=scan)
    cross, _ = cross_keys_vjp(g, config, memory, xp=xp)
    logits, weights, _, _ = decoder_forward(g, config, tgt_in, cross, src_keep,
                                            weights_of=weights_of, xp=xp, scan=scan)
    return logits, weights


def _encode(params: Mapping[str, Any], config: TransformerConfig, src: Any, src_len: Any, *,
            scan: Callable[..., Any] | None, xp: Any,
            custom_vjp: Callable[..., Any] | None = None) -> dict[str, Any]:
    """The source keep-mask ``src_keep (B, 1, S)`` and, per decoder layer ``i``, the
    cross-attention keys and values ``k{i}``, ``v{i}`` ``(B, h, S, d/h)``, computed once
    per source batch."""
    g = group_params(params, config)
    memory, src_keep, _ = encoder_vjp(g, config, src, src_len, None, xp=xp, scan=scan)
    encoded = {"src_keep": src_keep}
    for i, (kh, vh) in enumerate(cross_keys_vjp(g, config, memory, xp=xp)[0]):
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
    """The protocol's step: :func:`decoder_forward` on one position with the key/value
    cache as its state (``t (B,)`` and each layer's self-attention keys and values), of
    fixed capacity ``max_len`` or, with ``max_len=None``, growing (see
    :func:`decoder_forward`); the parameters are grouped once here, not at every step."""
    g = group_params(params, config)
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
        logits, weights, state, _ = decoder_forward(
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
              kernels=ModelKernels(loss=_loss, loss_vjp=loss_vjp, nll_sum=_nll_sum,
                                   encode=_encode, decoder=_decoder,
                                   decoder_spec=_decoder_spec, loss_vjp_compiles=True,
                                   rules_under_autodiff=True))
