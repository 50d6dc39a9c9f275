"""Cross-entropy over the real (non-padding) target tokens."""

from __future__ import annotations

from typing import Any

from . import checks, kernels

__all__ = ["cross_entropy"]


def cross_entropy(logits: Any, targets: Any, *, pad_id: int | None = None,
                  label_smoothing: float = 0.0) -> Any:
    """Mean negative log-likelihood of ``targets`` over the tokens that are not padding.

    ``loss = Σ_t [y_t ≠ pad] · (−log softmax(logits_t)[y_t]) / Σ_t [y_t ≠ pad]``: the mean
    over real tokens, taken once over the whole batch (not a mean of per-sentence means).
    With ``label_smoothing = ε`` each token's target is ``(1 - ε) onehot(y_t) + ε / V``
    (``torch.nn.functional.cross_entropy``'s ``label_smoothing``): its loss is
    ``(1 - ε)(−log p_y) + ε · mean_v(−log p_v)``.

    Parameters
    ----------
    logits : real floating array, shape ``(..., V)``
    targets : integer array, shape ``(...)``, values in ``[0, V)``
    pad_id : int, optional
        Targets equal to it are ignored. ``None`` counts every token.
    label_smoothing : float in ``[0, 1)``

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
    xp = checks.namespace(fname, logits=logits, targets=targets)
    checks.check_floating(fname, "logits", logits, xp)
    if not xp.isdtype(targets.dtype, "integral"):
        raise TypeError(f"{fname}: targets must have an integer dtype, got {targets.dtype}")
    checks.check_ndim(fname, "logits", logits, 1, layout="(..., V)")
    if tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"{fname}: targets has shape {tuple(targets.shape)} but logits of "
                         f"shape {tuple(logits.shape)} need {tuple(logits.shape[:-1])}")
    if pad_id is not None and not checks.is_int(pad_id):
        raise TypeError(f"{fname}: pad_id must be an int or None, got {type(pad_id).__name__}")
    if not checks.is_real(label_smoothing) or not 0 <= label_smoothing < 1:
        raise ValueError(f"{fname}: label_smoothing must be a number in [0, 1), got "
                         f"{label_smoothing!r}")
    vocab = logits.shape[-1]
    index = checks.first_true_index((targets < 0) | (targets >= vocab), xp)
    if index is not None:
        raise ValueError(f"{fname}: targets must lie in [0, {vocab}), got "
                         f"{int(targets[index]) if index else int(targets)}")
    checks.check_finite(fname, "logits", logits, xp)
    if pad_id is not None and checks.concrete(xp.all(targets == pad_id)):
        raise ValueError(f"{fname}: every target is padding (pad_id={pad_id}); there is no "
                         "token to average over")
    total, count = kernels.nll_sum(logits, targets, pad_id, xp=xp,
                                   smoothing=float(label_smoothing))
    return total / xp.maximum(count, xp.ones_like(count))


