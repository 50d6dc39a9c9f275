"""Linear maps, embedding lookup, a stable sigmoid and dropout from a given keep-mask.

Weights applied as ``W x`` have shape ``(out, in)``, as in ``torch.nn.Linear``. The public
functions check shapes and dtypes; the models call the private kernels (``_linear`` ...)
inside their loops, after checking their own inputs once.
"""

from __future__ import annotations

import numbers
from typing import Any

from . import checks, kernels

__all__ = ["linear", "embedding", "sigmoid", "dropout"]


def linear(x: Any, W: Any, b: Any = None) -> Any:
    """``x Wᵀ + b``.

    Parameters
    ----------
    x : real floating array, shape ``(..., in)``
    W : real floating array, shape ``(out, in)``
    b : real floating array, shape ``(out,)``, optional

    Returns
    -------
    array, shape ``(..., out)``
    """
    fname = "linear"
    xp = checks.namespace(fname, x=x, W=W, b=b)
    for name, a in (("x", x), ("W", W), ("b", b)):
        if a is not None:
            checks.check_floating(fname, name, a, xp)
    checks.check_same_dtype(fname, x=x, W=W, b=b)
    checks.check_ndim(fname, "x", x, 1, layout="(..., in)")
    checks.check_ndim(fname, "W", W, 2, exact=True, layout="(out, in)")
    checks.check_dim(fname, "W", W, 1, x.shape[-1], "the last dimension of x")
    if b is not None:
        checks.check_ndim(fname, "b", b, 1, exact=True, layout="(out,)")
        checks.check_dim(fname, "b", b, 0, W.shape[0], "the number of rows of W")
    checks.check_all_finite(fname, xp, x=x, W=W, b=b)
    return kernels.linear(x, W, b, xp=xp)


def embedding(ids: Any, E: Any) -> Any:
    """Rows of the table ``E`` picked by integer ``ids``.

    Parameters
    ----------
    ids : integer array, shape ``(...)``, values in ``[0, V)``
    E : real floating array, shape ``(V, d)``

    Returns
    -------
    array, shape ``(..., d)``

    Raises
    ------
    ValueError
        An id outside ``[0, V)`` (checked when values are concrete; under ``jax.jit`` JAX
        clamps out-of-range indices instead).
    """
    fname = "embedding"
    xp = checks.namespace(fname, ids=ids, E=E)
    if not xp.isdtype(ids.dtype, "integral"):
        raise TypeError(f"{fname}: ids must have an integer dtype, got {ids.dtype}")
    checks.check_floating(fname, "E", E, xp)
    checks.check_ndim(fname, "E", E, 2, exact=True, layout="(V, d)")
    vocab = E.shape[0]
    index = checks.first_true_index((ids < 0) | (ids >= vocab), xp)
    if index is not None:
        value = int(ids[index]) if index else int(ids)
        raise ValueError(f"{fname}: ids must lie in [0, {vocab}) (the rows of E), got {value}")
    checks.check_finite(fname, "E", E, xp)
    return kernels.embedding(ids, E, xp=xp)


def sigmoid(x: Any) -> Any:
    """The logistic function ``1 / (1 + exp(-x))``, accurate in both tails.

    With ``e = exp(-|x|) <= 1``: ``1 / (1 + e)`` for ``x >= 0`` and ``e / (1 + e)`` for
    ``x < 0``. ``exp`` never overflows, and the negative tail keeps its relative accuracy
    (``sigmoid(-40) = 4.25e-18``, where ``(1 + tanh(x / 2)) / 2`` cancels to 0). The result
    is exactly 0 or 1 only where float64 must round, and at ``-inf`` / ``+inf``; NaN is
    refused (``ValueError``) when values are concrete.

    Parameters
    ----------
    x : real floating array, any shape

    Returns
    -------
    array, shape and dtype of ``x``
    """
    fname = "sigmoid"
    xp = checks.namespace(fname, x=x)
    checks.check_floating(fname, "x", x, xp)
    checks.check_not_nan(fname, "x", x, xp)
    return kernels.sigmoid(x, xp=xp)


def dropout(x: Any, keep: Any, rate: float) -> Any:
    """Inverted dropout with a given keep-mask: ``where(keep, x * (1 / (1 - rate)), 0)``.

    (Multiplying by the reciprocal, as ``torch.nn.functional.dropout`` does: the two agree
    bit for bit.)

    The mask is an input, not drawn here: each backend draws it from its own random
    generator (see :mod:`xpseq.backends`), so the math is the same everywhere and a test
    can hand every backend the same mask.

    Parameters
    ----------
    x : real floating array, shape ``(...)``
    keep : bool array, broadcasts to ``x``; ``True`` keeps an entry
    rate : float in ``[0, 1)``
        The probability with which ``keep`` was drawn ``False``.

    Returns
    -------
    array, shape and dtype of ``x``; the expectation over masks equals ``x``
    """
    fname = "dropout"
    xp = checks.namespace(fname, x=x, keep=keep)
    checks.check_floating(fname, "x", x, xp)
    if keep.dtype != xp.bool:
        raise TypeError(f"{fname}: keep must have a bool dtype, got {keep.dtype}")
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real):
        raise TypeError(f"{fname}: rate must be a real number, got {type(rate).__name__}")
    if not 0 <= rate < 1:
        raise ValueError(f"{fname}: rate must lie in [0, 1), got {rate!r}")
    checks.broadcast_leading(fname, xp, x=tuple(x.shape), keep=tuple(keep.shape))
    checks.check_finite(fname, "x", x, xp)
    return kernels.dropout(x, keep, float(rate), xp=xp)


# ------------------------------------------------------------------- private kernels


