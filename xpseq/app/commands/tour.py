"""``xpseq tour``: the autodiff tour's lessons (:mod:`xpseq.tour`)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import options as opts


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``xpseq tour``'s parser and options."""
    p = sub.add_parser("tour", help="the autodiff tour: numpy by hand, jax, torch side by side",
                       description="Lessons on how JAX (function transforms), PyTorch (a "
                       "tape) and NumPy (xpseq's gradients derived by hand) differ: gradients "
                       "and their edge cases, dtypes and precision, tracing and compilation, "
                       "random numbers. Each runs the same small computation on all three and "
                       "prints what it measured on the installed versions, side by side.")
    p.add_argument("--lesson", type=opts.positive(int), metavar="N", help="run lesson N only")
    p.add_argument("--list", action="store_true", help="list the lessons")
    p.add_argument("--code", action="store_true",
                   help="print each lesson's code (numpy, jax, torch) before its table")
    p.set_defaults(func=run, parser=p)


# ------------------------------------------------------- --config and --resume
    return p


def run(args: argparse.Namespace) -> int:
    from xpseq.tour import main as tour

    argv = (["--lesson", str(args.lesson)] if args.lesson else []) + \
        (["--list"] if args.list else []) + (["--code"] if getattr(args, "code", False) else [])
    return tour(argv, prog=args.parser.prog)
