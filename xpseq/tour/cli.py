"""Printing the autodiff tour, and its command line.

:func:`format_lesson` lays a :class:`~xpseq.tour.Lesson` out as text; :func:`main` is
``python -m scripts.autodiff_tour`` and ``xpseq tour`` (``--list``, ``--lesson N``, ``--code``);
:func:`format_code` is a lesson's code, the source of the functions it registered.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import textwrap
import time
from typing import Sequence

from xpseq.tour._common import (
    FRAMEWORKS,
    HEADERS,
    LESSONS,
    NOT_INSTALLED,
    Lesson,
    LessonFn,
    code_sections,
    import_torch,
    tour_installed,
)

__all__ = ["format_code", "format_lesson", "main"]


def _wrap(text: str, width: int) -> list[str]:
    """``text`` wrapped to ``width`` columns, at least one (maybe empty) line."""
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def format_lesson(lesson: Lesson, *, label_width: int = 34, cell_width: int = 24) -> str:
    """The lesson as text: a header, the explanation and the side-by-side table."""
    header = f"Lesson {lesson.number}. {lesson.title}"
    lines = [header, "=" * len(header), *textwrap.wrap(lesson.explanation, 100), ""]
    table = [HEADERS, *lesson.rows]
    widths = [min(label_width, max(len(r[0]) for r in table))]
    widths += [min(cell_width, max(len(r[i]) for r in table)) for i in (1, 2, 3)]
    for n, row in enumerate(table):
        cells = [_wrap(cell, w) for cell, w in zip(row, widths)]
        for i in range(max(len(c) for c in cells)):
            parts = [(c[i] if i < len(c) else "").ljust(w) for c, w in zip(cells, widths)]
            lines.append(" | ".join(parts).rstrip())
        if n == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def format_code(fn: LessonFn) -> str:
    """The code of lesson ``fn``: the source of its functions under a heading per library."""
    header = f"Lesson {fn.number}. {fn.title}: the code"      # type: ignore[attr-defined]
    lines = [header, "=" * len(header)]
    for heading, sources in code_sections(fn):
        lines += ["", f"# --- {heading}", ""]
        lines.append("\n\n\n".join(sources))
    return "\n".join(lines) + "\n"


def _versions() -> str:
    """Python's version and each library's, for the heading."""
    found = [f"python {sys.version.split()[0]}"]
    for name in FRAMEWORKS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} {NOT_INSTALLED}")
    return ", ".join(found)


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """Print the lessons (all, or ``--lesson N``), or list them (``--list``). ``prog``
    names the program in its messages (``xpseq tour``; by default, as argparse's, the
    script's file name: ``autodiff_tour.py``)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The same computations on numpy (xpseq's hand-derived gradients), jax "
                    "and torch, with the values each one gives, side by side.")
    parser.add_argument("--lesson", type=int, metavar="N", help="run lesson N only")
    parser.add_argument("--list", action="store_true", help="list the lessons and exit")
    parser.add_argument("--code", action="store_true",
                        help="print each lesson's code (numpy, jax, torch) before its table")
    args = parser.parse_args(argv)
    if args.list:
        for fn in LESSONS:
            print(f"{fn.number:2d}. {fn.title}")        # type: ignore[attr-defined]
        return 0
    chosen = [fn for fn in LESSONS
              if args.lesson is None or fn.number == args.lesson]  # type: ignore[attr-defined]
    if not chosen:
        print(f"{parser.prog}: error: there is no lesson {args.lesson}; choose 1 to "
              f"{len(LESSONS)} (see {parser.prog} --list)", file=sys.stderr)
        return 2
    if tour_installed("torch"):
        import_torch().set_num_threads(1)     # tiny tensors: one thread avoids contention
    print(f"Autodiff tour ({_versions()})\n")
    start = time.perf_counter()
    for fn in chosen:
        began = time.perf_counter()
        if args.code:
            print(format_code(fn))
        lesson = fn()
        print(format_lesson(lesson))
        print(f"({time.perf_counter() - began:.2f} s)\n")
    print(f"{len(chosen)} lesson(s) in {time.perf_counter() - start:.1f} s")
    return 0
