"""Portable checkpoints: safetensors for the arrays, JSON metadata for everything else.

One file holds::

    params/<name>        every model parameter (``param_shapes(config)``)
    opt/<key>/<name>     the optimiser state, nested keys joined by "/" (e.g. opt/m/out.W)
    metadata "xpseq"     JSON: format version, model kind and its config, vocabularies,
                         optimiser name and hyperparameters, training state (epoch, step,
                         history ...)
    metadata "sha256"    a digest of every tensor's name, dtype, shape and bytes

No pickle anywhere: safetensors stores raw little-endian arrays and a JSON header. A file is
written to a temporary name in the same folder and renamed over the target, so a crash
never leaves a half-written checkpoint under the real name. Loading refuses, with a
:class:`CheckpointError` that names the file, anything truncated or corrupted (safetensors'
own header checks plus the digest), from another format version, or whose shapes do not
match its configuration. The arrays come back as NumPy and convert to any backend.

Format 2 records the model kind (``"model": "rnn"``, a name of :mod:`xpseq.models`);
format 1, written before there was more than one kind, has none and is read as an
``"rnn"`` checkpoint, unchanged otherwise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import tempfile
from typing import Any, Mapping

import numpy as np

from xpseq import models
from xpseq.core.optim import Optimizer, from_spec

__all__ = ["save", "load", "Checkpoint", "CheckpointError", "FORMAT_VERSION"]

FORMAT_VERSION = 2
#: Formats this version reads: 1 (no model kind: an "rnn" model) and 2.
READABLE_FORMATS = (1, 2)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be trusted or does not fit its configuration."""


@dataclasses.dataclass
class Checkpoint:
    """What :func:`load` returns. Arrays are NumPy unless a backend was asked for."""

    path: pathlib.Path
    config: Any
    params: dict
    opt_state: dict | None
    optimizer: dict | None
    vocabs: dict | None
    train_state: dict | None
    metadata: dict | None = None

    @property
    def model(self) -> models.Model:
        """The model kind of :attr:`config` (``model.kind`` is its name)."""
        return models.of(self.config)

    def make_optimizer(self) -> Optimizer:
        """The optimiser the checkpoint was trained with (same hyperparameters)."""
        if self.optimizer is None:
            raise CheckpointError(f"{self.path}: the checkpoint records no optimiser")
        return from_spec(self.optimizer["name"], self.optimizer["hyperparams"])


def save(path: str | os.PathLike, *, config: Any, params: Mapping[str, Any],
         opt_state: Mapping[str, Any] | None = None, optimizer: Optimizer | None = None,
         vocabs: Mapping[str, list] | None = None,
         train_state: Mapping[str, Any] | None = None,
         metadata: Mapping[str, Any] | None = None) -> pathlib.Path:
    """Write a checkpoint atomically (temporary file + rename) and return its path.

    Parameters
    ----------
    config : the model's configuration (the ``Config`` of a kind of :mod:`xpseq.models`;
        the kind is stored with it)
    params : parameter dict of NumPy arrays (``backend.to_numpy`` them first), with exactly
        the names and shapes of the model's ``param_shapes(config)``
    opt_state : the optimiser state (NumPy arrays in nested dicts), optional
    optimizer : the :class:`Optimizer` it belongs to (name and hyperparameters are kept)
    vocabs : e.g. ``{"src": [...tokens], "tgt": [...]}``, optional
    train_state : JSON-serialisable training progress (epoch, step, history ...), optional
    metadata : anything else JSON-serialisable (e.g. how the task's data was made), optional
    """
    path = pathlib.Path(path)
    try:
        model = models.of(config)
    except TypeError as err:
        raise TypeError(f"save: {err}") from None
    tensors = {}
    for name, array in params.items():
        tensors[f"params/{name}"] = _host(array, f"params[{name!r}]")
    _check_params(path, config, {k[len("params/"):]: v for k, v in tensors.items()})
    if opt_state is not None:
        for key, array in _flatten(opt_state, "opt"):
            tensors[key] = _host(array, key)
    meta = {
        "format": FORMAT_VERSION,
        "model": model.kind,
        "config": config.to_dict(),
        "vocabs": None if vocabs is None else {k: list(v) for k, v in vocabs.items()},
        "optimizer": None if optimizer is None else {"name": optimizer.name,
                                                     "hyperparams": optimizer.hyperparams},
        "train_state": None if train_state is None else dict(train_state),
        "metadata": None if metadata is None else dict(metadata),
    }
    try:
        meta_json = json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"save: the metadata is not JSON-serialisable: {err}") from None
    from safetensors.numpy import save as st_save

    blob = st_save(tensors, metadata={"xpseq": meta_json, "sha256": _digest(tensors)})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())     # mkstemp makes 0600; honour the umask instead
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load(path: str | os.PathLike, backend: Any = None) -> Checkpoint:
    """Read and verify a checkpoint; convert its arrays to ``backend`` if one is given.

    Raises
    ------
    FileNotFoundError
        No such file.
    CheckpointError
        A truncated, corrupted or foreign file, another format version, or shapes that do
        not match the stored configuration.
    """
    path = pathlib.Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or corrupted?): "
                              f"{err}") from None
    if "xpseq" not in metadata or "sha256" not in metadata:
        raise CheckpointError(f"{path}: a safetensors file, but not an xpseq checkpoint "
                              "(no xpseq metadata)")
    if _digest(tensors) != metadata["sha256"]:
        raise CheckpointError(f"{path}: the stored arrays do not match their digest; the "
                              "file is corrupted")
    try:
        meta = json.loads(metadata["xpseq"])
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: unreadable metadata: {err}") from None
    if meta.get("format") not in READABLE_FORMATS:
        raise CheckpointError(f"{path}: checkpoint format {meta.get('format')!r}, this xpseq "
                              f"reads formats {list(READABLE_FORMATS)}")
    kind = meta.get("model", "rnn") if meta["format"] == 1 else meta.get("model")
    try:
        model = models.get(kind)
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from None
    try:
        config = model.Config.from_dict(meta["config"])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: invalid configuration: {err}") from None
    params = {k[len("params/"):]: v for k, v in tensors.items() if k.startswith("params/")}
    _check_params(path, config, params)
    opt = {k: v for k, v in tensors.items() if k.startswith("opt/")}
    opt_state = _unflatten(opt, "opt") if opt else None
    if opt_state is not None:
        for key in ("m", "v", "momentum"):
            if key in opt_state and set(opt_state[key]) != set(params):
                raise CheckpointError(f"{path}: the optimiser state {key!r} does not cover "
                                      "the same parameters")
            for name, a in opt_state.get(key, {}).items():
                if a.shape != params[name].shape:
                    raise CheckpointError(f"{path}: optimiser state {key}/{name} has shape "
                                          f"{a.shape}, its parameter {params[name].shape}")
    ckpt = Checkpoint(path=path, config=config, params=params, opt_state=opt_state,
                      optimizer=meta.get("optimizer"), vocabs=meta.get("vocabs"),
                      train_state=meta.get("train_state"), metadata=meta.get("metadata"))
    if ckpt.optimizer is not None:
        try:
            ckpt.make_optimizer()
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"{path}: unusable optimiser record: {err}") from None
    if backend is not None:
        ckpt.params = {k: backend.asarray(v) for k, v in params.items()}
        if opt_state is not None:
            ckpt.opt_state = _map(opt_state, backend.asarray)
    return ckpt


# ------------------------------------------------------------------------- helpers


def _check_params(path: pathlib.Path, config: Any, params: Mapping[str, Any]) -> None:
    expected = models.of(config).param_shapes(config)
    missing = sorted(set(expected) - set(params))
    unknown = sorted(set(params) - set(expected))
    if missing or unknown:
        raise CheckpointError(f"{path}: parameters do not match the configuration: missing "
                              f"{missing}, unknown {unknown}")
    for name, shape in expected.items():
        if tuple(params[name].shape) != shape:
            raise CheckpointError(f"{path}: parameter {name} has shape "
                                  f"{tuple(params[name].shape)}, the configuration needs {shape}")


def _host(array: Any, what: str) -> np.ndarray:
    if not isinstance(array, (np.ndarray, np.generic)):
        raise TypeError(f"save: {what} must be a NumPy array (use backend.to_numpy), got "
                        f"{type(array).__name__}")
    return np.asarray(array, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)


def _flatten(tree: Mapping[str, Any], prefix: str) -> list[tuple[str, Any]]:
    out = []
    for key, value in tree.items():
        if "/" in key:
            raise ValueError(f"save: optimiser state key {key!r} may not contain '/'")
        if isinstance(value, Mapping):
            out.extend(_flatten(value, f"{prefix}/{key}"))
        else:
            out.append((f"{prefix}/{key}", value))
    return out


def _unflatten(flat: Mapping[str, Any], prefix: str) -> dict:
    tree: dict = {}
    for key, value in flat.items():
        parts = key[len(prefix) + 1:].split("/")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return tree


def _map(tree: Mapping[str, Any], fn: Any) -> dict:
    return {k: _map(v, fn) if isinstance(v, Mapping) else fn(v) for k, v in tree.items()}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _digest(tensors: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        a = np.asarray(tensors[name], order="C")
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()
