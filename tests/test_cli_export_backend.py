"""An ONNX export given to a subcommand with a checkpoint's ``--backend``: one error line
whose advice works (drop ``--backend``: an export decodes on onnxruntime without asking);
the deprecated ``--backend onnxruntime`` is still taken, with a note."""

from __future__ import annotations

import pytest

from xpseq.app import cli

SENTENCE = "the cat sees the dog"


@pytest.fixture
def fake_export(tmp_path):
    """A folder that looks like an export (its ``model.json``) and holds no graph: what a
    subcommand decides from before it loads anything."""
    folder = tmp_path / "toy-onnx"
    folder.mkdir()
    (folder / "model.json").write_text("{}", encoding="utf-8")
    return folder


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("xpseq: error: "), err
    return lines[0]


@pytest.mark.parametrize("command", [["evaluate"], ["translate", SENTENCE],
                                     ["heatmap", SENTENCE]])
def test_an_export_with_a_checkpoints_backend_is_told_to_drop_it(command, fake_export, capsys):
    argv = [command[0], str(fake_export), *command[1:], "--backend", "numpy"]
    assert cli.main(argv) == 1
    line = one_error(capsys)
    assert f"{fake_export} is an ONNX export, which decodes on onnxruntime alone: drop " \
           "--backend numpy" in line, line


def test_evaluate_takes_the_backend_an_export_decodes_on(fake_export, capsys):
    """No ``--backend`` (or the deprecated ``--backend onnxruntime``, with a note that it
    is no longer needed) reaches the export itself: the error is about what the folder
    holds, never about the option."""
    for extra in ([], ["--backend", "onnxruntime"]):
        assert cli.main(["evaluate", str(fake_export), *extra]) == 1
        err = capsys.readouterr().err
        if extra:
            note, _, err = err.partition("\n")
            assert note.startswith("xpseq: note: --backend onnxruntime is no longer needed"), \
                note
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("xpseq: error: "), err
        assert "--backend" not in lines[0] or "needs onnxruntime" in lines[0], lines[0]
    # the shipped model and ensembles are checkpoints: a backend of checkpoints decodes them
    assert cli.main(["evaluate", "--shipped", "--backend", "onnxruntime"]) == 1
    line = capsys.readouterr().err.splitlines()[-1]
    assert "--backend onnxruntime decodes one ONNX export" in line and "numpy" in line, line


def test_the_deprecated_backend_still_asks_for_an_export(tmp_path, capsys):
    """``--backend onnxruntime`` with a model that is no export: a note, then the error."""
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"x")
    assert cli.main(["translate", "--backend", "onnxruntime", str(path), "a cat"]) == 1
    note, error = capsys.readouterr().err.splitlines()
    assert note.startswith("xpseq: note: --backend onnxruntime is no longer needed")
    assert error.startswith("xpseq: error: ") and f"{path} is not a folder" in error
    assert cli.main(["translate", "--backend", "onnxruntime", str(tmp_path), "a cat"]) == 1
    assert "is not an xpseq ONNX export" in capsys.readouterr().err.splitlines()[-1]
    assert cli.main(["g2p", "--backend", "onnxruntime", "hello"]) == 1
    assert "--model DIR" in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.slow       # (about 15 s: an export is traced by ndonnx)
def test_evaluate_of_an_export_on_onnxruntime_prints_what_its_checkpoint_prints(tmp_path,
                                                                                 capsys):
    pytest.importorskip("ndonnx")
    pytest.importorskip("onnxruntime")
    from helpers import resaved_fixture

    path = resaved_fixture(tmp_path / "toy.safetensors")
    folder = tmp_path / "toy-onnx"
    assert cli.main(["export", str(path), "--onnx", str(folder)]) == 0
    capsys.readouterr()
    printed = {}
    for name, argv in (("numpy", [str(path), "--backend", "numpy"]),
                       ("deprecated", [str(folder), "--backend", "onnxruntime"]),
                       ("onnxruntime", [str(folder)])):
        assert cli.main(["evaluate", *argv, "--task", "toy"]) == 0, capsys.readouterr().err
        printed[name] = capsys.readouterr().out
    assert "BLEU" in printed["numpy"]
    assert printed["onnxruntime"] == printed["numpy"] == printed["deprecated"]
