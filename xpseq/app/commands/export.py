"""``xpseq export CHECKPOINT --onnx DIR``: a checkpoint as ONNX graphs that onnxruntime
runs (:func:`xpseq.export.onnx`)."""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from ..errors import CommandError


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``xpseq export``'s parser and options."""
    p = sub.add_parser("export", help="write a checkpoint as ONNX graphs that onnxruntime runs",
                       description="Trace the model of a checkpoint (an LSTM or GRU "
                       "encoder-decoder or a Transformer; --shipped: the shipped G2P model) "
                       "with ndonnx, from the same code it trains with, and write "
                       "DIR/encoder.onnx, DIR/step.onnx (one decoder step, its state as inputs "
                       "and outputs: a Transformer's key/value cache) and DIR/model.json "
                       "(vocabularies, search defaults, shapes). Batch and lengths are "
                       "symbolic; float16 parameters stay float16. xpseq translate, evaluate "
                       "and g2p --model decode DIR on onnxruntime. Needs pip install "
                       "'xpseq[onnx]'. Nothing in DIR is overwritten.")
    p.add_argument("checkpoint", nargs="?", help="a checkpoint of xpseq train (.safetensors)")
    p.add_argument("--shipped", action="store_true",
                   help="export the G2P model that ships with xpseq")
    p.add_argument("--onnx", required=True, metavar="DIR", help="the folder to write")
    p.add_argument("--dtype", choices=("float32", "float64"), default=None,
                   help="what the graphs compute in (default: float64 for a float64 "
                   "checkpoint, else float32)")
    p.set_defaults(func=run, parser=p)
    return p


def run(args: argparse.Namespace) -> int:
    """``export CHECKPOINT --onnx DIR``: the model as ONNX graphs (:func:`xpseq.export.onnx`)."""
    if args.shipped == bool(args.checkpoint):
        raise CommandError("export needs a CHECKPOINT or --shipped (the shipped G2P model), "
                           "not both")
    from xpseq import export, g2p
    from xpseq.io import files

    # a name too long for its file system, before any work (the file names are short)
    files.check_name(pathlib.Path(args.onnx) / "model.json", what=f"--onnx {args.onnx}")
    path = (g2p.MODEL_DIR / g2p.shipped()["files"][0]) if args.shipped else args.checkpoint
    try:
        folder = export.onnx(path, args.onnx, dtype=args.dtype)
    except ModuleNotFoundError as err:   # ndonnx: the message names xpseq[onnx]
        raise CommandError(str(err)) from None
    except FileNotFoundError as err:     # the checkpoint: export.onnx names it
        raise CommandError(str(err).removeprefix("export: ")) from None
    except OSError as err:
        raise CommandError(f"cannot write {args.onnx}: {err.strerror or err}") from None
    except ValueError as err:            # CheckpointError included: not an xpseq file
        raise CommandError(str(err)) from None
    for name in ("encoder.onnx", "step.onnx", "model.json"):
        size = (folder / name).stat().st_size
        print(f"{folder / name}: {size / 1e6:.2f} MB")
    return 0


