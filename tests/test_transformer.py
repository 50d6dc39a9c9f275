"""The ``transformer`` model kind: torch.nn.Transformer parity (logits and gradients in
float64, pre-LN and post-LN), the hand-derived backward pass against autodiff, one decoder
forward for training, its backward and the search step (the cached step against the
teacher-forced logits, and against recomputing the whole prefix), a checkpoint of an
earlier version that translates as it did, and training through the same ``fit`` as the
RNN model."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pytest
from helpers import load_script

from xpseq import backends, models
from xpseq.core.optim import adam
from xpseq.data import EOS_ID, Vocab, make_batches
from xpseq.models import transformer as TM
from xpseq.models.transformer.layers import decoder_forward
from xpseq.search import CheckpointDecoder, SearchOptions, search
from xpseq.tasks import translate
from xpseq.train import TrainConfig, fit
from xpseq.train import checkpoint as ckpt

T = models.get("transformer")
CONFIG = T.Config(src_vocab=11, tgt_vocab=13, d_model=8, heads=2, encoder_layers=2,
                  decoder_layers=2, d_ff=12)
BATCH = {"src": np.array([[4, 5, 6, 2, 0], [7, 8, 2, 0, 0], [9, 2, 0, 0, 0]]),
         "src_len": np.array([4, 3, 2]),
         "tgt_in": np.array([[1, 5, 6, 7], [1, 9, 10, 0], [1, 12, 0, 0]]),
         "tgt_out": np.array([[5, 6, 7, 2], [9, 10, 2, 0], [12, 2, 0, 0]])}


def on(be, tree):
    return {k: be.asarray(v) for k, v in tree.items()}


# ----------------------------------------------------------------- torch.nn.Transformer
#
# scripts/native_torch.py's NativeTransformer: nn.Transformer(batch_first=True) with
# nn.Embedding, the positions (written in torch) and an output nn.Linear, loaded with
# xpseq's parameters; the same reference the benchmark trains.


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")   # torch's own, at init
@pytest.mark.parametrize("norm, activation, smoothing", [("pre", "relu", 0.0),
                                                         ("post", "gelu", 0.1)])
def test_torch_transformer_gives_the_same_logits_and_gradients(norm, activation, smoothing):
    torch = pytest.importorskip("torch")
    config = dataclasses.replace(CONFIG, norm=norm, activation=activation,
                                 label_smoothing=smoothing)
    params = T.init_params(config, seed=1)
    params = {k: v + 0.05 * np.random.default_rng(2).standard_normal(v.shape)
              for k, v in params.items()}                 # no zero biases, no unit gains
    model = load_script("native_torch").NativeTransformer.from_xpseq(params, config,
                                                                      torch.float64)
    batch = {k: torch.tensor(v) for k, v in BATCH.items()}
    logits = model(batch["src"], batch["src_len"], batch["tgt_in"])
    loss = model.loss(batch)
    loss.backward()
    np_be = backends.get("numpy")
    ours, _ = T_logits(params, config, np_be)
    np.testing.assert_allclose(ours, logits.detach().numpy(), rtol=1e-12, atol=1e-13)
    value, grads = T.loss_and_grad(params, config, BATCH)
    assert float(value) == pytest.approx(loss.item(), rel=1e-12)
    reference = model.xpseq_grads()
    assert set(reference) == set(grads)
    for name, g in reference.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-10, atol=1e-12, err_msg=name)


def T_logits(params, config, be):
    logits, weights = T.forward(on(be, params), config, be.asarray(BATCH["src"]),
                                be.asarray(BATCH["src_len"]), be.asarray(BATCH["tgt_in"]))
    return be.to_numpy(logits), be.to_numpy(weights)


# ----------------------------------------------------------- hand-derived vs autodiff


OPTIONS = [dict(), dict(norm="post", positions="learned", max_len=8),
           dict(share_embeddings=True, tie_output=True, tgt_vocab=11, activation="gelu",
                label_smoothing=0.2)]


# PyTorch's autograd checks every option on every run; JAX's autodiff, which compiles the
# three configurations (seconds each), in the slow tier.
@pytest.mark.slow_on("jax")
@pytest.mark.parametrize("options", OPTIONS, ids=["pre", "post-learned", "shared-tied"])
def test_hand_derived_gradients_match_autodiff(grad_backend, options):
    config = dataclasses.replace(CONFIG, dropout=0.3, **options)
    batch = {k: np.minimum(v, config.tgt_vocab - 1) if k != "src_len" else v
             for k, v in BATCH.items()}
    params = T.init_params(config, seed=3)
    shapes = T.dropout_shapes(config, batch["src"].shape, batch["tgt_in"].shape)
    rng = np.random.default_rng(4)
    keep = {name: rng.random(shape) >= 0.3 for name, shape in shapes.items()}
    value, grads = T.loss_and_grad(params, config, batch, keep=keep)
    be = grad_backend
    kb = {k: be.asarray(v, dtype="bool") for k, v in keep.items()}
    fn = lambda p, b, k: T.kernels.loss(p, config, b, k, scan=be.scan,  # noqa: E731
                                        custom_vjp=None, xp=be.xp)
    ref_value, ref_grads = be.jit(be.value_and_grad(fn))(on(be, params), on(be, batch), kb)
    assert float(be.to_numpy(ref_value)) == pytest.approx(float(value), rel=1e-12)
    for name in params:
        np.testing.assert_allclose(grads[name], be.to_numpy(ref_grads[name]), rtol=1e-10,
                                   atol=1e-13, err_msg=name)


@pytest.mark.slow_on("jax")
def test_the_hand_derived_pass_runs_on_every_backend_like_numpy(backend):
    """The same rules on other arrays; on PyTorch the attention's forward is the fused
    kernel and the backward recomputes the weights it needs. (Eager JAX compiles each
    operation: slow tier; the jitted pass on JAX is checked on every run by
    ``test_jax_hand_derived_steps_trace_the_whole_backward_pass``.)"""
    value, grads = T.loss_and_grad(on(backend, T.init_params(CONFIG, seed=5)), CONFIG,
                                   on(backend, BATCH))
    ref_value, ref_grads = T.loss_and_grad(T.init_params(CONFIG, seed=5), CONFIG, BATCH)
    assert float(backend.to_numpy(value)) == pytest.approx(float(ref_value), rel=1e-12)
    for name, g in ref_grads.items():
        np.testing.assert_allclose(backend.to_numpy(grads[name]), g, rtol=1e-10, atol=1e-13,
                                   err_msg=name)


def test_jax_hand_derived_steps_trace_the_whole_backward_pass():
    """On JAX, ``gradients="hand-derived"`` jits the Transformer's hand-derived pass itself
    (``kernels.loss_vjp_compiles``: no loop over time steps), without ``jax.grad``: the
    same float64 training run as JAX's autodiff, dropout included."""
    jax = pytest.importorskip("jax")
    from unittest import mock

    from xpseq.train import make_train_step

    config = dataclasses.replace(CONFIG, dropout=0.2, label_smoothing=0.1, d_ff=10,
                                 encoder_layers=1, decoder_layers=1)
    be, optimizer = backends.get("jax"), adam(1e-2)
    runs = {}
    for gradients in ("autodiff", "hand-derived"):
        params = on(be, T.init_params(config, seed=7))
        opt_state, losses = optimizer.init(params), []
        with mock.patch.object(jax, "value_and_grad", side_effect=AssertionError("autodiff")) \
                if gradients == "hand-derived" else mock.MagicMock():
            step = make_train_step(config, optimizer, be, gradients=gradients)
            for _ in range(3):
                params, opt_state, loss = step(params, opt_state, on(be, BATCH))
                losses.append(float(loss))
        runs[gradients] = losses, {k: np.asarray(v) for k, v in params.items()}
    np.testing.assert_allclose(runs["hand-derived"][0], runs["autodiff"][0], rtol=1e-10)
    assert runs["hand-derived"][0][-1] < runs["hand-derived"][0][0]
    for name, value in runs["autodiff"][1].items():
        np.testing.assert_allclose(runs["hand-derived"][1][name], value, rtol=1e-8,
                                   atol=1e-10, err_msg=name)


# ------------------------------------------------------------------- incremental decoding


@pytest.mark.parametrize("name", ["numpy", "jax"])
def test_cached_decoding_equals_recomputing_the_prefix(name):
    pytest.importorskip(name)
    be = backends.get(name)
    config = dataclasses.replace(CONFIG, norm="post", positions="learned", max_len=16)
    params = on(be, T.init_params(config, seed=6))
    src, src_len = BATCH["src"], BATCH["src_len"]
    hyp = search(params, config, src, src_len, be, SearchOptions(max_len_a=0.0, max_len_b=6.0))
    # The same greedy choice, recomputing the whole decoder over the prefix at each step
    # (on NumPy, in float64: JAX's eager ops would compile once per prefix length).
    ref = T.init_params(config, seed=6)
    prefix = np.ones((src.shape[0], 1), dtype=np.int64)
    for _ in range(6):
        logits, _ = T.forward(ref, config, src, src_len, prefix)
        nxt = np.argmax(logits[:, -1, :], axis=-1)
        prefix = np.concatenate([prefix, nxt[:, None]], axis=1)
    for b in range(src.shape[0]):
        n = int(hyp.lengths[b, 0])
        assert hyp.tokens[b, 0, :n].tolist() == prefix[b, 1:n + 1].tolist()
    assert hyp.attention.shape[-1] == src.shape[1]          # last layer, mean over heads
    np.testing.assert_allclose(hyp.attention[:, 0, :, :].sum(-1)[hyp.tokens[:, 0] != 0], 1.0,
                               rtol=1e-12)


@pytest.mark.parametrize("name", ["numpy", "torch"])
@pytest.mark.parametrize("options", OPTIONS[:2], ids=["pre", "post-learned"])
def test_the_cached_step_equals_the_training_forward_at_every_position(name, options):
    """The search step (a fixed and a growing cache) fed the gold prefix gives, at each
    position, the log-softmax of the teacher-forced logits there, and the last layer's
    cross-attention weights averaged over the heads."""
    pytest.importorskip(name)
    be = backends.get(name)
    config = dataclasses.replace(CONFIG, **options)
    params = on(be, T.init_params(config, seed=9))
    src, src_len, tgt_in = (be.asarray(BATCH[k]) for k in ("src", "src_len", "tgt_in"))
    logits, weights = T.forward(params, config, src, src_len, tgt_in)
    logits, weights = be.to_numpy(logits), be.to_numpy(weights)
    top = logits.max(axis=-1, keepdims=True)
    expected = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
    encoded = T.kernels.encode(params, config, src, src_len, scan=None, xp=be.xp)
    for capacity in (BATCH["tgt_in"].shape[1], None):
        step, state = T.kernels.decoder(params, config, encoded, max_len=capacity, xp=be.xp)
        for t in range(BATCH["tgt_in"].shape[1]):
            logp, state, att = step(state, tgt_in[:, t])
            np.testing.assert_allclose(be.to_numpy(logp), expected[:, t], rtol=1e-12,
                                       atol=1e-12, err_msg=f"position {t}")
            np.testing.assert_allclose(be.to_numpy(att), weights[:, t],
                                       rtol=1e-12, atol=1e-14, err_msg=f"position {t}")


def test_training_backward_and_search_run_the_one_decoder_forward(monkeypatch):
    """The training loss, its hand-derived gradient, the dev loss and every search step
    go through ``decoder_forward``: teacher forcing without a cache, a step with one (the
    teacher-forced decoder of earlier versions is gone)."""
    assert not any(hasattr(m, name) for m in (TM, TM.layers, TM.model)
                   for name in ("_decode_vjp", "_cached_attention"))
    calls = []
    real = decoder_forward

    def spy(*args, **kwargs):
        calls.append("teacher" if kwargs.get("cache") is None else "step")
        return real(*args, **kwargs)

    for module in (TM.layers, TM.model):          # where the loss and the search look it up
        if hasattr(module, "decoder_forward"):
            monkeypatch.setattr(module, "decoder_forward", spy)
    params, xp = T.init_params(CONFIG, seed=2), backends.get("numpy").xp
    T.loss(params, CONFIG, BATCH)
    T.loss_and_grad(params, CONFIG, BATCH)
    T.kernels.nll_sum(params, CONFIG, BATCH, scan=None, xp=xp)
    assert calls == ["teacher"] * 3
    calls.clear()
    hyp = search(params, CONFIG, BATCH["src"], BATCH["src_len"], backends.get("numpy"),
                 SearchOptions(max_len_a=0.0, max_len_b=5.0))
    assert calls and set(calls) == {"step"}
    assert len(calls) >= int(np.max(hyp.lengths))          # one call a decoded position


def test_a_growing_cache_equals_the_fixed_one():
    """``max_len=None`` (eager loops) grows the cache a position per step; the step's
    log-probabilities equal those of the fixed-capacity cache (compiled loops)."""
    xp = backends.get("numpy").xp
    params = T.init_params(CONFIG, seed=8)
    encoded = T.kernels.encode(params, CONFIG, BATCH["src"], BATCH["src_len"], scan=None, xp=xp)
    fixed, fixed_state = T.kernels.decoder(params, CONFIG, encoded, max_len=6, xp=xp)
    grow, grow_state = T.kernels.decoder(params, CONFIG, encoded, max_len=None, xp=xp)
    assert grow_state["k0"].shape[2] == 0
    for y in ([1, 1, 1], [5, 9, 12], [6, 2, 3], [7, 4, 4]):
        a, fixed_state, att_a = fixed(fixed_state, np.array(y))
        b, grow_state, att_b = grow(grow_state, np.array(y))
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(att_b, att_a, rtol=1e-12, atol=1e-15)
    assert grow_state["k0"].shape[2] == 4 and fixed_state["k0"].shape[2] == 6


def test_beam_search_runs_on_the_cache(backend):
    params = on(backend, T.init_params(CONFIG, seed=7))
    hyp = search(params, CONFIG, BATCH["src"], BATCH["src_len"], backend,
                 SearchOptions(method="beam", k=3, n_best=2))
    ref = search(on(backends.get("numpy"), T.init_params(CONFIG, seed=7)), CONFIG, BATCH["src"],
                 BATCH["src_len"], backends.get("numpy"),
                 SearchOptions(method="beam", k=3, n_best=2))
    np.testing.assert_array_equal(hyp.tokens, ref.tokens)
    np.testing.assert_allclose(hyp.scores, ref.scores, rtol=1e-10)


# --------------------------------------------------------------- an earlier checkpoint
#
# tests/fixtures/transformer_format2.safetensors: a small toy-task Transformer (d_model 16,
# two heads, two layers each side, pre-LN, sinusoidal positions; float32, with its Adam
# state), written in checkpoint format 2 by the commit its JSON names, with the flat
# parameter names and a config that stores pad_id; the JSON holds the translations it gave
# then, identical on all four backends.

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SEARCHES = {"greedy": SearchOptions(),
            "beam3_avg": SearchOptions(method="beam", k=3, n_best=2, length_penalty="avg")}


@pytest.mark.parametrize("search_name", sorted(SEARCHES))
def test_format2_checkpoint_translates_as_before(backend, search_name):
    from safetensors import safe_open

    path = FIXTURES / "transformer_format2.safetensors"
    expected = json.loads((FIXTURES / "transformer_format2.json").read_text())
    with safe_open(str(path), "numpy") as f:
        stored = json.loads(f.metadata()["xpseq"])
    assert stored["format"] == 2 and stored["config"]["pad_id"] == 0
    loaded = ckpt.load(path, backend)
    assert loaded.config == T.Config.from_dict(stored["config"])
    assert sorted(loaded.params) == sorted(T.param_shapes(loaded.config))  # the stored names
    sources = [s.split() for s in expected["sources"]]
    decoder = CheckpointDecoder(loaded.params, loaded.config,
                                Vocab.from_list(loaded.vocabs["src"]),
                                Vocab.from_list(loaded.vocabs["tgt"]), backend)
    out = translate(decoder, sources, SEARCHES[search_name])
    want = expected["searches"][search_name]
    assert [" ".join(r["tokens"]) for r in out] == [e["tokens"] for e in want]
    assert [[" ".join(h) for h in r["n_best"]] for r in out] == [e["n_best"] for e in want]
    np.testing.assert_allclose([r["score"] for r in out], [e["score"] for e in want],
                               rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------- training


def copy_batches(n, seed):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        words = [int(t) for t in rng.integers(4, 11, size=rng.integers(2, 5))]
        pairs.append((words + [EOS_ID], words))
    return make_batches(pairs, 16, bucket=4)


@pytest.mark.parametrize("name", ["numpy", pytest.param("jax", marks=pytest.mark.slow), "torch"])
def test_fit_trains_the_transformer(name):                     # (JAX: 8 s of compilations)
    pytest.importorskip(name)
    """It learns to copy (dev loss: the plain NLL; training: label-smoothed)."""
    config = dataclasses.replace(CONFIG, d_model=16, d_ff=32, encoder_layers=1,
                                 decoder_layers=1, label_smoothing=0.1)
    result = fit(config, T.init_params(config, seed=0), copy_batches(256, 0),
                 backends.get(name), dev_batches=copy_batches(16, 1),
                 train=TrainConfig(epochs=10, optimizer=adam(1e-2), progress=False))
    dev = [h["dev_loss"] for h in result.history]
    assert dev[-1] < 0.3 * dev[0], dev


def test_the_registry_and_the_config_checks():
    assert "transformer" in models.available() and models.of(CONFIG) is T
    assert T.Config.from_dict(CONFIG.to_dict()) == CONFIG
    for field, bad, message in [("heads", 3, r"heads \(3\) must divide d_model"),
                                ("norm", "sandwich", "norm must be one of"),
                                ("dropout", 1.0, "dropout must be a number in"),
                                ("share_embeddings", True, "needs src_vocab == tgt_vocab"),
                                ("d_model", 7, "must divide d_model")]:
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(CONFIG, **{field: bad})


@pytest.mark.slow_on("jax")
def test_cross_attention_per_layer_and_head(backend):
    params = on(backend, T.init_params(CONFIG, seed=8))
    weights = backend.to_numpy(TM.cross_attention(params, CONFIG, *(backend.asarray(BATCH[k])
                                                                 for k in ("src", "src_len",
                                                                           "tgt_in"))))
    assert weights.shape == (CONFIG.decoder_layers, 3, CONFIG.heads, 4, 5)
    real = np.arange(5)[None, :] < BATCH["src_len"][:, None]              # (B, S)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-12)
    assert np.all(weights[np.broadcast_to(~real[None, :, None, None, :], weights.shape)] == 0.0)
