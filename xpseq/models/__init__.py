"""Encoder-decoder models as pure functions over parameter dicts.

>>> from xpseq.models import Seq2SeqConfig, init_params, loss
>>> config = Seq2SeqConfig(src_vocab=20, tgt_vocab=30, attention="general")
>>> params = init_params(config, seed=0)       # NumPy float64: the same start everywhere

Convert ``params`` with ``backend.asarray`` and call :func:`loss`, :func:`forward`,
:func:`encode` or :func:`decode_step` on any backend; :func:`loss_and_grad` gives the
gradient from the hand-derived backward pass (how NumPy trains).
"""

from .seq2seq import (
    ATTENTIONS,
    STYLES,
    Seq2SeqConfig,
    decode_step,
    encode,
    forward,
    init_params,
    loss,
    loss_and_grad,
    param_shapes,
)

__all__ = ["Seq2SeqConfig", "param_shapes", "init_params", "encode", "decode_step", "forward",
           "loss", "loss_and_grad", "ATTENTIONS", "STYLES"]
