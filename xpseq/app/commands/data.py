"""``xpseq data``: a task's data as TSV files.
"""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from xpseq.data.tsv import tsv_text
from xpseq.io import files

from .. import options as opts
from .. import outputs
from ..errors import CommandError
from .common import g2p_split, toy_task_for


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``xpseq data``'s parser and options."""
    p = sub.add_parser("data", help="export a task's data as TSV (the G2P split, the toy task)",
                       description="g2p: write the seeded CMU dictionary split as train.tsv, "
                       "dev.tsv and test.tsv (word<TAB>phones, one line per pronunciation), "
                       "so that other G2P tools train and score on exactly the same words. "
                       "toy: write the toy task's pairs (the demo's, or --quick's) as "
                       "train.tsv, dev.tsv and test-0.tsv ... test-4.tsv (by phrase count), "
                       "source<TAB>target, which train --task tsv reads.")
    p.add_argument("dataset", choices=("g2p", "toy"))
    p.add_argument("--export", required=True, metavar="DIR", help="the folder to write")
    p.add_argument("--force", action="store_true",
                   help="replace TSV files of the same names already in DIR")
    p.add_argument("--stress", action="store_true", help="g2p: keep the stress marks")
    p.add_argument("--quick", action="store_true", help="toy: the small toy dataset")
    p.add_argument("--seed", type=opts.seed_value, default=0,
                   help="the split's seed (g2p; default: 0, the published split) or the toy "
                   "data's")
    p.set_defaults(func=run, parser=p)
    return p


def run(args: argparse.Namespace) -> int:
    from xpseq.data.cmudict import export_tsv

    # a name too long for its file system, before any work (the file names are short)
    files.check_name(pathlib.Path(args.export) / "train.tsv", what=f"--export {args.export}")
    if args.dataset == "toy":
        return _export_toy(args)
    if args.quick:
        raise CommandError("--quick is an option of the toy data")
    outputs.check_export(args, ("train", "dev", "test"))
    split = g2p_split(args.stress, args.seed)
    try:
        paths = export_tsv(split, args.export, force=args.force)
    except OSError as err:
        raise CommandError(f"cannot write {args.export}: {err.strerror or err}") from None
    for part, path in paths.items():
        words = getattr(split, part)
        print(f"{path}: {len(words)} words, {sum(len(v) for v in words.values())} "
              "pronunciations")
    return 0


def _export_toy(args: argparse.Namespace) -> int:
    """``data toy --export DIR``: the toy task's pairs as TSV files that ``train --task tsv``
    reads (``train.tsv``, ``dev.tsv``, ``test-<phrases>.tsv``)."""
    from xpseq.app.demo import FULL, QUICK

    if args.stress:
        raise CommandError("--stress is an option of the g2p data")
    spec = dict((QUICK if args.quick else FULL)["data"], seed=args.seed)
    task = toy_task_for(spec)
    parts = {"train": task.train, "dev": task.dev,
             **{f"test-{bucket}": pairs for bucket, pairs in task.test.items()}}
    outputs.check_export(args, tuple(parts))
    texts = {f"{name}.tsv": tsv_text(pairs)[0].encode("utf-8") for name, pairs in parts.items()}
    try:                                # all of them or none
        files.write_set(args.export, texts, kind="tsv", force=args.force, what="--export")
    except OSError as err:
        raise CommandError(f"cannot write {args.export}: {err.strerror or err}") from None
    for name, pairs in parts.items():
        print(f"{pathlib.Path(args.export) / f'{name}.tsv'}: {len(pairs)} sentence pairs")
    return 0
