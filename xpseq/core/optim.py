"""Optimisers as pure ``(init, update)`` pairs over parameter dicts, and gradient clipping.

Written once against the array API, so every backend takes exactly the same step::

    opt = adam(1e-3)
    state = opt.init(params)
    params, state = opt.update(grads, state, params)

``params``, ``grads`` and the moment estimates are flat dicts ``{name: array}``. The step
counter is a 0-d array, so ``update`` runs under ``jax.jit`` without retracing.

The learning rate ``lr`` is a positive number or a schedule: any function of the step
counter ``t`` (the number of updates already taken, a 0-d array) that returns the rate,
e.g. ``lambda t: 1e-3 * xp.minimum(1.0, (t + 1) / 100)`` or a schedule of
:mod:`xpseq.train.schedules` times a peak rate (``1e-3 * warmup_inverse_sqrt(400)``).
``update`` evaluates it, so a schedule is part of the optimiser as in optax: it must be
traceable under ``jax.jit`` (no Python ``if`` on ``t``).

The state also holds ``"scale"``, a 0-d array that ``init`` sets to 1 and that multiplies the
rate: the plateau factor, lowered between updates with :func:`scale_learning_rate` (what
:class:`xpseq.train.callbacks.ReduceLROnPlateau` does). The update at step ``t`` moves by
the rate ``lr(t) · scale`` (``lr · scale`` for a number). Both are arrays, so a jitted
update does not recompile when the schedule's value or the scale changes.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, NamedTuple

import array_api_compat as compat

from . import checks

__all__ = ["Optimizer", "adam", "sgd", "scale_learning_rate", "global_norm",
           "clip_by_global_norm", "from_spec"]

Params = Mapping[str, Any]


class Optimizer(NamedTuple):
    """``init(params) -> state`` and ``update(grads, state, params) -> (params, state)``.

    ``name`` and ``hyperparams`` describe it (checkpoints keep them; a schedule as ``lr``
    is kept by its ``to_dict()``): :func:`from_spec` rebuilds it.
    """

    name: str
    hyperparams: dict[str, Any]
    init: Callable[[Params], dict[str, Any]]
    update: Callable[[Params, dict[str, Any], Params], tuple[dict[str, Any], dict[str, Any]]]


Rate = Any   # a positive number, or a function of the step counter giving the rate


def adam(lr: Rate = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Optimizer:
    """Adam with bias correction (Kingma & Ba 2015), step for step as ``torch.optim.Adam``.

    ``m ← b1 m + (1 − b1) g``, ``v ← b2 v + (1 − b2) g²``, and
    ``p ← p − (r / (1 − b1ᵗ)) · m / (sqrt(v) / sqrt(1 − b2ᵗ) + eps)`` with the rate
    ``r = lr(t − 1) · scale`` (``lr · scale`` when ``lr`` is a number; see the module
    docstring): ``torch.optim.Adam`` with a ``LambdaLR`` of the same factor.

    State: ``{"step": 0-d array, "m": {name: array}, "v": {name: array}, "scale": 0-d
    array}``, all created by ``init`` (``scale`` is 1; :func:`scale_learning_rate` lowers
    it).
    """
    _check_rate("adam", lr)
    for name, value, low, high in (("b1", b1, 0, 1), ("b2", b2, 0, 1),
                                   ("eps", eps, 0, math.inf)):
        _check_hyper("adam", name, value, low, high)

    def init(params: Params) -> dict[str, Any]:
        first = _first(params)
        xp = compat.array_namespace(first)
        zero = xp.zeros((), dtype=first.dtype, device=compat.device(first))
        return {"step": zero,
                "m": {k: xp.zeros_like(p) for k, p in params.items()},
                "v": {k: xp.zeros_like(p) for k, p in params.items()},
                "scale": xp.ones_like(zero)}

    def update(grads: Params, state: dict[str, Any],
               params: Params) -> tuple[dict[str, Any], dict[str, Any]]:
        xp = compat.array_namespace(_first(params))
        step = state["step"] + 1.0
        # (rate / bias correction) · scale: the plateau factor last, so that a rate
        # without one (scale 1) is exactly lr / (1 − b1ᵗ)
        step_size = _rate(lr, state["step"]) / (1.0 - b1 ** step) * state["scale"]
        root_bc2 = xp.sqrt(1.0 - b2 ** step)
        new_params, m_new, v_new = {}, {}, {}
        for k, p in params.items():
            g = grads[k]
            m = b1 * state["m"][k] + (1.0 - b1) * g
            v = b2 * state["v"][k] + (1.0 - b2) * (g * g)
            new_params[k] = p - step_size * (m / (xp.sqrt(v) / root_bc2 + eps))
            m_new[k], v_new[k] = m, v
        return new_params, {"step": step, "m": m_new, "v": v_new, "scale": state["scale"]}

    return Optimizer("adam", {"lr": lr, "b1": b1, "b2": b2, "eps": eps}, init, update)


def sgd(lr: Rate = 0.1, momentum: float = 0.0) -> Optimizer:
    """Stochastic gradient descent with optional momentum, as ``torch.optim.SGD``.

    ``b ← momentum · b + g`` (``b = g`` on the first step), ``p ← p − r · b`` with the rate
    ``r = lr(t − 1) · scale`` (``lr · scale`` for a number; see :func:`adam`).

    State: ``{"step": 0-d array, "momentum": {name: array}, "scale": 0-d array}``.
    """
    _check_rate("sgd", lr)
    _check_hyper("sgd", "momentum", momentum, 0, 1)

    def init(params: Params) -> dict[str, Any]:
        first = _first(params)
        xp = compat.array_namespace(first)
        zero = xp.zeros((), dtype=first.dtype, device=compat.device(first))
        return {"step": zero,
                "momentum": {k: xp.zeros_like(p) for k, p in params.items()},
                "scale": xp.ones_like(zero)}

    def update(grads: Params, state: dict[str, Any],
               params: Params) -> tuple[dict[str, Any], dict[str, Any]]:
        xp = compat.array_namespace(_first(params))
        first_step = state["step"] == 0
        new_params, bufs = {}, {}
        step_size = _rate(lr, state["step"]) * state["scale"]
        for k, p in params.items():
            g = grads[k]
            buf = xp.where(first_step, g, momentum * state["momentum"][k] + g) if momentum else g
            new_params[k] = p - step_size * buf
            bufs[k] = buf
        return new_params, {"step": state["step"] + 1.0, "momentum": bufs,
                            "scale": state["scale"]}

    return Optimizer("sgd", {"lr": lr, "momentum": momentum}, init, update)


def scale_learning_rate(state: Mapping[str, Any], factor: Any) -> dict[str, Any]:
    """The optimiser state ``state`` with its plateau factor multiplied by ``factor``.

    ``state["scale"]`` (a 0-d array, 1 after ``init``) multiplies the learning rate of every
    later update; it stays an array of the same dtype, so a jitted step does not recompile.
    ``factor`` is a positive number (or a 0-d array). The other entries are the same arrays,
    and ``state`` itself is not changed.

    Raises
    ------
    KeyError
        ``state`` has no ``"scale"`` (not made by ``init`` of :func:`adam` or :func:`sgd`).
    ValueError
        ``factor`` is a number that is not positive and finite.
    """
    if not isinstance(state, Mapping) or "scale" not in state:
        raise KeyError("scale_learning_rate: state must be an optimiser state made by init "
                       "(it has no 'scale')")
    if isinstance(factor, bool) or (checks.is_real(factor) and not 0 < factor < math.inf):
        raise ValueError(f"scale_learning_rate: factor must be a positive number, got "
                         f"{factor!r}")
    return dict(state, scale=state["scale"] * factor)


def from_spec(name: str, hyperparams: Mapping[str, Any]) -> Optimizer:
    """Rebuild an optimiser from its ``name`` and ``hyperparams`` (as kept in checkpoints).

    A schedule as ``lr`` must already be the callable again (checkpoints store its
    ``to_dict()``; :meth:`xpseq.train.checkpoint.Checkpoint.make_optimizer` rebuilds it).
    """
    makers: dict[str, Callable[..., Optimizer]] = {"adam": adam, "sgd": sgd}
    if name not in makers:
        raise ValueError(f"unknown optimiser {name!r}; known: {sorted(makers)}")
    return makers[name](**hyperparams)


def global_norm(grads: Params) -> Any:
    """``sqrt(Σ_k ‖g_k‖²)`` over every array of ``grads`` (a 0-d array)."""
    xp = compat.array_namespace(_first(grads))
    return xp.sqrt(sum(xp.sum(g * g) for g in grads.values()))


def clip_by_global_norm(grads: Params, max_norm: float) -> tuple[dict[str, Any], Any]:
    """Scale all gradients by ``min(1, max_norm / (norm + 1e-6))``, as
    ``torch.nn.utils.clip_grad_norm_``. Returns the clipped gradients and the norm before
    clipping.

    ``max_norm / (norm + 1e-6)`` is at most ``max_norm · 1e6``: a ``max_norm`` above the
    gradients' dtype's largest value times ``1e-6`` (3.4e32 in float32) is taken as that,
    so that the quotient never overflows (the result differs only for norms beyond it)."""
    _check_hyper("clip_by_global_norm", "max_norm", max_norm, 0, math.inf)
    xp = compat.array_namespace(_first(grads))
    norm = global_norm(grads)
    max_norm = min(max_norm, float(xp.finfo(norm.dtype).max) * 1e-6)
    scale = xp.minimum(max_norm / (norm + 1e-6), xp.ones_like(norm))
    return {k: g * scale for k, g in grads.items()}, norm


def _first(tree: Params) -> Any:
    if not isinstance(tree, Mapping) or not tree:
        raise TypeError(f"expected a non-empty dict of arrays, got {type(tree).__name__}")
    return next(iter(tree.values()))


def _rate(lr: Rate, step: Any) -> Any:
    """The learning rate at ``step`` (updates already taken): ``lr(step)`` or ``lr``."""
    return lr(step) if callable(lr) else lr


def _check_rate(fname: str, lr: Any) -> None:
    if callable(lr):
        return
    if not checks.is_real(lr):
        raise TypeError(f"{fname}: lr must be a real number, got {type(lr).__name__}, or a "
                        "schedule (a function of the step)")
    _check_hyper(fname, "lr", lr, 0, math.inf)


def _check_hyper(fname: str, name: str, value: Any, low: float, high: float) -> None:
    if not checks.is_real(value):
        raise TypeError(f"{fname}: {name} must be a real number, got {type(value).__name__}")
    if not (low <= value < high) or (name in ("lr", "eps", "max_norm") and value <= 0):
        raise ValueError(f"{fname}: {name} must lie in ({low}, {high}), got {value}"
                         if name in ("lr", "eps", "max_norm")
                         else f"{fname}: {name} must lie in [{low}, {high}), got {value}")
