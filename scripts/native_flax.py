"""A peer of the benchmark: xpseq's Transformer as a Flax user writes it, with optax.

:class:`FlaxTransformer` is :mod:`xpseq.models.transformer` (pre-LN, ReLU, sinusoidal
positions, separate embeddings, an untied output layer, no dropout) as a ``flax.linen``
module: ``nn.Embed``, ``nn.MultiHeadDotProductAttention`` (the decoder's self-attention
masked by ``nn.make_causal_mask``, the source padding by a ``(B, 1, 1, S)`` mask),
``nn.LayerNorm(epsilon=1e-5)`` and ``nn.Dense``. :func:`params_from_xpseq` builds its
parameter tree from xpseq's dict (``Dense`` kernels are the transposes of xpseq's
``(out, in)`` matrices; an attention's are reshaped to ``(d, heads, d / heads)`` and
``(heads, d / heads, d)``), :func:`xpseq_params` maps a tree back. :func:`loss` is
``optax.softmax_cross_entropy`` against ``optax.smooth_labels`` targets, averaged over the
real target tokens.

:func:`make_step` is the usual Flax training step: ``jax.value_and_grad`` of the loss,
``optax.adam(lr, eps=1e-8)``'s ``update`` and ``optax.apply_updates``, jitted whole.
optax's Adam is xpseq's (and ``torch.optim.Adam``'s): the same bias corrections, epsilon
added after the second moment's, so one step agrees with xpseq's to rounding.

Linen, not NNX: at the benchmark's Transformer sizes (d_model 256, 3 + 3 layers, batches of
up to 3,000 tokens, one core) four steps of the jitted linen step took 11.3 s and an
``nnx.jit`` step of the same model built from ``nnx.MultiHeadAttention`` 11.2 s (medians of
3, on a loaded 2-core machine): the same within the noise, as both trace to one XLA program
and NNX adds only its per-call graph traversal, well under a millisecond against a step of
seconds. The benchmark keeps linen, whose step is a plain ``jax.jit`` of pure functions.

Float64: under ``jax.enable_x64(True)`` and with ``dtype=jnp.float64`` (parameters and
computation, the attention's softmax included) the loss equals xpseq's to rounding; the
caller turns the 64-bit mode on for the ``with`` block only.

Used by ``scripts/benchmarks/peers.py`` and ``tests/test_peers_bench.py``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util

__all__ = ["FlaxTransformer", "params_from_xpseq", "xpseq_params", "loss", "make_step",
           "batch_arrays", "check_supported"]

KEYS = ("src", "src_len", "tgt_in", "tgt_out")


def check_supported(config: Any) -> None:
    """The Flax peer implements xpseq's default Transformer: pre-LN, ReLU, sinusoidal
    positions, separate embeddings, an untied output layer, no dropout."""
    c = config
    if (c.positions != "sinusoidal" or c.share_embeddings or c.tie_output or c.norm != "pre"
            or c.activation != "relu" or c.dropout):
        raise ValueError("config: FlaxTransformer is pre-LN with ReLU, sinusoidal positions, "
                         "separate embeddings, an untied output layer and no dropout")


def batch_arrays(batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
    """The training arrays of a NumPy batch as int32 JAX arrays: ``src`` ``(B, S)``,
    ``src_len`` ``(B,)``, ``tgt_in`` and ``tgt_out`` ``(B, T)``."""
    return {k: jnp.asarray(batch[k], dtype=jnp.int32) for k in KEYS}


def sinusoidal_table(length: int, d: int) -> np.ndarray:
    """``(length, d)`` float64: ``PE[p, 2i] = sin(p / 10000^(2i/d))``, ``PE[p, 2i+1] =
    cos(...)``, xpseq's positions."""
    angles = np.arange(length)[:, None] * np.exp(np.arange(0, d, 2) * (-math.log(1e4) / d))
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(length, d)


class Block(nn.Module):
    """One pre-LN layer, ``x + sublayer(LN(x))`` for self-attention (causal in the
    decoder), cross-attention (decoder only) and the feed-forward block."""

    d: int
    heads: int
    d_ff: int
    cross: bool
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array,
                 memory: jax.Array | None = None) -> jax.Array:
        def attention(name: str) -> nn.Module:
            return nn.MultiHeadDotProductAttention(num_heads=self.heads, dtype=self.dtype,
                                                   param_dtype=self.dtype, deterministic=True,
                                                   name=name)

        def norm(name: str) -> nn.Module:
            return nn.LayerNorm(epsilon=1e-5, dtype=self.dtype, param_dtype=self.dtype,
                                name=name)

        h = norm("ln1")(x)
        if not self.cross:                                    # mask (B, 1, 1, S)
            x = x + attention("att")(h, h, mask=mask)
            last = "ln2"
        else:                                                 # mask (B, 1, 1, S)
            x = x + attention("self")(h, h, mask=nn.make_causal_mask(x[..., 0]))
            h = norm("ln2")(x)
            x = x + attention("cross")(h, memory, mask=mask)
            last = "ln3"
        dense = dict(dtype=self.dtype, param_dtype=self.dtype)
        h = nn.relu(nn.Dense(self.d_ff, name="ff1", **dense)(norm(last)(x)))
        return x + nn.Dense(self.d, name="ff2", **dense)(h)


class FlaxTransformer(nn.Module):
    """``__call__(src (B, S), src_len (B,), tgt_in (B, T))`` gives the teacher-forced logits
    ``(B, T, V)``."""

    src_vocab: int
    tgt_vocab: int
    d_model: int
    heads: int
    encoder_layers: int
    decoder_layers: int
    d_ff: int
    max_len: int
    dtype: Any = jnp.float32

    @classmethod
    def from_config(cls, config: Any, dtype: Any = jnp.float32) -> "FlaxTransformer":
        check_supported(config)
        c = config
        return cls(c.src_vocab, c.tgt_vocab, c.d_model, c.heads, c.encoder_layers,
                   c.decoder_layers, c.d_ff, c.max_len, dtype)

    @nn.compact
    def __call__(self, src: jax.Array, src_len: jax.Array, tgt_in: jax.Array) -> jax.Array:
        d, kw = self.d_model, dict(dtype=self.dtype, param_dtype=self.dtype)
        positions = jnp.asarray(sinusoidal_table(self.max_len, d), dtype=self.dtype)
        scale = math.sqrt(d)
        keep = (jnp.arange(src.shape[1])[None, :] < src_len[:, None])[:, None, None, :]
        x = nn.Embed(self.src_vocab, d, name="src_embed", **kw)(src) * scale \
            + positions[:src.shape[1]]
        for i in range(self.encoder_layers):
            x = Block(d, self.heads, self.d_ff, False, self.dtype, name=f"enc{i}")(x, keep)
        memory = nn.LayerNorm(epsilon=1e-5, name="enc_ln", **kw)(x)
        y = nn.Embed(self.tgt_vocab, d, name="tgt_embed", **kw)(tgt_in) * scale \
            + positions[:tgt_in.shape[1]]
        for i in range(self.decoder_layers):
            y = Block(d, self.heads, self.d_ff, True, self.dtype, name=f"dec{i}")(y, keep,
                                                                                   memory)
        y = nn.LayerNorm(epsilon=1e-5, name="dec_ln", **kw)(y)
        return nn.Dense(self.tgt_vocab, name="out", **kw)(y)


# ----------------------------------------------------------------- xpseq's parameters


def _names(config: Any) -> dict[tuple[str, ...], tuple[str, Callable, Callable]]:
    """The tree's paths -> (xpseq's name, xpseq's array -> the leaf, the leaf -> xpseq's
    array), for ``d = d_model``, ``heads`` and ``dh = d / heads``."""
    d, heads = config.d_model, config.heads
    dh = d // heads
    same = (lambda v: v, lambda v: v)
    dense = (lambda v: v.T, lambda v: v.T)
    out: dict[tuple[str, ...], tuple[str, Callable, Callable]] = {}

    def attention(path: tuple[str, ...], prefix: str) -> None:
        for n, flax_name in (("q", "query"), ("k", "key"), ("v", "value")):
            out[path + (flax_name, "kernel")] = (f"{prefix}.W_{n}",
                                                 lambda v: v.T.reshape(d, heads, dh),
                                                 lambda v: v.reshape(d, d).T)
            out[path + (flax_name, "bias")] = (f"{prefix}.b_{n}",
                                               lambda v: v.reshape(heads, dh),
                                               lambda v: v.reshape(d))
        out[path + ("out", "kernel")] = (f"{prefix}.W_o", lambda v: v.T.reshape(heads, dh, d),
                                         lambda v: v.reshape(d, d).T)
        out[path + ("out", "bias")] = (f"{prefix}.b_o", *same)

    def norm(path: tuple[str, ...], prefix: str) -> None:
        out[path + ("scale",)] = (f"{prefix}.g", *same)
        out[path + ("bias",)] = (f"{prefix}.b", *same)

    def feed_forward(path: tuple[str, ...], prefix: str) -> None:
        for j in (1, 2):
            out[path + (f"ff{j}", "kernel")] = (f"{prefix}.ff.W_{j}", *dense)
            out[path + (f"ff{j}", "bias")] = (f"{prefix}.ff.b_{j}", *same)

    for i in range(config.encoder_layers):
        attention((f"enc{i}", "att"), f"enc{i}.att")
        for j in (1, 2):
            norm((f"enc{i}", f"ln{j}"), f"enc{i}.ln{j}")
        feed_forward((f"enc{i}",), f"enc{i}")
    for i in range(config.decoder_layers):
        attention((f"dec{i}", "self"), f"dec{i}.self")
        attention((f"dec{i}", "cross"), f"dec{i}.cross")
        for j in (1, 2, 3):
            norm((f"dec{i}", f"ln{j}"), f"dec{i}.ln{j}")
        feed_forward((f"dec{i}",), f"dec{i}")
    norm(("enc_ln",), "enc.ln")
    norm(("dec_ln",), "dec.ln")
    out[("src_embed", "embedding")] = ("src_embed", *same)
    out[("tgt_embed", "embedding")] = ("tgt_embed", *same)
    out[("out", "kernel")] = ("out.W", *dense)
    out[("out", "bias")] = ("out.b", *same)
    return out


def params_from_xpseq(params: Mapping[str, np.ndarray], config: Any,
                      dtype: Any = jnp.float32) -> dict:
    """``{"params": tree}`` for :class:`FlaxTransformer` holding xpseq's parameters
    (``init_params`` names; float64 needs JAX's 64-bit mode).

    Raises ``ValueError`` if ``params`` does not have exactly the names of ``config``'s
    Transformer."""
    names = _names(config)
    differ = sorted({n for n, _, _ in names.values()} ^ set(params))
    if differ:
        raise ValueError(f"params: names differ from the Flax model's: {differ}")
    flat = {path: jnp.asarray(to_leaf(np.asarray(params[name])), dtype=dtype)
            for path, (name, to_leaf, _) in names.items()}
    return {"params": traverse_util.unflatten_dict(flat)}


def xpseq_params(variables: Mapping, config: Any) -> dict[str, np.ndarray]:
    """A tree of :class:`FlaxTransformer` (``{"params": tree}``) under xpseq's names and
    layouts, as NumPy arrays."""
    flat = traverse_util.flatten_dict(variables["params"])
    return {name: np.asarray(from_leaf(np.asarray(flat[path])))
            for path, (name, _, from_leaf) in _names(config).items()}


def loss(model: FlaxTransformer, variables: Mapping, batch: Mapping[str, jax.Array],
         label_smoothing: float, pad_id: int = 0) -> jax.Array:
    """The label-smoothed cross-entropy, averaged over the real tokens of
    ``batch["tgt_out"] (B, T)``."""
    logits = model.apply(variables, batch["src"], batch["src_len"], batch["tgt_in"])
    target = optax.smooth_labels(jax.nn.one_hot(batch["tgt_out"], logits.shape[-1],
                                                dtype=logits.dtype), label_smoothing)
    ce = optax.softmax_cross_entropy(logits, target)
    real = (batch["tgt_out"] != pad_id).astype(logits.dtype)
    return jnp.sum(ce * real) / jnp.sum(real)


def make_step(model: FlaxTransformer, variables: Mapping, label_smoothing: float,
              lr: float = 1e-3) -> Callable[[Mapping], jax.Array]:
    """``step(batch) -> loss``: one ``optax.adam(lr)`` step on a batch of JAX arrays
    (:func:`batch_arrays`), jitted whole; ``step.state`` holds ``variables`` and the
    optimiser's state. The loss is returned without waiting for it."""
    tx = optax.adam(lr, eps=1e-8)

    @jax.jit
    def train_step(state: dict, batch: Mapping) -> tuple[dict, jax.Array]:
        value, grads = jax.value_and_grad(
            lambda v: loss(model, v, batch, label_smoothing))(state["variables"])
        updates, opt_state = tx.update(grads, state["opt"], state["variables"])
        return {"variables": optax.apply_updates(state["variables"], updates),
                "opt": opt_state}, value

    def step(batch: Mapping) -> jax.Array:
        step.state, value = train_step(step.state, batch)
        return value

    step.state = {"variables": variables, "opt": tx.init(variables)}
    step.jitted = train_step                    # the jitted function, for .lower
    return step
