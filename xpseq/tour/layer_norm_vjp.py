"""Lesson 16: layer norm's backward by hand, against two autodiffs and central differences.

xpseq's hand-derived rule for ``y = γ ⊙ (x − μ) s + β`` (:func:`xpseq.core.vjp.layer_norm`,
the one NumPy trains the Transformer with) is ``dx = s (g − mean(g) − x̂ mean(g ⊙ x̂))`` with
``g = dy ⊙ γ``: each input moves the mean and the variance, so every feature's cotangent
reaches every other. Here it is checked in float64 against ``jax.grad`` of a layer norm
written in ``jax.numpy``, torch's own ``F.layer_norm`` and central differences. (In
bfloat16, xpseq keeps the statistics in float32: lesson 14.)
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from xpseq import backends
from xpseq.core import vjp
from xpseq.testing import central_difference_grad
from xpseq.tour._common import (
    Cells,
    Part,
    Row,
    as_floats,
    format_error,
    format_fact,
    normal_samples,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["EPS", "lesson_layer_norm_vjp", "numpy_layer_norm_vjp", "numpy_central_differences",
           "jax_layer_norm_vjp", "torch_layer_norm_vjp"]

#: The layer norm's ``eps`` (the Transformer's).
EPS = 1e-5


# ------------------------------------------------------------------------ the code


def numpy_layer_norm_vjp(x: Any, gamma: Any, beta: Any, dy: Any) -> tuple[Any, Any, Any]:
    """``(dx, dγ, dβ)`` of ``Σ dy ⊙ layer_norm(x)`` by xpseq's hand-derived rule."""
    _, backprop = vjp.layer_norm(x, gamma, beta, EPS, xp=backends.get("numpy").xp)
    return backprop(dy)


def numpy_central_differences(x: Any, gamma: Any, beta: Any, dy: Any) -> tuple[Any, Any, Any]:
    """The same three gradients by central differences of a plain-NumPy layer norm."""
    def loss(x: Any, gamma: Any, beta: Any) -> float:
        mean, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
        return float(np.sum(dy * (gamma * (x - mean) / np.sqrt(var + EPS) + beta)))

    return (central_difference_grad(lambda a: loss(a, gamma, beta), x),
            central_difference_grad(lambda a: loss(x, a, beta), gamma),
            central_difference_grad(lambda a: loss(x, gamma, a), beta))


def jax_layer_norm_vjp(x: Any, gamma: Any, beta: Any, dy: Any) -> tuple[Any, Any, Any]:
    """The same three gradients by ``jax.grad`` of a layer norm written in ``jax.numpy``."""
    import jax
    import jax.numpy as jnp

    def loss(x: Any, gamma: Any, beta: Any) -> Any:
        mean, var = jnp.mean(x, axis=-1, keepdims=True), jnp.var(x, axis=-1, keepdims=True)
        return jnp.sum(dy * (gamma * (x - mean) / jnp.sqrt(var + EPS) + beta))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(x, gamma, beta)


def torch_layer_norm_vjp(x: Any, gamma: Any, beta: Any, dy: Any) -> tuple[Any, Any, Any]:
    """The same three gradients by torch autograd through its own ``F.layer_norm``."""
    import torch

    xt, gt, bt = (torch.tensor(a, requires_grad=True) for a in (x, gamma, beta))
    y = torch.nn.functional.layer_norm(xt, (xt.shape[-1],), gt, bt, eps=EPS)
    y.backward(torch.tensor(dy))
    assert xt.grad is not None and gt.grad is not None and bt.grad is not None
    return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


# ------------------------------------------------------------------------ the table


@register_lesson(16, "Layer norm's backward by hand, against jax.grad, torch autograd and central "
                     "differences", code=(numpy_layer_norm_vjp, numpy_central_differences,
                                          jax_layer_norm_vjp, torch_layer_norm_vjp))
def lesson_layer_norm_vjp() -> tuple[str, list[Row], dict[str, Any]]:
    """xpseq's hand-derived layer-norm VJP against jax, torch and central differences."""
    x, dy = normal_samples(161, 2, 3, 6), normal_samples(164, 2, 3, 6)  # (batch, time, features)
    gamma, beta = 1.0 + 0.5 * normal_samples(162, 6), normal_samples(163, 6)
    facts: dict[str, Any] = {"x": x.tolist(), "gamma": gamma.tolist(), "beta": beta.tolist(),
                             "dy": dy.tolist(), "eps": EPS}

    def diff(grads: tuple) -> float:
        return max(float(np.max(np.abs(np.asarray(g) - np.asarray(facts[f"numpy_{k}"]))))
                   for k, g in zip(("dx", "dgamma", "dbeta"), grads))

    def part(name: str, grads: Callable[..., tuple]) -> Part:
        def fill(facts: dict[str, Any]) -> Cells:
            found = tuple(np.asarray(g) for g in grads(x, gamma, beta, dy))
            facts.update({f"{name}_{k}": g.tolist()
                          for k, g in zip(("dx", "dgamma", "dbeta"), found)})
            cells = {"dx": "[" + ", ".join(f"{v:.4g}" for v in found[0][0, 0, :3]) + ", ...]",
                     "sum": format_error(np.max(np.abs(found[0].sum(axis=-1))))}
            facts[f"{name}_dx_feature_sum"] = as_floats(found[0].sum(axis=-1))
            if name == "numpy":
                fd = numpy_central_differences(x, gamma, beta, dy)
                facts["numpy_fd_max_diff"] = diff(fd)
                cells["diff"], cells["fd"] = "reference", format_error(facts["numpy_fd_max_diff"])
            else:
                facts[f"{name}_max_diff_vs_numpy"] = diff(found)
                cells["diff"] = format_error(facts[f"{name}_max_diff_vs_numpy"])
            return cells
        return fill

    columns = run_columns(facts, numpy=part("numpy", numpy_layer_norm_vjp),
                          jax=part("jax", jax_layer_norm_vjp),
                          torch=part("torch", torch_layer_norm_vjp))
    rows = table_rows(columns, [
        ("dx", "∂/∂x of Σ dy ⊙ layer_norm(x), x (2, 3, 6): first features (numpy: xpseq's "
               "hand-derived rule)"),
        ("diff", "max |Δ| of (dx, dγ, dβ) vs numpy's hand-derived (float64)"),
        ("fd", "max |Δ| vs central differences (jax, torch: see numpy)"),
        ("sum", "max |Σ over features of dx| (shifting x changes nothing: 0)"),
    ])
    explanation = (
        "Layer norm's backward must route every feature's cotangent through the mean and the "
        "variance, dx = s (g − mean(g) − x̂ mean(g x̂)) with g = dy γ, and xpseq's hand-derived "
        f"rule matches jax.grad to {format_fact(facts, 'jax_max_diff_vs_numpy', format_error)}, "
        f"torch's F.layer_norm to {format_fact(facts, 'torch_max_diff_vs_numpy', format_error)} "
        f"and central differences to {format_fact(facts, 'numpy_fd_max_diff', format_error)} in "
        "float64."
    )
    return explanation, rows, facts
