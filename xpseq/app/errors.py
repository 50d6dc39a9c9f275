"""The failures the ``xpseq`` command reports as one line (exit code 1)."""

from __future__ import annotations

__all__ = ["CommandError", "oserror_message"]


class CommandError(Exception):
    """A failure to report as one line and exit code 1."""


def oserror_message(err: OSError) -> str:
    """``"<what>: <file>"`` for an OSError, without the ``[Errno N]`` prefix."""
    if err.filename is not None:
        return f"{err.strerror}: {err.filename}"
    return str(err)
