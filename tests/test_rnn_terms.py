"""The RNN decoder's backward names its factors by path: every term of
:func:`xpseq.models.rnn.backward.gradient_terms` reads a factor the forward step saved, at
that path, or one the backward step returns, under that name, for every configuration; and
the gradients formed from the terms are those of the plain per-step sums."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from xpseq.core import kernels, vjp
from xpseq.models.rnn import Seq2SeqConfig, init_params
from xpseq.models.rnn.backward import (
    Fresh,
    Saved,
    Term,
    _decoder_step_back,
    _gradients,
    fresh_names,
    gradient_terms,
    run_sequence,
)
from xpseq.models.rnn.config import group_params
from xpseq.models.rnn.forward import decoder_params, decoder_step_parts, encode_vjp

CONFIGS = [dict(cell=c, attention=a, style=s)
           for c, a, s in itertools.product(("lstm", "gru"),
                                            ("none", "dot", "general", "additive", "scaled_dot"),
                                            ("luong", "bahdanau"))
           if not (a == "none" and s == "bahdanau")]


def one_step(config: Seq2SeqConfig, seed: int = 0):
    """One decoder step's saved tree and the backward step's fresh factors (NumPy)."""
    rng = np.random.default_rng(seed)
    params = init_params(config, seed=seed)
    g = group_params(params, config)
    src = rng.integers(3, config.src_vocab, size=(2, 4))
    src_len = np.array([4, 2])
    encoded, _ = encode_vjp(g, config, src, src_len, runner=run_sequence, xp=np)
    emb = kernels.embedding(np.array([1, 5]), params["tgt_embed"], xp=np)
    p = decoder_params(g, config)
    new, o, _, saved = decoder_step_parts(p, config, emb, encoded["state"], encoded, None,
                                          xp=np)
    d_state = {k: rng.standard_normal(v.shape) for k, v in new.items()}
    _, fresh = _decoder_step_back(p, config, encoded, saved, None, d_state,
                                  rng.standard_normal(o.shape), xp=np)
    return saved, fresh


@pytest.mark.parametrize("options", CONFIGS, ids=lambda o: "-".join(o.values()))
def test_every_term_reads_a_saved_path_or_a_returned_name(options):
    config = Seq2SeqConfig(src_vocab=11, tgt_vocab=13, embed=4, hidden=3, **options)
    saved, fresh = one_step(config)
    terms = gradient_terms(config)
    for t in terms:
        for ref in (t.a, t.b):
            if isinstance(ref, Saved):
                assert isinstance(ref.find(saved), np.ndarray), ref
            elif isinstance(ref, Fresh):
                assert ref.name in fresh, ref
    # Every parameter the decoder step reads gets a gradient, and nothing else does.
    p = decoder_params(group_params(init_params(config), config), config)
    named = {(t.part, t.name) for t in terms if t.part != "encoded"}
    assert named == {(part, n) for part, names in p.items() for n in names}
    assert len(set(fresh_names(terms))) == len(fresh_names(terms))


def test_an_lstm_shares_its_gate_gradient_and_a_gru_does_not():
    for cell, shared in (("lstm", True), ("gru", False)):
        config = Seq2SeqConfig(src_vocab=11, tgt_vocab=13, embed=4, hidden=3, cell=cell)
        _, fresh = one_step(config)
        assert (fresh["d_xw"] is fresh["d_hw"]) is shared
        w_hh = next(t for t in gradient_terms(config) if t.name == "W_hh")
        assert w_hh.a == (Fresh("d_xw") if shared else Fresh("d_hw"))


def test_terms_form_the_per_step_sums():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 2, 5))
    terms = (Term("w", "M", Fresh("a"), Saved("b")), Term("w", "M", Fresh("a"), Saved("b")),
             Term("w", "bias", Fresh("a")), Term("e", "m", Fresh("a"), Saved("b"), batched=True))
    grads = _gradients(terms, {"a": a}, {"b": b}, xp=np)
    per_step = sum(a[t].T @ b[t] for t in range(3))
    np.testing.assert_allclose(grads["w"]["M"], 2 * per_step, rtol=1e-13)
    np.testing.assert_allclose(grads["w"]["bias"], a.sum(axis=(0, 1)), rtol=1e-13)
    np.testing.assert_allclose(
        grads["e"]["m"], np.stack([sum(np.outer(a[t, r], b[t, r]) for t in range(3))
                                   for r in range(2)]), rtol=1e-13)
    assert Saved("state", 0).find({"state": (a, b)}) is a
