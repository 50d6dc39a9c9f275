"""The one door for what xpseq reads from outside: files, command-line text and lines.

Every reader here is bounded before it parses (bytes, nesting, digits, tokens) and names
the file or argument in a one-line error (:class:`InputError`, a :class:`ValueError`);
every file it opens is noted as an input of the current run
(:func:`xpseq.io.files.note_input`), so that no write of the run replaces it.

Text is data: :func:`clean_text` drops the characters that would act on a terminal or
reorder what is shown (C0 and C1 controls, ESC sequences, bidirectional overrides, NUL)
and :func:`shown` escapes user text inside a message.
"""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from typing import Any, Iterator, Sequence

from . import files
from .files import StrPath

__all__ = ["InputError", "read_bytes", "read_toml", "check_size", "argument",
           "clean_text", "shown", "escaped", "cut_tokens", "iterate", "CONFIG_BYTES", "CONFIG_DEPTH",
           "CONFIG_DIGITS", "ONNX_BYTES", "MAX_TOKENS"]

#: The largest configuration file read (bytes); a real one is a few hundred.
CONFIG_BYTES = 1 << 20
#: The deepest nesting of tables and arrays in a configuration file.
CONFIG_DEPTH = 32
#: The most digits of a number in a configuration file (a training option is at most a
#: few; Python refuses to convert more than 4300).
CONFIG_DIGITS = 100
#: The largest ONNX graph read: a protobuf message cannot exceed 2 GiB.
ONNX_BYTES = 2**31 - 1
#: The most tokens of one source sentence that the model reads, unless the caller says
#: otherwise; a longer one is cut, with a note.
MAX_TOKENS = 1000


class InputError(ValueError):
    """An input xpseq refuses: too large, too deep, not UTF-8, not what was expected. The
    message names the file or argument."""


def read_bytes(path: StrPath, *, limit: int, what: str) -> bytes:
    """The bytes of the file ``path``, at most ``limit`` of them: a regular file's size is
    checked before it is read, and every read stops at ``limit + 1`` bytes (a pipe, a
    device such as ``/dev/zero``, a file that grows).

    Raises
    ------
    FileNotFoundError
        No such file.
    InputError
        ``path`` is a folder or a special file (a FIFO, ``/dev/zero``), cannot be read, or
        is larger than ``limit`` bytes. ``what`` names it (``"--config run.toml"``).
    """
    name, info = _stat(path, what)
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{name} is a folder, not a file")
    if stat.S_ISREG(info.st_mode) and info.st_size > limit:
        raise InputError(f"{name} is {info.st_size:,} bytes; at most {limit:,} are read")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise InputError(f"{name}: {err.strerror}") from None
    if len(data) > limit:
        raise InputError(f"{name} is more than {limit:,} bytes; at most {limit:,} are read")
    files.note_input(path)
    return data


def check_size(path: StrPath, *, limit: int, what: str) -> int:
    """The size of the regular file ``path`` in bytes, refused (:class:`InputError`)
    above ``limit`` before anything of it is read (an ONNX graph, a checkpoint)."""
    name, info = _stat(path, what)
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{name} is {files.file_kind(info.st_mode)}, not a file")
    if info.st_size > limit:
        raise InputError(f"{name} is {info.st_size:,} bytes; at most {limit:,} are read")
    files.note_input(path)
    return info.st_size


def _stat(path: StrPath, what: str) -> tuple[str, os.stat_result]:
    """How messages name ``path`` (``what`` and the path) and its ``os.stat``; a missing
    file a FileNotFoundError, another failure an :class:`InputError`."""
    name = f"{what} {os.fspath(path)}"
    try:
        return name, os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{name}: no such file") from None
    except OSError as err:
        raise InputError(f"{name}: {err.strerror}") from None


_LONG_NUMBER = re.compile(rf"[0-9_]{{{CONFIG_DIGITS + 1},}}")


def read_toml(path: StrPath, *, what: str = "--config") -> dict[str, Any]:
    """A TOML file as a dict, bounded: at most :data:`CONFIG_BYTES` bytes, read as UTF-8,
    no number of more than :data:`CONFIG_DIGITS` digits (named with its line and key), no
    nesting deeper than :data:`CONFIG_DEPTH`.

    Raises
    ------
    FileNotFoundError
        No such file.
    InputError
        Any of the bounds above, not UTF-8, or not valid TOML; one line naming ``what``
        and ``path``.
    """
    try:
        import tomllib
    except ModuleNotFoundError:                       # Python 3.10
        import tomli as tomllib

    name = f"{what} {os.fspath(path)}"
    data = read_bytes(path, limit=CONFIG_BYTES, what=what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise InputError(f"{name}: not UTF-8 (line {line}: {err.reason} at byte "
                         f"{err.start})") from None
    for number, row in enumerate(text.splitlines(), 1):
        long = _LONG_NUMBER.search(row.split("#", 1)[0])
        if long is not None:
            key = row.split("=", 1)[0].strip() if "=" in row else "?"
            raise InputError(f"{name}: line {number}, key {key!r}: a number of "
                             f"{len(long.group(0))} digits; at most {CONFIG_DIGITS} are read")
    depth = _bracket_depth(text)
    if depth > CONFIG_DEPTH:
        raise InputError(f"{name}: nested {depth} levels deep; at most {CONFIG_DEPTH} are "
                         "read")
    try:
        parsed: dict[str, Any] = tomllib.loads(text)
        return parsed
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{name}: not valid TOML: {err}") from None
    except (RecursionError, ValueError) as err:
        raise InputError(f"{name}: cannot be read: {' '.join(str(err).split())[:200]}") \
            from None


def _bracket_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings and comments (an upper bound
    on what a parser recurses into; linear time)."""
    depth = deepest = 0
    quote = ""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def argument(value: str, what: str) -> str:
    """A command-line argument as text: refused (:class:`InputError`) when it is not
    UTF-8 (Python keeps undecodable bytes as lone surrogates, which would be written out
    as bytes that are not UTF-8 either)."""
    for at, c in enumerate(value):
        if "\udc80" <= c <= "\udcff":
            raise InputError(f"{what} is not UTF-8 (byte 0x{ord(c) - 0xdc00:02x} at "
                             f"character {at + 1})")
    return value


#: Characters that act on a terminal or on how text is shown rather than being text:
#: C0 controls (but tab and newline), DEL, C1 controls, the bidirectional overrides and
#: isolates, and an ESC with the sequence it starts.
_NOT_TEXT = r"\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c"
_CONTROL = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)?"
                      rf"|[{_NOT_TEXT}]", re.DOTALL)


def clean_text(text: str) -> tuple[str, list[str]]:
    """``text`` without the characters that are not text (:data:`_CONTROL`), and what was
    dropped (each as found). Private-use and unassigned characters are kept: they are the
    user's data (a front end that cannot say them leaves them out)."""
    dropped: list[str] = []

    def drop(m: re.Match[str]) -> str:
        dropped.append(m.group(0))
        return " " if m.group(0) in ("\x0b", "\x0c", "\r", "\x85") else ""

    return _CONTROL.sub(drop, text), dropped


def escaped(text: str) -> str:
    """``text`` with the characters that are not text (:func:`clean_text`'s) escaped as
    ``\\x1b``, ``\\u202e`` (newlines and tabs kept): safe to write to a terminal."""
    return _CONTROL_CHAR.sub(lambda m: shown(m.group(0)), text)


_CONTROL_CHAR = re.compile(rf"[{_NOT_TEXT}\udc80-\udcff]")


def shown(text: str, limit: int = 60) -> str:
    """User text as a message shows it: escaped as Python's ``repr`` escapes it (control
    and invisible characters as ``\\x1b``, ``\\u202e``), cut to ``limit`` characters."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    out = []
    for c in cut:
        if "\udc80" <= c <= "\udcff":                  # a byte that was not UTF-8
            out.append(f"\\x{ord(c) - 0xdc00:02x}")
        elif c.isprintable() and unicodedata.category(c) not in ("Cf", "Co", "Cs"):
            out.append(c)
        else:
            out.append(repr(c)[1:-1] if c.isascii() or not c.isprintable()
                       and unicodedata.category(c) == "Cc" else f"\\u{ord(c):04x}")
    return "".join(out)


def cut_tokens(tokens: Sequence[Any], limit: int | None) -> tuple[list[Any], int]:
    """The first ``limit`` tokens of a sentence and how many were cut (``limit=None``:
    none)."""
    tokens = list(tokens)
    if limit is None or len(tokens) <= limit:
        return tokens, 0
    return tokens[:limit], len(tokens) - limit


def iterate(value: Any, what: str, *, of: str, example: str,
            forms: str = "a list, a tuple, a generator ...") -> Iterator[Any]:
    """An iterator over ``value``, which must be an iterable of items and not one string.

    A bare ``str`` (or ``bytes``) is iterable too, but as one item given where many were
    meant (``pronounce("cat")`` would read three words) it is refused.

    Parameters
    ----------
    value
        What the caller was given.
    what
        The argument as the message names it, with its function:
        ``"pronounce: words"``.
    of
        What the items are: ``"str"``, ``"sentences"``.
    example
        An example of the right form, shown when one string is given.
    forms
        The forms accepted, shown when ``value`` is not iterable.

    Raises
    ------
    TypeError
        ``value`` is one string, or is not iterable.

    Examples
    --------
    >>> list(iterate(("cat", "dog"), "pronounce: words", of="str", example="['cat']"))
    ['cat', 'dog']
    >>> iterate("cat", "pronounce: words", of="str", example="['cat']")
    Traceback (most recent call last):
    TypeError: pronounce: words must be a sequence of str (['cat'], not one str)
    """
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of {of} ({example}, not one "
                        f"{type(value).__name__})")
    try:
        return iter(value)
    except TypeError:
        raise TypeError(f"{what} must be an iterable of {of} ({forms}), got "
                        f"{type(value).__name__}") from None
