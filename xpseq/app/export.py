"""The commands around ONNX exports: ``xpseq export CHECKPOINT --onnx DIR`` and the
``--backend onnxruntime`` of ``translate`` and ``g2p``, which decode an export's folder
(:mod:`xpseq.export`) instead of a checkpoint."""

from __future__ import annotations

import argparse
import os
from typing import Any

from xpseq import backends

from . import options as opts
from .errors import CommandError


def cmd_export(args: argparse.Namespace) -> int:
    """``export CHECKPOINT --onnx DIR``: the model as ONNX graphs (:func:`xpseq.export.onnx`)."""
    if args.shipped == bool(args.checkpoint):
        raise CommandError("export needs a CHECKPOINT or --shipped (the shipped G2P model), "
                           "not both")
    from xpseq import export, g2p

    path = (g2p.MODEL_DIR / g2p.shipped()["files"][0]) if args.shipped else args.checkpoint
    try:
        folder = export.onnx(path, args.onnx, dtype=args.dtype)
    except ModuleNotFoundError as err:   # ndonnx: the message names xpseq[onnx]
        raise CommandError(str(err)) from None
    except OSError as err:
        raise CommandError(f"cannot write {args.onnx}: {err.strerror or err}") from None
    except ValueError as err:            # CheckpointError included: not an xpseq file
        raise CommandError(str(err)) from None
    for name in ("encoder.onnx", "step.onnx", "model.json"):
        size = (folder / name).stat().st_size
        print(f"{folder / name}: {size / 1e6:.2f} MB")
    return 0


def check_export(path: str, args: argparse.Namespace) -> None:
    """``--backend onnxruntime``: a one-line error unless ``path`` is a folder (an export),
    onnxruntime is installed and no option asks what an export fixes."""
    if args.compile:
        raise CommandError("--compile is torch's; --backend onnxruntime decodes an ONNX "
                           "export")
    if opts.precision_of(args).reduced:
        raise CommandError("--precision: an ONNX export computes in the dtype it was "
                           "exported in; --backend onnxruntime takes no --precision")
    if not os.path.isdir(path):
        raise CommandError(f"--backend onnxruntime decodes an ONNX export (the folder of "
                           f"xpseq export CHECKPOINT --onnx DIR); {path} is not a folder")
    import importlib.util

    if importlib.util.find_spec("onnxruntime") is None:
        raise CommandError("--backend onnxruntime needs onnxruntime: pip install "
                           "'xpseq[onnx]'")


def onnx_export(path: str, args: argparse.Namespace) -> Any:
    """``--backend onnxruntime``: the :class:`~xpseq.export.runtime.OnnxModel` of the export
    folder ``path``, or a one-line error (a checkpoint given, options an export fixes)."""
    from xpseq.export.runtime import OnnxModel

    check_export(path, args)
    try:
        model = OnnxModel(path, threads=backends.threads_set() or 1)
    except ValueError as err:
        raise CommandError(str(err)) from None
    dtype = getattr(args, "dtype", "float32")            # (g2p has no --dtype)
    if dtype != "float32" and dtype != model.meta["dtype"]:
        raise CommandError(f"--dtype {dtype}: {path} was exported in "
                           f"{model.meta['dtype']} (export it again with --dtype "
                           f"{dtype})")
    return model
