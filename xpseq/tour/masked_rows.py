"""Lesson 4: a fully masked attention row, native APIs vs xpseq's explicit policy.

Attention for a query whose keys are all masked: torch's SDPA, ``nn.MultiheadAttention``
and ``jax.nn.dot_product_attention`` each pick a silent answer, while xpseq's
``empty="zero"``/``empty="error"`` makes it a choice. :func:`describe_row` names what an
output row is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import xpseq.core as C
from xpseq import backends
from xpseq.tour._common import (
    Cells,
    Row,
    as_floats,
    format_error,
    format_fact,
    normal_samples,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["describe_row", "lesson_masked_rows", "xpseq_attention", "jax_native_attention",
           "torch_native_sdpa", "torch_multihead_all_padding"]


def describe_row(row: np.ndarray, values: np.ndarray) -> str:
    """What an attention output row is: ``NaN``, ``zeros``, ``mean of values`` or ``other``."""
    row = np.asarray(row, dtype=np.float64)
    if np.isnan(row).any():
        return "NaN" if np.isnan(row).all() else "partly NaN"
    if np.all(row == 0):
        return "zeros"
    if np.allclose(row, np.mean(values, axis=0), rtol=0, atol=1e-6):
        return "mean of values"
    return "other"


# ------------------------------------------------------------------------ the code


def xpseq_attention(name: str, q: Any, k: Any, v: Any, mask: Any) -> tuple[Any, Any, str]:
    """xpseq's scaled dot-product attention on backend ``name``: the context and weights
    with ``empty="zero"``, and what ``empty="error"`` (the default) raises."""
    be = backends.get(name)
    q, k, v, mask = (be.asarray(a) for a in (q, k, v, mask))
    context, weights = C.scaled_dot_product_attention(q, k, v, mask=mask, empty="zero")
    try:
        C.scaled_dot_product_attention(q, k, v, mask=mask, empty="error")
        error = "none"
    except ValueError as err:
        error = f"{type(err).__name__}: {err}"
    return be.to_numpy(context), be.to_numpy(weights), error


def jax_native_attention(q: Any, k: Any, v: Any, mask: Any) -> np.ndarray:
    """``jax.nn.dot_product_attention`` with the boolean mask (one head: ``(B, T, N=1, H)``)."""
    import jax
    import jax.numpy as jnp

    def heads(a: Any) -> Any:
        return jnp.asarray(a[:, :, None, :])

    attention = jax.jit(jax.nn.dot_product_attention)
    out = attention(heads(q), heads(k), heads(v), mask=jnp.asarray(mask[:, None]))
    return np.asarray(out)[:, :, 0]


def torch_native_sdpa(q: Any, k: Any, v: Any, mask: Any) -> np.ndarray:
    """``torch.nn.functional.scaled_dot_product_attention`` with the boolean mask."""
    import torch

    tq, tk, tv = (torch.tensor(a) for a in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=torch.tensor(mask)).numpy()


def torch_multihead_all_padding(q: Any, k: Any, v: Any) -> tuple[np.ndarray, np.ndarray]:
    """``nn.MultiheadAttention`` (one head, seed 0) with every key marked padding: its
    output and weights."""
    import torch

    with torch.random.fork_rng(devices=[]):         # the layer's init draws from it
        torch.manual_seed(0)
        mha = torch.nn.MultiheadAttention(4, 1, batch_first=True, dtype=torch.float64)
    tq, tk, tv = (torch.tensor(a) for a in (q, k, v))
    with torch.no_grad():
        out, weights = mha(tq, tk, tv, key_padding_mask=torch.ones(1, 3, dtype=torch.bool))
    return out.numpy(), weights.numpy()


# ------------------------------------------------------------------------ the table


def _xpseq_attention_cells(name: str, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                           mask: np.ndarray, facts: dict[str, Any]) -> Cells:
    """xpseq's attention on backend ``name`` (:func:`xpseq_attention`), both policies."""
    context, weights, raised = xpseq_attention(name, q, k, v, mask)
    error = raised.split(":")[0]
    if error == "ValueError":
        facts[f"{name}_xpseq_error_message"] = raised.split(": ", 1)[1]
    facts.update({f"{name}_xpseq_zero": describe_row(context[0, 1], v[0]),
                  f"{name}_xpseq_zero_weights": describe_row(weights[0, 1], v[0]),
                  f"{name}_xpseq_valid_row": as_floats(context[0, 0]),
                  f"{name}_xpseq_error": error})
    return {"zero": f"{facts[f'{name}_xpseq_zero']} (weights "
                    f"{facts[f'{name}_xpseq_zero_weights']})",
            "error": f"{error}: no valid key" if error == "ValueError" else error}


@register_lesson(4, "A fully masked attention row: native APIs vs xpseq's explicit policy",
                 code=(xpseq_attention, jax_native_attention, torch_native_sdpa,
                       torch_multihead_all_padding))
def lesson_masked_rows() -> tuple[str, list[Row], dict[str, Any]]:
    """Attention for a query whose keys are all masked, natively and in xpseq."""
    q, k, v = normal_samples(41, 1, 2, 4), normal_samples(42, 1, 3, 4), normal_samples(43, 1, 3, 4)
    mask = np.array([[[True, True, False], [False, False, False]]])   # query 1: no valid key
    facts: dict[str, Any] = {"q": q.tolist(), "k": k.tolist(), "v": v.tolist(),
                             "mask": mask.tolist()}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        return _xpseq_attention_cells("numpy", q, k, v, mask, facts)

    def jax_part(facts: dict[str, Any]) -> Cells:
        cells = _xpseq_attention_cells("jax", q, k, v, mask, facts)
        out = jax_native_attention(q, k, v, mask)
        empty_row, valid_row = out[0, 1], out[0, 0]
        mean_diff = float(np.max(np.abs(empty_row - v[0].mean(axis=0))))
        valid_diff = float(np.max(np.abs(valid_row - np.asarray(facts["jax_xpseq_valid_row"]))))
        facts.update(jax_dpa_empty_row=describe_row(empty_row, v[0]),
                     jax_dpa_mean_diff=mean_diff, jax_dpa_valid_diff=valid_diff)
        cells.update(sdpa=f"{facts['jax_dpa_empty_row']} (|Δ| {format_error(mean_diff)})",
                     valid=format_error(valid_diff))
        return cells

    def torch_part(facts: dict[str, Any]) -> Cells:
        cells = _xpseq_attention_cells("torch", q, k, v, mask, facts)
        out = torch_native_sdpa(q, k, v, mask)
        valid_diff = float(np.max(np.abs(out[0, 0] - np.asarray(facts["torch_xpseq_valid_row"]))))
        mha_out, mha_weights = torch_multihead_all_padding(q, k, v)
        facts.update(torch_sdpa_empty_row=describe_row(out[0, 1], v[0]),
                     torch_sdpa_valid_diff=valid_diff,
                     torch_mha_out=describe_row(mha_out[0, 1], v[0]),
                     torch_mha_weights=describe_row(mha_weights[0, 1], v[0]))
        cells.update(sdpa=facts["torch_sdpa_empty_row"], valid=format_error(valid_diff),
                     mha=f"out {facts['torch_mha_out']}, weights {facts['torch_mha_weights']}")
        return cells

    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [
        ("sdpa", "native SDPA, query with no valid key (NumPy has no attention API)"),
        ("valid", "native SDPA, valid query: max |Δ| vs xpseq (float64 inputs)"),
        ("mha", "nn.MultiheadAttention, all keys padding (torch only)"),
        ("zero", "xpseq empty='zero', query with no valid key"),
        ("error", "xpseq empty='error' (the default)"),
    ])
    explanation = (
        f"Native attention APIs each pick a silent answer for a query with no valid key "
        f"(torch SDPA: {format_fact(facts, 'torch_sdpa_empty_row')}, nn.MultiheadAttention: "
        f"{format_fact(facts, 'torch_mha_out')}, jax.nn.dot_product_attention: "
        f"{format_fact(facts, 'jax_dpa_empty_row')}), while xpseq makes it a choice: "
        f"empty='zero' gives {format_fact(facts, 'numpy_xpseq_zero')} and empty='error' raises "
        f"{format_fact(facts, 'numpy_xpseq_error')}."
    )
    return explanation, rows, facts
