"""array_api_strict: proves that the core math, forward and hand-derived backward, uses only
the array API standard."""

from __future__ import annotations

from typing import Any

import array_api_strict
import numpy as np

from ._base import CAPABILITIES, Backend


class StrictBackend(Backend):
    name = "array_api_strict"
    capabilities = CAPABILITIES["array_api_strict"]

    def __init__(self) -> None:
        super().__init__(array_api_strict, device=array_api_strict.Device())

    def _from_host(self, host: np.ndarray, dtype: Any) -> Any:
        return array_api_strict.asarray(np.array(host, copy=True), dtype=dtype)
