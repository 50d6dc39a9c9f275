"""Bad input to :mod:`xpseq.core` (continued from test_errors.py): two libraries mixed,
inputs never modified, what the functions compute under ``jax.jit`` (value checks
skipped, never NaN), small integer dtypes and non-finite values in inputs.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from core_inputs import (
    D_MODEL,
    DV,
    INF,
    NAN,
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
    with_value,
)

from xpseq import backends, core

# -------------------------------------------------------------- mixing two libraries


def _two(lib1, lib2):
    for lib in {lib1, lib2}:
        pytest.importorskip(lib)
    return backends.get(lib1), backends.get(lib2)


MIX_CASES = {
    ("torch", "numpy", "masked_softmax valid_lens"): (
        lambda a, b: core.masked_softmax(rand(a, B, Q, K), ints(b, [1, 2])),
        r"masked_softmax: scores is a torch array but valid_lens is a numpy array"),
    ("jax", "numpy", "dot_scores k"): (
        lambda a, b: core.dot_scores(rand(a, B, Q, D), rand(b, B, K, D)),
        r"dot_scores: q is a jax array but k is a numpy array"),
    ("numpy", "array_api_strict", "attend values"): (
        lambda a, b: core.attend(rand(a, B, Q, K), rand(b, B, K, DV)),
        r"attend: scores is a numpy array but values is a array_api_strict array"),
    ("torch", "jax", "sdpa v"): (
        lambda a, b: core.scaled_dot_product_attention(rand(a, B, Q, D), rand(a, B, K, D),
                                                       rand(b, B, K, DV)),
        r"scaled_dot_product_attention: q is a torch array but v is a jax array"),
    ("jax", "torch", "masked_softmax mask"): (
        lambda a, b: core.masked_softmax(rand(a, B, Q, K), mask=bools(b, np.ones(K))),
        r"masked_softmax: scores is a jax array but mask is a torch array"),
    ("array_api_strict", "torch", "mha W_q"): (
        lambda a, b: call_mha(a, params={**mha_params(a), "W_q": rand(b, D_MODEL, D_MODEL)}),
        r"multi_head_attention: q is a array_api_strict array but W_q is a torch array"),
    ("numpy", "jax", "general_scores W"): (
        lambda a, b: core.general_scores(rand(a, Q, D), rand(a, K, D), rand(b, D, D)),
        r"general_scores: q is a numpy array but W is a jax array"),
    ("array_api_strict", "numpy", "attend valid_lens"): (
        lambda a, b: core.attend(rand(a, B, Q, K), rand(a, B, K, DV), valid_lens=ints(b, [1, 2])),
        r"attend: scores is a array_api_strict array but valid_lens is a numpy array"),
    ("numpy", "torch", "additive_scores v"): (
        lambda a, b: core.additive_scores(rand(a, Q, D), rand(a, K, D), rand(a, 6, D),
                                          rand(a, 6, D), rand(b, 6)),
        r"additive_scores: q is a numpy array but v is a torch array"),
}


@pytest.mark.parametrize("case", list(MIX_CASES), ids=lambda c: "-".join(c))
def test_mixed_libraries(case):
    lib1, lib2, _ = case
    a, b = _two(lib1, lib2)
    thunk, pattern = MIX_CASES[case]
    with pytest.raises(TypeError, match=pattern):
        thunk(a, b)


# ----------------------------------------------------------- inputs never modified


def _snapshot(be, tree):
    if isinstance(tree, dict):
        return {k: _snapshot(be, v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_snapshot(be, v) for v in tree]
    return np.array(be.to_numpy(tree), copy=True)


def _assert_same(be, tree, snap):
    if isinstance(tree, dict):
        assert tree.keys() == snap.keys()
        for k in tree:
            _assert_same(be, tree[k], snap[k])
    elif isinstance(tree, (list, tuple)):
        for t, s in zip(tree, snap):
            _assert_same(be, t, s)
    else:
        np.testing.assert_array_equal(be.to_numpy(tree), snap)


ALL_FUNCTIONS = ("sequence_mask", "masked_softmax", "log_softmax", "logsumexp", "dot_scores",
                 "general_scores", "additive_scores", "attend", "scaled_dot_product_attention",
                 "multi_head_attention")


def test_all_functions_covered():
    assert set(ALL_FUNCTIONS) == set(core.attention.__all__) | set(core.masking.__all__)


@pytest.mark.parametrize("fname", ALL_FUNCTIONS)
def test_inputs_not_modified(backend, fname):
    be = backend
    mask_np = np.ones((B, Q, K), dtype=bool)
    mask_np[0, :, 3] = mask_np[1, 1, 0] = False
    if fname == "sequence_mask":
        args, kwargs = [ints(be, [0, 2, 3])], {}
        call = lambda: core.sequence_mask(args[0], 3)  # noqa: E731
    elif fname in ("log_softmax", "logsumexp"):
        args, kwargs = [with_value(be, (B, K), (0, 1), -INF)], {"axis": 0}
        call = lambda: getattr(core, fname)(*args, **kwargs)  # noqa: E731
    elif fname == "dot_scores":
        args, kwargs = [rand(be, B, Q, D), rand(be, B, K, D, seed=1)], {"scale": 0.5}
        call = lambda: core.dot_scores(*args, **kwargs)  # noqa: E731
    elif fname == "general_scores":
        args, kwargs = [rand(be, B, Q, D), rand(be, B, K, 3, seed=1), rand(be, D, 3, seed=2)], {}
        call = lambda: core.general_scores(*args)  # noqa: E731
    elif fname == "additive_scores":
        args, kwargs = [rand(be, B, Q, D), rand(be, B, K, 3, seed=1), rand(be, 6, D, seed=2),
                        rand(be, 6, 3, seed=3), rand(be, 6, seed=4)], {}
        call = lambda: core.additive_scores(*args)  # noqa: E731
    else:
        inputs = list(masked_inputs(fname, be))
        if fname == "multi_head_attention":
            inputs[0] = mha_params(be, bias=True)
        if fname in ("masked_softmax", "attend"):
            # A NaN at a masked key must not be overwritten in place either.
            x = np.random.default_rng(0).standard_normal((B, Q, K))
            x[0, 2, 3] = NAN
            inputs[0] = be.asarray(x)
        args = inputs
        kwargs = {"mask": bools(be, mask_np), "valid_lens": ints(be, [[4, 3, 4], [2, 4, 1]]),
                  "empty": "error"}
        call = lambda: call_masked(fname, args, **kwargs)  # noqa: E731
    before = (_snapshot(be, args), {k: _snapshot(be, v) for k, v in kwargs.items()
                                    if be.is_array(v)})
    out = call()
    leaves = out if isinstance(out, tuple) else (out,)
    for leaf in leaves:
        if leaf is not None and fname != "sequence_mask":
            assert np.all(~np.isnan(be.to_numpy(leaf)))
    _assert_same(be, args, before[0])
    for k, snap in before[1].items():
        _assert_same(be, kwargs[k], snap)
    # A second call gives the same result: nothing the first call did leaked into the inputs.
    again = call()
    again = again if isinstance(again, tuple) else (again,)
    for x, y in zip(leaves, again):
        if x is not None:
            np.testing.assert_array_equal(be.to_numpy(x), be.to_numpy(y))


# ------------------------------------------------------------------------ jax.jit


@pytest.fixture
def jax_backend():
    jax = pytest.importorskip("jax")
    return backends.get("jax"), jax


@pytest.mark.parametrize("lens, zero_rows", [
    ([2, -1], {(1, 0), (1, 1), (1, 2)}),
    ([4, 0], {(1, 0), (1, 1), (1, 2)}),
    ([[1, 0, 2], [-3, 4, 0]], {(0, 1), (1, 0), (1, 2)}),
], ids=["negative", "zero", "2-d"])
def test_jit_masked_softmax_skips_value_checks(jax_backend, lens, zero_rows):
    be, jax = jax_backend
    scores = rand(be, B, Q, K)
    vl = ints(be, lens)
    # Eagerly these are errors ...
    with pytest.raises(ValueError, match=r"masked_softmax: (valid_lens must be >= 0|query row)"):
        core.masked_softmax(scores, vl, empty="error")
    # ... under jit the values are unknown: the row comes out all zero, never NaN.
    f = jax.jit(functools.partial(core.masked_softmax, empty="error"))
    w = f(scores, vl)
    assert_rows_zero(be, w, None, zero_rows)


@pytest.mark.parametrize("fname", ["attend", "scaled_dot_product_attention",
                                   "multi_head_attention"])
def test_jit_attention_skips_value_checks(jax_backend, fname):
    be, jax = jax_backend
    inputs = masked_inputs(fname, be)
    vl = ints(be, [[3, -1, 2], [0, 4, 1]])
    with pytest.raises(ValueError, match=rf"{fname}: valid_lens must be >= 0"):
        call_masked(fname, inputs, valid_lens=vl)
    f = jax.jit(functools.partial(call_masked, fname, inputs, empty="error"))
    w, c = f(vl)
    assert_rows_zero(be, w, c, {(0, 1), (1, 0)})


def test_jit_masked_softmax_nonfinite_masked_key_still_zero(jax_backend):
    be, jax = jax_backend
    scores = with_value(be, (B, Q, K), (0, 1, 3), NAN)
    w = jax.jit(functools.partial(core.masked_softmax, empty="error"))(scores, ints(be, [3, 4]))
    w = be.to_numpy(w)
    assert np.all(np.isfinite(w)) and w[0, 1, 3] == 0


def test_jit_sequence_mask_out_of_range(jax_backend):
    be, jax = jax_backend
    lengths = ints(be, [-1, 2, 5])
    with pytest.raises(ValueError, match=r"sequence_mask: lengths must be >= 0"):
        core.sequence_mask(lengths, 3)
    m = be.to_numpy(jax.jit(functools.partial(core.sequence_mask, max_len=3))(lengths))
    np.testing.assert_array_equal(m, [[False] * 3, [True, True, False], [True] * 3])


JIT_STRUCTURAL = {
    "valid_lens (batch+1,)": (
        lambda be: (rand(be, B, Q, K), ints(be, [1, 2, 3])), {},
        ValueError, r"masked_softmax: valid_lens has shape \(3,\) but expected \(batch,\)"),
    "valid_lens 3-d": (
        lambda be: (rand(be, B, Q, K), ints(be, np.ones((B, Q, 1), dtype=np.int64))), {},
        ValueError, r"masked_softmax: valid_lens must have shape \(batch,\) or"),
    "valid_lens float": (
        lambda be: (rand(be, B, Q, K), be.asarray([1.0, 2.0])), {},
        TypeError, r"masked_softmax: valid_lens must have an integer dtype"),
    "valid_lens bool": (
        lambda be: (rand(be, B, Q, K), bools(be, [True, False])), {},
        TypeError, r"masked_softmax: valid_lens must have an integer dtype"),
    "scores int": (
        lambda be: (ints(be, np.ones((B, Q, K), dtype=np.int64)), ints(be, [1, 2])), {},
        TypeError, r"masked_softmax: scores must have a real floating dtype"),
    "empty unknown": (
        lambda be: (rand(be, B, Q, K), ints(be, [1, 2])), {"empty": "ignore"},
        ValueError, r"masked_softmax: empty must be 'error' or 'zero'"),
}


@pytest.mark.parametrize("case", list(JIT_STRUCTURAL))
def test_jit_structural_errors_still_raise(jax_backend, case):
    be, jax = jax_backend
    make, kwargs, exc, pattern = JIT_STRUCTURAL[case]
    f = jax.jit(functools.partial(core.masked_softmax, **kwargs))
    with pytest.raises(exc, match=pattern):
        f(*make(be))


@pytest.mark.parametrize("case", ["mask int", "mask shape", "mask 5-d"])
def test_jit_mask_structural_errors_still_raise(jax_backend, case):
    be, jax = jax_backend
    mask, exc, pattern = {
        "mask int": (ints(be, np.ones((B, Q, K), dtype=np.int64)), TypeError,
                     r"masked_softmax: mask must have a bool dtype"),
        "mask shape": (bools(be, np.ones((B, Q, K + 1))), ValueError,
                       r"masked_softmax: mask of shape \(2, 3, 5\) does not broadcast"),
        "mask 5-d": (bools(be, np.ones((1, 1, B, Q, K))), ValueError,
                     r"masked_softmax: mask of shape \(1, 1, 2, 3, 4\) does not broadcast"),
    }[case]
    f = jax.jit(lambda s, m: core.masked_softmax(s, mask=m))
    with pytest.raises(exc, match=pattern):
        f(rand(be, B, Q, K), mask)


def test_jit_sequence_mask_structural_errors_still_raise(jax_backend):
    be, jax = jax_backend
    with pytest.raises(TypeError, match=r"sequence_mask: lengths must have an integer dtype"):
        jax.jit(functools.partial(core.sequence_mask, max_len=3))(be.asarray([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"sequence_mask: max_len must be >= 0"):
        jax.jit(functools.partial(core.sequence_mask, max_len=-1))(ints(be, [1, 2]))


def test_no_queries_and_no_keys_is_not_an_empty_row(backend):
    # Shape (2, 0, 0) has no query row at all, so there is no row without a valid key.
    out = core.masked_softmax(backend.asarray(np.zeros((2, 0, 0))))
    assert tuple(out.shape) == (2, 0, 0)
    with pytest.raises(ValueError, match=r"masked_softmax: scores has no keys"):
        core.masked_softmax(backend.asarray(np.zeros((2, 1, 0))))


# ---------------------------------------- small integer dtypes, NaN and infinity in inputs


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
def test_small_integer_lengths_give_the_right_mask(backend, dtype):
    """Lengths of any integer dtype count correctly past that dtype's range (``arange`` in
    int8 would wrap at 127), through sequence_mask, masked_softmax and run_sequence."""
    lengths = backend.asarray(np.array([100, 3], dtype=dtype))
    mask = backend.to_numpy(core.sequence_mask(lengths, 300))
    assert mask.shape == (2, 300) and mask.sum(axis=1).tolist() == [100, 3]
    weights = backend.to_numpy(core.masked_softmax(rand(backend, 2, 1, 300), lengths))
    assert (weights[0, 0, 100:] == 0).all() and (weights[0, 0, :100] > 0).all()
    with pytest.raises(ValueError, match=r"lengths must be <= the number of steps"):
        core.run_sequence({n: rand(backend, *s, seed=i) for i, (n, s) in enumerate(
            core.recurrent.cell_param_shapes("gru", 2, 3).items())},
            rand(backend, 2, 50, 2), lengths, cell="gru")


def _finite_calls(be):
    """One call per public function that takes floating arrays, with ``bad`` put in one
    argument: ``(name, function of bad)``."""
    x, W, b = rand(be, 2, 3), rand(be, 4, 3, seed=1), rand(be, 4, seed=2)
    gru = {n: rand(be, *s, seed=i) for i, (n, s) in enumerate(
        core.recurrent.cell_param_shapes("gru", 3, 2).items())}
    lstm = {n: rand(be, *s, seed=i) for i, (n, s) in enumerate(
        core.recurrent.cell_param_shapes("lstm", 3, 2).items())}
    h = rand(be, 2, 2, seed=5)
    lengths = ints(be, [2, 1])
    keep = bools(be, [[True, False, True], [True, True, True]])
    q, k, v = rand(be, 2, 1, 3), rand(be, 2, 4, 3, seed=1), rand(be, 2, 4, 2, seed=2)
    return [
        ("linear x", lambda bad: core.linear(bad(x), W, b)),
        ("linear W", lambda bad: core.linear(x, bad(W), b)),
        ("linear b", lambda bad: core.linear(x, W, bad(b))),
        ("embedding E", lambda bad: core.embedding(ints(be, [0, 1]), bad(W))),
        ("dropout x", lambda bad: core.dropout(bad(x), keep, 0.5)),
        ("gru_cell x", lambda bad: core.gru_cell(gru, bad(x), h)),
        ("gru_cell h", lambda bad: core.gru_cell(gru, x, bad(h))),
        ("gru_cell W_hh", lambda bad: core.gru_cell(dict(gru, W_hh=bad(gru["W_hh"])), x, h)),
        ("lstm_cell c", lambda bad: core.lstm_cell(lstm, x, (h, bad(h)))),
        ("run_sequence xs", lambda bad: core.run_sequence(
            gru, bad(rand(be, 2, 2, 3)), lengths, cell="gru")),
        ("run_sequence b_ih", lambda bad: core.run_sequence(
            dict(gru, b_ih=bad(gru["b_ih"])), rand(be, 2, 2, 3), lengths, cell="gru")),
        ("cross_entropy logits", lambda bad: core.cross_entropy(bad(x), ints(be, [0, 2]))),
        ("dot_scores q", lambda bad: core.dot_scores(bad(q), k)),
        ("attend values", lambda bad: core.attend(rand(be, 2, 1, 4), bad(v))),
        ("sdpa k", lambda bad: core.scaled_dot_product_attention(q, bad(k), v)),
    ]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_every_public_function_refuses_nan_and_infinity(backend, value):
    def bad(a):
        return with_value(backend, tuple(a.shape), (0,) * a.ndim, value)

    for name, call in _finite_calls(backend):
        with pytest.raises(ValueError, match=r"must be finite|must not contain NaN"):
            call(bad)
            pytest.fail(f"{name} accepted {value}")


def test_infinity_is_accepted_only_where_it_means_something(backend):
    """``sigmoid(±inf)`` is 0 / 1 and ``-inf`` is log 0 in ``logsumexp`` /
    ``log_softmax``; NaN (and ``+inf`` in a log-probability) is refused there too."""
    xs = backend.asarray([-math.inf, 0.0, math.inf])
    np.testing.assert_array_equal(backend.to_numpy(core.sigmoid(xs)), [0.0, 0.5, 1.0])
    logp = backend.asarray([-math.inf, 0.0, 0.0])
    np.testing.assert_allclose(backend.to_numpy(core.log_softmax(logp)),
                               [-math.inf, math.log(0.5), math.log(0.5)])
    assert float(backend.to_numpy(core.logsumexp(logp))) == pytest.approx(math.log(2.0))
    for fn in (core.sigmoid, core.log_softmax, core.logsumexp):
        with pytest.raises(ValueError, match="must not contain NaN"):
            fn(backend.asarray([0.0, math.nan]))
    for fn in (core.log_softmax, core.logsumexp):
        with pytest.raises(ValueError, match=r"must not contain NaN or \+inf"):
            fn(backend.asarray([0.0, math.inf]))
