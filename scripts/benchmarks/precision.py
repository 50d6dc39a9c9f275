"""``precision`` (only with ``--only precision``): mixed bfloat16 training against float32.

Both model kinds at the bench's sizes (the RNN at ``--embed``/``--hidden``/``--batch`` on
the ``train`` batches, the Transformer at ``--transformer`` on its token-bucketed ones),
xpseq on JAX and on PyTorch with the library's autodiff (mixed precision needs it), Adam,
no dropout, no clipping: training throughput with ``precision="bf16"``
(:mod:`xpseq.core.precision`: matrix products and activations in bfloat16; parameters,
optimiser state, softmax, layer-norm statistics and the loss in float32) against the same
engine's float32 step, timed in turns. Before timing, each bf16 step's first loss must be
within 1 % of float32's (the same batch and parameters).

Also the square ``--matmul`` matmul's GFLOP/s in float32 and bfloat16 on each engine: what
the processor offers (PyTorch reaches bfloat16's native instructions, AVX512-BF16 or AMX,
through oneDNN; XLA's CPU backend may not).

Target: the bf16 Transformer >= 3x its own float32 throughput on a processor with AMX
(``amx_tile`` among its flags); on one without, the figure is reported and the target does
not apply (the ``met`` cell says ``—``).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from .. import _common as common
import numpy as np

from .context import Context
from .shared import Row, float32_on, on_backend, xpseq_loop

#: The most a bf16 step's first loss may differ from float32's, relative.
FIRST_LOSS_TOLERANCE = 0.01


def matmul_rates(n: int, repeats: int) -> dict[str, float]:
    """GFLOP/s of an ``n × n`` matmul: ``{"torch float32", "torch bf16", "jax float32",
    "jax bf16"}`` (medians, taken in turns)."""
    import jax
    import jax.numpy as jnp
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    reps = max(1, int(1e10 // (2 * n ** 3)))
    fns: dict[str, Callable[[], None]] = {}
    for dtype_name, tdt, jdt in (("float32", torch.float32, jnp.float32),
                                 ("bf16", torch.bfloat16, jnp.bfloat16)):
        ta = torch.from_numpy(a).to(tdt)
        ja = jnp.asarray(a, dtype=jdt)
        jmm = jax.jit(jnp.matmul)
        jmm(ja, ja).block_until_ready()

        def run_torch(ta: Any = ta) -> None:
            for _ in range(reps):
                torch.mm(ta, ta)

        def run_jax(ja: Any = ja, jmm: Any = jmm) -> None:
            for _ in range(reps):
                jmm(ja, ja).block_until_ready()

        run_torch()
        fns[f"torch {dtype_name}"], fns[f"jax {dtype_name}"] = run_torch, run_jax
    times = common.take_turns(fns, max(repeats, 3))
    return {k: reps * 2 * n ** 3 / statistics.median(t) / 1e9 for k, t in times.items()}


def _setups(context: Context) -> list[tuple[str, Any, dict, list]]:
    """``(kind name, config, float32 NumPy parameters, timed NumPy batches)`` of both
    kinds at the bench's sizes."""
    t = context.transformer
    return [("rnn", context.config, context.init32, context.timed),
            ("transformer", t.config, t.init32, t.timed)]


def run(context: Context) -> list[Row]:
    """bf16 against float32 throughput for both kinds on JAX and PyTorch, and the
    matmul rates."""
    from xpseq.core.precision import Policy
    from xpseq.train import make_train_step

    args = context.args
    features = common.cpu_features() or []
    amx = "amx_tile" in features
    rates = matmul_rates(args.matmul, args.repeats)
    rows = []
    for engine in ("torch", "jax"):
        ratio = rates[f"{engine} bf16"] / rates[f"{engine} float32"]
        rows.append(Row("precision", f"{engine} matmul {args.matmul}×{args.matmul}, bf16 vs "
                        "float32", rates[f"{engine} bf16"], "GFLOP/s", ratio,
                        detail=f"float32 {rates[f'{engine} float32']:.1f} GFLOP/s"))
    details: dict[str, Any] = {"matmul_gflops": rates, "tokens_per_s": {},
                               "first_loss_diff": {}}
    for kind, config, init32, timed in _setups(context):
        impls: dict[str, Callable[[], None]] = {}
        first: dict[str, float] = {}
        for engine in ("jax", "torch"):
            be = getattr(context, engine)
            batches = [on_backend(be, b) for b in timed]
            for precision in (None, "bf16"):
                step = make_train_step(config, context.optimizer, be, clip_norm=None,
                                       gradients="autodiff", precision=Policy(precision))
                name = f"{engine} {precision or 'float32'}"
                impls[name] = xpseq_loop(be, step, float32_on(be, init32), context.optimizer,
                                         batches)
                state = impls[name].state
                first[name] = float(be.to_numpy(step(state["params"], state["opt"],
                                                     batches[0])[2]))
            diff = abs(first[f"{engine} bf16"] - first[f"{engine} float32"]) \
                / first[f"{engine} float32"]
            details["first_loss_diff"][f"{kind} {engine}"] = diff
            if not diff <= FIRST_LOSS_TOLERANCE:
                raise SystemExit(f"the bf16 {kind} step's loss on {engine} differs from "
                                 f"float32's by {100 * diff:.2f} % (> 1 %)")
        times = common.take_turns(impls, args.repeats)
        tokens = context.tokens(timed)
        tps = {n: tokens / statistics.median(t) for n, t in times.items()}
        details["tokens_per_s"][kind] = tps
        for engine in ("jax", "torch"):
            ratio = tps[f"{engine} bf16"] / tps[f"{engine} float32"]
            target, met = "—", None
            if kind == "transformer":
                target = ">= 3x with AMX" if amx else ">= 3x with AMX (none here)"
                met = ratio >= 3.0 if amx else None
            rows.append(Row("precision", f"xpseq-{engine} {kind} training, bf16 vs float32",
                            tps[f"{engine} bf16"], "tok/s", ratio, target, met,
                            f"float32 {tps[f'{engine} float32']:,.0f} tok/s; first loss "
                            f"differs by {100 * details['first_loss_diff'][f'{kind} {engine}']:.2f}"
                            f" %; {len(timed)} steps, {tokens} target tokens"))
    details["cpu_features"] = features
    context.record("precision", details)
    return rows
