"""The Transformer's configuration and parameters: :class:`TransformerConfig`, the
parameters' names and shapes (:func:`param_shapes`), their initialisation and the dropout
masks of a training step; and the nesting the layers read them in (:func:`group_params`)."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Mapping

import numpy as np

from xpseq.core import kernels, values
from xpseq.core.blockwise import DEFAULT_BLOCK

from ..protocol import (
    DictConfig,
    check_fits,
    check_size,
)

__all__ = ["TransformerConfig", "Config", "NORMS", "POSITIONS", "param_shapes", "init_params",
           "dropout_shapes", "param_layout", "group_params"]

NORMS = ("pre", "post")
POSITIONS = ("sinusoidal", "learned")
#: How attention is computed: the whole ``(Q, K)`` scores, blockwise
#: (:func:`xpseq.core.blockwise_attention`), or blockwise above :data:`AUTO_KEYS` keys.
ATTENTION_PATHS = ("plain", "blockwise", "auto")
#: ``attention="auto"`` attends blockwise over more keys than this.
AUTO_KEYS = 1024
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
    attention : {"auto", "plain", "blockwise"}
        ``"plain"`` computes every attention from its whole ``(queries, keys)`` scores;
        ``"blockwise"`` by :func:`xpseq.core.blockwise_attention` (memory linear in the
        lengths, in training and decoding; the same values to rounding); ``"auto"`` (the
        default) blockwise where the keys are more than :data:`AUTO_KEYS`, plain below.
        The cross-attention weights a caller asks for (``need_weights``) and an ONNX
        export (whose lengths are unknown when it is traced) take the plain path.
    attention_block : int, the queries and keys per block of the blockwise path

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
    attention: str = "auto"
    attention_block: int = DEFAULT_BLOCK

    def __post_init__(self) -> None:
        name = "TransformerConfig"
        fix = functools.partial(object.__setattr__, self)       # frozen: set the normalised
        for field, kind in (("src_vocab", "vocab"), ("tgt_vocab", "vocab"),
                            ("d_model", "width"), ("heads", "width"),
                            ("encoder_layers", "layers"), ("decoder_layers", "layers"),
                            ("d_ff", "width"), ("max_len", "width"),
                            ("attention_block", "width")):
            fix(field, check_size(name, field, getattr(self, field), kind))
        for field, choices in (("norm", NORMS), ("positions", POSITIONS),
                               ("attention", ATTENTION_PATHS),
                               ("activation", tuple(kernels.ACTIVATIONS))):
            fix(field, values.choice(name, field, getattr(self, field), choices))
        for field in ("dropout", "label_smoothing"):
            fix(field, values.real(name, field, getattr(self, field), low=0, high=1,
                                   high_open=True))
        for field in ("share_embeddings", "tie_output"):
            fix(field, values.flag(name, field, getattr(self, field)))
        if self.d_model % self.heads:
            raise ValueError(f"{name}: heads ({self.heads}) must divide d_model "
                             f"({self.d_model})")
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"{name}: sinusoidal positions need an even d_model, got "
                             f"{self.d_model}")
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


# ------------------------------------------------------------------ nested parameters


def _table(config: TransformerConfig, side: str) -> str:
    return "embed" if config.share_embeddings else f"{side}_embed"


def param_layout(config: TransformerConfig, leaf: Callable[[str], Any]) -> dict[str, Any]:
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


def group_params(params: Mapping[str, Any], config: TransformerConfig) -> dict[str, Any]:
    """The flat parameter dict in :func:`param_layout`'s nesting (the same arrays, no copies)."""
    return param_layout(config, params.__getitem__)
