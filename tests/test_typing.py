"""xpseq ships its annotations (PEP 561): the ``py.typed`` marker is in the package and
in its package data, so wheels and sdists carry it. mypy itself runs in
``.ci/typecheck`` (``make typecheck``), not in the test suite."""

from __future__ import annotations

import pathlib
import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:                                               # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_package_is_marked_typed():
    marker = ROOT / "xpseq" / "py.typed"
    assert marker.is_file()
    assert marker.read_bytes().strip() == b""      # a marker: no partial stubs declared


def test_the_marker_is_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package_data = config["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data.get("xpseq", [])


def test_mypy_is_configured_and_a_dev_dependency():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["mypy"]["files"] == ["xpseq"]
    dev = config["project"]["optional-dependencies"]["dev"]
    assert any(d.startswith("mypy") for d in dev)
    assert (ROOT / ".ci" / "typecheck").is_file()
