"""What G2P notes about the words it was given, raised as warnings in one place.

The code that meets a word it cannot answer as asked (characters the model never saw, a
word longer than the model reads, control characters in a text) returns a note (a
``Warning`` instance) with its answer instead of warning from deep inside; the public
function that was called raises them with :func:`emit`, which points each at the first
frame outside xpseq: the caller's own line, however many of xpseq's frames lie between
(a generator's consumer, for :meth:`~xpseq.g2p.G2P.pronounce_iter`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable
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


def emit(notes: Iterable[Warning]) -> None:
    """Raise each of ``notes`` as a warning (its own category) at the caller's line."""
    notes = list(notes)
    if notes:
        level = outside_level()
        for note in notes:
            warnings.warn(note, stacklevel=level)


def _ours(frame: FrameType) -> bool:
    name = str(frame.f_globals.get("__name__", ""))
    return name == "xpseq" or name.startswith("xpseq.")
