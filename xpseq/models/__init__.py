"""Model kinds behind one protocol, and their registry.

>>> from xpseq import models
>>> models.available()
['rnn', 'transformer']
>>> rnn = models.get("rnn")
>>> config = rnn.Config(src_vocab=20, tgt_vocab=30, attention="general")
>>> params = rnn.init_params(config, seed=0)    # NumPy float64: the same start everywhere

Each kind is one module of this package that defines ``MODEL``, a
:class:`~xpseq.models.protocol.Model` (see :mod:`xpseq.models.protocol` for what it
provides). Training (:mod:`xpseq.train`), search (:mod:`xpseq.search`), checkpoints, the
tasks and the command reach a model only through it, and find it from a configuration
with :func:`of`. Adding a kind is adding a module here; a model defined elsewhere (a
notebook, a test) joins with :func:`register`.

===============  ============================================================================
kind             model
===============  ============================================================================
``rnn``          bi-directional LSTM/GRU encoder, attentional decoder with input feeding
                 (:mod:`xpseq.models.rnn`: dot, general, additive or scaled-dot attention,
                 Luong or Bahdanau style, or none)
``transformer``  the encoder-decoder of Vaswani et al. (:mod:`xpseq.models.transformer`:
                 pre- or post-LN, sinusoidal or learned positions, a key/value cache for
                 decoding)
===============  ============================================================================
"""

from __future__ import annotations

import importlib
import pkgutil

from .protocol import BATCH_KEYS, Model, ModelKernels, check_batch, check_ids

__all__ = ["Model", "ModelKernels", "available", "get", "of", "register", "check_batch",
           "check_ids", "BATCH_KEYS"]

_NOT_KINDS = {"protocol"}
_registry: dict[str, Model] = {}


def _discover() -> None:
    """Import the kind modules of this package once (those that define ``MODEL``)."""
    for info in pkgutil.iter_modules(__path__):
        name = info.name
        if name.startswith("_") or name in _NOT_KINDS or name in _registry:
            continue
        module = importlib.import_module(f"{__name__}.{name}")
        model = getattr(module, "MODEL", None)
        if isinstance(model, Model) and model.kind not in _registry:
            _registry[model.kind] = model


def register(model: Model) -> Model:
    """Add a model kind defined outside this package; returns it.

    Raises
    ------
    TypeError
        ``model`` is not a :class:`Model`.
    ValueError
        Another model already has its kind or its ``Config`` class.
    """
    if not isinstance(model, Model):
        raise TypeError(f"register: expected an xpseq.models.Model, got {type(model).__name__}")
    _discover()
    for other in _registry.values():
        if other is model:
            return model
        if other.kind == model.kind:
            raise ValueError(f"register: a model kind {model.kind!r} is already registered")
        if other.Config is model.Config:
            raise ValueError(f"register: {model.Config.__name__} is already the config of "
                             f"kind {other.kind!r}")
    _registry[model.kind] = model
    return model


def available() -> list[str]:
    """The registered model kinds, built-in ones first."""
    _discover()
    return list(_registry)


def get(kind: str) -> Model:
    """The model kind called ``kind``.

    Raises
    ------
    ValueError
        No model kind has that name.
    """
    _discover()
    if not isinstance(kind, str) or kind not in _registry:
        raise ValueError(f"unknown model kind {kind!r}; choose one of {list(_registry)}")
    return _registry[kind]


def of(config: object) -> Model:
    """The model kind whose ``Config`` ``config`` is.

    Raises
    ------
    TypeError
        ``config`` is the configuration of no registered kind.
    """
    _discover()
    for model in _registry.values():
        if type(config) is model.Config:
            return model
    raise TypeError(f"config must be the Config of a model kind ({available()}), got "
                    f"{type(config).__name__}")
