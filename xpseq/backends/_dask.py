"""dask.array: the array API standard evaluated lazily, in chunks.

Through array-api-compat's wrapper (``array_api_compat.dask.array``). An operation builds a
task graph and computes nothing; the shapes are known as the graph is built, so every
shape check runs, and a value check computes the one boolean it needs (``bool()`` of a
0-d array). :meth:`DaskBackend.to_numpy` computes a result. No gradients: the models only
run forward and search here (float64 parity with NumPy in the parity suite). dask picks
its own scheduler (by default a pool of threads per computation); xpseq sets none.

What the wrapper lacks of the standard (``take_along_axis``, ``broadcast_shapes``) the core
writes with the functions it has; nothing here is specific to a model.
"""

from __future__ import annotations

from typing import Any

import array_api_compat.dask.array as dx
import numpy as np

from ._base import CAPABILITIES, Backend


class DaskBackend(Backend):
    name = "dask"
    capabilities = CAPABILITIES["dask"]

    def __init__(self) -> None:
        super().__init__(dx)

    def _from_host(self, host: np.ndarray, dtype: Any) -> Any:
        x = dx.asarray(np.array(host, copy=True))     # one chunk
        return x if x.dtype == dtype else dx.astype(x, dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        if not self.is_array(x):
            return super().to_numpy(x)            # its TypeError
        return np.asarray(x.compute())
