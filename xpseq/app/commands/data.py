"""``xpseq data``: a task's data as TSV files.
"""

from __future__ import annotations

import argparse
import pathlib

from .. import outputs
from ..errors import CommandError
from .common import _load_g2p, _toy_task


def cmd_data(args: argparse.Namespace) -> int:
    from xpseq.data.cmudict import export_tsv

    if args.dataset == "toy":
        return _export_toy(args)
    if args.quick:
        raise CommandError("--quick is an option of the toy data")
    outputs.check_export(args, ("train", "dev", "test"))
    split = _load_g2p(args.stress, args.seed)
    try:
        paths = export_tsv(split, args.export)
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
    task = _toy_task(spec)
    parts = {"train": task.train, "dev": task.dev,
             **{f"test-{bucket}": pairs for bucket, pairs in task.test.items()}}
    outputs.check_export(args, tuple(parts))
    folder = pathlib.Path(args.export)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, pairs in parts.items():
            path = folder / f"{name}.tsv"
            path.write_text("".join(f"{' '.join(s)}\t{' '.join(t)}\n" for s, t in pairs),
                            encoding="utf-8")
            print(f"{path}: {len(pairs)} sentence pairs")
    except OSError as err:
        raise CommandError(f"cannot write {args.export}: {err.strerror or err}") from None
    return 0
