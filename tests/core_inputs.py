"""The inputs the error-path tests of :mod:`xpseq.core` build (test_errors.py,
test_errors_lazy.py): sizes, random arrays, multi-head parameters, the masked
functions called one way."""

from __future__ import annotations

import math

import numpy as np

from xpseq import core

B, Q, K, D, DV = 2, 3, 4, 5, 2  # batch, queries, keys, depth of q/k, depth of v
H, D_MODEL = 2, 4                  # heads and model width of multi_head_attention

MASKED = ("masked_softmax", "attend", "scaled_dot_product_attention", "multi_head_attention")
SCALED = ("dot_scores", "scaled_dot_product_attention", "multi_head_attention")


# --------------------------------------------------------------------------- builders


def rand(be, *shape, seed=0, dtype="float64"):
    return be.asarray(np.random.default_rng(seed).standard_normal(shape), dtype=dtype)


def ints(be, values):
    return be.asarray(np.asarray(values, dtype=np.int64))


def bools(be, values):
    return be.asarray(np.asarray(values, dtype=bool), dtype="bool")


def with_value(be, shape, index, value, seed=0):
    """A float64 array of ``shape`` with ``value`` (NaN, inf, 1e200, ...) at ``index``."""
    x = np.random.default_rng(seed).standard_normal(shape)
    x[index] = value
    return be.asarray(x)


def mha_params(be, d_q=D_MODEL, d_k=D_MODEL, d_v=D_MODEL, d_model=D_MODEL, d_value=D_MODEL,
               d_out=D_MODEL, bias=False):
    p = {
        "W_q": rand(be, d_model, d_q, seed=10),
        "W_k": rand(be, d_model, d_k, seed=11),
        "W_v": rand(be, d_value, d_v, seed=12),
        "W_o": rand(be, d_out, d_value, seed=13),
    }
    if bias:
        p.update(b_q=rand(be, d_model, seed=14), b_k=rand(be, d_model, seed=15),
                 b_v=rand(be, d_value, seed=16), b_o=rand(be, d_out, seed=17))
    return p


def masked_inputs(fname, be, keys=K):
    """Positional inputs of ``fname`` whose scores have shape ``(B, Q, keys)``."""
    if fname == "masked_softmax":
        return (rand(be, B, Q, keys),)
    if fname == "attend":
        return rand(be, B, Q, keys), rand(be, B, keys, DV, seed=1)
    if fname == "scaled_dot_product_attention":
        return rand(be, B, Q, D), rand(be, B, keys, D, seed=1), rand(be, B, keys, DV, seed=2)
    return (mha_params(be), rand(be, B, Q, D_MODEL), rand(be, B, keys, D_MODEL, seed=1),
            rand(be, B, keys, D_MODEL, seed=2))


def call_masked(fname, inputs, valid_lens=None, mask=None, empty="error"):
    """Call one of :data:`MASKED`; returns ``(weights, context)`` (context None for softmax)."""
    if fname == "masked_softmax":
        return core.masked_softmax(*inputs, valid_lens, mask=mask, empty=empty), None
    if fname == "multi_head_attention":
        context, weights = core.multi_head_attention(*inputs, num_heads=H,
                                                     valid_lens=valid_lens, mask=mask,
                                                     empty=empty)
        return weights, context
    context, weights = getattr(core, fname)(*inputs, valid_lens=valid_lens, mask=mask,
                                            empty=empty)
    return weights, context


def run_masked(fname, be, keys=K, **kwargs):
    return call_masked(fname, masked_inputs(fname, be, keys), **kwargs)


def assert_rows_zero(be, weights, context, rows):
    """Rows ``(b, i)`` of the weights (all heads) and the context are exactly zero; the
    other rows sum to one; nothing is NaN."""
    w = be.to_numpy(weights)
    assert np.all(np.isfinite(w))
    for b in range(B):
        for i in range(Q):
            total = w[b, ..., i, :].sum(axis=-1)
            if (b, i) in rows:
                assert np.all(w[b, ..., i, :] == 0), (b, i, w[b, ..., i, :])
            else:
                np.testing.assert_allclose(total, 1.0, rtol=1e-12)
    if context is not None:
        c = be.to_numpy(context)
        assert np.all(np.isfinite(c))
        for b, i in rows:
            assert np.all(c[b, i] == 0), (b, i, c[b, i])


NAN, INF = math.nan, math.inf


def call_mha(be, params=None, q=None, k=None, v=None, **kw):
    """``multi_head_attention`` on default inputs, any of them replaced."""
    kw.setdefault("num_heads", H)
    return core.multi_head_attention(
        mha_params(be) if params is None else params,
        rand(be, B, Q, D_MODEL) if q is None else q,
        rand(be, B, K, D_MODEL, seed=1) if k is None else k,
        rand(be, B, K, D_MODEL, seed=2) if v is None else v, **kw)
