"""``xpseq demo`` and ``xpseq tour``.
"""

from __future__ import annotations

import argparse
import pathlib

from .common import _backend


def cmd_demo(args: argparse.Namespace) -> int:
    from xpseq.app.demo import run_demo

    backend = _backend(args.backend, args.compile)
    return run_demo(backend, quick=args.quick, out=pathlib.Path(args.out), dtype=args.dtype,
                    seed=args.seed, progress=not args.no_progress)


def cmd_tour(args: argparse.Namespace) -> int:
    from xpseq.tour import main as tour

    argv = (["--lesson", str(args.lesson)] if args.lesson else []) + \
        (["--list"] if args.list else []) + (["--code"] if getattr(args, "code", False) else [])
    return tour(argv, prog=args.parser.prog)
