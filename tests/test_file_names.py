"""Names that fit (:mod:`xpseq.io.files`): the door's own names (temporary files, locks,
the entries of a set being written) never pass the folder's limit on a name, whatever
legal name a user gives, in bytes (multibyte characters included); a name that cannot be
written at all is refused before any work, by the library and by the commands; what a
killed writer left under a shortened name is cleaned, and a user's file is not."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest
from helpers import assert_ok, dead_pid, show

from xpseq.io import OutputRefused, files

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _limit(folder: pathlib.Path) -> int:
    return files.name_limit(folder)


def _name(size: int, suffix: str = ".tsv", char: str = "a") -> str:
    """A name of exactly ``size`` bytes: ``char`` repeated (padded with ``a``), then
    ``suffix``."""
    room = size - len(suffix.encode())
    count = room // len(char.encode())
    name = char * count + "a" * (room - count * len(char.encode())) + suffix
    assert len(os.fsencode(name)) == size
    return name


def _listing(folder: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _spy(folder: pathlib.Path, seen: list[str], data: bytes = b"x"):
    """A writer for :func:`files.write` that records the names in ``folder`` while the
    file is being written (the temporary one among them)."""
    def write(f):
        seen.extend(os.listdir(folder))
        f.write(data)
    return write


# ------------------------------------------------------------------ one file


@pytest.mark.parametrize("back", [13, 0])         # 242 and 255 bytes where NAME_MAX is 255
def test_a_long_legal_name_is_written_and_replaced(tmp_path, back):
    limit = _limit(tmp_path)
    target = tmp_path / _name(limit - back)
    seen: list[str] = []
    files.write(target, _spy(tmp_path, seen, b"epoch,one"), kind="metrics")
    files.write(target, b"epoch,two", kind="metrics")         # its own file: replaced
    assert _listing(tmp_path) == {target.name: b"epoch,two"}    # no temporary left
    [tmp] = [n for n in seen if n != target.name]
    assert len(os.fsencode(tmp)) <= limit and tmp.startswith(".") and tmp.endswith(".tmp")


@pytest.mark.parametrize("char", ["é", "€", "😀"])
def test_multibyte_names_near_the_limit(tmp_path, char):
    """A name of 2-, 3- and 4-byte characters up to the limit is written; the temporary
    name is cut on a character boundary (it decodes as UTF-8) and fits."""
    limit = _limit(tmp_path)
    for size in (limit - 1, limit):
        target = tmp_path / _name(size, ".tsv", char)
        seen: list[str] = []
        files.write(target, _spy(tmp_path, seen), kind="tsv")
        assert target.read_bytes() == b"x"
        for name in seen:
            raw = os.fsencode(name)
            assert len(raw) <= limit
            raw.decode("utf-8")                    # whole characters (no lone bytes)
        target.unlink()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_of_a_long_name_leaves_nothing(tmp_path):
    target = tmp_path / _name(_limit(tmp_path))

    def fails(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        files.write(target, fails, kind="tsv")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["a" * 256, "é" * 128, "é" * 200, "😀" * 64 + ".png"])
def test_a_name_longer_than_the_limit_is_refused_naming_it(tmp_path, name):
    """Bytes, not characters: 200 ``é`` are 400 bytes. Refused by check (the message names
    the argument, the length and the limit) and by write, before anything is made."""
    limit = _limit(tmp_path)
    size = len(os.fsencode(name))
    if size <= limit:
        pytest.skip(f"this file system takes names of {limit} bytes")
    with pytest.raises(OutputRefused) as caught:
        files.check(tmp_path / name, kind="png", what="--png")
    message = str(caught.value)
    assert message.startswith("--png ") and "\n" not in message
    assert f"{size} bytes" in message and f"at most {limit}" in message
    with pytest.raises(OutputRefused, match=f"{size} bytes"):
        files.write(tmp_path / "new" / name, b"x", kind="png")
    with pytest.raises(OutputRefused, match=f"{size} bytes"):   # a folder's name too
        files.write(tmp_path / name / "a.png", b"x", kind="png")
    assert list(tmp_path.iterdir()) == []                       # no folder made either


# ------------------------------------------------------------------ a set of files


def test_a_set_of_long_names_is_written_and_replaced(tmp_path):
    limit = _limit(tmp_path)
    out = tmp_path / _name(limit, "")                   # the folder's name at the limit
    names = [_name(limit, ".tsv"), _name(limit, ".tsv", "é"), _name(limit - 13, ".onnx")]
    files.write_set(out, {n: b"old " + n[-4:].encode() for n in names}, kind="tsv")
    files.write_set(out, {n: b"new " + n[-4:].encode() for n in names}, kind="tsv",
                    force=True)                        # the old ones kept as links meanwhile
    assert _listing(out) == {n: b"new " + n[-4:].encode() for n in names}


def test_a_set_of_long_names_killed_half_way_is_rolled_back(tmp_path):
    """A writer killed (``os._exit``) as it moves its second file in: the next clean of
    the folder puts the old files back under their long names."""
    limit = _limit(tmp_path)
    out = tmp_path / "out"
    names = [_name(limit, ".tsv", "b"), _name(limit, ".tsv", "é")]
    files.write_set(out, {n: b"old" for n in names}, kind="tsv")
    script = f"""
import os, pathlib
from xpseq.io import files
out, moves, real = pathlib.Path({str(out)!r}), [], os.replace
def replace(src, dst):
    if pathlib.Path(dst).parent == out:
        moves.append(dst)
        if len(moves) == 2:
            os._exit(9)
    return real(src, dst)
os.replace = replace
files.write_set(out, {{n: b"new" for n in {names!r}}}, kind="tsv", force=True)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 9, show(done)
    assert any(p.name.startswith(".xpseq-set-") for p in out.iterdir())   # left behind
    files.clean_stale(out)
    assert _listing(out) == {n: b"old" for n in names}


# ------------------------------------------------------------------ the lock


def test_the_lock_of_a_long_name_fits_and_is_one_per_target(tmp_path):
    limit = _limit(tmp_path)
    first = tmp_path / _name(limit, ".safetensors")
    second = tmp_path / (first.name[:-13] + "b.safetensors")    # the same long prefix
    with files.Lock(str(first)) as lock:
        assert lock.path.exists() and len(os.fsencode(lock.path.name)) <= limit
        with pytest.raises(OutputRefused, match="another xpseq train is writing"):
            with files.Lock(str(first)):                 # the same target: the same file
                pass
        with files.Lock(str(second)) as other:           # another target: another lock
            assert other.path != lock.path
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ what a kill leaves


def test_a_long_named_leftover_of_a_dead_writer_is_cleaned_and_users_files_kept(tmp_path):
    limit = _limit(tmp_path)
    target = tmp_path / _name(limit)
    script = (f"import os; from xpseq.io import files; "
              f"files.write({str(target)!r}, lambda f: os._exit(9), kind='tsv')")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 9, show(done)
    [leftover] = list(tmp_path.iterdir())                # a shortened temporary name
    assert len(os.fsencode(leftover.name)) <= limit and leftover.name.endswith(".tmp")
    dead = dead_pid()
    users = [tmp_path / f".{target.name[:200]}.xpseq-{dead}-abcd.tmp",    # not 8 digits
             tmp_path / f"{target.name[:200]}.xpseq-{dead}-abcd1234.tmp",  # no dot
             tmp_path / f".{target.name[:200]}.xpseq-{dead}.tmp",
             tmp_path / f".notes.xpseq-{dead}-abcd1234.tmp.txt"]
    for path in users:
        path.write_bytes(b"the user's")
    folder = tmp_path / f".mine.xpseq-{dead}-abcd1234.tmp"    # a folder: never removed
    folder.mkdir()
    (folder / "kept").write_bytes(b"the user's")
    files.clean_stale(tmp_path)
    assert not leftover.exists()
    assert all(path.read_bytes() == b"the user's" for path in users)
    assert (folder / "kept").read_bytes() == b"the user's"


# ------------------------------------------------------------------ the commands


def _xpseq(*args, cwd: pathlib.Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xpseq", *map(str, args)], input="",
                          capture_output=True, text=True, timeout=180, cwd=cwd)


def _one_line_refusal(done: subprocess.CompletedProcess, *fragments: str) -> str:
    assert done.returncode in (1, 2), show(done)
    assert "Traceback" not in done.stderr and done.stdout == "", show(done)
    [line] = done.stderr.splitlines()
    for fragment in fragments:
        assert fragment in line, show(done)
    return line


def test_heatmap_writes_a_png_of_a_long_name(tmp_path):
    """A 249-byte ``--png`` (where names may have 255) is written, and a name one byte
    over the limit refused before the model is read."""
    from helpers import untrained_checkpoint

    model = untrained_checkpoint(tmp_path / "m.safetensors")
    limit = _limit(tmp_path)
    out = tmp_path / "pictures"
    out.mkdir()
    png = out / _name(limit - 6, ".png")
    done = _xpseq("heatmap", model, "the cat", "--backend", "numpy", "--png", png)
    assert_ok(done)
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert [p.name for p in out.iterdir()] == [png.name]
    done = _xpseq("heatmap", model, "the cat", "--backend", "numpy", "--png",
                  out / _name(limit + 1, ".png"))
    _one_line_refusal(done, "--png", f"{limit + 1} bytes", f"at most {limit}")
    assert [p.name for p in out.iterdir()] == [png.name]


def test_train_refuses_an_out_too_long_at_once_and_makes_nothing(tmp_path):
    limit = _limit(tmp_path)
    for out in (tmp_path / _name(limit + 1, ".safetensors"),
                tmp_path / "new" / _name(limit + 1, ".safetensors"),
                tmp_path / _name(limit, ""),     # fits, its metrics log beside it does not
                ):
        start = time.perf_counter()
        done = _xpseq("train", "--quick", "--epochs", 1, "--embed", 4, "--hidden", 4,
                      "--backend", "numpy", "--out", out, "--no-progress", cwd=tmp_path)
        seconds = time.perf_counter() - start
        _one_line_refusal(done, "--out", f"at most {limit}")
        assert seconds < 15, seconds                      # refused before any training
        assert list(tmp_path.iterdir()) == []             # no folder, lock, log or .tb


def test_train_writes_a_checkpoint_of_a_long_name(tmp_path):
    """A 242-byte ``--out`` (where names may have 255): the run trains, and the checkpoint,
    its metrics log and its TensorBoard folder are written beside no temporary or lock."""
    pairs = tmp_path / "data" / "pairs.tsv"
    pairs.parent.mkdir()
    pairs.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in "abcd" for b in "xyz"),
                     encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    model = out / _name(_limit(out) - 13, ".safetensors")
    done = _xpseq("train", "--task", "tsv", "--train", pairs, "--dev", pairs, "--backend",
                  "numpy", "--embed", 4, "--hidden", 4, "--epochs", 1, "--out", model,
                  "--no-progress")
    assert_ok(done)
    from xpseq.train import checkpoint

    assert checkpoint.load(model).train_state["epoch"] == 1
    stem = model.name[:-len(".safetensors")]
    names = {p.name for p in out.iterdir()}
    assert names <= {model.name, stem + ".metrics.csv", stem + ".tb"}, names
    assert {model.name, stem + ".metrics.csv"} <= names, names


def test_demo_and_data_refuse_a_folder_name_too_long_before_any_work(tmp_path):
    """``xpseq demo --out`` and ``xpseq data --export`` with a 256-byte folder name: one
    line naming the option and the limit, before anything is trained or written."""
    import subprocess
    import sys

    name = "d" * 256
    for argv, option in ((["demo", "--quick", "--out", name], "--out"),
                         (["data", "toy", "--quick", "--export", name], "--export")):
        done = subprocess.run([sys.executable, "-m", "xpseq", *argv], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(f"xpseq: error: {option}") and "256 bytes long" in line, line
        assert "at most 255" in line and not list(tmp_path.iterdir())
