"""The Transformer with blockwise attention (``attention="blockwise"``, in blocks of 2
queries and keys here so that the toy sentences span several): the same logits, loss
gradients (hand-derived and by autodiff) and decoded ids as the plain path, and the choice
``attention="auto"`` makes by length."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import xpseq.core as C
from xpseq import backends, models
from xpseq.core import blockwise
from xpseq.models.transformer import layers
from xpseq.search import SearchOptions, search

T = models.get("transformer")
PLAIN = T.Config(src_vocab=11, tgt_vocab=13, d_model=8, heads=2, encoder_layers=2,
                 decoder_layers=2, d_ff=12, attention="plain")
BLOCKWISE = dataclasses.replace(PLAIN, attention="blockwise", attention_block=2)
BATCH = {"src": np.array([[4, 5, 6, 7, 8, 2, 0], [7, 8, 2, 0, 0, 0, 0], [9, 2, 0, 0, 0, 0, 0]]),
         "src_len": np.array([6, 3, 2]),
         "tgt_in": np.array([[1, 5, 6, 7, 8], [1, 9, 10, 0, 0], [1, 12, 0, 0, 0]]),
         "tgt_out": np.array([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0], [12, 2, 0, 0, 0]])}


def on(be, tree):
    return {k: be.asarray(v) for k, v in tree.items()}


def counting_blocks(monkeypatch) -> list:
    """Record each call of the blockwise forward pass (to show the path was taken)."""
    calls: list = []
    real = blockwise.forward

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(blockwise, "forward", spy)
    return calls


def test_the_logits_and_hand_derived_gradients_equal_the_plain_paths(monkeypatch):
    params = T.init_params(PLAIN, seed=1)
    ref_logits, _ = T.forward(params, PLAIN, BATCH["src"], BATCH["src_len"], BATCH["tgt_in"],
                              need_weights=False)
    ref_value, ref_grads = T.loss_and_grad(params, PLAIN, BATCH)
    calls = counting_blocks(monkeypatch)
    logits, weights = T.forward(params, BLOCKWISE, BATCH["src"], BATCH["src_len"],
                                BATCH["tgt_in"], need_weights=False)
    # two layers each side: encoder self, decoder self and cross attention
    assert len(calls) == 6 and weights is None
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-12, atol=1e-12)
    value, grads = T.loss_and_grad(params, BLOCKWISE, BATCH)
    assert float(value) == pytest.approx(float(ref_value), rel=1e-12)
    for name, g in ref_grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-10, atol=1e-13, err_msg=name)


@pytest.mark.slow_on("jax")
def test_autodiff_through_the_blockwise_forward_gives_the_plain_gradients(grad_backend):
    be = grad_backend
    params = T.init_params(PLAIN, seed=2)
    _, ref_grads = T.loss_and_grad(params, PLAIN, BATCH)

    def loss(p, b):
        return T.kernels.loss(p, BLOCKWISE, b, None, scan=be.scan, custom_vjp=None, xp=be.xp)

    _, grads = be.value_and_grad(loss)(on(be, params), on(be, BATCH))
    for name, g in ref_grads.items():
        np.testing.assert_allclose(be.to_numpy(grads[name]), g, rtol=1e-10, atol=1e-13,
                                   err_msg=name)


def test_under_autodiff_the_attention_backward_is_the_hand_derived_rule(grad_backend,
                                                                        monkeypatch):
    """The training step's loss under JAX's or PyTorch's own differentiation (jitted on
    JAX, as training runs it): every blockwise attention (encoder self, causal decoder
    self, cross) goes through ``backend.custom_vjp`` with ``blockwise.backward``, whose
    gradients are the plain path's to 1e-10 in float64."""
    from xpseq.core.optim import adam
    from xpseq.train import make_train_step

    be = grad_backend
    params = T.init_params(PLAIN, seed=3)
    _, ref_grads = T.loss_and_grad(params, PLAIN, BATCH)
    backs = []
    real = blockwise.backward

    def spy(*args, **kwargs):
        backs.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(blockwise, "backward", spy)
    if be.name == "torch":      # PyTorch's fused kernel takes every one (core/delegation.py)
        import torch

        real_sdpa = torch.nn.functional.scaled_dot_product_attention
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                            lambda *a, **kw: backs.append(a[0].shape) or real_sdpa(*a, **kw))

    def loss(p, b):
        return T.kernels.loss(p, BLOCKWISE, b, None, scan=be.scan, custom_vjp=be.custom_vjp,
                              xp=be.xp)

    _, grads = be.value_and_grad(be.jit(loss))(on(be, params), on(be, BATCH))
    assert len(backs) == 6, backs              # two layers, three attentions each
    for name, g in ref_grads.items():
        np.testing.assert_allclose(be.to_numpy(grads[name]), g, rtol=1e-10, atol=1e-13,
                                   err_msg=name)
    # and the training step hands the rule over by default (autodiff, one dtype)
    backs.clear()
    optimizer = adam(1e-3)
    step = make_train_step(dataclasses.replace(BLOCKWISE, attention_block=3), optimizer, be,
                           gradients="autodiff")
    step(on(be, params), be.asarray_tree(optimizer.init(params)), on(be, BATCH))
    assert len(backs) == 6


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_decoding_gives_the_plain_paths_ids(backend, method):
    """The search step (its self-attention over the key/value cache, the cross-attention of
    the layers whose weights nobody asks for) blockwise: the same ids and scores."""
    beam = {"k": 3, "n_best": 2} if method == "beam" else {}
    options = SearchOptions(method=method, max_len_a=0.0, max_len_b=7.0, **beam)
    params = on(backend, T.init_params(PLAIN, seed=4))
    ref = search(params, PLAIN, BATCH["src"], BATCH["src_len"], backend, options)
    hyp = search(params, BLOCKWISE, BATCH["src"], BATCH["src_len"], backend, options)
    np.testing.assert_array_equal(hyp.tokens, ref.tokens)
    np.testing.assert_allclose(hyp.scores, ref.scores, rtol=1e-10)


def test_the_cached_step_is_blockwise_over_a_long_cache(monkeypatch):
    """A step's self-attention over a cache of 6 positions in blocks of 2, with a fixed
    capacity (the positions after the step masked) and a growing cache: the plain path's
    log-probabilities."""
    xp = backends.get("numpy").xp
    params = T.init_params(PLAIN, seed=8)
    src, src_len = BATCH["src"], BATCH["src_len"]
    for capacity in (6, None):
        steps = []
        for config in (PLAIN, BLOCKWISE):
            encoded = T.kernels.encode(params, config, src, src_len, scan=None, xp=xp)
            step, state = T.kernels.decoder(params, config, encoded, max_len=capacity, xp=xp)
            out = []
            for y in ([1, 1, 1], [5, 9, 12], [6, 2, 3], [7, 4, 4], [8, 4, 2]):
                logp, state, _ = step(state, np.array(y))
                out.append(logp)
            steps.append(out)
        for t, (a, b) in enumerate(zip(*steps)):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12, err_msg=f"step {t}")


def test_auto_attends_blockwise_above_its_measured_length(monkeypatch):
    auto = dataclasses.replace(PLAIN, attention="auto", attention_block=2)
    params = T.init_params(auto, seed=5)
    calls = counting_blocks(monkeypatch)
    T.forward(params, auto, BATCH["src"], BATCH["src_len"], BATCH["tgt_in"],
              need_weights=False)
    assert calls == []                          # 7 source and 5 target positions: plain
    monkeypatch.setattr(layers, "AUTO_KEYS", 6)
    T.forward(params, auto, BATCH["src"], BATCH["src_len"], BATCH["tgt_in"],
              need_weights=False)
    # over the 7 source positions (> 6): the encoder's self-attention and the decoder's
    # cross-attention, two layers each; the decoder's self-attention (5 keys) stays plain
    assert [shape[-2] for shape in calls] == [7, 7, 5, 5]


def test_the_options_are_checked():
    with pytest.raises(ValueError, match=r"attention must be one of \['plain', 'blockwise', "
                                         r"'auto'\], got 'flash'"):
        dataclasses.replace(PLAIN, attention="flash")
    with pytest.raises(ValueError, match="attention_block must be a positive int, got 0"):
        dataclasses.replace(PLAIN, attention_block=0)
    # a wrong kind of value is a TypeError here as in blockwise_attention itself
    for bad in (1.5, "4", True):
        with pytest.raises(TypeError, match="attention_block must be a positive int, got"):
            dataclasses.replace(PLAIN, attention_block=bad)
        with pytest.raises(TypeError, match="block_q must be a positive int, got"):
            C.blockwise_attention(np.ones((1, 2, 2)), np.ones((1, 2, 2)), np.ones((1, 2, 2)),
                                  block_q=bad)
    assert T.Config(src_vocab=5, tgt_vocab=5).attention == "auto"


@pytest.mark.slow                                   # (an ndonnx trace of ~10 s)
def test_an_export_of_a_blockwise_model_decodes_its_ids(tmp_path):
    """The export traces lengths it does not know, so its graphs attend plainly; decoded on
    onnxruntime they give the ids and scores the blockwise model gives on NumPy."""
    pytest.importorskip("onnxruntime")
    from xpseq import export
    from xpseq.export.runtime import OnnxModel
    from xpseq.train import checkpoint

    params = T.init_params(BLOCKWISE, seed=11)
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocabs = {"src": specials + [f"s{i}" for i in range(4, BLOCKWISE.src_vocab)],
              "tgt": specials + [f"t{i}" for i in range(4, BLOCKWISE.tgt_vocab)]}
    path = checkpoint.save(tmp_path / "blockwise.safetensors", config=BLOCKWISE, params=params,
                           vocabs=vocabs)
    folder = export.onnx(path, tmp_path / "onnx", dtype="float64")
    onnx_model = OnnxModel(folder, threads=1)
    np_be = backends.get("numpy")
    for options in (SearchOptions(max_len_a=0.0, max_len_b=7.0),
                    SearchOptions(method="beam", k=3, n_best=2, max_len_a=0.0, max_len_b=7.0)):
        want = search(params, BLOCKWISE, BATCH["src"], BATCH["src_len"], np_be, options)
        got = onnx_model.search(BATCH["src"], BATCH["src_len"], options)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_allclose(got.scores, want.scores, rtol=0, atol=1e-10)


@pytest.mark.slow                                   # (four commands: ~15 s)
def test_the_command_chooses_the_attention_path_and_block(tmp_path):
    """``xpseq train --model transformer --attention-path --attention-block``: stored in the
    checkpoint; a bad path or size refused in one line; the RNN does not take them."""
    import subprocess
    import sys

    from xpseq.train import checkpoint

    def xpseq(*args):
        return subprocess.run([sys.executable, "-m", "xpseq", "train", "--quick", *args],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)

    done = xpseq("--model", "transformer", "--attention-path", "blockwise",
                 "--attention-block", "4", "--d-model", "8", "--heads", "2", "--layers", "1",
                 "--d-ff", "8", "--epochs", "1", "--backend", "numpy", "--no-progress",
                 "--out", "m.safetensors")
    assert done.returncode == 0, done.stderr
    config = checkpoint.load(tmp_path / "m.safetensors").config
    assert (config.attention, config.attention_block) == ("blockwise", 4)
    for args, says in ((("--model", "transformer", "--attention-path", "flash"),
                        "argument --attention-path: invalid choice: 'flash'"),
                       (("--model", "transformer", "--attention-block", "0"),
                        "argument --attention-block: expected a positive integer, got 0"),
                       (("--attention-block", "4"),
                        "--attention-block: not an option of --model rnn")):
        done = xpseq(*args, "--out", "x.safetensors")
        assert done.returncode in (1, 2) and len(done.stderr.splitlines()) == 1, done.stderr
        assert says in done.stderr, done.stderr
    assert not (tmp_path / "x.safetensors").exists()
