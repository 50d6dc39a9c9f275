"""Seconds per training epoch on the toy task, per backend, as ratios to NumPy's.

Run: ``python scripts/epoch_seconds.py [--pairs N] [--epochs E] [--dtypes float32,float64]
[--backends jax,torch,numpy]`` (about 2 minutes on 2 cores with the defaults).

The demo's attention model (embed 32, hidden 64, batch 64, padding to multiples of 8) on
the same batches on every backend: JAX and PyTorch differentiate the loss themselves,
NumPy runs the hand-derived backward pass. The first epoch includes JAX's compilations and
is reported apart; the figure compared is the median of the later epochs. PyTorch runs with
one thread (``--threads``); NumPy's BLAS with whatever the environment sets.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from xpseq import backends
from xpseq.tasks import toy_task, train_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3000, help="training pairs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--backends", default="jax,torch,numpy")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first epoch is reported apart)")
    names = [n for n in args.backends.split(",") if n in backends.available()]
    if "torch" in names:
        import torch

        torch.set_num_threads(args.threads)
    print(f"toy task, {args.pairs} pairs, {args.epochs} epochs; torch threads {args.threads}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    task = toy_task(n_train=args.pairs, n_dev=100, n_test_per_bucket=1)
    print("| dtype | backend | first epoch s | later epochs s (median) | vs numpy | losses |")
    print("| --- | --- | --- | --- | --- | --- |")
    for dtype in args.dtypes.split(","):
        rows = {}
        for name in names:
            _, result = train_model(task, backends.get(name), epochs=args.epochs, dtype=dtype,
                                    patience=args.epochs, progress=False)
            seconds = [h["seconds"] for h in result.history]
            rows[name] = (seconds[0], statistics.median(seconds[1:]),
                          [h["train_loss"] for h in result.history])
        base = rows.get("numpy", next(iter(rows.values())))[1]
        for name, (first, later, losses) in rows.items():
            print(f"| {dtype} | {name} | {first:.2f} | {later:.2f} | {later / base:.2f}x | "
                  + ", ".join(f"{v:.4f}" for v in losses) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
