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

import array_api_compat
import numpy as np
import pytest

from xpseq import backends, models
from xpseq.core import kernels, loops, vjp
from xpseq.core.optim import adam
from xpseq.data import make_batches
from xpseq.data.batching import EOS_ID
from xpseq.models import protocol
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


def forward(params, config, src, src_len, tgt_in, *, scan=None, xp=None):
    xp = xp or array_api_compat.array_namespace(params["out.W"])
    h0 = encode(params, config, src, src_len, xp=xp)["h"]
    emb = kernels.embedding(tgt_in, params["tgt_embed"], xp=xp)
    xw = xp.permute_dims(kernels.linear(emb, params["dec.W_ih"], params["dec.b_ih"], xp=xp),
                         (1, 0, 2))                                           # (T, B, 3d)
    cell = {"W_hh": params["dec.W_hh"], "b_hh": params["dec.b_hh"]}

    def body(h, xw_t):
        (h,) = kernels.gru_step(xw_t, (h,), cell, xp=xp)
        return h, h

    _, hs = (scan or loops.scan)(body, h0, xw)
    return kernels.linear(xp.permute_dims(hs, (1, 0, 2)), params["out.W"], params["out.b"],
                          xp=xp), None


def nll_sum(params, config, batch, keep=None, *, scan=None, xp, custom_vjp=None):
    logits, _ = forward(params, config, batch["src"], batch["src_len"], batch["tgt_in"],
                        scan=scan, xp=xp)
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
        # Each part hands over the gradients of the parameters it used, nested by the
        # names' first part; named_grads names them and sums the repeats (every step's).
        d_logits, _ = nll_bp(d_loss / n)
        d_hs, d_out_W, d_out_b = out_bp(d_logits)
        trees = [{"out": {"W": d_out_W, "b": d_out_b}}]
        dh = xp.zeros_like(hs[0])
        d_xw = [None] * len(tape)
        for t in reversed(range(len(tape))):
            d_xw[t], (dh,), g = tape[t](dh + d_hs[:, t, :])
            trees.append({"dec": g})
        d_temb, d_W_ih, d_b_ih = xw_bp(xp.stack(d_xw, axis=1))
        trees.append({"dec": {"W_ih": d_W_ih, "b_ih": d_b_ih}, "tgt_embed": temb_bp(d_temb)[1],
                      "src_embed": emb_bp(xp.expand_dims(dh, axis=1) * real
                                          / count[..., None])[1]})
        return protocol.named_grads(protocol.nest_by_prefix(params, str), params, trees)

    return total / n, backprop


def checked_loss(params, config, batch, *, keep=None):
    models.check_batch(config, {k: np.asarray(v) for k, v in batch.items()})
    return loss_kernel(params, config, batch, xp=array_api_compat.array_namespace(params["out.W"]))


def checked_loss_and_grad(params, config, batch, *, keep=None):
    xp = array_api_compat.array_namespace(params["out.W"])
    value, backprop = loss_vjp(params, config, batch, xp=xp)
    return value, backprop(xp.ones((), dtype=params["out.W"].dtype))


BAG = models.Model(
    kind="bag", Config=BagConfig, param_shapes=param_shapes, init_params=init_params,
    loss=checked_loss, loss_and_grad=checked_loss_and_grad, forward=forward,
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


# ------------------------------------------------------- what every built-in kind keeps


def test_named_grads_names_and_sums_the_parts_and_refuses_a_missing_one():
    """The one way a hand-derived backward hands over its gradients: trees in the kind's
    nesting, walked along the names; repeats add (a decoder step's, a shared table)."""
    params = {"embed": np.zeros(2), "dec.W": np.zeros(2), "dec.b": np.zeros(1)}
    names = protocol.nest_by_prefix(params, str)
    assert names == {"embed": "embed", "dec": {"W": "dec.W", "b": "dec.b"}}
    names["tables"] = ["embed", "embed"]               # one parameter in two places
    grads = protocol.named_grads(names, params, [
        {"dec": {"W": np.array([1.0, 2.0])}, "tables": [np.array([1.0, 1.0]),
                                                        np.array([0.5, 0.0])]},
        {"dec": {"W": np.array([3.0, 4.0]), "b": np.array([7.0])}, "embed": np.ones(2)}])
    assert list(grads) == list(params)                 # the order of params
    np.testing.assert_array_equal(grads["dec.W"], [4.0, 6.0])
    np.testing.assert_array_equal(grads["embed"], [2.5, 2.0])
    with pytest.raises(ValueError, match=r"no gradient for \['dec.b'\]"):
        protocol.named_grads(names, params, [{"dec": {"W": 1.0}, "embed": 1.0}])


KIND_CONFIGS = {
    "rnn": dict(src_vocab=11, tgt_vocab=13, embed=6, hidden=5, attention="additive",
                style="bahdanau"),
    "transformer": dict(src_vocab=11, tgt_vocab=13, d_model=8, heads=2, d_ff=12,
                        encoder_layers=1, decoder_layers=2),
}


@pytest.mark.parametrize("kind", sorted(KIND_CONFIGS))
def test_forward_is_the_search_step_fed_the_gold_prefix(kind):
    """The protocol's ``forward``: its log-softmax and weights at position ``t`` are the
    decoder step's log-probabilities and attention after reading ``tgt_in[:, :t + 1]``,
    for every built-in kind (what a heatmap of a gold target shows)."""
    model = models.get(kind)
    config = model.Config(**KIND_CONFIGS[kind])
    params = model.init_params(config, seed=4)
    rng = np.random.default_rng(0)
    src = rng.integers(3, 11, size=(3, 5))
    src_len = np.array([5, 2, 4])
    tgt_in = np.concatenate([np.ones((3, 1), dtype=np.int64),
                             rng.integers(3, 13, size=(3, 3))], axis=1)
    logits, weights = model.forward(params, config, src, src_len, tgt_in)
    assert logits.shape == (3, 4, 13) and weights.shape == (3, 4, 5)
    xp = array_api_compat.array_namespace(src)
    encoded = model.kernels.encode(params, config, src, src_len, scan=None, xp=xp)
    step, state = model.kernels.decoder(params, config, encoded, xp=xp)
    for t in range(tgt_in.shape[1]):
        log_probs, state, attention = step(state, tgt_in[:, t])
        row = logits[:, t] - logits[:, t].max(axis=-1, keepdims=True)
        expected = row - np.log(np.exp(row).sum(axis=-1, keepdims=True))
        np.testing.assert_allclose(log_probs, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(attention, weights[:, t], rtol=1e-12, atol=1e-15)
    assert np.all(weights[1, :, 2:] == 0.0)            # padding gets no weight
