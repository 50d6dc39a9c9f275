"""The RNN encoder-decoder's configuration and parameters.

:class:`Seq2SeqConfig` fixes a model's shape and computation; :func:`param_shapes` names
every parameter, :func:`init_params` draws them, and :func:`dropout_shapes` names the
keep-masks of a training step. The forward kernels are in :mod:`xpseq.models.rnn.forward`, the
hand-derived backward in :mod:`xpseq.models.rnn.backward`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Mapping

import numpy as np

from xpseq.core import values
from xpseq.core.recurrent import CELLS, cell_param_shapes

from ..protocol import DictConfig, check_fits, check_size, nest_by_prefix

__all__ = ["Seq2SeqConfig", "Config", "ATTENTIONS", "STYLES", "param_shapes", "init_params",
           "dropout_shapes", "param_layout", "group_params"]

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
        name = "Seq2SeqConfig"
        fix = functools.partial(object.__setattr__, self)       # frozen: set the normalised
        for field, kind in (("src_vocab", "vocab"), ("tgt_vocab", "vocab"), ("embed", "width"),
                            ("hidden", "width")):
            fix(field, check_size(name, field, getattr(self, field), kind))
        fix("cell", values.choice(name, "cell", self.cell, CELLS))
        fix("attention", values.choice(name, "attention", self.attention, ATTENTIONS))
        fix("style", values.choice(name, "style", self.style, STYLES))
        if self.input_feeding is None:
            fix("input_feeding", self.attention != "none")
        fix("input_feeding", values.flag(name, "input_feeding", self.input_feeding))
        if self.input_feeding and self.attention == "none":
            raise ValueError("Seq2SeqConfig: input_feeding feeds the attentional vector o_t back "
                             "into the cell; it needs attention other than 'none'")
        for field in ("dropout", "label_smoothing"):
            fix(field, values.real(name, field, getattr(self, field), low=0, high=1,
                                   high_open=True))

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


def dropout_shapes(config: Seq2SeqConfig, src_shape: tuple[int, ...],
                   tgt_shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """The dropout keep-masks of one training step: ``{"o": (B, T, D)}`` for the
    attentional vectors ``o_t``, or none without dropout."""
    return {"o": (*tgt_shape, config.decoder_size)} if config.dropout > 0 else {}


def param_layout(config: Seq2SeqConfig, leaf: Callable[[str], Any]) -> dict[str, Any]:
    """The parameters' nesting, ``leaf(name)`` at each flat name, by the names' first part::

        {"src_embed", "tgt_embed", "enc_fwd": cell, "enc_bwd": cell, "dec": cell,
         "att": {"W"} or {"W_q", "W_k", "v"} (general / additive only),
         "out": {"W_u" (with attention), "W", "b"}}

    with a cell ``{W_ih, b_ih, W_hh, b_hh}``."""
    return nest_by_prefix(param_shapes(config), leaf)


def group_params(params: Mapping[str, Any], config: Seq2SeqConfig) -> dict[str, Any]:
    """The flat parameter dict in :func:`param_layout`'s nesting (the same arrays, no copies)."""
    return param_layout(config, params.__getitem__)


Config = Seq2SeqConfig
