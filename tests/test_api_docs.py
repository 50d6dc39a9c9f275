"""The API reference's coverage check (docs/_ext/api_coverage.py, run by every docs build)."""

from __future__ import annotations

import pathlib
import sys

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import api_coverage  # noqa: E402


def test_every_public_object_is_found_where_it_is_defined() -> None:
    objects = api_coverage.public_objects()
    # re-exported from xpseq.core, defined in xpseq.core.attention: listed once, there
    assert objects["xpseq.core.attention.scaled_dot_product_attention"].startswith(
        "xpseq.core.")
    assert "xpseq.core.scaled_dot_product_attention" not in objects
    assert "xpseq.tasks.translator.Translator" in objects
    assert "xpseq.backends.Backend" in objects          # its public home
    assert all(name.startswith("xpseq.") for name in objects)
    assert not any("._" in name.rpartition(".")[0] for name in objects)


def test_a_missing_page_is_reported() -> None:
    documented = set(api_coverage.public_objects())
    assert api_coverage.missing(documented) == []
    documented.discard("xpseq.core.attention.scaled_dot_product_attention")
    assert api_coverage.missing(documented) == [
        "xpseq.core.attention.scaled_dot_product_attention (as "
        + api_coverage.public_objects()["xpseq.core.attention.scaled_dot_product_attention"]
        + ")"]


def test_the_reference_lists_every_checked_package() -> None:
    reference = (DOCS / "reference.md").read_text()
    for package in api_coverage.PACKAGES:
        assert f"   {package}\n" in reference


@pytest.mark.parametrize("name", ["module.rst", "class.rst", "function.rst"])
def test_templates_give_every_object_its_own_page(name: str) -> None:
    text = (DOCS / "_templates" / "autosummary" / name).read_text()
    if name == "module.rst":
        assert text.count(":toctree:") >= 3         # functions, classes, exceptions
    else:
        assert ".. auto" in text
