"""Helpers of the test suite: scripts of the checkout and subprocesses.

They read the repository's ``scripts/`` folder, so they live with the tests, not in the
installed package.
"""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]   # the checkout


def load_script(name: str) -> types.ModuleType:
    """Import ``scripts/<name>.py`` of the source tree as a module (scripts are not a
    package), without running its ``main``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def show(done: subprocess.CompletedProcess) -> str:
    """A finished command's exit code, stdout and stderr, for an assertion message."""
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def assert_ok(done: subprocess.CompletedProcess) -> None:
    """The command exited 0 without a traceback."""
    assert done.returncode == 0, show(done)
    assert "Traceback" not in done.stderr, show(done)
