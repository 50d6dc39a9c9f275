"""The one door for every file xpseq writes.

Every checkpoint, export, TSV, PNG and metrics log goes through :func:`write` (one file)
or :func:`write_set` (several files that belong together, in one folder). The door
guarantees, for all of them at once:

* **Nothing a user owns is replaced.** A target that is one of the run's inputs
  (compared as files by :func:`os.path.samefile`, whatever the spelling or link) is
  refused, ``force`` or not; an existing file that xpseq did not write (its ``kind``'s
  recogniser says so) is refused unless ``force=True``; a folder, a FIFO or a device is
  never replaced; an empty path ``""`` is refused.
* **A file appears whole or not at all.** It is written under a temporary name in the
  target's own folder (the same file system), flushed, synced and renamed over the
  target. A set of files is written into a temporary folder *inside* the target folder
  (the same file system even when that folder is a mount point or a symbolic link to
  another file system) and linked into place one by one, the old files kept as links
  beside them until the last is in: a failure (a full disk, an interrupt) puts the
  previous state back, and a run killed half-way is rolled back by the next write into
  that folder (:func:`clean_stale`).
* **What a killed run left is cleaned.** Temporary names carry the writer's process id;
  those of a process that no longer runs are removed by the next write beside them.
* **The door's own names fit.** A temporary, lock or set name adds bytes to the
  target's name; where that would pass the folder's limit on a name (``NAME_MAX``, 255
  bytes on most file systems) the door shortens its own name (a prefix of the target's,
  cut on a character boundary, and a hash of the whole, so that two targets never share
  one), never the target's: every name a user may give is written. A name longer than
  the limit itself (in bytes: 200 ``é`` are 400) is refused by :func:`check` before any
  work (:func:`check_name`).

The run's inputs come from two places: the ``inputs`` a caller passes, and every file
read through :func:`note_input` while a :func:`run` is active (the ``xpseq`` command opens
one around each subcommand; the library's readers note what they open). A target that a
run declares its own (:meth:`Run.declare_output`: ``train --resume M --out M`` continues
the checkpoint it read) may be replaced.

Errors: :class:`OutputRefused` (a :class:`ValueError`) for a refused target, naming it
and what to do (for a name too long: its length and the limit); :class:`OSError` from
the system (no space, no permission) after the previous state is restored.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import os
import pathlib
import re
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Union

__all__ = ["StrPath", "OutputRefused", "Run", "run", "note_input", "declare_output", "check",
           "check_name", "name_limit", "write", "write_set", "remove", "make_folder",
           "clean_stale", "Lock", "file_kind", "KINDS", "Data", "is_checkpoint", "is_own_png",
           "is_metrics_log", "PNG_SOFTWARE"]

#: A file's path: a str or a path-like object of one.
StrPath = Union[str, "os.PathLike[str]"]

#: What is written: the bytes, or a function that writes them into a binary file object.
Data = Union[bytes, Callable[[IO[bytes]], None]]

#: The ``Software`` text chunk of the PNGs xpseq writes (how the door knows them).
PNG_SOFTWARE = "xpseq"

#: The mark in every temporary name the door makes: ``.NAME.xpseq-PID-RANDOM.tmp`` (a
#: file; ``NAME`` shortened where the whole would be too long, see :func:`_fitted`) and
#: ``.xpseq-set-PID-RANDOM`` (a set being written, inside the target folder); RANDOM is 8
#: hexadecimal digits.
_TMP = re.compile(r"^\..+\.xpseq-(\d+)-[0-9a-f]{8}\.tmp$")
_SET = re.compile(r"^\.xpseq-set-(\d+)-[0-9a-f]{8}$")
_OLD = ".old-"                          # inside a set's folder: the file it replaces
_DONE = ".done"                         # inside a set's folder: every file is in place


class OutputRefused(ValueError):
    """A target the door will not write: one of the run's inputs, a file xpseq did not
    write (without ``force``), a folder or special file, an empty path, or a name longer
    than its file system allows."""


# ------------------------------------------------------------------ the run's inputs

@dataclass
class Run:
    """What one run of a command has read (:func:`note_input`) and declared its own
    outputs (:meth:`declare_output`), as ``(device, inode)`` pairs."""

    inputs: dict[tuple[int, int], str] = field(default_factory=dict)
    outputs: set[tuple[int, int]] = field(default_factory=set)

    def note(self, path: StrPath) -> None:
        key = _identity(path)
        if key is not None:
            self.inputs.setdefault(key, os.fspath(path))

    def declare_output(self, path: StrPath) -> None:
        """``path`` is both read and written by this run (a checkpoint resumed into
        itself): the door may replace it."""
        key = _identity(path)
        if key is not None:
            self.outputs.add(key)


_RUN: contextvars.ContextVar[Run | None] = contextvars.ContextVar("xpseq_run", default=None)


@contextlib.contextmanager
def run() -> Iterator[Run]:
    """A run: every file noted by :func:`note_input` inside it is an input that no write
    inside it may replace. Runs nest (the inner one sees the outer's inputs)."""
    outer = _RUN.get()
    inner = Run(dict(outer.inputs) if outer else {}, set(outer.outputs) if outer else set())
    token = _RUN.set(inner)
    try:
        yield inner
    finally:
        _RUN.reset(token)


def note_input(path: StrPath) -> None:
    """Record ``path`` as an input of the current :func:`run` (nothing outside a run)."""
    current = _RUN.get()
    if current is not None:
        current.note(path)


def declare_output(path: StrPath) -> None:
    """Declare ``path`` an output of the current :func:`run` that it may also read (a
    checkpoint resumed into itself): the door may replace it."""
    current = _RUN.get()
    if current is not None:
        current.declare_output(path)


def _identity(path: StrPath) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


# ------------------------------------------------------------------ what is xpseq's

def is_checkpoint(path: pathlib.Path) -> bool:
    """Whether ``path`` is a safetensors file with xpseq metadata (its header alone is
    read)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            return "xpseq" in (f.metadata() or {})
    except (SafetensorError, OSError, ValueError):
        return False


def is_own_png(path: pathlib.Path) -> bool:
    """Whether ``path`` is a PNG that xpseq wrote (its ``Software`` text chunk, within the
    first 4 kB, says ``xpseq``)."""
    head = _head(path, 4096)
    return head.startswith(b"\x89PNG\r\n\x1a\n") and b"Software\x00xpseq" in head


def is_metrics_log(path: pathlib.Path) -> bool:
    """Whether ``path`` starts as a metrics log of ``xpseq train`` does (``epoch,...``),
    or is empty."""
    return _head(path, 6) in (b"epoch,", b"")


def _head(path: pathlib.Path, size: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return b""


#: How the door knows a file of each kind as xpseq's own (``None``: it cannot tell, so
#: an existing file needs ``force``).
KINDS: dict[str, Callable[[pathlib.Path], bool] | None] = {
    "checkpoint": is_checkpoint, "png": is_own_png, "metrics": is_metrics_log,
    "tsv": None, "onnx": None, "json": None, "text": None,
}


def file_kind(mode: int) -> str:
    """``"a folder"``, ``"a FIFO (named pipe)"``, ... for a ``st_mode``."""
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return kind
    return "a special file"


# ------------------------------------------------------------------ the checks

def check(path: StrPath, *, kind: str, inputs: Iterable[StrPath] = (),
          force: bool = False, what: str | None = None) -> pathlib.Path:
    """Refuse, before any work, a target whose writing would destroy what the run did not
    make; return it as a :class:`pathlib.Path` (a symbolic link is resolved: the file it
    points to is what is written).

    Parameters
    ----------
    path
        The file to write.
    kind
        A key of :data:`KINDS`: how an existing file is known as xpseq's.
    inputs
        Files the run reads besides those noted by :func:`note_input`.
    force
        Replace an existing file that xpseq did not write (never an input, a folder or a
        special file).
    what
        How the messages name the target (e.g. ``"--png"``); default ``"the output"``.

    Raises
    ------
    OutputRefused
        ``path`` is empty, ends in ``/``, has a name longer than its file system allows
        (:func:`check_name`), is a folder, a special file, an input of the run, or
        (without ``force``) an existing file that is not of ``kind`` as xpseq writes it.
    TypeError
        ``path`` is not a str or path-like, or ``kind`` is not one of :data:`KINDS`.
    """
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise TypeError(f"the output path must be a str or path-like, got {type(path).__name__}")
    if kind not in KINDS:
        raise TypeError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    name = f"{what} {os.fspath(path)}" if what else os.fspath(path)
    if os.fspath(path) == "":
        raise OutputRefused(f"{what or 'the output path'} is empty; give a file name")
    if os.fspath(path).endswith(("/", os.sep)):
        raise OutputRefused(f"{name} ends in '/': it names a folder, not a file")
    target = pathlib.Path(os.path.realpath(path))
    check_name(target, what=name)
    try:
        info = target.stat()
    except FileNotFoundError:
        return target
    except OSError as err:
        raise OutputRefused(f"{name}: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise OutputRefused(f"{name} is {file_kind(info.st_mode)}; xpseq writes a regular "
                            "file there: choose another name")
    key = (info.st_dev, info.st_ino)
    current = _RUN.get()
    noted = dict(current.inputs) if current else {}
    for source in inputs:
        if source is not None and os.fspath(source) != "":
            ident = _identity(source)
            if ident is not None:
                noted.setdefault(ident, os.fspath(source))
    declared = current.outputs if current else set()
    if key in noted and key not in declared:
        raise OutputRefused(f"{name} is an input of this run ({noted[key]}): writing it "
                            "would destroy it; choose another name")
    recognise = KINDS[kind]
    if not force and key not in declared and not (recognise is not None and recognise(target)):
        raise OutputRefused(f"{name} exists and was not written by xpseq as {_article(kind)}; "
                            "choose another name, or pass --force (force=True in Python) to "
                            "replace it")
    return target


def name_limit(folder: StrPath) -> int:
    """The longest name, in bytes, that ``folder``'s file system takes
    (``os.pathconf(folder, "PC_NAME_MAX")``; 255, Linux's ``NAME_MAX``, where it cannot
    tell)."""
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255
    return limit if limit > 0 else 255


def check_name(path: StrPath, *, what: str | None = None) -> None:
    """Refuse ``path`` when one of its names that does not exist yet (the file's, or a
    folder's that would be made for it) is longer, in bytes, than its file system takes
    (:func:`name_limit` of the nearest folder that exists): no file of that name can be
    written. ``what`` names it in the message (default: the path).

    Raises
    ------
    OutputRefused
        A name is too long; the message gives its length and the limit.
    """
    here = pathlib.Path(os.path.abspath(path))
    missing = []
    while not os.path.lexists(here) and here.parent != here:   # (a name too long: missing)
        missing.append(here.name)
        here = here.parent
    limit = name_limit(here)
    for part in reversed(missing):
        size = len(os.fsencode(part))
        if size > limit:
            shown = part if len(part) <= 30 else part[:12] + "..." + part[-12:]
            raise OutputRefused(f"{what or os.fspath(path)}: the name {shown!r} is {size} "
                                f"bytes long, and its file system takes at most {limit}; "
                                "choose a shorter name")


def _fitted(head: str, name: str, tail: str, limit: int) -> str:
    """``head + name + tail``: a name of the door's own for the target ``name``; where
    that is longer than ``limit`` bytes, ``name`` is shortened to a prefix (cut on a
    character boundary), ``~`` and 16 hexadecimal digits of the SHA-256 of the whole name,
    so that the result fits and distinct targets keep distinct names."""
    whole = head + name + tail
    if len(os.fsencode(whole)) <= limit:
        return whole
    raw = os.fsencode(name)
    digest = hashlib.sha256(raw).hexdigest()[:16]
    room = max(limit - len(os.fsencode(head + tail)) - len(digest) - 1, 0)
    prefix = raw[:room].decode("utf-8", "ignore")       # a cut character is dropped
    return f"{head}{prefix}~{digest}{tail}"


def _article(kind: str) -> str:
    return {"checkpoint": "a checkpoint", "png": "a PNG", "metrics": "a metrics log",
            "tsv": "a TSV file", "onnx": "an ONNX graph", "json": "a JSON file",
            "text": "a text file"}[kind]


# ------------------------------------------------------------------ one file

def write(path: StrPath, data: Data, *, kind: str,
          inputs: Iterable[StrPath] = (), force: bool = False,
          what: str | None = None) -> pathlib.Path:
    """Write ``data`` to ``path`` whole or not at all, after :func:`check`.

    ``data`` is the bytes, or a function given a binary file object to write into (a
    figure's ``savefig``, a CSV writer). The file is written as ``.NAME.xpseq-PID-R.tmp``
    beside the target (``NAME`` shortened where the whole would pass the folder's limit on
    a name), flushed, synced, given the target's permission bits (those of the
    file it replaces, else ``0666`` less the umask) and renamed over it; on any failure
    the temporary file is removed and the target is as it was. Returns ``path`` as a
    :class:`pathlib.Path` (a symbolic link stays a link to the new file).
    """
    target = check(path, kind=kind, inputs=inputs, force=force, what=what)
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    clean_stale(folder)
    mode = _mode_for(target)
    mark = f".xpseq-{os.getpid()}-{secrets.token_hex(4)}.tmp"
    tmp = folder / _fitted(".", target.name, mark, name_limit(folder))
    try:
        _write_new(tmp, data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_folder(folder)
    return pathlib.Path(path)


def _write_new(path: pathlib.Path, data: Data) -> None:
    """Create ``path`` (which must not exist), readable by its owner only until the caller
    sets its mode, and write ``data`` into it (the bytes, or a function given the binary
    file object), flushed and synced to the disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        if isinstance(data, (bytes, bytearray, memoryview)):
            f.write(data)
        else:
            data(f)
        f.flush()
        os.fsync(f.fileno())


def make_folder(path: StrPath) -> pathlib.Path:
    """Create the folder ``path`` and its parents if missing (an output's folder made
    before the work, a cache that a library fills); an existing folder is left as it
    is, and nothing else is ever replaced (:class:`OutputRefused` for an empty path or a
    file in the way)."""
    if os.fspath(path) == "":
        raise OutputRefused("the folder path is empty; give a folder name")
    folder = pathlib.Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputRefused(f"{folder} is not a folder (a file of that name is there)") \
            from None
    return folder


def remove(path: StrPath, *, kind: str) -> None:
    """Remove ``path`` if it is a file of ``kind`` that xpseq wrote (its recogniser says
    so) and not an input of the run; nothing if it does not exist. A file that is not
    xpseq's, or of a kind that cannot say who wrote it, is left (:class:`OutputRefused`)."""
    target = pathlib.Path(path)
    if not target.exists() and not target.is_symlink():
        return
    check(target, kind=kind)
    target.unlink(missing_ok=True)


# ------------------------------------------------------------------ a set of files

def write_set(folder: StrPath, files: Mapping[str, Data], *, kind: str | Mapping[str, str],
              inputs: Iterable[StrPath] = (), force: bool = False,
              what: str | None = None) -> pathlib.Path:
    """Write ``files`` (``{name: data}``) into ``folder``, all of them or none.

    Every target is checked first (:func:`check`; ``kind`` is one kind for all or one
    per name). The files are written and synced in ``folder/.xpseq-set-PID-R/``, on the
    folder's own file system; then each old file is kept there as a link and each new one
    renamed into place; the temporary folder is removed last. On a failure (a full disk,
    an interrupt) the old files are put back and the new ones removed; a run killed
    half-way is rolled back the same way by the next write into ``folder``. Returns
    ``folder`` as a :class:`pathlib.Path`.

    Raises
    ------
    OutputRefused
        ``folder`` is empty, or exists and is not a folder; a file is refused by
        :func:`check`.
    """
    if not isinstance(folder, (str, os.PathLike)) or isinstance(folder, bytes):
        raise TypeError(f"the output folder must be a str or path-like, got "
                        f"{type(folder).__name__}")
    if os.fspath(folder) == "":
        raise OutputRefused(f"{what or 'the output folder'} is empty; give a folder name")
    base = pathlib.Path(os.path.realpath(folder))
    if base.exists() and not base.is_dir():
        raise OutputRefused(f"{what or 'the output folder'} {os.fspath(folder)} is not a "
                            f"folder (xpseq writes {len(files)} files into a folder)")
    for name in files:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"write_set: {name!r} is not a plain file name")
        check(base / name, kind=kind if isinstance(kind, str) else kind[name],
              inputs=inputs, force=force, what=None)
    base.mkdir(parents=True, exist_ok=True)
    clean_stale(base)
    work = base / f".xpseq-set-{os.getpid()}-{secrets.token_hex(4)}"
    work.mkdir()
    limit = name_limit(work)
    try:
        for name, data in files.items():
            _write_new(work / name, data)
            os.chmod(work / name, _mode_for(base / name))
        for name in files:                   # the old files kept, then the new moved in
            if (base / name).exists():
                os.link(base / name, work / _fitted(_OLD, name, "", limit))
        _sync_folder(work)
        for name in files:
            if (base / name).exists():
                os.replace(_second_link(work, name, limit), base / name)
            else:
                os.link(work / name, base / name)
        _sync_folder(base)
        (work / _DONE).touch()               # from here on, a kill leaves the new set
    except BaseException:
        _roll_back(base, work)
        raise
    shutil.rmtree(work, ignore_errors=True)
    return pathlib.Path(folder)


def _second_link(work: pathlib.Path, name: str, limit: int) -> pathlib.Path:
    """A second name for ``work/name`` (renamed over the target; ``work/name`` stays, so
    that a rollback can tell the new file by its inode)."""
    extra = work / _fitted(".new-", name, "", limit)
    os.link(work / name, extra)
    return extra


def _roll_back(base: pathlib.Path, work: pathlib.Path) -> None:
    """Undo a set written into ``work``: each new file in ``base`` removed, each old one
    (kept as ``work/.old-NAME``, ``NAME`` shortened as :func:`_fitted` does) put back;
    then ``work`` removed. A set marked done is complete: only ``work`` is removed."""
    if (work / _DONE).exists():
        shutil.rmtree(work, ignore_errors=True)
        return
    limit = name_limit(work)
    for new in list(work.iterdir()) if work.is_dir() else []:
        if new.name.startswith("."):
            continue
        target = base / new.name
        try:
            if target.exists() and os.path.samefile(target, new):
                target.unlink()
        except OSError:
            pass
        old = work / _fitted(_OLD, new.name, "", limit)
        if old.exists() and not target.exists():
            os.link(old, target)
    shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------ one writer at a time

class Lock:
    """An exclusive ``fcntl.flock`` on ``.M.safetensors.lock`` beside ``train --out
    M.safetensors``, held for the run, so that a second run on the same output is refused
    in one line instead of both writing it (one lock file per target: a name too long for
    the folder is shortened the same way by every run, see :func:`_fitted`). The lock file
    is removed at the end (a lock taken on a file that another run removed meanwhile is
    taken again)."""

    def __init__(self, out: str):
        target = pathlib.Path(os.path.realpath(out))
        self.out = out
        self.path = target.with_name(_fitted(".", target.name, ".lock",
                                             name_limit(target.parent)))
        self.fd: int | None = None

    def __enter__(self) -> Lock:
        import fcntl

        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise OutputRefused(f"cannot create the lock file {self.path}: "
                                    f"{err.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise OutputRefused(f"another xpseq train is writing {self.out} (it holds "
                                    f"{self.path}); wait for it to end, or choose another "
                                    "--out") from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                return self
            os.close(fd)                # the file was removed by the run that held it

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = None


# ------------------------------------------------------------------ what a kill leaves

def clean_stale(folder: StrPath) -> None:
    """Remove what a killed writer left in ``folder``: temporary files of a process that no
    longer runs (regular files named as :func:`write` names them, shortened or not), and
    its unfinished sets (folders, rolled back: the previous files put back)."""
    base = pathlib.Path(folder)
    try:
        entries = list(base.iterdir())
    except OSError:
        return
    for entry in entries:
        tmp, work = _TMP.match(entry.name), _SET.match(entry.name)
        found = tmp or work
        if found is None or _alive(int(found.group(1))):
            continue
        if work and entry.is_dir() and not entry.is_symlink():
            _roll_back(base, entry)
        elif tmp and entry.is_file() and not entry.is_symlink():
            entry.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _mode_for(target: pathlib.Path) -> int:
    """The permission bits for a new file at ``target``: those of the file already there,
    else ``0666`` less the umask (read from ``/proc`` where it can be, without changing
    it)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode) & 0o777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _sync_folder(folder: pathlib.Path) -> None:
    """The folder's entries synced (where the system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.EBADF, errno.EROFS):
            raise
    finally:
        os.close(fd)
