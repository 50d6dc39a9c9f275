"""What the lessons of the autodiff tour share.

The :class:`Lesson` record and the registry (:data:`LESSONS`, filled by
:func:`register_lesson` as each lesson module is imported, with the short functions that are
each lesson's code, which :func:`code_sections` groups by library for printing), the table a
lesson fills (:func:`run_columns` runs each library's part, :func:`table_rows` lays the rows
out), how numbers are written in it, and the small helpers that import jax and torch only
when a lesson needs them.

The module is private to :mod:`xpseq.tour`; the names its lesson modules import from it are
public (:data:`__all__`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

FRAMEWORKS = ("numpy", "jax", "torch")
HEADERS = ("what", "numpy (xpseq by hand)", "jax", "torch")
NOT_INSTALLED = "not installed"
NONE = "-"

Row = tuple[str, str, str, str]
Cells = dict[str, str]                       # row key -> what one library's column shows
Part = Callable[[dict[str, Any]], Cells]     # fills facts, returns its column

_PACKAGE = __name__.rpartition(".")[0]     # "xpseq.tour"

__all__ = ["FRAMEWORKS", "HEADERS", "NOT_INSTALLED", "NONE", "Row", "Cells", "Part", "Lesson",
           "LessonFn", "LESSONS", "SECTIONS", "register_lesson", "code_sections", "installed",
           "tour_installed", "import_jax", "import_torch", "run_columns", "table_rows",
           "format_number", "format_error", "format_vector", "as_floats", "format_fact",
           "short_message", "normal_samples"]


@dataclass
class Lesson:
    """One lesson's results.

    Attributes
    ----------
    number, title : int, str
        Where it stands in the tour and what it is about.
    explanation : str
        One sentence; any value in it is formatted from :attr:`facts`.
    rows : list of (label, numpy, jax, torch) strings
        The side-by-side table.
    facts : dict
        The measured values, keyed ``"<library>_<what>"`` (or without a prefix when shared).
    """

    number: int
    title: str
    explanation: str
    rows: list[Row]
    facts: dict[str, Any] = field(default_factory=dict)


LessonFn = Callable[[], Lesson]
LESSONS: list[LessonFn] = []

#: Headings of a lesson's code, by the prefix of a function's name (no prefix: shared).
SECTIONS = (("", "Written once, for every library"), ("numpy_", "NumPy (xpseq by hand)"),
            ("jax_", "JAX"), ("torch_", "PyTorch"))


def register_lesson(number: int, title: str, *, code: Sequence[Callable[..., Any]] = (),
                    ) -> Callable[[Callable[[], tuple]], LessonFn]:
    """Register a lesson body returning ``(explanation, rows, facts)`` as lesson ``number``.

    ``code`` are the short functions that compute what the lesson shows (the body calls them
    and fills the table); ``xpseq tour --code`` prints their source. A name starting
    ``numpy_``, ``jax_`` or ``torch_`` is that library's; any other is written once for all.
    """

    def register(body: Callable[[], tuple[str, list[Row], dict[str, Any]]]) -> LessonFn:
        @functools.wraps(body, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
        def run() -> Lesson:
            explanation, rows, facts = body()
            return Lesson(number, title, explanation, rows, facts)

        run.number = number      # type: ignore[attr-defined]
        run.title = title        # type: ignore[attr-defined]
        run.code = tuple(code)   # type: ignore[attr-defined]
        LESSONS.append(run)
        return run

    return register


def code_sections(fn: LessonFn) -> list[tuple[str, list[str]]]:
    """A lesson's code as ``(heading, [source of each function])``, shared code first, then
    NumPy, JAX and PyTorch (:data:`SECTIONS`); a heading without functions is left out."""
    found: dict[str, list[str]] = {heading: [] for _, heading in SECTIONS}
    for f in getattr(fn, "code", ()):
        prefix = next((p for p, _ in reversed(SECTIONS) if p and f.__name__.startswith(p)), "")
        heading = dict(SECTIONS)[prefix]
        found[heading].append(textwrap.dedent(inspect.getsource(f)).rstrip())
    return [(heading, sources) for heading, sources in found.items() if sources]


# --------------------------------------------------------------------------- helpers


def installed(name: str) -> bool:
    """Whether the library ``name`` can be imported."""
    return importlib.util.find_spec(name) is not None


def tour_installed(name: str) -> bool:
    """Whether the library ``name`` can be imported, by :func:`installed` as the
    :mod:`xpseq.tour` package holds it when called.

    Replacing ``xpseq.tour.installed`` (as ``tests/test_tour.py`` does to run the tour as if
    jax and torch were missing) then reaches every lesson and :func:`~xpseq.tour.main`.
    """
    return importlib.import_module(_PACKAGE).installed(name)


def import_jax() -> tuple[Any, Any]:
    """``jax`` and ``jax.numpy`` (a lesson's JAX part runs in 64-bit mode: :func:`run_columns`)."""
    import jax
    import jax.numpy as jnp

    return jax, jnp


def import_torch() -> Any:
    """``torch``, imported when a lesson first needs it."""
    import torch

    return torch


def run_columns(facts: dict[str, Any], **parts: Part) -> dict[str, Cells | None]:
    """Run each library's part (numpy first); ``None`` for a library that is not installed.

    The lessons compare float64 results, so the JAX part runs with JAX's 64-bit mode on for
    its duration only (``jax.enable_x64``, scoped: the caller's setting is back afterwards).
    """
    out: dict[str, Cells | None] = {}
    for name in FRAMEWORKS:
        part = parts.get(name)
        if part is None:
            out[name] = {}
        elif not tour_installed(name):
            out[name] = None
        elif name == "jax":
            import jax

            with jax.enable_x64(True):
                out[name] = part(facts)
        else:
            out[name] = part(facts)
    return out


def table_rows(columns: dict[str, Cells | None], spec: Sequence[tuple[str, str]]) -> list[Row]:
    """Rows ``(label, numpy, jax, torch)`` for the ``(key, label)`` pairs of ``spec``."""
    rows = []
    for key, label in spec:
        cells = [NOT_INSTALLED if (found := columns[name]) is None else found.get(key, NONE)
                 for name in FRAMEWORKS]
        rows.append((label, cells[0], cells[1], cells[2]))
    return rows


def format_number(x: Any, digits: int = 4) -> str:
    """A number for the table: ``digits`` significant digits, ``nan``/``inf`` as such."""
    x = float(x)
    if x == 0:
        return "0"
    return f"{x:.{digits}g}"


def format_error(x: Any) -> str:
    """An error or a difference, in scientific notation."""
    return f"{float(x):.1e}"


def format_vector(values: Any, digits: int = 4) -> str:
    """``[a, b, c]`` for a flat sequence of numbers."""
    return "[" + ", ".join(format_number(v, digits) for v in np.ravel(np.asarray(values))) + "]"


def as_floats(values: Any) -> list[float]:
    """A flat list of Python floats (what facts hold)."""
    return [float(v) for v in np.ravel(np.asarray(values, dtype=np.float64))]


def format_fact(facts: dict[str, Any], key: str, fmt: Callable[[Any], str] = str) -> str:
    """A fact formatted for an explanation, or ``n/a`` when its library is missing."""
    return fmt(facts[key]) if key in facts else "n/a"


def short_message(err: BaseException, limit: int = 60) -> str:
    """The first clause of an exception message, at most ``limit`` characters."""
    text = str(err).split("\n")[0].split(" (")[0].split(". ")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def normal_samples(seed: int, *shape: int) -> np.ndarray:
    """Reproducible float64 normal samples of ``shape``."""
    return np.random.default_rng(seed).normal(size=shape)
