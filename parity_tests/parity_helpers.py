"""Helpers shared by the parity tests (and scripts/parity_report.py)."""

from __future__ import annotations

import numpy as np


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


