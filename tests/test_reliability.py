"""What a hostile or careless user found, each case run as it was found (the command as a
subprocess, or the library call) and held to what a user should get: nothing of theirs
destroyed, nothing silently wrong, every input bounded, every failure one clear line."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
from helpers import ROOT, dead_pid, other_file_system, show

from xpseq.io import InputError, OutputRefused, files

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "transformer_format2.safetensors"


def xpseq(*argv: str | bytes, stdin: bytes | None = None, cwd: pathlib.Path = ROOT,
          **kwargs) -> subprocess.CompletedProcess:
    """``xpseq ARGV`` as a subprocess (bytes in, text out, as a user's terminal)."""
    script = pathlib.Path(sys.executable).parent / "xpseq"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "xpseq"]
    done = subprocess.run([*head, *argv], input=stdin, capture_output=True, cwd=cwd,
                          timeout=300, **kwargs)
    return subprocess.CompletedProcess(done.args, done.returncode,
                                       done.stdout.decode("utf-8", "backslashreplace"),
                                       done.stderr.decode("utf-8", "backslashreplace"))


def one_error(done: subprocess.CompletedProcess, code: int = 1) -> str:
    """The one ``xpseq: error:`` line of a command that failed with ``code``."""
    assert done.returncode == code, show(done)
    assert "Traceback" not in done.stderr, show(done)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], show(done)
    return lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("reliability")
    path = folder / "M.safetensors"
    shutil.copy(FIXTURE, path)
    return path


# ------------------------------------------------------------------ data loss

def test_row1_heatmap_never_writes_its_png_over_the_checkpoint_or_a_users_file(model):
    before = model.read_bytes()
    err = one_error(xpseq("heatmap", str(model), "the cat", "--png", str(model),
                          "--backend", "numpy"))
    assert "is an input of this run" in err and model.read_bytes() == before
    notes = model.parent / "notes.txt"
    notes.write_text("mine\n")
    err = one_error(xpseq("heatmap", str(model), "the cat", "--png", str(notes),
                          "--backend", "numpy"))
    assert "was not written by xpseq" in err and "--force" in err
    assert notes.read_text() == "mine\n"
    done = xpseq("heatmap", str(model), "the cat", "--png", str(notes), "--force",
                 "--backend", "numpy")
    assert done.returncode == 0, show(done)
    assert files.is_own_png(notes) and model.read_bytes() == before


def test_row2_an_export_on_a_full_disk_leaves_nothing_partial(tmp_path, monkeypatch, capsys):
    from xpseq.app.cli import main

    out = tmp_path / "toy"
    real_link = os.link
    moved = []

    def full_disk(src, dst, *args, **kwargs):
        if pathlib.Path(dst).parent == out and not pathlib.Path(dst).name.startswith("."):
            moved.append(dst)
            if len(moved) == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", full_disk)
    assert main(["data", "toy", "--quick", "--export", str(out)]) == 1
    monkeypatch.undo()
    assert "No space left on device" in capsys.readouterr().err
    assert list(out.iterdir()) == []                      # not a line of any file
    assert main(["data", "toy", "--quick", "--export", str(out)]) == 0   # no --force asked
    assert len(list(out.iterdir())) == 7


def test_row25_an_empty_export_path_is_refused(tmp_path):
    err = one_error(xpseq("data", "toy", "--quick", "--export", "", cwd=tmp_path))
    assert "--export is empty" in err and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ silent wrong

def test_row3_a_private_use_character_is_data_not_a_cue():
    from xpseq.g2p.text import normalize

    assert normalize("I love\ue000 you") == ["i", "love", "you"]
    assert normalize("I love\ue000, you") == ["i", "love", ",", "you"]
    assert normalize("my résumé\ue000 and résumé") == ["my", "résumé", "and", "résumé"]
    done = xpseq("g2p", "--text", "--backend", "numpy", stdin="I love\ue000 you\n".encode())
    assert done.returncode == 0, show(done)
    assert done.stdout == "AY1 | L AH1 V | Y UW1\n", show(done)


def test_row4_an_empty_source_translates_to_an_empty_output(model):
    import xpseq
    from xpseq.search import translate

    translator = xpseq.load(model, backend="numpy")
    out = translator.translate(["", "the cat", "   "])
    assert out[0] == "" and out[2] == "" and out[1] != ""
    assert translator.translate(["the cat"]) == [out[1]]
    results = translate(translator.decoder, [[], ["the", "cat"]])
    assert results[0]["tokens"] == [] and results[0]["attention"].shape == (0, 1)
    assert results[1]["tokens"] == out[1].split()


def test_row5_map_leaves_pairs_dicts_by_key_and_refuses_other_structures():
    from xpseq.core.tree import map_leaves

    assert map_leaves(lambda a, b: (a, b), {"a": 1, "b": 2}, {"b": 20, "a": 10}) == {
        "a": (1, 10), "b": (2, 20)}
    assert map_leaves(lambda a, b: a + b, [1, (2, 3)], [10, (20, 30)]) == [11, (22, 33)]
    for other in ({"a": 1}, {"a": 1, "b": 2, "c": 3}, [1, 2], {"a": [1], "b": 2}):
        with pytest.raises(ValueError, match="map_leaves: the trees differ at"):
            map_leaves(lambda a, b: a, {"a": 1, "b": 2}, other)


def test_row6_and_row7_g2p_prints_word_tab_phones_and_drops_control_characters():
    done = xpseq("g2p", "--backend", "numpy", stdin=b"hello\tworld\ncat\n")
    assert done.returncode == 0, show(done)
    lines = done.stdout.splitlines()
    assert [line.count("\t") for line in lines] == [1, 1], show(done)
    assert lines[0].startswith("hello world\t") and lines[1].startswith("cat\tK AE1 T")
    done = xpseq("g2p", "--text", "--backend", "numpy",
                 stdin=b"the \x1b[31mcat\x07 sat\x00 \xe2\x80\xae here\xc2\x9b\n")
    assert done.returncode == 0, show(done)
    assert not any(c in done.stdout for c in "\x1b\x07\x00\u202e\x9b"), show(done)
    assert done.stdout.count("|") == 3                    # four words, no "punctuation"
    assert "control character(s) dropped" in done.stderr
    assert "\x1b" not in done.stderr and "\\x1b" in done.stderr, show(done)


def test_row17_notes_show_user_text_escaped(model):
    done = xpseq("translate", str(model), "the \x1b[2Jcat\x07", "--backend", "numpy")
    assert done.returncode == 0, show(done)
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr, show(done)
    assert "\\x1b[2Jcat\\x07" in done.stderr, show(done)


def test_row16_arguments_that_are_not_utf8_are_refused_by_position(model):
    err = one_error(xpseq("translate", str(model), b"caf\xe9"), code=2)
    assert "argument 3 (caf\\xe9) is not UTF-8" in err     # (argument 1: translate)


def test_row18_a_closed_standard_output_is_one_line():
    # The shell closes the command's standard output (">&-"): no Python runs in the forked
    # child (a preexec_fn would, and JAX, loaded here by other tests, warns at a fork).
    command = shlex.join([str(pathlib.Path(sys.executable).parent / "xpseq"), "g2p", "cat",
                          "--backend", "numpy"])
    done = subprocess.run(["sh", "-c", f"exec {command} >&-"], stderr=subprocess.PIPE,
                          text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip() == ("xpseq: error: cannot write the output: standard output "
                                   "is closed"), done.stderr


# ------------------------------------------------------------------ unbounded inputs

def test_row8_a_source_past_the_token_bound_is_cut_with_a_warning(model):
    import xpseq
    from xpseq.search import LongSourceWarning, translate

    decoder = xpseq.load(model, backend="numpy").decoder
    with pytest.warns(LongSourceWarning, match=r"1 source sentence\(s\) longer than 1000 "
                      r"tokens \(the longest 30000\) cut to 1000"):
        [long, short] = translate(decoder, [["cat"] * 30_000, ["the", "cat"]])
    assert long["attention"].shape[1] == 1000 + 1 and short["tokens"]
    with pytest.raises(ValueError, match="max_tokens must be a positive int"):
        translate(decoder, [["cat"]], max_tokens=0)


def test_row8_evaluate_cuts_a_long_source_with_a_note(model, tmp_path):
    test = tmp_path / "long.tsv"
    test.write_text(" ".join(["cat"] * 3000) + "\tzo\nthe cat\tzo\n")
    done = xpseq("evaluate", str(model), "--test", str(test), "--backend", "numpy")
    assert done.returncode == 0, show(done)
    assert "longer than 1000 tokens (the longest 3000) cut to 1000" in done.stderr


@pytest.mark.parametrize("content, message", [
    (None, "is more than 1,048,576 bytes"),
    ("a = " + "[" * 3000 + "]" * 3000, "nested 3000 levels deep; at most 32"),
    ("[train]\nepochs = " + "9" * 5000, "line 2, key 'epochs': a number of 5000 digits"),
])
def test_row10_row13_row20_a_config_file_is_bounded_before_it_is_parsed(tmp_path, content,
                                                                        message):
    path = "/dev/zero" if content is None else tmp_path / "run.toml"
    if content is not None:
        path.write_text(content)
    err = one_error(xpseq("train", "--config", str(path)))
    assert err == f"xpseq: error: --config {path}{':' if content else ''} {message}" or \
        (message in err and str(path) in err), err


def test_row14_a_number_of_thousands_of_digits_is_read_digit_by_digit():
    from xpseq.g2p.text import normalize

    tokens = normalize("1" * 5000 + "/" + "2" * 5000 + " and 3/4")
    assert tokens == ["one"] * 5000 + ["slash"] + ["two"] * 5000 + ["and", "three",
                                                                     "quarters"]
    done = xpseq("g2p", "--text", "--backend", "numpy",
                 stdin=("1" * 5000 + "/7\nthe cat\n").encode())
    assert done.returncode == 0, show(done)
    assert done.stdout.splitlines()[-1] == "DH AH0 | K AE1 T", show(done)


def test_row15_an_onnx_graph_past_2_gib_is_refused_from_its_size(tmp_path):
    from xpseq.export.runtime import OnnxModel

    pytest.importorskip("onnxruntime")
    (tmp_path / "encoder.onnx").write_bytes(b"")
    (tmp_path / "model.json").write_text("{}")
    with open(tmp_path / "step.onnx", "wb") as f:          # sparse: takes no disk
        f.truncate(5 * 2**29)
    with pytest.raises(InputError, match=r"step\.onnx is 2,684,354,560 bytes; at most "
                                         r"2,147,483,647 are read"):
        OnnxModel(tmp_path)


# ------------------------------------------------------------------ exports

@pytest.fixture(scope="module")
def export(model) -> pathlib.Path:
    pytest.importorskip("ndonnx")
    pytest.importorskip("onnxruntime")
    from xpseq.export import onnx

    return onnx(model, model.parent / "export")


@pytest.mark.slow                   # an ONNX export traced, or the demo trained
def test_row19_a_folder_is_decoded_as_an_export_without_backend(model, export):
    done = xpseq("translate", str(export), "the cat")
    assert done.returncode == 0 and "torch" not in done.stderr, show(done)
    checkpoint = xpseq("translate", str(model), "the cat", "--backend", "numpy")
    assert done.stdout == checkpoint.stdout


@pytest.mark.slow                   # an ONNX export traced, or the demo trained
def test_row21_a_model_json_without_its_digest_is_called_edited(export, tmp_path):
    from xpseq.export.runtime import OnnxModel

    copy = tmp_path / "edited"
    shutil.copytree(export, copy)
    meta = json.loads((copy / "model.json").read_text())
    del meta["digest"]
    (copy / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="has no digest: the file was edited"):
        OnnxModel(copy)


@pytest.mark.slow                   # an ONNX export traced, or the demo trained
def test_row11_row12_an_export_through_a_link_to_another_file_system_and_after_a_kill(
        model, tmp_path):
    from xpseq.export import FILES, onnx

    pytest.importorskip("ndonnx")
    other = other_file_system(tmp_path)
    import tempfile

    with tempfile.TemporaryDirectory(dir=other or tmp_path) as elsewhere:
        target = pathlib.Path(elsewhere)
        # A killed export's leftovers: its set folder (a dead process's) and the one graph
        # it had moved in; the next export rolls them back and writes all three.
        work = target / f".xpseq-set-{dead_pid()}-0123abcd"
        work.mkdir()
        (work / "encoder.onnx").write_bytes(b"half an export")
        os.link(work / "encoder.onnx", target / "encoder.onnx")
        link = tmp_path / "link"
        link.symlink_to(target)
        onnx(model, link)
        assert sorted(os.listdir(target)) == sorted(FILES)
        assert (target / "encoder.onnx").read_bytes() != b"half an export"


# ------------------------------------------------------------------ misleading

def test_row22_a_word_with_no_known_character_is_said_to_be_left_out():
    from xpseq import g2p

    with pytest.warns(g2p.UnknownCharacterWarning, match="no character is left: the word "
                      "is left out") as caught:
        assert g2p.pronounce(["кот", "cat"], backend="numpy")[0] == []
    assert "answered from the other characters" not in str(caught[0].message)
    with pytest.warns(g2p.UnknownCharacterWarning, match="answered from the other"):
        g2p.pronounce(["cat猫"], backend="numpy")


@pytest.mark.parametrize("bad", ["no", 1, None])
def test_row23_lookup_must_be_a_bool(bad):
    from xpseq import g2p

    model = g2p.load(backend="numpy")
    with pytest.raises(TypeError, match=r"pronounce: lookup must be True or False"):
        model.pronounce(["cat"], lookup=bad)
    with pytest.raises(TypeError, match=r"phonemize: lookup must be True or False"):
        model.phonemize("the cat", lookup=bad)
    with pytest.raises(TypeError, match=r"pronounce_iter: lookup must be True or False"):
        model.pronounce_iter(["cat"], lookup=bad)


@pytest.mark.parametrize("bad", [None, 123, b"model.safetensors", [None]])
def test_row24_load_decoder_names_its_path_argument(bad):
    import xpseq

    with pytest.raises(TypeError, match=r"load_decoder: path must be a str or path-like"):
        xpseq.load_decoder(bad)
    if not isinstance(bad, list):
        with pytest.raises(TypeError, match=r"load: path must be a str or path-like"):
            xpseq.load(bad)


def test_input_door_bounds_and_escapes():
    from xpseq.io import reading

    assert reading.clean_text("a\x1b[1;31mb\x07c\u202ed\x00e\r\nf") == (
        "abcde \nf", ["\x1b[1;31m", "\x07", "\u202e", "\x00", "\r"])
    assert reading.shown("caf\udce9\x1b") == "caf\\xe9\\x1b"
    assert reading.escaped("ok\tnaïve\n\x9b") == "ok\tnaïve\n\\x9b"
    with pytest.raises(InputError, match=r"argument 3 is not UTF-8 \(byte 0xff"):
        reading.argument("\udcff", "argument 3")
    assert reading.cut_tokens(["a"] * 5, 3) == (["a"] * 3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reading.cut_tokens(np.arange(2).tolist(), None) == ([0, 1], 0)


def test_the_door_refuses_an_empty_path_everywhere(tmp_path):
    from xpseq.train import checkpoint

    with pytest.raises(OutputRefused, match="empty"):
        files.write("", b"", kind="tsv")
    with pytest.raises(OutputRefused, match="empty"):
        files.write_set("", {"a.tsv": b""}, kind="tsv")
    loaded = checkpoint.load(FIXTURE)
    with pytest.raises(OutputRefused, match="save: path is empty"):
        checkpoint.save("", config=loaded.config, params=loaded.params)


def test_row9_address_alternatives_look_a_bounded_way_ahead():
    # Linear time by construction: an e-mail or web address is bounded as the standards
    # bound it, so no alternative rescans the rest of a long run at every token.
    from xpseq.g2p.text import _TOKEN, normalize

    assert _TOKEN.match("a" * 64 + "@example.com").lastgroup == "email"
    assert _TOKEN.match("a" * 65 + "@example.com").lastgroup != "email"
    assert _TOKEN.match("www." + "b" * 63 + ".com").lastgroup == "web"
    assert _TOKEN.match("www." + "b" * 64 + ".com").lastgroup != "web"
    assert normalize("ann.lee@example.com") == ["ann", "dot", "lee", "at", "example", "dot",
                                                "com"]


@pytest.mark.slow
@pytest.mark.parametrize("piece", ["1-", "www.", "a@b.", "1/"])
def test_row9_the_tokenizer_takes_time_linear_in_the_text(piece):
    # 8x the text takes about 8x the time (quadratic: 64x); the best of three each, the
    # same process, so that the machine's load falls on both alike.
    import time

    from xpseq.g2p.text import normalize

    def best(size: int) -> float:
        text = piece * (size // len(piece))
        times = []
        for _ in range(3):
            start = time.perf_counter()
            normalize(text)
            times.append(time.perf_counter() - start)
        return min(times)

    best(2000)                                          # num2words imported, caches warm
    ratio = best(64_000) / best(8_000)
    assert ratio < 20, f"{piece!r}: 8x the text took {ratio:.1f}x the time"


@pytest.mark.slow                   # an ONNX export traced, or the demo trained
def test_demo_force_replaces_what_it_checked_and_nothing_else(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "loss_curves.png").write_text("mine\n")
    (out / "notes.txt").write_text("also mine\n")
    err = one_error(xpseq("demo", "--quick", "--backend", "numpy", "--out", str(out),
                          "--no-progress"))
    assert "loss_curves.png exists and was not written by xpseq" in err
    done = xpseq("demo", "--quick", "--backend", "numpy", "--out", str(out), "--no-progress",
                 "--force")
    assert done.returncode == 0, show(done)
    assert files.is_own_png(out / "loss_curves.png")
    assert (out / "notes.txt").read_text() == "also mine\n"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["notes.txt", "attention.safetensors", "seq2seq.safetensors",
         "transformer.safetensors", "attention_heatmap.png", "loss_curves.png"])


def test_standard_input_chunks_are_bounded_in_bytes_not_only_lines():
    from xpseq.app.stdin import CHUNK_BYTES, split_lines

    line = b"x" * (CHUNK_BYTES // 2 + 1) + b"\n"         # two lines are over the bound
    data = [line * 3 + b"short\n" * 5]
    chunks = list(split_lines(lambda: data.pop() if data else b"", lambda: True, 64))
    assert [len(c) for c in chunks] == [1, 1, 6]          # a line alone, then the rest
    assert sum(len(w.encode()) for c in chunks for w in c) == 3 * (len(line) - 1) + 25
