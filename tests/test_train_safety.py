"""``xpseq train`` continues the same run or says no, and never destroys a file it did not
make: the lock on ``--out``, resume compared by value, the data files' fingerprints, the
dtype, a finished run, ``--force``, and Ctrl-C of a run over several processes.

Runs in this process through :func:`xpseq.app.cli.main` (tiny models on numpy), except the
interruption, which needs a terminal's Ctrl-C: a subprocess.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import two_cpus

from xpseq.app import cli
from xpseq.train import checkpoint

PAIRS = "".join(f"{a} {b} c\tc {b} {a}\n" for a in "abcd" for b in "xyz")


@pytest.fixture
def corpus(tmp_path) -> pathlib.Path:
    path = tmp_path / "pairs.tsv"
    path.write_text(PAIRS, encoding="utf-8")
    return path


def train(*args, corpus: pathlib.Path | None = None) -> list[str]:
    """``xpseq train`` of a tiny model on ``corpus`` (both --train and --dev)."""
    base = ["train", "--backend", "numpy", "--no-progress"]
    if corpus is not None:
        base += ["--task", "tsv", "--train", str(corpus), "--dev", str(corpus), "--embed", "4",
                 "--hidden", "4", "--batch-size", "6"]
    return [*base, *map(str, args)]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xpseq: error: "), err
    return lines[0]


@pytest.fixture
def run_of_one_epoch(tmp_path, corpus, capsys) -> pathlib.Path:
    out = tmp_path / "m.safetensors"
    code, _, err = run(train("--epochs", 1, "--seed", 5, "--out", out, corpus=corpus), capsys)
    assert code == 0, err
    return out


def test_a_second_run_on_one_output_is_refused_while_the_first_holds_it(tmp_path, corpus,
                                                                        capsys):
    out = tmp_path / "m.safetensors"
    lock = tmp_path / ".m.safetensors.lock"
    with open(lock, "w") as held:                   # what a running xpseq train holds
        fcntl.flock(held, fcntl.LOCK_EX)
        code, _, err = run(train("--epochs", 1, "--out", out, corpus=corpus), capsys)
    assert code == 1 and not out.exists()
    assert f"another xpseq train is writing {out} (it holds {lock})" in one_error(err)
    code, _, err = run(train("--epochs", 1, "--out", out, corpus=corpus), capsys)
    assert code == 0 and out.exists(), err          # free again: it runs, and cleans up
    assert not lock.exists()


def test_resume_compares_options_by_value(run_of_one_epoch, capsys):
    out = run_of_one_epoch
    for typed, name in ((["--seed", 0], "--seed"), (["--task", "toy"], "--task"),
                        (["--dtype", "float64"], "--dtype"), (["--train", out], "--train")):
        code, _, err = run(train("--resume", out, "--epochs", 2, *typed), capsys)
        assert code == 1 and f"cannot change {name} (only --epochs" in one_error(err), typed
    stored = checkpoint.load(out)
    assert stored.train_state["epoch"] == 1                       # nothing was written
    code, _, err = run(train("--resume", out, "--epochs", 2, "--seed", 5), capsys)
    assert code == 0, err                                         # the same value: no change
    assert checkpoint.load(out).train_state["epoch"] == 2


def test_the_data_files_fingerprints_are_stored_and_checked(run_of_one_epoch, corpus,
                                                            capsys):
    out = run_of_one_epoch
    data = corpus.read_bytes()
    fingerprint = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert checkpoint.load(out).metadata["data_files"] == {"train": fingerprint,
                                                           "dev": fingerprint}
    vocabs = checkpoint.load(out).vocabs
    corpus.write_text(PAIRS + "zz a c\tc a zz\n", encoding="utf-8")     # a new word
    code, _, err = run(train("--resume", out, "--epochs", 2), capsys)
    line = one_error(err)
    assert code == 1 and f"the train data {corpus} changed since the run began" in line
    assert f"it was {len(data)} bytes" in line and "pass --allow-data-change" in line
    assert checkpoint.load(out).train_state["epoch"] == 1
    code, _, err = run(train("--resume", out, "--epochs", 2, "--allow-data-change"), capsys)
    assert code == 0, err
    resumed = checkpoint.load(out)
    assert resumed.train_state["epoch"] == 2
    assert resumed.metadata["data_files"]["train"]["size"] == len(data) + len("zz a c\tc a zz\n")
    assert resumed.vocabs == vocabs and "zz" not in vocabs["src"]  # the run's vocabularies


def test_resume_refuses_parameters_of_another_dtype(run_of_one_epoch, tmp_path, capsys):
    # A checkpoint whose float64 parameters contradict its stored --dtype float32.
    loaded = checkpoint.load(run_of_one_epoch)
    other = tmp_path / "f64.safetensors"
    checkpoint.save(other, config=loaded.config,
                    params={k: v.astype(np.float64) for k, v in loaded.params.items()},
                    opt_state=loaded.opt_state, optimizer=loaded.make_optimizer(),
                    vocabs=loaded.vocabs, train_state=loaded.train_state,
                    metadata=loaded.metadata)
    code, _, err = run(train("--resume", other, "--epochs", 2), capsys)
    assert code == 1
    assert "its parameters are float64, the run's --dtype float32" in one_error(err)


def test_resuming_a_finished_run_writes_nothing_and_says_so(run_of_one_epoch, capsys):
    out = run_of_one_epoch
    before = out.read_bytes(), out.stat().st_mtime_ns
    code, printed, err = run(train("--resume", out, "--epochs", 1), capsys)
    assert code == 0, err
    assert printed.startswith(f"nothing to train: {out} already holds 1 epoch") and \
        "saved" not in printed
    assert (out.read_bytes(), out.stat().st_mtime_ns) == before


def test_force_replaces_a_foreign_file_but_never_a_special_one(tmp_path, corpus, capsys):
    notes = tmp_path / "notes.bin"
    notes.write_text("mine\n")
    code, _, err = run(train("--epochs", 1, "--out", notes, corpus=corpus), capsys)
    assert code == 1 and notes.read_text() == "mine\n"
    code, _, err = run(train("--epochs", 1, "--out", notes, "--force", corpus=corpus), capsys)
    assert code == 0 and checkpoint.load(notes).train_state["epoch"] == 1, err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, err = run(train("--epochs", 1, "--out", fifo, "--force", corpus=corpus), capsys)
    assert code == 1 and "is a FIFO" in one_error(err) and fifo.is_fifo()
    code, _, err = run(train("--epochs", 1, "--out", corpus, "--force", corpus=corpus), capsys)
    assert code == 1 and "is the run's --train file" in one_error(err)
    assert corpus.read_text(encoding="utf-8") == PAIRS


def test_a_config_files_data_paths_are_read_from_its_folder(tmp_path, corpus, capsys,
                                                            monkeypatch):
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "local.tsv").write_text(PAIRS, encoding="utf-8")
    (folder / "run.toml").write_text('task = "tsv"\ntrain = "local.tsv"\ndev = "local.tsv"\n'
                                     'embed = 4\nhidden = 4\nepochs = 1\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)                      # not the config's folder
    code, _, err = run(train("--config", folder / "run.toml", "--out", "m.safetensors"),
                       capsys)
    assert code == 0, err
    stored = checkpoint.load(tmp_path / "m.safetensors").metadata["options"]
    assert stored["train_file"] == str(folder / "local.tsv")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@two_cpus()
def test_ctrl_c_of_a_torch_run_over_two_processes_is_one_line(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "p.safetensors"
    script = pathlib.Path(sys.executable).parent / "xpseq"
    argv = ([str(script)] if script.exists() else [sys.executable, "-m", "xpseq"]) + [
        "train", "--quick", "--backend", "torch", "--devices", "2", "--epochs", "200",
        "--no-progress", "--out", str(out)]
    env = dict(os.environ, XPSEQ_DEBUG="")
    # A terminal's Ctrl-C: SIGINT to the whole process group, in a process that does not
    # ignore it (as one started in the background would).
    handled = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
               "os.execv(sys.argv[1], sys.argv[1:])")
    proc = subprocess.Popen([sys.executable, "-c", handled, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not out.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)                              # until the first epoch is saved
    assert out.exists(), proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    err = err.decode()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[1:] == ["xpseq: interrupted"], err
    assert checkpoint.load(out).train_state["epoch"] >= 1     # the saved epochs are kept
    assert not (tmp_path / ".p.safetensors.lock").exists()


@pytest.mark.parametrize("name, bounded", [("numpy", False), ("jax", True)])
def test_tsv_batches_take_few_shapes_where_each_shape_compiles(name, bounded, tmp_path,
                                                               monkeypatch, capsys):
    """On a backend that compiles every new batch shape (JAX), ``--task tsv`` bounds an
    epoch's shapes as the demo does; on NumPy the batches keep their own lengths (here
    more shapes than the bound)."""
    from xpseq import backends, tasks
    from xpseq.app.commands.train import TSV_COMPILED_SHAPES

    if name not in backends.available():
        pytest.skip(f"{name} is not installed")
    corpus = tmp_path / "lengths.tsv"
    corpus.write_text("".join(" ".join(["a"] * n) + "\t" + " ".join(["b"] * n) + "\n"
                              for n in range(1, 41) for _ in range(3)), encoding="utf-8")
    seen = {}

    def stop(task, backend, config, settings, **kw):
        batches = task.batches(task.train, kw["batch_size"], shapes=kw["shapes"])
        seen["shapes"] = {(b["src"].shape, b["tgt_in"].shape) for b in batches}
        raise KeyboardInterrupt        # enough: the batching is what this test looks at

    monkeypatch.setattr(tasks, "train_model", stop)
    argv = ["train", "--backend", name, "--no-progress", "--task", "tsv", "--train",
            str(corpus), "--dev", str(corpus), "--embed", "4", "--hidden", "4",
            "--batch-size", "8", "--epochs", "1", "--out", str(tmp_path / "m.safetensors")]
    assert cli.main(argv) == 130
    capsys.readouterr()
    if bounded:
        assert len(seen["shapes"]) == TSV_COMPILED_SHAPES
    else:
        assert len(seen["shapes"]) > TSV_COMPILED_SHAPES
