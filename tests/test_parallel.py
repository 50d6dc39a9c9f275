"""Data parallelism: batches split with balanced real tokens, and 2 devices give the run of
1 in float64 (JAX's device mesh to 1e-12, PyTorch's process group to 1e-10), for both
model kinds; the processes agree on when to stop and one writes the checkpoint."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pytest
from helpers import assert_ok, two_cpus  # noqa: F401  (assert_ok: tests/ on the children's path)
from parallel_runs import batches_and_configs, torch_in_group, train

from xpseq import backends, models
from xpseq.train.parallel import balanced_order, placement, shard_rows, split_batch


def test_rows_are_dealt_for_balanced_tokens():
    tokens = np.array([9, 1, 8, 2, 7, 3, 1])
    shards = balanced_order(tokens, 2)
    assert sorted(sum(shards, [])) == list(range(7))
    assert [len(s) for s in shards] == [4, 3]
    assert abs(tokens[shards[0]].sum() - tokens[shards[1]].sum()) <= 1
    with pytest.raises(ValueError, match="shards must be a positive int"):
        balanced_order(tokens, 0)


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_a_split_batch_has_the_same_loss(kind):
    """Reordered rows, and empty rows to fill the last shard: the same loss (the sums only
    change order); each shard holds nearly the same real tokens."""
    batches, configs = batches_and_configs()
    config, batch = configs[kind], batches[0]
    params = models.get(kind).init_params(config, seed=2)
    split = split_batch(batch, 3)
    assert split["src"].shape[0] % 3 == 0 and split["src"].shape[0] >= batch["src"].shape[0]
    assert split["shard_tokens"].sum() == np.sum(batch["tgt_out"] != 0)
    assert np.ptp(split["shard_tokens"]) <= np.max(np.sum(batch["tgt_out"] != 0, axis=1))
    value = models.get(kind).loss(params, config, {k: batch[k] for k in ("src", "src_len", "tgt_in", "tgt_out")})
    keys = ("src", "src_len", "tgt_in", "tgt_out")
    assert float(models.get(kind).loss(params, config, {k: split[k] for k in keys})) == \
        pytest.approx(float(value), rel=1e-12)
    parts = [shard_rows(split, s, 3) for s in range(3)]
    assert sum(p["src"].shape[0] for p in parts) == split["src"].shape[0]


def test_devices_need_a_parallel_backend():
    with pytest.raises(ValueError, match="numpy trains on one process"):
        placement(backends.get("numpy"), 2)
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="needs 2 processes in a torch.distributed gloo group"):
        placement(backends.get("torch"), 2)


@pytest.mark.slow
def test_jax_two_devices_train_like_one(tmp_path):
    """In a child process whose JAX sees the two cores as two CPU devices: the same losses
    and parameters to 1e-12. (With dropout the masks are drawn for the whole split batch
    inside the step, from the seed: reproducible, but not the 1-device run's, whose rows
    are in another order.)"""
    pytest.importorskip("jax")
    out = tmp_path / "jax.json"
    done = subprocess.run([sys.executable, "tests/parallel_runs.py", "jax", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report) == {"rnn", "transformer"}
    for name, r in report.items():
        assert r["loss_gap"] <= 1e-12 and r["param_gap"] <= 1e-12, (name, r)
        assert r["losses"][-1][0] < r["losses"][0][0], name             # it learns


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_torch_two_processes_train_like_one(tmp_path, kind):
    pytest.importorskip("torch")
    from xpseq.train.parallel import spawn

    one, p1, _ = train("torch", kind, 1)
    spawn(torch_in_group, 2, kind, str(tmp_path / "two.pkl"))
    two, p2, _ = pickle.loads((tmp_path / "two.pkl").read_bytes())
    np.testing.assert_allclose(two, one, rtol=1e-10)
    for name in p1:
        np.testing.assert_allclose(p2[name], p1[name], rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.slow
def test_torch_processes_stop_together_and_one_writes_the_checkpoint(tmp_path):
    """A time limit reached after the first step: both processes stop there (rank 0
    decides), with dropout (each process its own masks), and the checkpoint is written
    once and loads."""
    pytest.importorskip("torch")
    from xpseq.train import checkpoint
    from xpseq.train.parallel import spawn

    path = tmp_path / "model.ckpt"
    spawn(torch_in_group, 2, "rnn", str(tmp_path / "two.pkl"), 0.3, str(path))
    losses, params, stopped = pickle.loads((tmp_path / "two.pkl").read_bytes())
    assert stopped == "time_limit" and len(losses) == 1
    loaded = checkpoint.load(path)
    assert loaded.train_state["step"] == 1
    for name, value in params.items():
        np.testing.assert_array_equal(loaded.params[name], value)


@pytest.mark.slow
@two_cpus()
def test_jax_processes_train_like_devices_of_one_process(tmp_path):
    """``xpseq train --backend jax --devices 2`` as two JAX processes of one CPU device each
    (``XPSEQ_COORDINATOR`` / ``XPSEQ_PROCESSES`` / ``XPSEQ_PROCESS_ID``, as on two
    machines; gloo between them) gives the checkpoint of one process with two devices, to
    1e-12 in float64, dropout included; only process 0 prints and writes it."""
    import os
    import socket

    pytest.importorskip("jax")
    from xpseq.train import checkpoint

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{a} {b} c\tc {b} {a}\n" for a in "abcd" for b in "xyz"),
                     encoding="utf-8")
    args = [sys.executable, "-m", "xpseq", "train", "--task", "tsv", "--train", pairs, "--dev",
            pairs, "--backend", "jax", "--dtype", "float64", "--devices", "2", "--epochs", "2",
            "--embed", "4", "--hidden", "4", "--batch-size", "12", "--no-progress"]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([*map(str, args), "--out", str(tmp_path / f"p{i}.ckpt")],
                              env={**env, "XPSEQ_COORDINATOR": f"localhost:{port}",
                                   "XPSEQ_PROCESSES": "2", "XPSEQ_PROCESS_ID": str(i)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    one = subprocess.run([*map(str, args), "--out", str(tmp_path / "one.ckpt")], env=env,
                         capture_output=True, text=True, timeout=240)
    outs = [p.communicate(timeout=240) for p in procs]
    assert one.returncode == 0, one.stderr[-3000:]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    # (gloo's own C++ note of the connection goes to each process's stdout)
    assert "saved" in outs[0][0] and "saved" not in outs[1][0] + outs[1][1]
    assert not (tmp_path / "p1.ckpt").exists()
    a, b = checkpoint.load(tmp_path / "one.ckpt"), checkpoint.load(tmp_path / "p0.ckpt")
    assert a.config.dropout > 0
    for name, value in a.params.items():
        np.testing.assert_allclose(b.params[name], value, rtol=1e-12, atol=1e-14, err_msg=name)
    assert [h["train_loss"] for h in a.train_state["history"]] == pytest.approx(
        [h["train_loss"] for h in b.train_state["history"]], rel=1e-12)


@two_cpus()
def test_jax_processes_need_all_three_variables(tmp_path):
    import os

    pytest.importorskip("jax")
    env = {**os.environ, "XPSEQ_COORDINATOR": "localhost:1"}
    env.pop("XPSEQ_PROCESSES", None)
    done = subprocess.run([sys.executable, "-m", "xpseq", "train", "--backend", "jax",
                           "--devices", "2", "--out", str(tmp_path / "m.ckpt")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "needs XPSEQ_COORDINATOR, XPSEQ_PROCESSES, XPSEQ_PROCESS_ID" in done.stderr
    assert not (tmp_path / "m.ckpt").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_ends_when_its_parent_is_killed():
    """A process of ``spawn`` asks the kernel for SIGTERM when its parent ends: its parent
    killed with SIGKILL (no chance to end its workers), it does not live on."""
    import os
    import signal
    import time

    worker = ("import os, time; from xpseq.train import parallel; "
              "parallel._end_with({parent}); print(os.getpid(), flush=True); time.sleep(120)")
    parent = ("import os, subprocess, sys, time; "
              f"code = {worker!r}.format(parent=os.getpid()); "
              "subprocess.Popen([sys.executable, '-c', code]); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        child = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

        def alive(pid: int) -> bool:
            try:
                with open(f"/proc/{pid}/status") as f:
                    return "\nState:\tZ" not in f.read()       # a zombie has ended
            except FileNotFoundError:
                return False

        deadline = time.monotonic() + 30
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child), "the worker outlived its killed parent"
    finally:
        proc.kill()
