"""Standard input as the commands read it: lines as they come, in chunks (``translate``,
``g2p``); decoded as UTF-8 whatever the locale says, a closed or
undecodable input a one-line :class:`~xpseq.app.errors.CommandError`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .errors import CommandError

__all__ = ["chunks", "split_lines", "LINE_BYTES", "CHUNK_BYTES"]


#: The longest line ``xpseq g2p`` reads from stdin (in bytes): far beyond any word it
#: answers (:data:`xpseq.g2p.MAX_WORD_LENGTH` characters), a bound on what one line holds.
LINE_BYTES = 2**20
#: The most bytes of lines answered together: a chunk ends at this many bytes or at its
#: number of lines, whichever comes first (a text line's working memory is tens of times
#: its bytes; 64 lines of a megabyte each would hold gigabytes).
CHUNK_BYTES = 2**20


def chunks(size: int, what: str = "words") -> Any:
    """The lines of stdin as they come, in lists of at most ``size`` (a generator).

    Reads the descriptor itself (no buffer holds lines back): a list ends at ``size``
    lines or :data:`CHUNK_BYTES` bytes (at least one line), or earlier when no more input
    is ready (``select``; where it cannot tell, at
    each read). Each line is decoded as UTF-8 whatever the locale says (a leading BOM
    removed); ``\\n`` or ``\\r\\n`` ends it, silently, and so does a ``\\r`` at the
    very end of the input (a ``\\r`` elsewhere is the line's, for the command to judge).
    Closed stdin, input that is not UTF-8 and a line of more than :data:`LINE_BYTES`
    bytes are :class:`CommandError`s, raised after the lines before them are yielded.
    ``what`` names the lines in the messages (``"words"``, ``"sentences"``)."""
    if sys.stdin is None:
        raise CommandError(f"no {what} given and standard input is closed")
    read, ready = _reader(what)
    return split_lines(read, ready, size, what)


def _reader(what: str = "words") -> tuple[Any, Any]:
    """``(read, ready)`` for stdin: ``read()`` returns the bytes available (``b""`` at
    its end), ``ready()`` whether a read would not wait."""
    import select

    try:
        fd = sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):       # not a file (replaced in-process)
        buffer = getattr(sys.stdin, "buffer", None)
        if buffer is not None:
            return (lambda: getattr(buffer, "read1", buffer.read)(65536)), (lambda: False)
        return (lambda: sys.stdin.read(65536).encode("utf-8")), (lambda: False)

    def read() -> bytes:
        import errno

        try:
            return os.read(fd, 65536)
        except OSError as err:
            if err.errno == errno.EBADF:
                raise CommandError(f"no {what} given and standard input is closed") from None
            raise CommandError(f"cannot read standard input: {err.strerror}") from None

    def ready() -> bool:
        try:
            return bool(select.select([fd], [], [], 0)[0])
        except (OSError, ValueError):      # e.g. Windows, where select takes sockets only
            return False

    return read, ready


def split_lines(read: Any, ready: Any, size: int, what: str = "words") -> Any:
    """:func:`chunks`' generator over ``read`` and ``ready``."""
    from xpseq.g2p import MAX_WORD_LENGTH

    pending = bytearray()               # the line being read
    lines: list[bytes] = []             # complete lines, not yet decoded
    number, offset = 0, 0               # lines decoded; bytes before the next line
    failure: CommandError | None = None
    eof = False
    while True:
        while not eof and (not lines or (len(lines) < size and ready()
                                         and sum(map(len, lines)) < CHUNK_BYTES)):
            data = read()
            if not data:
                eof = True
                if pending:
                    lines.append(bytes(pending))
                break
            parts = data.split(b"\n")
            if len(pending) + len(parts[0]) > LINE_BYTES:    # the line being read
                eof = True
                bound = (f" (a word has at most {MAX_WORD_LENGTH} characters)"
                         if what == "words" else "")
                failure = CommandError(
                    f"standard input line {number + len(lines) + 1} is longer than "
                    f"{LINE_BYTES} bytes{bound}")
                break
            if len(parts) > 1:
                lines.append(bytes(pending + parts[0]))
                pending = bytearray(parts[-1])
                lines += parts[1:-1]
            else:
                pending += data
        if not lines:
            if failure is not None:
                raise failure
            return
        take, held = 0, 0
        while take < min(size, len(lines)) and (take == 0 or held + len(lines[take])
                                                 <= CHUNK_BYTES):
            held += len(lines[take])
            take += 1
        batch, lines = lines[:take], lines[take:]
        words: list[str] = []
        for raw in batch:
            number += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                if words:
                    yield words
                raise CommandError(f"standard input is not UTF-8 (line {number}: "
                                   f"{err.reason} at byte {offset + err.start})") from None
            offset += len(raw) + 1
            text = text.removesuffix("\r")            # a CRLF line end, silently
            words.append(text.removeprefix("\ufeff") if number == 1 else text)
        yield words
