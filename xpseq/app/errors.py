"""The failures the ``xpseq`` command reports as one line: :class:`CommandError` (exit code
1), and Ctrl-C (exit code 130).

Ctrl-C. The command's entry point (:mod:`xpseq.__main__`) calls :func:`handle_interrupts`
before it imports the command itself, and from then on a SIGINT, whenever it comes, ends
the process with one line, ``xpseq: interrupted``, on standard error and exit code 130:

* while the command holds nothing (it imports its libraries, parses its arguments, or has
  finished), the process ends at once (:func:`os._exit`): no traceback of a half-done
  import, no exit handler of a half-imported library;
* while a subcommand runs (inside :func:`running`), the first Ctrl-C raises
  ``KeyboardInterrupt`` (unless it lands in an import, where an exception could cross a
  library's C++ code and abort the process: it ends at once there), so that what the
  subcommand holds (a lock, worker processes) is released as the exception unwinds, and the command then reports it
  (:func:`interrupted`), whatever it failed with (:func:`was_interrupted`); a second one
  ends the process at once, and so does one that lands in a finalizer (where Python would
  print it and go on);
* the line is written once, by one ``write``, whatever interrupts its writing; after it,
  standard error goes to ``os.devnull`` (what a half-imported library says while the
  process ends is not for the user);
* when the command has finished, the process ends with its exit code as Python's last exit
  handler (:func:`end`): Python turns its signal handling off for the teardown of its
  modules, when a Ctrl-C would end the process without a word.

Python's own start, before the entry point runs, is the one moment left to the
interpreter. A process started with SIGINT ignored (by a shell, in the background) keeps
ignoring it. A Python caller of :func:`xpseq.app.cli.main` keeps its own handling: nothing
here changes a process's signals, hooks or streams unless the entry point asked.
"""

from __future__ import annotations

import os
import signal
import sys
from os import _exit            # public: ends the process at once, without unwinding
from typing import Any

__all__ = ["CommandError", "oserror_message", "INTERRUPTED", "INTERRUPTED_CODE",
           "handle_interrupts", "explain_interruption", "running", "was_interrupted",
           "interrupted", "end",
           "exit_status", "open_stderr"]

#: The line and exit code of an interrupted command (128 + SIGINT, as a shell reports it).
INTERRUPTED = "xpseq: interrupted"
INTERRUPTED_CODE = 130


class CommandError(Exception):
    """A failure to report as one line and exit code 1."""


def oserror_message(err: OSError) -> str:
    """``"<what>: <file>"`` for an OSError, without the ``[Errno N]`` prefix."""
    if err.filename is not None:
        return f"{err.strerror}: {err.filename}"
    return str(err)


def open_stderr() -> None:
    """With standard error closed (``2>&-``) Python sets ``sys.stderr`` to ``None``, and
    ``print(..., file=sys.stderr)`` then writes to standard output: the notes would enter
    the answers. Descriptor 2 goes to ``os.devnull`` instead (the notes are dropped, as
    the caller asked), so that no file opened later takes it either."""
    if sys.stderr is not None:
        return
    fd = os.open(os.devnull, os.O_WRONLY)
    if fd != 2:
        os.dup2(fd, 2)
        os.close(fd)
    sys.stderr = open(2, "w", closefd=False)


# ------------------------------------------------------------------------- Ctrl-C

_line = (INTERRUPTED + "\n").encode()    # what explain_interruption made of it
_handling = False     # the entry point called handle_interrupts (never unset)
_armed = False        # the next Ctrl-C raises KeyboardInterrupt (once per running())
_delivered = False    # a Ctrl-C was raised as KeyboardInterrupt
_said = False         # the line is written
_code: int | None = None     # the exit code end() ends the process with


def handle_interrupts() -> None:
    """Ctrl-C in this process, from now on, as the module docstring says: the command's
    entry point calls this first. Also registers the end of :func:`end` (the last exit
    handler to run, being the first registered). A process started with SIGINT ignored
    (in the background, by a shell) keeps ignoring it, as its starter asked."""
    global _handling
    import atexit

    open_stderr()
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    _handling = True
    signal.signal(signal.SIGINT, _on_sigint)
    sys.unraisablehook = _ending(sys.unraisablehook)
    atexit.register(_at_exit)


class running:
    """``with running(): ...``: a subcommand runs; in the command's process, the first
    Ctrl-C raises ``KeyboardInterrupt`` within (elsewhere nothing changes)."""

    def __enter__(self) -> None:
        global _armed
        _armed = _handling
        explain_interruption(None)        # (what a previous command in this process said)

    def __exit__(self, *exc: object) -> None:
        global _armed
        _armed = False


def explain_interruption(detail: str | None) -> None:
    """What the line of an interruption says after ``xpseq: interrupted``, from now on:
    what the command was doing and what it leaves (``train``: the epoch under way, the
    epoch its checkpoint holds and the command that continues it).

    Parameters
    ----------
    detail : str or None
        The words after ``xpseq: interrupted`` (one line, e.g. ``"during epoch 3: ..."``);
        ``None`` or ``""``: the line alone.

    Raises
    ------
    ValueError
        ``detail`` holds a line break.
    """
    global _line
    if detail and ("\n" in detail or "\r" in detail):
        raise ValueError(f"explain_interruption: detail must be one line, got {detail!r}")
    _line = (INTERRUPTED + (f" {detail}" if detail else "") + "\n").encode()


def was_interrupted() -> bool:
    """Whether a Ctrl-C was raised in the command (:func:`running`): whatever the command
    then fails with is the interruption, even where a library turned the
    ``KeyboardInterrupt`` into another exception (Python itself does, in a class body:
    ``RuntimeError: Error calling __set_name__``)."""
    return _delivered


def interrupted() -> int:
    """Report the interruption and return its exit code: in the command's process, once
    (and standard error is closed to whatever follows); elsewhere, a line each time."""
    global _armed
    _armed = False                    # a Ctrl-C from here on ends the process at once
    if not _handling:
        print(_line.decode().rstrip("\n"), file=sys.stderr)
        return INTERRUPTED_CODE
    _say()
    try:
        sys.stderr.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        sys.stderr = open(os.devnull, "w")
    except (OSError, ValueError):
        pass
    return INTERRUPTED_CODE


def exit_status(code: Any) -> int:
    """The exit code of ``SystemExit(code)``, as Python would give it (a message printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def end(code: int) -> int:
    """``code``, noted as the exit code of the process (see :func:`handle_interrupts`)."""
    global _code
    _code = code
    return code


def _on_sigint(signum: int, frame: Any) -> None:
    # Python runs a handler between two bytecodes of the main thread, and runs it again,
    # nested, when another SIGINT comes meanwhile: every step below stays right when a
    # nested call ends the process in the middle of it.
    global _armed, _delivered
    if _armed and not _importing(frame):
        _armed = False
        _delivered = True
        raise KeyboardInterrupt
    _say()
    _exit(INTERRUPTED_CODE)


def _importing(frame: Any) -> bool:
    """Whether ``frame`` runs inside an import: an exception raised there can cross a
    library's C++ code (PyTorch's, while it registers its types), which aborts the process
    instead of unwinding; such a Ctrl-C ends the process at once."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _say() -> None:
    """Write the line, once. A nested handler can run at the call of a function and after
    it returns, never between marking the line said and writing it (no call, no jump);
    SIGINT is blocked in this thread around the write, so that no handler interrupts the
    write itself (``EINTR`` on a full pipe)."""
    global _said
    if _said:
        return
    try:
        sys.stderr.flush()                    # the notes before, in their order
    except (AttributeError, OSError, ValueError):
        pass
    blocked = _block()
    _said = True
    try:
        os.write(2, _line)
    except OSError:
        pass
    finally:
        _unblock(blocked)


def _block() -> Any:
    if hasattr(signal, "pthread_sigmask"):
        return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    return None


def _unblock(mask: Any) -> None:
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _ending(hook: Any) -> Any:
    """A ``sys.unraisablehook`` that ends the process on a Ctrl-C which landed in a
    finalizer (Python would print it and go on: the Ctrl-C lost), as on a second Ctrl-C;
    it hands the rest to ``hook``. (Raising it again would not do: Python runs a handler
    at once where the signal comes from its own thread, here inside this hook.)"""
    def unraisable(info: Any) -> None:
        if not issubclass(info.exc_type, KeyboardInterrupt):
            hook(info)
            return
        _say()
        _exit(INTERRUPTED_CODE)

    return unraisable


def _at_exit() -> None:
    """The last exit handler: the command has finished (its code known): flush its output
    and end the process, before Python tears its modules down with signals off. Output
    cut short by its reader ends with 141, as in :func:`xpseq.app.cli.main`."""
    code = _code
    if code is None:                      # a traceback (--debug): Python's own ending
        return
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        code = 141
    except OSError as err:
        print(f"xpseq: error: cannot write the output: {err.strerror}", file=sys.stderr)
        code = 1
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):
        pass
    _exit(code)
