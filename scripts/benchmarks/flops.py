"""``flops``: achieved GFLOP/s of each training step of ``train``.

The FLOPs counted below, over the timed batches, divided by the ``train`` timings (asked of
the context, which measures them once), as a fraction of the float32 matmul GFLOP/s
measured with ``torch.mm`` of two ``--matmul`` square matrices on ``--threads`` threads
(NumPy's and JAX's matmul are printed beside it). Target: >= 50 % for xpseq.

FLOPs of one training step on a padded batch (B sentences, S source and T target
positions, embed E, H units per encoder direction, D = 2H, vocabulary V; a matmul of
(m, k) by (k, n) counts 2·m·k·n; element-wise work is not counted)::

    encoder    2 directions · (2·B·S·E·4H + 2·B·S·H·4H)       input and recurrent projections
    keys       2·B·S·2H·D                                     W m_j, once per sentence
    decoder    T · (2·B·(E + D)·4D + 2·B·D·4D)                 LSTMCell with input feeding
    attention  T · (2·B·S·D + 2·B·S·2H)                       scores and context
    combine    T · 2·B·(2H + D)·D                              o = tanh(W_u [a; s])
    output     2·B·T·D·V                                       logits
    step       3 · forward                                     backward ≈ 2 · forward

The padded shapes are counted for every implementation (the native encoder skips the
padding of packed sequences, so its figure is slightly generous to it).
"""

from __future__ import annotations

import statistics
from typing import Any

from . import train
from .context import Context
from .shared import HAND, HAND_JAX, Row, matmul_gflops


def step_flops(config: Any, batch: int, src: int, tgt: int) -> int:
    """FLOPs of one training step on a padded (batch, src) -> (batch, tgt) batch (see the
    module docstring)."""
    B, S, T = batch, src, tgt
    E, H, V = config.embed, config.hidden, config.tgt_vocab
    D, M = 2 * H, 2 * H
    encoder = 2 * (2 * B * S * E * 4 * H + 2 * B * S * H * 4 * H)
    keys = 2 * B * S * M * D
    decoder = T * (2 * B * (E + D) * 4 * D + 2 * B * D * 4 * D)
    attention = T * (2 * B * S * D + 2 * B * S * M)
    combine = T * 2 * B * (M + D) * D
    output = 2 * B * T * D * V
    return 3 * (encoder + keys + decoder + attention + combine + output)


def run(context: Context) -> list[Row]:
    """The matmul rate, the step's FLOPs, and each implementation's GFLOP/s as a fraction
    of the matmul rate."""
    args = context.args
    r = train.timings(context)
    flops = sum(step_flops(context.config, b["src"].shape[0], b["src"].shape[1],
                           b["tgt_in"].shape[1]) for b in context.timed)
    peak = matmul_gflops(args.matmul, args.repeats)
    n = args.matmul
    rows = [Row("flops", f"float32 matmul {n}×{n}, torch.mm", peak["torch"], "GFLOP/s",
                detail=f"{args.threads} torch thread(s); numpy {peak['numpy']:.1f}, "
                       f"jax {peak['jax']:.1f} GFLOP/s"),
            Row("flops", "training step FLOPs (mean over the timed batches)",
                flops / len(context.timed) / 1e6, "MFLOP", detail="3 × forward, padded shapes")]
    for name in ("xpseq-jax", HAND_JAX, "xpseq-torch", HAND, "native-torch"):
        achieved = flops / statistics.median(r["times"][name]) / 1e9
        fraction = achieved / peak["torch"]
        target, met = ("—", None) if name == "native-torch" else (">= 0.5x", fraction >= 0.5)
        rows.append(Row("flops", f"{name} training step", achieved, "GFLOP/s", fraction,
                        target, met, "ratio = fraction of torch.mm GFLOP/s"))
    context.record("flops", {"step_flops_total": flops, "matmul_gflops": peak})
    return rows
