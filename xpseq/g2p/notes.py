"""What G2P notes about the words it was given, raised as warnings in one place, or
handed to the caller.

The code that meets a word it cannot answer as asked (characters the model never saw, a
word longer than the model reads, control characters in a text) returns a note (a
``Warning`` instance) with its answer instead of warning from deep inside; the public
function that was called passes them to :func:`emit`. By default it raises them as
warnings, each pointed at the first frame outside xpseq: the caller's own line, however
many of xpseq's frames lie between (a generator's consumer, for
:meth:`~xpseq.g2p.G2P.pronounce_iter`). A caller that passed ``notes=`` (a callable) to
the public function gets each note handed to it instead, and no warning (``xpseq g2p``
prints them as notes of its own).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable
from types import FrameType

__all__ = ["emit", "outside_level"]


def outside_level() -> int:
    """The ``stacklevel`` that makes a warning raised by the function calling this one
    point at the first frame outside the ``xpseq`` package."""
    frame = sys._getframe(1)                  # the function that will call warnings.warn
    level = 1
    while frame.f_back is not None and _ours(frame):
        frame = frame.f_back
        level += 1
    return level


def emit(notes: Iterable[Warning], to: Callable[[Warning], object] | None = None) -> None:
    """Hand each of ``notes`` to ``to``, or without one raise it as a warning (its own
    category) at the caller's line."""
    notes = list(notes)
    if to is not None:
        for note in notes:
            to(note)
    elif notes:
        level = outside_level()
        for note in notes:
            warnings.warn(note, stacklevel=level)


def _ours(frame: FrameType) -> bool:
    name = str(frame.f_globals.get("__name__", ""))
    return name == "xpseq" or name.startswith("xpseq.")
