"""The import layers of xpseq, checked: every folder imports only folders below it.

From the bottom: the math (``core``); what knows an array library (``backends``) and what
knows a model (``models``), neither aware of the other; the data (``data``) and the
numerical testing helpers (``testing``); training (``train``); decoding (``search``); the
ONNX export and its decoding (``export``, whose ``load_decoder`` opens a checkpoint or an
export); tasks and recipes (``tasks``); the front ends built on them (``g2p``,
``tour``); the command (``app``). Every import counts, at the top of a module or inside a
function. The package's own ``__init__`` and ``__main__`` sit
above all of them.
"""

from __future__ import annotations

from test_layout import MODULES, PACKAGE, folder_of, imports, module_name

LAYERS = (
    ("core", "io"),
    ("backends", "models"),
    ("data", "testing"),
    ("train",),
    ("search",),
    ("export",),
    ("tasks",),
    ("g2p", "tour"),
    ("app",),
)
LEVEL = {folder: level for level, folders in enumerate(LAYERS) for folder in folders}


def folder(dotted: str) -> str | None:
    """The top folder of xpseq that a module or a name belongs to (``xpseq.core.kernels`` ->
    ``core``; ``xpseq.testing`` -> ``testing``); ``None`` for the package itself."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else None


def violations(path, source: str | None = None) -> list[str]:
    """Every import in ``path`` (or ``source`` read as that file) of a folder at or above
    its own layer (its own folder excepted)."""
    mine = folder(folder_of(path)) or path.stem            # xpseq/testing.py -> testing
    if mine not in LEVEL:
        return []                                          # xpseq/__init__.py, __main__.py
    bad = []
    for target, names, line in imports(path, source):
        targets = [target + "." + n for n in names] if target == "xpseq" else [target]
        for t in targets:
            other = folder(t)
            if other is None or other == mine or other not in LEVEL:
                continue
            if LEVEL[other] >= LEVEL[mine]:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {mine} (layer "
                           f"{LEVEL[mine]}) imports {t} ({other}, layer {LEVEL[other]})")
    return bad


def test_every_folder_has_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert folders | modules == set(LEVEL)


def test_the_layer_check_catches_an_upward_import():
    source = ("from xpseq.train import loop\nfrom xpseq import models\n"
              "from ..core import kernels\nimport xpseq.app.cli\nfrom xpseq import tasks\n")
    found = violations(PACKAGE / "search" / "decode.py", source)
    assert len(found) == 2, found
    assert "xpseq.app" in found[0] and "xpseq.tasks" in found[1]
    # Siblings of one layer are independent: models may not import backends.
    assert violations(PACKAGE / "models" / "rnn.py", "from xpseq.backends import Backend\n")


def test_no_folder_imports_a_folder_above_it():
    bad = [b for path in MODULES for b in violations(path)]
    assert not bad, "\n".join(bad)


def test_search_needs_nothing_from_training():
    # Training and search share only the program cache, which lives below both.
    reaches = [f"{path.name}:{line} imports {target}"
               for path in sorted((PACKAGE / "search").glob("*.py"))
               for target, _, line in imports(path) if target.startswith("xpseq.train")]
    assert not reaches, reaches


def import_edges(modules) -> dict[str, set[str]]:
    """``{module: the xpseq modules and packages it imports}`` over ``modules`` (files),
    a lazy import inside a function included; a package is its ``__init__``, reached by
    ``import pkg`` or ``from pkg import name`` (``from pkg import module`` reaches the
    module)."""
    known = {module_name(p) for p in modules}
    edges = {}
    for path in modules:
        name, targets = module_name(path), set()
        for target, names, _ in imports(path):
            # ``from pkg import mod`` needs the module; ``from pkg import name``, the package
            for t in [f"{target}.{n}" if f"{target}.{n}" in known else target
                      for n in names or [""]]:
                if t in known and t != name:
                    targets.add(t)
        edges[name] = targets
    return edges


def circles(edges: dict[str, set[str]]) -> list[str]:
    """Each pair of modules that reach one another through the edges."""
    def reaches(start: str, goal: str, seen: set) -> bool:
        return any(t == goal or (t not in seen and not seen.add(t) and reaches(t, goal, seen))
                   for t in edges[start])

    return sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if reaches(b, a, set()))


def test_the_circle_check_finds_a_lazy_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == ["a <-> b", "b <-> c", "c <-> a"]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_modules_import_one_another_without_a_circle():
    """Across the whole package (every folder and subpackage, a package being its
    ``__init__``) the imports form no circle, a lazy import inside a function included:
    each module can be read knowing only those below it."""
    found = circles(import_edges(MODULES))
    assert not found, found
