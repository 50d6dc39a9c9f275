"""Training runs for tests/test_parallel.py, importable by name: the processes of a torch
process group (and the JAX child, which needs its devices set before JAX starts) run them.

``python tests/parallel_runs.py jax OUT`` writes the JAX comparisons to the JSON file OUT.
"""

from __future__ import annotations

import json
import os
import pickle
import sys

import numpy as np


def batches_and_configs(dropout: float = 0.0) -> tuple[list, dict]:
    from xpseq import models
    from xpseq.data import EOS_ID, make_batches

    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(48):
        words = [int(t) for t in rng.integers(4, 11, size=rng.integers(2, 6))]
        pairs.append((words + [EOS_ID], words[::-1]))
    configs = {"rnn": models.get("rnn").Config(12, 12, embed=6, hidden=5, dropout=dropout),
               "transformer": models.get("transformer").Config(
                   12, 12, d_model=8, heads=2, encoder_layers=1, decoder_layers=1, d_ff=8,
                   dropout=dropout)}
    return make_batches(pairs, 13, bucket=8), configs        # one padded shape: one compile


def train(backend_name: str, kind: str, devices: int, dropout: float = 0.0,
          callbacks: tuple = (), dev: bool = True) -> tuple[list, dict, str]:
    """Two epochs of SGD with momentum in float64 (Adam would turn the rounding noise of a
    gradient that is exactly zero, an attention key bias's, into whole steps)."""
    from xpseq import backends, models
    from xpseq.core.optim import sgd
    from xpseq.train import TrainConfig, fit

    batches, configs = batches_and_configs(dropout)
    config = configs[kind]
    result = fit(config, models.get(kind).init_params(config, seed=1), batches,
                 backends.get(backend_name), dev_batches=batches[:2] if dev else [],
                 callbacks=list(callbacks),
                 train=TrainConfig(epochs=2, optimizer=sgd(0.3, momentum=0.9), progress=False,
                                   devices=devices))
    losses = [[h["train_loss"], h["dev_loss"]] if dev else [h["train_loss"]]
              for h in result.history]
    return losses, result.params, result.stopped


def torch_in_group(kind: str, out: str, dropout: float = 0.0, checkpoint: str = "") -> None:
    """One process of a torch group: train on 2 devices; rank 0 writes the result."""
    import torch.distributed as dist

    from xpseq.train.callbacks import SaveCheckpoint, TimeLimit

    callbacks = (TimeLimit(1e-6), SaveCheckpoint(checkpoint)) if checkpoint else ()
    losses, params, stopped = train("torch", kind, 2, dropout, callbacks)
    if dist.get_rank() == 0:
        with open(out, "wb") as f:
            pickle.dump((losses, params, stopped), f)


def jax_comparisons(out: str) -> None:
    """1 device against 2 (the host's cores as devices) for each kind (the RNN with its
    dev loss, the Transformer without, to compile less)."""
    report = {}
    for kind in ("rnn", "transformer"):
        one, p1, _ = train("jax", kind, 1, dev=kind == "rnn")
        two, p2, _ = train("jax", kind, 2, dev=kind == "rnn")
        report[kind] = {"losses": one,
                        "loss_gap": float(np.max(np.abs(np.subtract(one, two)))),
                        "param_gap": max(float(np.max(np.abs(p1[k] - p2[k]))) for k in p1)}
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    assert sys.argv[1] == "jax"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")      # the suite's opt level
                               + " --xla_force_host_platform_device_count=2").strip()
    jax_comparisons(sys.argv[2])
