"""Decoding a model (search, to_lists, translate), scoring (BLEU, exact match,
tables) and pictures (heatmaps, loss curves), with tiny random models."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import sacrebleu

from xpseq import backends
from xpseq.app.plots import ascii_heatmap, save_heatmap, save_loss_curves
from xpseq.backends import programs
from xpseq.core.decoding import Hypotheses
from xpseq.data import EOS_ID, PAD_ID, Vocab
from xpseq.models.rnn import Seq2SeqConfig, init_params
from xpseq.search import CheckpointDecoder, SearchOptions, search, to_lists
from xpseq.search import decode as translation
from xpseq.tasks import translate
from xpseq.tasks.metrics import Bleu, corpus_bleu, exact_match, format_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
V = 12                                  # 4 reserved ids + 8 words on either side

# Each attention with one length penalty, so that every penalty is covered.
BEAM_PENALTY = {"general": "avg", "additive": "gnmt", "none": "none"}


def config(attention: str) -> Seq2SeqConfig:
    return Seq2SeqConfig(V, V, embed=4, hidden=4, attention=attention,
                         input_feeding=attention != "none")


def sources(lengths=(3, 6, 1, 5), seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A padded batch of random word ids, each source ending in </s>."""
    rng = np.random.default_rng(seed)
    src = np.full((len(lengths), max(lengths)), PAD_ID, dtype=np.int64)
    for b, n in enumerate(lengths):
        src[b, :n - 1] = rng.integers(4, V, n - 1)
        src[b, n - 1] = EOS_ID
    return src, np.array(lengths, dtype=np.int64)


def on(backend, params: dict) -> dict:
    return {k: backend.asarray(v) for k, v in params.items()}


def assert_same(hyp: Hypotheses, ref: Hypotheses, rtol: float = 1e-12) -> None:
    np.testing.assert_array_equal(hyp.tokens, ref.tokens)
    np.testing.assert_array_equal(hyp.lengths, ref.lengths)
    np.testing.assert_allclose(hyp.scores, ref.scores, rtol=rtol, atol=0)
    np.testing.assert_allclose(hyp.ranking, ref.ranking, rtol=rtol, atol=0)
    if ref.attention is None:
        assert hyp.attention is None
    else:
        np.testing.assert_allclose(hyp.attention, ref.attention, rtol=rtol, atol=1e-14)


# --------------------------------------------------------------------------- search


@pytest.mark.parametrize("attention", ["general", "additive", "none"])
def test_search_is_identical_on_every_backend_and_jitted_once_on_jax(backend, attention,
                                                                   monkeypatch):
    """Greedy and beam search (k=3, 2-best) in float64 give the numpy result on every
    backend; on JAX each search is traced once and then reused (one jitted program)."""
    cfg = config(attention)
    params = init_params(cfg, seed=1)
    src, src_len = sources()
    runs = [SearchOptions(),
            SearchOptions(method="beam", k=3, n_best=2, length_penalty=BEAM_PENALTY[attention],
                          alpha=0.8)]
    np_backend = backends.get("numpy")
    refs = [search(params, cfg, src, src_len, np_backend, o) for o in runs]
    # The model decodes something worth comparing: sentences of different lengths and,
    # for beams, two different hypotheses.
    assert len(set(refs[0].lengths[:, 0].tolist())) > 1 or len(set(map(
        tuple, refs[0].tokens[:, 0].tolist()))) > 1
    assert not np.array_equal(refs[1].tokens[:, 0], refs[1].tokens[:, 1])
    assert (refs[1].ranking[:, 0] >= refs[1].ranking[:, 1]).all()

    traces = []

    def counted(*args, **kwargs):
        traces.append(kwargs["options"])
        return real(*args, **kwargs)

    real = translation._search_arrays
    monkeypatch.setattr(translation, "_search_arrays", counted)
    programs.clear()
    p = on(backend, params)
    for options, ref in zip(runs, refs):
        first = search(p, cfg, src, src_len, backend, options)
        second = search(p, cfg, src, src_len, backend, options)
        assert isinstance(first.tokens, np.ndarray) and first.scores.dtype == np.float64
        assert_same(first, ref)
        assert_same(second, first, rtol=0)
    if backend.name == "jax":
        assert traces == runs                          # traced once per search, then reused
        assert programs.info().get("search") == 2
    else:
        assert traces == [o for o in runs for _ in range(2)]    # eager: every call runs


@pytest.mark.parametrize("attention", ["general", "none"])
def test_beam_with_k1_equals_greedy(backend, attention):
    cfg = config(attention)
    params = on(backend, init_params(cfg, seed=2))
    src, src_len = sources((4, 2, 7), seed=3)
    greedy = search(params, cfg, src, src_len, backend)
    beam = search(params, cfg, src, src_len, backend,
                  SearchOptions(method="beam", k=1, length_penalty="none"))
    assert_same(beam, greedy)
    assert greedy.tokens.shape == (3, 1, math.ceil(2.0 * 7 + 5.0))


@pytest.mark.parametrize("options, expected", [
    (SearchOptions(max_len_a=0.5, max_len_b=1.5), [3, 5, 3, 4, 2]),
    (SearchOptions(method="beam", k=3, n_best=3, length_penalty="avg", max_len_a=1.5,
                   max_len_b=2.0), [5, 13, 7, 8, 4]),
], ids=["greedy", "beam"])
def test_each_sentence_stops_at_its_own_max_len(options, expected):
    """``max_len = ceil(a * src_len + b)`` per sentence: a model that never says </s>
    runs to exactly that length; one that may say it never goes beyond."""
    backend = backends.get("numpy")
    cfg = config("general")
    src, src_len = sources((2, 7, 3, 4, 1))
    limit = np.array(expected)            # ceil(a * src_len + b), by hand (ceil(3.0) = 3)

    never = init_params(cfg, seed=4)
    never["out.b"][EOS_ID] = -1e4                          # </s> is never likely
    hyp = search(never, cfg, src, src_len, backend, options)
    assert hyp.tokens.shape[-1] == math.ceil(options.max_len_a * 7 + options.max_len_b)
    np.testing.assert_array_equal(hyp.lengths, np.repeat(limit[:, None], options.n_best, 1))
    assert not (hyp.tokens == EOS_ID).any()
    for b, n in enumerate(limit):
        assert (hyp.tokens[b, :, n:] == PAD_ID).all() and (hyp.tokens[b, :, :n] >= 4).all()

    often = init_params(cfg, seed=4)
    often["out.b"][EOS_ID] += 2.0                          # </s> comes early or late
    hyp = search(often, cfg, src, src_len, backend, options)
    assert (hyp.lengths <= limit[:, None]).all()
    assert (hyp.lengths < limit[:, None]).any()             # some stopped before the limit


def test_to_lists_trims_attention_and_drops_eos():
    """By hand: sentence 0 ends in </s> after 3 tokens; sentence 1 hits its limit."""
    L, S = 5, 4
    tokens = np.array([[[5, 6, EOS_ID, 0, 0], [7, EOS_ID, 0, 0, 0]],
                       [[8, 9, 10, 11, 4], [4, 4, 4, 4, 4]]])
    lengths = np.array([[3, 2], [5, 5]])
    scores = np.array([[-1.0, -2.0], [-3.0, -4.0]])
    ranking = scores / lengths
    attention = np.random.default_rng(0).random((2, 2, L, S))
    src_len = np.array([2, 4])
    hyp = Hypotheses(tokens, lengths, scores, ranking, attention)

    out = to_lists(hyp, src_len)
    assert [[h["tokens"] for h in s] for s in out] == [[[5, 6], [7]],
                                                       [[8, 9, 10, 11, 4], [4] * 5]]
    assert [[h["score"] for h in s] for s in out] == [[-1.0, -2.0], [-3.0, -4.0]]
    assert out[0][1]["ranking"] == -1.0
    for b in range(2):
        for j in range(2):
            att = out[b][j]["attention"]
            assert att.shape == (lengths[b, j], src_len[b])    # generated incl. </s>
            np.testing.assert_array_equal(att, attention[b, j, :lengths[b, j], :src_len[b]])
    kept = to_lists(hyp, src_len, keep_eos=True)
    assert [h["tokens"] for h in kept[0]] == [[5, 6, EOS_ID], [7, EOS_ID]]
    assert [h["tokens"] for h in kept[1]] == [[8, 9, 10, 11, 4], [4] * 5]
    assert to_lists(hyp._replace(attention=None), src_len)[0][0]["attention"] is None


def test_to_lists_of_a_real_search(backend):
    cfg = config("additive")
    src, src_len = sources()
    params = init_params(cfg, seed=5)
    params["out.b"][EOS_ID] += 1.5
    options = SearchOptions(method="beam", k=2, n_best=2, length_penalty="avg")
    hyp = search(on(backend, params), cfg, src, src_len, backend, options)
    out = to_lists(hyp, src_len)
    kept = to_lists(hyp, src_len, keep_eos=True)
    ended = 0
    for b, sentence in enumerate(out):
        assert len(sentence) == 2
        for j, h in enumerate(sentence):
            n = int(hyp.lengths[b, j])
            assert h["attention"].shape == (n, src_len[b])
            np.testing.assert_allclose(h["attention"].sum(axis=1), 1.0, rtol=1e-12)
            assert EOS_ID not in h["tokens"]
            assert len(kept[b][j]["tokens"]) == n
            if kept[b][j]["tokens"][-1] == EOS_ID:
                ended += 1
                assert len(h["tokens"]) == n - 1
            else:
                assert len(h["tokens"]) == n
    assert ended > 0


# ------------------------------------------------------------------------- translate


def test_translate_returns_results_in_input_order():
    backend = backends.get("numpy")
    words = [f"w{i}" for i in range(V - 4)]
    src_vocab = Vocab([*Vocab.build([]).to_list(), *words])
    tgt_vocab = Vocab([*Vocab.build([]).to_list(), *[f"z{i}" for i in range(V - 4)]])
    cfg = config("general")
    params = init_params(cfg, seed=6)
    rng = random.Random(0)
    sentences = [[rng.choice(words) for _ in range(rng.randint(1, 11))] for _ in range(9)]
    sentences.append(["unknown", "w1"])
    rng.shuffle(sentences)
    decoder = CheckpointDecoder(params, cfg, src_vocab, tgt_vocab, backend)
    alone = [translate(decoder, [s])[0] for s in sentences]
    together = translate(decoder, sentences, batch_size=3)
    assert len(together) == len(sentences)
    assert len({tuple(r["tokens"]) for r in alone}) > 1       # the order is visible
    for one, many, s in zip(alone, together, sentences):
        assert many["tokens"] == one["tokens"]
        assert many["ids"] == one["ids"]
        assert many["score"] == pytest.approx(one["score"], rel=1e-9)
        # Rows: the output and its </s>, or only the output when it ran to its length limit.
        limit = math.ceil(2.0 * (len(s) + 1) + 5.0)
        assert many["attention"].shape == (min(len(one["tokens"]) + 1, limit), len(s) + 1)
        np.testing.assert_allclose(many["attention"], one["attention"], rtol=1e-9, atol=1e-12)
        assert many["n_best"] == [many["tokens"]]
        assert all(t in tgt_vocab for t in many["tokens"])
    assert translate(decoder, []) == []


# ----------------------------------------------------------------------- evaluation


HYPS = [["a", "b", "c", "d", "e"], ["x", "y", "z"], ["p", "q", "r", "s"], ["m"]]
REFS = [["a", "b", "c", "d", "f"], ["x", "y", "z", "w"], ["p", "q", "r", "s"], ["n"]]


def test_corpus_bleu_is_sacrebleu_with_tokenize_none():
    bleu = corpus_bleu(HYPS, REFS)
    assert isinstance(bleu, Bleu)
    direct = sacrebleu.corpus_bleu([" ".join(h) for h in HYPS], [[" ".join(r) for r in REFS]],
                                   tokenize="none")
    assert bleu.score == pytest.approx(direct.score, rel=1e-12)
    assert 0 < bleu.score < 100
    assert "tok:none" in bleu.signature and f"version:{sacrebleu.__version__}" in bleu.signature
    # Tokens are kept as given: sacrebleu's default tokenizer would split "x," and "x".
    punct = corpus_bleu([["x,", "y", "z", "w"]], [["x", ",", "y", "z", "w"]])
    assert punct.score < sacrebleu.corpus_bleu(["x, y z w"], [["x , y z w"]]).score
    assert exact_match(HYPS, REFS) == 0.25


def test_perfect_translations_score_100_and_exact_1():
    # exactly 100: sacrebleu's own geometric mean gives 100.00000000000004 here
    assert sacrebleu.corpus_bleu([" ".join(r) for r in REFS], [[" ".join(r) for r in REFS]],
                                 tokenize="none").score != 100.0
    assert corpus_bleu(REFS, REFS).score == 100.0
    assert corpus_bleu(REFS, REFS, text="word").score == 100.0
    # one n-gram short of perfect, or a hypothesis shorter than its reference: below 100
    assert corpus_bleu(REFS[:2] + [["p", "q", "r"], ["n"]], REFS).score < 100.0
    assert exact_match(REFS, REFS) == 1.0
    assert exact_match([["a"], ["b"]], [["a"], ["c"]]) == 0.5


@pytest.mark.parametrize("fn", [corpus_bleu, exact_match])
def test_scores_refuse_mismatched_or_empty_lists(fn):
    with pytest.raises(ValueError, match="3 hypotheses but 4 references"):
        fn(HYPS[:3], REFS)
    with pytest.raises(ValueError, match="no sentences"):
        fn([], [])


def test_format_table_lines_have_equal_width():
    table = format_table(["phrases", "sentences", "attention BLEU", "exact"],
                         [[0, 300, 98.765, "99.3%"], [4, 12345, 5.0, "-"],
                          ["long bucket name", 7, 100.0, "100.0%"]])
    lines = table.splitlines()
    assert len(lines) == 5
    assert len({len(line) for line in lines}) == 1
    assert lines[0].startswith("| phrases ") and set(lines[1]) <= {"|", " ", "-"}
    assert "98.77" in lines[2] and "5.00" in lines[3] and "100.00" in lines[4]
    assert lines[2].split("|")[2].strip() == "300" and lines[2].split("|")[2].endswith("300 ")


# -------------------------------------------------------------------------- plots


def test_ascii_heatmap_shape_labels_and_shades():
    source = ["the", "cat", "</s>"]
    output = ["pelu", "zo", "</s>"]
    weights = np.array([[1.0, 0.0, 0.0],
                        [0.05, 0.5, 0.45],
                        [0.0, 0.09, 0.91]])
    text = ascii_heatmap(weights, source, output)
    lines = text.splitlines()
    assert len(lines) == 2 + len(output)
    assert lines[-1] == ("weights: ' ' < 0.1, '.' 0.1-0.2, ':' 0.2-0.3, '-' 0.3-0.4, "
                         "'=' 0.4-0.5, '+' 0.5-0.6, '*' 0.6-0.7, '#' 0.7-0.8, '%' 0.8-0.9, "
                         "'@' >= 0.9")
    lines = lines[:-1]
    assert lines[0].split() == source
    assert [line.split()[0] for line in lines[1:]] == output
    width = 5                                   # max(3, longest source token) + 1
    label = max(map(len, output)) + 1
    cells = [[line[label + i * width:label + (i + 1) * width] for i in range(len(source))]
             for line in lines[1:]]
    assert cells[0] == ["   @@", "     ", "     "]
    assert cells[1] == ["     ", "   ++", "   =="]
    assert cells[2] == ["     ", "     ", "   @@"]


def test_ascii_heatmap_refuses_mismatched_shapes(tmp_path):
    with pytest.raises(ValueError, match=r"shape \(2, 3\).*3 output and 3 source"):
        ascii_heatmap(np.ones((2, 3)) / 3, ["a", "b", "c"], ["x", "y", "z"])
    with pytest.raises(ValueError, match="shape"):
        save_heatmap(tmp_path / "never.png", np.ones((2, 2)), ["a"], ["x", "y"])
    assert not (tmp_path / "never.png").exists()


def test_save_heatmap_and_loss_curves_write_pngs(tmp_path):
    weights = np.random.default_rng(0).dirichlet(np.ones(4), size=3)
    path = save_heatmap(tmp_path / "sub" / "heat.png", weights, ["a", "b", "c", "</s>"],
                        ["x", "y", "</s>"], title="a b c")
    assert path == tmp_path / "sub" / "heat.png"
    assert path.read_bytes()[:8] == PNG_MAGIC
    history = [{"epoch": e, "train_loss": 3.0 / e, "dev_loss": 3.5 / e} for e in (1, 2, 3)]
    curves = save_loss_curves(tmp_path / "loss.png", {
        "attention": history,
        "seq2seq": [{"epoch": 1, "train_loss": 2.0, "dev_loss": None}],
    })
    assert curves.read_bytes()[:8] == PNG_MAGIC and curves.stat().st_size > 1000


def test_translate_can_show_its_progress_on_stderr(capsys):
    """``progress``: a tqdm bar of the sentences decoded, labelled, on standard error
    (``xpseq evaluate`` shows one per search on a terminal); nothing on standard output,
    and the same results as without it."""
    words = [f"w{i}" for i in range(V - 4)]
    vocab = Vocab.from_list(["<pad>", "<s>", "</s>", "<unk>", *words])
    decoder = CheckpointDecoder(init_params(config("general"), seed=1), config("general"),
                                vocab, vocab, backends.get("numpy"))
    sentences = [words[:n] for n in (1, 3, 2, 5, 4)]
    quiet = translate(decoder, sentences, batch_size=2)
    capsys.readouterr()
    shown = translate(decoder, sentences, batch_size=2, progress="greedy")
    out, err = capsys.readouterr()
    assert out == "" and "greedy:" in err and "/5 [" in err and "sentences" in err
    assert [r["tokens"] for r in shown] == [r["tokens"] for r in quiet]
