"""Lesson 15: the causal mask and the key/value cache give the same logits.

A tiny xpseq Transformer decoder run teacher-forced over a whole target (one pass, causal
self-attention) and step by step as a search runs it (one position a step, reading the keys
and values of earlier positions from a cache): the log-probabilities agree to rounding in
float64 on every backend, because the mask hides exactly what the cache does not hold yet.
Without the mask, attention reads the future, and training would learn from positions that
decoding never has.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import xpseq.core as C
from xpseq import backends
from xpseq.models import transformer
from xpseq.tour._common import (
    Cells,
    Part,
    Row,
    format_error,
    format_fact,
    normal_samples,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["lesson_kv_cache", "tiny_transformer", "teacher_forced", "step_by_step",
           "attention_three_ways"]

#: The tiny decoder's target inputs: ``<s>`` (id 1), then four tokens; rows 2 and 3 are
#: rows 0 and 1 with the last token changed (the future, for the earlier positions).
TGT_IN = np.array([[1, 5, 9, 4, 7], [1, 3, 3, 8, 2], [1, 5, 9, 4, 3], [1, 3, 3, 8, 6]])


# ------------------------------------------------------------------------ the code


def tiny_transformer() -> tuple[transformer.TransformerConfig, dict[str, np.ndarray], dict]:
    """A tiny Transformer (d_model 8, two heads, two decoder layers), its float64
    parameters (seed 0) and a batch: two sources (one padded), each twice, with the targets
    of :data:`TGT_IN`."""
    config = transformer.TransformerConfig(src_vocab=11, tgt_vocab=11, d_model=8, heads=2,
                                           encoder_layers=1, decoder_layers=2, d_ff=16)
    src = np.array([[4, 5, 6, 2], [7, 8, 2, 0]] * 2)
    batch = {"src": src, "src_len": np.array([4, 3] * 2), "tgt_in": TGT_IN}
    return config, transformer.init_params(config, seed=0), batch


def teacher_forced(name: str, config: Any, params: dict, batch: dict) -> np.ndarray:
    """Log-probabilities ``(B, T, V)`` of the whole target in one pass on backend ``name``
    (training's forward: causal self-attention, every position at once; ``be.jit``
    compiles it on JAX and is the function itself elsewhere)."""
    be = backends.get(name)

    def forward(p: dict, b: dict) -> Any:
        logits, _ = transformer.forward(p, config, b["src"], b["src_len"], b["tgt_in"],
                                        need_weights=False)
        return C.log_softmax(logits)

    p, b = ({k: be.asarray(v) for k, v in d.items()} for d in (params, batch))
    return be.to_numpy(be.jit(forward)(p, b))


def step_by_step(name: str, config: Any, params: dict, batch: dict,
                 capacity: int | None = None) -> np.ndarray:
    """The same log-probabilities from the search's step, one position at a time, each
    reading the earlier keys and values from the cache (growing, or of fixed ``capacity``)."""
    be = backends.get(name)
    p, b = ({k: be.asarray(v) for k, v in d.items()} for d in (params, batch))
    kernels = transformer.MODEL.kernels
    encoded = be.jit(lambda p, src, src_len: kernels.encode(p, config, src, src_len, scan=None,
                                                            xp=be.xp))(p, b["src"], b["src_len"])
    step, state = kernels.decoder(p, config, encoded, attention=False, max_len=capacity,
                                  xp=be.xp)
    step, out = be.jit(step), []
    for t in range(batch["tgt_in"].shape[1]):
        log_probs, state, _ = step(state, b["tgt_in"][:, t])
        out.append(be.to_numpy(log_probs))
    return np.stack(out, axis=1)


def attention_three_ways(name: str, q: Any, k: Any, v: Any) -> tuple[Any, Any, Any]:
    """One self-attention ``(T, d)`` on backend ``name``: with the causal mask, without
    it (each position reads the future), and position by position over a growing cache."""
    be = backends.get(name)

    def three(q: Any, k: Any, v: Any) -> tuple[Any, Any, Any]:
        T = q.shape[0]
        causal = be.xp.tril(be.xp.ones((T, T), dtype=be.xp.bool))      # key <= query
        masked, _ = C.scaled_dot_product_attention(q, k, v, mask=causal)
        leaky, _ = C.scaled_dot_product_attention(q, k, v)
        cached = [C.scaled_dot_product_attention(q[t:t + 1], k[:t + 1], v[:t + 1])[0]
                  for t in range(T)]
        return masked, leaky, be.xp.concat(cached, axis=0)

    masked, leaky, cached = (be.to_numpy(a) for a in
                             be.jit(three)(*(be.asarray(a) for a in (q, k, v))))
    return masked, leaky, cached


# ------------------------------------------------------------------------ the table


def _max_diff(a: Any, b: Any) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


@register_lesson(15, "The causal mask and the key/value cache give the same logits",
                 code=(tiny_transformer, teacher_forced, step_by_step, attention_three_ways))
def lesson_kv_cache() -> tuple[str, list[Row], dict[str, Any]]:
    """Teacher forcing with the causal mask vs decoding step by step with the cache."""
    config, params, batch = tiny_transformer()
    q, k, v = normal_samples(151, 5, 4), normal_samples(152, 5, 4), normal_samples(153, 5, 4)
    facts: dict[str, Any] = {"config": config.to_dict(), "seed": 0,
                             **{key: a.tolist() for key, a in batch.items()},
                             "q": q.tolist(), "k": k.tolist(), "v": v.tolist()}

    def part(name: str) -> Part:
        def fill(facts: dict[str, Any]) -> Cells:
            forced = teacher_forced(name, config, params, batch)
            fixed = step_by_step(name, config, params, batch, capacity=TGT_IN.shape[1])
            masked, leaky, cached = attention_three_ways(name, q, k, v)
            found = {"cache_max_diff": _max_diff(forced, fixed),
                     "future_change_max_diff": _max_diff(forced[:2, :-1], forced[2:, :-1]),
                     "masked_vs_cache_diff": _max_diff(masked, cached),
                     "leak_vs_cache_diff": _max_diff(leaky[:-1], cached[:-1]),
                     "leak_last_row_diff": _max_diff(leaky[-1], cached[-1])}
            cells = {key: format_error(value) for key, value in found.items()}
            if name != "jax":             # compiled, a growing cache would retrace each step
                growing = step_by_step(name, config, params, batch)
                found["growing_cache_max_diff"] = _max_diff(forced, growing)
                cells["growing_cache_max_diff"] = format_error(found["growing_cache_max_diff"])
            facts.update({f"{name}_{key}": value for key, value in found.items()})
            facts.update({f"{name}_teacher_forced": forced.tolist(),
                          f"{name}_step_by_step": fixed.tolist(),
                          f"{name}_leaky": leaky.tolist(), f"{name}_masked": masked.tolist()})
            return cells
        return fill

    columns = run_columns(facts, numpy=part("numpy"), jax=part("jax"), torch=part("torch"))
    rows = table_rows(columns, [
        ("cache_max_diff", "xpseq Transformer decoder: max |Δ log p|, teacher forced (causal "
                           "mask) vs step by step (a cache of fixed capacity); float64"),
        ("growing_cache_max_diff", "same, a growing cache (eager searches; jax: compiled, "
                                   "it would retrace at every step)"),
        ("future_change_max_diff", "last input token changed: max |Δ log p| at the earlier "
                                   "positions"),
        ("masked_vs_cache_diff", "one attention, causal mask vs a cache: max |Δ|"),
        ("leak_vs_cache_diff", "no causal mask (the future leaks) vs a cache: max |Δ|, all "
                               "positions but the last"),
        ("leak_last_row_diff", "same, the last position (it has no future)"),
    ])
    explanation = (
        "Teacher forcing computes every position at once and hides the later ones with the causal "
        "mask, while decoding adds one position a step and reads the earlier keys and values from "
        "a cache, and the two give the same log-probabilities to "
        f"{format_fact(facts, 'numpy_cache_max_diff', format_error)} (numpy), "
        f"{format_fact(facts, 'jax_cache_max_diff', format_error)} (jax) and "
        f"{format_fact(facts, 'torch_cache_max_diff', format_error)} (torch) in float64, whereas "
        "attention without the mask reads the future and differs from the cache by "
        f"{format_fact(facts, 'numpy_leak_vs_cache_diff', format_error)} at every position but the "
        "last."
    )
    return explanation, rows, facts
