"""The ``transformer`` model kind: torch.nn.Transformer parity (logits and gradients in
float64, pre-LN and post-LN), the hand-derived backward pass against autodiff, incremental
decoding with the key/value cache against recomputing the whole prefix, and training
through the same ``fit`` as the RNN model."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from xpseq import backends, models
from xpseq.core.optim import adam
from xpseq.data import EOS_ID, make_batches
from xpseq.search import SearchOptions, search
from xpseq.train import TrainConfig, fit

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


def torch_transformer(config, params):
    """``nn.Transformer(batch_first=True)`` with embeddings, positions and an output
    ``nn.Linear``, loaded with xpseq's parameters (the layout of the model's docstring)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    act = F.relu if config.activation == "relu" else (lambda x: F.gelu(x, approximate="tanh"))
    net = torch.nn.Transformer(config.d_model, config.heads, config.encoder_layers,
                               config.decoder_layers, config.d_ff, dropout=0.0,
                               activation=act, batch_first=True,
                               norm_first=config.norm == "pre").double()
    src_embed = torch.nn.Embedding(config.src_vocab, config.d_model).double()
    tgt_embed = torch.nn.Embedding(config.tgt_vocab, config.d_model).double()
    out = torch.nn.Linear(config.d_model, config.tgt_vocab).double()
    t = lambda name: torch.tensor(params[name])  # noqa: E731

    def attention(module, prefix):
        module.in_proj_weight.copy_(torch.cat([t(f"{prefix}.W_q"), t(f"{prefix}.W_k"),
                                               t(f"{prefix}.W_v")]))
        module.in_proj_bias.copy_(torch.cat([t(f"{prefix}.b_q"), t(f"{prefix}.b_k"),
                                             t(f"{prefix}.b_v")]))
        module.out_proj.weight.copy_(t(f"{prefix}.W_o"))
        module.out_proj.bias.copy_(t(f"{prefix}.b_o"))

    def norm(module, prefix):
        module.weight.copy_(t(f"{prefix}.g"))
        module.bias.copy_(t(f"{prefix}.b"))

    def ff(layer, prefix):
        layer.linear1.weight.copy_(t(f"{prefix}.W_1"))
        layer.linear1.bias.copy_(t(f"{prefix}.b_1"))
        layer.linear2.weight.copy_(t(f"{prefix}.W_2"))
        layer.linear2.bias.copy_(t(f"{prefix}.b_2"))

    with torch.no_grad():
        for i, layer in enumerate(net.encoder.layers):
            attention(layer.self_attn, f"enc{i}.att")
            norm(layer.norm1, f"enc{i}.ln1")
            norm(layer.norm2, f"enc{i}.ln2")
            ff(layer, f"enc{i}.ff")
        norm(net.encoder.norm, "enc.ln")
        for i, layer in enumerate(net.decoder.layers):
            attention(layer.self_attn, f"dec{i}.self")
            attention(layer.multihead_attn, f"dec{i}.cross")
            for j in (1, 2, 3):
                norm(getattr(layer, f"norm{j}"), f"dec{i}.ln{j}")
            ff(layer, f"dec{i}.ff")
        norm(net.decoder.norm, "dec.ln")
        src_embed.weight.copy_(t("src_embed"))
        tgt_embed.weight.copy_(t("tgt_embed"))
        out.weight.copy_(t("out.W"))
        out.bias.copy_(t("out.b"))
    net.train()                      # no inference fast path; dropout is 0

    def positions(length):           # Vaswani et al.'s formula, written in torch
        pos = torch.arange(length, dtype=torch.float64)[:, None]
        rates = torch.pow(10000.0, -torch.arange(0, config.d_model, 2,
                                                 dtype=torch.float64) / config.d_model)
        pe = torch.zeros(length, config.d_model, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * rates), torch.cos(pos * rates)
        return pe

    def forward(batch):
        src, tgt = torch.tensor(batch["src"]), torch.tensor(batch["tgt_in"])
        scale = math.sqrt(config.d_model)
        pad = torch.arange(src.shape[1])[None, :] >= torch.tensor(batch["src_len"])[:, None]
        causal = torch.nn.Transformer.generate_square_subsequent_mask(
            tgt.shape[1], dtype=torch.float64)
        hidden = net(src_embed(src) * scale + positions(src.shape[1]),
                     tgt_embed(tgt) * scale + positions(tgt.shape[1]), tgt_mask=causal,
                     src_key_padding_mask=pad, memory_key_padding_mask=pad)
        return out(hidden)

    modules = {"net": net, "src_embed": src_embed, "tgt_embed": tgt_embed, "out": out}
    return forward, modules


def torch_grads(config, modules):
    """The gradients of the torch model, named as xpseq's parameters."""
    g = lambda p: p.grad.numpy()  # noqa: E731
    net, grads = modules["net"], {}

    def attention(module, prefix):
        d = config.d_model
        w, b = g(module.in_proj_weight), g(module.in_proj_bias)
        for j, n in enumerate("qkv"):
            grads[f"{prefix}.W_{n}"], grads[f"{prefix}.b_{n}"] = w[j * d:(j + 1) * d], \
                b[j * d:(j + 1) * d]
        grads[f"{prefix}.W_o"], grads[f"{prefix}.b_o"] = g(module.out_proj.weight), \
            g(module.out_proj.bias)

    def norm(module, prefix):
        grads[f"{prefix}.g"], grads[f"{prefix}.b"] = g(module.weight), g(module.bias)

    def ff(layer, prefix):
        grads.update({f"{prefix}.W_1": g(layer.linear1.weight), f"{prefix}.b_1":
                      g(layer.linear1.bias), f"{prefix}.W_2": g(layer.linear2.weight),
                      f"{prefix}.b_2": g(layer.linear2.bias)})

    for i, layer in enumerate(net.encoder.layers):
        attention(layer.self_attn, f"enc{i}.att")
        norm(layer.norm1, f"enc{i}.ln1")
        norm(layer.norm2, f"enc{i}.ln2")
        ff(layer, f"enc{i}.ff")
    norm(net.encoder.norm, "enc.ln")
    for i, layer in enumerate(net.decoder.layers):
        attention(layer.self_attn, f"dec{i}.self")
        attention(layer.multihead_attn, f"dec{i}.cross")
        for j in (1, 2, 3):
            norm(getattr(layer, f"norm{j}"), f"dec{i}.ln{j}")
        ff(layer, f"dec{i}.ff")
    norm(net.decoder.norm, "dec.ln")
    grads["src_embed"], grads["tgt_embed"] = g(modules["src_embed"].weight), \
        g(modules["tgt_embed"].weight)
    grads["out.W"], grads["out.b"] = g(modules["out"].weight), g(modules["out"].bias)
    return grads


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
    forward, modules = torch_transformer(config, params)
    logits = forward(BATCH)
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, config.tgt_vocab), torch.tensor(BATCH["tgt_out"]).reshape(-1),
        ignore_index=config.pad_id, label_smoothing=smoothing)
    loss.backward()
    np_be = backends.get("numpy")
    ours, _ = T_logits(params, config, np_be)
    np.testing.assert_allclose(ours, logits.detach().numpy(), rtol=1e-12, atol=1e-13)
    value, grads = T.loss_and_grad(params, config, BATCH)
    assert float(value) == pytest.approx(loss.item(), rel=1e-12)
    reference = torch_grads(config, modules)
    assert set(reference) == set(grads)
    for name, g in reference.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-10, atol=1e-12, err_msg=name)


def T_logits(params, config, be):
    from xpseq.models.transformer import _logits  # the teacher-forced logits kernel

    logits, weights = _logits(on(be, params), config, be.asarray(BATCH["src"]),
                              be.asarray(BATCH["src_len"]), be.asarray(BATCH["tgt_in"]),
                              xp=be.xp)
    return be.to_numpy(logits), be.to_numpy(weights)


# ----------------------------------------------------------- hand-derived vs autodiff


OPTIONS = [dict(), dict(norm="post", positions="learned", max_len=8),
           dict(share_embeddings=True, tie_output=True, tgt_vocab=11, activation="gelu",
                label_smoothing=0.2)]


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


def test_loss_runs_on_array_api_strict_like_numpy():
    pytest.importorskip("array_api_strict")
    strict = backends.get("array_api_strict")
    value, grads = T.loss_and_grad(on(strict, T.init_params(CONFIG, seed=5)), CONFIG,
                                   on(strict, BATCH))
    ref_value, ref_grads = T.loss_and_grad(T.init_params(CONFIG, seed=5), CONFIG, BATCH)
    assert float(strict.to_numpy(value)) == pytest.approx(float(ref_value), rel=1e-13)
    for name, g in ref_grads.items():
        np.testing.assert_allclose(strict.to_numpy(grads[name]), g, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------- incremental decoding


@pytest.mark.parametrize("name", ["numpy", "jax"])
def test_cached_decoding_equals_recomputing_the_prefix(name):
    pytest.importorskip(name)
    be = backends.get(name)
    config = dataclasses.replace(CONFIG, norm="post", positions="learned", max_len=16)
    params = on(be, T.init_params(config, seed=6))
    src, src_len = BATCH["src"], BATCH["src_len"]
    hyp = search(params, config, src, src_len, be, SearchOptions(max_len_a=0.0, max_len_b=6.0))
    # The same greedy choice, recomputing the whole decoder over the prefix at each step.
    from xpseq.models.transformer import _logits

    prefix = np.ones((src.shape[0], 1), dtype=np.int64)
    for _ in range(6):
        logits, _ = _logits(params, config, be.asarray(src), be.asarray(src_len),
                            be.asarray(prefix), xp=be.xp)
        nxt = np.argmax(be.to_numpy(logits)[:, -1, :], axis=-1)
        prefix = np.concatenate([prefix, nxt[:, None]], axis=1)
    for b in range(src.shape[0]):
        n = int(hyp.lengths[b, 0])
        assert hyp.tokens[b, 0, :n].tolist() == prefix[b, 1:n + 1].tolist()
    assert hyp.attention.shape[-1] == src.shape[1]
    np.testing.assert_allclose(hyp.attention[:, 0, :, :].sum(-1)[hyp.tokens[:, 0] != 0], 1.0,
                               rtol=1e-12)


def test_beam_search_runs_on_the_cache(backend):
    params = on(backend, T.init_params(CONFIG, seed=7))
    hyp = search(params, CONFIG, BATCH["src"], BATCH["src_len"], backend,
                 SearchOptions(method="beam", k=3, n_best=2))
    ref = search(on(backends.get("numpy"), T.init_params(CONFIG, seed=7)), CONFIG, BATCH["src"],
                 BATCH["src_len"], backends.get("numpy"),
                 SearchOptions(method="beam", k=3, n_best=2))
    np.testing.assert_array_equal(hyp.tokens, ref.tokens)
    np.testing.assert_allclose(hyp.scores, ref.scores, rtol=1e-10)


# ---------------------------------------------------------------------------- training


def copy_batches(n, seed):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        words = [int(t) for t in rng.integers(4, 11, size=rng.integers(2, 5))]
        pairs.append((words + [EOS_ID], words))
    return make_batches(pairs, 16, bucket=4)


@pytest.mark.parametrize("name", ["numpy", "jax", "torch"])
def test_fit_trains_the_transformer(name):
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
