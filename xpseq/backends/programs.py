"""The one cache of built programs: training steps, dev losses, searches and decoder steps
(compiled where the backend compiles them).

Building a program for a backend means tracing the model once per input shape under
``jax.jit`` on JAX (or ``torch.compile`` on ``backends.get("torch", compile=True)``), which
costs seconds; so each is built once per key and kept for the life of the process. A key
names the program and everything its computation depends on that is not an array
argument: the model configuration (frozen dataclasses are hashable), the backend's
:attr:`~xpseq.backends.Backend.cache_key` (its name and what it compiles: eager and
compiled torch share the name "torch"), the optimiser's name and hyperparameters (its
learning-rate schedule included), the search options. Calling :func:`xpseq.train.fit` or
:func:`xpseq.search.search` again with the same settings reuses the programs, and their
compilations.

>>> from xpseq.backends import programs
>>> programs.info()                   # doctest: +SKIP
{'train_step': 2, 'eval_loss': 1, 'search': 3}
>>> programs.clear()                  # e.g. between benchmark repeats
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Hashable

__all__ = ["cached", "clear", "info"]

_PROGRAMS: dict[tuple[str, Hashable], Any] = {}


def cached(kind: str, key: Hashable, build: Callable[[], Any]) -> Any:
    """The program of ``kind`` (``"train_step"``, ``"eval_loss"``, ``"search"``,
    ``"decoder_step"``) for ``key``, built with ``build()`` the first time it is asked
    for."""
    full = (kind, key)
    if full not in _PROGRAMS:
        _PROGRAMS[full] = build()
    return _PROGRAMS[full]


def clear() -> None:
    """Forget every program (the next call builds, and on JAX compiles, again)."""
    _PROGRAMS.clear()


def info() -> dict[str, int]:
    """How many programs of each kind are kept."""
    return dict(Counter(kind for kind, _ in _PROGRAMS))
