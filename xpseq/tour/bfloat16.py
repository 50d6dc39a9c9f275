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

from typing import Any, Callable

import numpy as np

from xpseq.core import kernels
from xpseq.tour._common import (
    NONE,
    Cells,
    Part,
    Row,
    format_error,
    format_fact,
    format_number,
    normal_samples,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["lesson_bfloat16", "ONES", "numpy_bfloat16", "jax_bfloat16", "torch_bfloat16"]

#: How many ones the running sums add.
ONES = 301


# ------------------------------------------------------------------------ the code


def numpy_bfloat16(x: np.ndarray, y: np.ndarray) -> dict[str, float] | None:
    """bfloat16's eps, ``1 + 1/256``, a running total of :data:`ONES` ones and ``x · y`` of
    the rounded inputs, by ``ml_dtypes`` (NumPy has no bfloat16 of its own; ``None``
    without it)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    bf16 = ml_dtypes.bfloat16
    total = bf16(0)
    for _ in range(ONES):                       # a bfloat16 accumulator
        total = bf16(total + bf16(1))
    dot = np.dot(x.astype(bf16).astype(np.float64), y.astype(bf16).astype(np.float64))
    return {"eps": float(ml_dtypes.finfo(bf16).eps), "plus": float(bf16(1) + bf16(1 / 256)),
            "running": float(total), "dot": float(dot)}


def jax_bfloat16(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The same in JAX, and xpseq's token count (``kernels.nll_sum``) of :data:`ONES`
    tokens with bfloat16 logits."""
    import jax
    import jax.numpy as jnp

    bf = jnp.bfloat16
    running = jax.lax.fori_loop(0, ONES, lambda i, t: t + jnp.ones((), bf), jnp.zeros((), bf))
    dot = jnp.dot(jnp.asarray(x, bf), jnp.asarray(y, bf),
                  preferred_element_type=jnp.float64)    # exact sums of the products
    _, count = kernels.nll_sum(jnp.zeros((1, ONES, 5), bf), jnp.full((1, ONES), 3), 0, xp=jnp)
    return {"eps": float(jnp.finfo(bf).eps), "plus": float(jnp.ones((), bf) + bf(1 / 256)),
            "running": float(running), "dot": float(dot), "count": float(count)}


def torch_bfloat16(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The same in torch, and xpseq's token count of :data:`ONES` tokens with bfloat16
    logits."""
    import array_api_compat.torch as xp
    import torch

    bf = torch.bfloat16
    total = torch.zeros((), dtype=bf)
    for _ in range(ONES):
        total = total + torch.ones((), dtype=bf)
    dot = (torch.tensor(x).to(bf).double() @ torch.tensor(y).to(bf).double()).item()
    logits = torch.zeros((1, ONES, 5), dtype=bf)
    _, count = kernels.nll_sum(logits, torch.full((1, ONES), 3), 0, xp=xp)
    return {"eps": torch.finfo(bf).eps, "plus": (torch.ones((), dtype=bf) + 1 / 256).item(),
            "running": total.item(), "dot": dot, "count": count.item()}


# ------------------------------------------------------------------------ the table


@register_lesson(14, "bfloat16: 8 significant bits, and what mixed precision keeps in float32",
                 code=(numpy_bfloat16, jax_bfloat16, torch_bfloat16))
def lesson_bfloat16() -> tuple[str, list[Row], dict[str, Any]]:
    """bfloat16's spacing, a running sum that stalls, a product's error, xpseq's count."""
    # float32 numbers, so that every library rounds each to bfloat16 once.
    x, y = (normal_samples(seed, 256).astype(np.float32).astype(np.float64) for seed in (141, 142))
    exact = float(x @ y)
    facts: dict[str, Any] = {"exact_dot": exact, "ones": ONES}

    def part(name: str, measure: Callable[[np.ndarray, np.ndarray], dict | None]) -> Part:
        def fill(facts: dict[str, Any]) -> Cells:
            found = measure(x, y)
            if found is None:
                return {k: "needs ml_dtypes" for k in ("eps", "plus", "running", "dot", "count")}
            rel = abs(found["dot"] - exact) / abs(exact)
            count = found.get("count")          # numpy: no autodiff, xpseq refuses bf16 there
            facts.update({f"{name}_eps": found["eps"], f"{name}_one_plus": found["plus"],
                          f"{name}_running_sum": found["running"], f"{name}_dot_rel_err": rel,
                          f"{name}_count": count})
            return {"eps": format_number(found["eps"]), "plus": format_number(found["plus"], 6),
                    "running": format_number(found["running"]), "dot": format_error(rel),
                    "count": NONE if count is None else format_number(count)}
        return fill

    numpy_part, jax_part = part("numpy", numpy_bfloat16), part("jax", jax_bfloat16)
    torch_part = part("torch", torch_bfloat16)
    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [
        ("eps", "bfloat16's eps: the spacing of numbers just above 1 (float32: 1.2e-07)"),
        ("plus", "1 + 1/256 in bfloat16"),
        ("running", f"{ONES} ones added one at a time into a bfloat16 total"),
        ("dot", "relative error of x · y (256 terms) with x, y rounded to bfloat16"),
        ("count", f"xpseq's token count (kernels.nll_sum) of {ONES} tokens with bfloat16 "
                  "logits (numpy: no autodiff, bf16 refused)"),
    ])
    explanation = (
        f"bfloat16 keeps float32's exponent but only 8 significant bits (spacing "
        f"{format_fact(facts, 'jax_eps', format_number)} near 1), so 1 + 1/256 rounds back to "
        f"{format_fact(facts, 'torch_one_plus', format_number)}, a bfloat16 total of ones stops at "
        f"{format_fact(facts, 'torch_running_sum', format_number)} (257 rounds back down) and "
        f"rounding the inputs of a 256-term product moves it by "
        f"{format_fact(facts, 'numpy_dot_rel_err', format_error)} "
        f"of its value; that is why precision='bf16' multiplies in bfloat16 but widens the "
        f"reductions to float32: the loss's token count comes out "
        f"{format_fact(facts, 'jax_count', format_number)}, and softmax, layer-norm statistics "
        f"and the loss are float32."
    )
    return explanation, rows, facts
