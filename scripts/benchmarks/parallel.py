"""``parallel`` (only with ``--only parallel``): training on 2 devices against 1.

Training throughput of both model kinds (the ``train`` RNN and the ``transformer`` sizes,
``--steps`` batches) on 2 devices against 1, float32: JAX on a mesh of the host's two cores
as CPU devices (``--xla_force_host_platform_device_count=2``, set by ``bench.py`` before
JAX starts; one device is then a plain single-device run), PyTorch with 2 processes of one
thread each in a ``gloo`` group against one process; and PyTorch with 2 intra-op threads in
one process, for comparison. The 1-device runs are pinned to one CPU as in ``train``
(unpinned, XLA spreads even one device's work over both cores); the 2-device runs have all
the process's CPUs. Targets: >= 1.7x for the Transformer, >= 1.5x for the RNN model. Also
JAX's 2 devices against its 1 device left on both cores (XLA's own threads), the fair
comparison for a user with both cores.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import tempfile
import time
from typing import Any, Callable

from .. import _common as common

from .context import Context
from .shared import Row, at_least, xpseq_loop


def models(context: Context) -> dict[str, tuple[Any, list, dict]]:
    """The RNN model of ``train`` and the Transformer of ``transformer``, each with its
    ``--steps`` timed batches (NumPy) and float32 initial parameters."""
    setup = context.transformer
    return {"rnn": (context.config, context.timed, context.init32),
            "transformer": (setup.config, setup.timed, setup.init32)}


def placed_loop(place: Any, config: Any, batches: list, init: dict, lr: float) -> Callable:
    """``xpseq_loop`` of ``config``'s step with the parameters and batches placed by
    ``place`` (an ``xpseq.train.parallel`` placement)."""
    from xpseq.core.optim import adam
    from xpseq.train import make_train_step

    optimizer = adam(lr)
    step = make_train_step(config, optimizer, place.backend, clip_norm=None,
                           group=place.group, mesh=place.mesh)
    return xpseq_loop(place.backend, step, place.params(init), optimizer,
                      [place.batch(b) for b in batches])


def torch_group_timing(config: Any, batches: list, init: dict, lr: float, repeats: int,
                       out: str) -> None:
    """One process of a 2-process torch group: the timed repeats (each ends with a
    barrier); rank 0 writes the seconds to ``out``."""
    import torch.distributed as dist

    from xpseq import backends
    from xpseq.train.parallel import placement

    place = placement(backends.get("torch"), 2)
    run = placed_loop(place, config, batches, init, lr)
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        run()
        dist.barrier()
        times.append(time.perf_counter() - start)
    if place.main:
        pathlib.Path(out).write_text(json.dumps(times))


def run(context: Context) -> list[Row]:
    """Training throughput on 2 devices against 1, both model kinds: JAX on a device mesh
    of the host's two cores, PyTorch with 2 processes of one thread (a gloo group); and
    PyTorch with 2 intra-op threads in one process and JAX's 1-device run left on both
    cores (XLA's own intra-op threads), for comparison. The other 1-device runs are pinned
    to ``--threads`` CPUs as in ``train``; the rest run on all the process's."""
    import torch

    from xpseq.train.parallel import placement, spawn

    args = context.args
    affinity = context.affinity
    rows: list[Row] = []
    details = {}
    for name, (config, batches, init) in models(context).items():
        tokens = context.tokens(batches)
        jax_runs = {n: placed_loop(placement(context.jax, n), config, batches, init, args.lr)
                    for n in (1, 2)}
        one_torch = placed_loop(placement(context.torch, 1), config, batches, init, args.lr)

        def torch_two_threads(run: Callable = one_torch) -> None:
            torch.set_num_threads(2)
            try:
                run()
            finally:
                torch.set_num_threads(args.threads)

        def on_one_core(run: Callable) -> Callable[[], None]:
            def pinned() -> None:        # a 1-device run gets one core, as in `train`
                affinity.pin()
                try:
                    run()
                finally:
                    affinity.release()
            return pinned

        times = common.take_turns({"jax 1": on_one_core(jax_runs[1]), "jax 2": jax_runs[2],
                                   "jax 1 all cores": jax_runs[1],
                                   "torch 1": on_one_core(one_torch),
                                   "torch 2 threads": torch_two_threads}, args.repeats)
        with tempfile.TemporaryDirectory() as tmp:
            out = str(pathlib.Path(tmp) / "times.json")
            spawn(torch_group_timing, 2, config, batches, init, args.lr, args.repeats, out)
            times["torch 2 processes"] = json.loads(pathlib.Path(out).read_text())
        rate = {n: tokens / statistics.median(t) for n, t in times.items()}
        details[name] = {"tokens_per_s": rate, "tokens": tokens}
        bound = 1.7 if name == "transformer" else 1.5
        for label, base, two in (("jax 2 devices vs 1", "jax 1", "jax 2"),
                                 ("torch 2 processes vs 1", "torch 1", "torch 2 processes")):
            target, met = at_least(rate[two] / rate[base], bound)
            rows.append(Row("parallel", f"{name} {label}", rate[two], "tok/s",
                            rate[two] / rate[base], target, met,
                            f"1 device: {rate[base]:,.0f} tok/s; {len(batches)} batches, "
                            f"{tokens} target tokens"))
        rows.append(Row("parallel", f"{name} jax 2 devices vs 1 device on both cores",
                        rate["jax 2"], "tok/s", rate["jax 2"] / rate["jax 1 all cores"],
                        detail="the 1-device run unpinned: XLA's own threads on both cores "
                        f"({rate['jax 1 all cores']:,.0f} tok/s)"))
        rows.append(Row("parallel", f"{name} torch 2 intra-op threads vs 1",
                        rate["torch 2 threads"], "tok/s",
                        rate["torch 2 threads"] / rate["torch 1"],
                        detail="one process, torch.set_num_threads(2)"))
    context.record("parallel", details)
    return rows
