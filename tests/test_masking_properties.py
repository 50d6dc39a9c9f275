"""Properties of masked_softmax that hold for any scores and any mask, on every backend."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import xpseq.core as C

# The backend fixture is stateless, so reusing it across examples is safe. Derandomized:
# the same examples on every run, so CI cannot fail by chance.
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

# XLA on the CPU flushes subnormal floats to zero (JAX's logsumexp([[5e-324]]) is 0.0,
# NumPy's 5e-324), so values come from the normal range only.
finite_scores = st.floats(-1e4, 1e4, allow_nan=False, allow_subnormal=False)

# A few fixed shapes: JAX compiles every eager op once per shape, so free shapes are slow.
shapes = st.sampled_from([(1, 1, 1), (1, 2, 7), (2, 3, 5), (3, 4, 2)])


@st.composite
def scores_and_mask(draw, allow_empty_rows: bool):
    shape = draw(shapes)
    scores = draw(hnp.arrays(np.float64, shape,
                             elements=finite_scores))
    mask = draw(hnp.arrays(np.bool_, shape))
    if not allow_empty_rows:
        mask[..., 0] |= ~mask.any(axis=-1)            # at least one valid key per row
    return scores, mask


@SETTINGS
@given(data=scores_and_mask(allow_empty_rows=False))
def test_rows_are_distributions_over_valid_keys(backend, data):
    scores, mask = data
    w = backend.to_numpy(C.masked_softmax(backend.asarray(scores),
                                          mask=backend.asarray(mask, dtype="bool")))
    assert np.all(np.isfinite(w))
    assert np.all(w[~mask] == 0.0)                    # exactly zero, not merely small
    assert np.all(w >= 0.0)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=0, atol=1e-12)


@SETTINGS
@given(data=scores_and_mask(allow_empty_rows=False),
       junk=st.sampled_from([math.inf, -math.inf, math.nan, 1e300, -1e300, 0.0]))
def test_masked_scores_do_not_matter(backend, data, junk):
    scores, mask = data
    dirty = np.where(mask, scores, junk)
    m = backend.asarray(mask, dtype="bool")
    clean_w = backend.to_numpy(C.masked_softmax(backend.asarray(scores), mask=m))
    dirty_w = backend.to_numpy(C.masked_softmax(backend.asarray(dirty), mask=m))
    assert np.array_equal(clean_w, dirty_w)


@SETTINGS
@given(data=scores_and_mask(allow_empty_rows=False), shift=st.floats(-1e3, 1e3))
def test_shift_invariance(backend, data, shift):
    scores, mask = data
    m = backend.asarray(mask, dtype="bool")
    w = backend.to_numpy(C.masked_softmax(backend.asarray(scores), mask=m))
    w_shift = backend.to_numpy(C.masked_softmax(backend.asarray(scores + shift), mask=m))
    np.testing.assert_allclose(w_shift, w, rtol=0, atol=1e-9)


@SETTINGS
@given(data=scores_and_mask(allow_empty_rows=True))
def test_empty_zero_policy(backend, data):
    scores, mask = data
    w = backend.to_numpy(C.masked_softmax(backend.asarray(scores),
                                          mask=backend.asarray(mask, dtype="bool"),
                                          empty="zero"))
    empty = ~mask.any(axis=-1)
    assert np.all(w[empty] == 0.0)
    assert np.all(np.isfinite(w))
    if (~empty).any():
        np.testing.assert_allclose(w[~empty].sum(axis=-1), 1.0, rtol=0, atol=1e-12)


@SETTINGS
@given(data=scores_and_mask(allow_empty_rows=False))
def test_valid_lens_equals_prefix_mask(backend, data):
    """valid_lens of shape (batch, queries) is the mask of the leading keys."""
    scores, mask = data
    lens = mask.sum(axis=-1)                              # (batch, queries), >= 1
    prefix = np.arange(scores.shape[-1]) < lens[..., None]
    by_lens = C.masked_softmax(backend.asarray(scores), backend.asarray(lens))
    by_mask = C.masked_softmax(backend.asarray(scores), mask=backend.asarray(prefix, dtype="bool"))
    assert np.array_equal(backend.to_numpy(by_lens), backend.to_numpy(by_mask))


@SETTINGS
@given(x=hnp.arrays(np.float64, st.sampled_from([(1, 1), (2, 5), (3, 2)]),
                    elements=finite_scores))
def test_log_softmax_is_log_of_softmax(backend, x):
    ls = backend.to_numpy(C.log_softmax(backend.asarray(x)))
    lse = backend.to_numpy(C.logsumexp(backend.asarray(x)))
    np.testing.assert_allclose(np.exp(ls).sum(axis=-1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ls, x - lse[:, None], rtol=0, atol=1e-9)
    assert np.all(lse >= x.max(axis=-1))                  # logsumexp is at least the max
    assert np.all(lse <= x.max(axis=-1) + math.log(x.shape[-1]) + 1e-9)
