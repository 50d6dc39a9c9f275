"""Optimisers as pure ``(init, update)`` pairs over parameter dicts, and gradient clipping.

Written once against the array API, so every backend takes exactly the same step::

    opt = adam(1e-3)
    state = opt.init(params)
    params, state = opt.update(grads, state, params)

``params``, ``grads`` and the moment estimates are flat dicts ``{name: array}``. The step
counter is a 0-d array, so ``update`` runs under ``jax.jit`` without retracing.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Mapping, NamedTuple

import array_api_compat as compat

__all__ = ["Optimizer", "adam", "sgd", "global_norm", "clip_by_global_norm", "from_spec"]

Params = Mapping[str, Any]


class Optimizer(NamedTuple):
    """``init(params) -> state`` and ``update(grads, state, params) -> (params, state)``.

    ``name`` and ``hyperparams`` describe it (they go into checkpoints).
    """

    name: str
    hyperparams: dict
    init: Callable[[Params], dict]
    update: Callable[[Params, dict, Params], tuple[dict, dict]]


def adam(lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Optimizer:
    """Adam with bias correction (Kingma & Ba 2015), step for step as ``torch.optim.Adam``.

    ``m ← b1 m + (1 − b1) g``, ``v ← b2 v + (1 − b2) g²``, and
    ``p ← p − (lr / (1 − b1ᵗ)) · m / (sqrt(v) / sqrt(1 − b2ᵗ) + eps)``.

    State: ``{"step": 0-d array, "m": {name: array}, "v": {name: array}}``, and optionally
    ``"lr_scale"``, a 0-d array that multiplies ``lr`` (what
    :class:`xpseq.train.callbacks.ReduceLROnPlateau` lowers, and the training step's
    schedule scales; an array, so a jitted step does not recompile when it changes).
    """
    for name, value, low, high in (("lr", lr, 0, math.inf), ("b1", b1, 0, 1), ("b2", b2, 0, 1),
                                   ("eps", eps, 0, math.inf)):
        _check_hyper("adam", name, value, low, high)

    def init(params: Params) -> dict:
        first = _first(params)
        xp = compat.array_namespace(first)
        return {"step": xp.zeros((), dtype=first.dtype, device=compat.device(first)),
                "m": {k: xp.zeros_like(p) for k, p in params.items()},
                "v": {k: xp.zeros_like(p) for k, p in params.items()}}

    def update(grads: Params, state: dict, params: Params) -> tuple[dict, dict]:
        xp = compat.array_namespace(_first(params))
        step = state["step"] + 1.0
        step_size = _scaled(lr, state) / (1.0 - b1 ** step)
        root_bc2 = xp.sqrt(1.0 - b2 ** step)
        new_params, m_new, v_new = {}, {}, {}
        for k, p in params.items():
            g = grads[k]
            m = b1 * state["m"][k] + (1.0 - b1) * g
            v = b2 * state["v"][k] + (1.0 - b2) * (g * g)
            new_params[k] = p - step_size * (m / (xp.sqrt(v) / root_bc2 + eps))
            m_new[k], v_new[k] = m, v
        return new_params, _keep_scale({"step": step, "m": m_new, "v": v_new}, state)

    return Optimizer("adam", {"lr": lr, "b1": b1, "b2": b2, "eps": eps}, init, update)


def sgd(lr: float = 0.1, momentum: float = 0.0) -> Optimizer:
    """Stochastic gradient descent with optional momentum, as ``torch.optim.SGD``.

    ``b ← momentum · b + g`` (``b = g`` on the first step), ``p ← p − lr · b``.

    State: ``{"step": 0-d array, "momentum": {name: array}}``, and optionally
    ``"lr_scale"`` (see :func:`adam`).
    """
    _check_hyper("sgd", "lr", lr, 0, math.inf)
    _check_hyper("sgd", "momentum", momentum, 0, 1)

    def init(params: Params) -> dict:
        first = _first(params)
        xp = compat.array_namespace(first)
        return {"step": xp.zeros((), dtype=first.dtype, device=compat.device(first)),
                "momentum": {k: xp.zeros_like(p) for k, p in params.items()}}

    def update(grads: Params, state: dict, params: Params) -> tuple[dict, dict]:
        xp = compat.array_namespace(_first(params))
        first_step = state["step"] == 0
        new_params, bufs = {}, {}
        step_size = _scaled(lr, state)
        for k, p in params.items():
            g = grads[k]
            buf = xp.where(first_step, g, momentum * state["momentum"][k] + g) if momentum else g
            new_params[k] = p - step_size * buf
            bufs[k] = buf
        return new_params, _keep_scale({"step": state["step"] + 1.0, "momentum": bufs}, state)

    return Optimizer("sgd", {"lr": lr, "momentum": momentum}, init, update)


def _scaled(lr: float, state: Mapping[str, Any]) -> Any:
    """``lr`` times the state's ``lr_scale`` when it has one."""
    return lr * state["lr_scale"] if "lr_scale" in state else lr


def _keep_scale(new_state: dict, state: Mapping[str, Any]) -> dict:
    if "lr_scale" in state:
        new_state["lr_scale"] = state["lr_scale"]
    return new_state


def from_spec(name: str, hyperparams: Mapping[str, Any]) -> Optimizer:
    """Rebuild an optimiser from its ``name`` and ``hyperparams`` (as kept in checkpoints)."""
    makers = {"adam": adam, "sgd": sgd}
    if name not in makers:
        raise ValueError(f"unknown optimiser {name!r}; known: {sorted(makers)}")
    return makers[name](**hyperparams)


def global_norm(grads: Params) -> Any:
    """``sqrt(Σ_k ‖g_k‖²)`` over every array of ``grads`` (a 0-d array)."""
    xp = compat.array_namespace(_first(grads))
    return xp.sqrt(sum(xp.sum(g * g) for g in grads.values()))


def clip_by_global_norm(grads: Params, max_norm: float) -> tuple[dict, Any]:
    """Scale all gradients by ``min(1, max_norm / (norm + 1e-6))``, as
    ``torch.nn.utils.clip_grad_norm_``. Returns the clipped gradients and the norm before
    clipping."""
    _check_hyper("clip_by_global_norm", "max_norm", max_norm, 0, math.inf)
    xp = compat.array_namespace(_first(grads))
    norm = global_norm(grads)
    scale = xp.minimum(max_norm / (norm + 1e-6), xp.ones_like(norm))
    return {k: g * scale for k, g in grads.items()}, norm


def _first(tree: Params) -> Any:
    if not isinstance(tree, Mapping) or not tree:
        raise TypeError(f"expected a non-empty dict of arrays, got {type(tree).__name__}")
    return next(iter(tree.values()))


def _check_hyper(fname: str, name: str, value: Any, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fname}: {name} must be a real number, got {type(value).__name__}")
    if not (low <= value < high) or (name in ("lr", "eps", "max_norm") and value <= 0):
        raise ValueError(f"{fname}: {name} must lie in ({low}, {high}), got {value}"
                         if name in ("lr", "eps", "max_norm")
                         else f"{fname}: {name} must lie in [{low}, {high}), got {value}")
