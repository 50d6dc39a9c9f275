"""Bad input to every public function of :mod:`xpseq.core` fails loudly and clearly (bad
lengths, masks, empty rows, non-finite values and scales: in test_errors_masking.py).

Every case checks the exception type *and* that the message names the offending argument
and what was expected, on every selected backend (the ``backend`` fixture). The value
checks that need concrete numbers are skipped under ``jax.jit``; test_errors_lazy.py pins
down what the functions compute then (never NaN) and that structural errors still raise.
"""

from __future__ import annotations

import numpy as np
import pytest
from core_inputs import (
    D_MODEL,
    DV,
    B,
    D,
    H,
    K,
    Q,
    call_mha,
    ints,
    mha_params,
    rand,
)

from xpseq import core

# ----------------------------------------------------------------------- wrong ranks

RANK_CASES = {
    "dot_scores q 1-d": (
        lambda be: core.dot_scores(rand(be, D), rand(be, K, D)),
        r"dot_scores: q must have at least 2 dimension"),
    "dot_scores k 1-d": (
        lambda be: core.dot_scores(rand(be, Q, D), rand(be, D)),
        r"dot_scores: k must have at least 2 dimension"),
    "general_scores W 3-d": (
        lambda be: core.general_scores(rand(be, B, Q, D), rand(be, B, K, D), rand(be, 1, D, D)),
        r"general_scores: W must have exactly 2 dimensions \(d_q, d_k\)"),
    "general_scores W 1-d": (
        lambda be: core.general_scores(rand(be, B, Q, D), rand(be, B, K, D), rand(be, D)),
        r"general_scores: W must have exactly 2 dimensions"),
    "additive_scores v 2-d": (
        lambda be: core.additive_scores(rand(be, B, Q, D), rand(be, B, K, D), rand(be, 6, D),
                                        rand(be, 6, D), rand(be, 1, 6)),
        r"additive_scores: v must have exactly 1 dimension.*\(h,\)"),
    "additive_scores W_q 1-d": (
        lambda be: core.additive_scores(rand(be, B, Q, D), rand(be, B, K, D), rand(be, D),
                                        rand(be, 6, D), rand(be, 6)),
        r"additive_scores: W_q must have exactly 2 dimensions \(h, d_q\)"),
    "additive_scores W_k 3-d": (
        lambda be: core.additive_scores(rand(be, B, Q, D), rand(be, B, K, D), rand(be, 6, D),
                                        rand(be, 1, 6, D), rand(be, 6)),
        r"additive_scores: W_k must have exactly 2 dimensions \(h, d_k\)"),
    "masked_softmax scores 0-d": (
        lambda be: core.masked_softmax(be.asarray(1.0)),
        r"masked_softmax: scores must have at least 1 dimension"),
    "attend scores 1-d": (
        lambda be: core.attend(rand(be, K), rand(be, K, DV)),
        r"attend: scores must have at least 2 dimension"),
    "attend values 1-d": (
        lambda be: core.attend(rand(be, Q, K), rand(be, K)),
        r"attend: values must have at least 2 dimension"),
    "sdpa v 1-d": (
        lambda be: core.scaled_dot_product_attention(rand(be, Q, D), rand(be, K, D),
                                                     rand(be, K)),
        r"scaled_dot_product_attention: v must have at least 2 dimension"),
    "sdpa q 1-d": (
        lambda be: core.scaled_dot_product_attention(rand(be, D), rand(be, K, D),
                                                     rand(be, K, DV)),
        r"scaled_dot_product_attention: q must have at least 2 dimension"),
    "mha W_o 1-d": (
        lambda be: core.multi_head_attention(
            {**mha_params(be), "W_o": rand(be, D_MODEL)}, rand(be, B, Q, D_MODEL),
            rand(be, B, K, D_MODEL), rand(be, B, K, D_MODEL), num_heads=H),
        r"multi_head_attention: W_o must have exactly 2 dimensions \(d_out, d_value\)"),
    "mha b_q 2-d": (
        lambda be: core.multi_head_attention(
            {**mha_params(be, bias=True), "b_q": rand(be, 1, D_MODEL)},
            rand(be, B, Q, D_MODEL), rand(be, B, K, D_MODEL), rand(be, B, K, D_MODEL),
            num_heads=H),
        r"multi_head_attention: b_q must have exactly 1 dimension.*\(d_model,\)"),
    "mha k 1-d": (
        lambda be: core.multi_head_attention(
            mha_params(be), rand(be, B, Q, D_MODEL), rand(be, D_MODEL),
            rand(be, B, K, D_MODEL), num_heads=H),
        r"multi_head_attention: k must have at least 2 dimension"),
}


@pytest.mark.parametrize("case", list(RANK_CASES))
def test_wrong_rank(backend, case):
    thunk, pattern = RANK_CASES[case]
    with pytest.raises(ValueError, match=pattern):
        thunk(backend)


# ------------------------------------------------------------------ mismatched sizes


SIZE_CASES = {
    "dot_scores depth": (
        lambda be: core.dot_scores(rand(be, B, Q, 4), rand(be, B, K, 3)),
        r"dot_scores: q has depth 4 but k has depth 3"),
    "sdpa depth": (
        lambda be: core.scaled_dot_product_attention(rand(be, B, Q, 4), rand(be, B, K, 3),
                                                     rand(be, B, K, DV)),
        r"scaled_dot_product_attention: q has depth 4 but k has depth 3"),
    "attend values keys": (
        lambda be: core.attend(rand(be, B, Q, 5), rand(be, B, 6, DV)),
        r"attend: values has 6 along axis -2 .*number of keys in scores is 5"),
    "sdpa v keys": (
        lambda be: core.scaled_dot_product_attention(rand(be, B, Q, D), rand(be, B, 5, D),
                                                     rand(be, B, 6, DV)),
        r"scaled_dot_product_attention: v has 6 along axis -2 .*number of keys in k is 5"),
    "mha v keys": (
        lambda be: call_mha(be, v=rand(be, B, K + 1, D_MODEL)),
        r"multi_head_attention: v has 5 along axis -2 .*number of keys in k is 4"),
    "general_scores W rows": (
        lambda be: core.general_scores(rand(be, B, Q, 4), rand(be, B, K, 4), rand(be, 3, 4)),
        r"general_scores: W has 3 along axis 0 .*depth of q is 4"),
    "general_scores W cols": (
        lambda be: core.general_scores(rand(be, B, Q, 4), rand(be, B, K, 2), rand(be, 4, 3)),
        r"general_scores: W has 3 along axis 1 .*depth of k is 2"),
    "additive W_q depth": (
        lambda be: core.additive_scores(rand(be, B, Q, 4), rand(be, B, K, 3), rand(be, 6, 3),
                                        rand(be, 6, 3), rand(be, 6)),
        r"additive_scores: W_q has 3 along axis 1 .*depth of q is 4"),
    "additive W_k depth": (
        lambda be: core.additive_scores(rand(be, B, Q, 4), rand(be, B, K, 3), rand(be, 6, 4),
                                        rand(be, 6, 4), rand(be, 6)),
        r"additive_scores: W_k has 4 along axis 1 .*depth of k is 3"),
    "additive W_k hidden": (
        lambda be: core.additive_scores(rand(be, B, Q, 4), rand(be, B, K, 3), rand(be, 6, 4),
                                        rand(be, 5, 3), rand(be, 6)),
        r"additive_scores: W_k has 5 along axis 0 .*hidden size h of W_q is 6"),
    "additive v hidden": (
        lambda be: core.additive_scores(rand(be, B, Q, 4), rand(be, B, K, 3), rand(be, 6, 4),
                                        rand(be, 6, 3), rand(be, 7)),
        r"additive_scores: v has 7 along axis 0 .*hidden size h of W_q is 6"),
    "dot_scores batch": (
        lambda be: core.dot_scores(rand(be, 2, Q, D), rand(be, 3, K, D)),
        r"dot_scores: the leading \(batch\) dimensions do not broadcast: q \(2,\), k \(3,\)"),
    "general_scores batch": (
        lambda be: core.general_scores(rand(be, 2, 2, Q, D), rand(be, 3, K, D),
                                       rand(be, D, D)),
        r"general_scores: the leading \(batch\) dimensions do not broadcast: "
        r"q \(2, 2\), k \(3,\)"),
    "additive_scores batch": (
        lambda be: core.additive_scores(rand(be, 2, Q, D), rand(be, 4, K, D), rand(be, 6, D),
                                        rand(be, 6, D), rand(be, 6)),
        r"additive_scores: the leading \(batch\) dimensions do not broadcast: q \(2,\), k \(4,\)"),
    "attend batch": (
        lambda be: core.attend(rand(be, 2, Q, K), rand(be, 3, K, DV)),
        r"attend: the leading \(batch\) dimensions do not broadcast: "
        r"scores \(2,\), values \(3,\)"),
    "sdpa v batch": (
        lambda be: core.scaled_dot_product_attention(rand(be, 2, Q, D), rand(be, 2, K, D),
                                                     rand(be, 3, K, DV)),
        r"scaled_dot_product_attention: the leading \(batch\) dimensions do not broadcast: "
        r"q \(2,\), k \(2,\), v \(3,\)"),
    "mha batch": (
        lambda be: call_mha(be, k=rand(be, 3, K, D_MODEL), v=rand(be, 3, K, D_MODEL)),
        r"multi_head_attention: the leading \(batch\) dimensions do not broadcast: "
        r"q \(2,\), k \(3,\)"),
    "mha num_heads does not divide d_model": (
        lambda be: call_mha(be, num_heads=3),
        r"multi_head_attention: num_heads=3 does not divide d_model=4"),
    "mha num_heads does not divide d_value": (
        lambda be: call_mha(be, params={**mha_params(be, d_value=6)}, num_heads=4),
        r"multi_head_attention: num_heads=4 does not divide d_value=6"),
    "mha missing W_o": (
        lambda be: call_mha(be, params={n: a for n, a in mha_params(be).items() if n != "W_o"}),
        r"multi_head_attention: params is missing \['W_o'\]"),
    "mha missing W_q W_k": (
        lambda be: call_mha(be, params={"W_v": rand(be, 4, 4), "W_o": rand(be, 4, 4)}),
        r"multi_head_attention: params is missing \['W_q', 'W_k'\]"),
    "mha unknown key": (
        lambda be: call_mha(be, params={**mha_params(be), "W_x": rand(be, 4, 4)}),
        r"multi_head_attention: params has unknown entries \['W_x'\]"),
    "mha unknown bias name": (
        lambda be: call_mha(be, params={**mha_params(be), "bias_q": rand(be, 4)}),
        r"multi_head_attention: params has unknown entries \['bias_q'\]"),
    "mha b_q size": (
        lambda be: call_mha(be, params={**mha_params(be, bias=True), "b_q": rand(be, 3)}),
        r"multi_head_attention: b_q has 3 along axis 0 .*d_model is 4"),
    "mha b_o size": (
        lambda be: call_mha(be, params={**mha_params(be, bias=True, d_out=6), "b_o": rand(be, 5)}),
        r"multi_head_attention: b_o has 5 along axis 0 .*d_out is 6"),
    "mha b_v size": (
        lambda be: call_mha(be, params={**mha_params(be, bias=True), "b_v": rand(be, 8)}),
        r"multi_head_attention: b_v has 8 along axis 0 .*d_value is 4"),
    "mha W_q depth": (
        lambda be: call_mha(be, q=rand(be, B, Q, 3)),
        r"multi_head_attention: W_q has 4 along axis 1 .*depth of q is 3"),
    "mha W_k rows": (
        lambda be: call_mha(be, params={**mha_params(be), "W_k": rand(be, 6, D_MODEL)}),
        r"multi_head_attention: W_k has 6 along axis 0 .*d_model \(rows of W_q\) is 4"),
    "mha W_o cols": (
        lambda be: call_mha(be, params={**mha_params(be), "W_o": rand(be, 4, 6)}),
        r"multi_head_attention: W_o has 6 along axis 1 .*d_value \(rows of W_v\) is 4"),
    "mha num_heads 0": (
        lambda be: call_mha(be, num_heads=0),
        r"multi_head_attention: num_heads must be >= 1, got 0"),
    "mha num_heads negative": (
        lambda be: call_mha(be, num_heads=-2),
        r"multi_head_attention: num_heads must be >= 1, got -2"),
}


@pytest.mark.parametrize("case", list(SIZE_CASES))
def test_mismatched_sizes(backend, case):
    thunk, pattern = SIZE_CASES[case]
    with pytest.raises(ValueError, match=pattern):
        thunk(backend)


def test_mha_num_heads_not_an_int(backend):
    # A wrong *type* is a TypeError, as for sequence_mask's max_len and the axis of
    # logsumexp; 0 or a negative int is a ValueError (test_mismatched_sizes).
    for num_heads in (2.0, "2", None, True):
        with pytest.raises(TypeError, match=r"multi_head_attention: num_heads must be .*int"):
            call_mha(backend, num_heads=num_heads)


def test_mha_num_heads_numpy_integer_accepted(backend):
    # Like sequence_mask's max_len (numbers.Integral), a NumPy integer is an int.
    context, weights = call_mha(backend, num_heads=np.int64(H))
    assert tuple(weights.shape) == (B, H, Q, K)


def test_mha_required_param_none(backend):
    for name in ("W_q", "W_o"):
        with pytest.raises((TypeError, ValueError), match=rf"multi_head_attention: .*{name}"):
            call_mha(backend, params={**mha_params(backend), name: None})


def test_mha_params_not_a_mapping(backend):
    for params in (None, [1.0], "W_q", tuple(mha_params(backend).values())):
        with pytest.raises(TypeError, match=r"multi_head_attention: params must be a mapping"):
            core.multi_head_attention(params, rand(backend, B, Q, D_MODEL),
                                      rand(backend, B, K, D_MODEL),
                                      rand(backend, B, K, D_MODEL), num_heads=H)


# ------------------------------------------------------------ non-floating arrays

NON_FLOAT_CASES = {
    "masked_softmax scores": (
        lambda be, i: core.masked_softmax(i(B, Q, K)), r"masked_softmax: scores"),
    "logsumexp x": (lambda be, i: core.logsumexp(i(B, K)), r"logsumexp: x"),
    "log_softmax x": (lambda be, i: core.log_softmax(i(B, K)), r"log_softmax: x"),
    "dot_scores q": (lambda be, i: core.dot_scores(i(B, Q, D), rand(be, B, K, D)),
                     r"dot_scores: q"),
    "dot_scores k": (lambda be, i: core.dot_scores(rand(be, B, Q, D), i(B, K, D)),
                     r"dot_scores: k"),
    "general_scores W": (
        lambda be, i: core.general_scores(rand(be, B, Q, D), rand(be, B, K, D), i(D, D)),
        r"general_scores: W"),
    "additive_scores v": (
        lambda be, i: core.additive_scores(rand(be, B, Q, D), rand(be, B, K, D),
                                           rand(be, 6, D), rand(be, 6, D), i(6)),
        r"additive_scores: v"),
    "additive_scores W_k": (
        lambda be, i: core.additive_scores(rand(be, B, Q, D), rand(be, B, K, D),
                                           rand(be, 6, D), i(6, D), rand(be, 6)),
        r"additive_scores: W_k"),
    "attend scores": (lambda be, i: core.attend(i(B, Q, K), rand(be, B, K, DV)),
                      r"attend: scores"),
    "attend values": (lambda be, i: core.attend(rand(be, B, Q, K), i(B, K, DV)),
                      r"attend: values"),
    "sdpa k": (lambda be, i: core.scaled_dot_product_attention(
        rand(be, B, Q, D), i(B, K, D), rand(be, B, K, DV)), r"scaled_dot_product_attention: k"),
    "sdpa v": (lambda be, i: core.scaled_dot_product_attention(
        rand(be, B, Q, D), rand(be, B, K, D), i(B, K, DV)), r"scaled_dot_product_attention: v"),
    "mha q": (lambda be, i: call_mha(be, q=i(B, Q, D_MODEL)), r"multi_head_attention: q"),
    "mha W_q": (lambda be, i: call_mha(be, params={**mha_params(be), "W_q": i(D_MODEL, D_MODEL)}),
                r"multi_head_attention: W_q"),
    "mha b_o": (lambda be, i: call_mha(be, params={**mha_params(be, bias=True), "b_o": i(D_MODEL)}),
                r"multi_head_attention: b_o"),
}


@pytest.mark.parametrize("case", list(NON_FLOAT_CASES))
def test_non_floating_input(backend, case):
    thunk, prefix = NON_FLOAT_CASES[case]
    for dtype in ("int64", "int32", "bool"):
        def make(*shape):
            return backend.asarray(np.ones(shape, dtype=np.int64), dtype=dtype)

        with pytest.raises(TypeError,
                           match=rf"{prefix} must have a real floating dtype, got \S*{dtype}"):
            thunk(backend, make)


# --------------------------------------------------------------- mixed float dtypes

MIXED_CASES = {
    "dot_scores": (lambda be, f32: core.dot_scores(f32(B, Q, D), rand(be, B, K, D)),
                   r"dot_scores: q is \S*float32 but k is \S*float64"),
    "general_scores W": (
        lambda be, f32: core.general_scores(rand(be, B, Q, D), rand(be, B, K, D), f32(D, D)),
        r"general_scores: q is \S*float64 but W is \S*float32"),
    "additive_scores v": (
        lambda be, f32: core.additive_scores(rand(be, B, Q, D), rand(be, B, K, D),
                                             rand(be, 6, D), rand(be, 6, D), f32(6)),
        r"additive_scores: q is \S*float64 but v is \S*float32"),
    "attend": (lambda be, f32: core.attend(f32(B, Q, K), rand(be, B, K, DV)),
               r"attend: scores is \S*float32 but values is \S*float64"),
    "sdpa k": (lambda be, f32: core.scaled_dot_product_attention(
        f32(B, Q, D), rand(be, B, K, D), f32(B, K, DV)),
        r"scaled_dot_product_attention: q is \S*float32 but k is \S*float64"),
    "sdpa v": (lambda be, f32: core.scaled_dot_product_attention(
        rand(be, B, Q, D), rand(be, B, K, D), f32(B, K, DV)),
        r"scaled_dot_product_attention: q is \S*float64 but v is \S*float32"),
    "mha W_o": (lambda be, f32: call_mha(be, params={**mha_params(be), "W_o": f32(D_MODEL, D_MODEL)}),
                r"multi_head_attention: q is \S*float64 but W_o is \S*float32"),
    "mha k": (lambda be, f32: call_mha(be, k=f32(B, K, D_MODEL)),
              r"multi_head_attention: q is \S*float64 but k is \S*float32"),
}


@pytest.mark.parametrize("case", list(MIXED_CASES))
def test_mixed_float_dtypes(backend, case):
    thunk, pattern = MIXED_CASES[case]

    def f32(*shape):
        return rand(backend, *shape, seed=3, dtype="float32")

    with pytest.raises(TypeError, match=pattern):
        thunk(backend, f32)


# -------------------------------------------------------------------- sequence_mask


def test_sequence_mask_lengths_not_integer(backend):
    for dtype in ("float64", "float32", "bool"):
        lengths = backend.asarray(np.array([1, 0]), dtype=dtype)
        with pytest.raises(TypeError, match=rf"sequence_mask: lengths must have an integer "
                                            rf"dtype, got \S*{dtype}"):
            core.sequence_mask(lengths, 3)


def test_sequence_mask_max_len_negative(backend):
    for max_len in (-1, -5):
        with pytest.raises(ValueError, match=rf"sequence_mask: max_len must be >= 0, "
                                             rf"got {max_len}"):
            core.sequence_mask(ints(backend, [0, 0]), max_len)


def test_sequence_mask_max_len_not_int(backend):
    for max_len in (3.0, "3", True, None):
        with pytest.raises(TypeError, match=rf"sequence_mask: max_len must be an int, "
                                            rf"got {type(max_len).__name__}"):
            core.sequence_mask(ints(backend, [1, 2]), max_len)


def test_sequence_mask_length_above_max_len(backend):
    with pytest.raises(ValueError, match=r"sequence_mask: lengths must be <= max_len = 3\b.*"
                                         r"got lengths\[1\] = 5"):
        core.sequence_mask(ints(backend, [3, 5, 4]), 3)


def test_sequence_mask_bound_is_called_max_len(backend):
    # The bound of sequence_mask comes from max_len, not from a number of keys.
    with pytest.raises(ValueError) as info:
        core.sequence_mask(ints(backend, [3, 5]), 3)
    assert "max_len" in str(info.value), str(info.value)


@pytest.mark.parametrize("lengths, where", [([2, -1], r"lengths\[1\] = -1"),
                                            ([[0, 1], [-2, 3]], r"lengths\[1, 0\] = -2"),
                                            (-1, r"lengths = -1")], ids=["1-d", "2-d", "0-d"])
def test_sequence_mask_negative_length(backend, lengths, where):
    with pytest.raises(ValueError, match=rf"sequence_mask: lengths must be >= 0, got {where}"):
        core.sequence_mask(ints(backend, lengths), 3)


def test_sequence_mask_lengths_list(backend):
    with pytest.raises(TypeError, match=r"sequence_mask: lengths must be an array"):
        core.sequence_mask([1, 2], 3)


# ---------------------------------------------------------- logsumexp / log_softmax

REDUCTIONS = {"logsumexp": core.logsumexp, "log_softmax": core.log_softmax}


@pytest.mark.parametrize("fname", list(REDUCTIONS))
def test_reduction_non_floating(backend, fname):
    for dtype in ("int64", "int32", "bool"):
        x = backend.asarray(np.ones((2, 3)), dtype=dtype)
        with pytest.raises(TypeError, match=rf"{fname}: x must have a real floating dtype, "
                                            rf"got \S*{dtype}"):
            REDUCTIONS[fname](x)


@pytest.mark.parametrize("fname", list(REDUCTIONS))
def test_reduction_axis_out_of_range(backend, fname):
    for shape, axis in (((2, 3), 2), ((2, 3), -3), ((4,), 1), ((), 0), ((), -1)):
        x = backend.asarray(np.ones(shape))
        with pytest.raises(ValueError, match=rf"{fname}: axis {axis} is out of range for an "
                                             rf"array of {len(shape)} dimensions"):
            REDUCTIONS[fname](x, axis=axis)


@pytest.mark.parametrize("fname", list(REDUCTIONS))
def test_reduction_axis_not_int(backend, fname):
    x = backend.asarray(np.ones((2, 3)))
    for axis in (1.0, "0", None, True, (0, 1)):
        with pytest.raises(TypeError, match=rf"{fname}: axis must be an int, "
                                            rf"got {type(axis).__name__}"):
            REDUCTIONS[fname](x, axis=axis)


# ------------------------------------------------------- lists where arrays belong

LIST_CASES = {
    "masked_softmax scores": (lambda be: core.masked_softmax([[1.0]]), "masked_softmax: scores"),
    "masked_softmax scores float": (lambda be: core.masked_softmax(1.0), "masked_softmax: scores"),
    "masked_softmax mask": (
        lambda be: core.masked_softmax(rand(be, B, Q, K), mask=[[True] * K]),
        "masked_softmax: mask"),
    "logsumexp x": (lambda be: core.logsumexp([1.0, 2.0]), "logsumexp: x"),
    "log_softmax x": (lambda be: core.log_softmax([1.0, 2.0]), "log_softmax: x"),
    "sequence_mask lengths": (lambda be: core.sequence_mask([1, 2], 3), "sequence_mask: lengths"),
    "dot_scores q": (lambda be: core.dot_scores([[1.0] * D], rand(be, K, D)), "dot_scores: q"),
    "general_scores W": (
        lambda be: core.general_scores(rand(be, Q, D), rand(be, K, D), [[1.0] * D] * D),
        "general_scores: W"),
    "additive_scores v": (
        lambda be: core.additive_scores(rand(be, Q, D), rand(be, K, D), rand(be, 6, D),
                                        rand(be, 6, D), [1.0] * 6), "additive_scores: v"),
    "attend values": (lambda be: core.attend(rand(be, B, Q, K), [[1.0] * DV] * K),
                      "attend: values"),
    "sdpa k": (lambda be: core.scaled_dot_product_attention(
        rand(be, Q, D), [[1.0] * D] * K, rand(be, K, DV)), "scaled_dot_product_attention: k"),
    "mha q": (lambda be: call_mha(be, q=[[1.0] * D_MODEL] * Q), "multi_head_attention: q"),
    "mha W_q": (lambda be: call_mha(be, params={**mha_params(be), "W_q": [[1.0] * 4] * 4}),
                "multi_head_attention: W_q"),
}


@pytest.mark.parametrize("case", list(LIST_CASES))
def test_python_list_instead_of_array(backend, case):
    thunk, prefix = LIST_CASES[case]
    with pytest.raises(TypeError, match=rf"{prefix} must be an array \(numpy, jax, torch or "
                                        r"array_api_strict\), got (list|float)"):
        thunk(backend)
