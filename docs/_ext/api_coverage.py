"""A Sphinx extension that fails the build when a public function or class has no page in
the API reference.

Public means: named in the ``__all__`` of a module of one of :data:`PACKAGES` (modules
whose name has a part starting with ``_`` are private). Each such function or class is
looked up where it is defined (``obj.__module__`` and ``obj.__qualname__``, so a
re-export such as ``xpseq.core.masked_softmax`` counts once, at
``xpseq.core.masking.masked_softmax``) among the objects the build documented; every one
missing is a warning, which ``sphinx-build -W`` turns into a failure.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any, Iterable

# The packages of the API reference (docs/reference.md). The command (xpseq.app) is
# documented by the command's guide, the tour (xpseq.tour) by its lesson pages.
PACKAGES = ("xpseq.core", "xpseq.backends", "xpseq.models", "xpseq.data", "xpseq.train",
            "xpseq.search", "xpseq.tasks", "xpseq.export", "xpseq.g2p", "xpseq.testing")


def public_modules(packages: Iterable[str] = PACKAGES) -> list[str]:
    """Every importable public module of ``packages``, the packages included."""
    found = []
    for name in packages:
        module = importlib.import_module(name)
        found.append(name)
        for info in pkgutil.walk_packages(getattr(module, "__path__", []), f"{name}."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                found.append(info.name)
    return found


def public_objects(packages: Iterable[str] = PACKAGES) -> dict[str, str]:
    """``{where it is defined: the public name it was found under}`` for every function
    and class named in a public module's ``__all__``."""
    objects: dict[str, str] = {}
    for name in public_modules(packages):
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            obj: Any = getattr(module, attr)
            if ((inspect.isfunction(obj) or inspect.isclass(obj))
                    and obj.__module__.partition(".")[0] == "xpseq"):
                objects.setdefault(f"{obj.__module__}.{obj.__qualname__}", f"{name}.{attr}")
    return objects


def missing(documented: Iterable[str], packages: Iterable[str] = PACKAGES) -> list[str]:
    """The public functions and classes (as ``"defined-at (public name)"``) that are not
    among ``documented`` (full names of documented Python objects)."""
    documented = set(documented)
    return sorted(f"{where} (as {public})" for where, public in public_objects(packages).items()
                  if where not in documented)


def _check(app: Any, env: Any) -> None:
    from sphinx.util import logging

    documented = env.get_domain("py").objects
    for name in missing(documented):
        logging.getLogger(__name__).warning(f"public object without an API page: {name}")


def setup(app: Any) -> dict[str, Any]:
    app.connect("env-check-consistency", _check)
    return {"parallel_read_safe": True}
