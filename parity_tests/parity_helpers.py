"""Helpers shared by the parity tests (and scripts/parity_report.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from xpseq import backends


def normals(r: np.random.Generator, *shapes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    return tuple(r.standard_normal(shape) for shape in shapes)


def lens_keep(lens: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Independent NumPy construction of the keep mask that valid_lens describes."""
    lens = np.asarray(lens)
    ndim = len(shape)
    if lens.ndim == 1:
        lens = lens.reshape((shape[0],) + (1,) * (ndim - 2))
    else:
        lens = lens.reshape((shape[0],) + (1,) * (ndim - 3) + (shape[-2],))
    return np.broadcast_to(np.arange(shape[-1]) < lens[..., None], shape)


def to_backend(be: backends.Backend, x: Any) -> Any:
    """Convert NumPy arrays (alone or in dicts and tuples) to ``be``; other values pass."""
    if isinstance(x, dict):
        return {key: to_backend(be, val) for key, val in x.items()}
    if isinstance(x, tuple):
        return tuple(to_backend(be, val) for val in x)
    if isinstance(x, np.ndarray):
        return be.asarray(x, dtype=x.dtype.name)
    return x
