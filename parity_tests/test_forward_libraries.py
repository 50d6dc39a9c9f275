"""Model parity on the libraries that only run forward (ndonnx, dask.array): the RNN in
every configuration and the Transformer in three variants, forward and search, against
NumPy in float64 (the tiny models of rnn_cases.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from rnn_cases import (
    CONFIGS,
    DROPOUT_IDS,
    IDS,
    NP,
    ONNX_CONFIGS,
    PARAMS,
    SRC,
    SRC_LEN,
    evaluate,
    reference,
)

from xpseq import backends
from xpseq.testing import (
    FORWARD_ATOL,
    FORWARD_RTOL,
)

# -------------------------------------------- a library that is not a training backend


#: The configuration dask runs in the quick tier (1 to 2 s); the others are slow tests.
DASK_QUICK = ("additive-lstm-bahdanau",)


@pytest.mark.forward(quick=("dask",))
@pytest.mark.parametrize("cid", [c if c in DASK_QUICK else pytest.param(c, marks=pytest.mark.slow)
                                 for c in IDS + DROPOUT_IDS])
def test_forward_on_forward_libraries_matches_numpy(forward_backend, cid):
    """Every configuration's forward pass and loss on the libraries that only run forward,
    against NumPy (float64): ndonnx (``backends.get("onnx")``), eager: recorded and
    computed as an ONNX graph, 10-25 s a configuration (the quick tier traces a model
    through ndonnx in tests/test_export.py); dask.array (``backends.get("dask")``, dropout
    included): built as a task graph and computed, 1 to 2 s each."""
    if forward_backend.name == "onnx" and cid not in ONNX_CONFIGS:
        pytest.skip("XPSEQ_ONNX_SUBSET=1: ndonnx runs a covering subset of the configurations")
    out = evaluate(forward_backend, cid)
    ref = reference(cid)
    np.testing.assert_allclose(out.logits, ref.logits, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    if ref.weights is not None:
        np.testing.assert_allclose(out.weights, ref.weights, rtol=FORWARD_RTOL,
                                   atol=FORWARD_ATOL)
    np.testing.assert_allclose(out.loss, ref.loss, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)


@pytest.mark.parametrize(("cid", "beam"), [
    ("scaled_dot-gru-luong", 1),       # greedy; sentences of 1, 3, 1 tokens: it narrows
    pytest.param("general-gru-bahdanau-nofeed", 3, marks=pytest.mark.slow)])    # 15 to 25 s
def test_search_on_dask_matches_numpy(cid, beam):
    """Greedy and beam search on dask.array give NumPy's tokens and lengths, and its scores
    and attention to the forward tolerance (the eager loop computes the finished flags of
    each step)."""
    pytest.importorskip("dask.array")
    from xpseq.search.decode import SearchOptions, search

    options = SearchOptions() if beam == 1 else SearchOptions(method="beam", k=beam, n_best=2)
    be = backends.get("dask")
    want = search(PARAMS[cid], CONFIGS[cid], SRC, SRC_LEN, NP, options)
    got = search(be.asarray_tree(PARAMS[cid]), CONFIGS[cid], SRC, SRC_LEN, be, options)
    assert want.attention is not None and len(set(want.lengths.ravel().tolist())) > 1
    for name in want._fields:
        w, g = getattr(want, name), getattr(got, name)
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape, name
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=FORWARD_RTOL, atol=FORWARD_ATOL, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


# ------------------------------------- the Transformer on the libraries that only run forward

#: A Transformer of two layers each side (a layer's cache feeds the next), in the three
#: variants of its options: pre-LN with sinusoidal positions; post-LN with learned ones;
#: shared and tied embeddings with GELU.
TRANSFORMER_VARIANTS = {
    "pre": {},
    "post-learned": {"norm": "post", "positions": "learned", "max_len": 16},
    "shared-tied": {"share_embeddings": True, "tie_output": True, "tgt_vocab": 11,
                    "activation": "gelu"}}
TRANSFORMER_BATCH = {"src": np.array([[4, 5, 6, 2, 0], [7, 8, 2, 0, 0], [9, 2, 0, 0, 0]]),
                     "src_len": np.array([4, 3, 2]),
                     "tgt_in": np.array([[1, 5, 6, 7], [1, 9, 10, 0], [1, 8, 0, 0]]),
                     "tgt_out": np.array([[5, 6, 7, 2], [9, 10, 2, 0], [8, 2, 0, 0]])}


def transformer_variant(name: str) -> tuple[Any, dict[str, np.ndarray]]:
    from xpseq.models import transformer

    config = transformer.TransformerConfig(**{
        "src_vocab": 11, "tgt_vocab": 13, "d_model": 8, "heads": 2, "encoder_layers": 2,
        "decoder_layers": 2, "d_ff": 12, **TRANSFORMER_VARIANTS[name]})
    return config, transformer.init_params(config, seed=3)


def quick_only(cases: list[Any], quick: Any) -> list[Any]:
    """``cases`` as parameters, all but ``quick`` marked slow."""
    return [c if c == quick else pytest.param(*(c if isinstance(c, tuple) else (c,)),
                                              marks=pytest.mark.slow) for c in cases]


@pytest.mark.forward(quick=("dask",))
@pytest.mark.parametrize("variant", quick_only(list(TRANSFORMER_VARIANTS), "pre"))  # 1 to 4 s
def test_transformer_forward_on_forward_libraries(forward_backend, variant):
    """ndonnx (eager: each operation recorded and run by onnxruntime; 20 s a variant) and
    dask.array: the Transformer's loss and every layer's cross-attention weights equal
    NumPy float64's to the forward tolerance."""
    from xpseq.models import transformer

    config, params = transformer_variant(variant)
    be = forward_backend
    on_be, batch = be.asarray_tree(params), be.asarray_tree(TRANSFORMER_BATCH)
    args = ("src", "src_len", "tgt_in")
    np.testing.assert_allclose(
        be.to_numpy(transformer.cross_attention(on_be, config, *(batch[k] for k in args))),
        transformer.cross_attention(params, config, *(TRANSFORMER_BATCH[k] for k in args)),
        rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    np.testing.assert_allclose(float(be.to_numpy(transformer.loss(on_be, config, batch))),
                               float(transformer.loss(params, config, TRANSFORMER_BATCH)),
                               rtol=FORWARD_RTOL, atol=FORWARD_ATOL)


@pytest.mark.forward(quick=("dask",))
@pytest.mark.parametrize(("variant", "method"), quick_only(
    [("pre", "greedy"), ("post-learned", "beam"), ("pre", "beam")], ("pre", "greedy")))
def test_transformer_search_on_forward_libraries(forward_backend, variant, method):
    """Greedy and beam search of the Transformer on ndonnx and dask.array (its key/value
    cache growing step by step; four steps, as each step of these libraries costs a
    second or more) give NumPy's ids and lengths, and its scores and attention to the
    forward tolerance."""
    from xpseq.search.decode import SearchOptions, search

    config, params = transformer_variant(variant)
    be = forward_backend
    options = (SearchOptions(max_len_a=0.0, max_len_b=4) if method == "greedy" else
               SearchOptions(method="beam", k=3, n_best=2, max_len_a=0.0, max_len_b=4))
    src, src_len = TRANSFORMER_BATCH["src"], TRANSFORMER_BATCH["src_len"]
    want = search(params, config, src, src_len, NP, options)
    got = search(be.asarray_tree(params), config, src, src_len, be, options)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.lengths, want.lengths)
    np.testing.assert_allclose(got.scores, want.scores, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    np.testing.assert_allclose(got.attention, want.attention, rtol=FORWARD_RTOL,
                               atol=FORWARD_ATOL)
