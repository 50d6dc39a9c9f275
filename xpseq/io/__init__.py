"""Files and inputs, one door each: :mod:`xpseq.io.files` for every file xpseq writes
(never over an input or a user's file, whole or not at all), :mod:`xpseq.io.reading` for
what it reads (bounded, named in one-line errors, text kept as data), and
:mod:`xpseq.io.install` for the command that installs a missing optional part.

This folder imports nothing else of xpseq: every other folder may use it.
"""

from . import files, install, progress, reading
from .files import OutputRefused
from .reading import InputError

__all__ = ["files", "install", "progress", "reading", "OutputRefused", "InputError"]
