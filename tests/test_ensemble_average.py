"""Ensembles, checkpoint averaging and label smoothing of the RNN model.

* :class:`xpseq.search.Ensemble`: an ensemble of one equals its model (tokens and scores,
  greedy and beam); two identical models equal one; an RNN + Transformer ensemble's step
  log-probabilities are the renormalised mean of the members' own steps, recomputed here
  with NumPy, and its search gives the same tokens on every backend (float64).
* :func:`xpseq.train.checkpoint.average` against the plain NumPy mean;
  ``SaveCheckpoint(keep_epochs=k)`` keeps exactly the last ``k`` epochs' parameters.
* ``Seq2SeqConfig(label_smoothing=ε)``: the training loss recomputed from the logits, and
  the hand-derived gradient against PyTorch's autograd.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from xpseq import backends, models
from xpseq.core.optim import adam
from xpseq.models.rnn import Seq2SeqConfig, forward
from xpseq.models.transformer import TransformerConfig
from xpseq.search import Ensemble, SearchOptions, search
from xpseq.train import TrainConfig, checkpoint, fit
from xpseq.train.callbacks import SaveCheckpoint

V = 9
RNN = Seq2SeqConfig(src_vocab=V, tgt_vocab=V, embed=4, hidden=5)
TRANSFORMER = TransformerConfig(src_vocab=V, tgt_vocab=V, d_model=8, heads=2,
                                encoder_layers=1, decoder_layers=1, d_ff=12)
SRC = np.array([[4, 5, 6, 2], [7, 8, 2, 0], [5, 2, 0, 0]], dtype=np.int64)
SRC_LEN = np.array([4, 3, 2], dtype=np.int64)
BEAM = SearchOptions(method="beam", k=3, n_best=2, length_penalty="avg")


def params_of(config, seed, backend):
    return {k: backend.asarray(v) for k, v in
            models.of(config).init_params(config, seed=seed).items()}


def test_an_ensemble_of_one_is_the_model():
    be = backends.get("numpy")
    p = params_of(RNN, 1, be)
    for options in (SearchOptions(), BEAM):
        alone = search(p, RNN, SRC, SRC_LEN, be, options)
        one = search([p], Ensemble([RNN]), SRC, SRC_LEN, be, options)
        for a, b in zip(alone, one):
            np.testing.assert_array_equal(a, b)


def test_two_identical_models_decode_as_one():
    be = backends.get("numpy")
    p = params_of(TRANSFORMER, 2, be)
    for options in (SearchOptions(), BEAM):
        alone = search(p, TRANSFORMER, SRC, SRC_LEN, be, options)
        two = search([p, p], Ensemble([TRANSFORMER, TRANSFORMER]), SRC, SRC_LEN, be, options)
        np.testing.assert_array_equal(alone.tokens, two.tokens)
        np.testing.assert_array_equal(alone.lengths, two.lengths)
        np.testing.assert_allclose(two.scores, alone.scores, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(two.attention, alone.attention, rtol=1e-12, atol=1e-14)


def _member_steps(configs, params, be):
    """Each member's step function and first state on NumPy (eager, growing caches)."""
    xp, out = be.xp, []
    for c, p in zip(configs, params):
        kernels = models.of(c).kernels
        encoded = kernels.encode(p, c, xp.asarray(SRC), xp.asarray(SRC_LEN), scan=be.scan,
                                 xp=xp)
        out.append(kernels.decoder(p, c, encoded, attention=True, max_len=None, xp=xp))
    return out


def test_mixed_ensemble_averages_the_members_log_probabilities():
    """Greedy search of an RNN + Transformer ensemble, replayed step by step with the
    members' own decoders: each chosen token is the argmax of the renormalised mean of
    their log-probabilities, and the score is the sum of those."""
    be = backends.get("numpy")
    configs = (RNN, TRANSFORMER)
    params = [params_of(c, s, be) for c, s in zip(configs, (3, 4))]
    hyp = search(params, Ensemble(configs), SRC, SRC_LEN, be, SearchOptions())
    members = _member_steps(configs, params, be)
    states = [state for _, state in members]
    y = np.full(SRC.shape[0], 1, dtype=np.int64)                  # <s>
    score = np.zeros(SRC.shape[0])
    for t in range(int(hyp.lengths.max())):
        logps = []
        for i, (step, _) in enumerate(members):
            logp, states[i], _ = step(states[i], y)
            logps.append(np.asarray(logp, dtype=np.float64))
        mean = (logps[0] + logps[1]) / 2
        mean = mean - np.log(np.exp(mean).sum(axis=-1, keepdims=True))
        y = mean.argmax(axis=-1)
        live = t < hyp.lengths[:, 0]
        np.testing.assert_array_equal(hyp.tokens[live, 0, t], y[live])
        score += np.where(live, mean[np.arange(len(y)), y], 0.0)
    np.testing.assert_allclose(hyp.scores[:, 0], score, rtol=1e-10)


def test_mixed_ensemble_searches_agree_across_backends(backend):
    configs = (RNN, TRANSFORMER)
    reference = search([params_of(c, s, backends.get("numpy")) for c, s in
                        zip(configs, (5, 6))], Ensemble(configs), SRC, SRC_LEN,
                       backends.get("numpy"), BEAM)
    got = search([params_of(c, s, backend) for c, s in zip(configs, (5, 6))],
                 Ensemble(configs), SRC, SRC_LEN, backend, BEAM)
    np.testing.assert_array_equal(got.tokens, reference.tokens)
    np.testing.assert_allclose(got.scores, reference.scores, rtol=1e-9)


def test_ensemble_errors_name_the_problem():
    with pytest.raises(ValueError, match="at least one model"):
        Ensemble(())
    with pytest.raises(TypeError, match="sequence of model configurations"):
        Ensemble(RNN)
    with pytest.raises(ValueError, match="tgt_vocab differ"):
        Ensemble((RNN, dataclasses.replace(RNN, tgt_vocab=V + 1)))
    be = backends.get("numpy")
    p = params_of(RNN, 0, be)
    with pytest.raises(ValueError, match="Ensemble of 2 models needs a sequence of as many"):
        search([p], Ensemble((RNN, RNN)), SRC, SRC_LEN, be)
    with pytest.raises(ValueError, match="got dict"):
        search(p, Ensemble((RNN,)), SRC, SRC_LEN, be)


# --------------------------------------------------------------------- averaging


def _save(path, config, seed, dtype=np.float32):
    params = {k: v.astype(dtype) for k, v in
              models.of(config).init_params(config, seed=seed).items()}
    vocab = [f"w{i}" for i in range(V)]
    vocab[:4] = ["<pad>", "<s>", "</s>", "<unk>"]
    checkpoint.save(path, config=config, params=params, vocabs={"src": vocab, "tgt": vocab},
                    metadata={"seed": seed})
    return params


def test_average_is_the_elementwise_mean(tmp_path):
    saved = [_save(tmp_path / f"{s}.safetensors", TRANSFORMER, s) for s in (1, 2, 3)]
    avg = checkpoint.average([tmp_path / f"{s}.safetensors" for s in (1, 2, 3)])
    assert avg.config == TRANSFORMER and avg.metadata == {"seed": 1}
    assert avg.opt_state is None and len(avg.train_state["averaged"]) == 3
    for name, value in avg.params.items():
        assert value.dtype == np.float32
        expected = sum(p[name].astype(np.float64) for p in saved) / 3
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)
    # One file averages to itself, exactly.
    one = checkpoint.average([tmp_path / "2.safetensors"], backends.get("numpy"))
    for name, value in one.params.items():
        np.testing.assert_array_equal(value, saved[1][name])


def test_average_refuses_different_models(tmp_path):
    _save(tmp_path / "a.safetensors", RNN, 0)
    _save(tmp_path / "b.safetensors", dataclasses.replace(RNN, hidden=6), 0)
    _save(tmp_path / "c.safetensors", RNN, 0, dtype=np.float64)
    with pytest.raises(ValueError, match="different model configuration"):
        checkpoint.average([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])
    with pytest.raises(ValueError, match="different parameter dtypes"):
        checkpoint.average([tmp_path / "a.safetensors", tmp_path / "c.safetensors"])
    for bad in ([], str(tmp_path / "a.safetensors")):
        with pytest.raises(ValueError, match="non-empty sequence of checkpoint files"):
            checkpoint.average(bad)


def test_checkpoint_keeps_the_last_epochs(tmp_path):
    """Four epochs with ``keep_epochs=2``: only epochs 3 and 4 remain, each holding the
    parameters at its end (the fourth: the final parameters)."""
    be = backends.get("numpy")
    rng = np.random.default_rng(0)
    batch = {"src": SRC, "src_len": SRC_LEN,
             "tgt_in": rng.integers(4, V, size=(3, 3)), "tgt_out": rng.integers(4, V,
                                                                                size=(3, 3))}
    params = {k: v.astype(np.float64) for k, v in models.of(RNN).init_params(RNN).items()}
    path = tmp_path / "m.safetensors"
    seen = {}

    class Record(SaveCheckpoint):
        def on_epoch_end(self, loop, record):
            super().on_epoch_end(loop, record)
            seen[record["epoch"]] = loop.params_numpy()

    result = fit(RNN, params, [batch], be, dev_batches=[batch],
                 train=TrainConfig(epochs=4, optimizer=adam(1e-2), progress=False),
                 callbacks=[Record(path, keep_epochs=2)])
    assert sorted(p.name for p in tmp_path.glob("m.epoch*")) == ["m.epoch3.safetensors",
                                                                "m.epoch4.safetensors"]
    for epoch in (3, 4):
        loaded = checkpoint.load(tmp_path / f"m.epoch{epoch}.safetensors")
        assert loaded.opt_state is None
        for name, value in loaded.params.items():
            np.testing.assert_array_equal(value, seen[epoch][name])
    for name, value in result.params.items():
        np.testing.assert_array_equal(value, seen[4][name])
    with pytest.raises(ValueError, match="keep_epochs must be an int >= 0"):
        SaveCheckpoint(path, keep_epochs=-1)


# -------------------------------------------------------------- label smoothing


def test_rnn_label_smoothing_loss_and_gradient():
    """The smoothed loss, recomputed from the teacher-forced logits; the hand-derived
    gradient equals PyTorch's autograd of it (float64); the dev loss stays unsmoothed."""
    pytest.importorskip("torch")
    torch_be = backends.get("torch")
    eps = 0.2
    config = dataclasses.replace(RNN, label_smoothing=eps)
    model = models.of(config)
    rng = np.random.default_rng(1)
    tgt = rng.integers(4, V, size=(3, 4))
    tgt[2, 2:] = 0
    batch = {"src": SRC, "src_len": SRC_LEN, "tgt_in": np.concatenate(
        [np.ones((3, 1), np.int64), tgt[:, :-1]], axis=1), "tgt_out": tgt}
    params = model.init_params(config, seed=7)
    logits, _ = forward(params, config, batch["src"], batch["src_len"], batch["tgt_in"])
    logits = np.asarray(logits, dtype=np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    real = tgt != 0
    per_token = -(1 - eps) * np.take_along_axis(logp, tgt[..., None], -1)[..., 0] \
        - eps * logp.mean(-1)
    expected = per_token[real].sum() / real.sum()
    loss, grads = model.loss_and_grad(params, config, batch)
    assert math.isclose(float(loss), expected, rel_tol=1e-12)
    assert math.isclose(float(model.loss(params, config, batch)), expected, rel_tol=1e-12)
    total, count = model.kernels.nll_sum(params, config, batch, scan=None, xp=np)
    plain = -np.take_along_axis(logp, tgt[..., None], -1)[..., 0][real].sum()
    assert math.isclose(float(total), plain, rel_tol=1e-12) and float(count) == real.sum()

    tparams = {k: torch_be.asarray(v) for k, v in params.items()}
    tbatch = {k: torch_be.asarray(v) for k, v in batch.items()}
    value, auto = torch_be.value_and_grad(lambda p: model.loss(p, config, tbatch))(tparams)
    assert math.isclose(float(value), expected, rel_tol=1e-12)
    for name, g in grads.items():
        np.testing.assert_allclose(g, torch_be.to_numpy(auto[name]), rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="label_smoothing must be a number in"):
        dataclasses.replace(RNN, label_smoothing=1.0)
