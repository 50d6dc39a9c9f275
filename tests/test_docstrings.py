"""The public API documents itself: every function and class a user reaches from
``import xpseq`` (the front door) and ``from xpseq import g2p`` has a numpydoc docstring
with Parameters, Returns (or Yields), Raises and Examples sections, and its Parameters
section names every parameter of the signature."""

from __future__ import annotations

import inspect
import re

import pytest

import xpseq
from xpseq import g2p


def public() -> dict[str, object]:
    """The documented callables: the front door, G2P's module functions, and the public
    methods of their classes."""
    found: dict[str, object] = {}
    for module, names in ((xpseq, xpseq.__all__), (g2p, g2p.__all__)):
        for name in names:
            obj = getattr(module, name)
            if not callable(obj) or (inspect.isclass(obj) and issubclass(obj, Warning)):
                continue
            found[f"{module.__name__}.{name}"] = obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_"):
                        continue
                    member = member.__func__ if isinstance(member, (classmethod,
                                                                    staticmethod)) else member
                    if inspect.isfunction(member):
                        found[f"{module.__name__}.{name}.{attr}"] = member
    return found


PUBLIC = public()


def sections(doc: str) -> dict[str, str]:
    """The numpydoc sections of ``doc``: heading -> body."""
    parts = re.split(r"^\s*(\w+)\n\s*-{3,}\s*$", doc, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def documented(body: str) -> set[str]:
    """The parameter names a Parameters section documents (``a, b : type`` lines)."""
    names = set()
    for line in body.strip("\n").splitlines():     # a name starts its line; text indents
        m = re.match(r"([\w*][\w*, ]*?)\s*(?::|$)", line)
        if m:
            names.update(n.strip().lstrip("*") for n in m.group(1).split(","))
    return names


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_the_public_api_has_numpydoc_sections(name):
    obj = PUBLIC[name]
    doc = inspect.getdoc(obj) or ""
    found = sections(doc)
    target = obj.__init__ if inspect.isclass(obj) else obj
    params = [p for p in inspect.signature(target).parameters
              if p not in ("self", "cls") and not p.startswith("_")]
    missing = [s for s in ("Parameters", "Raises", "Examples") if s not in found]
    if not inspect.isclass(obj) and "Returns" not in found and "Yields" not in found:
        missing.append("Returns")
    if not params:
        missing = [s for s in missing if s != "Parameters"]
    assert not missing, f"{name}: no {', '.join(missing)} section"
    if params:
        undocumented = set(params) - documented(found["Parameters"])
        assert not undocumented, f"{name}: Parameters does not name {sorted(undocumented)}"


def test_the_check_reads_sections_and_names():
    doc = ("Do.\n\nParameters\n----------\na, b : int\n    the two\nc\n    more\n\n"
           "Returns\n-------\nint\n")
    assert set(sections(doc)) == {"Parameters", "Returns"}
    assert documented(sections(doc)["Parameters"]) == {"a", "b", "c"}
    assert len(PUBLIC) >= 20 and "xpseq.g2p.pronounce" in PUBLIC and "xpseq.load" in PUBLIC
