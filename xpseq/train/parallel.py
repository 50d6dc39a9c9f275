"""Data parallelism through the libraries' own machinery: the batch split over devices,
the parameters and optimiser state replicated, the gradients summed.

xpseq schedules nothing itself. On JAX the step is the same jitted function: its inputs
carry a :class:`jax.sharding.NamedSharding` over a one-axis ``Mesh`` (the batch axis
split, everything else replicated) and XLA partitions the program and inserts the
gradient reduction. On PyTorch each of N processes (one thread each, a ``gloo`` process
group) runs the step on its rows of the batch and the gradients are summed with
``torch.distributed.all_reduce``. NumPy has no parallel runtime, and writing one is out
of scope, so it trains on one process.

Every device sees the whole batch's loss: the loss is the mean over the batch's real
target tokens, so a shard's gradient is weighted by its share of those tokens before the
sum. The rows are dealt so that every shard gets nearly the same number of real tokens
(:func:`balanced_order`); a batch whose rows do not divide evenly gets empty rows (no
target token, so no loss and no gradient).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from xpseq.backends import Backend
from xpseq.data import EOS_ID

from .step import evaluate_loss

__all__ = ["balanced_order", "split_batch", "shard_rows", "Placement", "placement"]

KEYS = ("src", "src_len", "tgt_in", "tgt_out")

Batch = Mapping[str, np.ndarray]


def balanced_order(tokens: np.ndarray, shards: int) -> list[list[int]]:
    """Rows dealt to ``shards`` shards of ``ceil(B / shards)`` rows each, so that their
    real-token counts are nearly equal: longest first, each to the shard with the fewest
    tokens that still has room (the greedy "longest processing time" rule). ``tokens``
    ``(B,)`` is each row's count of real target tokens. Returns each shard's row indices
    (a shard may get fewer than ``ceil(B / shards)`` rows when ``B`` does not divide)."""
    tokens = np.asarray(tokens)
    if shards < 1:
        raise ValueError(f"shards must be a positive int, got {shards!r}")
    room = -(-len(tokens) // shards)
    rows: list[list[int]] = [[] for _ in range(shards)]
    load = np.zeros(shards)
    for i in np.argsort(-tokens, kind="stable"):
        open_shards = [s for s in range(shards) if len(rows[s]) < room]
        s = min(open_shards, key=lambda s: (load[s], s))
        rows[s].append(int(i))
        load[s] += tokens[i]
    return [sorted(r) for r in rows]


def split_batch(batch: Batch, shards: int, pad_id: int = 0) -> dict:
    """``batch`` with its rows reordered shard by shard (shard ``s`` holds rows
    ``[s·R, (s + 1)·R)``, ``R = ceil(B / shards)``), each shard's rows chosen by
    :func:`balanced_order` and topped up with empty rows (source ``[</s>]``, no target
    token). The loss and the gradient are those of ``batch`` (only the order of the sums
    changes), so a device mesh can split axis 0 evenly. Also returns ``"shard_tokens"``
    ``(shards,)``, each shard's real target tokens."""
    tgt_out = np.asarray(batch["tgt_out"])
    tokens = np.sum(tgt_out != pad_id, axis=1)
    order = balanced_order(tokens, shards)
    room = -(-len(tokens) // shards)
    out: dict = {}
    for key in ("src", "src_len", "tgt_in", "tgt_out"):
        value = np.asarray(batch[key])
        blank = np.full((1, *value.shape[1:]), pad_id, dtype=value.dtype)
        if key == "src":
            blank[0, 0] = EOS_ID
        elif key == "src_len":
            blank[0] = 1
        parts = []
        for rows in order:
            parts.append(value[rows])
            parts += [blank] * (room - len(rows))
        out[key] = np.concatenate(parts, axis=0)
    out["shard_tokens"] = np.array([tokens[r].sum() for r in order], dtype=np.int64)
    return out


def shard_rows(batch: Batch, shard: int, shards: int) -> dict:
    """Rows ``[shard·R, (shard + 1)·R)`` of a :func:`split_batch` result (``R`` its rows
    per shard): one process's part."""
    rows = batch["src"].shape[0] // shards
    return {k: np.asarray(batch[k])[shard * rows:(shard + 1) * rows]
            for k in ("src", "src_len", "tgt_in", "tgt_out")}


# ------------------------------------------------------------------------- placements


class Placement:
    """Where :func:`xpseq.train.fit` puts the parameters and each batch: here one device
    (``devices == 1``, every backend). ``main`` says whether this process writes files
    and prints (the only one here); ``rank`` is its index among the processes; ``group``
    is ``(rank, processes)`` for a step that sums over processes and ``mesh`` the device
    mesh for one split over devices (``make_train_step``'s arguments), ``None`` here."""

    devices = 1
    rank = 0
    main = True
    group: tuple[int, int] | None = None
    mesh: Any = None

    def __init__(self, backend: Backend):
        self.backend = backend

    def params(self, tree: Mapping[str, Any]) -> dict:
        """NumPy (or backend) arrays as the step's parameters or optimiser state."""
        return self.backend.asarray_tree(dict(tree))

    def batch(self, batch: Batch) -> dict:
        """A NumPy batch as the step's input."""
        return self.backend.asarray_tree({k: batch[k] for k in KEYS})

    def evaluate(self, eval_loss: Callable, params: dict, batches: Sequence[Batch]) -> float:
        """Mean negative log-likelihood per real target token over ``batches``."""
        return evaluate_loss(eval_loss, self.backend, params, batches, place=self.batch)

    def local(self, params: dict) -> dict:
        """``params`` on this process's first device, for work outside the step (a search
        in an :class:`~xpseq.train.callbacks.EpochMetrics`)."""
        return params

    def agree(self, value: Any) -> Any:
        """The first process's ``value`` on every process (here the only one's), so that
        all take the same decision (to stop, and why)."""
        return value


class MeshPlacement(Placement):
    """JAX: parameters and optimiser state replicated on a one-axis device mesh, each
    batch's rows split over it (:func:`split_batch`); in the jitted step each device
    computes the gradient of its rows and one ``psum`` adds them
    (``backend.data_parallel``)."""

    def __init__(self, backend: Backend, devices: int):
        super().__init__(backend)
        self.devices = devices
        self.mesh = backend.mesh(devices)
        # Several JAX processes (machines) share the mesh: each feeds the same whole batch,
        # process 0 decides when to stop, prints and writes the files.
        self.processes = backend.process_group()
        if self.processes is not None:
            self.rank = self.processes[0]
            self.main = self.rank == 0

    def params(self, tree: Mapping[str, Any]) -> dict:
        return self.backend.put(dict(tree), self.mesh, split=False)

    def batch(self, batch: Batch) -> dict:
        split = split_batch(batch, self.devices)
        return self.backend.put({k: split[k] for k in KEYS}, self.mesh, split=True)

    def local(self, params: dict) -> dict:
        return self.backend.asarray_tree({k: self.backend.to_numpy(v) for k, v in params.items()})

    def agree(self, value: Any) -> Any:
        if self.processes is None:
            return value
        return self.backend.broadcast(value)          # process 0's decision


class ProcessPlacement(Placement):
    """PyTorch: one process of a ``gloo`` group of ``devices`` processes. Each holds the
    whole parameters and optimiser state (the same in every process, since every update
    follows the same summed gradient), takes its rows of each batch
    (:func:`split_batch`, :func:`shard_rows`) and the weight ``its real tokens / the
    batch's``; the step sums the weighted values and gradients over the group."""

    def __init__(self, backend: Backend, devices: int):
        super().__init__(backend)
        group = backend.process_group()
        if group is None or group[1] != devices:
            found = "no process group" if group is None else f"a group of {group[1]}"
            raise ValueError(
                f"devices={devices} on torch needs {devices} processes in a torch.distributed "
                f"gloo group (found {found}): start them with `xpseq train --devices "
                f"{devices}` or torchrun --nproc-per-node {devices}")
        self.group = group
        self.rank, self.devices = group
        self.main = self.rank == 0

    def batch(self, batch: Batch) -> dict:
        split = split_batch(batch, self.devices)
        part = self.backend.asarray_tree(shard_rows(split, self.rank, self.devices))
        part["weight"] = float(split["shard_tokens"][self.rank]) / max(
            float(np.sum(split["shard_tokens"])), 1.0)
        return part

    def evaluate(self, eval_loss: Callable, params: dict, batches: Sequence[Batch]) -> float:
        sums = []
        for batch in batches:
            s, n = eval_loss(params, self.batch(batch))
            sums.append((s, n))
        total, count = self.backend.all_reduce_sum(
            (sum(s for s, _ in sums), sum(n for _, n in sums)))
        return float(total) / float(count)

    def agree(self, value: Any) -> Any:
        # Called after every step: one all-reduce of a single number says whether any
        # process has a value to share (a stop reason); only then is rank 0's object
        # broadcast (pickled: 3x the cost of the all-reduce, measured on 2 processes).
        flag = self.backend.xp.asarray([0.0 if value is None else 1.0])
        if float(self.backend.all_reduce_sum(flag)[0]) == 0.0:
            return None
        return self.backend.broadcast(value)


def placement(backend: Backend, devices: int) -> Placement:
    """The :class:`Placement` for ``devices`` devices of ``backend``: JAX splits each batch
    over a device mesh, PyTorch over the processes of its ``gloo`` group; NumPy and
    array_api_strict have one."""
    if devices == 1:
        return Placement(backend)
    if backend.name == "jax":
        return MeshPlacement(backend, devices)
    if backend.name == "torch":
        return ProcessPlacement(backend, devices)
    raise ValueError(f"devices={devices}: data parallelism needs the jax or torch backend; "
                     f"{backend.name} trains on one process (it has no parallel runtime)")


# ---------------------------------------------------------------------- processes


def spawn(fn: Callable[..., Any], processes: int, *args: Any) -> None:
    """Run ``fn(*args)`` in ``processes`` new processes that form a ``torch.distributed``
    ``gloo`` group on this machine (rank 0 first; each with one intra-op thread), and wait
    for them; an exception in one is raised here. Ctrl-C ends them all and raises
    ``KeyboardInterrupt`` here alone. ``fn`` must be importable by name (the
    processes start fresh). Under ``torchrun`` the group already exists: call ``fn``
    there after :func:`join_group` instead."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:                       # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.start_processes(_run_in_group, args=(processes, port, os.getpid(), fn, args),
                                 nprocs=processes, join=False, start_method="spawn")
    try:
        while not context.join():
            pass
    except KeyboardInterrupt:
        # Ctrl-C: the processes ignore it (so that none prints its own traceback, or a
        # thread's); this one ends them and reports the interruption once. What they
        # saved stays: a checkpoint is written whole or not at all.
        for process in context.processes:
            if process.is_alive():
                process.terminate()
        for process in context.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
        raise


def _run_in_group(rank: int, processes: int, port: int, parent: int,
                  fn: Callable[..., Any], args: tuple) -> None:
    import signal

    import torch
    import torch.distributed as dist

    signal.signal(signal.SIGINT, signal.SIG_IGN)        # the parent handles Ctrl-C ...
    signal.signal(signal.SIGTERM, _end_quietly)         # ... and ends this process
    _end_with(parent)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=processes)
    try:
        fn(*args)
    finally:
        dist.destroy_process_group()


def _end_with(parent: int) -> None:
    """This process is sent SIGTERM when its parent ends, however it ends (``kill -9``
    included): Linux's ``PR_SET_PDEATHSIG``; elsewhere nothing is set. A parent already
    gone ends it at once."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)                    # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):                    # not Linux
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _end_quietly(signum: int, frame: Any) -> None:
    """SIGTERM in a process of :func:`spawn`: unwind (so that Python releases what it
    holds) with nothing more on the terminal; the parent reports the interruption."""
    import os
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    sys.stderr = open(os.devnull, "w")
    raise SystemExit(128 + signum)


def join_group() -> tuple[int, int]:
    """Join the ``gloo`` group described by ``torchrun``'s environment (``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) if this process is not in one yet;
    returns ``(rank, world_size)``."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()
