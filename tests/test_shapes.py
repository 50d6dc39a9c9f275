"""The unknown-size idioms (:mod:`xpseq.core.shapes`): each one on NumPy values against the
plain operation it stands for, and on ndonnx arguments (unknown sizes) recorded into a
graph that onnxruntime runs to the same values."""

from __future__ import annotations

import numpy as np
import pytest

from xpseq.core import shapes

ndonnx = pytest.importorskip("ndonnx")
ort = pytest.importorskip("onnxruntime")

import array_api_compat.numpy as xp_np  # noqa: E402


def run(inputs: dict, outputs: dict, values: dict) -> dict:
    """Build a graph from ndonnx ``inputs`` (arguments) to ``outputs`` and run it on
    ``values`` with onnxruntime."""
    model = ndonnx.build(inputs, outputs)
    session = ort.InferenceSession(model.SerializeToString())
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, values)))


def test_the_shape_predicates():
    assert shapes.unknown((None, 3, None)) == 2 and shapes.unknown((2, 3)) == 0
    assert shapes.known((2, 3)) and not shapes.known((None, 3))
    assert shapes.reshapable((None, 3)) and not shapes.reshapable((None, None))
    assert shapes.reshape_dims((None, 3, 4)) == (-1, 3, 4)
    with pytest.raises(ValueError, match="2 unknown sizes"):
        shapes.reshape_dims((None, None, 4))
    assert shapes.broadcastable((1, 3), (None, 3)) and shapes.broadcastable((None,), (5,))
    assert not shapes.broadcastable((2, 3), (4, 3)) and not shapes.broadcastable((1, 1, 3),
                                                                                   (3,))


def test_positions_known_and_unknown():
    like = np.zeros((2, 5))
    np.testing.assert_array_equal(shapes.positions(like, 1, xp=xp_np), np.arange(5))
    x = ndonnx.argument(shape=("batch", "n"), dtype=ndonnx.float64)
    out = run({"x": x}, {"p": shapes.positions(x, -1, xp=ndonnx)}, {"x": np.zeros((3, 7))})
    np.testing.assert_array_equal(out["p"], np.arange(7))


@pytest.mark.parametrize("lazy", [False, True])
def test_take_rows_is_indexing(lazy):
    """With two unknown sizes the rows come from a one-hot product: the same values."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((6, 4))
    ids = rng.integers(0, 6, size=(3, 5))
    want = table[ids]
    if not lazy:
        np.testing.assert_array_equal(shapes.take_rows(table, ids, xp=xp_np), want)
        return
    arg = ndonnx.argument(shape=("batch", "n"), dtype=ndonnx.int64)
    out = run({"ids": arg}, {"rows": shapes.take_rows(ndonnx.asarray(table), arg,
                                                      xp=ndonnx)}, {"ids": ids})
    np.testing.assert_allclose(out["rows"], want, rtol=0, atol=1e-15)


def test_split_and_join_last_invert_each_other_and_match_a_reshape():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 12))
    heads = np.transpose(x.reshape(2, 5, 3, 4), (0, 2, 1, 3))           # (B, h, T, d)
    split = shapes.split_last(x, 3, axis=-3, xp=xp_np)
    np.testing.assert_array_equal(split, heads)
    np.testing.assert_array_equal(shapes.join_last(split, 3, axis=1, xp=xp_np), x)
    arg = ndonnx.argument(shape=("batch", "steps", 12), dtype=ndonnx.float64)
    parts = shapes.split_last(arg, 3, axis=-3, xp=ndonnx)
    out = run({"x": arg}, {"split": parts,
                           "joined": shapes.join_last(parts, 3, axis=1, xp=ndonnx)}, {"x": x})
    np.testing.assert_array_equal(out["split"], heads)
    np.testing.assert_array_equal(out["joined"], x)


def test_zeros_rows_take_the_batch_from_an_array():
    like = np.ones((4, 2, 3), dtype=np.float32)
    z = shapes.zeros_rows(like, 5, xp=xp_np)
    assert z.shape == (4, 5) and z.dtype == np.float32 and not z.any()
    arg = ndonnx.argument(shape=("batch", "n", 3), dtype=ndonnx.float32)
    out = run({"x": arg}, {"z": shapes.zeros_rows(arg, 5, xp=ndonnx)}, {"x": like})
    assert out["z"].shape == (4, 5) and out["z"].dtype == np.float32 and not out["z"].any()
