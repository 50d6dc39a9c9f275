"""A model kind defined here, outside the library, goes through the whole public API.

The model: a bag-of-embeddings encoder (the mean of the source embeddings is the decoder's
first state) and a GRU decoder without attention, written against the array API with the
core's kernels, and its hand-derived backward pass from :mod:`xpseq.core.vjp` rules. It
learns to sort a bag of tokens, which needs no word order. It is registered with
``xpseq.models.register``, trained with ``xpseq.train.fit`` (by hand-derived gradients on
NumPy, by autodiff on JAX), checkpointed, reloaded on another backend and beam-searched
with ``xpseq.search``; no library file knows it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from xpseq import backends, models
from xpseq.core import kernels, loops, vjp
from xpseq.core.optim import adam
from xpseq.data import make_batches
from xpseq.data.batching import EOS_ID
from xpseq.search import SearchOptions, search
from xpseq.testing import GRAD_ATOL, GRAD_RTOL
from xpseq.train import TrainConfig, fit
from xpseq.train import checkpoint as ckpt
from xpseq.train.callbacks import SaveCheckpoint


@dataclasses.dataclass(frozen=True)
class BagConfig:
    src_vocab: int
    tgt_vocab: int
    size: int = 16
    dropout: float = 0.0
    pad_id: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "BagConfig":
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class OtherConfig(BagConfig):
    pass


def param_shapes(c: BagConfig) -> dict:
    g = 3 * c.size
    return {"src_embed": (c.src_vocab, c.size), "tgt_embed": (c.tgt_vocab, c.size),
            "dec.W_ih": (g, c.size), "dec.W_hh": (g, c.size), "dec.b_ih": (g,),
            "dec.b_hh": (g,), "out.W": (c.tgt_vocab, c.size), "out.b": (c.tgt_vocab,)}


def init_params(c: BagConfig, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(-0.3, 0.3, size=s) for n, s in param_shapes(c).items()}


def encode(params, config, src, src_len, *, scan=None, xp):
    emb = kernels.embedding(src, params["src_embed"], xp=xp)                 # (B, S, d)
    real = xp.astype(kernels.sequence_mask(src_len, src.shape[1], xp=xp), emb.dtype)
    count = xp.astype(src_len, emb.dtype)[:, None]
    return {"h": xp.sum(emb * real[..., None], axis=1) / count}


def decoder(params, config, encoded, *, attention=True, max_len=None, xp):
    cell = {"W_hh": params["dec.W_hh"], "b_hh": params["dec.b_hh"]}

    def step(state, y):
        x = kernels.embedding(y, params["tgt_embed"], xp=xp)
        xw = kernels.linear(x, params["dec.W_ih"], params["dec.b_ih"], xp=xp)
        (h,) = kernels.gru_step(xw, (state["h"],), cell, xp=xp)
        logits = kernels.linear(h, params["out.W"], params["out.b"], xp=xp)
        return kernels.log_softmax(logits, axis=-1, xp=xp), {"h": h}, None

    return step, {"h": encoded["h"]}


def nll_sum(params, config, batch, keep=None, *, scan=None, xp, custom_vjp=None):
    h0 = encode(params, config, batch["src"], batch["src_len"], xp=xp)["h"]
    emb = kernels.embedding(batch["tgt_in"], params["tgt_embed"], xp=xp)
    xw = xp.permute_dims(kernels.linear(emb, params["dec.W_ih"], params["dec.b_ih"], xp=xp),
                         (1, 0, 2))                                           # (T, B, 3d)
    cell = {"W_hh": params["dec.W_hh"], "b_hh": params["dec.b_hh"]}

    def body(h, xw_t):
        (h,) = kernels.gru_step(xw_t, (h,), cell, xp=xp)
        return h, h

    _, hs = (scan or loops.scan)(body, h0, xw)
    logits = kernels.linear(xp.permute_dims(hs, (1, 0, 2)), params["out.W"], params["out.b"],
                            xp=xp)
    return kernels.nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp)


def loss_kernel(params, config, batch, keep=None, *, scan=None, custom_vjp=None, xp):
    total, count = nll_sum(params, config, batch, scan=scan, xp=xp)
    return total / count


def loss_vjp(params, config, batch, keep=None, *, xp):
    src, src_len, tgt_in = batch["src"], batch["src_len"], batch["tgt_in"]
    emb, emb_bp = vjp.embedding(src, params["src_embed"], xp=xp)
    real = xp.astype(kernels.sequence_mask(src_len, src.shape[1], xp=xp), emb.dtype)[..., None]
    count = xp.astype(src_len, emb.dtype)[:, None]
    h = xp.sum(emb * real, axis=1) / count
    temb, temb_bp = vjp.embedding(tgt_in, params["tgt_embed"], xp=xp)
    xw, xw_bp = vjp.linear(temb, params["dec.W_ih"], params["dec.b_ih"], xp=xp)
    cell = {"W_hh": params["dec.W_hh"], "b_hh": params["dec.b_hh"]}
    hs, tape = [], []
    for t in range(tgt_in.shape[1]):
        (h,), bp = vjp.gru_step(xw[:, t, :], (h,), cell, xp=xp)
        hs.append(h)
        tape.append(bp)
    logits, out_bp = vjp.linear(xp.stack(hs, axis=1), params["out.W"], params["out.b"], xp=xp)
    (total, n), nll_bp = vjp.nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp)

    def backprop(d_loss):
        d_logits, _ = nll_bp(d_loss / n)
        d_hs, d_out_W, d_out_b = out_bp(d_logits)
        dh = xp.zeros_like(hs[0])
        d_xw = [None] * len(tape)
        grads = {"dec.W_hh": 0.0, "dec.b_hh": 0.0}
        for t in reversed(range(len(tape))):
            d_xw[t], (dh,), g = tape[t](dh + d_hs[:, t, :])
            grads["dec.W_hh"] = grads["dec.W_hh"] + g["W_hh"]
            grads["dec.b_hh"] = grads["dec.b_hh"] + g["b_hh"]
        d_temb, grads["dec.W_ih"], grads["dec.b_ih"] = xw_bp(xp.stack(d_xw, axis=1))
        grads["tgt_embed"] = temb_bp(d_temb)[1]
        grads["src_embed"] = emb_bp(xp.expand_dims(dh, axis=1) * real / count[..., None])[1]
        grads.update({"out.W": d_out_W, "out.b": d_out_b})
        return {name: grads[name] for name in params}

    return total / n, backprop


def checked_loss(params, config, batch, *, keep=None):
    models.check_batch(config, {k: np.asarray(v) for k, v in batch.items()})
    import array_api_compat
    return loss_kernel(params, config, batch, xp=array_api_compat.array_namespace(params["out.W"]))


def checked_loss_and_grad(params, config, batch, *, keep=None):
    import array_api_compat
    xp = array_api_compat.array_namespace(params["out.W"])
    value, backprop = loss_vjp(params, config, batch, xp=xp)
    return value, backprop(xp.ones((), dtype=params["out.W"].dtype))


BAG = models.Model(
    kind="bag", Config=BagConfig, param_shapes=param_shapes, init_params=init_params,
    loss=checked_loss, loss_and_grad=checked_loss_and_grad,
    dropout_shapes=lambda config, src_shape, tgt_shape: {},
    kernels=models.ModelKernels(loss=loss_kernel, loss_vjp=loss_vjp, nll_sum=nll_sum,
                                encode=encode, decoder=decoder))
CONFIG = BagConfig(src_vocab=12, tgt_vocab=12, size=32)


def sorting_batches(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        bag = [int(t) for t in rng.integers(4, 12, size=rng.integers(2, 6))]
        pairs.append((bag + [EOS_ID], sorted(bag)))
    return make_batches(pairs, 32, bucket=4)


@pytest.fixture(scope="module")
def registered():
    models.register(BAG)
    return BAG


def test_the_registry_finds_the_kind_and_refuses_clashes(registered):
    assert models.get("bag") is BAG and models.of(CONFIG) is BAG
    assert "rnn" in models.available() and "bag" in models.available()
    assert models.register(BAG) is BAG                          # the same model: a no-op
    with pytest.raises(ValueError, match="already registered"):
        models.register(dataclasses.replace(BAG, Config=OtherConfig))
    with pytest.raises(ValueError, match="already the config"):
        models.register(dataclasses.replace(BAG, kind="bag2"))
    with pytest.raises(ValueError, match="unknown model kind"):
        models.get("nope")
    with pytest.raises(TypeError, match="Config of a model kind"):
        models.of({"src_vocab": 3})


def test_the_hand_derived_gradient_matches_jax(registered):
    pytest.importorskip("jax")
    jax_be = backends.get("jax")
    batch = sorting_batches(8, seed=1)[0]
    params = init_params(CONFIG, seed=3)
    np_be = backends.get("numpy")
    value, grads = BAG.loss_and_grad(params, CONFIG, batch)
    grad = jax_be.jit(jax_be.value_and_grad(
        lambda p, b: loss_kernel(p, CONFIG, b, scan=jax_be.scan, xp=jax_be.xp)))
    ref_value, ref_grads = grad({k: jax_be.asarray(v) for k, v in params.items()},
                                {k: jax_be.asarray(v) for k, v in batch.items()})
    np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-12)
    for name in params:
        np.testing.assert_allclose(np_be.to_numpy(grads[name]), jax_be.to_numpy(ref_grads[name]),
                                   rtol=GRAD_RTOL, atol=GRAD_ATOL, err_msg=name)


@pytest.mark.parametrize("reload_on", ["jax", "torch"])
def test_an_outside_model_trains_checkpoints_reloads_and_searches(registered, tmp_path,
                                                                 reload_on):
    pytest.importorskip(reload_on)
    train, dev = sorting_batches(480, seed=0), sorting_batches(32, seed=1)
    path = tmp_path / "bag.safetensors"
    numpy_be = backends.get("numpy")
    result = fit(CONFIG, init_params(CONFIG, seed=0), train, numpy_be, dev_batches=dev,
                 train=TrainConfig(epochs=8, optimizer=adam(2e-2), progress=False),
                 callbacks=[SaveCheckpoint(path)])
    losses = [r["dev_loss"] for r in result.history]
    assert losses[-1] < 0.3 * losses[0], losses               # it learns to sort

    loaded = ckpt.load(path, backends.get(reload_on))
    assert loaded.model is BAG and loaded.config == CONFIG
    src = np.array([[9, 4, 7, EOS_ID, 0], [5, 11, 6, 8, EOS_ID]])
    src_len = np.array([4, 5])
    options = SearchOptions(method="beam", k=3, n_best=2)
    here = search({k: numpy_be.asarray(v) for k, v in result.params.items()}, CONFIG, src,
                  src_len, numpy_be, options)
    there = search(loaded.params, loaded.config, src, src_len, backends.get(reload_on), options)
    np.testing.assert_array_equal(there.tokens, here.tokens)
    np.testing.assert_allclose(there.scores, here.scores, rtol=1e-10)
    assert there.attention is None
    best = [list(t[:n - 1]) for t, n in zip(there.tokens[:, 0], there.lengths[:, 0])]
    assert best[0] == [4, 7, 9], best                          # sorted


def test_an_outside_model_trains_on_jax_by_autodiff(registered):
    pytest.importorskip("jax")
    train = sorting_batches(64, seed=0)
    settings = TrainConfig(epochs=1, optimizer=adam(1e-2), progress=False)
    jax_result = fit(CONFIG, init_params(CONFIG, seed=0), train, backends.get("jax"),
                     train=settings)
    np_result = fit(CONFIG, init_params(CONFIG, seed=0), train, backends.get("numpy"),
                    train=settings)
    for name, value in np_result.params.items():
        np.testing.assert_allclose(jax_result.params[name], value, rtol=1e-8, atol=1e-11,
                                   err_msg=name)
