"""Portable checkpoints: safetensors for the arrays, JSON metadata for everything else.

One file holds::

    params/<name>        every model parameter (``param_shapes(config)``)
    opt/<key>/<name>     the optimiser state, nested keys joined by "/" (e.g. opt/m/out.W,
                         opt/step, opt/scale: the plateau factor)
    xpseq/format         a one-byte array holding the format version (2), so that the
                         arrays' digest covers it too
    metadata "xpseq"     JSON: format version, model kind and its config, vocabularies,
                         optimiser name and hyperparameters (a learning-rate schedule as
                         its ``to_dict()``), training state (epoch, step, history ...)
    metadata "sha256"    a SHA-256 digest of every tensor's name, dtype, shape and bytes,
                         and of the "xpseq" JSON text

No pickle anywhere: safetensors stores raw little-endian arrays and a JSON header. A file is
written to a temporary name in the same folder and renamed over the target, so a crash
never leaves a half-written checkpoint under the real name (a temporary file that a killed
process left behind is removed by the next save of the same path, once it is a minute
old). Writing again over an existing checkpoint keeps that file's permission bits (a 0600
checkpoint stays 0600; a new file gets 0666 less the umask), and a path that is a symbolic
link stays a link: the file it points to is replaced, in that file's folder.

Loading reads the safetensors header first and checks every tensor's name, dtype and shape
against the stored configuration before it reads any array (a tensor that does not belong,
however large, is refused without being read); then it reads each array once. It refuses,
with a :class:`CheckpointError` that names the file: anything truncated or corrupted
(safetensors' own header checks plus the digest, which covers the metadata too, so one
changed byte of the configuration or a vocabulary is caught), another format version or an
unknown model kind, metadata of the wrong structure (vocabularies that do not fit the
model, duplicated words ...), tensors that the configuration does not name, shapes that do
not match it, and non-finite parameters (unless ``allow_nonfinite=True``). ``save`` refuses
to write non-finite parameters. The arrays come back as NumPy and convert to any backend.

Format 2 records the model kind (``"model": "rnn"``, a name of :mod:`xpseq.models`) and its
digest covers the metadata. Format 1, written before there was more than one kind, has no
kind (it is read as an ``"rnn"`` checkpoint) and a digest of the arrays only: such files
still load, their metadata checked for structure but not by the digest, and :func:`load`
says so with an :class:`UnprotectedMetadataWarning`; saving one again
(``save(path, **fields of the loaded Checkpoint)``) writes format 2. A format-2 file whose
metadata was rewritten to say format 1 is refused: its arrays carry what format 1 never
wrote (the ``xpseq/format`` array, the plateau factor ``opt/scale``, or another model
kind's parameters).

An optimiser state written before the plateau factor was part of every state has no
``opt/scale``: it had an ``opt/lr_scale`` where the run lowered its rate on plateaus, and
none otherwise. :func:`load` gives such a state its ``scale`` (that ``lr_scale``, or 1), so
it resumes as it would have.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import pathlib
import stat
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from xpseq import models
from xpseq.core.optim import Optimizer, from_spec
from xpseq.io import files

from . import schedules

__all__ = ["save", "load", "average", "Checkpoint", "CheckpointError",
           "UnprotectedMetadataWarning", "FORMAT_VERSION"]

FORMAT_VERSION = 2
#: Formats this version reads: 1 (no model kind: an "rnn" model) and 2.
READABLE_FORMATS = (1, 2)
#: The tensor that records the format among the arrays (covered by their digest).
FORMAT_TENSOR = "xpseq/format"

#: The dtypes a parameter may have, and an optimiser state entry (safetensors' names).
_PARAM_DTYPES = ("F16", "F32", "F64")
_STATE_DTYPES = _PARAM_DTYPES + ("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be trusted or does not fit its configuration."""


class UnprotectedMetadataWarning(UserWarning):
    """A checkpoint was loaded whose metadata (configuration, vocabularies, training
    state) its digest does not cover: a format-1 file. Saving it again writes format 2."""


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
        """The optimiser the checkpoint was trained with (same hyperparameters, its
        learning-rate schedule included)."""
        if self.optimizer is None:
            raise CheckpointError(f"{self.path}: the checkpoint records no optimiser")
        hyperparams = dict(self.optimizer["hyperparams"])
        if isinstance(hyperparams.get("lr"), Mapping):        # a schedule's to_dict()
            hyperparams["lr"] = schedules.from_dict(hyperparams["lr"])
        return from_spec(self.optimizer["name"], hyperparams)


def save(path: str | os.PathLike, *, config: Any, params: Mapping[str, Any],
         opt_state: Mapping[str, Any] | None = None, optimizer: Optimizer | None = None,
         vocabs: Mapping[str, list] | None = None,
         train_state: Mapping[str, Any] | None = None,
         metadata: Mapping[str, Any] | None = None,
         allow_nonfinite: bool = False, force: bool = False) -> pathlib.Path:
    """Write a checkpoint whole or not at all and return its path.

    It goes through :func:`xpseq.io.files.write`: a temporary file in the target's folder,
    synced, renamed over the target. An existing checkpoint of xpseq at ``path`` is
    replaced and keeps its permission bits (a new path gets 0666 less the umask); any
    other existing file is refused unless ``force``, and an input of the current run
    (:func:`xpseq.io.files.run`) always. Where ``path`` is a symbolic link, the file it
    points to is written and the link stays.

    Parameters
    ----------
    config : the model's configuration (the ``Config`` of a kind of :mod:`xpseq.models`;
        the kind is stored with it)
    params : parameter dict of NumPy arrays (``backend.to_numpy`` them first), with exactly
        the names and shapes of the model's ``param_shapes(config)``
    opt_state : the optimiser state (NumPy arrays in nested dicts), optional
    optimizer : the :class:`Optimizer` it belongs to (name and hyperparameters are kept;
        a learning-rate schedule must have ``to_dict``, as those of
        :mod:`xpseq.train.schedules`)
    vocabs : e.g. ``{"src": [...tokens], "tgt": [...]}``, optional
    train_state : JSON-serialisable training progress (epoch, step, history ...), optional
    metadata : anything else JSON-serialisable (e.g. how the task's data was made), optional
    allow_nonfinite : write parameters that hold NaN or infinity (refused by default:
        ``FloatingPointError`` naming the parameter, and nothing is written)
    force : replace an existing file at ``path`` that is not an xpseq checkpoint

    Raises
    ------
    TypeError, ValueError, CheckpointError
        Arguments that do not make a checkpoint (nothing is written).
    xpseq.io.OutputRefused
        ``path`` is empty, an input of the current run, a folder or special file, or a
        file that is not an xpseq checkpoint (without ``force``); a ``ValueError``.
    FloatingPointError
        Non-finite parameters without ``allow_nonfinite`` (nothing is written).
    OSError
        The file cannot be written (a full disk, a folder without write permission ...);
        a checkpoint already at ``path`` is then left as it was.
    """
    if os.fspath(path) == "":
        raise files.OutputRefused("save: path is empty; give a file name")
    path = pathlib.Path(path)
    try:
        model = models.of(config)
    except TypeError as err:
        raise TypeError(f"save: {err}") from None
    tensors = {}
    for name, array in params.items():
        tensors[f"params/{name}"] = _host(array, f"params[{name!r}]")
    _check_params(path, config, {k[len("params/"):]: v for k, v in tensors.items()})
    try:
        _check_vocabs(path, config, None if vocabs is None else
                      {k: list(v) for k, v in vocabs.items()})
    except CheckpointError as err:
        raise ValueError(f"save: {err}") from None
    if not allow_nonfinite:
        bad = _first_nonfinite(tensors)
        if bad is not None:
            raise FloatingPointError(f"save: {bad} holds non-finite values (the training "
                                     f"diverged?); {path} was not written")
    if opt_state is not None:
        for key, array in _flatten(opt_state, "opt"):
            tensors[key] = _host(array, key)
    tensors[FORMAT_TENSOR] = np.asarray(FORMAT_VERSION, dtype=np.uint8)
    meta = {
        "format": FORMAT_VERSION,
        "model": model.kind,
        "config": config.to_dict(),
        "vocabs": None if vocabs is None else {k: list(v) for k, v in vocabs.items()},
        "optimizer": None if optimizer is None else _optimizer_record(optimizer),
        "train_state": None if train_state is None else dict(train_state),
        "metadata": None if metadata is None else dict(metadata),
    }
    try:
        meta_json = json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"save: the metadata is not JSON-serialisable: {err}") from None
    from safetensors.numpy import save as st_save

    blob = st_save(tensors, metadata={"xpseq": meta_json,
                                      "sha256": _digest(tensors, meta_json)})
    files.write(path, blob, kind="checkpoint", force=force)
    return path


def _not_a_file(path: pathlib.Path) -> None:
    """Raise what ``path``, which is not a regular file, is instead: missing
    (FileNotFoundError), a symbolic link loop or a special file (CheckpointError)."""
    import errno

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise FileNotFoundError(f"checkpoint {path} is a symbolic link to "
                                    f"{os.readlink(path)}, which does not exist") from None
        raise FileNotFoundError(f"checkpoint {path} does not exist") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise CheckpointError(f"{path} is a symbolic link loop (it never reaches a "
                                  "file)") from None
        raise CheckpointError(f"{path}: {err.strerror}") from None
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    kind = next((k for test, k in kinds if test(mode)), "a special file")
    raise CheckpointError(f"{path} is {kind}, not a checkpoint file")


def load(path: str | os.PathLike, backend: Any = None, *,
         allow_nonfinite: bool = False) -> Checkpoint:
    """Read and verify a checkpoint; convert its arrays to ``backend`` if one is given.

    ``allow_nonfinite=True`` accepts parameters holding NaN or infinity (e.g. to inspect a
    diverged run); by default they are refused.

    The safetensors header is checked first: every tensor's name, dtype and shape against
    the stored configuration (``params/<name>`` with the shapes of ``param_shapes(config)``;
    ``opt/<key>/<name>`` with its parameter's shape, or ``opt/<key>`` of one element such as
    ``opt/step``; ``xpseq/format``), so that a tensor that does not belong is refused
    without being read. Then each array is read once, and the digest computed over the
    arrays as they are read.

    Warns
    -----
    UnprotectedMetadataWarning
        A format-1 file: its metadata is not covered by the digest (it loads; saving it
        again writes format 2).

    Raises
    ------
    FileNotFoundError
        No such file.
    CheckpointError
        An unreadable, truncated, corrupted or foreign file, another format version, an
        unknown model kind, malformed metadata, a format-2 file whose metadata was
        rewritten as format 1, tensors the configuration does not name or shapes that do
        not match it, or non-finite parameters.
    """
    path = pathlib.Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file")
    if not path.is_file():
        _not_a_file(path)
    if not os.access(path, os.R_OK):
        raise CheckpointError(f"{path}: permission denied (the file is not readable)")
    files.note_input(path)                  # no write of this run replaces it
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            metadata = f.metadata() or {}
            if "xpseq" not in metadata or "sha256" not in metadata:
                raise CheckpointError(f"{path}: a safetensors file, but not an xpseq "
                                      "checkpoint (no xpseq metadata)")
            header = {}
            for name in f.keys():
                entry = f.get_slice(name)
                header[name] = (entry.get_dtype(), tuple(entry.get_shape()))
            meta = _read_meta(path, metadata["xpseq"])
            if meta["format"] == 1:
                _refuse_rewritten_format(path, meta, header)
            model, config = _model_config(path, meta)
            _check_header(path, model.param_shapes(config), header)
            # Every tensor is now one the configuration names: read each once, and digest
            # it as it comes.
            covered = metadata["xpseq"] if meta["format"] >= 2 else None
            digest, tensors = hashlib.sha256(), {}
            for name in sorted(header):
                tensors[name] = f.get_tensor(name)
                _digest_update(digest, name, tensors[name])
    except CheckpointError:
        raise
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or corrupted?): "
                              f"{err}") from None
    if _digest_end(digest, covered) != metadata["sha256"]:
        what = "arrays and metadata" if covered is not None else "arrays"
        raise CheckpointError(f"{path}: the stored {what} do not match their digest; the "
                              "file is corrupted")
    marker = tensors.pop(FORMAT_TENSOR, None)
    if marker is not None and (marker.dtype.kind not in "iu" or int(marker.reshape(-1)[0])
                               != meta["format"]):
        raise CheckpointError(f"{path}: {FORMAT_TENSOR} holds {marker.reshape(-1)[0]!r}, the "
                              f"metadata says format {meta['format']}; the file is corrupted")
    params = {k[len("params/"):]: v for k, v in tensors.items() if k.startswith("params/")}
    _check_vocabs(path, config, meta["vocabs"])
    if not allow_nonfinite:
        bad = _first_nonfinite(tensors)
        if bad is not None:
            raise CheckpointError(f"{path}: {bad} holds non-finite values (a diverged run?); "
                                  "pass allow_nonfinite=True to load it anyway")
    opt = {k: v for k, v in tensors.items() if k.startswith("opt/")}
    opt_state = _with_scale(_unflatten(opt, "opt")) if opt else None
    ckpt = Checkpoint(path=path, config=config, params=params, opt_state=opt_state,
                      optimizer=meta["optimizer"], vocabs=meta["vocabs"],
                      train_state=meta["train_state"], metadata=meta["metadata"])
    if ckpt.optimizer is not None:
        try:
            ckpt.make_optimizer()
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{path}: unusable optimiser record: {err}") from None
    if meta["format"] == 1:
        warnings.warn(
            f"{path} is a format-1 checkpoint: its metadata (configuration, vocabularies, "
            "training state) is not covered by its digest, so a change to it would go "
            "unnoticed; saving it again writes format 2, whose digest covers it",
            UnprotectedMetadataWarning, stacklevel=2)
    if backend is not None:
        ckpt.params = {k: backend.asarray(v) for k, v in params.items()}
        if opt_state is not None:
            ckpt.opt_state = _map(opt_state, backend.asarray)
    return ckpt


def average(paths: Sequence[str | os.PathLike], backend: Any = None) -> Checkpoint:
    """The element-wise mean of the parameters of several checkpoints of one model (e.g.
    the last epochs of a run, which ``SaveCheckpoint(..., keep_epochs=k)`` writes).

    The mean is taken in float64 and stored in the parameters' own dtype. The result has
    the first file's configuration, vocabularies and metadata, no optimiser state, and
    ``path`` of the first file; ``train_state`` records the files averaged
    (``{"averaged": [...]}``).

    Raises
    ------
    ValueError
        No paths, or checkpoints whose model kind, configuration, vocabularies or parameter
        dtypes differ (their shapes then agree: :func:`load` checks them against the
        configuration).
    """
    if isinstance(paths, (str, os.PathLike)) or not len(paths):
        raise ValueError(f"average: paths must be a non-empty sequence of checkpoint files, "
                         f"got {paths!r}")
    loaded = [load(p) for p in paths]
    first = loaded[0]
    for other in loaded[1:]:
        for what, a, b in (("model configuration", first.config, other.config),
                           ("vocabularies", first.vocabs, other.vocabs),
                           ("parameter dtypes", {k: v.dtype for k, v in first.params.items()},
                            {k: v.dtype for k, v in other.params.items()})):
            if a != b:
                raise ValueError(f"average: {other.path} and {first.path} have different "
                                 f"{what}; only checkpoints of one model can be averaged")
    params = {}
    for name, array in first.params.items():
        total = np.zeros(array.shape, dtype=np.float64)
        for ckpt in loaded:
            total += ckpt.params[name]
        params[name] = (total / len(loaded)).astype(array.dtype)
    if backend is not None:
        params = {k: backend.asarray(v) for k, v in params.items()}
    return Checkpoint(path=first.path, config=first.config, params=params, opt_state=None,
                      optimizer=None, vocabs=first.vocabs,
                      train_state={"averaged": [str(c.path) for c in loaded]},
                      metadata=first.metadata)


# ------------------------------------------------------------------------- helpers


def _check_names(path: pathlib.Path, expected: Mapping[str, Any],
                 found: Mapping[str, Any]) -> None:
    """The parameter names ``found`` are exactly those ``expected``."""
    missing = sorted(set(expected) - set(found))
    unknown = sorted(set(found) - set(expected))
    if missing or unknown:
        raise CheckpointError(f"{path}: parameters do not match the configuration: missing "
                              f"{missing}, unknown {unknown}")


def _check_params(path: pathlib.Path, config: Any, params: Mapping[str, Any]) -> None:
    expected = models.of(config).param_shapes(config)
    _check_names(path, expected, params)
    for name, shape in expected.items():
        if tuple(params[name].shape) != shape:
            raise CheckpointError(f"{path}: parameter {name} has shape "
                                  f"{tuple(params[name].shape)}, the configuration needs {shape}")


def _model_config(path: pathlib.Path, meta: Mapping[str, Any]) -> tuple[models.Model, Any]:
    """The model kind the metadata names (format 1: ``"rnn"``) and its configuration."""
    try:
        model = models.get(meta.get("model", "rnn"))
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from None
    try:
        config = model.Config.from_dict(meta["config"])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: invalid configuration: {err}") from None
    return model, config


def _refuse_rewritten_format(path: pathlib.Path, meta: Mapping[str, Any],
                             header: Mapping[str, tuple[str, tuple]]) -> None:
    """Refuse a file whose metadata says format 1 but whose arrays (``header``: name ->
    (dtype, shape)) hold what only format 2 writes: a format-2 file whose metadata was
    rewritten, which format 1's digest (of the arrays alone) would let through."""
    why = None
    if FORMAT_TENSOR in header:
        why = f"it holds {FORMAT_TENSOR}"
    elif "opt/scale" in header:
        why = "it holds opt/scale, the plateau factor"
    else:
        names = {k[len("params/"):] for k in header if k.startswith("params/")}
        for kind in models.available():
            if kind == "rnn":
                continue
            model = models.get(kind)
            try:
                theirs = set(model.param_shapes(model.Config.from_dict(meta["config"])))
            except (KeyError, TypeError, ValueError):
                continue
            if names == theirs:
                why = f"its parameters are a {kind} model's"
                break
    if why is not None:
        raise CheckpointError(f"{path}: the metadata says format 1, but the file was written "
                              f"as format 2 ({why}, which format 1 never wrote); its metadata "
                              "was rewritten, and is not covered by the digest")


def _check_header(path: pathlib.Path, expected: Mapping[str, tuple],
                  header: Mapping[str, tuple[str, tuple]]) -> None:
    """Check the tensors of a file's header (``name -> (dtype, shape)``, nothing read yet)
    against the parameters of its configuration (``expected``: name -> shape).

    Allowed: ``params/<name>`` for exactly the names of ``expected``, with those shapes and
    a floating dtype; ``opt/<key>/<name>`` for every parameter name, with its shape;
    ``opt/<key>`` of one element (``step``, ``scale``, ``lr_scale`` ...); ``xpseq/format``
    (one integer). Anything else is refused, naming the tensor.
    """
    params = {k[len("params/"):]: v for k, v in header.items() if k.startswith("params/")}
    _check_names(path, expected, params)
    for name, shape in expected.items():
        dtype, found = params[name]
        if found != tuple(shape):
            raise CheckpointError(f"{path}: parameter {name} has shape {found}, the "
                                  f"configuration needs {tuple(shape)}")
        if dtype not in _PARAM_DTYPES:
            raise CheckpointError(f"{path}: parameter {name} has dtype {dtype}; parameters "
                                  f"are one of {list(_PARAM_DTYPES)}")
    groups: dict[str, set] = {}
    scalars = set()
    for name, (dtype, shape) in sorted(header.items()):
        if name.startswith("params/"):
            continue
        if name == FORMAT_TENSOR:
            if dtype not in _STATE_DTYPES[len(_PARAM_DTYPES):] or math.prod(shape) != 1:
                raise CheckpointError(f"{path}: {FORMAT_TENSOR} has dtype {dtype} and shape "
                                      f"{shape}, not one integer; the file is corrupted")
            continue
        if not name.startswith("opt/"):
            raise CheckpointError(f"{path}: unexpected tensor {name!r} (dtype {dtype}, shape "
                                  f"{shape}): a checkpoint holds params/<name>, "
                                  f"opt/<key>[/<name>] and {FORMAT_TENSOR} only")
        if dtype not in _STATE_DTYPES:
            raise CheckpointError(f"{path}: optimiser state {name} has dtype {dtype}; the "
                                  f"state is one of {list(_STATE_DTYPES)}")
        key, _, rest = name[len("opt/"):].partition("/")
        if not rest:
            if math.prod(shape) != 1:
                raise CheckpointError(f"{path}: optimiser state {name} has shape {shape}; an "
                                      "entry that is not per parameter (step, scale ...) "
                                      "holds one number")
            scalars.add(key)
            continue
        groups.setdefault(key, set()).add(rest)
        if rest in expected and shape != tuple(expected[rest]):
            raise CheckpointError(f"{path}: optimiser state {key}/{rest} has shape {shape}, "
                                  f"its parameter {tuple(expected[rest])}")
    for key, names in sorted(groups.items()):
        if key in scalars:
            raise CheckpointError(f"{path}: optimiser state {key!r} is both one number "
                                  f"(opt/{key}) and per-parameter arrays")
        if names != set(expected):
            raise CheckpointError(f"{path}: the optimiser state {key!r} does not cover the "
                                  f"same parameters: missing {sorted(set(expected) - names)}, "
                                  f"unknown {sorted(names - set(expected))}")


def _optimizer_record(optimizer: Optimizer) -> dict:
    """``{"name", "hyperparams"}`` with a schedule as its ``to_dict()``."""
    hyperparams = {}
    for name, value in optimizer.hyperparams.items():
        if callable(value):
            if not callable(getattr(value, "to_dict", None)):
                raise TypeError(f"save: the optimiser's {name} is a function without "
                                "to_dict, which a checkpoint cannot record; use a schedule "
                                "of xpseq.train.schedules (e.g. 1e-3 * "
                                "warmup_inverse_sqrt(400))")
            value = value.to_dict()
        hyperparams[name] = value
    return {"name": optimizer.name, "hyperparams": hyperparams}


def _with_scale(opt_state: dict) -> dict:
    """The optimiser state with its plateau factor ``scale``: an earlier state's
    ``lr_scale``, or 1 where it had none (see the module docstring)."""
    if "scale" in opt_state or "step" not in opt_state:
        return opt_state
    state = {k: v for k, v in opt_state.items() if k != "lr_scale"}
    old = opt_state.get("lr_scale")
    state["scale"] = np.ones_like(opt_state["step"]) if old is None else old
    return state


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






def _digest(tensors: Mapping[str, np.ndarray], meta_json: str | None) -> str:
    """SHA-256 of every tensor (name, dtype, shape, bytes) and, from format 2 on, of the
    metadata's JSON text."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        _digest_update(h, name, tensors[name])
    return _digest_end(h, meta_json)


def _digest_update(h: Any, name: str, array: Any) -> None:
    """Add one tensor to the digest ``h``: its name, dtype and shape, then its bytes in C
    order (read in place where the array is contiguous: no copy)."""
    a = np.asarray(array)
    h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
    h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))


def _digest_end(h: Any, meta_json: str | None) -> str:
    """The digest ``h`` after the tensors: the metadata's JSON text added (from format 2
    on), as hex."""
    if meta_json is not None:
        h.update(b"xpseq-metadata|")
        h.update(meta_json.encode("utf-8"))
    return h.hexdigest()


_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "config": dict, "vocabs": (dict, type(None)), "optimizer": (dict, type(None)),
    "train_state": (dict, type(None)), "metadata": (dict, type(None))}


def _read_meta(path: pathlib.Path, text: str) -> dict:
    """The "xpseq" JSON metadata, checked for structure (not yet for meaning)."""
    try:
        meta = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise CheckpointError(f"{path}: unreadable metadata: {err}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: the metadata must be a JSON object, got "
                              f"{type(meta).__name__}")
    if meta.get("format") not in READABLE_FORMATS or isinstance(meta.get("format"), bool):
        raise CheckpointError(f"{path}: checkpoint format {meta.get('format')!r}, this xpseq "
                              f"reads formats {list(READABLE_FORMATS)}")
    if meta["format"] == 1 and "model" in meta:
        raise CheckpointError(f"{path}: format 1 has no model kind, but the metadata names one; "
                              "the file is corrupted")
    if meta["format"] >= 2 and not isinstance(meta.get("model"), str):
        raise CheckpointError(f"{path}: the metadata names no model kind")
    for key, types in _META_TYPES.items():
        if key == "config" and key not in meta:
            raise CheckpointError(f"{path}: the metadata has no config")
        meta.setdefault(key, None)
        if not isinstance(meta[key], types):
            raise CheckpointError(f"{path}: metadata entry {key!r} has the wrong type "
                                  f"({type(meta[key]).__name__})")
    return meta


def _check_vocabs(path: pathlib.Path, config: Any, vocabs: Mapping[str, Any] | None) -> None:
    """Vocabularies, when stored, are lists of distinct strings as long as the model's."""
    if vocabs is None:
        return
    for side, size in (("src", config.src_vocab), ("tgt", config.tgt_vocab)):
        words = vocabs.get(side)
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise CheckpointError(f"{path}: vocabulary {side!r} must be a list of strings")
        if len(words) != size:
            raise CheckpointError(f"{path}: vocabulary {side!r} has {len(words)} words, the "
                                  f"model {size}")
        if len(set(words)) != len(words):
            seen: set = set()
            twice = next(w for w in words if w in seen or seen.add(w))
            raise CheckpointError(f"{path}: vocabulary {side!r} holds {twice!r} twice")


def _first_nonfinite(tensors: Mapping[str, np.ndarray]) -> str | None:
    """The name of the first floating array (in name order) with a NaN or an infinity."""
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            return name
    return None


def _recorded_progress(path: pathlib.Path) -> tuple[int, int] | None:
    """``(epoch, step)`` of the training state that the checkpoint at ``path`` records,
    read from its header alone and not verified (for a message); ``None`` where there is
    no such file or it records none."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            state = json.loads((f.metadata() or {})["xpseq"])["train_state"]
        return int(state["epoch"]), int(state["step"])
    except Exception:  # noqa: BLE001 (anything unreadable records nothing)
        return None

