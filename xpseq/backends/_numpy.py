"""NumPy: the float64 reference. Forward only until hand-derived gradients land."""

from __future__ import annotations

from typing import Any, Callable

import array_api_compat.numpy as xp_numpy
import numpy as np

from ._base import Backend


class NumpyBackend(Backend):
    name = "numpy"
    differentiable = False

    def __init__(self) -> None:
        super().__init__(xp_numpy)

    def is_array(self, x: Any) -> bool:
        # NumPy returns 0-d results (a loss, a reduction) as scalars such as np.float64.
        return isinstance(x, (np.ndarray, np.generic))

    def _from_host(self, host: np.ndarray, dtype: Any) -> Any:
        return np.array(host, dtype=dtype, copy=True)

    def value_and_grad(self, fn: Callable[..., Any], argnums: int | tuple[int, ...] = 0,
                       has_aux: bool = False) -> Callable[..., Any]:
        raise NotImplementedError(
            "the numpy backend has no automatic differentiation; its hand-derived backward "
            "passes come in a later release (issue #5). Use the 'jax' or 'torch' backend for "
            "gradients, or xpseq.testing.central_difference_grad to check one numerically."
        )
