"""The tiny RNN model of the model parity tests, in every configuration, and how each
backend evaluates it (forward, loss, gradients; the NumPy reference; finite differences).
See test_models.py for what is checked."""

from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from xpseq import backends
from xpseq.models import rnn as M
from xpseq.testing import (
    FORWARD_ATOL,
    FORWARD_RTOL,
    GRAD_ATOL,
    GRAD_RTOL,
    central_difference_grad,
)

NP = backends.get("numpy")
STEP_TOL = 1e-12    # encode + decode_step vs forward, unpadded vs padded encoder (numpy)
FD_H = 1e-6

# ---------------------------------------------------------------------- the tiny model

SRC_VOCAB, TGT_VOCAB, EMBED, HIDDEN = 7, 8, 3, 2
B, S, T = 3, 4, 3
PAD, BOS, EOS = 0, 1, 2
D = 2 * HIDDEN

SRC = np.array([[3, 1, 5, 2],
                [6, 3, PAD, PAD],
                [5, PAD, PAD, PAD]], dtype=np.int64)
SRC_LEN = np.array([4, 2, 1], dtype=np.int64)
TGT_IN = np.array([[BOS, 3, 4],
                   [BOS, 5, PAD],
                   [BOS, PAD, PAD]], dtype=np.int64)
TGT_OUT = np.array([[3, 4, EOS],
                    [5, EOS, PAD],
                    [EOS, PAD, PAD]], dtype=np.int64)
BATCH = {"src": SRC, "src_len": SRC_LEN, "tgt_in": TGT_IN, "tgt_out": TGT_OUT}

SRC_REAL = np.arange(S)[None, :] < SRC_LEN[:, None]          # (B, S)
TGT_REAL = TGT_OUT != PAD                                     # (B, T)
# Embedding rows that no real token uses: their gradient must be exactly zero.
UNUSED_SRC_ROWS = sorted(set(range(SRC_VOCAB)) - set(SRC[SRC_REAL].tolist()))
UNUSED_TGT_ROWS = sorted(set(range(TGT_VOCAB)) - set(TGT_IN[TGT_REAL].tolist()))
assert UNUSED_SRC_ROWS == [0, 4] and UNUSED_TGT_ROWS == [0, 2, 6, 7]
assert (SRC[~SRC_REAL] == PAD).all() and (TGT_IN[:, 1:][TGT_REAL[:, 1:]] ==
                                          TGT_OUT[:, :-1][TGT_REAL[:, 1:]]).all()

DROPOUT = 0.3
KEEP = np.random.default_rng(1).random((B, T, 2 * HIDDEN)) >= DROPOUT
assert KEEP.any() and not KEEP.all()


def make_config(attention: str, cell: str, style: str, feed: bool,
                dropout: float = 0.0) -> M.Seq2SeqConfig:
    return M.Seq2SeqConfig(src_vocab=SRC_VOCAB, tgt_vocab=TGT_VOCAB, embed=EMBED, hidden=HIDDEN,
                           cell=cell, attention=attention, style=style, input_feeding=feed,
                           dropout=dropout)


def config_id(c: M.Seq2SeqConfig) -> str:
    name = f"{c.attention}-{c.cell}-{c.style}"
    if c.attention != "none" and not c.input_feeding:
        name += "-nofeed"
    if c.dropout:
        name += f"-drop{c.dropout}"
    return name


_all = [make_config(a, c, s, a != "none")
        for a, c, s in itertools.product(M.ATTENTIONS, ("lstm", "gru"), M.STYLES)]
_all += [make_config("dot", "lstm", "luong", False),
         make_config("general", "gru", "bahdanau", False),
         make_config("additive", "lstm", "bahdanau", False),
         make_config("scaled_dot", "gru", "luong", False)]
CONFIGS = {config_id(c): c for c in _all}
IDS = list(CONFIGS)
assert len(IDS) == 24
# One seed per configuration; the dropout variants share the parameters of their base.
PARAMS = {cid: M.init_params(c, seed=10 + i) for i, (cid, c) in enumerate(CONFIGS.items())}

DROPOUT_BASES = ["general-lstm-luong", "additive-gru-bahdanau"]
for _base in DROPOUT_BASES:
    _c = M.Seq2SeqConfig.from_dict({**CONFIGS[_base].to_dict(), "dropout": DROPOUT})
    CONFIGS[config_id(_c)] = _c
    PARAMS[config_id(_c)] = PARAMS[_base]
DROPOUT_IDS = [f"{b}-drop{DROPOUT}" for b in DROPOUT_BASES]

# Configurations for the expensive checks (see the module docstring).
FD_CONFIGS = ["additive-lstm-bahdanau", "additive-gru-luong", "general-lstm-luong",
              "general-gru-bahdanau"]
JAX_SUBSET = set(FD_CONFIGS + ["none-gru-luong", "dot-lstm-bahdanau",
                               "scaled_dot-gru-luong-nofeed", DROPOUT_IDS[0]])


def _configs_for(variable: str) -> set[str]:
    """``JAX_SUBSET`` if the environment variable is set (and not 0), else every one."""
    return JAX_SUBSET if os.environ.get(variable, "") not in ("", "0") else set(CONFIGS)


# Every configuration by default (the parity contract); XPSEQ_JAX_SUBSET=1 (which `make test`
# sets, for the suite's 5-minute budget) compiles only a covering subset on JAX.
JAX_CONFIGS = _configs_for("XPSEQ_JAX_SUBSET")
# The same covering subset for ndonnx's eager forward (10-25 s a configuration, each
# operation run by onnxruntime as it is recorded): XPSEQ_ONNX_SUBSET=1, which
# `make test-slow` sets, runs it there; the other configurations' operations are the same.
ONNX_CONFIGS = _configs_for("XPSEQ_ONNX_SUBSET")
JAX_EAGER_CONFIGS = ["additive-lstm-bahdanau", "general-gru-bahdanau"]
ADAM_CONFIGS = ["general-lstm-luong", "additive-gru-luong"]
PADDING_CONFIGS = ["additive-lstm-bahdanau", "additive-gru-luong"]
assert set(JAX_EAGER_CONFIGS + ADAM_CONFIGS + PADDING_CONFIGS) <= JAX_SUBSET
assert {c.attention for c in (CONFIGS[i] for i in JAX_SUBSET)} == set(M.ATTENTIONS)
assert {(c.cell, c.style) for c in (CONFIGS[i] for i in JAX_SUBSET)} >= {
    ("lstm", "luong"), ("lstm", "bahdanau"), ("gru", "luong"), ("gru", "bahdanau")}


def keep_for(cid: str) -> np.ndarray | None:
    return KEEP if CONFIGS[cid].dropout else None


# ------------------------------------------------------------------------ evaluation


@dataclass
class Out:
    """NumPy copies of one evaluation."""

    logits: np.ndarray
    weights: np.ndarray | None
    loss: float
    grads: dict | None = None


def np_of(be: backends.Backend, x: Any) -> Any:
    if x is None:
        return None
    if isinstance(x, dict):
        return {k: np_of(be, v) for k, v in x.items()}
    return be.to_numpy(x)


def need(name: str) -> backends.Backend:
    if name not in backends.available():
        pytest.skip(f"backend {name!r} is not installed")
    return backends.get(name)


def require_jax_config(cid: str) -> None:
    if cid not in JAX_CONFIGS:
        pytest.skip("XPSEQ_JAX_SUBSET=1: JAX runs a covering subset of the configurations")


@functools.lru_cache(maxsize=None)
def jax_program(config: M.Seq2SeqConfig, with_grads: bool = True):
    """One jitted program per configuration: forward, loss and (optionally) gradients.

    ``config`` is closed over; params, batch arrays and the keep mask are traced, so new
    ids of the same shape (the property tests) reuse the compilation.
    """
    be = backends.get("jax")

    def run(params, batch, keep):
        logits, weights = M.forward(params, config, batch["src"], batch["src_len"],
                                    batch["tgt_in"], keep=keep, scan=be.scan)
        objective = lambda p: M.loss(p, config, batch, keep=keep, scan=be.scan)  # noqa: E731
        if not with_grads:
            return logits, weights, objective(params), None
        value, grads = be.value_and_grad(objective)(params)
        return logits, weights, value, grads

    return be.jit(run)


def evaluate(be: backends.Backend, cid: str, *, batch: dict | None = None,
             keep: Any = "default", grads: bool = False, params: dict | None = None,
             jit_grads: bool = True) -> Out:
    """Forward, loss (and gradients) of configuration ``cid`` on ``be``.

    JAX runs the jitted program of the configuration; the other backends run eagerly with
    ``scan=backend.scan``.
    """
    config = CONFIGS[cid]
    params = be.asarray_tree(PARAMS[cid] if params is None else params)
    batch = be.asarray_tree(BATCH if batch is None else batch)
    keep = keep_for(cid) if isinstance(keep, str) else keep
    keep = None if keep is None else be.asarray(keep, dtype="bool")
    if be.name == "jax":
        require_jax_config(cid)
        logits, weights, value, g = jax_program(config, jit_grads or grads)(params, batch, keep)
        return Out(be.to_numpy(logits), np_of(be, weights), float(be.to_numpy(value)),
                   np_of(be, g) if grads else None)
    logits, weights = M.forward(params, config, batch["src"], batch["src_len"],
                                batch["tgt_in"], keep=keep, scan=be.scan)
    value = M.loss(params, config, batch, keep=keep, scan=be.scan)
    g = None
    if grads and be.gradients == "hand-derived":
        value2, g = M.loss_and_grad(params, config, batch, keep=keep)
    elif grads:
        value2, g = be.value_and_grad(
            lambda p: M.loss(p, config, batch, keep=keep, scan=be.scan))(params)
    if grads:
        np.testing.assert_allclose(float(be.to_numpy(value2)), float(be.to_numpy(value)),
                                   rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
        g = np_of(be, g)
    return Out(be.to_numpy(logits), np_of(be, weights), float(be.to_numpy(value)), g)


@functools.lru_cache(maxsize=None)
def reference(cid: str) -> Out:
    return evaluate(NP, cid)


@functools.lru_cache(maxsize=None)
def autodiff(name: str, cid: str) -> Out:
    return evaluate(backends.get(name), cid, grads=True)


def numpy_loss(cid: str, params: dict, keep: Any = "default") -> float:
    keep = keep_for(cid) if isinstance(keep, str) else keep
    return float(M.loss(params, CONFIGS[cid], BATCH, keep=keep))


@functools.lru_cache(maxsize=None)
def fd_params(cid: str) -> dict[str, np.ndarray]:
    """Parameters at which central differences can resolve every gradient to FD_REL_ERR.

    At h = 1e-6 the rounding error of a central difference of this loss is about 3e-10,
    so a parameter array whose largest gradient is below ~3e-3 cannot be checked to 1e-7
    relative. At ``init_params`` scale some are far smaller (att.W_q of additive attention
    has gradients ~1e-6 in this tiny model), so the weights here are drawn from N(0, 1.5^2)
    (embeddings N(0, 1)): every array's gradient is then >= 1e-2.
    """
    r = np.random.default_rng(0)
    return {k: r.standard_normal(v.shape) * (1.0 if k.endswith("embed") else 1.5)
            for k, v in PARAMS[cid].items()}


FD_RESOLVABLE = 3e-3   # the smallest max|gradient| that central differences resolve to 1e-7


@functools.lru_cache(maxsize=None)
def fd_grads(cid: str) -> dict[str, np.ndarray]:
    """Central differences of the NumPy loss, parameter array by parameter array."""
    params = fd_params(cid)
    return {name: central_difference_grad(
        lambda x, name=name: numpy_loss(cid, {**params, name: x}), params[name], h=FD_H)
        for name in params}


def assert_grads_close(a: dict, b: dict, what: str) -> None:
    assert sorted(a) == sorted(b), what
    for name in a:
        assert a[name].shape == b[name].shape and a[name].dtype == b[name].dtype == np.float64
        np.testing.assert_allclose(a[name], b[name], rtol=GRAD_RTOL, atol=GRAD_ATOL,
                                   err_msg=f"{what}: d loss / d {name}")


def independent_nll(logits: np.ndarray, tgt_out: np.ndarray) -> float:
    """Mean NLL over the real targets, in plain NumPy."""
    m = logits.max(axis=-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(logp, tgt_out[..., None], axis=-1)[..., 0]
    real = tgt_out != PAD
    return float(-picked[real].sum() / real.sum())
