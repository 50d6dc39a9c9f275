"""A model trained a few steps on JAX, saved, and loaded on every backend gives the same
logits and attention weights (float64, rtol 1e-12)."""

from __future__ import annotations

import numpy as np
import pytest

from xpseq import backends
from xpseq.core.optim import adam
from xpseq.data import EOS_ID, make_batches
from xpseq.models.rnn import Seq2SeqConfig, forward, init_params
from xpseq.testing import assert_matches
from xpseq.train import TrainConfig, fit
from xpseq.train import checkpoint as ckpt
from xpseq.train.callbacks import SaveCheckpoint

pytest.importorskip("jax")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    rng = np.random.default_rng(3)
    pairs = [((w := rng.integers(4, 10, rng.integers(1, 6)).tolist()) + [EOS_ID], w[::-1])
             for _ in range(24)]
    batches = make_batches(pairs, batch_size=8, bucket=8)
    config = Seq2SeqConfig(10, 10, embed=4, hidden=3, attention="additive", style="bahdanau",
                           cell="gru", dropout=0.1)
    path = tmp_path_factory.mktemp("ckpt") / "jax.safetensors"
    result = fit(config, init_params(config, seed=1), batches, backends.get("jax"),
                 train=TrainConfig(epochs=1, optimizer=adam(1e-2), max_steps=3, progress=False),
                 callbacks=[SaveCheckpoint(path)])
    return path, batches[-1], result


def test_saved_jax_model_gives_the_same_logits_everywhere(trained, backend):
    path, batch, result = trained
    loaded = ckpt.load(path, backend=backend)
    for name, value in result.params.items():           # the file holds what training returned
        assert np.array_equal(backend.to_numpy(loaded.params[name]), value)
    reference = ckpt.load(path, backend=backends.get("numpy"))
    args = [backends.get("numpy").asarray(batch[k]) for k in ("src", "src_len", "tgt_in")]
    ref_logits, ref_weights = forward(reference.params, reference.config, *args)
    logits, weights = forward(loaded.params, loaded.config,
                              *[backend.asarray(batch[k]) for k in ("src", "src_len", "tgt_in")],
                              scan=backend.scan)
    assert_matches(backend, logits, ref_logits)
    assert_matches(backend, weights, ref_weights)
    assert loaded.train_state["step"] == 3
