"""Linear maps, embedding lookup, a stable sigmoid, dropout from a given keep-mask, and the
Transformer's parts: layer normalisation, GELU / ReLU, the feed-forward block and sinusoidal
positions.

Weights applied as ``W x`` have shape ``(out, in)``, as in ``torch.nn.Linear``. The public
functions check shapes and dtypes; the models call the unchecked kernels
(:mod:`xpseq.core.kernels`: ``kernels.linear`` ...) inside their loops, after checking
their own inputs once.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from . import checks, kernels

__all__ = ["linear", "embedding", "sigmoid", "dropout", "layer_norm", "gelu", "relu",
           "feed_forward", "sinusoidal_positions"]


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
    if not checks.is_real(rate):
        raise TypeError(f"{fname}: rate must be a real number, got {type(rate).__name__}")
    if not 0 <= rate < 1:
        raise ValueError(f"{fname}: rate must lie in [0, 1), got {rate!r}")
    checks.broadcast_leading(fname, xp, x=tuple(x.shape), keep=tuple(keep.shape))
    checks.check_finite(fname, "x", x, xp)
    return kernels.dropout(x, keep, float(rate), xp=xp)


# ------------------------------------------------------------ the Transformer's parts


def layer_norm(x: Any, gamma: Any, beta: Any, *, eps: float = 1e-5) -> Any:
    """Layer normalisation over the last axis, as ``torch.nn.LayerNorm``:
    ``gamma ⊙ (x - mean) / sqrt(var + eps) + beta`` with the biased variance.

    Parameters
    ----------
    x : real floating array, shape ``(..., d)``
    gamma, beta : real floating arrays, shape ``(d,)``
    eps : positive float

    Returns
    -------
    array, shape and dtype of ``x``
    """
    fname = "layer_norm"
    xp = checks.namespace(fname, x=x, gamma=gamma, beta=beta)
    for name, a in (("x", x), ("gamma", gamma), ("beta", beta)):
        checks.check_floating(fname, name, a, xp)
    checks.check_same_dtype(fname, x=x, gamma=gamma, beta=beta)
    checks.check_ndim(fname, "x", x, 1, layout="(..., d)")
    for name, a in (("gamma", gamma), ("beta", beta)):
        checks.check_ndim(fname, name, a, 1, exact=True, layout="(d,)")
        checks.check_dim(fname, name, a, 0, x.shape[-1], "the last dimension of x")
    if not checks.is_real(eps) or not 0 < eps < math.inf:
        raise ValueError(f"{fname}: eps must be a positive number, got {eps!r}")
    checks.check_all_finite(fname, xp, x=x, gamma=gamma, beta=beta)
    return kernels.layer_norm(x, gamma, beta, float(eps), xp=xp)


def gelu(x: Any) -> Any:
    """GELU in its tanh form, ``x/2 · (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))``
    (``torch.nn.functional.gelu(x, approximate="tanh")``, ``jax.nn.gelu``'s default).

    The array API standard has no ``erf``, so the exact ``x Φ(x)`` cannot be written once
    for every library; the tanh form differs from it by less than 5e-4.

    Parameters
    ----------
    x : real floating array, any shape

    Returns
    -------
    array, shape and dtype of ``x``
    """
    fname = "gelu"
    xp = checks.namespace(fname, x=x)
    checks.check_floating(fname, "x", x, xp)
    checks.check_finite(fname, "x", x, xp)
    return kernels.gelu(x, xp=xp)


def relu(x: Any) -> Any:
    """``max(x, 0)`` elementwise (its derivative at 0 is taken as 0, as PyTorch and JAX do).

    Parameters
    ----------
    x : real floating array, any shape

    Returns
    -------
    array, shape and dtype of ``x``
    """
    fname = "relu"
    xp = checks.namespace(fname, x=x)
    checks.check_floating(fname, "x", x, xp)
    checks.check_finite(fname, "x", x, xp)
    return kernels.relu(x, xp=xp)


FF_PARAMS = ("W_1", "b_1", "W_2", "b_2")


def feed_forward(params: Mapping[str, Any], x: Any, *, activation: str = "relu",
                 keep: Any = None, rate: float = 0.0) -> Any:
    """The Transformer's position-wise block: ``W_2 dropout(act(W_1 x + b_1)) + b_2``, in
    ``torch.nn.TransformerEncoderLayer``'s order (``linear2(dropout(activation(linear1(x))))``).

    Parameters
    ----------
    params : mapping with ``W_1 (d_ff, d)``, ``b_1 (d_ff,)``, ``W_2 (d, d_ff)``, ``b_2 (d,)``
    x : real floating array, shape ``(..., d)``
    activation : {"relu", "gelu"} (GELU in its tanh form, see :func:`gelu`)
    keep : bool array broadcasting to ``(..., d_ff)``, optional
        Dropout keep-mask for the hidden layer (see :func:`dropout`); none by default.
    rate : float in ``[0, 1)``, the rate ``keep`` was drawn with

    Returns
    -------
    array, shape ``(..., d)``
    """
    fname = "feed_forward"
    if not isinstance(params, Mapping):
        raise TypeError(f"{fname}: params must be a mapping of arrays, got "
                        f"{type(params).__name__}")
    missing = [n for n in FF_PARAMS if params.get(n) is None]
    if missing:
        raise ValueError(f"{fname}: params is missing {missing}; it needs {list(FF_PARAMS)}")
    if activation not in kernels.ACTIVATIONS:
        raise ValueError(f"{fname}: activation must be one of {list(kernels.ACTIVATIONS)}, "
                         f"got {activation!r}")
    xp = checks.namespace(fname, x=x, keep=keep, **{n: params[n] for n in FF_PARAMS})
    for name in ("x", *FF_PARAMS):
        checks.check_floating(fname, name, x if name == "x" else params[name], xp)
    checks.check_same_dtype(fname, x=x, **{n: params[n] for n in FF_PARAMS})
    checks.check_ndim(fname, "x", x, 1, layout="(..., d)")
    d, d_ff = x.shape[-1], params["W_1"].shape[0] if params["W_1"].ndim == 2 else -1
    expected = {"W_1": (d_ff, d), "b_1": (d_ff,), "W_2": (d, d_ff), "b_2": (d,)}
    for name, shape in expected.items():
        if tuple(params[name].shape) != shape:
            raise ValueError(f"{fname}: {name} must have shape {shape} for x of depth {d} and "
                             f"W_1 of {d_ff} rows, got {tuple(params[name].shape)}")
    if keep is not None:
        if keep.dtype != xp.bool:
            raise TypeError(f"{fname}: keep must have a bool dtype, got {keep.dtype}")
        checks.broadcast_leading(fname, xp, hidden=(*x.shape[:-1], d_ff),
                                 keep=tuple(keep.shape))
    if not checks.is_real(rate) or not 0 <= rate < 1:
        raise ValueError(f"{fname}: rate must be a number in [0, 1), got {rate!r}")
    checks.check_all_finite(fname, xp, x=x, **{n: params[n] for n in FF_PARAMS})
    return kernels.feed_forward(params, x, activation, keep, float(rate), xp=xp)


def sinusoidal_positions(positions: Any, d_model: int, *, dtype: Any) -> Any:
    """The fixed position encodings of Vaswani et al. (2017):
    ``PE[p, 2i] = sin(p / 10000^(2i/d))`` and ``PE[p, 2i+1] = cos(p / 10000^(2i/d))``.

    Parameters
    ----------
    positions : integer array, shape ``(...)``, values ``>= 0`` (e.g. ``arange(T)``, or the
        step of an incremental decoder)
    d_model : even int
    dtype : the floating dtype of the result (of the namespace of ``positions``)

    Returns
    -------
    array, shape ``(..., d_model)``
    """
    fname = "sinusoidal_positions"
    xp = checks.namespace(fname, positions=positions)
    if not xp.isdtype(positions.dtype, "integral"):
        raise TypeError(f"{fname}: positions must have an integer dtype, got "
                        f"{positions.dtype}")
    if not checks.is_int(d_model) or d_model < 2 or d_model % 2:
        raise ValueError(f"{fname}: d_model must be an even int >= 2, got {d_model!r}")
    if not xp.isdtype(dtype, "real floating"):
        raise TypeError(f"{fname}: dtype must be a real floating dtype, got {dtype}")
    if checks.concrete(xp.any(positions < 0)):
        raise ValueError(f"{fname}: positions must be >= 0")
    return kernels.sinusoidal_positions(positions, int(d_model), dtype, xp=xp)
