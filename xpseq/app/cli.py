"""The ``xpseq`` command: its subcommands, one module each (:mod:`xpseq.app.commands`).

This module puts together the subcommands' parsers (each module of
:mod:`xpseq.app.commands` builds its own), applies the defaults a subcommand reads from a
file or a stored run (its module's optional ``defaults(args, argv)`` hook), dispatches to
the subcommand's ``check`` and ``run`` and turns what fails into one line and an exit code.
It knows the subcommands only through that protocol, none of them by name.

Every model subcommand takes ``--backend`` (numpy, jax, torch, array_api_strict; numpy and
array_api_strict fit a model with hand-derived gradients, slowly), ``--compile`` (torch
with ``torch.compile``), ``--dtype`` (float32 or float64) and ``--seed``.

Errors are one line on stderr and an exit code: 2 for bad arguments (``xpseq CMD: error:
...``; values are checked by the parser, before anything is created on disk; a mistyped
subcommand, choice or option names the nearest one, ``did you mean --model?``), 1 for every
other failure (``xpseq: error: ...``: missing or unreadable files, damaged checkpoints, a
diverging run, a full disk ...), 130 when interrupted (``xpseq: interrupted``, whenever
the Ctrl-C comes: the entry point, :mod:`xpseq.__main__`, takes it over before this module
is imported; :mod:`xpseq.app.errors`). Output cut short by its reader
(``xpseq CMD ... | head -1``) ends quietly with 141, as a program killed by SIGPIPE
would. ``xpseq --debug CMD`` (or ``XPSEQ_DEBUG=1``) shows the traceback instead.

Input text is split on whitespace into tokens, as the model read its data. Words it never
saw become ``<unk>`` (listed in a note on stderr); an empty line gives an empty line; a
sentence longer than ``--max-tokens`` is cut to that many tokens, with a note.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from types import ModuleType
from typing import Any, NamedTuple, Sequence

from xpseq import backends
from xpseq.io import files, reading

from . import options as opts
from .commands import COMMANDS, Invocation
from .errors import (
    CommandError,
    interrupted,
    open_stderr,
    oserror_message,
    running,
    was_interrupted,
)
from .options import positive

__all__ = ["main", "build", "positive"]   # positive: also the scripts' argparse type

# -------------------------------------------------------------------------- parser


def _version() -> str:
    """``xpseq VERSION`` and the versions of the array libraries installed."""
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    found = [f"{n} {v}" for n in ("numpy", "jax", "torch", "array-api-strict")
             if (v := version(n))]
    return f"xpseq {version('xpseq') or 'unknown'} ({', '.join(found)})"


class Command(NamedTuple):
    """The command's parser and each subcommand's module by the subcommand's name."""

    parser: argparse.ArgumentParser
    modules: dict[str, ModuleType]


def build() -> Command:
    """The ``xpseq`` parser: the global options, then each subcommand's parser, which its
    module in :mod:`xpseq.app.commands` builds (:data:`~xpseq.app.commands.COMMANDS`)."""
    parser = opts.Parser(
        prog="xpseq", description="Sequence-to-sequence learning with attention, written once "
        "for NumPy, JAX and PyTorch.")
    opts.global_options(parser, _version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules: dict[str, ModuleType] = {}
    for module in COMMANDS:
        known = set(sub.choices)
        module.add_parser(sub)
        modules.update((name, module) for name in sub.choices if name not in known)
    return Command(parser, modules)


# ------------------------------------------------- defaults of a file or a stored run


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]] | int:
    """``argv`` parsed, with the defaults that the subcommand's ``defaults(args, argv)``
    hook reads (a file, a stored run) merged in (``set_defaults`` of its parser, so that
    the options typed win); an exit code where that failed."""
    cmd = build()
    args, extra = cmd.parser.parse_known_args(argv)
    hook = getattr(cmd.modules[args.command], "defaults", None)
    if hook is None:
        return args, extra
    try:
        defaults = hook(args, argv)
    except argparse.ArgumentError as err:             # a value its option refuses
        args.parser.error(str(err))
    except (CommandError, ValueError) as err:
        print(f"xpseq: error: {err}", file=sys.stderr)
        return 1
    if defaults:
        args.parser.set_defaults(**defaults)
        args, extra = cmd.parser.parse_known_args(argv)
    return args, extra


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    open_stderr()
    if sys.stdout is None:
        print("xpseq: error: cannot write the output: standard output is closed",
              file=sys.stderr)
        return 1
    for number, value in enumerate(argv, 1):       # text in, text out: never other bytes
        try:
            reading.argument(value, f"argument {number} ({reading.shown(value)})")
        except reading.InputError as err:
            print(f"xpseq: error: {err}", file=sys.stderr)
            return 2
    parsed = _parse(argv)
    if isinstance(parsed, int):
        return parsed
    args, extra = parsed
    debug = args.debug or os.environ.get("XPSEQ_DEBUG", "") not in ("", "0")
    try:
        backends.set_threads(args.threads, jax=args.threads is not None)
    except ValueError as err:                 # OMP_NUM_THREADS beyond the CPUs
        if debug:
            raise
        print(f"xpseq: error: {_one_line(err)}", file=sys.stderr)
        return 1
    # What a subcommand may need of its call (one that reruns itself in other processes)
    args.invocation = Invocation(tuple(argv), main)
    if extra:
        # A subcommand that names its ``more`` positional: words after an option are more
        # of it (argparse does not intermix positionals and options with subcommands).
        more: str | None = getattr(args, "more", None)
        if more is None or any(e.startswith("-") for e in extra):
            args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
        else:
            setattr(args, more, list(getattr(args, more)) + extra)
    if getattr(args, "check", None) is not None:
        args.check(args)                      # the subcommand's own: its options together
    try:
        # one run: every file it reads is an input that none of its writes may replace
        with warnings.catch_warnings(), files.run():
            warnings.showwarning = _notes(warnings.showwarning)
            with running():                   # Ctrl-C: unwind, releasing what it holds
                code = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, and keep Python from complaining
        # again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return interrupted()
    except Exception as err:  # noqa: BLE001 (one line for every failure; --debug for more)
        if was_interrupted():                 # what a Ctrl-C became on its way out
            return interrupted()
        if debug:
            raise
        print(f"xpseq: error: {_one_line(err)}", file=sys.stderr)
        return 1


def _notes(show: Any) -> Any:
    """A ``warnings.showwarning`` that prints xpseq's own warnings (e.g. a checkpoint whose
    metadata no digest covers) as one ``xpseq: note: ...`` line, and hands the others
    to ``show``."""
    def showwarning(message: Warning | str, category: type[Warning], filename: str,
                    lineno: int, file: Any = None, line: str | None = None) -> None:
        if category.__module__.split(".")[0] == "xpseq":
            print(f"xpseq: note: {reading.escaped(str(message))}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


def _one_line(err: BaseException) -> str:
    """An exception as one line: its message (with the kind of failure where the message
    alone would not say), and a hint to ``--debug`` for what the command did not expect;
    characters that are not text escaped (a file name may hold an ESC)."""
    return reading.escaped(_message(err))


def _message(err: BaseException) -> str:
    if isinstance(err, CommandError):
        return str(err)
    if isinstance(err, OSError) and err.errno is not None:
        if err.filename is not None:
            return oserror_message(err)
        return f"cannot write the output: {err.strerror}"
    text = " ".join(str(err).split()) or type(err).__name__
    expected = (ValueError, TypeError, FloatingPointError, FileNotFoundError)
    if isinstance(err, expected):
        return text
    return f"{type(err).__name__}: {text} (run with --debug for the traceback)"


if __name__ == "__main__":
    sys.exit(main())
