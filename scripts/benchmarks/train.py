"""``train``: training throughput (target tokens per second) on the toy task.

Float32, Adam, no dropout, no clipping, the same bucketed batches and the same initial
parameters: xpseq on JAX (jitted step; with JAX's autodiff, and with the encoder's
recurrences differentiated by the hand-derived rules, ``gradients="hand-derived"``) and on
PyTorch (eager; with autograd, and with the hand-derived backward of ``xpseq.core.vjp``,
which records no tape) against ``scripts/native_torch.py``, the same model written in plain
PyTorch (packed ``nn.LSTM(bidirectional=True)``, ``nn.LSTMCell`` decoder loop,
``torch.optim.Adam``). Before timing, the native loss must equal ``xpseq.models.loss`` in
float64 to 1e-10. Targets: JAX (either way of differentiating) >= 1.3x native PyTorch,
torch with the hand-derived backward >= 1x. The rows give each implementation's CPU
seconds per wall second.

The timings are :func:`measure`'s, which the context makes once (``flops`` and ``profile``
use them too).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from .. import _common as common

from .context import Context
from .shared import (HAND, HAND_JAX, KEYS, Row, at_least, float32_on, native_loop,
                     on_backend, to_torch, xpseq_loop)


def check_native_loss(context: Context) -> tuple[float, float]:
    """|native − xpseq| loss in float64 on the first timed batch, and one Adam step's
    largest parameter difference (native torch.optim.Adam vs xpseq-torch)."""
    import torch

    from xpseq.models.rnn import loss
    from xpseq.train import make_train_step

    native = context.native
    batch = context.timed[0]
    model = native.NativeSeq2Seq.from_xpseq(context.init64, context.config, torch.float64)
    reference = float(loss(context.init64, context.config, {k: batch[k] for k in KEYS}))
    loss_diff = abs(float(model.loss(to_torch(batch)).detach()) - reference)
    # One step each from the same float64 parameters.
    native.make_native_step(model, context.args.lr)(to_torch(batch))
    be = context.torch
    params = {k: be.asarray(v) for k, v in context.init64.items()}
    step = make_train_step(context.config, context.optimizer, be, clip_norm=None)
    params, _, _ = step(params, context.optimizer.init(params), on_backend(be, batch))
    step_diff = max(float((p.detach() - params[name]).abs().max())
                    for name, p in model.xpseq_parameters().items())
    return loss_diff, step_diff


def timings(context: Context) -> dict:
    """:func:`measure`, made once per run and kept on the context (``train_timings``)."""
    if context.train_timings is None:
        context.train_timings = measure(context)
    return context.train_timings


def measure(context: Context) -> dict:
    """Seconds per repeat of ``--steps`` steps for xpseq-JAX, xpseq-torch (each both ways
    of differentiating) and native PyTorch, with the derived rates; ask for it with
    :func:`timings` (made once)."""
    native = context.native
    args = context.args
    loss_diff, step_diff = check_native_loss(context)
    if not loss_diff <= 1e-10:
        raise SystemExit(f"the native model's float64 loss differs from xpseq's by "
                         f"{loss_diff:.3g} (> 1e-10): it is not the same model")
    impls: dict[str, Callable[[], Any]] = {}
    first_losses: dict[str, float] = {}
    for name, be, step in (("xpseq-jax", context.jax, context.jax_step()),
                           (HAND_JAX, context.jax, context.jax_step("hand-derived")),
                           ("xpseq-torch", context.torch, context.torch_step()),
                           (HAND, context.torch, context.torch_step("hand-derived"))):
        batches = [on_backend(be, b) for b in context.timed]
        impls[name] = xpseq_loop(be, step, float32_on(be, context.init32),
                                 context.optimizer, batches)
        state = impls[name].state
        first_losses[name] = float(be.to_numpy(step(state["params"], state["opt"],
                                                    batches[0])[2]))
    import torch

    model = native.NativeSeq2Seq.from_xpseq(context.init32, context.config, torch.float32)
    native_step = native.make_native_step(model, args.lr)
    torch_batches = [to_torch(b) for b in context.timed]
    with torch.no_grad():
        first_losses["native-torch"] = float(model.loss(torch_batches[0]))
    impls["native-torch"] = native_loop(native_step, torch_batches)
    cpu: dict[str, list[float]] = {}
    times = common.take_turns(impls, args.repeats, cpu)
    tokens = context.tokens(context.timed)
    return {
        "times": times, "tokens": tokens, "loss_diff": loss_diff, "step_diff": step_diff,
        "cores_used": {n: sum(cpu[n]) / sum(t) for n, t in times.items()},
        "first_losses": first_losses,
        "tokens_per_s": {n: tokens / statistics.median(t) for n, t in times.items()},
        "seconds_per_step": {n: statistics.median(t) / len(context.timed)
                             for n, t in times.items()},
    }


def run(context: Context) -> list[Row]:
    """The native loss check and each implementation's throughput against native."""
    r = timings(context)
    tps = r["tokens_per_s"]
    native = tps["native-torch"]
    spread = {n: f"fastest/slowest repeat {min(t) / max(t):.2f}, CPU/wall "
                 f"{r['cores_used'][n]:.2f}" for n, t in r["times"].items()}
    detail = f"{context.args.steps} steps, {r['tokens']} target tokens per repeat; {{}}"
    rows = [Row("train", "native loss check (float64, |native − xpseq.models.loss|)",
                r["loss_diff"], "", None, "<= 1e-10", r["loss_diff"] <= 1e-10,
                f"one Adam step: largest parameter difference {r['step_diff']:.1e}"),
            Row("train", "native PyTorch throughput", native, "tok/s",
                detail=detail.format(spread["native-torch"]))]
    for name, bound in (("xpseq-jax", 1.3), (HAND_JAX, 1.3), ("xpseq-torch", None),
                        (HAND, 1.0)):
        target, met = ("—", None) if bound is None else at_least(tps[name] / native, bound)
        rows.append(Row("train", f"{name} throughput vs native", tps[name], "tok/s",
                        tps[name] / native, target, met, detail.format(spread[name])))
    return rows
