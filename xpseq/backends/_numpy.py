"""NumPy: the float64 reference; its gradients are the hand-derived rules of xpseq.core.vjp."""

from __future__ import annotations

from typing import Any

import array_api_compat.numpy as xp_numpy
import numpy as np

from ._base import CAPABILITIES, Backend


class NumpyBackend(Backend):
    name = "numpy"
    capabilities = CAPABILITIES["numpy"]

    def __init__(self) -> None:
        super().__init__(xp_numpy)

    def is_array(self, x: Any) -> bool:
        # NumPy returns 0-d results (a loss, a reduction) as scalars such as np.float64.
        return isinstance(x, (np.ndarray, np.generic))

    def _from_host(self, host: np.ndarray, dtype: Any) -> Any:
        return np.array(host, dtype=dtype, copy=True)
