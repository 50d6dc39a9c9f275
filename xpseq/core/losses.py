"""Cross-entropy over the real (non-padding) target tokens."""

from __future__ import annotations

import numbers
from typing import Any

from . import _checks
from .masking import _log_softmax

__all__ = ["cross_entropy"]


def cross_entropy(logits: Any, targets: Any, *, pad_id: int | None = None) -> Any:
    """Mean negative log-likelihood of ``targets`` over the tokens that are not padding.

    ``loss = Σ_t [y_t ≠ pad] · (−log softmax(logits_t)[y_t]) / Σ_t [y_t ≠ pad]``: the mean
    over real tokens, taken once over the whole batch (not a mean of per-sentence means).

    Parameters
    ----------
    logits : real floating array, shape ``(..., V)``
    targets : integer array, shape ``(...)``, values in ``[0, V)``
    pad_id : int, optional
        Targets equal to it are ignored. ``None`` counts every token.

    Returns
    -------
    0-d array of the dtype of ``logits``

    Raises
    ------
    ValueError
        Shapes disagree, a target is outside ``[0, V)``, or there is no real token
        (under ``jax.jit`` the last cannot be checked and the loss is then 0).
    """
    fname = "cross_entropy"
    xp = _checks.namespace(fname, logits=logits, targets=targets)
    _checks.check_floating(fname, "logits", logits, xp)
    if not xp.isdtype(targets.dtype, "integral"):
        raise TypeError(f"{fname}: targets must have an integer dtype, got {targets.dtype}")
    _checks.check_ndim(fname, "logits", logits, 1, layout="(..., V)")
    if tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"{fname}: targets has shape {tuple(targets.shape)} but logits of "
                         f"shape {tuple(logits.shape)} need {tuple(logits.shape[:-1])}")
    if pad_id is not None and (isinstance(pad_id, bool)
                               or not isinstance(pad_id, numbers.Integral)):
        raise TypeError(f"{fname}: pad_id must be an int or None, got {type(pad_id).__name__}")
    vocab = logits.shape[-1]
    index = _checks.first_true_index((targets < 0) | (targets >= vocab), xp)
    if index is not None:
        raise ValueError(f"{fname}: targets must lie in [0, {vocab}), got "
                         f"{int(targets[index]) if index else int(targets)}")
    _checks.check_finite(fname, "logits", logits, xp)
    if pad_id is not None and _checks.concrete(xp.all(targets == pad_id)):
        raise ValueError(f"{fname}: every target is padding (pad_id={pad_id}); there is no "
                         "token to average over")
    total, count = _nll_sum(logits, targets, pad_id, xp=xp)
    return total / xp.maximum(count, xp.ones_like(count))


def _nll_sum(logits: Any, targets: Any, pad_id: int | None, *, xp: Any) -> tuple[Any, Any]:
    """Summed negative log-likelihood of the real tokens, and their number (as a float)."""
    return _nll_parts(logits, targets, pad_id, xp=xp)[0]


def _nll_parts(logits: Any, targets: Any, pad_id: int | None, *,
               xp: Any) -> tuple[tuple[Any, Any], Any]:
    """``_nll_sum``'s ``(total, count)`` and the log-probabilities, which its backward
    pass needs."""
    logp = _log_softmax(logits, axis=-1, xp=xp)
    picked = xp.squeeze(xp.take_along_axis(logp, xp.expand_dims(targets, axis=-1), axis=-1),
                        axis=-1)
    if pad_id is None:
        real = xp.ones_like(picked)
    else:
        real = xp.astype(targets != pad_id, logits.dtype)
    return (-xp.sum(picked * real), xp.sum(real)), logp
