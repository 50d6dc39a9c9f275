"""Two worked attention examples, on every backend (``scripts/attention_examples.py``).

Example 1: one query, three real keys and one padded key; the reference weights and
context, an independent scalar computation, the rejected empty row and the finite
``-1e6`` sentinel counterexample. Example 2: six checks of scaled dot-product attention
with a boolean mask.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import xpseq.core as C
from xpseq.testing import assert_matches

# ---------------------------------------------------------------- example 1: a padded key

PADDED_QUERY = [[[1.0]]]                                    # (batch 1, 1 query, depth 1)
PADDED_KEYS = [[[1.0], [0.0], [1.0], [2.0]]]                # 3 real keys + 1 padded
PADDED_VALUES = [[[1.0, 0.0], [0.0, 2.0], [2.0, 1.0], [100.0, 100.0]]]
PADDED_WEIGHTS = [0.422319, 0.155362, 0.422319, 0.0]        # published, 6 decimals
PADDED_CONTEXT = [1.266956, 0.733044]


def scalar_reference_padded_key() -> tuple[list[float], list[float]]:
    """Plain-Python scalar computation of example 1's weights and context."""
    scores = [1.0 * 1.0, 1.0 * 0.0, 1.0 * 1.0]               # q.k over the 3 valid keys, d = 1
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = math.fsum(exps)
    weights = [e / total for e in exps] + [0.0]
    values = PADDED_VALUES[0]
    context = [math.fsum(weights[j] * values[j][d] for j in range(3)) for d in range(2)]
    return weights, context


def padded_key_inputs(be):
    return be.asarray(PADDED_QUERY), be.asarray(PADDED_KEYS), be.asarray(PADDED_VALUES)


def test_padded_key_published_numbers(backend):
    q, k, v = padded_key_inputs(backend)
    context, weights = C.scaled_dot_product_attention(q, k, v, valid_lens=backend.asarray([3]))
    assert_matches(backend, weights, np.array([[PADDED_WEIGHTS]]), rtol=0, atol=1e-6)
    assert_matches(backend, context, np.array([[PADDED_CONTEXT]]), rtol=0, atol=1e-6)


def test_padded_key_equals_scalar_reference(backend):
    q, k, v = padded_key_inputs(backend)
    context, weights = C.scaled_dot_product_attention(q, k, v, valid_lens=backend.asarray([3]))
    ref_w, ref_c = scalar_reference_padded_key()
    assert_matches(backend, weights, np.array([[ref_w]]), rtol=0, atol=1e-14)
    assert_matches(backend, context, np.array([[ref_c]]), rtol=0, atol=1e-14)
    w = backend.to_numpy(weights)
    assert w[0, 0, 3] == 0.0                                  # the padded key: exactly zero
    assert abs(float(w.sum()) - 1.0) < 1e-14


def test_padded_key_through_masked_softmax_and_attend(backend):
    """The same numbers from the building blocks: dot scores, masked softmax, attend."""
    q, k, v = padded_key_inputs(backend)
    scores = C.dot_scores(q, k)
    weights = C.masked_softmax(scores, backend.asarray([3]))
    context, weights2 = C.attend(scores, v, valid_lens=[3])
    ref_w, ref_c = scalar_reference_padded_key()
    assert_matches(backend, weights, np.array([[ref_w]]), rtol=0, atol=1e-14)
    assert_matches(backend, weights2, np.array([[ref_w]]), rtol=0, atol=1e-14)
    assert_matches(backend, context, np.array([[ref_c]]), rtol=0, atol=1e-14)


def test_padded_key_empty_row_rejected(backend):
    q, k, v = padded_key_inputs(backend)
    with pytest.raises(ValueError, match=r"query row \(0, 0\).*no valid key"):
        C.scaled_dot_product_attention(q, k, v, valid_lens=backend.asarray([0]))
    with pytest.raises(ValueError, match=r"no valid key"):
        C.masked_softmax(C.dot_scores(q, k), backend.asarray([0]), empty="error")


def test_padded_key_finite_sentinel_counterexample(backend):
    """A -1e6 fill makes an all-masked row uniform; xpseq gives exact zeros."""
    xp = backend.xp
    scores = backend.asarray([[[0.3, -1.2, 2.5]]])
    nothing = backend.asarray([[[False, False, False]]], dtype="bool")
    sentinel = C.masked_softmax(xp.where(nothing, scores, -1e6))   # plain softmax of fills
    assert_matches(backend, sentinel, np.full((1, 1, 3), 1 / 3), rtol=0, atol=1e-15)
    ours = C.masked_softmax(scores, mask=nothing, empty="zero")
    assert np.array_equal(backend.to_numpy(ours), np.zeros((1, 1, 3)))


# -------------------------------------------------------- example 2: a boolean mask

MASKED_KEYS = [[1.0, 0.0], [0.0, 1.0]]
MASKED_VALUES = [10.0, 20.0]
MASKED_CASES = [
    # query, allowed mask, values, expected output
    ([0.0, 0.0], [True, True], MASKED_VALUES, 15.0),
    ([1.0, 0.0], [True, False], MASKED_VALUES, 10.0),
    ([1.0, 0.0], [False, False], MASKED_VALUES, 0.0),       # all masked, empty="zero"
    ([1000.0, 0.0], [True, True], MASKED_VALUES, 10.0),      # stable at large scores
    ([1.0, 0.0], [True, False], [10.0, 999.0], 10.0),          # masked value excluded
]


@pytest.mark.parametrize("query, allowed, values, expected", MASKED_CASES)
def test_masked_checks_checks(backend, query, allowed, values, expected):
    q = backend.asarray([query])                              # (1 query, depth 2)
    k = backend.asarray(MASKED_KEYS)                         # (2 keys, depth 2)
    v = backend.asarray([[x] for x in values])                # (2 keys, 1)
    mask = backend.asarray([allowed], dtype="bool")
    context, weights = C.scaled_dot_product_attention(q, k, v, mask=mask, empty="zero")
    assert_matches(backend, context, np.array([[expected]]), rtol=0, atol=1e-10)
    assert np.all(backend.to_numpy(weights)[~np.array([allowed])] == 0.0)


def test_masked_checks_empty_query_rejected(backend):
    q = backend.asarray(np.zeros((1, 0)))                     # a query of depth 0
    k = backend.asarray(MASKED_KEYS)
    v = backend.asarray([[10.0], [20.0]])
    with pytest.raises(ValueError, match=r"q must have depth >= 1"):
        C.scaled_dot_product_attention(q, k, v, mask=backend.asarray([[True, True]],
                                                                     dtype="bool"))


def test_masked_checks_non_finite_rejected(backend):
    k = backend.asarray(MASKED_KEYS)
    v = backend.asarray([[10.0], [20.0]])
    with pytest.raises(ValueError, match=r"q must be finite"):
        C.scaled_dot_product_attention(backend.asarray([[math.nan, 0.0]]), k, v)
    with pytest.raises(ValueError, match=r"v must be finite"):
        C.scaled_dot_product_attention(backend.asarray([[1.0, 0.0]]), k,
                                       backend.asarray([[10.0], [math.inf]]))
