"""``sdpa``: ``xpseq.core.scaled_dot_product_attention`` against the libraries' own.

Against ``torch.nn.functional.scaled_dot_product_attention`` (eager) and
``jax.jit(jax.nn.dot_product_attention)`` (xpseq jitted too), float32, at the ``--sdpa``
sizes (default batch 32, 8 heads, length 128, depth 64), without a mask and with a
key-padding mask; the ratio is reference time / xpseq time, and the outputs must agree to
1e-5.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import numpy as np

from .. import _common as common

from .context import Context
from .shared import Row


def run(context: Context) -> list[Row]:
    """Milliseconds per call of xpseq's attention and the reference, four ways (two
    libraries, with and without a mask), and their largest difference."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    from xpseq.core import scaled_dot_product_attention as sdpa

    args = context.args
    B, heads, L, d = args.sdpa_shape
    rng = np.random.default_rng(args.seed)
    q, k, v = (rng.standard_normal((B, heads, L, d)).astype(np.float32) for _ in range(3))
    lens = rng.integers(max(1, L // 2), L + 1, size=B)
    keep = np.arange(L)[None, :] < lens[:, None]                   # (B, L) key padding
    iters = args.sdpa_iters

    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    t_lens, t_mask = torch.from_numpy(lens), torch.from_numpy(keep[:, None, None, :])
    jq, jk, jv = (jnp.asarray(x) for x in (q, k, v))
    jq_t, jk_t, jv_t = (jnp.asarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))  # (B,L,N,d)
    j_lens, j_mask = jnp.asarray(lens), jnp.asarray(keep[:, None, None, :])
    x_plain = jax.jit(lambda q, k, v: sdpa(q, k, v, need_weights=False)[0])
    x_masked = jax.jit(lambda q, k, v, n: sdpa(q, k, v, valid_lens=n, need_weights=False)[0])
    r_plain = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v))
    r_masked = jax.jit(lambda q, k, v, m: jax.nn.dot_product_attention(q, k, v, mask=m))

    def torch_pair(masked: bool) -> tuple[Callable[[], Any], Callable[[], Any]]:
        def ours() -> Any:
            # need_weights=False: on PyTorch the core delegates to the fused kernel
            return sdpa(tq, tk, tv, valid_lens=t_lens if masked else None,
                        need_weights=False)[0]

        def ref() -> Any:
            return F.scaled_dot_product_attention(tq, tk, tv,
                                                  attn_mask=t_mask if masked else None)
        return ours, ref

    def jax_pair(masked: bool) -> tuple[Callable[[], Any], Callable[[], Any]]:
        def ours() -> Any:
            out = x_masked(jq, jk, jv, j_lens) if masked else x_plain(jq, jk, jv)
            return out.block_until_ready()

        def ref() -> Any:
            out = r_masked(jq_t, jk_t, jv_t, j_mask) if masked else r_plain(jq_t, jk_t, jv_t)
            return out.block_until_ready().transpose(0, 2, 1, 3)
        return ours, ref

    def repeat(fn: Callable[[], Any]) -> Callable[[], None]:
        return lambda: [fn() for _ in range(iters)]

    rows, worst = [], 0.0
    for lib, pair in (("torch", torch_pair), ("jax", jax_pair)):
        for masked in (False, True):
            ours, ref = pair(masked)
            a, b = np.asarray(ours()), np.asarray(ref())               # also warms up / jits
            diff = float(np.max(np.abs(a - b)))
            worst = max(worst, diff)
            times = common.take_turns({"xpseq": repeat(ours), "ref": repeat(ref)},
                                      args.repeats)
            ms = {n: 1e3 * statistics.median(t) / iters for n, t in times.items()}
            ref_name = "F.scaled_dot_product_attention" if lib == "torch" else \
                "jax.nn.dot_product_attention (jit)"
            rows.append(Row("sdpa", f"{lib}, {'key-padding mask' if masked else 'no mask'}: "
                                    f"xpseq vs {ref_name}", ms["xpseq"], "ms",
                            ms["ref"] / ms["xpseq"],
                            detail=f"reference {ms['ref']:.2f} ms; max |Δ| {diff:.1e}; "
                                   "ratio = reference time / xpseq time"))
    rows.append(Row("sdpa", "outputs agree (max |Δ| over the four comparisons)", worst, "",
                    None, "<= 1e-5", worst <= 1e-5,
                    f"float32, batch {B}, {heads} heads, length {L}, depth {d}"))
    return rows
