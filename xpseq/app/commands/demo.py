"""``xpseq demo``: the attention experiment end to end on the toy task."""

from __future__ import annotations

import argparse
import io
import pathlib
import sys
from typing import Any

from xpseq.io import files

from .. import options as opts
from .. import outputs
from .common import command_backend


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``xpseq demo``'s parser and options."""
    p = sub.add_parser("demo", help="train seq2seq, attention and a Transformer on the toy "
                       "task and compare them",
                       description="The attention experiment end to end: trains three models "
                       "on the toy English->Zhoric task, the plain seq2seq baseline (an LSTM "
                       "without attention), the attention LSTM (Luong general attention) and a "
                       "small Transformer, then prints BLEU and exact match by sentence length "
                       "(0-4 phrases; 4 is longer than anything in training), greedy vs beam "
                       "search, an attention heatmap and teacher forcing vs autoregressive "
                       "decoding, and writes the heatmap, the loss curves and the three "
                       "checkpoints to --out.")
    opts.backend_options(p, "training backend " + opts.DEFAULT_BACKEND)
    p.add_argument("--quick", action="store_true",
                   help="a small smoke run: less data, smaller models, one epoch (under a "
                   "minute)")
    p.add_argument("--out", default="out", metavar="DIR",
                   help="folder for the PNGs and the three checkpoints (default: out); a "
                   "file of the same name that xpseq did not write is not replaced")
    p.add_argument("--force", action="store_true",
                   help="replace files of those names in --out that xpseq did not write "
                   "(never a folder or a special file)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run, check=check, parser=p)
    return p


def check(args: argparse.Namespace) -> None:
    opts.check_compile(args)


def run(args: argparse.Namespace) -> int:
    from xpseq.app.demo import run_demo

    outputs.check_demo_outputs(args.out, args.force)
    if args.force:                      # checked above: the run may replace them
        for name in outputs.DEMO_FILES:
            files.declare_output(pathlib.Path(args.out) / name)
    backend = command_backend(args.backend, args.compile)
    if not sys.stdout.isatty() and isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # a pipe or a log: each line as it comes
    return run_demo(backend, quick=args.quick, out=pathlib.Path(args.out), dtype=args.dtype,
                    seed=args.seed, progress=not args.no_progress)
