"""Matplotlib's folder where the user's home cannot be written (a read-only ``HOME``,
``MPLCONFIGDIR`` unset): the command says so in one note and writes its figure; Matplotlib's
own warnings (two lines: its temporary folder, its font cache) do not appear. A Python
caller gets one warning, its environment left as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def unwritable_home(tmp_path) -> dict[str, str]:
    """An environment whose ``HOME`` is a file (no folder can be made under it, whoever
    runs the tests, root included) and whose temporary folder is ``tmp_path``."""
    home = tmp_path / "home"
    home.write_text("", encoding="utf-8")
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    return dict(env, HOME=str(home), TMPDIR=str(tmp_path / "tmp"), XPSEQ_DEBUG="")


@pytest.mark.skipif(sys.platform == "win32", reason="Matplotlib's folders on POSIX")
def test_the_command_with_an_unwritable_home_says_one_note_and_draws(tmp_path):
    from helpers import resaved_fixture

    model = resaved_fixture(tmp_path / "m.safetensors")
    png = tmp_path / "a.png"
    done = subprocess.run([sys.executable, "-m", "xpseq", "heatmap", str(model),
                           "the cat sees the dog", "--png", str(png), "--backend", "numpy"],
                          capture_output=True, text=True, timeout=180,
                          env=unwritable_home(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [note] = done.stderr.splitlines()
    assert note.startswith("xpseq: note: Matplotlib cannot write its folder; it used the "
                           f"temporary {tmp_path / 'tmp'}"), note
    assert note.endswith("(set MPLCONFIGDIR to a folder it can write)"), note
    assert png.read_bytes()[:8] == PNG_MAGIC


LIBRARY_CHILD = textwrap.dedent(r"""
    import json, os, sys, warnings
    from xpseq.app import plots

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plots.save_loss_curves(sys.argv[1], {"run": [
            {"epoch": 1, "train_loss": 2.0, "dev_loss": 2.5},
            {"epoch": 2, "train_loss": 1.0, "dev_loss": 1.5}]})
    print(json.dumps({"env": os.environ.get("MPLCONFIGDIR"),
                      "warned": [type(w.message).__name__ for w in caught]}))
""")


@pytest.mark.slow       # (5 s: two child processes import Matplotlib)
@pytest.mark.skipif(sys.platform == "win32", reason="Matplotlib's folders on POSIX")
@pytest.mark.parametrize("user_folder", [False, True])
def test_a_python_callers_environment_is_left_as_it_was(tmp_path, user_folder):
    """One warning, nothing logged, the environment as it was; a ``MPLCONFIGDIR`` of the
    user's is used as it is, without a warning."""
    env = unwritable_home(tmp_path)
    if user_folder:
        env["MPLCONFIGDIR"] = str(tmp_path / "mine")
    png = tmp_path / "loss.png"
    done = subprocess.run([sys.executable, "-c", LIBRARY_CHILD, str(png)], capture_output=True,
                          text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    out = json.loads(done.stdout)
    assert out["env"] == env.get("MPLCONFIGDIR")
    assert out["warned"] == ([] if user_folder else ["MatplotlibFolderWarning"])
    assert png.read_bytes()[:8] == PNG_MAGIC
