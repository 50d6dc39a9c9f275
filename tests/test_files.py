"""The one door for every file xpseq writes (:mod:`xpseq.io.files`): no write bypasses it
(an AST scan of the package), and what it guarantees, each with a test that could fail:
inputs and users' files are never replaced, a file or a set of files appears whole or
not at all (a full disk, an interrupt, a kill), a mount point or a link to another file
system is written, and what a killed run left is cleaned."""

from __future__ import annotations

import ast
import errno
import os
import pathlib

import pytest
from helpers import dead_pid, other_file_system

from xpseq.io import OutputRefused, files

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "xpseq"
DOOR = PACKAGE / "io" / "files.py"

# ------------------------------------------------------------------ no write bypasses it

#: Calls that write, remove or make files: a method or function name, whatever its
#: receiver (``path.write_text``, ``fig.savefig``, ``shutil.copy``).
WRITING_CALLS = {"write_text", "write_bytes", "savefig", "mkdir", "makedirs", "unlink",
                 "rmdir", "rmtree", "touch", "symlink_to", "hardlink_to", "save_file",
                 "to_csv", "mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory",
                 "SummaryWriter", "copyfile", "copy2", "copytree", "move"}
#: Functions of ``os`` that write, remove or rename.
WRITING_OS = {"replace", "rename", "renames", "link", "symlink", "remove", "truncate",
              "mkfifo", "mknod"}
#: The few calls the scan cannot tell from a bypass, each with its reason; exactly one
#: of each is allowed (a second one in the same module fails the test).
ALLOWED = {
    ("train/callbacks.py", "SummaryWriter"):
        "TensorBoard writes its event files itself, into the M.tb folder that "
        "xpseq.app.outputs.check_outputs checked (never a file) before the run",
    ("app/plots.py", "savefig"):
        "matplotlib writes into the file object that xpseq.io.files.write hands it",
}


def _is_devnull_or_fd(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "devnull") or (
        isinstance(node, ast.Constant) and isinstance(node.value, int))


def write_sites(path: pathlib.Path, source: str | None = None) -> list[str]:
    """The calls in ``path`` (or ``source`` read as that file) that write a file other
    than through :mod:`xpseq.io.files`: ``file:line: what``."""
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
    name = path.relative_to(PACKAGE).as_posix()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        what = None
        if isinstance(func, ast.Name) and func.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "mode"), None)
            writes = isinstance(mode, ast.Constant) and any(c in str(mode.value)
                                                            for c in "wax+")
            if writes and not (node.args and _is_devnull_or_fd(node.args[0])):
                what = f"open(..., {mode.value!r})"            # type: ignore[union-attr]
        elif isinstance(func, ast.Attribute):
            base = func.value.id if isinstance(func.value, ast.Name) else None
            if base == "os" and func.attr == "open":
                flags = ast.dump(node.args[1]) if len(node.args) > 1 else ""
                if any(f in flags for f in ("O_CREAT", "O_TRUNC", "O_APPEND")) and not (
                        node.args and _is_devnull_or_fd(node.args[0])):
                    what = "os.open(..., O_CREAT)"
            elif base == "os" and func.attr in WRITING_OS:
                what = f"os.{func.attr}"
            elif (base in ("shutil", "tempfile") and func.attr not in SHUTIL_READS
                  or func.attr in WRITING_CALLS):
                what = f"{base + '.' if base else '.'}{func.attr}"
            elif base in ("onnx", "np", "numpy", "json", "pickle") and func.attr in (
                    "save", "savez", "savetxt", "dump"):
                what = f"{base}.{func.attr}"
        elif isinstance(func, ast.Name) and func.id in WRITING_CALLS:
            what = func.id
        if what is not None:
            found.append(f"xpseq/{name}:{node.lineno}: {what}")
    return found


#: What shutil offers that reads and never writes.
SHUTIL_READS = ("which", "get_terminal_size", "disk_usage")


def test_the_write_site_scan_catches_a_bypass():
    source = ("import os, shutil\nopen(p, 'w')\nopen(p, mode='ab')\nopen(p)\n"
              "path.write_text('x')\nfig.savefig(p)\nos.replace(a, b)\nshutil.copy2(a, b)\n"
              "'a'.replace('b', 'c')\nos.open(p, os.O_WRONLY | os.O_CREAT)\n"
              "open(os.devnull, 'w')\nos.open(os.devnull, os.O_WRONLY)\nnp.save(p, x)\n"
              "shutil.which('nvidia-smi')\n")
    found = write_sites(PACKAGE / "app" / "demo.py", source)
    assert [f.split(": ", 1)[1] for f in found] == [
        "open(..., 'w')", "open(..., 'ab')", "path.write_text", "fig.savefig", "os.replace",
        "shutil.copy2", "os.open(..., O_CREAT)", "np.save"]


def test_no_module_writes_a_file_but_through_the_door():
    sites = [site for path in sorted(PACKAGE.rglob("*.py")) if path != DOOR
             for site in write_sites(path)]
    allowed = {f"xpseq/{module}": call for module, call in ALLOWED}
    bad = [s for s in sites
           if allowed.get(s.split(":")[0]) != s.split(": ", 1)[1].split(".")[-1]]
    assert not bad, "writes that bypass xpseq.io.files:\n" + "\n".join(bad)
    for module, call in ALLOWED:                  # each allowed once, and still there
        assert sum(s.startswith(f"xpseq/{module}:") for s in sites) == 1, (module, call)


# ------------------------------------------------------------------ one file


def test_an_input_of_the_run_is_never_replaced_force_or_not(tmp_path):
    source = tmp_path / "model.safetensors"
    source.write_bytes(b"the user's bytes")
    link = tmp_path / "other-name"
    link.symlink_to(source)
    with files.run():
        files.note_input(source)
        for target in (source, link, tmp_path / "." / "model.safetensors"):
            with pytest.raises(OutputRefused, match="is an input of this run"):
                files.write(target, b"png", kind="png", force=True)
    assert source.read_bytes() == b"the user's bytes"
    # Outside the run, the input is a file like another: a user's, so force is needed.
    with pytest.raises(OutputRefused, match="was not written by xpseq as a PNG"):
        files.write(source, b"png", kind="png")
    files.write(source, b"new", kind="png", force=True)
    assert source.read_bytes() == b"new"


def test_inputs_given_by_the_caller_count_too(tmp_path):
    source = tmp_path / "a.tsv"
    source.write_text("x\ty\n")
    with pytest.raises(OutputRefused, match="is an input of this run"):
        files.write(source, b"", kind="tsv", inputs=[str(source)], force=True)


def test_a_declared_output_of_the_run_may_be_read_and_replaced(tmp_path):
    target = tmp_path / "m.bin"
    target.write_bytes(b"old")
    with files.run():
        files.note_input(target)
        files.declare_output(target)
        files.write(target, b"new", kind="tsv", force=True)
    assert target.read_bytes() == b"new"


def test_a_users_file_needs_force_and_an_own_file_does_not(tmp_path):
    plots = pytest.importorskip("xpseq.app.plots")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(OutputRefused, match=r"notes\.txt exists and was not written by xpseq"):
        plots.save_loss_curves(notes, {"m": [{"epoch": 1, "train_loss": 1.0}]})
    assert notes.read_text() == "mine"
    own = plots.save_loss_curves(tmp_path / "c.png", {"m": [{"epoch": 1, "train_loss": 1.0}]})
    assert files.is_own_png(own)
    plots.save_loss_curves(own, {"m": [{"epoch": 1, "train_loss": 2.0}]})   # ours: replaced
    plots.save_loss_curves(notes, {"m": [{"epoch": 1, "train_loss": 1.0}]}, force=True)
    assert files.is_own_png(notes)


@pytest.mark.parametrize("bad", ["", "folder", "fifo"])
def test_empty_paths_folders_and_special_files_are_refused(tmp_path, bad):
    target = {"": "", "folder": tmp_path, "fifo": tmp_path / "pipe"}[bad]
    if bad == "fifo":
        os.mkfifo(target)
    with pytest.raises(OutputRefused, match="empty|a folder|FIFO"):
        files.write(target, b"x", kind="tsv", force=True)
    with pytest.raises(TypeError, match="str or path-like"):
        files.write(b"bytes-path", b"x", kind="tsv")


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path):
    target = tmp_path / "t.tsv"
    target.write_bytes(b"before")
    os.chmod(target, 0o640)

    def full_disk(f):
        f.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        files.write(target, full_disk, kind="tsv", force=True)
    assert target.read_bytes() == b"before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.tsv"]
    files.write(target, b"after", kind="tsv", force=True)
    assert target.read_bytes() == b"after"
    assert (target.stat().st_mode & 0o777) == 0o640           # the file's bits kept


def test_a_symbolic_link_stays_and_its_file_is_written(tmp_path):
    real = tmp_path / "real.tsv"
    real.write_text("old")
    link = tmp_path / "link.tsv"
    link.symlink_to(real)
    files.write(link, b"new", kind="tsv", force=True)
    assert link.is_symlink() and real.read_text() == "new"


def test_stale_temporaries_of_a_dead_process_are_cleaned(tmp_path):
    dead = dead_pid()
    stale = tmp_path / f".t.tsv.xpseq-{dead}-abcd1234.tmp"
    stale.write_bytes(b"half")
    alive = tmp_path / f".t.tsv.xpseq-{os.getppid()}-abcd1234.tmp"
    alive.write_bytes(b"another writer's")
    user = tmp_path / ".t.tsv.mine.tmp"                  # not the door's name: kept
    user.write_bytes(b"the user's")
    files.write(tmp_path / "t.tsv", b"x", kind="tsv")
    assert not stale.exists() and alive.exists() and user.exists()


# ------------------------------------------------------------------ a set of files


def test_a_set_appears_whole_and_replaces_only_with_force(tmp_path):
    out = tmp_path / "out"
    files.write_set(out, {"a.tsv": b"1", "b.tsv": b"2"}, kind="tsv")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {"a.tsv": b"1", "b.tsv": b"2"}
    with pytest.raises(OutputRefused, match="a.tsv exists"):
        files.write_set(out, {"a.tsv": b"3", "b.tsv": b"4"}, kind="tsv")
    files.write_set(out, {"a.tsv": b"3", "b.tsv": b"4"}, kind="tsv", force=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {"a.tsv": b"3", "b.tsv": b"4"}


@pytest.mark.parametrize("existing", [False, True])
def test_a_set_that_fails_half_way_leaves_the_previous_state(tmp_path, monkeypatch, existing):
    out = tmp_path / "out"
    if existing:
        files.write_set(out, {"a.tsv": b"old a", "b.tsv": b"old b"}, kind="tsv")
    before = {p.name: p.read_bytes() for p in out.iterdir()} if existing else None
    calls = {"n": 0}
    real_link, real_replace = os.link, os.replace

    def second_move_fails(real):
        def move(src, dst, *args, **kwargs):
            if pathlib.Path(dst).parent == out and not pathlib.Path(dst).name.startswith("."):
                calls["n"] += 1
                if calls["n"] == 2:
                    raise OSError(errno.ENOSPC, "No space left on device")
            return real(src, dst, *args, **kwargs)
        return move

    monkeypatch.setattr(os, "link", second_move_fails(real_link))
    monkeypatch.setattr(os, "replace", second_move_fails(real_replace))
    with pytest.raises(OSError, match="No space"):
        files.write_set(out, {"a.tsv": b"new a", "b.tsv": b"new b"}, kind="tsv", force=True)
    monkeypatch.undo()
    assert calls["n"] >= 2                               # (the rollback links too)
    now = {p.name: p.read_bytes() for p in out.iterdir()} if out.exists() else {}
    assert now == (before or {})                          # no new file, no temporary


def test_a_set_killed_half_way_is_rolled_back_by_the_next_write(tmp_path):
    out = tmp_path / "out"
    files.write_set(out, {"a.tsv": b"old a", "b.tsv": b"old b"}, kind="tsv")
    # A writer killed after moving its first file in: its folder holds the new files and
    # the old one it replaced; a.tsv in place is already the new one.
    work = out / f".xpseq-set-{dead_pid()}-deadbeef"
    work.mkdir()
    for name in ("a.tsv", "b.tsv"):
        (work / name).write_bytes(b"new " + name[:1].encode())
    os.link(out / "a.tsv", work / ".old-a.tsv")
    os.link(out / "b.tsv", work / ".old-b.tsv")
    os.replace(out / "a.tsv", work / ".displaced")
    os.link(work / "a.tsv", out / "a.tsv")
    assert (out / "a.tsv").read_bytes() == b"new a"
    files.clean_stale(out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {"a.tsv": b"old a",
                                                               "b.tsv": b"old b"}


def test_a_finished_set_whose_writer_died_before_tidying_is_kept(tmp_path):
    out = tmp_path / "out"
    files.write_set(out, {"a.tsv": b"new"}, kind="tsv")
    work = out / f".xpseq-set-{dead_pid()}-deadbeef"
    work.mkdir()
    os.link(out / "a.tsv", work / "a.tsv")
    (work / ".done").touch()
    files.clean_stale(out)
    assert [p.name for p in out.iterdir()] == ["a.tsv"]
    assert (out / "a.tsv").read_bytes() == b"new"


def test_a_set_is_written_through_a_link_to_another_file_system(tmp_path):
    other = other_file_system(tmp_path)
    if other is None:
        pytest.skip("no writable folder on a second file system here (/dev/shm, /run)")
    import tempfile

    with tempfile.TemporaryDirectory(dir=other) as elsewhere:
        link = tmp_path / "export"
        link.symlink_to(elsewhere)
        files.write_set(link, {"a.onnx": b"1", "model.json": b"{}"}, kind="onnx")
        assert sorted(os.listdir(elsewhere)) == ["a.onnx", "model.json"]
        files.write(link / "one.tsv", b"x", kind="tsv")
        assert (pathlib.Path(elsewhere) / "one.tsv").read_bytes() == b"x"


def test_remove_leaves_a_file_that_is_not_xpseqs(tmp_path):
    log = tmp_path / "m.metrics.csv"
    log.write_text("a user's table\n")
    with pytest.raises(OutputRefused):
        files.remove(log, kind="metrics")
    assert log.exists()
    log.write_text("epoch,train_loss\n1,2.0\n")
    files.remove(log, kind="metrics")
    assert not log.exists()
