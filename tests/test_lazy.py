"""The core functions on a lazy array library: ndonnx records an ONNX graph from
``ndonnx.argument`` inputs whose dimensions are unknown, with the value checks skipped (no
values exist while it records) and the shape checks passing the unknown sizes; onnxruntime
then runs that graph and gives NumPy's answers for shapes the graph never saw."""

from __future__ import annotations

import numpy as np
import pytest

import xpseq.core as core
from xpseq.core import checks

ndx = pytest.importorskip("ndonnx")
ort = pytest.importorskip("onnxruntime")


def run(inputs: dict, outputs: dict, feeds: dict) -> list[np.ndarray]:
    proto = ndx.build(inputs, outputs)
    session = ort.InferenceSession(proto.SerializeToString())
    return session.run(list(outputs), feeds)


def arg(*shape: str | int, dtype=None):
    return ndx.argument(shape=shape, dtype=ndx.float64 if dtype is None else dtype)


def test_a_lazy_flag_is_not_concrete_and_a_concrete_one_is():
    assert checks.concrete(ndx.asarray(np.array(True))) is True
    lazy = arg("B") > 0.0
    assert checks.concrete(ndx.any(lazy)) is None
    with pytest.raises(ValueError, match="0-d flag"):
        checks.concrete(np.array([True, False]))


def test_broadcast_shapes_fallback_takes_unknown_sizes():
    assert checks.broadcast_shapes((None, 1, 3), (4, 3)) == (None, 4, 3)
    assert checks.broadcast_shapes((None,), (1,)) == (None,)
    assert checks.broadcast_shapes((2, 1), (1, 5)) == (2, 5) == np.broadcast_shapes((2, 1), (1, 5))
    with pytest.raises(ValueError, match="do not broadcast"):
        checks.broadcast_shapes((2,), (3,))


@pytest.mark.parametrize("how", ["mask", "valid_lens"])
def test_scaled_dot_product_attention_traced_with_unknown_sizes(how):
    q, k, v = arg("B", "T", 8), arg("B", "S", 8), arg("B", "S", 4)
    rng = np.random.default_rng(0)
    Q, K, V = rng.normal(size=(3, 5, 8)), rng.normal(size=(3, 7, 8)), rng.normal(size=(3, 7, 4))
    if how == "mask":
        m = arg("B", "T", "S", dtype=ndx.bool)
        M = rng.random((3, 5, 7)) > 0.3
        M[:, :, 0] = True
        kwargs, lazy_kwargs, feeds = {"mask": M}, {"mask": m}, {"mask": M}
    else:
        n = arg("B", dtype=ndx.int64)
        lens = np.array([7, 1, 4])
        kwargs, lazy_kwargs, feeds = {"valid_lens": lens}, {"valid_lens": n}, {"n": lens}
    context, weights = core.scaled_dot_product_attention(q, k, v, **lazy_kwargs)
    assert context.ndim == 3 and context.shape[0] is None          # unknown: recorded
    inputs = {"q": q, "k": k, "v": v, **({"mask": m} if how == "mask" else {"n": n})}
    got_c, got_w = run(inputs, {"context": context, "weights": weights},
                       {"q": Q, "k": K, "v": V, **feeds})
    want_c, want_w = core.scaled_dot_product_attention(Q, K, V, **kwargs)
    np.testing.assert_allclose(got_c, want_c, rtol=0, atol=1e-14)
    np.testing.assert_allclose(got_w, want_w, rtol=0, atol=1e-14)
    if how == "valid_lens":
        assert np.all(got_w[1, :, 1:] == 0.0)


def test_masked_softmax_traced_gives_exact_zeros_for_an_empty_row():
    s, n = arg("B", "T", "S"), arg("B", dtype=ndx.int64)
    out = core.masked_softmax(s, valid_lens=n, empty="zero")
    S = np.random.default_rng(1).normal(size=(2, 3, 4))
    (got,) = run({"s": s, "n": n}, {"out": out}, {"s": S, "n": np.array([0, 3])})
    np.testing.assert_array_equal(got[0], 0.0)
    np.testing.assert_allclose(got, core.masked_softmax(S, valid_lens=np.array([0, 3]),
                                                        empty="zero"), rtol=0, atol=1e-15)
