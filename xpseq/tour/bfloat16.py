"""Lesson 14: what bfloat16 changes, and where mixed precision keeps float32.

bfloat16 keeps float32's range but only 8 significant bits: the spacing of numbers near 1
is 2^-7, an added 1/256 vanishes, and a running sum of ones stops growing at 256 (257 is
not a bfloat16). A matrix product of bfloat16 inputs is off by about 0.4 % of its terms.
That is why :mod:`xpseq.core.precision` multiplies in bfloat16 but counts tokens, sums the
loss and normalises softmax in float32.

NumPy has no bfloat16 of its own; its column uses ``ml_dtypes`` (installed with JAX), the
same type JAX uses, and says so when it is missing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xpseq.core import kernels
from xpseq.tour._common import (
    NONE,
    Cells,
    Row,
    _columns,
    _data,
    _err,
    _fact,
    _jax,
    _lesson,
    _num,
    _table,
    _torch,
)

__all__ = ["lesson_bfloat16", "ONES"]

#: How many ones the running sums add.
ONES = 301


def _ml_dtypes() -> Any:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


@_lesson(14, "bfloat16: 8 significant bits, and what mixed precision keeps in float32")
def lesson_bfloat16() -> tuple[str, list[Row], dict[str, Any]]:
    """bfloat16's spacing, a running sum that stalls, a product's error, xpseq's count."""
    # float32 numbers, so that every library rounds each to bfloat16 once.
    x, y = (_data(seed, 256).astype(np.float32).astype(np.float64) for seed in (141, 142))
    exact = float(x @ y)
    facts: dict[str, Any] = {"exact_dot": exact, "ones": ONES}

    def finish(name: str, eps: float, plus: float, running: float, dot: float,
               count: float | None) -> Cells:
        rel = abs(dot - exact) / abs(exact)
        facts.update({f"{name}_eps": eps, f"{name}_one_plus": plus,
                      f"{name}_running_sum": running, f"{name}_dot_rel_err": rel,
                      f"{name}_count": count})
        return {"eps": _num(eps), "plus": _num(plus, 6), "running": _num(running),
                "dot": _err(rel), "count": NONE if count is None else _num(count)}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        ml = _ml_dtypes()
        if ml is None:
            return {k: "needs ml_dtypes" for k in ("eps", "plus", "running", "dot", "count")}
        bf16 = ml.bfloat16
        total = bf16(0)
        for _ in range(ONES):                       # a bfloat16 accumulator
            total = bf16(total + bf16(1))
        dot = float(np.dot(x.astype(bf16).astype(np.float64), y.astype(bf16).astype(np.float64)))
        return finish("numpy", float(ml.finfo(bf16).eps), float(bf16(1) + bf16(1 / 256)),
                      float(total), dot, None)     # no autodiff: xpseq refuses bf16 here

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        bf = jnp.bfloat16
        running = jax.lax.fori_loop(0, ONES, lambda i, t: t + jnp.ones((), bf),
                                    jnp.zeros((), bf))
        dot = jnp.dot(jnp.asarray(x, bf), jnp.asarray(y, bf),
                      preferred_element_type=jnp.float64)    # exact sums of the products
        logits = jnp.zeros((1, ONES, 5), bf)
        _, count = kernels.nll_sum(logits, jnp.full((1, ONES), 3), 0, xp=jnp)
        return finish("jax", float(jnp.finfo(bf).eps), float(jnp.ones((), bf) + bf(1 / 256)),
                      float(running), float(dot), float(count))

    def torch_part(facts: dict[str, Any]) -> Cells:
        import array_api_compat.torch as xp

        torch = _torch()
        bf = torch.bfloat16
        total = torch.zeros((), dtype=bf)
        for _ in range(ONES):
            total = total + torch.ones((), dtype=bf)
        dot = (torch.tensor(x).to(bf).double() @ torch.tensor(y).to(bf).double()).item()
        logits = torch.zeros((1, ONES, 5), dtype=bf)
        _, count = kernels.nll_sum(logits, torch.full((1, ONES), 3), 0, xp=xp)
        return finish("torch", torch.finfo(bf).eps,
                      (torch.ones((), dtype=bf) + 1 / 256).item(), total.item(), dot,
                      count.item())

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("eps", "bfloat16's eps: the spacing of numbers just above 1 (float32: 1.2e-07)"),
        ("plus", "1 + 1/256 in bfloat16"),
        ("running", f"{ONES} ones added one at a time into a bfloat16 total"),
        ("dot", "relative error of x · y (256 terms) with x, y rounded to bfloat16"),
        ("count", f"xpseq's token count (kernels.nll_sum) of {ONES} tokens with bfloat16 "
                  "logits (numpy: no autodiff, bf16 refused)"),
    ])
    explanation = (
        f"bfloat16 keeps float32's exponent but only 8 significant bits (spacing "
        f"{_fact(facts, 'jax_eps', _num)} near 1), so 1 + 1/256 rounds back to "
        f"{_fact(facts, 'torch_one_plus', _num)}, a bfloat16 total of ones stops at "
        f"{_fact(facts, 'torch_running_sum', _num)} (257 rounds back down) and rounding the "
        f"inputs of a 256-term product moves it by {_fact(facts, 'numpy_dot_rel_err', _err)} "
        f"of its value; that is why precision='bf16' multiplies in bfloat16 but widens the "
        f"reductions to float32: the loss's token count comes out "
        f"{_fact(facts, 'jax_count', _num)}, and softmax, layer-norm statistics and the loss "
        f"are float32."
    )
    return explanation, rows, facts
