"""``xpseq.io.install``: a missing optional part is named with the command that installs it
the way this copy of xpseq was installed (a clone from its folder, a distribution by name),
PyTorch's CPU build first on a machine without an NVIDIA GPU."""

from __future__ import annotations

import pathlib
import shlex
import shutil
import sys

import pytest

from xpseq.io import install

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_tests_run_from_a_clone_and_the_hint_installs_from_it():
    assert install.source_checkout() == ROOT
    hint = install.install_hint("onnx")
    assert hint == (f"{shlex.quote(sys.executable)} -m pip install -e "
                    f"{shlex.quote(str(ROOT) + '[onnx]')}")


def test_an_installed_copy_is_named_by_its_distribution(monkeypatch):
    monkeypatch.setattr(install, "source_checkout", lambda: None)
    assert install.install_hint("subword") == "pip install 'xpseq[subword]'"


@pytest.mark.parametrize("extra", ["torch", "all"])
def test_torch_without_a_gpu_gets_the_cpu_build_first(monkeypatch, extra):
    monkeypatch.setattr(install, "source_checkout", lambda: None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert install.install_hint(extra) == (
        "pip install torch --index-url https://download.pytorch.org/whl/cpu (PyTorch's CPU "
        f"build: this machine has no NVIDIA GPU), then pip install 'xpseq[{extra}]'")
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    assert install.install_hint(extra) == f"pip install 'xpseq[{extra}]'"
    # an extra without torch never names it
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "torch" not in install.install_hint("onnx")


def test_a_clone_installs_the_cpu_build_with_its_own_python(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    hint = install.install_hint("torch")
    python = shlex.quote(sys.executable)
    assert hint.startswith(f"{python} -m pip install torch --index-url ")
    assert hint.endswith(f"then {python} -m pip install -e {shlex.quote(str(ROOT) + '[torch]')}")


def test_a_folder_of_another_project_is_no_clone(monkeypatch, tmp_path):
    (tmp_path / "xpseq" / "io").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "xpseq-fork"\n')
    monkeypatch.setattr(install, "__file__", str(tmp_path / "xpseq" / "io" / "install.py"))
    assert install.source_checkout() is None
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "xpseq"\n')
    assert install.source_checkout() == tmp_path


@pytest.mark.parametrize("extra", ["", "torch]; rm -rf /", 3, None])
def test_a_bad_extra_is_refused(extra):
    with pytest.raises(ValueError, match="install_hint: extra must be the name"):
        install.install_hint(extra)
