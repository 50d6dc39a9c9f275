"""Helpers of the test suite: scripts of the checkout and subprocesses, and the backends
a test asks for by name.

They read the repository's ``scripts/`` folder, so they live with the tests, not in the
installed package.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import pathlib
import struct
import subprocess
import sys
import types
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]   # the checkout


def two_cpus() -> Any:
    """A ``skipif`` mark for a test that runs ``--devices 2`` (or another option bounded by
    the usable CPUs) where this process may use only one."""
    import pytest

    from xpseq.backends import usable_cpus

    return pytest.mark.skipif(usable_cpus() < 2, reason="needs two usable CPUs (--devices 2 "
                              "is refused beyond the CPUs this process may use)")


def load_script(name: str) -> types.ModuleType:
    """Import the script ``scripts.<name>`` of the source tree (``bench``,
    ``benchmarks.page``), without running its ``main``."""
    return importlib.import_module(f"scripts.{name}")


def show(done: subprocess.CompletedProcess) -> str:
    """A finished command's exit code, stdout and stderr, for an assertion message."""
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def assert_ok(done: subprocess.CompletedProcess) -> None:
    """The command exited 0 without a traceback."""
    assert done.returncode == 0, show(done)
    assert "Traceback" not in done.stderr, show(done)


def rewrite_metadata(path: pathlib.Path, change, *, redigest: bool = True) -> None:
    """Rewrite the xpseq JSON of a checkpoint. With ``redigest`` the digest is computed
    again, as a deliberate editor would, so that the checks behind it are reached."""
    from safetensors.numpy import load_file

    from xpseq.train import checkpoint as ckpt

    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = json.loads(header["__metadata__"]["xpseq"])
    meta = change(meta) or meta
    text = json.dumps(meta)
    header["__metadata__"]["xpseq"] = text
    if redigest:
        covered = text if isinstance(meta, dict) and meta.get("format") == 2 else None
        header["__metadata__"]["sha256"] = ckpt._digest(load_file(str(path)), covered)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


def dead_pid() -> int:
    """The process id of a process that has ended (a child started and waited for): what
    a killed writer's temporary names carry."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def other_file_system(near: pathlib.Path) -> pathlib.Path | None:
    """A writable folder on another file system than ``near`` (``/dev/shm``, ``/run``), or
    ``None`` where there is none."""
    import os

    for candidate in ("/dev/shm", "/run", os.environ.get("XDG_RUNTIME_DIR", "")):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK) and \
                os.stat(candidate).st_dev != os.stat(near).st_dev:
            return pathlib.Path(candidate)
    return None


def installed(name: str) -> bool:
    """Whether the library ``name`` can be imported."""
    return importlib.util.find_spec(name) is not None


def other_backend(name: str) -> Any:
    """The backend ``name``, or skip the test if its library is missing."""
    import pytest

    from xpseq import backends

    if not installed(name):
        pytest.skip(f"{name} is not installed")
    return backends.get(name)


def np_name(be: Any, x: Any) -> str:
    """The NumPy name of the dtype of a ``be`` array (checked against the library's too)."""
    name = be.to_numpy(x).dtype.name
    assert x.dtype == be.dtype(name)
    return name


def untrained_checkpoint(path: pathlib.Path, *, n_train: int = 20) -> pathlib.Path:
    """A small RNN checkpoint of the toy task's vocabularies (``n_train`` sentences), its
    parameters as initialised: for the commands that read a model but need no trained one."""
    from xpseq.models.rnn import Seq2SeqConfig, init_params
    from xpseq.tasks import toy_task
    from xpseq.train import checkpoint

    task = toy_task(n_train=n_train, n_dev=5, n_test_per_bucket=1)
    config = Seq2SeqConfig(len(task.src_vocab), len(task.tgt_vocab), embed=4, hidden=4)
    return checkpoint.save(path, config=config, params=init_params(config, seed=0),
                           vocabs={"src": task.src_vocab.to_list(),
                                   "tgt": task.tgt_vocab.to_list()})


def resaved_fixture(path: pathlib.Path) -> pathlib.Path:
    """``tests/fixtures/rnn_format1.safetensors`` (a trained toy model) saved again at
    ``path`` in the current format (no note on its metadata when it is read)."""
    import warnings

    from xpseq.train.checkpoint import load, save

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # format 1: a note on its metadata
        old = load(pathlib.Path(__file__).parent / "fixtures" / "rnn_format1.safetensors")
    return save(path, config=old.config, params=old.params, vocabs=old.vocabs,
                metadata=old.metadata)
