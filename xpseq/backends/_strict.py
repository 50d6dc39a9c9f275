"""array_api_strict: a forward-only backend that proves core code uses only the standard."""

from __future__ import annotations

from typing import Any, Callable

import array_api_strict
import numpy as np

from ._base import Backend


class StrictBackend(Backend):
    name = "array_api_strict"
    differentiable = False

    def __init__(self) -> None:
        super().__init__(array_api_strict)

    def _from_host(self, host: np.ndarray, dtype: Any) -> Any:
        return array_api_strict.asarray(np.array(host, copy=True), dtype=dtype)

    def value_and_grad(self, fn: Callable[..., Any], argnums: int | tuple[int, ...] = 0,
                       has_aux: bool = False) -> Callable[..., Any]:
        raise NotImplementedError(
            "the array_api_strict backend is forward-only: it checks that the math uses "
            "nothing outside the array API standard. Use 'jax' or 'torch' for gradients."
        )
