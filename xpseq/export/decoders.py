""":func:`load_decoder`: a trained model, from a checkpoint or an ONNX export, as a
:class:`~xpseq.search.Decoder`.

>>> import xpseq
>>> decoder = xpseq.load_decoder("toy.safetensors", backend="numpy")    # doctest: +SKIP
>>> decoder = xpseq.load_decoder("toy-onnx/")          # an export: onnxruntime  # doctest: +SKIP
>>> xpseq.tasks.translate(decoder, [["the", "cat", "sees", "the", "dog"]])  # doctest: +SKIP
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence
from typing import Any

from xpseq import backends
from xpseq.core.precision import Policy
from xpseq.data import Vocab
from xpseq.data import tokens as tok
from xpseq.search import CheckpointDecoder, Decoder, Ensemble

__all__ = ["load_decoder", "is_export", "EXPORT_ENGINE"]

#: The name by which the command's ``--backend`` (and ``backend=`` here) asks for an
#: export decoded by onnxruntime; a folder is decoded so without asking.
EXPORT_ENGINE = "onnxruntime"

Path = str | os.PathLike[str]


def is_export(path: Path) -> bool:
    """Whether ``path`` is an ONNX export's folder (what ``xpseq export --onnx DIR`` and
    :func:`xpseq.export.onnx` write: it holds a ``model.json``), which
    :func:`load_decoder` decodes on onnxruntime.

    Examples
    --------
    >>> is_export("toy.safetensors")
    False
    """
    return os.path.isfile(os.path.join(path, "model.json"))


def load_decoder(path: Path | Sequence[Path], *,
                 backend: str | backends.Backend | None = None, dtype: str | None = None,
                 precision: Policy | str | None = None) -> Decoder:
    """The model at ``path`` ready to decode.

    Parameters
    ----------
    path : a checkpoint file, several (decoded as an :class:`~xpseq.search.Ensemble`,
        their vocabularies the same), or an ONNX export's folder (``xpseq export --onnx
        DIR``), decoded by onnxruntime (:class:`xpseq.export.runtime.OnnxModel`, as many
        threads as :func:`xpseq.backends.set_threads` set, else one)
    backend : a checkpoint's backend: a name, a :class:`~xpseq.backends.Backend` or
        ``None`` for :func:`xpseq.backends.default` for decoding. For an export, ``None``
        or ``"onnxruntime"``.
    dtype : a checkpoint's parameters converted to ``"float32"`` or ``"float64"`` (``None``:
        as stored, float16 widened to float32); an export's must be ``None`` or the dtype
        it was exported in.
    precision : ``None``, ``"bf16"`` or a :class:`~xpseq.core.precision.Policy` (a
        checkpoint on JAX or PyTorch only; an export computes in its own dtype)

    Raises
    ------
    TypeError
        ``path`` is not a str, a path-like or a list or tuple of them (``None``, a number,
        ``bytes``).
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        Options that do not apply to what ``path`` is; a checkpoint without vocabularies;
        an ensemble of different vocabularies or trained for different things (task,
        stress marks, tokens).
    xpseq.train.checkpoint.CheckpointError
        A file that is not an xpseq checkpoint.

    Returns
    -------
    Decoder
        A :class:`~xpseq.search.Decoder`: what :func:`xpseq.tasks.translate`,
        :class:`xpseq.g2p.G2P` and the search decode with, whatever ``path`` holds.

    Examples
    --------
    >>> import xpseq
    >>> from xpseq.tasks import translate
    >>> decoder = xpseq.load_decoder("toy.safetensors")                # doctest: +SKIP
    >>> onnx = xpseq.load_decoder("toy-onnx/")                         # doctest: +SKIP
    >>> translate(decoder, [["the", "cat"]]) == translate(onnx, [["the", "cat"]])  # doctest: +SKIP
    True
    """
    what = ("load_decoder: path must be a str or path-like (a checkpoint file or an export "
            "folder) or a list of them")
    if isinstance(path, (str, os.PathLike)) and not isinstance(path, bytes):
        paths = [path]
    elif isinstance(path, (list, tuple)):
        paths = list(path)
        bad = [p for p in paths if not isinstance(p, (str, os.PathLike))
               or isinstance(p, bytes)]
        if bad:
            raise TypeError(f"{what}; got a list holding {type(bad[0]).__name__}")
    else:
        raise TypeError(f"{what}, got {type(path).__name__}")
    if not paths:
        raise ValueError("load_decoder: path must name a checkpoint or an export folder")
    policy = Policy.of(precision, "load_decoder: precision")
    folders = [pathlib.Path(p) for p in paths if pathlib.Path(p).is_dir()]
    for folder in folders if backend != EXPORT_ENGINE else ():  # (asked: OnnxModel says)
        if not is_export(folder):
            raise ValueError(f"load_decoder: {folder} is a folder, not a checkpoint file (nor "
                             "an ONNX export: it holds no model.json)")
    if folders or backend == EXPORT_ENGINE:
        return _export(paths, backend, dtype, policy)
    return _checkpoints(paths, backend, dtype, policy)


def _export(paths: list[Any], backend: Any, dtype: str | None, precision: Policy) -> Decoder:
    from xpseq.export.runtime import OnnxModel

    if len(paths) != 1:
        raise ValueError(f"load_decoder: an ONNX export is one folder, got {len(paths)} paths "
                         "(an ensemble does not export)")
    folder = pathlib.Path(paths[0])
    if not folder.is_dir():
        raise ValueError(f"load_decoder: backend={EXPORT_ENGINE!r} decodes an ONNX export (the "
                         f"folder of xpseq export CHECKPOINT --onnx DIR); {folder} is not a "
                         "folder")
    if backend not in (None, EXPORT_ENGINE):
        raise ValueError(f"load_decoder: {folder} is an ONNX export, decoded by onnxruntime; "
                         f"backend {getattr(backend, 'name', backend)!r} decodes checkpoints")
    if precision.reduced:
        raise ValueError("load_decoder: precision is fixed by an ONNX export (its dtype); "
                         "pass precision=None")
    model = OnnxModel(folder, threads=backends.threads_set() or 1)
    if dtype is not None and dtype != model.meta["dtype"]:
        raise ValueError(f"load_decoder: {folder} was exported in {model.meta['dtype']}, not "
                         f"{dtype} (export it again with --dtype {dtype})")
    return model


def _checkpoints(paths: list[Any], backend: Any, dtype: str | None,
                 precision: Policy) -> CheckpointDecoder:
    from xpseq.train import checkpoint

    if dtype not in (None, "float32", "float64"):
        raise ValueError(f"load_decoder: dtype must be None, 'float32' or 'float64', got "
                         f"{dtype!r}")
    be = backends.resolve(backend, "decode")
    loaded = [checkpoint.load(p) for p in paths]
    for ckpt in loaded:
        if not ckpt.vocabs:
            raise ValueError(f"load_decoder: {ckpt.path} holds no vocabularies; it cannot "
                             "decode")
        if ckpt.vocabs != loaded[0].vocabs:
            raise ValueError(f"load_decoder: {ckpt.path} and {loaded[0].path} have different "
                             "vocabularies; an ensemble needs the same")
        if _trained_for(ckpt.metadata) != _trained_for(loaded[0].metadata):
            raise ValueError(f"load_decoder: {ckpt.path} and {loaded[0].path} were trained "
                             f"for different things ({_trained_for(ckpt.metadata)} and "
                             f"{_trained_for(loaded[0].metadata)}); an ensemble needs the "
                             "same task, stress marks and tokens")

    def converted(ckpt: Any) -> dict[str, Any]:
        def to(v: Any) -> Any:
            wanted = dtype or ("float32" if v.dtype.itemsize < 4 else v.dtype.name)
            return v.astype(wanted)

        return {k: to(v) for k, v in ckpt.params.items()}

    first = loaded[0]
    vocabs = first.vocabs or {}                      # (checked above: it has them)
    src_vocab, tgt_vocab = Vocab.from_list(vocabs["src"]), Vocab.from_list(vocabs["tgt"])
    if len(loaded) == 1:
        return CheckpointDecoder(converted(first), first.config, src_vocab, tgt_vocab, be,
                                 metadata=first.metadata, precision=precision)
    return CheckpointDecoder([converted(c) for c in loaded],
                             Ensemble(tuple(c.config for c in loaded)), src_vocab, tgt_vocab,
                             be, metadata=first.metadata, precision=precision)


def _trained_for(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """What a checkpoint's metadata says it was trained for: its task, stress marks (a G2P
    model's) and tokens (per side, :func:`xpseq.data.tokens.of_model`: ``"char"`` as an
    older checkpoint stores it is ``["char", "char"]``)."""
    meta = metadata or {}
    return {"task": meta.get("task"), "stress": bool(meta.get("stress")),
            "tokens": list(tok.of_model(meta))}
