"""``profile`` (only with ``--only profile``): where the time goes.

``torch.profiler`` over the ``train`` steps of xpseq-torch (autograd and hand-derived) and
native PyTorch, and over one batched beam search (the matrix products' share of the ATen
operators' self time, ATen calls per step, the largest other operators); JAX's jitted
gradient against its jitted loss, and native PyTorch's step against its forward pass, per
batch.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import _common as common

from .context import Context
from .shared import HAND, Row, float32_on, on_backend, to_torch

#: The ATen operators that are matrix products (self time; the rest is element-wise work,
#: copies, reductions and the per-call overhead of an eager library).
MATMULS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm",
           "aten::mv", "aten::addmv", "aten::dot")


def torch_profile(fn: Callable[[], Any], calls: int) -> dict:
    """``fn`` once under ``torch.profiler``: the matrix products' share of the ATen
    operators' self CPU time, the ATen calls (nested ones included) per call of the
    profiled unit (``calls`` of them in ``fn``) and the largest other operators' shares."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
    others = sorted((e for e in events if e.key not in MATMULS),
                    key=lambda e: -e.self_cpu_time_total)[:4]
    return {"matmul_share": matmul / total,
            "aten_calls_per_call": sum(e.count for e in events) / calls,
            "top_others": [(e.key[6:], e.self_cpu_time_total / total) for e in others]}


def run(context: Context) -> list[Row]:
    """Where the time goes: torch.profiler over the eager training steps and the batched
    beam search, and JAX's gradient against its forward pass (jitted, same batches)."""
    import jax
    import torch

    from xpseq.models.rnn import loss as xpseq_loss

    args = context.args
    context.train_timings                      # warms every implementation up
    rows = []
    impls = {}
    for name, gradients in (("xpseq-torch", None), (HAND, "hand-derived")):
        be, step = context.torch, context.torch_step(gradients)
        state = {"params": float32_on(be, context.init32)}
        state["opt"] = context.optimizer.init(state["params"])
        batches = [on_backend(be, b) for b in context.timed]

        def run(step: Any = step, state: dict = state, batches: list = batches) -> None:
            for b in batches:
                state["params"], state["opt"], _ = step(state["params"], state["opt"], b)
        impls[name] = run
    model = context.native.NativeSeq2Seq.from_xpseq(context.init32, context.config,
                                                    torch.float32)
    native_step = context.native.make_native_step(model, args.lr)
    torch_batches = [to_torch(b) for b in context.timed]

    def run_native() -> None:
        for b in torch_batches:
            native_step(b)
    impls["native-torch"] = run_native
    profiles = {}
    for name, fn in impls.items():
        fn()
        p = profiles[name] = torch_profile(fn, len(context.timed))
        others = ", ".join(f"{k} {100 * v:.0f} %" for k, v in p["top_others"])
        rows.append(Row("profile", f"{name} step: matrix products' share of ATen time",
                        100 * p["matmul_share"], "%",
                        detail=f"{p['aten_calls_per_call']:,.0f} ATen calls per step; then "
                               f"{others}"))
    # JAX: the jitted loss against its jitted gradient; native's forward against its step.
    be = context.jax
    params = float32_on(be, context.init32)
    batches = [on_backend(be, b) for b in context.timed]

    def loss_of(p: dict, b: dict) -> Any:
        return xpseq_loss(p, context.config, b, scan=be.scan)
    forward, gradient = jax.jit(loss_of), jax.jit(jax.value_and_grad(loss_of))

    def run_jax(fn: Any) -> Callable[[], None]:
        def run() -> None:
            jax.block_until_ready([fn(params, b) for b in batches])
        return run

    def native_forward() -> None:
        with torch.no_grad():
            for b in torch_batches:
                model.loss(b)
    fns = {"jax forward": run_jax(forward), "jax gradient": run_jax(gradient),
           "native forward": native_forward, "native step": run_native}
    for fn in fns.values():                  # compile every shape, warm up
        fn()
    times = {n: statistics.median(t) / len(context.timed) * 1e3
             for n, t in common.take_turns(fns, args.repeats).items()}
    rows.append(Row("profile", "xpseq-jax gradient (jitted value_and_grad) vs its forward",
                    times["jax gradient"], "ms", times["jax gradient"] / times["jax forward"],
                    detail=f"forward {times['jax forward']:.2f} ms per batch; ratio = "
                           "gradient / forward"))
    rows.append(Row("profile", "native-torch step (forward, backward, Adam) vs its forward",
                    times["native step"], "ms", times["native step"] / times["native forward"],
                    detail=f"forward {times['native forward']:.2f} ms per batch; ratio = "
                           "step / forward"))
    beam = beam_profile(context)
    rows.append(Row("profile", "xpseq-torch batched beam: matrix products' share",
                    100 * beam["matmul_share"], "%",
                    detail=f"{len(context.beam_pairs)} sentences, "
                           f"{beam['aten_calls_per_call']:,.0f} ATen calls; then "
                           + ", ".join(f"{k} {100 * v:.0f} %" for k, v in beam["top_others"])))
    context.record("profile", {"torch": profiles, "ms_per_batch": times, "beam": beam})
    return rows


def beam_profile(context: Context) -> dict:
    """:func:`torch_profile` of one batched beam search on PyTorch (warmed up first) of the
    ``beam`` section's sentences with the context's trained model."""
    from xpseq.search import SearchOptions
    from xpseq.tasks import translate

    args = context.args
    sources = [s for s, _ in context.beam_pairs]
    options = SearchOptions(method="beam", k=args.beam_k, length_penalty=args.length_penalty,
                            attention=False)
    tparams = {k: context.torch.asarray(v) for k, v in context.trained["params"].items()}

    def search() -> None:
        translate(tparams, context.config, sources, context.task.src_vocab,
                  context.task.tgt_vocab, context.torch, options)
    search()
    return torch_profile(search, 1)
