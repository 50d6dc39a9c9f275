"""The package's floor plan, checked: who may import what, and how big a piece may grow.

* No module imports a private name (``_x``), or anything from a private module, of
  another folder of xpseq, nor reads one as an attribute of a module it imported
  (``transformer._logits``): a folder's private names are its own.
* No module imports a private name of another module at all, even of its own folder
  (``from .config import _group``): a name that crosses a module line is public, though its
  module may be private (``from ._common import register_lesson`` is fine; Equinox's rule).
* ``backends/`` knows no model and no cell: it imports nothing from ``xpseq.models``,
  ``xpseq.core.recurrent``, ``xpseq.core.vjp`` or ``xpseq.core.kernels``.
* ``core/`` and ``models/`` never look at a backend: no ``xpseq.backends`` import, no
  ``getattr`` / ``hasattr`` on a loop or backend object.
* No module is over 900 lines (the tests' modules included), no function takes over 16
  parameters.
* The installed package never reads the repository's ``scripts/`` folder.
* ``scripts/`` (every ``.py`` file under it) keeps the same floor plan: no script imports a
  private name or module of xpseq (its own helpers, such as ``_common``, are its own), and
  no script module is over 900 lines.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "xpseq"
MODULES = sorted(PACKAGE.rglob("*.py"))
SCRIPTS = sorted((PACKAGE.parent / "scripts").rglob("*.py"))
TESTS = sorted((PACKAGE.parent / "tests").rglob("*.py")) + sorted(
    (PACKAGE.parent / "parity_tests").rglob("*.py"))


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def folder_of(path: pathlib.Path) -> str:
    """The package (folder) a module file lives in, e.g. ``xpseq.core``."""
    return ".".join(path.relative_to(PACKAGE.parent).parent.parts)


def imports(path: pathlib.Path, source: str | None = None) -> list[tuple[str, list[str], int]]:
    """``(target module, imported names, line)`` of every ``xpseq`` import in ``path``
    (or in ``source``, read as if it were that file)."""
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    here = folder_of(path).split(".")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((a.name, [], node.lineno) for a in node.names)
    return [f for f in found if f[0] == "xpseq" or f[0].startswith("xpseq.")]


def is_folder(dotted: str) -> bool:
    return (PACKAGE.parent / dotted.replace(".", "/")).is_dir()


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of xpseq (not a name inside one)."""
    path = PACKAGE.parent / dotted.replace(".", "/")
    return path.is_dir() or path.with_suffix(".py").is_file()


def private_attributes(path: pathlib.Path, source: str | None = None) -> list[str]:
    """Every read in ``path`` of a private name (``_x``) as an attribute of an xpseq
    module of another folder: ``transformer._logits`` after ``from xpseq.models import
    transformer``, ``xpseq.models.rnn._forward`` after ``import xpseq``."""
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    here, mine = folder_of(path).split("."), folder_of(path)
    bound: dict[str, str] = {}                 # local name -> the module it is
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = here[:len(here) - (node.level - 1)] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if full.startswith("xpseq") and is_module(full):
                    bound[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("xpseq"):
                    bound[alias.asname or "xpseq"] = alias.name if alias.asname else "xpseq"
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in bound:
            module = ".".join([bound[value.id], *reversed(chain)])
            owner = module if is_folder(module) else module.rsplit(".", 1)[0]
            if owner != mine and is_module(module):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} reads the "
                           f"private name {node.attr} of {module}")
    return bad


def private_reaches(path: pathlib.Path, source: str | None = None) -> list[str]:
    """Every import in ``path`` of another folder's private module or name, and every read
    of one as an attribute (:func:`private_attributes`)."""
    mine = folder_of(path)
    bad = private_attributes(path, source)
    for target, names, line in imports(path, source):
        owner = target if is_folder(target) else target.rsplit(".", 1)[0]
        if owner == mine:
            continue
        where = f"{path.relative_to(PACKAGE.parent)}:{line}"
        if any(part.startswith("_") and not part.startswith("__")
               for part in target.split(".")):
            bad.append(f"{where} imports from the private module {target}")
        for name in names:
            if name.startswith("_") and not name.startswith("__"):
                bad.append(f"{where} imports the private name {name} from {target}")
    return bad


def private_names_imported(path: pathlib.Path, source: str | None = None) -> list[str]:
    """Every ``from X import _name`` in ``path`` (or in ``source``) where ``X`` is another
    module of xpseq, its own folder's included. A private submodule (``from . import
    _common``) is a module, not a name, and a dunder (``__version__``) is not private."""
    mine = module_name(path) if path.is_relative_to(PACKAGE) else None
    bad = []
    for target, names, line in imports(path, source):
        if target == mine:
            continue
        for name in names:
            if (name.startswith("_") and not name.startswith("__")
                    and not is_module(f"{target}.{name}")):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports the private "
                           f"name {name} from {target}")
    return bad


def test_the_private_name_check_catches_an_import_within_a_folder():
    source = ("from .config import Seq2SeqConfig, _group\nfrom .forward import (\n"
              "    _decoder_step,\n    decoder_spec,\n)\nfrom xpseq.models.rnn.backward import "
              "_loss_vjp\nfrom xpseq.core.kernels import linear\nfrom os import _exit\n"
              "from ..protocol import __name__ as protocol_name\n")
    found = private_names_imported(PACKAGE / "models" / "rnn" / "model.py", source)
    assert found == [
        "xpseq/models/rnn/model.py:1 imports the private name _group from "
        "xpseq.models.rnn.config",
        "xpseq/models/rnn/model.py:2 imports the private name _decoder_step from "
        "xpseq.models.rnn.forward",
        "xpseq/models/rnn/model.py:6 imports the private name _loss_vjp from "
        "xpseq.models.rnn.backward"], found
    # A private module's public names, and a private module itself, may be imported.
    own = ("from xpseq.tour._common import LESSONS, register_lesson\nfrom . import _common\n"
           "from ._common import _lesson\n")
    assert private_names_imported(PACKAGE / "tour" / "kinks.py", own) == [
        "xpseq/tour/kinks.py:3 imports the private name _lesson from xpseq.tour._common"]


def test_no_module_imports_a_private_name_of_another_module():
    bad = [b for path in MODULES for b in private_names_imported(path)]
    assert not bad, "\n".join(bad)


def test_the_private_import_check_catches_a_reach():
    source = ("from xpseq.models.rnn import _forward\nfrom xpseq.core._scan import scan\n"
              "from .checkpoint import _host\nfrom ..core import kernels\n")
    found = private_reaches(PACKAGE / "train" / "loop.py", source)
    assert len(found) == 2, found
    assert "_forward" in found[0] and "xpseq.core._scan" in found[1]


def test_the_private_attribute_check_catches_a_read():
    source = ("import xpseq\nfrom xpseq.models import transformer\nfrom ..train import step\n"
              "transformer._logits(p)\nxpseq.models.rnn._forward(p)\nstep._build(p)\n"
              "transformer.forward(p)._private\n")
    found = private_attributes(PACKAGE / "tour" / "kv_cache.py", source)
    assert len(found) == 3, found
    assert "_logits of xpseq.models.transformer" in found[0]
    assert "_forward of xpseq.models.rnn" in found[1]
    assert "_build of xpseq.train.step" in found[2]
    own = "from . import kv_cache\nkv_cache._x\n"                  # its own folder's
    assert private_attributes(PACKAGE / "tour" / "lesson.py", own) == []


def test_no_module_imports_another_folders_private_names():
    bad = [b for path in MODULES for b in private_reaches(path)]
    assert not bad, "\n".join(bad)


def test_the_private_import_check_covers_the_scripts():
    source = ("import _common as common\nfrom benchmarks.shared import Row\n"
              "from .context import Context\nfrom xpseq.train.step import to_backend\n"
              "from xpseq.train.step import _build_train_step\nimport xpseq.core._lib\n")
    found = private_reaches(PACKAGE.parent / "scripts" / "benchmarks" / "train.py", source)
    assert len(found) == 2, found
    assert "_build_train_step" in found[0] and "xpseq.core._lib" in found[1]
    assert PACKAGE.parent / "scripts" / "bench.py" in SCRIPTS
    assert PACKAGE.parent / "scripts" / "benchmarks" / "context.py" in SCRIPTS


def test_no_script_imports_a_private_name_of_xpseq():
    bad = [b for path in SCRIPTS for b in private_reaches(path)]
    assert not bad, "\n".join(bad)


def test_backends_know_no_model_and_no_cell():
    forbidden = ("xpseq.models", "xpseq.core.recurrent", "xpseq.core.vjp", "xpseq.core.kernels")
    bad = []
    for path in sorted((PACKAGE / "backends").glob("*.py")):
        for target, names, line in imports(path):
            full = [target] + [f"{target}.{n}" for n in names]
            if any(f == p or f.startswith(p + ".") for f in full for p in forbidden):
                bad.append(f"{path.name}:{line} imports {target} {names}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("folder", ["core", "models"])
def test_core_and_models_never_look_at_a_backend(folder):
    bad = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        for target, _, line in imports(path):
            if target.startswith("xpseq.backends"):
                bad.append(f"{path.name}:{line} imports {target}")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id in ("scan", "loop", "backend", "custom_vjp")):
                bad.append(f"{path.name}:{node.lineno} {node.func.id}({node.args[0].id}, ...)")
    assert not bad, "\n".join(bad)


def test_no_module_is_too_long_and_no_function_takes_too_many_parameters():
    assert PACKAGE.parent / "parity_tests" / "test_models.py" in TESTS
    long_modules = [f"{p.relative_to(PACKAGE.parent)}: {n} lines"
                    for p in MODULES + SCRIPTS + TESTS
                    if (n := len(p.read_text(encoding="utf-8").splitlines())) > 900]
    wide = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                count -= bool(a.args) and a.args[0].arg in ("self", "cls")
                if count > 16:
                    wide.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} "
                                f"{node.name} takes {count} parameters")
    assert not long_modules and not wide, "\n".join(long_modules + wide)


def test_the_package_reads_nothing_from_scripts():
    bad = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value == "scripts":
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not bad, "\n".join(bad)
