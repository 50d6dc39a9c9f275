"""A peer of the benchmark: xpseq's two model kinds as a Keras 3 user writes them, on JAX.

:class:`KerasSeq2Seq` is :mod:`xpseq.models.rnn` (LSTM cells, Luong ``general`` attention
with input feeding, no dropout) built from ``keras.layers``: ``Embedding``, a
``Bidirectional(LSTM(return_sequences=True, return_state=True))`` given the source mask
(padded steps keep the state, in both directions), an ``LSTMCell`` decoder run over the
target positions by ``keras.ops.scan`` (``lax.scan`` on JAX) with the attention and the
input feeding inside the step, and one output ``Dense`` for all positions. The keys
``W m_j`` are computed once per sentence, as xpseq and ``scripts/native_torch.py`` do.

:class:`KerasTransformer` is :mod:`xpseq.models.transformer` (pre-LN, ReLU, sinusoidal
positions, separate embeddings, an untied output layer) built from
``keras.layers.MultiHeadAttention``, ``LayerNormalization(epsilon=1e-5)`` and ``Dense``;
the decoder's self-attention is ``use_causal_mask=True``, the source padding an
``attention_mask``.

Both load xpseq's parameters (``from_xpseq(params, config)``; Keras's ``Dense``
kernels are the transposes of xpseq's ``(out, in)`` matrices, an attention's kernels are
reshaped to ``(d, heads, d / heads)``, and a Keras LSTM has one bias, the sum of xpseq's
``b_ih + b_hh``); ``xpseq_values(values)`` maps a list of the model's variable values back
to xpseq's names. The losses (:func:`rnn_loss`, :func:`transformer_loss`) are Keras's
cross-entropies averaged over the real target tokens (label smoothing as
``config.label_smoothing``).

:func:`make_step` is the fast path the Keras documentation gives for a custom training
loop on JAX: ``model.stateless_call`` inside ``jax.value_and_grad`` and
``optimizer.stateless_apply``, the whole step under one ``jax.jit``, with
``keras.optimizers.Adam(lr, epsilon=1e-8)``. Keras's Adam is not exactly xpseq's (or
``torch.optim.Adam``'s): both bias-correct, but Keras adds its epsilon to ``sqrt(v)`` before
the second moment's correction (``p -= lr · sqrt(1 − b2ᵗ) / (1 − b1ᵗ) · m / (sqrt(v) + ε)``)
where xpseq adds it after (``... / (sqrt(v) / sqrt(1 − b2ᵗ) + ε)``). Keras's ``ε`` is
xpseq's ``ε / sqrt(1 − b2ᵗ)``: the same update for gradients well above ``ε``, a slightly
smaller one for the smallest. :func:`matching_adam_eps` gives the xpseq epsilon that takes
Keras's first step exactly (the step check uses it).

Float32 only: Keras cannot compute these models in float64. Its type promotion turns every
64-bit result type into the 32-bit one (``keras.backend.result_type("float64", float)`` is
``"float32"``, whatever ``floatx`` is), so ``keras.ops.tanh`` of a float64 array is float32
and the LSTM cells would round through float32; and ``MultiHeadAttention`` runs
``jax.nn.dot_product_attention``, whose softmax is float32 for any input. The peers' loss is
therefore checked in float32 against xpseq's float64 loss, to 1e-5 relative (float32
rounding over a sentence's steps and layers is a few 1e-7 at most; any difference of
wiring is orders of magnitude larger).

The module sets ``KERAS_BACKEND=jax`` if it is unset before importing Keras, and raises
``RuntimeError`` if Keras was already loaded with another backend.

Used by ``scripts/benchmarks/peers.py`` and ``tests/test_peers_bench.py``.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Mapping, Sequence

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers, ops  # noqa: E402

if keras.backend.backend() != "jax":
    raise RuntimeError(f"native_keras needs Keras on JAX; Keras was loaded with the "
                       f"{keras.backend.backend()!r} backend (set KERAS_BACKEND=jax before "
                       f"importing keras)")

__all__ = ["KerasSeq2Seq", "KerasTransformer", "rnn_loss", "transformer_loss", "make_step",
           "matching_adam_eps", "batch_arrays", "model_loss", "loss_function",
           "first_step_gradients"]

KEYS = ("src", "src_len", "tgt_in", "tgt_out")

# An entry of a model's layout: (variable, xpseq's params -> its value,
# {xpseq name: its value -> that parameter}).
Entry = tuple[Any, Callable[[Mapping], np.ndarray], dict[str, Callable[[np.ndarray], Any]]]


def batch_arrays(batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
    """The training arrays of a NumPy batch as int32 JAX arrays: ``src`` ``(B, S)``,
    ``src_len`` ``(B,)``, ``tgt_in`` and ``tgt_out`` ``(B, T)``."""
    return {k: jnp.asarray(batch[k], dtype=jnp.int32) for k in KEYS}


def _dummy_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A one-sentence batch ``(src, src_len, tgt_in)`` that builds a model's layers."""
    ids = np.ones((1, 2), dtype=np.int32)
    return ids, np.full((1,), 2, dtype=np.int32), ids


def _source_mask(src: Any, src_len: Any) -> Any:
    """``(B, S)``: True at the real source positions."""
    return ops.arange(ops.shape(src)[1])[None, :] < src_len[:, None]


def _dense(layer: Any, w: str, b: str | None = None) -> list[Entry]:
    """A ``Dense`` layer holding xpseq's ``(out, in)`` matrix ``w`` (and bias ``b``)."""
    entries: list[Entry] = [(layer.kernel, lambda p: p[w].T, {w: lambda v: v.T})]
    if b is not None:
        entries.append((layer.bias, lambda p: p[b], {b: lambda v: v}))
    return entries


def _lstm(cell: Any, prefix: str) -> list[Entry]:
    """A Keras ``LSTMCell`` holding xpseq's cell ``prefix`` (gates i, f, g, o in both; one
    bias, the sum of xpseq's two)."""
    ih, hh, bi, bh = (f"{prefix}.{n}" for n in ("W_ih", "W_hh", "b_ih", "b_hh"))
    return [(cell.kernel, lambda p: p[ih].T, {ih: lambda v: v.T}),
            (cell.recurrent_kernel, lambda p: p[hh].T, {hh: lambda v: v.T}),
            (cell.bias, lambda p: p[bi] + p[bh], {bi: lambda v: v, bh: lambda v: v})]


class _XpseqLayout:
    """Loading xpseq's parameters into a built model and reading them back."""

    def layout(self) -> list[Entry]:
        raise NotImplementedError

    def load_xpseq(self, params: Mapping[str, np.ndarray]) -> None:
        """Assign xpseq's parameters (NumPy, any float dtype) to the model's variables."""
        entries = self.layout()
        names = {n for _, _, back in entries for n in back}
        differ = sorted(names ^ set(params))
        if differ:
            raise ValueError(f"params: names differ from the model's: {differ}")
        for variable, load, _ in entries:
            value = np.asarray(load(params))
            if tuple(value.shape) != tuple(variable.shape):
                raise ValueError(f"params: {variable.path} needs shape {tuple(variable.shape)}"
                                 f", got {value.shape}")
            variable.assign(value.astype(variable.dtype))

    def xpseq_values(self, values: Sequence[Any] | None = None) -> dict[str, np.ndarray]:
        """``values`` (a list in the order of ``trainable_variables``; by default the
        variables' own) under xpseq's names and layouts, as NumPy arrays. The merged LSTM
        bias is given under both ``b_ih`` and ``b_hh``."""
        if values is None:
            values = [v.value for v in self.trainable_variables]
        index = {id(v): i for i, v in enumerate(self.trainable_variables)}
        out: dict[str, np.ndarray] = {}
        for variable, _, back in self.layout():
            value = np.asarray(values[index[id(variable)]])
            out.update({name: np.asarray(fn(value)) for name, fn in back.items()})
        return out


# ---------------------------------------------------------------------------- the RNN


class KerasSeq2Seq(_XpseqLayout, keras.Model):
    """Bi-LSTM encoder, ``LSTMCell`` decoder (``keras.ops.scan``) with Luong general
    attention and input feeding; ``call(src (B, S), src_len (B,), tgt_in (B, T))`` gives the
    teacher-forced logits ``(B, T, V)``."""

    def __init__(self, src_vocab: int, tgt_vocab: int, embed: int, hidden: int):
        super().__init__()
        dec = 2 * hidden                                        # D: the decoder's units
        self.src_embed = layers.Embedding(src_vocab, embed)
        self.tgt_embed = layers.Embedding(tgt_vocab, embed)
        self.encoder = layers.Bidirectional(
            layers.LSTM(hidden, return_sequences=True, return_state=True))
        self.cell = layers.LSTMCell(dec)                       # input [E y_{t-1}; o_{t-1}]
        self.att = layers.Dense(dec, use_bias=False)           # keys W m_j
        self.combine = layers.Dense(dec, use_bias=False, activation="tanh")
        self.out = layers.Dense(tgt_vocab)

    @classmethod
    def from_xpseq(cls, params: Mapping[str, np.ndarray], config: Any) -> "KerasSeq2Seq":
        """The model built and holding xpseq's parameters (``init_params`` names) in
        float32."""
        from .native_torch import check_supported  # the one configuration the peers run

        check_supported(config)
        model = cls(config.src_vocab, config.tgt_vocab, config.embed, config.hidden)
        model(*_dummy_inputs())                                 # builds every layer
        model.load_xpseq(params)
        return model

    def layout(self) -> list[Entry]:
        forward, backward = self.encoder.forward_layer.cell, self.encoder.backward_layer.cell
        return ([(self.src_embed.embeddings, lambda p: p["src_embed"],
                  {"src_embed": lambda v: v}),
                 (self.tgt_embed.embeddings, lambda p: p["tgt_embed"],
                  {"tgt_embed": lambda v: v})]
                + _lstm(forward, "enc_fwd") + _lstm(backward, "enc_bwd") + _lstm(self.cell, "dec")
                + _dense(self.att, "att.W") + _dense(self.combine, "out.W_u")
                + _dense(self.out, "out.W", "out.b"))

    def call(self, src: Any, src_len: Any, tgt_in: Any) -> Any:
        mask = _source_mask(src, src_len)
        memory, h_f, c_f, h_b, c_b = self.encoder(self.src_embed(src), mask=mask)
        keys = self.att(memory)                                              # (B, S, D)
        h0 = ops.concatenate([h_f, h_b], axis=-1)               # [h→_final; h←_final]
        c0 = ops.concatenate([c_f, c_b], axis=-1)
        emb = ops.transpose(self.tgt_embed(tgt_in), (1, 0, 2))               # (T, B, E)

        def step(carry: tuple, x: Any) -> tuple:
            h, c, o = carry
            h, (h, c) = self.cell(ops.concatenate([x, o], axis=-1), [h, c])
            scores = ops.einsum("bsd,bd->bs", keys, h)                        # sᵀ W m_j
            alpha = ops.softmax(ops.where(mask, scores, -np.inf), axis=-1)
            context = ops.einsum("bs,bsd->bd", alpha, memory)
            o = self.combine(ops.concatenate([context, h], axis=-1))
            return (h, c, o), o

        _, outputs = ops.scan(step, (h0, c0, ops.zeros_like(h0)), emb)       # (T, B, D)
        return self.out(ops.transpose(outputs, (1, 0, 2)))     # one projection for all


def rnn_loss(logits: Any, tgt_out: Any, pad_id: int = 0) -> Any:
    """Mean cross-entropy of ``logits (B, T, V)`` over the real (non-pad) tokens of
    ``tgt_out (B, T)``."""
    ce = keras.losses.sparse_categorical_crossentropy(tgt_out, logits, from_logits=True)
    real = ops.cast(tgt_out != pad_id, logits.dtype)
    return ops.sum(ce * real) / ops.sum(real)


# ---------------------------------------------------------------------- the Transformer


def sinusoidal_table(length: int, d: int) -> np.ndarray:
    """``(length, d)`` float64: ``PE[p, 2i] = sin(p / 10000^(2i/d))``, ``PE[p, 2i+1] =
    cos(...)``, the positions of Vaswani et al. (and of xpseq)."""
    angles = np.arange(length)[:, None] * np.exp(np.arange(0, d, 2) * (-math.log(1e4) / d))
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(length, d)


def _attention(layer: Any, prefix: str, d: int, heads: int) -> list[Entry]:
    """A ``MultiHeadAttention`` holding xpseq's attention ``prefix``: the query, key and
    value kernels ``(d, heads, d / heads)`` are ``W.T`` reshaped, the output kernel
    ``(heads, d / heads, d)`` is ``W_o.T`` reshaped."""
    dh = d // heads
    entries: list[Entry] = []
    for n, dense in (("q", layer.query_dense), ("k", layer.key_dense),
                     ("v", layer.value_dense)):
        w, b = f"{prefix}.W_{n}", f"{prefix}.b_{n}"
        entries += [(dense.kernel, lambda p, w=w: p[w].T.reshape(d, heads, dh),
                     {w: lambda v: v.reshape(d, d).T}),
                    (dense.bias, lambda p, b=b: p[b].reshape(heads, dh),
                     {b: lambda v: v.reshape(d)})]
    w, b = f"{prefix}.W_o", f"{prefix}.b_o"
    return entries + [(layer.output_dense.kernel, lambda p: p[w].T.reshape(heads, dh, d),
                       {w: lambda v: v.reshape(d, d).T}),
                      (layer.output_dense.bias, lambda p: p[b], {b: lambda v: v})]


def _norm(layer: Any, prefix: str) -> list[Entry]:
    g, b = f"{prefix}.g", f"{prefix}.b"
    return [(layer.gamma, lambda p: p[g], {g: lambda v: v}),
            (layer.beta, lambda p: p[b], {b: lambda v: v})]


class _Block(keras.layers.Layer):
    """One pre-LN layer: self-attention (causal in the decoder), cross-attention (decoder
    only), feed-forward, each ``x + sublayer(LN(x))``."""

    def __init__(self, d: int, heads: int, d_ff: int, cross: bool):
        super().__init__()
        self.self_att = layers.MultiHeadAttention(heads, d // heads)
        self.ln1 = layers.LayerNormalization(epsilon=1e-5)
        self.cross_att = layers.MultiHeadAttention(heads, d // heads) if cross else None
        self.ln2 = layers.LayerNormalization(epsilon=1e-5)
        self.ln3 = layers.LayerNormalization(epsilon=1e-5) if cross else None
        self.ff1 = layers.Dense(d_ff, activation="relu")
        self.ff2 = layers.Dense(d)

    def call(self, x: Any, mask: Any, memory: Any = None) -> Any:
        h = self.ln1(x)
        if self.cross_att is None:                           # encoder: mask (B, S, S)
            x = x + self.self_att(h, h, attention_mask=mask)
            last = self.ln2
        else:                                                # decoder: mask (B, T, S)
            x = x + self.self_att(h, h, use_causal_mask=True)
            h = self.ln2(x)
            x = x + self.cross_att(h, memory, attention_mask=mask)
            last = self.ln3
        return x + self.ff2(self.ff1(last(x)))

    def layout(self, prefix: str, d: int, heads: int) -> list[Entry]:
        ff = (_dense(self.ff1, f"{prefix}.ff.W_1", f"{prefix}.ff.b_1")
              + _dense(self.ff2, f"{prefix}.ff.W_2", f"{prefix}.ff.b_2"))
        if self.cross_att is None:
            return (_attention(self.self_att, f"{prefix}.att", d, heads)
                    + _norm(self.ln1, f"{prefix}.ln1") + _norm(self.ln2, f"{prefix}.ln2") + ff)
        return (_attention(self.self_att, f"{prefix}.self", d, heads)
                + _attention(self.cross_att, f"{prefix}.cross", d, heads)
                + _norm(self.ln1, f"{prefix}.ln1") + _norm(self.ln2, f"{prefix}.ln2")
                + _norm(self.ln3, f"{prefix}.ln3") + ff)


class KerasTransformer(_XpseqLayout, keras.Model):
    """The pre-LN encoder-decoder; ``call(src (B, S), src_len (B,), tgt_in (B, T))`` gives
    the teacher-forced logits ``(B, T, V)``."""

    def __init__(self, config: Any):
        super().__init__()
        c = config
        if (c.positions != "sinusoidal" or c.share_embeddings or c.tie_output
                or c.norm != "pre" or c.activation != "relu" or c.dropout):
            raise ValueError("config: KerasTransformer is pre-LN with ReLU, sinusoidal "
                             "positions, separate embeddings, an untied output layer and no "
                             "dropout")
        self.config = c
        d = c.d_model
        self.src_embed = layers.Embedding(c.src_vocab, d)
        self.tgt_embed = layers.Embedding(c.tgt_vocab, d)
        self.encoder = [_Block(d, c.heads, c.d_ff, False) for _ in range(c.encoder_layers)]
        self.decoder = [_Block(d, c.heads, c.d_ff, True) for _ in range(c.decoder_layers)]
        self.enc_ln = layers.LayerNormalization(epsilon=1e-5)
        self.dec_ln = layers.LayerNormalization(epsilon=1e-5)
        self.out = layers.Dense(c.tgt_vocab)
        self.positions = sinusoidal_table(c.max_len, d).astype("float32")     # a constant

    @classmethod
    def from_xpseq(cls, params: Mapping[str, np.ndarray],
                   config: Any) -> "KerasTransformer":
        """The model built and holding xpseq's parameters, in float32."""
        model = cls(config)
        model(*_dummy_inputs())                                 # builds every layer
        model.load_xpseq(params)
        return model

    def layout(self) -> list[Entry]:
        d, heads = self.config.d_model, self.config.heads
        entries: list[Entry] = [
            (self.src_embed.embeddings, lambda p: p["src_embed"], {"src_embed": lambda v: v}),
            (self.tgt_embed.embeddings, lambda p: p["tgt_embed"], {"tgt_embed": lambda v: v})]
        for i, block in enumerate(self.encoder):
            entries += block.layout(f"enc{i}", d, heads)
        for i, block in enumerate(self.decoder):
            entries += block.layout(f"dec{i}", d, heads)
        return (entries + _norm(self.enc_ln, "enc.ln") + _norm(self.dec_ln, "dec.ln")
                + _dense(self.out, "out.W", "out.b"))

    def _embed(self, table: Any, ids: Any) -> Any:
        scale = math.sqrt(self.config.d_model)
        return table(ids) * scale + self.positions[:ids.shape[1]]

    def call(self, src: Any, src_len: Any, tgt_in: Any) -> Any:
        keep = _source_mask(src, src_len)[:, None, :]                        # (B, 1, S)
        x = self._embed(self.src_embed, src)
        enc_mask = ops.broadcast_to(keep, (src.shape[0], src.shape[1], src.shape[1]))
        for block in self.encoder:
            x = block(x, enc_mask)
        memory = self.enc_ln(x)
        y = self._embed(self.tgt_embed, tgt_in)
        cross_mask = ops.broadcast_to(keep, (src.shape[0], tgt_in.shape[1], src.shape[1]))
        for block in self.decoder:
            y = block(y, cross_mask, memory)
        return self.out(self.dec_ln(y))


def transformer_loss(logits: Any, tgt_out: Any, label_smoothing: float,
                     pad_id: int = 0) -> Any:
    """Label-smoothed cross-entropy of ``logits (B, T, V)``, averaged over the real tokens
    of ``tgt_out (B, T)`` (Keras smooths a one-hot target to ``(1 − ε) y + ε / V``, as
    xpseq and torch do)."""
    target = ops.one_hot(tgt_out, logits.shape[-1], dtype=logits.dtype)
    ce = keras.losses.categorical_crossentropy(target, logits, from_logits=True,
                                               label_smoothing=label_smoothing)
    real = ops.cast(tgt_out != pad_id, logits.dtype)
    return ops.sum(ce * real) / ops.sum(real)


def loss_function(model: Any) -> Callable[[Any, Mapping[str, Any]], Any]:
    """``loss(logits, batch)`` for ``model`` (the RNN's, or the Transformer's with its
    config's label smoothing)."""
    if isinstance(model, KerasTransformer):
        smoothing = model.config.label_smoothing
        return lambda logits, batch: transformer_loss(logits, batch["tgt_out"], smoothing)
    if isinstance(model, KerasSeq2Seq):
        return lambda logits, batch: rnn_loss(logits, batch["tgt_out"])
    raise TypeError(f"model: a KerasSeq2Seq or KerasTransformer, got {type(model).__name__}")


def model_loss(model: Any, batch: Mapping[str, np.ndarray]) -> float:
    """The model's loss on a NumPy ``batch`` (its variables as they are)."""
    arrays = batch_arrays(batch)
    logits = model(arrays["src"], arrays["src_len"], arrays["tgt_in"])
    return float(loss_function(model)(logits, arrays))


# -------------------------------------------------------------------- the training step


def matching_adam_eps(eps: float = 1e-8, b2: float = 0.999, step: int = 1) -> float:
    """The epsilon of xpseq's (torch's) Adam whose update at ``step`` is Keras's with
    ``epsilon=eps``: ``eps / sqrt(1 − b2^step)`` (see the module docstring)."""
    return eps / math.sqrt(1.0 - b2 ** step)


def make_step(model: Any, lr: float = 1e-3, eps: float = 1e-8) -> Callable[[Mapping], Any]:
    """``step(batch) -> loss``: one ``keras.optimizers.Adam(lr, epsilon=eps)`` step of
    ``model`` on a batch of JAX arrays (:func:`batch_arrays`), jitted whole.

    The step holds the model's and optimiser's values in ``step.state`` (``trainable``,
    ``non_trainable``, ``optimizer``: lists of JAX arrays; ``step.jitted(state, batch)`` is
    the jitted function, for ``.lower``) and does not write them back
    into the Keras variables; ``step.model.xpseq_values(step.state["trainable"])`` reads
    them. The loss is returned without waiting for it (JAX's asynchronous dispatch).
    """
    loss_of = loss_function(model)
    optimizer = keras.optimizers.Adam(learning_rate=lr, epsilon=eps)
    optimizer.build(model.trainable_variables)

    def compute_loss(trainable: list, non_trainable: list, batch: Mapping) -> tuple:
        logits, non_trainable = model.stateless_call(trainable, non_trainable, batch["src"],
                                                     batch["src_len"], batch["tgt_in"])
        return loss_of(logits, batch), non_trainable

    @jax.jit
    def train_step(state: dict, batch: Mapping) -> tuple[dict, Any]:
        (loss, non_trainable), grads = jax.value_and_grad(compute_loss, has_aux=True)(
            state["trainable"], state["non_trainable"], batch)
        trainable, opt = optimizer.stateless_apply(state["optimizer"], grads,
                                                   state["trainable"])
        return {"trainable": trainable, "non_trainable": non_trainable, "optimizer": opt}, loss

    def step(batch: Mapping) -> Any:
        step.state, loss = train_step(step.state, batch)
        return loss

    step.state = {"trainable": [v.value for v in model.trainable_variables],
                  "non_trainable": [v.value for v in model.non_trainable_variables],
                  "optimizer": [v.value for v in optimizer.variables]}
    step.model, step.optimizer, step.jitted = model, optimizer, train_step
    # Where each trainable variable's first moment sits in the optimiser's state (Keras
    # keeps the moments in the order of the variables it was built with).
    position = {id(v): i for i, v in enumerate(optimizer.variables)}
    step.moments = [position[id(m)] for m in optimizer._momentums]
    return step


def first_step_gradients(step: Callable) -> dict[str, np.ndarray]:
    """The gradients the first call of :func:`make_step`'s ``step`` took, under xpseq's
    names: Adam's first moment after one step is ``(1 − b1) · g``, so they are the moments
    divided by ``1 − b1`` (to float32 rounding). Read from the step's own state, they are
    the jitted program's gradients, its float32 rounding included."""
    b1 = step.optimizer.beta_1
    moments = [np.asarray(step.state["optimizer"][i]) / np.float32(1.0 - b1)
               for i in step.moments]
    return step.model.xpseq_values(moments)


# ------------------------------------------------------------------------- Model.fit


class _Fitted(keras.Model):
    """``model`` as ``fit`` calls a model: one input, the tuple ``(src, src_len, tgt_in)``."""

    def __init__(self, model: Any):
        super().__init__()
        self.inner = model

    def call(self, inputs: tuple) -> Any:
        return self.inner(*inputs)


class _Batches(keras.utils.PyDataset):
    """NumPy batches as ``fit`` reads them: ``((src, src_len, tgt_in), tgt_out)``, int32,
    in order."""

    def __init__(self, batches: Sequence[Mapping[str, np.ndarray]]):
        super().__init__()
        self.batches = [((np.asarray(b["src"], np.int32), np.asarray(b["src_len"], np.int32),
                          np.asarray(b["tgt_in"], np.int32)),
                         np.asarray(b["tgt_out"], np.int32)) for b in batches]

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> tuple:
        return self.batches[i]


def make_fit(model: Any, batches: Sequence[Mapping[str, np.ndarray]], lr: float = 1e-3,
             eps: float = 1e-8) -> Callable[[], float]:
    """``epoch() -> loss``: one ``model.fit(..., epochs=1, verbose=0)`` over the NumPy
    ``batches`` in order, the way most Keras users train: ``compile`` with
    ``keras.optimizers.Adam(lr, epsilon=eps)`` and the model's loss (:func:`loss_function`;
    Keras hands ``fit``'s loss the targets as float32, so they are cast back to int32),
    ``jit_compile`` left at its default (``"auto"``: jitted on JAX), the batches a
    ``keras.utils.PyDataset``. The returned loss is the epoch's mean, as ``History`` keeps
    it; ``epoch.model`` is the model ``fit`` trains (its variables are updated in place)."""
    loss_of = loss_function(model)
    fitted = _Fitted(model)
    fitted.compile(optimizer=keras.optimizers.Adam(learning_rate=lr, epsilon=eps),
                   loss=lambda y, logits: loss_of(logits, {"tgt_out": ops.cast(y, "int32")}))
    data = _Batches(batches)

    def epoch() -> float:
        history = fitted.fit(data, epochs=1, verbose=0, shuffle=False)
        return float(history.history["loss"][-1])

    epoch.model = model
    return epoch
