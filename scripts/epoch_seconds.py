"""Seconds per training epoch on the toy task, per backend, as ratios to NumPy's.

Run: ``python -m scripts.epoch_seconds [--pairs N] [--epochs E] [--dtypes float32,float64]
[--backends jax,torch,numpy]`` (about 2 minutes on 2 cores with the defaults).

The demo's attention model (embed 32, hidden 64, batch 64, padding to multiples of 8) on
the same batches on every backend: JAX and PyTorch differentiate the loss themselves,
NumPy runs the hand-derived backward pass. The first epoch includes JAX's compilations and
is reported apart; the figure compared is the median of the later epochs. PyTorch runs with
one thread (``--threads``); NumPy's BLAS with whatever the environment sets.
"""

from __future__ import annotations

import statistics
import sys

from xpseq import backends
from xpseq.core.optim import adam
from xpseq.tasks import model_config, toy_task, train_model
from xpseq.train import TrainConfig

from . import _common as common


def main(argv: list[str] | None = None) -> int:
    parser = common.script_parser(__doc__)
    parser.add_argument("--pairs", type=int, default=3000, help="training pairs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--backends", default="jax,torch,numpy")
    common.add_threads_option(parser)
    args = parser.parse_args(argv)
    common.require_at_least(parser, args, ("epochs",), 2, "the first epoch is reported apart")
    names = [n for n in common.comma_list(args.backends) if n in backends.available()]
    common.set_torch_threads(args.threads, names)
    print(f"toy task, {args.pairs} pairs, {args.epochs} epochs; torch threads {args.threads}, "
          + common.settings_text(common.env_vars(("OMP_NUM_THREADS",))))
    print(f"machine: {common.machine_text()}; "
          + common.versions_text(common.package_versions(("numpy", "torch", "jax"))))
    task = toy_task(n_train=args.pairs, n_dev=100, n_test_per_bucket=1)
    print(common.markdown_table(["dtype", "backend", "first epoch s", "later epochs s (median)",
                                 "vs numpy", "losses"]))
    for dtype in common.comma_list(args.dtypes):
        rows = {}
        for name in names:
            settings = TrainConfig(epochs=args.epochs, optimizer=adam(3e-3), progress=False)
            with common.jax_x64_for(dtype):              # x64 for the float64 rows only
                _, result = train_model(task, backends.get(name),
                                        model_config(task, dropout=0.1), settings,
                                        dtype=dtype, callbacks=[])
            seconds = [h["seconds"] for h in result.history]
            rows[name] = (seconds[0], statistics.median(seconds[1:]),
                          [h["train_loss"] for h in result.history])
        base = rows.get("numpy", next(iter(rows.values())))[1]
        for name, (first, later, losses) in rows.items():
            print(common.markdown_row([dtype, name, f"{first:.2f}", f"{later:.2f}",
                                       f"{later / base:.2f}x",
                                       ", ".join(f"{v:.4f}" for v in losses)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
