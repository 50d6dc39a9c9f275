"""Helpers for checking xpseq against itself, peers and finite differences.

The parity contract's tolerances live here, in one place:

* ``FORWARD_RTOL`` / ``FORWARD_ATOL``: forward values across backends (float64);
* ``GRAD_RTOL`` / ``GRAD_ATOL``: gradients across backends (the atol is for entries that
  are exactly zero on one side);
* ``FD_REL_ERR``: gradients against central finite differences.

Agreement is never bitwise: backends sum in different orders.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from array_api_extra.testing import assert_close

from xpseq.backends import Backend

__all__ = [
    "FORWARD_RTOL",
    "FORWARD_ATOL",
    "GRAD_RTOL",
    "GRAD_ATOL",
    "FD_REL_ERR",
    "assert_matches",
    "central_difference_grad",
    "relative_error",
]

FORWARD_RTOL = 1e-12
FORWARD_ATOL = 1e-14
GRAD_RTOL = 1e-10
GRAD_ATOL = 1e-13
FD_REL_ERR = 1e-7


def assert_matches(backend: Backend, actual: Any, reference: Any, *,
                   rtol: float = FORWARD_RTOL, atol: float = FORWARD_ATOL,
                   err_msg: str = "") -> None:
    """Assert that ``actual`` (a ``backend`` array) equals a NumPy ``reference``.

    The reference is converted to the backend first, so the namespace, dtype, shape and
    device of ``actual`` are checked too (``array_api_extra.testing.assert_close``). On
    ndonnx, which that function does not know, the library, dtype and shape are checked
    here and the values compared as NumPy arrays.
    """
    reference = np.asarray(reference)
    if backend.name == "onnx":
        assert backend.is_array(actual), f"{err_msg}: not an ndonnx array: {type(actual)}"
        assert actual.dtype == backend.dtype(reference.dtype.name), \
            f"{err_msg}: dtype {actual.dtype}, expected {reference.dtype}"
        assert tuple(actual.shape) == reference.shape, \
            f"{err_msg}: shape {tuple(actual.shape)}, expected {reference.shape}"
        np.testing.assert_allclose(backend.to_numpy(actual), reference, rtol=rtol, atol=atol,
                                   equal_nan=False, err_msg=err_msg)
        return
    assert_close(actual, backend.asarray(reference, dtype=reference.dtype.name),
                 rtol=rtol, atol=atol, equal_nan=False, err_msg=err_msg)


def central_difference_grad(f: Callable[[np.ndarray], float], x: np.ndarray, *,
                            h: float = 1e-6) -> np.ndarray:
    """Gradient of a scalar function of a float64 NumPy array by central differences.

    ``(f(x + h e_i) - f(x - h e_i)) / (2 h)`` for every element ``i``: truncation error
    ``O(h²)`` plus rounding error ``O(eps / h)``, about 1e-10 relative in float64 for
    smooth functions of order-one inputs with the default ``h``.
    """
    x = np.array(x, dtype=np.float64)
    grad = np.empty_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        up = float(f(x))
        flat[i] = old - h
        down = float(f(x))
        flat[i] = old
        gflat[i] = (up - down) / (2 * h)
    return grad


def relative_error(actual: Any, desired: Any) -> float:
    """``max|actual - desired| / max|desired|`` (absolute error if ``desired`` is all zero)."""
    actual, desired = np.asarray(actual, dtype=np.float64), np.asarray(desired, dtype=np.float64)
    scale = float(np.max(np.abs(desired))) if desired.size else 0.0
    err = float(np.max(np.abs(actual - desired))) if desired.size else 0.0
    return err / scale if scale > 0 else err
