"""The benchmark context: the command-line settings and everything the sections share,
each artefact built on first use and kept.

A section is ``run(context) -> list[Row]``. What two sections both need (the toy task, its
batches, the initial parameters, the trained parameters, the backends, the native
reference, the Transformer's set-up, the ``train`` timings) is asked of the context, which
builds it once; no section reads another's results. Only ``bench.py`` reads what the
sections :meth:`Context.record` for ``bench.json``.

A context builds nothing when made: ``Context(args)`` is cheap, and a section run alone
builds only what it asks for.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from typing import Any, Sequence

import numpy as np

from .. import _common as common

from .shared import float32_on, on_backend


@dataclasses.dataclass(frozen=True)
class TransformerSetup:
    """The Transformer of the ``transformer`` and ``parallel`` sections at the
    ``--transformer`` sizes: its model kind and config, the initial parameters (NumPy,
    float64 and float32), an epoch of token-bucketed batches and the ``--steps`` timed
    ones drawn from it."""

    kind: Any
    config: Any
    init64: dict
    init32: dict
    epoch: list
    timed: list


class Context:
    """What the sections share, built lazily from ``args`` (``bench.py``'s options).

    ``affinity`` is the process's :class:`_common.Affinity` (the sections that compare
    one core with two pin and release it); by default one that pins nothing.
    """

    def __init__(self, args: argparse.Namespace, affinity: common.Affinity | None = None):
        self.args = args
        self.affinity = affinity if affinity is not None else common.Affinity(args.threads,
                                                                             False)
        self._details: dict[str, Any] = {}
        #: The ``train`` section's measurement, made once by :func:`benchmarks.train.timings`
        #: for every section that uses it (``None`` until then).
        self.train_timings: dict | None = None

    # ----------------------------------------------------------------- the report

    def record(self, section: str, details: Any) -> None:
        """Keep ``section``'s details for ``bench.json`` (read by ``bench.py`` only)."""
        self._details[section] = details

    def details(self, sections: Sequence[str]) -> dict[str, Any]:
        """The recorded details of each of ``sections`` (None where none were recorded);
        ``train`` is the ``train`` timings wherever a section measured them."""
        out = {name: self._details.get(name) for name in sections}
        if "train" in out:
            out["train"] = self.train_timings                  # None unless measured
        return out

    # ------------------------------------------------------------ the RNN model set-up

    @functools.cached_property
    def native(self) -> Any:
        """``scripts/native_torch.py``: the same models written in plain PyTorch."""
        from .. import native_torch  # scripts/native_torch.py, beside this package

        return native_torch

    @functools.cached_property
    def jax(self) -> Any:
        from xpseq import backends

        return backends.get("jax")

    @functools.cached_property
    def torch(self) -> Any:
        from xpseq import backends

        return backends.get("torch")

    @functools.cached_property
    def task(self) -> Any:
        """The toy task: ``--pairs`` training pairs, test sentences in 5 length buckets
        (enough for ``--beam-sentences``)."""
        from xpseq.tasks import toy_task

        per_bucket = max(1, math.ceil(self.args.beam_sentences / 5))
        return toy_task(n_train=self.args.pairs, n_dev=8, n_test_per_bucket=per_bucket,
                        seed=self.args.seed)

    @functools.cached_property
    def config(self) -> Any:
        """The RNN model's config (``--embed``, ``--hidden``, no dropout)."""
        from xpseq.models.rnn import Seq2SeqConfig

        return Seq2SeqConfig(len(self.task.src_vocab), len(self.task.tgt_vocab),
                             embed=self.args.embed, hidden=self.args.hidden, dropout=0.0)

    @functools.cached_property
    def init64(self) -> dict:
        """The RNN model's initial parameters, NumPy float64."""
        from xpseq.models.rnn import init_params

        return init_params(self.config, seed=self.args.seed)

    @functools.cached_property
    def init32(self) -> dict:
        """The same parameters in float32."""
        return {k: v.astype(np.float32) for k, v in self.init64.items()}

    @functools.cached_property
    def epoch(self) -> list:
        """One epoch of the task's training batches (``--batch``, ``--bucket``; NumPy)."""
        return self.task.batches(self.task.train, self.args.batch, self.args.bucket)

    @functools.cached_property
    def timed(self) -> list:
        """The ``--steps`` batches of a timed repeat, drawn from the epoch."""
        order = np.random.default_rng([self.args.seed, 1]).permutation(len(self.epoch))
        return [self.epoch[order[i % len(order)]] for i in range(self.args.steps)]

    @functools.cached_property
    def optimizer(self) -> Any:
        """Adam at ``--lr``."""
        from xpseq.core.optim import adam

        return adam(self.args.lr)

    def jax_step(self, gradients: str | None = "autodiff") -> Any:
        """xpseq's training step of the RNN model on JAX (no clipping), JAX's autodiff
        unless ``gradients`` says (``None``: the default path, :mod:`xpseq.train.paths`)."""
        from xpseq.train import make_train_step

        return make_train_step(self.config, self.optimizer, self.jax, clip_norm=None,
                               gradients=gradients)

    def torch_step(self, gradients: str | None = "autodiff") -> Any:
        """xpseq's training step of the RNN model on PyTorch (no clipping), autograd
        unless ``gradients`` says (``None``: the default path, :mod:`xpseq.train.paths`)."""
        from xpseq.train import make_train_step

        return make_train_step(self.config, self.optimizer, self.torch, clip_norm=None,
                               gradients=gradients)

    def tokens(self, batches: Sequence[dict]) -> int:
        """The real (non-PAD) target tokens of ``batches``."""
        return int(sum(np.sum(b["tgt_out"] != self.config.pad_id) for b in batches))

    @functools.cached_property
    def trained(self) -> dict:
        """``params``: NumPy float32 parameters after ``--beam-train-steps`` xpseq-JAX steps
        (the same compiled step as the other sections) over shuffled epochs, and ``loss``,
        the last step's (None after no step)."""
        be, step = self.jax, self.jax_step()
        params = float32_on(be, self.init32)
        opt_state = self.optimizer.init(params)
        rng = np.random.default_rng([self.args.seed, 2])
        order: list[int] = []
        loss = None
        for _ in range(self.args.beam_train_steps):
            if not order:
                order = list(rng.permutation(len(self.epoch)))
            batch = on_backend(be, self.epoch[order.pop()])
            params, opt_state, loss = step(params, opt_state, batch)
        return {"params": {k: be.to_numpy(v) for k, v in params.items()},
                "loss": None if loss is None else float(be.to_numpy(loss))}

    @functools.cached_property
    def beam_pairs(self) -> tuple[tuple[list[str], list[str]], ...]:
        """``--beam-sentences`` test pairs ``(source, target)``, taken from the length
        buckets in turn."""
        buckets = [list(pairs) for pairs in self.task.test.values()]
        out: list = []
        while len(out) < self.args.beam_sentences and any(buckets):
            for pairs in buckets:
                if pairs and len(out) < self.args.beam_sentences:
                    out.append(pairs.pop(0))
        return tuple(out)

    # --------------------------------------------------------------- the Transformer

    @functools.cached_property
    def transformer(self) -> TransformerSetup:
        """The Transformer at the ``--transformer`` sizes (pre-LN, label smoothing 0.1) on
        the same task, with batches of up to the last size's tokens."""
        from xpseq import models

        args = self.args
        d, heads, layers, d_ff, max_tokens = args.transformer_sizes
        kind = models.get("transformer")
        config = kind.Config(len(self.task.src_vocab), len(self.task.tgt_vocab), d_model=d,
                             heads=heads, encoder_layers=layers, decoder_layers=layers,
                             d_ff=d_ff, label_smoothing=0.1)
        init64 = kind.init_params(config, seed=args.seed)
        init32 = {k: v.astype(np.float32) for k, v in init64.items()}
        epoch = self.task.batches(self.task.train, 10**6, args.bucket, max_tokens)
        order = np.random.default_rng([args.seed, 2]).permutation(len(epoch))
        timed = [epoch[order[i % len(order)]] for i in range(args.steps)]
        return TransformerSetup(kind, config, init64, init32, epoch, timed)
