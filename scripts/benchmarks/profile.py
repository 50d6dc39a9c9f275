"""``profile`` (only with ``--only profile``): where the time goes.

``torch.profiler`` over the ``train`` steps of xpseq-torch (autograd and hand-derived) and
native PyTorch, and over one batched beam search (the matrix products' share of the ATen
operators' self time, ATen calls per step, the largest other operators); JAX's jitted
gradient against its jitted loss, and native PyTorch's step against its forward pass, per
batch.

XLA's side (:func:`xla_profile`): both model kinds' jitted training steps on JAX, xpseq's
(autodiff and hand-derived) and the fastest JAX peer's of the ``peers`` section (Keras 3 for
the RNN, ``scripts/native_keras.py``; Flax for the Transformer), each over the batches its
section times, under ``jax.profiler.trace``; the executed thunks are summed by where they
ran: inside each ``while`` loop (the RNN's encoder directions and decoder, forward and
backward: six loops), and outside them by kind (matrix products, copies and transposes,
the rest). Per batch, with the compiled program's ``cost_analysis`` (its FLOPs and bytes,
a loop's body counted once) and instruction counts for the first batch.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from .. import _common as common

from . import train
from .context import Context
from .peers import keras_model, kinds, make_flax_step, warm
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
    train.timings(context)                     # warms every implementation up
    rows = []
    impls = {}
    for name, gradients in (("xpseq-torch", "autodiff"), (HAND, "hand-derived")):
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
    xla: dict = {}
    for kind in kinds(context):
        label = "RNN" if kind.name == "rnn" else "Transformer"
        xla[kind.name] = {}
        for name, (run, compiled) in xla_implementations(context, kind).items():
            p = xla[kind.name][name] = xla_profile(run, compiled, len(kind.timed))
            each = " + ".join(f"{ms:.1f}" for ms in p["loops_ms"])
            loops = f"loops in the order they run {each}; outside them " if each else ""
            rows.append(Row("profile", f"{name} {label} step under XLA: ms per batch",
                            p["total_ms"], "ms",
                            detail=f"{loops}products {p['products_ms']:.1f}, copies "
                                   f"{p['copies_ms']:.1f}, other {p['other_ms']:.1f}; "
                                   f"HLO {p['hlo_text']}"))
    context.record("profile", {"torch": profiles, "ms_per_batch": times, "beam": beam,
                               "xla": xla})
    return rows


def xla_implementations(context: Context, kind: Any) -> dict[str, tuple[Callable[[], None],
                                                                         Any]]:
    """A model kind's jitted training steps on JAX over its timed batches: xpseq-JAX
    (autodiff, and hand-derived) and the fastest JAX peer of the ``peers`` section (Keras 3
    for the RNN, Flax for the Transformer), each as ``(run one repeat, the compiled program
    of the first batch)``, compiled and warmed up."""
    from xpseq.train import make_train_step

    from .shared import native_loop, xpseq_loop

    be, batches = context.jax, kind.timed
    on_jax = [on_backend(be, b) for b in batches]
    out = {}
    for name, gradients in (("xpseq-jax", "autodiff"), (kind.hand_jax, "hand-derived")):
        step = make_train_step(kind.config, context.optimizer, be, clip_norm=None,
                               gradients=gradients)
        params = float32_on(be, kind.init32)
        run = xpseq_loop(be, step, params, context.optimizer, on_jax)
        compiled = step._fn.lower(params, context.optimizer.init(params), on_jax[0],
                                  0).compile()
        out[name] = (run, compiled)
    if kind.name == "rnn":
        from .. import native_keras as peer

        name, peer_step = "keras-jax", peer.make_step(keras_model(kind, kind.init32),
                                                      context.args.lr)
    else:
        from .. import native_flax as peer

        name, peer_step = "flax-jax", make_flax_step(kind, context.args.lr)
    peer_batches = [peer.batch_arrays(b) for b in batches]
    warm(peer_step, peer_batches)                          # compiles every shape
    out[name] = (native_loop(peer_step, peer_batches, warm_up=False),
                 peer_step.jitted.lower(peer_step.state, peer_batches[0]).compile())
    return out


#: Thunk names of XLA's CPU runtime that are matrix products (plain dots and the fusions
#: it hands to its YNNPACK, XNNPACK and oneDNN libraries, which are dots here).
PRODUCTS = ("dot", "ynn_fusion", "xnn_fusion", "onednn")


def xla_profile(run: Callable[[], None], compiled: Any, batches: int) -> dict:
    """A ``run()`` (compiled: one is run first) under ``jax.profiler.trace``: milliseconds
    per batch in each ``while`` loop (in the order they run) and, outside the loops, in
    matrix products, copies (and transposes) and everything else; and ``compiled``'s
    ``cost_analysis`` and instruction counts (``hlo_text``)."""
    import collections
    import glob
    import gzip
    import json
    import re
    import tempfile

    import jax

    run()                        # waits for its last step, and so for any queued before it
    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            run()
        (path,) = glob.glob(f"{folder}/**/perfetto_trace.json.gz", recursive=True)
        with gzip.open(path) as f:
            events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    loops = sorted((e for e in spans if e["name"].startswith("while")), key=lambda e: e["ts"])
    text = compiled.as_text()
    count = text.count(" while(")
    # Each batch shape has its own program, with its own loop names; every program runs
    # the same loops in the same order, so the k-th loop of each step is the same loop.
    per_loop: dict = collections.Counter()
    for i, e in enumerate(loops):
        per_loop[i % count if count and len(loops) % count == 0 else e["name"]] += e["dur"]
    windows = sorted((e["tid"], e["ts"], e["ts"] + e["dur"]) for e in loops)
    by_kind: dict = collections.Counter()
    for e in spans:
        name = e["name"]
        if name.startswith(("while", "$", "Thunk", "Pjit", "Common", "np.")) or any(
                tid == e["tid"] and start <= e["ts"] < end for tid, start, end in windows):
            continue
        kind = ("products" if any(k in name for k in PRODUCTS) else
                "copies" if "copy" in name or "transpose" in name else "other")
        by_kind[kind] += e["dur"]
    scale = 1e-3 / batches                                   # µs over the run -> ms/batch
    loops_ms = [v * scale for v in per_loop.values()]                # in execution order
    outside = {k: by_kind[k] * scale for k in ("products", "copies", "other")}
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    ops = collections.Counter(re.findall(r"= [^=]*? ([a-z][\w-]*)\(", text))
    hlo = {"mflop": cost.get("flops", 0) / 1e6, "mbytes": cost.get("bytes accessed", 0) / 1e6,
           "while": count, "dot": ops["dot"], "fusion": ops["fusion"],
           "copy_transpose": ops["copy"] + ops["transpose"]}
    hlo_text = (f"{hlo['mflop']:.0f} MFLOP, {hlo['mbytes']:.0f} MB, {hlo['while']} loops, "
                f"{hlo['dot']} dots, {hlo['fusion']} fusions, {hlo['copy_transpose']} "
                "copies/transposes")
    return {"total_ms": sum(loops_ms) + sum(outside.values()), "loops_ms": loops_ms,
            **{f"{k}_ms": v for k, v in outside.items()}, "hlo": hlo, "hlo_text": hlo_text}


def beam_profile(context: Context) -> dict:
    """:func:`torch_profile` of one batched beam search on PyTorch (warmed up first) of the
    ``beam`` section's sentences with the context's trained model."""
    from xpseq.search import SearchOptions
    from xpseq.search import CheckpointDecoder
    from xpseq.tasks import translate

    args = context.args
    sources = [s for s, _ in context.beam_pairs]
    options = SearchOptions(method="beam", k=args.beam_k, length_penalty=args.length_penalty,
                            attention=False)
    tparams = {k: context.torch.asarray(v) for k, v in context.trained["params"].items()}

    decoder = CheckpointDecoder(tparams, context.config, context.task.src_vocab,
                                context.task.tgt_vocab, context.torch)

    def search() -> None:
        translate(decoder, sources, options)
    search()
    return torch_profile(search, 1)
