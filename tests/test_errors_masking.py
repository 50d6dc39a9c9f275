"""Bad lengths, masks, empty rows, non-finite values and scales given to the attention
functions of :mod:`xpseq.core` fail loudly and clearly (shapes, ranks and dtypes: in
test_errors.py).

Every case checks the exception type *and* that the message names the offending argument
and what was expected, on every selected backend (the ``backend`` fixture). The value
checks that need concrete numbers are skipped under ``jax.jit``; test_errors_lazy.py pins
down what the functions compute then (never NaN) and that structural errors still raise.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from core_inputs import (
    D_MODEL,
    DV,
    INF,
    MASKED,
    NAN,
    SCALED,
    B,
    D,
    K,
    Q,
    assert_rows_zero,
    bools,
    call_masked,
    call_mha,
    ints,
    masked_inputs,
    mha_params,
    rand,
    run_masked,
    with_value,
)

from xpseq import core

# ------------------------------------------------------------------------- valid_lens

VALID_LENS_VALUE_CASES = {
    "negative": ([2, -1], r"valid_lens must be >= 0, got valid_lens\[1\] = -1"),
    "negative first of two": ([-3, -1], r"valid_lens must be >= 0, got valid_lens\[0\] = -3"),
    "above keys": ([5, 2], r"valid_lens must be <= 4 .*got valid_lens\[0\] = 5"),
    "above keys 2-d": ([[1, 2, 3], [4, 7, 1]],
                       r"valid_lens must be <= 4 .*got valid_lens\[1, 1\] = 7"),
    "negative 2-d": ([[1, 2, 3], [4, 2, -1]],
                     r"valid_lens must be >= 0, got valid_lens\[1, 2\] = -1"),
}


@pytest.mark.parametrize("case", list(VALID_LENS_VALUE_CASES))
def test_valid_lens_out_of_range(backend, case):
    values, pattern = VALID_LENS_VALUE_CASES[case]
    for fname in MASKED:
        with pytest.raises(ValueError, match=rf"{fname}: {pattern}"):
            run_masked(fname, backend, valid_lens=ints(backend, values))


@pytest.mark.parametrize("fname", MASKED)
def test_valid_lens_out_of_range_as_list(backend, fname):
    with pytest.raises(ValueError, match=rf"{fname}: valid_lens must be >= 0, got valid_lens\[1\] = -1"):
        run_masked(fname, backend, valid_lens=[3, -1])


@pytest.mark.parametrize("fname", MASKED)
def test_valid_lens_not_integer(backend, fname):
    inputs = masked_inputs(fname, backend)
    for dtype in ("float64", "float32", "bool"):
        vl = backend.asarray(np.asarray([1, 2]), dtype=dtype)
        with pytest.raises(TypeError, match=rf"{fname}: valid_lens must have an integer dtype, "
                                            rf"got \S*{dtype}"):
            call_masked(fname, inputs, valid_lens=vl)


VALID_LENS_SHAPE_CASES = {
    "(batch+1,)": (np.array([1, 2, 3]),
                   r"valid_lens has shape \(3,\) but expected \(batch,\) = \(2,\)"),
    "(batch-1,)": (np.array([1]), r"valid_lens has shape \(1,\) but expected \(batch,\) = \(2,\)"),
    "3-d": (np.ones((2, 3, 1), dtype=np.int64),
            r"valid_lens must have shape \(batch,\) or \(batch, queries\), got shape \(2, 3, 1\)"),
    "0-d": (np.array(2), r"valid_lens must have shape \(batch,\) or \(batch, queries\), got shape \(\)"),
    "(batch, queries+1)": (np.ones((2, 4), dtype=np.int64),
                           r"valid_lens has shape \(2, 4\) but expected \(batch, queries\) = \(2, 3\)"),
    "(queries, batch)": (np.ones((3, 2), dtype=np.int64),
                         r"valid_lens has shape \(3, 2\) but expected \(batch, queries\) = \(2, 3\)"),
}


@pytest.mark.parametrize("case", list(VALID_LENS_SHAPE_CASES))
def test_valid_lens_wrong_shape(backend, case):
    values, pattern = VALID_LENS_SHAPE_CASES[case]
    for fname in MASKED:
        inputs = masked_inputs(fname, backend)
        with pytest.raises(ValueError, match=rf"{fname}: {pattern}"):
            call_masked(fname, inputs, valid_lens=ints(backend, values))
        if values.ndim:
            with pytest.raises(ValueError, match=rf"{fname}: {pattern}"):  # as a nested list
                call_masked(fname, inputs, valid_lens=values.tolist())


def test_valid_lens_needs_batch_axis(backend):
    with pytest.raises(ValueError, match=r"masked_softmax: valid_lens of shape \(batch,\) needs scores"):
        core.masked_softmax(rand(backend, K), ints(backend, [2]))
    with pytest.raises(ValueError, match=r"masked_softmax: valid_lens of shape \(batch, queries\) needs scores"):
        core.masked_softmax(rand(backend, B, K), ints(backend, [[1], [2]]))


@pytest.mark.parametrize("fname", MASKED)
def test_valid_lens_list_of_non_ints(backend, fname):
    inputs = masked_inputs(fname, backend)
    for values in ([1.0, 2.0], [1, 2.5], [True, 2], [[1, 2, 3], [1, 2, 3.0]], ["1", "2"]):
        with pytest.raises(TypeError, match=rf"{fname}: valid_lens must hold integers"):
            call_masked(fname, inputs, valid_lens=values)


@pytest.mark.parametrize("fname", MASKED)
def test_valid_lens_sequence_of_ints_accepted(backend, fname):
    inputs = masked_inputs(fname, backend)
    for values in ([3, 1], (3, 1), [[1, 2, 3], [4, 1, 2]], [np.int64(3), np.int32(1)]):
        w_list, _ = call_masked(fname, inputs, valid_lens=values)
        w_arr, _ = call_masked(fname, inputs, valid_lens=ints(backend, np.asarray(values)))
        np.testing.assert_array_equal(backend.to_numpy(w_list), backend.to_numpy(w_arr))
        lens = np.broadcast_to(np.asarray(values).reshape(B, -1), (B, Q))
        w = backend.to_numpy(w_list)
        for b in range(B):
            for i in range(Q):
                assert np.all(w[b, ..., i, lens[b, i]:] == 0)
                assert np.all(w[b, ..., i, :lens[b, i]] > 0)


# ------------------------------------------------------------------------------ mask


@pytest.mark.parametrize("fname", MASKED)
def test_mask_not_bool(backend, fname):
    inputs = masked_inputs(fname, backend)
    for dtype in ("int64", "int32", "float64"):
        mask = backend.asarray(np.ones((B, Q, K)), dtype=dtype)
        with pytest.raises(TypeError, match=rf"{fname}: mask must have a bool dtype.*got \S*{dtype}"):
            call_masked(fname, inputs, mask=mask)


MASK_SHAPES = {
    "keys+1": ((B, Q, K + 1), r"\(2, 3, 5\)"),
    "batch 3": ((3, 1, K), r"\(3, 1, 4\)"),
    "too many dims": ((1, B, Q, K), r"\(1, 2, 3, 4\)"),
    "queries as keys": ((Q,), r"\(3,\)"),
}


@pytest.mark.parametrize("fname", MASKED)
def test_mask_not_broadcastable(backend, fname):
    inputs = masked_inputs(fname, backend)
    for shape, shape_re in MASK_SHAPES.values():
        mask = bools(backend, np.ones(shape, dtype=bool))
        with pytest.raises(ValueError, match=rf"{fname}: mask of shape {shape_re} does not "
                                             r"broadcast to the scores shape \(2, 3, 4\)"):
            call_masked(fname, inputs, mask=mask)


@pytest.mark.parametrize("fname", MASKED)
def test_mask_broadcasting_accepted(backend, fname):
    mask = bools(backend, [True, True, False, True])  # (K,) broadcasts to (B, Q, K)
    w, _ = run_masked(fname, backend, mask=mask)
    w = backend.to_numpy(w)
    assert np.all(w[..., 2] == 0)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=1e-12)


# ---------------------------------------------------------------------- empty policy


@pytest.mark.parametrize("fname", MASKED)
def test_empty_policy_unknown(backend, fname):
    inputs = masked_inputs(fname, backend)
    for empty in ("ignore", None, 0, "Error", True, ""):
        with pytest.raises(ValueError, match=rf"{fname}: empty must be 'error' or 'zero', got "
                                             + re.escape(repr(empty))):
            call_masked(fname, inputs, valid_lens=ints(backend, [2, 3]), empty=empty)


@pytest.mark.parametrize("fname", MASKED)
def test_empty_row_with_valid_lens_1d(backend, fname):
    inputs = masked_inputs(fname, backend)
    vl = ints(backend, [K, 0])
    with pytest.raises(ValueError, match=rf"{fname}: query row \(1, 0\) of .*has no valid key"
                                         r".*empty='zero'"):
        call_masked(fname, inputs, valid_lens=vl)
    # The same call with empty="zero" succeeds: the error came from the empty row alone.
    w, c = call_masked(fname, inputs, valid_lens=vl, empty="zero")
    assert_rows_zero(backend, w, c, {(1, 0), (1, 1), (1, 2)})


@pytest.mark.parametrize("fname", MASKED)
def test_empty_row_with_valid_lens_2d_reports_first(backend, fname):
    inputs = masked_inputs(fname, backend)
    vl = ints(backend, [[1, 2, 3], [2, 0, 0]])
    with pytest.raises(ValueError, match=rf"{fname}: query row \(1, 1\) of .*has no valid key"):
        call_masked(fname, inputs, valid_lens=vl)
    w, c = call_masked(fname, inputs, valid_lens=vl, empty="zero")
    assert_rows_zero(backend, w, c, {(1, 1), (1, 2)})


@pytest.mark.parametrize("fname", MASKED)
def test_empty_row_with_mask_reports_first(backend, fname):
    mask = np.ones((B, Q, K), dtype=bool)
    mask[1, 0] = False   # later in C order ...
    mask[0, 2] = False   # ... than this one, which must be the row reported
    mask[1, 2, :3] = False  # not empty: key 3 is valid
    inputs = masked_inputs(fname, backend)
    with pytest.raises(ValueError, match=rf"{fname}: query row \(0, 2\) of .*has no valid key"):
        call_masked(fname, inputs, mask=bools(backend, mask))
    w, c = call_masked(fname, inputs, mask=bools(backend, mask), empty="zero")
    assert_rows_zero(backend, w, c, {(0, 2), (1, 0)})


@pytest.mark.parametrize("fname", MASKED)
def test_empty_row_from_valid_lens_and_mask_combined(backend, fname):
    # Neither valid_lens nor mask alone empties a row; together they empty (0, 1) and (1, 2).
    vl = ints(backend, [[4, 1, 4], [4, 4, 2]])
    mask = np.ones((B, Q, K), dtype=bool)
    mask[0, 1, 0] = False
    mask[1, 2, :2] = False
    inputs = masked_inputs(fname, backend)
    with pytest.raises(ValueError, match=rf"{fname}: query row \(0, 1\) of .*has no valid key"):
        call_masked(fname, inputs, valid_lens=vl, mask=bools(backend, mask))
    w, c = call_masked(fname, inputs, valid_lens=vl, mask=bools(backend, mask), empty="zero")
    assert_rows_zero(backend, w, c, {(0, 1), (1, 2)})


def test_empty_row_index_has_all_leading_axes(backend):
    scores = rand(backend, 2, 3, 2, 4)  # (batch, heads, queries, keys)
    mask = np.ones((2, 3, 2, 4), dtype=bool)
    mask[1, 2, 1] = False
    mask[1, 0, 0, 1:] = False
    with pytest.raises(ValueError, match=r"masked_softmax: query row \(1, 2, 1\) of scores "
                                         r"\(shape \(2, 3, 2, 4\)\) has no valid key"):
        core.masked_softmax(scores, mask=bools(backend, mask))


@pytest.mark.parametrize("fname", MASKED)
def test_zero_keys(backend, fname):
    inputs = masked_inputs(fname, backend, keys=0)
    with pytest.raises(ValueError, match=rf"{fname}: .*no keys \(last axis of size 0\).*"
                                         r"empty='zero'"):
        call_masked(fname, inputs)
    with pytest.raises(ValueError, match=rf"{fname}: .*no keys"):
        call_masked(fname, inputs, valid_lens=ints(backend, [0, 0]))
    w, c = call_masked(fname, inputs, empty="zero")
    assert backend.to_numpy(w).size == 0
    if c is not None:
        c = backend.to_numpy(c)
        assert c.shape[:2] == (B, Q) and np.all(c == 0)


# ------------------------------------------------------------------- non-finite input


NONFINITE_CASES = {
    # case: (thunk(be, bad) where bad(*shape) gives an array with one non-finite entry, name)
    "masked_softmax scores": (lambda be, bad: core.masked_softmax(bad(B, Q, K)),
                              r"masked_softmax: scores"),
    "masked_softmax scores, lens": (
        lambda be, bad: core.masked_softmax(bad(B, Q, K), ints(be, [4, 4])),
        r"masked_softmax: scores"),
    "dot_scores q": (lambda be, bad: core.dot_scores(bad(B, Q, D), rand(be, B, K, D)),
                     r"dot_scores: q"),
    "dot_scores k": (lambda be, bad: core.dot_scores(rand(be, B, Q, D), bad(B, K, D)),
                     r"dot_scores: k"),
    "general_scores q": (lambda be, bad: core.general_scores(bad(B, Q, D), rand(be, B, K, D),
                                                             rand(be, D, D)),
                         r"general_scores: q"),
    "general_scores W": (lambda be, bad: core.general_scores(rand(be, B, Q, D),
                                                             rand(be, B, K, D), bad(D, D)),
                         r"general_scores: W"),
    "additive_scores k": (lambda be, bad: core.additive_scores(
        rand(be, B, Q, D), bad(B, K, D), rand(be, 6, D), rand(be, 6, D), rand(be, 6)),
        r"additive_scores: k"),
    "additive_scores W_q": (lambda be, bad: core.additive_scores(
        rand(be, B, Q, D), rand(be, B, K, D), bad(6, D), rand(be, 6, D), rand(be, 6)),
        r"additive_scores: W_q"),
    "additive_scores W_k": (lambda be, bad: core.additive_scores(
        rand(be, B, Q, D), rand(be, B, K, D), rand(be, 6, D), bad(6, D), rand(be, 6)),
        r"additive_scores: W_k"),
    "additive_scores v": (lambda be, bad: core.additive_scores(
        rand(be, B, Q, D), rand(be, B, K, D), rand(be, 6, D), rand(be, 6, D), bad(6)),
        r"additive_scores: v"),
    "attend scores": (lambda be, bad: core.attend(bad(B, Q, K), rand(be, B, K, DV)),
                      r"attend: scores"),
    "attend values": (lambda be, bad: core.attend(rand(be, B, Q, K), bad(B, K, DV)),
                      r"attend: values"),
    "attend values, masked key": (
        # A masked key's value still enters 0 * value, so it must be finite too.
        lambda be, bad: core.attend(rand(be, B, Q, K), bad(B, K, DV),
                                    valid_lens=ints(be, [1, 1])),
        r"attend: values"),
    "sdpa q": (lambda be, bad: core.scaled_dot_product_attention(
        bad(B, Q, D), rand(be, B, K, D), rand(be, B, K, DV)), r"scaled_dot_product_attention: q"),
    "sdpa k": (lambda be, bad: core.scaled_dot_product_attention(
        rand(be, B, Q, D), bad(B, K, D), rand(be, B, K, DV)), r"scaled_dot_product_attention: k"),
    "sdpa v": (lambda be, bad: core.scaled_dot_product_attention(
        rand(be, B, Q, D), rand(be, B, K, D), bad(B, K, DV)), r"scaled_dot_product_attention: v"),
    "mha q": (lambda be, bad: call_mha(be, q=bad(B, Q, D_MODEL)), r"multi_head_attention: q"),
    "mha v": (lambda be, bad: call_mha(be, v=bad(B, K, D_MODEL)), r"multi_head_attention: v"),
    "mha W_k": (lambda be, bad: call_mha(be, params={**mha_params(be), "W_k": bad(D_MODEL, D_MODEL)}),
                r"multi_head_attention: W_k"),
    "mha b_v": (lambda be, bad: call_mha(be, params={**mha_params(be, bias=True), "b_v": bad(D_MODEL)}),
                r"multi_head_attention: b_v"),
}


@pytest.mark.parametrize("case", list(NONFINITE_CASES))
def test_non_finite_input(backend, case):
    thunk, prefix = NONFINITE_CASES[case]
    for value in (NAN, INF, -INF):
        def bad(*shape):
            return with_value(backend, shape, (-1,) * len(shape), value, seed=4)

        with pytest.raises(ValueError, match=rf"{prefix} must be finite.*NaN or infinity"):
            thunk(backend, bad)


@pytest.mark.parametrize("fname", ["masked_softmax", "attend"])
@pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["nan", "inf", "-inf"])
def test_non_finite_score_at_unmasked_key(backend, fname, value):
    mask = np.ones((B, Q, K), dtype=bool)
    mask[0, 1, 2] = False
    scores = with_value(backend, (B, Q, K), (1, 1, 2), value)  # (1, 1, 2) is NOT masked
    with pytest.raises(ValueError, match=rf"{fname}: scores must be finite at an unmasked key"):
        call_masked(fname, (scores,) + masked_inputs(fname, backend)[1:],
                    mask=bools(backend, mask))


@pytest.mark.parametrize("fname", ["masked_softmax", "attend"])
@pytest.mark.parametrize("how", ["mask", "valid_lens", "both"])
def test_non_finite_score_at_masked_key_gets_zero_weight(backend, fname, how):
    x = np.random.default_rng(5).standard_normal((B, Q, K))
    x[0, 1, 3] = NAN
    x[1, 0, 2] = INF
    x[1, 2, 3] = -INF
    x[1, 1, 3] = NAN
    mask = np.ones((B, Q, K), dtype=bool)
    mask[0, 1, 3] = mask[1, :, 3] = mask[1, 0, 2] = False
    vl = [3, 2]  # masks (0, :, 3), (1, :, 2:) -- covers the same positions
    kwargs = {"mask": dict(mask=bools(backend, mask)),
              "valid_lens": dict(valid_lens=ints(backend, vl)),
              "both": dict(mask=bools(backend, mask), valid_lens=ints(backend, vl))}[how]
    scores_np = x.copy()
    inputs = (backend.asarray(x),) + masked_inputs(fname, backend)[1:]
    w, c = call_masked(fname, inputs, **kwargs)
    w = backend.to_numpy(w)
    assert np.all(np.isfinite(w))
    assert w[0, 1, 3] == 0 and w[1, 0, 2] == 0 and w[1, 2, 3] == 0 and w[1, 1, 3] == 0
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=1e-12)
    # Unmasked weights are the softmax of the unmasked finite scores.
    keep = mask if how == "mask" else np.arange(K) < np.array(vl)[:, None, None]
    ref = np.where(keep, np.exp(np.where(keep, scores_np, -np.inf)
                                - np.max(np.where(keep, scores_np, -np.inf), -1, keepdims=True)), 0)
    np.testing.assert_allclose(w, ref / ref.sum(-1, keepdims=True), rtol=1e-12, atol=1e-15)
    if c is not None:
        assert np.all(np.isfinite(backend.to_numpy(c)))
    np.testing.assert_array_equal(backend.to_numpy(inputs[0]), scores_np)  # untouched


# NumPy warns about the overflow in its matmul before xpseq raises its own error.
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("fname", ["scaled_dot_product_attention", "multi_head_attention"])
def test_scores_overflow_from_finite_input(backend, fname):
    # Every input is finite, but q kᵀ is 1e200 * 1e200 * d = inf.
    big_q = backend.asarray(np.full((B, Q, D_MODEL), 1e200))
    big_k = backend.asarray(np.full((B, K, D_MODEL), 1e200))
    v = rand(backend, B, K, D_MODEL)
    with pytest.raises(ValueError, match=rf"{fname}: .*scores.* must be finite"):
        if fname == "multi_head_attention":
            call_mha(backend, q=big_q, k=big_k, v=v,
                 params={n: backend.asarray(np.ones((D_MODEL, D_MODEL))) for n in
                         ("W_q", "W_k", "W_v", "W_o")})
        else:
            core.scaled_dot_product_attention(big_q, big_k, v)


# ---------------------------------------------------------------------------- scale


def _call_scaled(fname, be, scale):
    if fname == "dot_scores":
        return core.dot_scores(rand(be, B, Q, D), rand(be, B, K, D), scale=scale)
    if fname == "scaled_dot_product_attention":
        return core.scaled_dot_product_attention(rand(be, B, Q, D), rand(be, B, K, D),
                                                 rand(be, B, K, DV), scale=scale)
    return call_mha(be, scale=scale)


@pytest.mark.parametrize("fname", SCALED)
def test_scale_not_a_real_number(backend, fname):
    for scale, type_name in (("0.5", "str"), (True, "bool"), (False, "bool"),
                             (backend.asarray(0.5), r"\w+"), ([0.5], "list"),
                             (0.5 + 0j, "complex")):
        with pytest.raises(TypeError, match=rf"{fname}: scale must be a real number or None, "
                                            rf"got {type_name}"):
            _call_scaled(fname, backend, scale)


@pytest.mark.parametrize("fname", SCALED)
def test_scale_not_finite(backend, fname):
    for scale in (INF, -INF, NAN):
        with pytest.raises(ValueError, match=rf"{fname}: scale must be finite, got {scale}"):
            _call_scaled(fname, backend, scale)
