"""Lesson 12: forward mode (JVP) vs reverse mode (VJP).

``J v`` by forward mode and ``uᵀ J`` by reverse mode for ``f(x) = tanh(A x)``, checked
against each other by the dot-product test.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
from array_api_compat import array_namespace

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
    format_vector,
    normal_samples,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["lesson_forward_reverse", "tanh_linear", "numpy_pullback", "numpy_jvp_vjp",
           "jax_jvp_vjp", "torch_jvp_vjp"]


# ------------------------------------------------------------------------ the code


def tanh_linear(x: Any, A: Any) -> Any:
    """``f(x) = tanh(A x)``: R³ → R², written once."""
    xp = array_namespace(x, A)
    return xp.tanh(A @ x)


def numpy_pullback(x: np.ndarray, A: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """``u ↦ uᵀ J`` at ``x``, by xpseq's hand-derived rules of ``linear`` and ``tanh``."""
    xp = backends.get("numpy").xp
    z, linear_bp = vjp.linear(x[None, :], A, None, xp=xp)
    _, tanh_bp = vjp.tanh(z, xp=xp)

    def pullback(u: np.ndarray) -> np.ndarray:
        (dz,) = tanh_bp(u[None, :])
        return linear_bp(dz)[0][0]

    return pullback


def numpy_jvp_vjp(x: np.ndarray, A: np.ndarray, v: np.ndarray, u: np.ndarray) -> tuple:
    """``J v``, ``uᵀ J``, and ``J`` by central differences and by VJPs: xpseq has reverse
    rules only, so ``J`` is one VJP per output row."""
    pullback = numpy_pullback(x, A)
    jac = np.stack([pullback(e) for e in np.eye(len(u))])
    def output(i: int) -> Callable[[np.ndarray], float]:
        return lambda a: float(np.tanh(A @ a)[i])

    jac_fd = np.stack([central_difference_grad(output(i), x) for i in range(len(u))])
    return jac @ v, pullback(u), jac_fd, jac


def jax_jvp_vjp(x: np.ndarray, A: np.ndarray, v: np.ndarray, u: np.ndarray) -> tuple:
    """``J v`` by ``jax.jvp`` (forward), ``uᵀ J`` by ``jax.vjp`` (reverse), and ``J`` by
    ``jax.jacfwd`` and ``jax.jacrev``."""
    import jax
    import jax.numpy as jnp

    Aj, xj = jnp.asarray(A), jnp.asarray(x)
    f = lambda x: tanh_linear(x, Aj)             # noqa: E731
    jvp = jax.jit(lambda x, t: jax.jvp(f, (x,), (t,))[1])
    vjp_ = jax.jit(lambda x, c: jax.vjp(f, x)[1](c)[0])
    return (jvp(xj, jnp.asarray(v)), vjp_(xj, jnp.asarray(u)), jax.jit(jax.jacfwd(f))(xj),
            jax.jit(jax.jacrev(f))(xj))


def torch_jvp_vjp(x: np.ndarray, A: np.ndarray, v: np.ndarray, u: np.ndarray) -> tuple:
    """``J v`` by ``torch.func.jvp``, ``uᵀ J`` by ``torch.func.vjp``, and ``J`` by
    ``torch.func.jacfwd`` and ``jacrev``."""
    import torch

    At, xt = torch.tensor(A), torch.tensor(x)
    f = lambda x: tanh_linear(x, At)             # noqa: E731
    with warnings.catch_warnings():
        # torch.func's own internals still call the deprecated torch.jit.script.
        warnings.filterwarnings("ignore", message=".*torch.jit.script.* is deprecated",
                                category=DeprecationWarning)
        jv = torch.func.jvp(f, (xt,), (torch.tensor(v),))[1]
        pullback = torch.func.vjp(f, xt)[1]
        (uj,) = pullback(torch.tensor(u))
        jac_fwd, jac_rev = torch.func.jacfwd(f)(xt), torch.func.jacrev(f)(xt)
    return jv.numpy(), uj.numpy(), jac_fwd.numpy(), jac_rev.numpy()


# ------------------------------------------------------------------------ the table


@register_lesson(12, "Forward mode (JVP) vs reverse mode (VJP)",
                 code=(tanh_linear, numpy_pullback, numpy_jvp_vjp, jax_jvp_vjp, torch_jvp_vjp))
def lesson_forward_reverse() -> tuple[str, list[Row], dict[str, Any]]:
    """J v by forward mode, uᵀ J by reverse mode, and the dot-product test."""
    A, x = normal_samples(121, 2, 3), normal_samples(122, 3)
    v = normal_samples(123, 3)                           # a tangent (input side)
    u = normal_samples(124, 2)                           # a cotangent (output side)
    facts: dict[str, Any] = {"A": A.tolist(), "x": x.tolist(), "v": v.tolist(), "u": u.tolist()}

    def part(name: str, jvp_vjp: Callable[..., tuple]) -> Part:
        def fill(facts: dict[str, Any]) -> Cells:
            jv, uj, jac_fwd, jac_rev = (np.asarray(a) for a in jvp_vjp(x, A, v, u))
            dot = abs(float(u @ jv) - float(uj @ v))
            jac_diff = float(np.max(np.abs(jac_fwd - jac_rev)))
            facts.update({f"{name}_jvp": as_floats(jv), f"{name}_vjp": as_floats(uj),
                          f"{name}_dot_test": dot, f"{name}_jac_fwd_rev_diff": jac_diff})
            if name == "numpy":
                facts["numpy_vjps_for_jacobian"] = jac_rev.shape[0]
            return {"jvp": format_vector(jv), "vjp": format_vector(uj), "dot": format_error(dot),
                    "jac": format_error(jac_diff)}
        return fill

    numpy_part, jax_part = part("numpy", numpy_jvp_vjp), part("jax", jax_jvp_vjp)
    torch_part = part("torch", torch_jvp_vjp)
    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [
        ("jvp", "J v, forward mode (numpy: J from 2 hand-derived VJPs)"),
        ("vjp", "uᵀ J, reverse mode (numpy: xpseq's rules)"),
        ("dot", "dot-product test |uᵀ(J v) − (uᵀJ) v|"),
        ("jac", "max |J forward − J reverse| (numpy: central difference vs VJPs)"),
    ])
    explanation = (
        f"Forward mode pushes a tangent through f (one pass per input, so a full Jacobian "
        f"of f: R^{x.size} → R^{u.size} takes {x.size} JVPs) and reverse mode pulls a "
        f"cotangent back (one pass per output, {u.size} VJPs), "
        f"and the two agree to rounding, as the dot-product test uᵀ(Jv) = (uᵀJ)v shows "
        f"({format_fact(facts, 'jax_dot_test', format_error)} in jax, "
        f"{format_fact(facts, 'torch_dot_test', format_error)} in torch)."
    )
    return explanation, rows, facts
