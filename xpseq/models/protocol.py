"""The model protocol: what training, search, checkpoints, tasks and the command need of a
model kind, and nothing else.

A model kind is one module of :mod:`xpseq.models` that defines ``MODEL``, a :class:`Model`.
Its functions are pure functions over a parameter dict (``{name: array}``) and a frozen
configuration dataclass; none of them knows which array library it runs on.

Two layers, as in :mod:`xpseq.core`: the *checked* functions (``loss``, ``loss_and_grad``)
validate their arguments and are what a user calls; the *kernels* (:class:`ModelKernels`)
trust them, take ``xp`` and the backend's loop primitives as keywords, and are what the
training step and the search run inside ``jax.jit`` after :func:`check_batch` has checked
each NumPy batch once.

Every configuration has ``src_vocab``, ``tgt_vocab``, ``pad_id`` and ``dropout``, and
``to_dict`` / ``from_dict`` (checkpoints store the kind and ``to_dict()``).

The padding id is not a choice of the model: the vocabularies reserve id 0 for ``<pad>``,
and the batches (:func:`xpseq.data.make_batches`) and the search pad with it. So
``pad_id`` is :data:`PAD_ID` (0) on every configuration, a class attribute rather than a
field (``from_dict`` still reads the ``pad_id`` that older checkpoints stored, when it is
0), and :class:`Model` refuses a ``Config`` whose ``pad_id`` is another id.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Iterable, Mapping, cast

import array_api_compat as compat
import array_api_compat.numpy as np_xp
import numpy as np

from xpseq.core import checks, values

__all__ = ["Model", "ModelKernels", "check_ids", "check_batch", "check_params",
           "check_loss_inputs", "BATCH_KEYS", "PAD_ID", "nest_by_prefix", "named_grads",
           "DictConfig", "SIZE_LIMITS", "check_size", "check_fits", "available_memory",
           "hand_derived_loss_and_grad"]

#: The padding id of every model's loss: ``xpseq.data.PAD_ID``, the id of ``<pad>`` in the
#: vocabularies, with which the batches and the search pad (``xpseq.data`` sits above the
#: models, so the constant is stated here too; a test holds the two equal).
PAD_ID = 0

#: The largest value of each kind of size a configuration takes, so that a typo (``layers =
#: 100000000``) is refused at once rather than filling the memory: a vocabulary, a width
#: (embedding, hidden units, ``d_model``, ``d_ff``, heads, positions) and a number of
#: layers. :func:`check_fits` then refuses parameters that would not fit in memory.
SIZE_LIMITS = {"vocab": 2**24, "width": 2**16, "layers": 1024}


def check_size(owner: str, field: str, value: Any, kind: str) -> int:
    """``value`` as a positive Python int at most ``SIZE_LIMITS[kind]``; a TypeError (not
    an int) or ValueError (out of range) naming ``owner.field`` otherwise."""
    limit = SIZE_LIMITS[kind]
    size = values.integer(owner, field, value, low=1)
    if size > limit:
        raise ValueError(f"{owner}: {field} must be at most {limit:,} (the largest {kind} "
                         f"xpseq takes), got {size:,}")
    return size


def available_memory() -> int | None:
    """Bytes of memory this machine can still give (Linux: ``MemAvailable`` of
    ``/proc/meminfo``; elsewhere its physical memory), or ``None`` if unknown."""
    import os

    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(shapes: Mapping[str, tuple[int, ...]], bytes_per_value: int, caller: str,
               *, copies: int = 1, what: str = "the parameters") -> None:
    """Refuse, with a MemoryError that says how much, ``copies`` of arrays of ``shapes``
    (``bytes_per_value`` bytes a value) that would not fit in the memory available now
    (:func:`available_memory`; no check where it is unknown)."""
    import math

    needed = copies * bytes_per_value * sum(math.prod(s) for s in shapes.values())
    free = available_memory()
    if free is not None and needed > free:
        raise MemoryError(f"{caller}: {what} need {needed / 2**30:,.1f} GiB but "
                          f"{free / 2**30:,.1f} GiB of memory are available; choose smaller "
                          "sizes")


#: The arrays of a training batch.
#:
#: ``src (B, S)``, ``src_len (B,)``, ``tgt_in (B, T)`` (``<s> y_1 ... y_{T-1}``) and
#: ``tgt_out (B, T)`` (``y_1 ... </s>``, then padding).
BATCH_KEYS = ("src", "src_len", "tgt_in", "tgt_out")


@dataclasses.dataclass(frozen=True)
class ModelKernels:
    """The unchecked functions of a model kind (arguments trusted, ``xp`` given).

    ``loss(params, config, batch, keep, *, scan, custom_vjp, xp) -> 0-d array``
        The training objective, averaged over real target tokens. ``keep`` is ``None``
        or a dict of boolean dropout keep-masks with the shapes of
        :attr:`Model.dropout_shapes`. ``scan`` is ``backend.scan``; ``custom_vjp`` is
        ``None`` or ``backend.custom_vjp``, for a model that runs some part with its
        hand-derived gradient inside the library's autodiff.
    ``loss_vjp(params, config, batch, keep, *, xp) -> (loss, backprop)``
        The same value and ``backprop(d_loss) -> grads`` (a dict like ``params``): the
        hand-derived backward pass, how NumPy trains.
    ``nll_sum(params, config, batch, *, scan, xp) -> (total, count)``
        Summed negative log-likelihood of the real target tokens without dropout, and
        their number: the dev loss, summed over batches.
    ``encode(params, config, src, src_len, *, scan, xp) -> encoded``
        Everything the decoder needs of the source: a dict of arrays with the batch on
        axis 0 (beam search repeats each row ``k`` times with
        :func:`xpseq.core.decoding.tile_beams`).
    ``decoder(params, config, encoded, *, attention, max_len, xp) -> (step, state)``
        The decoder as a pure step ``step(state, y_prev (B,)) -> (log_probs (B, V),
        state, attention (B, S) or None)`` and its first state, for at most ``max_len``
        steps (a model with a key/value cache sizes it so: a fixed shape, one compilation),
        or ``max_len=None`` for an eager loop of any length (such a cache may then grow);
        ``attention=False`` asks for ``None`` weights (beam search then carries none).
    ``decoder_spec(config) -> {"encoded": {name: shape}, "state": {name: shape}}``
        The shapes of ``encode``'s result and of the decoder's state, by dotted name (a
        nested key ``state["h"]`` is ``"state.h"``), each size an int or a symbolic name:
        ``"batch"``, ``"src_len"`` and ``"steps"`` (the steps decoded so far, for a state
        that grows). What an export's graphs declare (:mod:`xpseq.export`); ``None`` for
        a kind that does not export.
    loss_vjp_compiles : bool
        ``True`` when ``loss_vjp`` has no Python loop over time steps, so that a compiling
        backend (JAX) asked for ``gradients="hand-derived"`` traces the whole hand-derived
        pass into its program. ``False`` (the default): it differentiates ``loss`` itself,
        with ``custom_vjp`` given for the parts the model runs by hand (the RNN's
        loops over time).
    rules_under_autodiff : bool
        ``True`` when ``loss`` given ``custom_vjp`` computes the same function with
        cheaper backward rules attached (the Transformer's blockwise attention, whose rule
        keeps memory linear in the lengths): the training step then hands it
        ``backend.custom_vjp`` under the library's own differentiation too. ``False`` (the
        default): ``custom_vjp`` is given only for ``gradients="hand-derived"``.
    """

    loss: Callable[..., Any]
    loss_vjp: Callable[..., Any]
    nll_sum: Callable[..., Any]
    encode: Callable[..., Any]
    decoder: Callable[..., Any]
    decoder_spec: Callable[[Any], dict[str, dict[str, tuple[int | str, ...]]]] | None = None
    loss_vjp_compiles: bool = False
    rules_under_autodiff: bool = False


@dataclasses.dataclass(frozen=True)
class Model:
    """One model kind.

    Attributes
    ----------
    kind : str
        Its name in the registry and in checkpoints (``"rnn"``).
    Config : type
        A frozen dataclass with ``src_vocab``, ``tgt_vocab``, ``dropout``, ``pad_id``
        (which must be :data:`PAD_ID`; a class attribute will do), ``to_dict()`` and
        ``Config.from_dict(data)``.
    param_shapes : ``(config) -> {name: shape}``
        Every parameter, in a fixed order.
    init_params : ``(config, seed=0) -> {name: numpy float64 array}``
        The same start on every backend.
    loss : ``(params, config, batch, *, keep=None) -> 0-d array``
        Checked. ``batch`` holds :data:`BATCH_KEYS`.
    loss_and_grad : ``(params, config, batch, *, keep=None) -> (loss, grads)``
        Checked; the hand-derived backward pass.
    forward : ``(params, config, src, src_len, tgt_in) -> (logits, weights)``
        Checked; teacher forcing without dropout: ``logits (B, T, V_tgt)`` for
        ``tgt_in (B, T)`` (``<s> y_1 ... y_{T-1}``), and ``weights (B, T, S)``, the
        attention the search reports at each step for that prefix (``None`` for a model
        without attention). A kind may take further keywords.
    dropout_shapes : ``(config, src_shape, tgt_shape) -> {name: shape}``
        The keep-masks one training step draws (empty without dropout).
    kernels : ModelKernels
        The unchecked functions the training step and the search run.
    """

    kind: str
    Config: type[Any]
    param_shapes: Callable[[Any], dict[str, Any]]
    init_params: Callable[..., dict[str, Any]]
    loss: Callable[..., Any]
    loss_and_grad: Callable[..., tuple[Any, ...]]
    forward: Callable[..., tuple[Any, Any]]
    dropout_shapes: Callable[[Any, tuple[Any, ...], tuple[Any, ...]], dict[str, Any]]
    kernels: ModelKernels

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind.isidentifier():
            raise ValueError(f"Model: kind must be a name like 'rnn', got {self.kind!r}")
        missing = [n for n in ("to_dict", "from_dict") if not hasattr(self.Config, n)]
        if not dataclasses.is_dataclass(self.Config) or missing:
            raise TypeError(f"Model {self.kind!r}: Config must be a dataclass with to_dict "
                            f"and from_dict (missing {missing})")
        if not isinstance(self.kernels, ModelKernels):
            raise TypeError(f"Model {self.kind!r}: kernels must be a ModelKernels, got "
                            f"{type(self.kernels).__name__}")
        pad = getattr(self.Config, "pad_id", PAD_ID)
        if not checks.is_int(pad) or pad != PAD_ID:
            raise ValueError(f"Model {self.kind!r}: Config.pad_id must be {PAD_ID}, the id "
                             f"the data and the search pad with (xpseq.data.PAD_ID), got "
                             f"{pad!r}")


class DictConfig:
    """``to_dict`` / ``from_dict`` for a configuration dataclass (unknown fields refused),
    and ``pad_id``, :data:`PAD_ID` (see the module docstring)."""

    pad_id: ClassVar[int] = PAD_ID

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(cast(Any, self))          # a dataclass's base

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        data = dict(data)
        if "pad_id" in data:                          # stored by older checkpoints
            pad = data.pop("pad_id")
            if not checks.is_int(pad) or pad != PAD_ID:
                raise ValueError(f"{cls.__name__}: pad_id must be {PAD_ID}, the id the data "
                                 f"and the search pad with, got {pad!r}")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cast(Any, cls))})
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown fields {unknown}")
        return cls(**data)


def nest_by_prefix(names: Iterable[str], leaf: Callable[[str], Any]) -> dict[str, Any]:
    """Flat names in a nesting by their first dotted part: ``"dec.W_ih"`` is
    ``tree["dec"]["W_ih"]``, ``"src_embed"`` is ``tree["src_embed"]``; ``leaf(name)`` at each
    name (``str`` for the names themselves, ``params.__getitem__`` for the arrays).

    >>> nest_by_prefix(["embed", "dec.W", "dec.b"], str)
    {'embed': 'embed', 'dec': {'W': 'dec.W', 'b': 'dec.b'}}
    """
    tree: dict[str, Any] = {}
    for name in names:
        head, dot, rest = name.partition(".")
        if dot:
            tree.setdefault(head, {})[rest] = leaf(name)
        else:
            tree[head] = leaf(name)
    return tree


def hand_derived_loss_and_grad(loss_vjp: Callable[..., Any], params: Mapping[str, Any],
                               config: Any, batch: Mapping[str, Any], keep: Any, *, xp: Any,
                               seed_like: Any) -> tuple[Any, dict[str, Any]]:
    """A model's ``loss_and_grad`` from its hand-derived backward pass, for every kind.

    Parameters
    ----------
    loss_vjp : callable
        The kind's ``loss_vjp(params, config, batch, keep, *, xp) -> (loss, backprop)``
        (:attr:`ModelKernels.loss_vjp`).
    params : dict of arrays, the kind's parameters
    config : the kind's config
    batch : dict of arrays, the training batch (:data:`BATCH_KEYS`)
    keep : the dropout keep-masks, or ``None``
    xp : the arrays' namespace
    seed_like : array
        A parameter whose dtype and device the cotangent of the loss, ``1``, takes.

    Returns
    -------
    loss : 0-d array
    grads : dict of arrays with the names and shapes of ``params``
    """
    value, backprop = loss_vjp(params, config, batch, keep, xp=xp)
    one = xp.ones((), dtype=seed_like.dtype, device=compat.device(seed_like))
    return value, backprop(one)


def named_grads(names: Any, params: Mapping[str, Any],
                trees: Iterable[Any]) -> dict[str, Any]:
    """How a hand-derived backward pass hands over its parameter gradients, for every kind.

    Each part of the backward pass returns the gradients of the parameters it used as a
    tree: a part of the kind's nesting of its parameters (nested dicts and lists).
    ``names`` is that nesting with each parameter's flat name at its leaves; this function
    walks each tree of ``trees`` along it and returns one dict with the keys of
    ``params``, in their order. A parameter met several times (at every decoder step, a
    table shared by two embeddings, a tied output layer) gets the sum.

    Raises
    ------
    ValueError
        A parameter of ``params`` received no gradient (a backward pass that misses a
        part of the model).
    """
    flat: dict[str, Any] = {}

    def walk(name: Any, grad: Any) -> None:
        if isinstance(name, str):
            flat[name] = grad if name not in flat else flat[name] + grad
        elif isinstance(name, Mapping):
            for key, g in grad.items():
                walk(name[key], g)
        else:
            for n, g in zip(name, grad):
                walk(n, g)

    for tree in trees:
        walk(names, tree)
    missing = [name for name in params if name not in flat]
    if missing:
        raise ValueError(f"named_grads: the backward pass gave no gradient for {missing}")
    return {name: flat[name] for name in params}


def check_ids(fname: str, config: Any, xp: Any, **arrays: Any) -> None:
    """Check token-id arrays against a configuration's vocabularies.

    The arrays (``src``, ``src_len``, ``tgt``, ``tgt_out``) against ``config``'s
    vocabularies: integer dtypes, ranks, ids inside the vocabularies,
    ``1 <= src_len <= S``, one batch size."""
    vocab = {"src": config.src_vocab, "tgt": config.tgt_vocab, "tgt_out": config.tgt_vocab}
    for name, ids in arrays.items():
        if not xp.isdtype(ids.dtype, "integral"):
            raise TypeError(f"{fname}: {name} must have an integer dtype, got {ids.dtype}")
        if name == "src_len":
            continue
        if ids.ndim not in (1, 2):
            raise ValueError(f"{fname}: {name} must have shape (batch,) or (batch, time), "
                             f"got {tuple(ids.shape)}")
        index = checks.first_true_index((ids < 0) | (ids >= vocab[name]), xp)
        if index is not None:
            raise ValueError(f"{fname}: {name} ids must lie in [0, {vocab[name]}), got "
                             f"{int(ids[index])} at {index}")
    if "src" in arrays:
        src, src_len = arrays["src"], arrays["src_len"]
        if src.ndim != 2:
            raise ValueError(f"{fname}: src must have shape (batch, S), got {tuple(src.shape)}")
        if tuple(src_len.shape) != (src.shape[0],):
            raise ValueError(f"{fname}: src_len must have shape (batch,) = ({src.shape[0]},), "
                             f"got {tuple(src_len.shape)}")
        bad = checks.first_true_index((src_len < 1) | (src_len > src.shape[1]), xp)
        if bad is not None:
            raise ValueError(f"{fname}: src_len must lie in [1, {src.shape[1]}] (a source needs "
                             f"a real token), got src_len[{bad[0]}] = {int(src_len[bad])}")
        if "tgt" in arrays and arrays["tgt"].shape[0] != src.shape[0]:
            raise ValueError(f"{fname}: tgt_in has batch {arrays['tgt'].shape[0]} but src has "
                             f"{src.shape[0]}")


def check_params(fname: str, model: Model, params: Any, config: Any, **arrays: Any) -> Any:
    """The check every model kind's public functions start with; returns ``xp``.

    ``config`` must be a ``model.Config``; ``params`` a mapping with exactly the names of
    ``model.param_shapes(config)``, each a real floating array of its shape, all of one
    dtype; ``arrays`` (``src``, ``src_len``, ``tgt``, ``tgt_out``, any of them) the id arrays
    :func:`check_ids` checks. Every array must come from one array library (the namespace
    returned)."""
    if not isinstance(config, model.Config):
        raise TypeError(f"{fname}: config must be a {model.Config.__name__}, got "
                        f"{type(config).__name__}")
    if not isinstance(params, Mapping):
        raise TypeError(f"{fname}: params must be a mapping of arrays, got "
                        f"{type(params).__name__}")
    shapes = model.param_shapes(config)
    missing = [n for n in shapes if n not in params]
    unknown = [n for n in params if n not in shapes]
    if missing or unknown:
        raise ValueError(f"{fname}: params do not match the config: missing {missing}, "
                         f"unknown {unknown}")
    xp = checks.namespace(fname, **arrays, **{n.replace(".", "_"): params[n] for n in shapes})
    first = next(iter(shapes))
    for name, shape in shapes.items():
        p = params[name]
        checks.check_floating(fname, name, p, xp)
        if p.dtype != params[first].dtype:
            raise TypeError(f"{fname}: {name} is {p.dtype} but {first} is "
                            f"{params[first].dtype}; all parameters must share one dtype")
        if tuple(p.shape) != shape:
            raise ValueError(f"{fname}: {name} must have shape {shape} for this config, got "
                             f"{tuple(p.shape)}")
    check_ids(fname, config, xp, **arrays)
    return xp


def check_loss_inputs(fname: str, model: Model, params: Any, config: Any,
                      batch: Any) -> Any:
    """:func:`check_params` for a training batch (:data:`BATCH_KEYS`): the keys, the
    arrays, ``tgt_out`` of ``tgt_in``'s shape, and at least one real target token (a
    value check, skipped where the values are not concrete). Returns ``xp``."""
    if not isinstance(batch, Mapping):
        raise TypeError(f"{fname}: batch must be a mapping of arrays, got "
                        f"{type(batch).__name__}")
    missing = [k for k in BATCH_KEYS if k not in batch]
    if missing:
        raise ValueError(f"{fname}: batch is missing {missing}")
    xp = check_params(fname, model, params, config, src=batch["src"], src_len=batch["src_len"],
                      tgt=batch["tgt_in"], tgt_out=batch["tgt_out"])
    if tuple(batch["tgt_out"].shape) != tuple(batch["tgt_in"].shape):
        raise ValueError(f"{fname}: tgt_out has shape {tuple(batch['tgt_out'].shape)} but "
                         f"tgt_in has {tuple(batch['tgt_in'].shape)}")
    if checks.concrete(xp.all(batch["tgt_out"] == config.pad_id)):
        raise ValueError(f"{fname}: every target token is padding; there is nothing to average")
    return xp


def check_batch(config: Any, batch: Mapping[str, Any]) -> None:
    """Validate a NumPy training batch against ``config`` once, before it reaches an
    unchecked (possibly jitted) kernel: keys, dtypes, shapes, id and length ranges, and
    at least one real target token."""
    missing = [k for k in BATCH_KEYS if k not in batch]
    if missing:
        raise ValueError(f"batch is missing {missing}")
    arrays = {name: np.asarray(batch[key]) for name, key in
              (("src", "src"), ("src_len", "src_len"), ("tgt", "tgt_in"), ("tgt_out", "tgt_out"))}
    check_ids("check_batch", config, np_xp, **arrays)
    if np.shape(batch["tgt_in"]) != np.shape(batch["tgt_out"]):
        raise ValueError("batch: tgt_in and tgt_out must have the same shape")
    if np.all(np.asarray(batch["tgt_out"]) == config.pad_id):
        raise ValueError("batch: every target token is padding")
