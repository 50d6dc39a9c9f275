"""Greedy and beam search over a pure step function: brute force, k = 1 = greedy, parity
across backends and under jax.jit, limits, n-best order, attention bookkeeping, errors.

The search is the same code on every backend: eager JAX compiles each operation for each
new shape, so its cases of the searches' bookkeeping are in the slow tier; JAX's eager and
jitted searches are checked against NumPy's on every run
(``test_identical_results_on_numpy_torch_and_jax_eager_and_jitted``)."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from xpseq import backends
from xpseq.core import decoding as D
from xpseq.core.masking import log_softmax

V, B, S = 5, 3, 4
BOS, EOS, PAD = 1, 2, 0
RNG = np.random.default_rng(0)
TABLE = RNG.normal(size=(B, V, V)) * 2.0       # per-sentence bigram logits
TABLE[:, :, PAD] = TABLE[:, :, BOS] = -1e9     # never generate <pad> or <s>
ATT = RNG.normal(size=(V, S))                   # attention logits determined by y_prev


def bigram_step(be):
    """A step function whose next-token distribution depends on the sentence and y_prev;
    its attention is a softmax over S determined by y_prev (so it can be traced back)."""
    xp = be.xp
    table = be.asarray(np.reshape(TABLE, (B * V, V)))
    att = be.asarray(ATT)

    def step(state, y):
        b = xp.astype(state["b"], xp.int64)
        logits = xp.take(table, b * V + y, axis=0)
        return log_softmax(logits), state, xp.exp(log_softmax(xp.take(att, y, axis=0)))

    return step


def start(be, k=None):
    state = {"b": be.asarray(np.arange(B, dtype=np.float64))}
    return state if k is None else D.tile_beams(state, k)


def log_probs(b):
    logits = TABLE[b]
    return logits - np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1,
                                  keepdims=True)) - logits.max(-1, keepdims=True)


def brute_force(b, max_len, penalty="none", alpha=0.6):
    """The best hypothesis by enumeration: ends in </s>, or is cut at max_len."""
    lp = log_probs(b)
    best = (-np.inf, None)
    for n in range(1, max_len + 1):
        for seq in itertools.product(range(V), repeat=n):
            if EOS in seq[:-1] or (seq[-1] != EOS and n != max_len):
                continue
            prev, score = BOS, 0.0
            for tok in seq:
                score, prev = score + lp[prev, tok], tok
            rank = {"none": score, "avg": score / n,
                    "gnmt": score / ((5 + n) / 6) ** alpha}[penalty]
            if rank > best[0] + 1e-12:
                best = (rank, seq)
    return best


def as_lists(be, hyp, j=0):
    tokens, lengths = be.to_numpy(hyp.tokens), be.to_numpy(hyp.lengths)
    return [tuple(int(x) for x in tokens[b, j, :lengths[b, j]]) for b in range(B)]


@pytest.mark.slow_on("jax")
@pytest.mark.parametrize("penalty", ["none", "avg", "gnmt"])
def test_beam_with_k_above_all_candidates_finds_the_best_sequence(backend, penalty):
    max_len, k = 4, 200                          # 4 + 16 + 64 + 256 > 200 live at most 64
    hyp = D.beam_search(bigram_step(backend), start(backend, k), batch_size=B, k=k,
                        bos_id=BOS, eos_id=EOS, max_len=max_len, length_penalty=penalty,
                        scan=backend.scan if backend.name == "jax" else None)
    ranking = backend.to_numpy(hyp.ranking)[:, 0]
    for b, seq in enumerate(as_lists(backend, hyp)):
        best_rank, best_seq = brute_force(b, max_len, penalty)
        assert seq == best_seq, (b, seq, best_seq)
        assert abs(ranking[b] - best_rank) < 1e-9


@pytest.mark.slow_on("jax")
def test_k1_equals_greedy(backend):
    hyp = D.beam_search(bigram_step(backend), start(backend, 1), batch_size=B, k=1,
                        bos_id=BOS, eos_id=EOS, max_len=6)
    greedy = D.greedy_search(bigram_step(backend), start(backend), batch_size=B, bos_id=BOS,
                             eos_id=EOS, max_len=6)
    assert np.array_equal(backend.to_numpy(hyp.tokens), backend.to_numpy(greedy.tokens))
    assert np.array_equal(backend.to_numpy(hyp.lengths), backend.to_numpy(greedy.lengths))
    np.testing.assert_allclose(backend.to_numpy(hyp.scores), backend.to_numpy(greedy.scores),
                               rtol=1e-13)


def test_greedy_takes_the_argmax_path_and_stops_at_eos(backend):
    hyp = D.greedy_search(bigram_step(backend), start(backend), batch_size=B, bos_id=BOS,
                          eos_id=EOS, max_len=6)
    tokens, lengths = backend.to_numpy(hyp.tokens)[:, 0], backend.to_numpy(hyp.lengths)[:, 0]
    for b in range(B):
        prev, expected, score = BOS, [], 0.0
        for _ in range(6):
            tok = int(np.argmax(log_probs(b)[prev]))
            expected.append(tok)
            score += log_probs(b)[prev, tok]
            prev = tok
            if tok == EOS:
                break
        assert list(tokens[b, :lengths[b]]) == expected
        assert np.all(tokens[b, lengths[b]:] == PAD)
        assert abs(backend.to_numpy(hyp.scores)[b, 0] - score) < 1e-12


@pytest.mark.slow_on("jax")
def test_greedy_narrowed_to_unfinished_sentences_gives_the_same_hypotheses(backend):
    """An eager greedy search that narrows its steps to the unfinished sentences returns
    what the whole-batch search returns, while its later steps run on fewer rows."""
    xp, n, vocab, src = backend.xp, 40, 7, 5
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(n, vocab, vocab)) * 2.0
    logits[:, :, PAD] = logits[:, :, BOS] = -1e9
    logits[:, :, EOS] += rng.normal(size=(n, 1)) * 3.0      # sentences end at many lengths
    table = backend.asarray(np.reshape(logits, (n * vocab, vocab)))
    att = backend.asarray(rng.normal(size=(vocab, src)))
    rows_seen = []

    def step_of(rows):
        ids = backend.asarray(np.asarray(rows, dtype=np.int64))

        def step(state, y):
            rows_seen.append(int(y.shape[0]))
            assert state["t"].shape[0] == y.shape[0]
            logp = log_softmax(xp.take(table, ids * vocab + y, axis=0))
            return logp, {"t": state["t"] + 1.0}, xp.exp(log_softmax(xp.take(att, y, axis=0)))

        return step

    state = {"t": backend.asarray(np.zeros((n, 3)))}
    run = functools.partial(D.greedy_search, state=state, batch_size=n, bos_id=BOS,
                            eos_id=EOS, max_len=12, min_len=1,
                            max_lens=backend.asarray(np.arange(n) % 12 + 1))
    whole = run(step_of(range(n)))
    full_rows = list(rows_seen)
    rows_seen.clear()
    narrowed = run(step_of(range(n)),
                   narrow=lambda rows: step_of(backend.to_numpy(rows).tolist()))
    assert set(full_rows) == {n} and min(rows_seen) < n // 4
    assert sum(rows_seen) < 0.7 * sum(full_rows)
    for a, b in zip(whole, narrowed):
        np.testing.assert_array_equal(backend.to_numpy(a), backend.to_numpy(b))


@pytest.mark.parametrize("k", [None, 3])
def test_eager_searches_call_the_step_once_per_step(k):
    """The first step an eager search takes is the probe it made of the initial state
    (for the shapes), not a second call with the same arguments."""
    be = backends.get("numpy")
    calls = []
    inner = bigram_step(be)

    def step(state, y):
        calls.append(int(y.shape[0]))
        return inner(state, y)

    if k is None:
        hyp = D.greedy_search(step, start(be), batch_size=B, bos_id=BOS, eos_id=EOS,
                              max_len=6)
        assert len(calls) == int(np.max(be.to_numpy(hyp.lengths)))
    else:
        D.beam_search(step, start(be, k), batch_size=B, k=k, bos_id=BOS, eos_id=EOS,
                      max_len=6)
        assert 1 <= len(calls) <= 6 and set(calls) == {B * k}
        calls.clear()
        D.beam_search(step, start(be, k), batch_size=B, k=k,
                      bos_id=BOS, eos_id=EOS, max_len=1)
        assert len(calls) == 1                 # max_len 1: the probe is the only step


def test_identical_results_on_numpy_torch_and_jax_eager_and_jitted():
    results = {}
    for name in ("numpy", "torch", "jax"):
        be = backends.get(name)
        run = functools.partial(D.beam_search, bigram_step(be), batch_size=B, k=3, bos_id=BOS,
                                eos_id=EOS, max_len=6, length_penalty="gnmt", n_best=3,
                                min_len=1)
        if name == "jax":
            import jax

            jitted = jax.jit(lambda state: run(state, scan=be.scan))(start(be, 3))
            results["jax.jit"] = [be.to_numpy(x) for x in jitted]
        results[name] = [be.to_numpy(x) for x in run(start(be, 3))]
    ref = results["numpy"]
    for name, res in results.items():
        assert np.array_equal(res[0], ref[0]), name            # tokens: identical
        assert np.array_equal(res[1], ref[1]), name            # lengths: identical
        for a, b in zip(res[2:], ref[2:]):                      # scores, ranking, attention
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=name)


@pytest.mark.slow_on("jax")
def test_n_best_are_sorted_distinct_and_respect_min_and_max_lengths(backend):
    limits = backend.asarray([2, 4, 6])
    hyp = D.beam_search(bigram_step(backend), start(backend, 4), batch_size=B, k=4,
                        bos_id=BOS, eos_id=EOS, max_len=6, max_lens=limits, min_len=1,
                        n_best=4, length_penalty="avg")
    ranking = backend.to_numpy(hyp.ranking)
    lengths = backend.to_numpy(hyp.lengths)
    tokens = backend.to_numpy(hyp.tokens)
    assert np.all(np.diff(ranking, axis=1) <= 0)                 # best first
    for b, limit in enumerate([2, 4, 6]):
        seqs = {tuple(tokens[b, j, :lengths[b, j]]) for j in range(4)}
        assert len(seqs) == 4                                     # distinct hypotheses
        assert np.all(lengths[b] <= limit) and np.all(lengths[b] >= 1)
        for j in range(4):
            seq = tokens[b, j, :lengths[b, j]]
            assert seq[0] != EOS                                  # min_len = 1
            assert EOS not in seq[:-1]
            assert seq[-1] == EOS or lengths[b, j] == limit       # finished or cut at limit
            np.testing.assert_allclose(ranking[b, j],
                                       backend.to_numpy(hyp.scores)[b, j] / lengths[b, j])


def test_attention_follows_each_hypothesis(backend):
    """The attention row of token t is the one the step produced from token t-1."""
    hyp = D.beam_search(bigram_step(backend), start(backend, 3), batch_size=B, k=3,
                        bos_id=BOS, eos_id=EOS, max_len=5, n_best=3)
    tokens, lengths = backend.to_numpy(hyp.tokens), backend.to_numpy(hyp.lengths)
    att = backend.to_numpy(hyp.attention)
    expected = np.exp(ATT) / np.exp(ATT).sum(-1, keepdims=True)
    for b in range(B):
        for j in range(3):
            prev = [BOS, *tokens[b, j, :lengths[b, j] - 1]]
            np.testing.assert_allclose(att[b, j, :lengths[b, j]], expected[prev], rtol=1e-12)
            assert np.all(att[b, j, lengths[b, j]:] == 0)


def test_bad_arguments_are_refused():
    be = backends.get("numpy")
    common = dict(batch_size=B, bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError, match="n_best .* cannot exceed the beam size"):
        D.beam_search(bigram_step(be), start(be, 2), k=2, max_len=4, n_best=3, **common)
    with pytest.raises(ValueError, match="length_penalty must be one of"):
        D.beam_search(bigram_step(be), start(be, 2), k=2, max_len=4, length_penalty="x",
                      **common)
    with pytest.raises(ValueError, match="k must be a positive int"):
        D.beam_search(bigram_step(be), start(be, 2), k=0, max_len=4, **common)
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        D.greedy_search(bigram_step(be), start(be), max_len=0, **common)
    with pytest.raises(ValueError, match="min_len .* must be below max_len"):
        D.greedy_search(bigram_step(be), start(be), max_len=3, min_len=3, **common)
    with pytest.raises(ValueError, match=r"max_lens must have shape \(batch,\)"):
        D.greedy_search(bigram_step(be), start(be), max_len=3, max_lens=be.asarray([1, 2]),
                        **common)


def test_front_doors_bound_the_beam():
    from xpseq import g2p
    from xpseq.search import MAX_BEAM, options_for

    assert MAX_BEAM == 64
    assert options_for(MAX_BEAM, MAX_BEAM).k == MAX_BEAM
    for beam, n_best, name in ((MAX_BEAM + 1, 1, "beam"), (10_000, 1, "beam")):
        with pytest.raises(ValueError, match=f"translate: {name} must be at most 64"):
            options_for(beam, n_best, caller="translate")
    with pytest.raises(ValueError, match="beam must be at most 64"):
        g2p.pronounce(["hello"], beam=1_000_000)
