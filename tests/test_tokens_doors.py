"""A model reads and writes text the way it was trained (issue 70): every door splits its
input and joins its output with :mod:`xpseq.data.tokens`, in the modes the checkpoint
stores (``train --tokens``, per side).

Three tiny models are trained once for the module, by the command on NumPy (a few epochs
of embed/hidden 8 on a few words): characters on both sides, words on both sides, and
words in, characters out (``--tokens word,char``). The tests check the split and the
join at each door (``translate``, ``evaluate``, ``heatmap``, :class:`xpseq.Translator`,
:func:`xpseq.load`, the ONNX export and its runtime), not the quality of the answers.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import assert_ok, show

import xpseq
from xpseq.data import read_parallel_tsv, tokens, write_parallel_tsv
from xpseq.search import SearchOptions
from xpseq.tasks import task_from_pairs, translate
from xpseq.tasks.metrics import corpus_bleu
from xpseq.train import checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 180
#: English -> German words: each side one word, so both tokenisations read the same lines.
WORDS = {"Save": "Aber", "Go": "Geh", "Hi": "Hallo", "Run": "Lauf", "Stop": "Halt",
         "Wait": "Warte", "Help": "Hilfe", "Come": "Komm", "Fire": "Feuer", "Wow": "Toll"}
#: A few two-word lines as well, so that a word model's output can hold spaces.
PHRASES = {"Go now": "Geh jetzt", "Come now": "Komm jetzt", "Help me": "Hilf mir"}


def xpseq_run(*args, stdin: str = "") -> subprocess.CompletedProcess:
    """``python -m xpseq ARGS`` on NumPy's side of things (the caller names the backend)."""
    return subprocess.run([sys.executable, "-m", "xpseq", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, pathlib.Path]:
    folder = tmp_path_factory.mktemp("tokens")
    lines = [f"{s}\t{t}" for s, t in {**WORDS, **PHRASES}.items()]
    (folder / "train.tsv").write_text("\n".join(lines * 6) + "\n", encoding="utf-8")
    (folder / "dev.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"folder": folder, "train": folder / "train.tsv", "dev": folder / "dev.tsv"}


@pytest.fixture(scope="module")
def models(data) -> dict[str, pathlib.Path]:
    """``{"char": ..., "word": ..., "word,char": ...}``: checkpoints of ``train --task tsv
    --tokens MODES`` (numpy, 3 epochs of a tiny rnn)."""
    out = {}
    for modes in ("char", "word", "word,char"):
        path = data["folder"] / f"{modes.replace(',', '-')}.safetensors"
        done = xpseq_run("train", "--task", "tsv", "--tokens", modes, "--train",
                         data["train"], "--dev", data["dev"], "--epochs", 3, "--embed", 8,
                         "--hidden", 8, "--lr", 0.02, "--backend", "numpy", "--out", path,
                         "--no-progress")
        assert_ok(done)
        out[modes] = path
    return out


@pytest.fixture(scope="module")
def spaced(data) -> pathlib.Path:
    """A char model that has learnt two sentences (spaces in its output)."""
    folder = data["folder"]
    lines = ["Go now\tGeh jetzt", "Come now\tKomm jetzt"]
    (folder / "spaced.tsv").write_text("\n".join(lines * 8) + "\n", encoding="utf-8")
    path = folder / "spaced.safetensors"
    done = xpseq_run("train", "--task", "tsv", "--tokens", "char", "--train",
                     folder / "spaced.tsv", "--dev", folder / "spaced.tsv", "--epochs", 40,
                     "--embed", 16, "--hidden", 32, "--lr", 0.02, "--backend", "numpy",
                     "--out", path, "--no-progress")
    assert_ok(done)
    return path


def library_output(path: pathlib.Path, source: list[str], **search) -> list[list[str]]:
    """The output tokens of ``source`` (one token list) from the library, given tokens:
    what the doors must print joined."""
    decoder = xpseq.load_decoder(path, backend="numpy")
    [result] = translate(decoder, [source], SearchOptions(**search))
    return result["n_best"] if "n_best" in search else [result["tokens"]]


# ------------------------------------------------------------------- the one place


def test_split_and_join_are_each_others_inverse():
    assert tokens.split("Save", "char") == ["S", "a", "v", "e"]
    assert tokens.join(["A", "b", "e", "r"], "char") == "Aber"
    assert tokens.split("  the  cat ", "word") == ["the", "cat"]
    assert tokens.join(["the", "cat"], "word") == "the cat"
    for text, mode in [("猫吃鱼", "char"), ("the cat sat", "word"), ("Save file", "char")]:
        assert tokens.join(tokens.split(text, mode), mode) == text
    # exactly the corpus reader's tokenisation, per side
    assert tokens.modes("char") == ("char", "char")
    assert tokens.modes("word,char") == tokens.modes(["word", "char"]) == ("word", "char")
    assert tokens.text_of(("char", "char")) == "char"
    assert tokens.text_of("word,char") == "word,char"


@given(st.text(st.characters(blacklist_characters="\u2581", blacklist_categories=("Cs",)),
               max_size=40))
@settings(max_examples=300, deadline=None)
def test_char_mode_keeps_word_boundaries(text):
    """For text without "▁": join(split(t)) is t with its whitespace normalised, and the
    tokens read back the same; every space between two words is one "▁"."""
    toks = tokens.split(text, "char")
    assert tokens.join(toks, "char") == " ".join(text.split())
    assert tokens.split(tokens.join(toks, "char"), "char") == toks
    assert toks.count(tokens.SPACE) == max(len(text.split()) - 1, 0)
    assert tokens.join(tokens.split(text, "char-nospace"), "char-nospace") == "".join(
        text.split())                                           # the old mode: as before


def test_a_literal_space_symbol_is_not_a_space(tmp_path):
    text = "a▁b  c"
    toks = tokens.split(text, "char")
    assert toks == ["a", tokens.LITERAL_SPACE, "b", tokens.SPACE, "c"]
    assert tokens.join(toks, "char") == "a▁b c"
    assert tokens.join(["▁", "a", "▁", "▁", "b", "▁"], "char") == "a b"   # a model's output
    path = tmp_path / "c.tsv"
    write_parallel_tsv(path, [(toks, ["x"])], tokens="char")
    assert path.read_text(encoding="utf-8") == "a▁b c\tx\n"
    assert read_parallel_tsv(path, tokens="char") == [(toks, ["x"])]
    with pytest.raises(ValueError, match="token 0 '▁' is not one non-whitespace character "
                                         "or a '▁' between two words"):
        write_parallel_tsv(tmp_path / "d.tsv", [(["▁", "a"], ["x"])], tokens="char")


def test_a_char_model_writes_spaces(spaced):
    """A char model trained on sentences writes the spaces between their words."""
    for sentence, want in [("Go now", "Geh jetzt"), ("Come now", "Komm jetzt")]:
        [out] = library_output(spaced, tokens.split(sentence, "char"))
        assert tokens.SPACE in out
        done = xpseq_run("translate", spaced, sentence, "--backend", "numpy")
        assert_ok(done)
        assert done.stdout == tokens.join(out, "char") + "\n" == want + "\n", show(done)
    assert xpseq.load(spaced, backend="numpy").translate(["Go now"]) == ["Geh jetzt"]


def test_reader_and_tokens_split_alike(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text("Go now\tGeh jetzt\n", encoding="utf-8")
    [(src, tgt)] = read_parallel_tsv(path, tokens="word,char")
    assert src == tokens.split("Go now", "word") == ["Go", "now"]
    assert tgt == tokens.split("Geh jetzt", "char") == list("Geh▁jetzt")


@pytest.mark.parametrize("bad", ["words", "word:char", "word,char,char", ("word",), None, 3,
                                 ",", "char,"])
def test_bad_modes_are_a_value_error_naming_the_argument(bad):
    with pytest.raises(ValueError, match=r"^where: tokens must be 'word', 'char'"):
        tokens.modes(bad, "where")


def test_split_and_join_refuse_what_they_cannot_do():
    with pytest.raises(ValueError, match="split: mode must be 'word', 'char', 'bpe' or "
                                         "'unigram'"):
        tokens.split("x", "chars")
    with pytest.raises(TypeError, match="split: text must be a str"):
        tokens.split(["x"], "char")
    with pytest.raises(TypeError, match="join: tokens must be a sequence"):
        tokens.join("abc", "char")


def test_the_modes_of_a_model_old_and_new():
    assert tokens.of_model(None) == ("word", "word")                    # toy, Python
    assert tokens.of_model({"task": "toy"}) == ("word", "word")
    assert tokens.of_model({"task": "tsv", "tokens": "char"}) == (              # before
        "char-nospace", "char-nospace")
    assert tokens.of_model({"task": "tsv", "tokens": "word"}) == ("word", "word")
    assert tokens.of_model({"task": "tsv", "tokens": ["word", "char"]}) == ("word", "char")
    assert tokens.of_model({"task": "g2p"}) == ("char", "word")
    with pytest.raises(ValueError, match="the model's metadata: tokens must be"):
        tokens.of_model({"tokens": "bytes"})
    assert tokens.is_text_model({"task": "tsv", "tokens": "word"})
    assert not tokens.is_text_model({"task": "toy"}) and not tokens.is_text_model(None)
    assert not tokens.is_text_model({"task": "g2p", "tokens": ["char", "word"]})


# ------------------------------------------------------------------------- train


def test_the_checkpoint_stores_the_modes_per_side(models):
    for modes, path in models.items():
        meta = checkpoint.load(path).metadata
        assert meta["task"] == "tsv"
        assert meta["tokens"] == list(tokens.modes(modes))
        assert meta["options"]["tokens"] == modes          # what --resume reads back


def test_train_tokens_option_help_and_errors(data, tmp_path):
    done = xpseq_run("train", "--help")
    assert_ok(done)
    assert "--tokens {word,char,bpe,unigram}[,{word,char,bpe,unigram}]" in done.stdout
    assert "SOURCE,TARGET" in done.stdout
    for bad in ("word:char", "chars", "word,char,word"):
        done = xpseq_run("train", "--task", "tsv", "--tokens", bad, "--out",
                         tmp_path / "x.safetensors")
        assert done.returncode == 2 and done.stdout == "", show(done)
        [error] = [line for line in done.stderr.splitlines() if "error" in line]
        assert "argument --tokens: expected word, char, bpe, unigram, or SOURCE,TARGET" in error
        assert repr(bad) in error and "Traceback" not in done.stderr


def test_a_missing_train_or_dev_file_names_its_option(data, tmp_path):
    missing = tmp_path / "absent.tsv"
    for option, args in [("--train", (missing, "--dev", data["dev"])),
                         ("--dev", (data["train"], "--dev", missing))]:
        done = xpseq_run("train", "--task", "tsv", "--train", *args, "--backend", "numpy",
                         "--out", tmp_path / "m.safetensors")
        assert done.returncode == 1, show(done)
        assert done.stderr.splitlines()[-1] == f"xpseq: error: {option}: no such file: " \
                                               f"{missing}", show(done)


def test_time_limit_stops_a_tsv_run_and_says_what_it_stopped(data, tmp_path):
    out = tmp_path / "limited.safetensors"
    done = xpseq_run("train", "--task", "tsv", "--tokens", "char", "--train", data["train"],
                     "--dev", data["dev"], "--epochs", 50, "--embed", 4, "--hidden", 4,
                     "--time-limit", 1e-5, "--backend", "numpy", "--out", out,
                     "--no-progress")
    assert_ok(done)
    assert "(time_limit)" in done.stdout
    assert re.search(r"^xpseq: note: time limit 1e-05 min reached during epoch 1 of at most "
                     r"50: .*the checkpoint holds epoch 1$", done.stderr, re.M), show(done)
    assert len(checkpoint.load(out).train_state["history"]) == 1


def test_monitor_dev_wer_is_refused_outside_g2p(data, tmp_path):
    done = xpseq_run("train", "--task", "tsv", "--train", data["train"], "--dev", data["dev"],
                     "--monitor", "dev_wer", "--backend", "numpy",
                     "--out", tmp_path / "m.safetensors")
    assert done.returncode == 1 and done.stderr.splitlines() == [
        "xpseq: error: --monitor dev_wer is the G2P word error rate, an option of --task "
        "g2p; --task tsv watches dev_loss"], show(done)


# --------------------------------------------------------------------- translate


def test_translate_reads_and_prints_characters_for_a_char_model(models):
    path = models["char"]
    done = xpseq_run("translate", path, "Save", "S a v e", "Wait", "--backend", "numpy")
    assert_ok(done)
    assert "unknown" not in done.stderr, show(done)            # 4 known characters
    lines = done.stdout.splitlines()
    want = tokens.join(library_output(path, list("Save"))[0], "char")
    assert lines[0] == want and want == " ".join(want.split())
    assert tokens.split("S a v e", "char") == ["S", "▁", "a", "▁", "v", "▁", "e"]
    assert lines[1] == tokens.join(library_output(path, tokens.split("S a v e", "char"))[0],
                                   "char")
    assert lines[2] == tokens.join(library_output(path, list("Wait"))[0], "char")


def test_translate_notes_unknown_characters(models):
    done = xpseq_run("translate", models["char"], "Säve", "--backend", "numpy")
    assert_ok(done)
    assert "xpseq: note: 1 unknown source character(s) read as <unk>: ä" in done.stderr


def test_translate_n_best_joins_each_hypothesis(models):
    path = models["char"]
    done = xpseq_run("translate", path, "Help", "--beam", 3, "--n-best", 2, "--backend",
                     "numpy")
    assert_ok(done)
    hyps = [line.split("\t")[3] for line in done.stdout.splitlines()]
    want = library_output(path, list("Help"), method="beam", k=3, n_best=2)
    assert hyps == [tokens.join(h, "char") for h in want]


def test_translate_a_word_model_as_before(models):
    path = models["word"]
    done = xpseq_run("translate", path, "Go now", "Save", "--backend", "numpy")
    assert_ok(done)
    assert "unknown" not in done.stderr, show(done)
    assert done.stdout.splitlines() == [tokens.join(library_output(path, s.split())[0], "word")
                                        for s in ("Go now", "Save")]
    done = xpseq_run("translate", path, "S a v e", "--backend", "numpy")
    assert "4 unknown source word(s)" in done.stderr, show(done)


def test_translate_words_in_characters_out(models):
    path = models["word,char"]
    done = xpseq_run("translate", path, "Go now", "--backend", "numpy")
    assert_ok(done)
    assert "unknown" not in done.stderr, show(done)
    assert done.stdout.splitlines() == [
        tokens.join(library_output(path, ["Go", "now"])[0], "char")]


# ---------------------------------------------------------------------- evaluate


@pytest.mark.parametrize("modes, tok", [("char", "13a"), ("word", "13a"),
                                        ("word,char", "13a")])
def test_evaluate_reads_the_test_set_as_trained_and_scores_the_text(models, data, modes,
                                                                     tok):
    """``evaluate --test`` scores what ``translate`` prints against the file's plain text:
    sacreBLEU on those strings, with its tokenizer for the target's mode."""
    import sacrebleu

    pairs = [line.split("\t") for line in data["dev"].read_text(encoding="utf-8").splitlines()]
    done = xpseq_run("translate", models[modes], *(s for s, _ in pairs), "--backend", "numpy")
    assert_ok(done)
    hyps, refs = done.stdout.splitlines(), [t for _, t in pairs]
    done = xpseq_run("evaluate", models[modes], "--test", data["dev"], "--backend", "numpy")
    assert_ok(done)
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in done.stdout.splitlines() if line.startswith("|")]
    assert rows[0] == ["test set", "sentences", "BLEU", "exact"], done.stdout
    bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize=tok).score
    exact = sum(h == r for h, r in zip(hyps, refs)) / len(refs)
    assert rows[2] == ["dev.tsv", str(len(pairs)), f"{bleu:.2f}", f"{100 * exact:.1f}%"], \
        done.stdout
    assert re.search(rf"^BLEU: sacrebleu \S*tok:{tok}\|\S*$", done.stdout, re.M), show(done)


def test_evaluate_refuses_tokens_other_than_the_checkpoints(models, data):
    """A checkpoint that stores its tokens reads its test set that way: ``--tokens`` of
    another mode would score a model on input it cannot read (silently near 0 BLEU)."""
    done = xpseq_run("evaluate", models["char"], "--test", data["dev"], "--tokens", "word",
                     "--backend", "numpy")
    assert done.returncode == 1, show(done)
    assert done.stderr.strip() == (
        f"xpseq: error: --tokens word: {models['char']} was trained with tokens char,char and "
        "reads its test set that way; give no --tokens (it is for checkpoints that do not "
        "store their tokens)"), show(done)
    done = xpseq_run("evaluate", models["word,char"], "--test", data["dev"], "--tokens",
                     "word,char", "--backend", "numpy")
    assert_ok(done)                                      # the same modes: accepted


def test_bleu_of_text_is_sacrebleu_on_the_joined_strings():
    import sacrebleu

    hyps, refs = [["the", "cat", "sat", "."]], [["the", "cat", "sat", "down", "."]]
    assert corpus_bleu(hyps, refs, text="word").score == pytest.approx(
        sacrebleu.corpus_bleu(["the cat sat ."], [["the cat sat down ."]]).score)
    assert "tok:13a" in corpus_bleu(hyps, refs, text="word").signature
    chars = corpus_bleu([tokens.split("the cat sat .", "char")],
                        [tokens.split("the cat sat down .", "char")], text="char")
    assert chars == corpus_bleu(hyps, refs, text="word")     # 13a on the same joined text
    old = corpus_bleu([list("Hallx")], [list("Hallo")], text="char-nospace")
    assert old.score == pytest.approx(sacrebleu.corpus_bleu(
        ["Hallx"], [["Hallo"]], tokenize="char").score) and "tok:char" in old.signature
    assert "tok:none" in corpus_bleu(hyps, refs).signature               # tokens: as before
    with pytest.raises(ValueError, match="corpus_bleu: text must be None, 'word' or 'char'"):
        corpus_bleu(hyps, refs, text="13a")


# ----------------------------------------------------------------------- heatmap


def test_heatmap_splits_the_sentence_and_joins_the_translation(models):
    path = models["char"]
    done = xpseq_run("heatmap", path, "Save", "--backend", "numpy")
    assert_ok(done)
    lines = done.stdout.splitlines()
    assert lines[0] == tokens.join(library_output(path, list("Save"))[0], "char")
    assert lines[1].split() == ["S", "a", "v", "e", "</s>"]         # the columns
    assert "unknown" not in done.stderr
    done = xpseq_run("heatmap", models["word"], "Go now", "--backend", "numpy")
    assert_ok(done)
    assert done.stdout.splitlines()[1].split() == ["Go", "now", "</s>"]


# ------------------------------------------------------------------ the library


def test_load_and_translator_read_and_write_text_as_trained(models):
    for modes, sentence in [("char", "Save"), ("word", "Go now"), ("word,char", "Go now")]:
        model = xpseq.load(models[modes], backend="numpy")
        src, tgt = model.tokens
        assert (src, tgt) == tokens.modes(modes)
        want = tokens.join(library_output(models[modes], tokens.split(sentence, src))[0], tgt)
        assert model.translate([sentence]) == [want]
        assert model.translate([tokens.split(sentence, src)]) == [want]      # token lists
        two = library_output(models[modes], tokens.split(sentence, src), method="beam", k=2,
                             n_best=2)
        assert model.translate([sentence], beam=2, n_best=2) == [[tokens.join(h, tgt)
                                                                  for h in two]]
        # scored as text: the reference a str split as trained, BLEU on the joined strings
        scores = model.evaluate([(sentence, want), (sentence, "Geh jetzt")])
        assert scores["test"]["exact"] == (1.0 if want == "Geh jetzt" else 0.5)
        assert scores["test"]["bleu"] == pytest.approx(corpus_bleu(
            [tokens.split(want, tgt)] * 2, [tokens.split(want, tgt),
                                            tokens.split("Geh jetzt", tgt)], text=tgt).score)


def test_translator_train_stores_its_tokens(data, tmp_path):
    pairs = read_parallel_tsv(data["train"], tokens="char")
    task = task_from_pairs(pairs[:40], pairs[:10], {})
    model = xpseq.Translator.train(task, epochs=1, backend="numpy", progress=False, embed=4,
                                   hidden=4, tokens="char")
    assert model.tokens == ("char", "char")
    [out] = model.translate(["Save"])
    assert out == " ".join(out.split())             # spaces only between words
    back = xpseq.load(model.save(tmp_path / "c.safetensors"), backend="numpy")
    assert back.tokens == ("char", "char") and back.translate(["Save"]) == [out]
    with pytest.raises(ValueError, match="Translator.train: tokens: tokens must be"):
        xpseq.Translator.train(task, epochs=1, backend="numpy", progress=False, embed=4,
                               hidden=4, tokens="letters")
    plain = xpseq.Translator.train(task, epochs=1, backend="numpy", progress=False, embed=4,
                                   hidden=4)
    assert plain.tokens == ("word", "word") and plain.metadata == {}


def old_char_checkpoint(path: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
    """``path``'s model as a checkpoint written before per-side tokens stores it
    (``"tokens": "char"``, trained on characters without spaces), without "▁" in its
    vocabularies."""
    loaded = checkpoint.load(path)
    old = folder / "old.safetensors"
    vocabs = {side: [t if t != tokens.SPACE else "~" for t in words]
              for side, words in loaded.vocabs.items()}
    checkpoint.save(old, config=loaded.config, params=loaded.params, vocabs=vocabs,
                    metadata={**loaded.metadata, "tokens": "char"})
    return old


def test_an_older_char_checkpoint_decodes_as_before(models, tmp_path):
    """A checkpoint written before per-side tokens stores ``"tokens": "char"``: read as
    characters without spaces (``"char-nospace"``): whitespace in the input dropped, the
    output joined with nothing, scored with sacreBLEU's char tokenizer, as before."""
    old = old_char_checkpoint(models["char"], tmp_path)
    assert xpseq.load(old, backend="numpy").tokens == ("char-nospace", "char-nospace")
    [want] = library_output(old, list("Goon"))
    for sentence in ("Go on", "Goon", " G o o n "):
        done = xpseq_run("translate", old, sentence, "--backend", "numpy")
        assert_ok(done)
        assert done.stdout == "".join(want) + "\n" and "unknown" not in done.stderr
    test = tmp_path / "test.tsv"
    test.write_text("Go on\tGeh jetzt\n", encoding="utf-8")
    done = xpseq_run("evaluate", old, "--test", test, "--backend", "numpy")
    assert_ok(done)
    assert "tok:char|" in done.stdout, show(done)
    # the export keeps the old mode, and its runtime reads it
    pytest.importorskip("ndonnx")
    pytest.importorskip("onnxruntime")
    from xpseq.export.runtime import OnnxModel

    done = xpseq_run("export", old, "--onnx", tmp_path / "onnx")
    assert_ok(done)
    assert OnnxModel(tmp_path / "onnx").tokens == ("char-nospace", "char-nospace")
    done = xpseq_run("translate", tmp_path / "onnx", "Go on")
    assert_ok(done)
    assert done.stdout == "".join(want) + "\n"


# ------------------------------------------------------------------------ export


def test_the_export_and_its_runtime_keep_the_tokens(models, tmp_path):
    pytest.importorskip("ndonnx")
    pytest.importorskip("onnxruntime")
    from xpseq.export.runtime import OnnxModel

    for modes in ("word,char",):            # a pair: each side's mode kept apart
        folder = tmp_path / f"onnx-{modes.replace(',', '-')}"
        done = xpseq_run("export", models[modes], "--onnx", folder)
        assert_ok(done)
        src, tgt = tokens.modes(modes)
        assert json.loads((folder / "model.json").read_text())["tokens"] == {"src": src,
                                                                            "tgt": tgt}
        assert OnnxModel(folder).tokens == (src, tgt)
        sentence = "Save" if src == "char" else "Go now"
        runs = [xpseq_run("translate", path, sentence, *backend)
                for path, backend in [(folder, ()), (models[modes], ("--backend", "numpy"))]]
        for done in runs:
            assert_ok(done)
            assert "unknown" not in done.stderr, show(done)
        assert runs[0].stdout == runs[1].stdout


def test_a_translator_is_made_of_a_model_config_vocabularies_and_a_backend():
    import xpseq
    from xpseq import backends
    from xpseq.models.rnn import Seq2SeqConfig

    task = xpseq.toy_task(n_train=20, n_dev=5, n_test_per_bucket=2)
    config = Seq2SeqConfig(src_vocab=len(task.src_vocab), tgt_vocab=len(task.tgt_vocab))
    numpy = backends.get("numpy")
    with pytest.raises(TypeError, match="config must be the Config of a model kind"):
        xpseq.Translator({}, None, task.src_vocab, task.tgt_vocab, numpy)
    with pytest.raises(TypeError, match="tgt_vocab must be a Vocab, got list"):
        xpseq.Translator({}, config, task.src_vocab, ["a"], numpy)
    with pytest.raises(TypeError, match="backend must be a Backend .* got str"):
        xpseq.Translator({}, config, task.src_vocab, task.tgt_vocab, "numpy")
    assert xpseq.Translator({}, config, task.src_vocab, task.tgt_vocab, numpy).config is config
