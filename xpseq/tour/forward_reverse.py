"""Lesson 12: forward mode (JVP) vs reverse mode (VJP).

``J v`` by forward mode and ``uᵀ J`` by reverse mode for ``f(x) = tanh(A x)``, checked
against each other by the dot-product test.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from xpseq.core import vjp
from xpseq.testing import central_difference_grad
from xpseq.tour._common import (
    Cells,
    Row,
    _columns,
    _data,
    _err,
    _fact,
    _floats,
    _jax,
    _lesson,
    _table,
    _torch,
    _vec,
    _xp_numpy,
)

__all__ = ["lesson_forward_reverse"]


def _tanh_linear(x: Any, A: Any) -> Any:
    """``f(x) = tanh(A x)``: R³ → R², written once."""
    xp = array_namespace(x, A)
    return xp.tanh(A @ x)


@_lesson(12, "Forward mode (JVP) vs reverse mode (VJP)")
def lesson_forward_reverse() -> tuple[str, list[Row], dict[str, Any]]:
    """J v by forward mode, uᵀ J by reverse mode, and the dot-product test."""
    A, x = _data(121, 2, 3), _data(122, 3)
    v, u = _data(123, 3), _data(124, 2)         # a tangent (input side), a cotangent (output)
    facts: dict[str, Any] = {"A": A.tolist(), "x": x.tolist(), "v": v.tolist(), "u": u.tolist()}

    def finish(name: str, jv: Any, uj: Any, jac_fwd: Any, jac_rev: Any) -> Cells:
        jv, uj = np.asarray(jv), np.asarray(uj)
        dot = abs(float(u @ jv) - float(uj @ v))
        jac_diff = float(np.max(np.abs(np.asarray(jac_fwd) - np.asarray(jac_rev))))
        facts.update({f"{name}_jvp": _floats(jv), f"{name}_vjp": _floats(uj),
                      f"{name}_dot_test": dot, f"{name}_jac_fwd_rev_diff": jac_diff})
        return {"jvp": _vec(jv), "vjp": _vec(uj), "dot": _err(dot), "jac": _err(jac_diff)}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        xp = _xp_numpy()
        z, linear_bp = vjp.linear(x[None, :], A, None, xp=xp)
        _, tanh_bp = vjp.tanh(z, xp=xp)

        def pullback(cotangent: np.ndarray) -> np.ndarray:
            (dz,) = tanh_bp(cotangent[None, :])
            return linear_bp(dz)[0][0]

        # xpseq has reverse rules only: the Jacobian is one VJP per output row.
        jac = np.stack([pullback(e) for e in np.eye(2)])
        jac_fd = np.stack([central_difference_grad(lambda a, i=i: float(np.tanh(A @ a)[i]), x)
                           for i in range(2)])
        facts["numpy_vjps_for_jacobian"] = jac.shape[0]
        return finish("numpy", jac @ v, pullback(u), jac_fd, jac)

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        Aj = jnp.asarray(A)
        f = lambda x: _tanh_linear(x, Aj)             # noqa: E731
        xj = jnp.asarray(x)
        jvp = jax.jit(lambda x, t: jax.jvp(f, (x,), (t,))[1])
        vjp_ = jax.jit(lambda x, c: jax.vjp(f, x)[1](c)[0])
        jv, uj = jvp(xj, jnp.asarray(v)), vjp_(xj, jnp.asarray(u))
        return finish("jax", jv, uj, jax.jit(jax.jacfwd(f))(xj), jax.jit(jax.jacrev(f))(xj))

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        At = torch.tensor(A)
        f = lambda x: _tanh_linear(x, At)             # noqa: E731
        xt = torch.tensor(x)
        with warnings.catch_warnings():
            # torch.func's own internals still call the deprecated torch.jit.script.
            warnings.filterwarnings("ignore", message=".*torch.jit.script.* is deprecated",
                                    category=DeprecationWarning)
            _, jv = torch.func.jvp(f, (xt,), (torch.tensor(v),))
            _, pullback = torch.func.vjp(f, xt)
            (uj,) = pullback(torch.tensor(u))
            jac_fwd, jac_rev = torch.func.jacfwd(f)(xt), torch.func.jacrev(f)(xt)
        return finish("torch", jv.numpy(), uj.numpy(), jac_fwd.numpy(), jac_rev.numpy())

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
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
        f"({_fact(facts, 'jax_dot_test', _err)} in jax, "
        f"{_fact(facts, 'torch_dot_test', _err)} in torch)."
    )
    return explanation, rows, facts
