"""Ctrl-C of the ``xpseq`` command, whenever it comes: one line, ``xpseq: interrupted``, on
stderr and exit code 130, or the command's normal result where it had already finished.

The entry point (:mod:`xpseq.__main__`, the console script's and ``python -m xpseq``'s) takes
SIGINT over before it imports the command: a Ctrl-C while the command imports PyTorch, JAX
or its own modules, while it trains, or while Python shuts down is the same line. Only
Python's own start, before the entry point runs (a few tens of milliseconds on an idle
machine, several times that on a busy one), is left to the interpreter: the delays here
count from the moment a process started as these are reaches the entry point, measured
just before (:func:`entry_reached`). A run over two processes:
``tests/test_train_safety.py``.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

SCRIPT = pathlib.Path(sys.executable).parent / "xpseq"
LINE = "xpseq: interrupted"
# A Ctrl-C at each moment of a short torch run, after the entry point is reached: while it
# imports the command (its libraries, then PyTorch), while it trains, and around its end.
DELAYS = (0.0, 0.05, 0.15, 0.3, 0.6, 1.0, 1.6, 2.5, 4.0)
# A terminal's Ctrl-C reaches a process that does not ignore it; one started in the
# background by a shell (as these tests may be) ignores it, and keeps ignoring it.
KEEP = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])")
IGNORE = KEEP.replace("SIG_DFL", "SIG_IGN")
TINY_TRAIN = ["train", "--quick", "--backend", "torch", "--epochs", "1", "--embed", "4",
              "--hidden", "4", "--no-progress", "--force"]


def _launchers() -> dict[str, list[str]]:
    found = {"python -m xpseq": [sys.executable, "-m", "xpseq"]}
    if SCRIPT.exists():
        found["console script"] = [str(SCRIPT)]
    return found


def entry_reached() -> float:
    """Seconds until a process started as :func:`_interrupted` starts one could reach the
    entry point, on this machine now: Python's start (the ``typing`` that the package's
    ``__init__`` imports, nothing of xpseq: an ``__init__`` that imports more delays the
    entry point, and fails these tests), the slowest of three, with a margin for the load
    changing."""
    argv = [sys.executable, "-c", KEEP, sys.executable, "-c", "import typing"]
    times = []
    for _ in range(3):
        start = time.monotonic()
        subprocess.run(argv, check=True, timeout=60)
        times.append(time.monotonic() - start)
    return 1.5 * max(times) + 0.02


def _interrupted(argv: list[str], delay: float, cwd: pathlib.Path, signals: int = 1, *,
                 start: str = KEEP) -> subprocess.CompletedProcess:
    """``argv`` started (SIGINT as ``start`` leaves it: not ignored), then SIGINT
    ``signals`` times (1 ms apart) after ``delay`` seconds."""
    env = dict(os.environ, XPSEQ_DEBUG="")
    proc = subprocess.Popen([sys.executable, "-c", start, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
    time.sleep(delay)
    for _ in range(signals):
        try:
            proc.send_signal(signal.SIGINT)
        except ProcessLookupError:
            break
        time.sleep(0.001)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def assert_interrupted_or_done(done: subprocess.CompletedProcess, what: str) -> None:
    """Exit 130 and ``xpseq: interrupted`` as the last line of stderr, after nothing but the
    command's own notes; or the run had finished (exit 0)."""
    lines = done.stderr.splitlines()
    shown = f"{what}: exit {done.returncode}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, shown
    if done.returncode == 0:
        assert done.stdout.startswith("saved "), shown
        return
    assert done.returncode == 130, shown
    said = [line for line in lines if line.startswith(LINE)]
    assert lines and said == lines[-1:], shown
    # during training, the line says where it stopped (no checkpoint yet: 1 epoch)
    assert lines[-1] in (LINE, f"{LINE} during epoch 1: no checkpoint was written yet"), shown
    assert all(line.startswith("training on ") for line in lines[:-1]), shown


@pytest.mark.parametrize("launcher", sorted(_launchers()))
def test_ctrl_c_while_the_command_imports_is_one_line(launcher, tmp_path):
    argv = _launchers()[launcher] + TINY_TRAIN + ["--out", str(tmp_path / "m.safetensors")]
    delay = entry_reached() + 0.1
    done = _interrupted(argv, delay, tmp_path)
    assert_interrupted_or_done(done, f"{launcher}, {delay:.2f} s")
    assert done.returncode == 130 and done.stderr == LINE + "\n", done.stderr
    assert not (tmp_path / "m.safetensors").exists()


@pytest.mark.slow       # (about 25 s: eighteen short torch runs, two at a time)
def test_ctrl_c_at_any_moment_of_a_torch_run_is_one_line(tmp_path):
    """Each launcher, each delay; a single Ctrl-C and a burst of three (the second and
    third come while the first is being handled: one line still)."""
    cases = [(launcher, delay, 1 + 2 * (i % 2))
             for launcher in sorted(_launchers()) for i, delay in enumerate(DELAYS)]
    for start in range(0, len(cases), 2):                # two at a time: the shared cores
        entry = entry_reached()
        cases[start:start + 2] = [(launcher, entry + delay, signals)
                                  for launcher, delay, signals in cases[start:start + 2]]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            runs = {case: pool.submit(
                _interrupted, _launchers()[case[0]] + TINY_TRAIN + [
                    "--out", str(tmp_path / f"m{start + k}.safetensors")], case[1],
                tmp_path, case[2]) for k, case in enumerate(cases[start:start + 2])}
        for (launcher, delay, signals), run in runs.items():
            assert_interrupted_or_done(run.result(),
                                       f"{launcher}, {delay:.2f} s, {signals} SIGINT")
    assert not list(tmp_path.glob(".*.lock")), list(tmp_path.iterdir())


@pytest.mark.slow       # (about 6 s: a numpy run to its end)
def test_a_command_started_with_ctrl_c_ignored_keeps_ignoring_it(tmp_path):
    out = tmp_path / "m.safetensors"
    numpy = ["numpy" if arg == "torch" else arg for arg in TINY_TRAIN]
    argv = [sys.executable, "-m", "xpseq", *numpy, "--out", str(out)]
    done = _interrupted(argv, entry_reached() + 0.3, tmp_path, 3, start=IGNORE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"saved {out}") and LINE not in done.stderr


# A subcommand whose Ctrl-C lands where Python hides it: in a finalizer (which Python prints
# and drops) and in a class body's __set_name__ (which Python 3.11 turns into RuntimeError).
HIDDEN_CHILD = textwrap.dedent(r"""
    import os, signal, sys, time
    from xpseq.app import errors

    errors.handle_interrupts()                    # as the entry point does
    from xpseq.app import cli
    from xpseq.app.commands import tour

    def ctrl_c_then_wait(*args):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

    class Finalized:
        __del__ = ctrl_c_then_wait

    def in_a_finalizer(args):
        Finalized()                               # dropped at once: __del__ runs
        time.sleep(5)
        return 0

    def in_set_name(args):
        class Named:
            __set_name__ = ctrl_c_then_wait
        class Owner:
            field = Named()
        return 0

    tour.run = {"finalizer": in_a_finalizer, "set_name": in_set_name}[sys.argv[1]]
    sys.exit(errors.end(cli.main(["tour"])))
""")


@pytest.mark.parametrize("where", ["finalizer", "set_name"])
def test_a_ctrl_c_that_python_would_hide_is_still_one_line(where, tmp_path):
    done = subprocess.run([sys.executable, "-c", KEEP, sys.executable, "-c", HIDDEN_CHILD,
                           where], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 130 and done.stderr == LINE + "\n", done.stderr


def test_a_python_caller_keeps_its_own_ctrl_c_handling(tmp_path, capsys):
    """:func:`xpseq.app.cli.main` called from Python changes no signal handler and no hook
    (only the entry point takes SIGINT over), and still reports an interruption as one line
    and 130, each time."""
    from xpseq.app import cli, errors

    before = (signal.getsignal(signal.SIGINT), sys.unraisablehook)
    assert cli.main(["data", "toy", "--quick", "--export", str(tmp_path / "toy")]) == 0
    assert (signal.getsignal(signal.SIGINT), sys.unraisablehook) == before
    for _ in range(2):
        assert errors.interrupted() == 130
        assert capsys.readouterr().err == LINE + "\n"
    assert (signal.getsignal(signal.SIGINT), sys.unraisablehook) == before


def test_a_ctrl_c_inside_an_import_ends_the_process_instead_of_raising(tmp_path,
                                                                        monkeypatch):
    """Raised inside an import, a KeyboardInterrupt can cross PyTorch's C++ (it registers
    its types while it is imported) and abort the process with 90 lines of trace (seen at
    0.6 s into ``xpseq train --backend torch``): the handler tells an import's frames and
    ends the process there instead."""
    from xpseq.app import errors

    (tmp_path / "probe_frame.py").write_text("import sys\nframe = sys._getframe()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import probe_frame

    assert errors._importing(probe_frame.frame)
    assert not errors._importing(sys._getframe())


# ------------------------------------------------------- what an interrupted run says


def ctrl_c_during(epoch: int):
    """A training callback that raises ``KeyboardInterrupt`` (as a Ctrl-C does) at the
    first step of epoch ``epoch``."""
    from xpseq.train.callbacks import Callback

    class CtrlC(Callback):
        def on_step_end(self, loop):
            if loop.state["epoch"] + 1 == epoch:
                raise KeyboardInterrupt

    return CtrlC()


def test_an_interrupted_run_says_which_epoch_its_checkpoint_holds_and_how_to_go_on(
        tmp_path, capsys, monkeypatch):
    """Ctrl-C in epoch 3 of ``xpseq train`` (numpy, a tiny model): exit 130 and one line
    that names the epoch under way, the epoch the checkpoint holds (2) and the command
    that continues it; that command finishes the run. In epoch 1 the line says that no
    checkpoint was written; a Ctrl-C of a resumed run counts from the resumed epoch."""
    from xpseq.app import cli
    from xpseq.app.commands import train

    out = tmp_path / "m.safetensors"
    argv = [*[("numpy" if a == "torch" else a) for a in TINY_TRAIN], "--epochs", "4",
            "--out", str(out)]
    for epoch, expected in ((1, "during epoch 1: no checkpoint was written yet"),
                            (3, f"during epoch 3: the checkpoint {out} holds epoch 2; "
                                f"continue with: xpseq train --resume {out}")):
        monkeypatch.setattr(train, "_time_limit", lambda args, e=epoch: [ctrl_c_during(e)])
        assert cli.main(argv) == 130
        assert capsys.readouterr().err.splitlines()[-1] == f"{LINE} {expected}"
    monkeypatch.setattr(train, "_time_limit", lambda args: [ctrl_c_during(4)])
    assert cli.main(["train", "--resume", str(out), "--no-progress"]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"{LINE} during epoch 4: the checkpoint {out} holds epoch 3; continue with: "
        f"xpseq train --resume {out}")
    monkeypatch.undo()
    assert cli.main(["train", "--resume", str(out), "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith(f"saved {out}: 4 epochs")
    # another command's interruption in this process says only that
    from xpseq.app import errors

    with errors.running():
        pass
    assert errors.interrupted() == 130 and capsys.readouterr().err == LINE + "\n"


def test_the_watch_reads_the_checkpoint_between_two_epochs(tmp_path):
    """Between an epoch's end and the next one's start the checkpoint may have just been
    written: the watch reads the epoch it holds from the file; a path with a space is
    quoted in the command to continue."""
    from xpseq.app.commands.train_watch import EpochWatch

    class Loop:
        state = {"epoch": 0}

    watch = EpochWatch(str(tmp_path / "my model.safetensors"), None, " --compile")
    assert watch.interruption() is None                       # not training yet
    loop = Loop()
    watch.on_train_begin(loop)
    watch.on_epoch_begin(loop)
    assert watch.interruption() == "during epoch 1: no checkpoint was written yet"
    loop.state = {"epoch": 1}
    watch.on_epoch_end(loop, {"epoch": 1})
    assert watch.interruption() == "during epoch 1: no checkpoint was written yet"  # no file
    watch.on_epoch_begin(loop)
    path = tmp_path / "my model.safetensors"
    assert watch.interruption() == (f"during epoch 2: the checkpoint {path} holds epoch 1; "
                                    f"continue with: xpseq train --resume '{path}' --compile")
