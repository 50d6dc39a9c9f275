"""The array libraries' own versions of some kernels, registered by the backends.

A backend whose library computes a kernel better than the generic array API code (fewer
operations, and under automatic differentiation fewer arrays kept for the backward pass)
registers it here for its namespace; :mod:`xpseq.core.kernels` uses it for arrays of that
namespace. The core imports no array library: this is how a library's function reaches it.

=========  ==========================================================================
kernel     what the function must compute
=========  ==========================================================================
sigmoid    ``1 / (1 + exp(-x))`` element-wise, with the generic kernel's values to
           rounding (no overflow; relatively accurate in the negative tail)
=========  ==========================================================================
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["KERNELS", "register", "lookup"]

#: The kernels a backend may supply.
KERNELS = ("sigmoid",)

_REGISTERED: dict[str, dict[Any, Callable]] = {name: {} for name in KERNELS}


def register(name: str, xp: Any, fn: Callable) -> None:
    """Compute kernel ``name`` with ``fn`` on arrays of namespace ``xp``."""
    if name not in _REGISTERED:
        raise ValueError(f"register: kernel must be one of {list(KERNELS)}, got {name!r}")
    _REGISTERED[name][xp] = fn


def lookup(name: str, xp: Any) -> Callable | None:
    """The function registered for kernel ``name`` and namespace ``xp``, or ``None``."""
    return _REGISTERED[name].get(xp)
