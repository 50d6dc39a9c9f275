"""``transformer`` (only with ``--only transformer``): the Transformer's training and search.

The Transformer (``xpseq.models.get("transformer")``, pre-LN, ReLU, label smoothing 0.1)
at the ``--transformer`` sizes (default d_model 256, 4 heads, 3 + 3 layers, d_ff 1024,
batches of up to 3,000 target tokens), float32, Adam, no dropout: training throughput of
xpseq on JAX (jitted; JAX's autodiff, and the hand-derived backward pass traced whole,
``gradients="hand-derived"``) and on PyTorch (autograd, and hand-derived) against
``scripts/native_torch.NativeTransformer`` (``nn.Transformer(batch_first=True)`` with the
same embeddings, positions and output layer, ``torch.optim.Adam``, eager), whose float64
loss must equal xpseq's to 1e-10 first. Targets: JAX >= 1.5x, torch >= 0.9x. The step's
GFLOP/s (FLOPs counted below) as a fraction of the fastest float32 ``--matmul`` matmul
measured here (torch, NumPy or jitted JAX). Target: >= 50 % for xpseq-JAX. Then, with a
model trained ``--transformer-train-steps`` steps: batched beam search (k = ``--beam-k``,
the key/value cache) of ``--transformer-sentences`` test sentences against the same search
called one sentence at a time, on PyTorch (target >= 10x, identical outputs), and batched
greedy search in output tokens per second.

The Transformer's step (d = d_model, f = d_ff, the other letters as in ``flops``; the
attention's score and weighted-sum products count 2·B·Tq·Tk·d each)::

    encoder    layers · (4 · 2·B·S·d·d + 2 · 2·B·S·S·d + 2 · 2·B·S·d·f)
    decoder    layers · (4 · 2·B·T·d·d + 2 · 2·B·T·T·d          causal self-attention
                         + 2 · 2·B·T·d·d + 2 · 2·B·S·d·d          cross: q, o; k, v
                         + 2 · 2·B·T·S·d + 2 · 2·B·T·d·f)         cross scores, feed-forward
    output     2·B·T·d·V
    step       3 · forward
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import numpy as np

from .. import _common as common

from .context import Context, TransformerSetup
from .shared import (HAND_T, HAND_T_TORCH, KEYS, Row, at_least, matmul_gflops, native_loop,
                     on_backend, to_torch, xpseq_loop)


def step_flops(config: Any, batch: int, src: int, tgt: int) -> int:
    """FLOPs of one Transformer training step on a padded (batch, src) -> (batch, tgt)
    batch (see the module docstring)."""
    B, S, T, d, f = batch, src, tgt, config.d_model, config.d_ff
    encoder = config.encoder_layers * (4 * 2 * B * S * d * d + 2 * 2 * B * S * S * d
                                       + 2 * 2 * B * S * d * f)
    decoder = config.decoder_layers * (
        4 * 2 * B * T * d * d + 2 * 2 * B * T * T * d              # causal self-attention
        + 2 * 2 * B * T * d * d + 2 * 2 * B * S * d * d            # cross: q, o; k, v
        + 2 * 2 * B * T * S * d + 2 * 2 * B * T * d * f)           # cross scores; FF
    output = 2 * B * T * d * config.tgt_vocab
    return 3 * (encoder + decoder + output)


def train_model(context: Context, setup: TransformerSetup, steps: int) -> dict:
    """NumPy float32 parameters after ``steps`` xpseq-JAX steps (hand-derived backward,
    the fastest measured here) over shuffled epochs, and the last loss."""
    from xpseq.core.optim import adam
    from xpseq.train import make_train_step

    be, optimizer = context.jax, adam(context.args.lr)
    step = make_train_step(setup.config, optimizer, be, gradients="hand-derived")
    params = {k: be.asarray(v) for k, v in setup.init32.items()}
    opt_state = optimizer.init(params)
    rng = np.random.default_rng([context.args.seed, 3])
    order: list[int] = []
    loss = None
    for _ in range(steps):
        if not order:
            order = list(rng.permutation(len(setup.epoch)))
        params, opt_state, loss = step(params, opt_state,
                                       on_backend(be, setup.epoch[order.pop()]))
    return {"params": {k: be.to_numpy(v) for k, v in params.items()},
            "loss": None if loss is None else float(be.to_numpy(loss))}


def run(context: Context) -> list[Row]:
    """Training throughput against native PyTorch, the step's GFLOP/s, batched beam search
    against a per-sentence loop, and greedy tokens/s."""
    import torch

    from xpseq.core.optim import adam
    from xpseq.train import make_train_step

    args = context.args
    d, heads, layers, d_ff, max_tokens = args.transformer_sizes
    # Measured first, before JAX has compiled anything else in this section.
    peak = matmul_gflops(args.matmul, args.repeats)
    setup = context.transformer
    kind, config, timed = setup.kind, setup.config, setup.timed
    native = context.native.NativeTransformer.from_xpseq(setup.init64, config, torch.float64)
    reference = float(kind.loss(setup.init64, config, {k: timed[0][k] for k in KEYS}))
    loss_diff = abs(float(native.loss(to_torch(timed[0])).detach()) - reference)
    if not loss_diff <= 1e-10:
        raise SystemExit(f"the native Transformer's float64 loss differs from xpseq's by "
                         f"{loss_diff:.3g}: it is not the same model")
    optimizer = adam(args.lr)
    impls: dict[str, Callable[[], Any]] = {}
    for name, be, gradients in (("xpseq-jax", context.jax, "autodiff"),
                                (HAND_T, context.jax, "hand-derived"),
                                ("xpseq-torch", context.torch, "autodiff"),
                                (HAND_T_TORCH, context.torch, "hand-derived")):
        step = make_train_step(config, optimizer, be, clip_norm=None, gradients=gradients)
        impls[name] = xpseq_loop(be, step, {k: be.asarray(v) for k, v in setup.init32.items()},
                                 optimizer, [on_backend(be, b) for b in timed])
    model = context.native.NativeTransformer.from_xpseq(setup.init32, config, torch.float32)
    impls["native-torch"] = native_loop(context.native.make_native_step(model, args.lr),
                                        [to_torch(b) for b in timed])
    times = common.take_turns(impls, args.repeats)
    tokens = context.tokens(timed)
    tps = {n: tokens / statistics.median(t) for n, t in times.items()}
    sizes = (f"d_model {d}, {heads} heads, {layers} + {layers} layers, d_ff {d_ff}, "
             f"{len(timed)} batches of up to {max_tokens} tokens ({tokens} target tokens)")
    rows = [Row("transformer", "native loss check (float64, |native − xpseq|)", loss_diff, "",
                None, "<= 1e-10", loss_diff <= 1e-10, "nn.Transformer loaded with xpseq's "
                "parameters, label smoothing 0.1"),
            Row("transformer", "native PyTorch throughput", tps["native-torch"], "tok/s",
                detail=sizes)]
    for name, bound in (("xpseq-jax", 1.5), (HAND_T, 1.5), ("xpseq-torch", 0.9),
                        (HAND_T_TORCH, 0.9)):
        target, met = at_least(tps[name] / tps["native-torch"], bound)
        rows.append(Row("transformer", f"{name} vs native torch", tps[name], "tok/s",
                        tps[name] / tps["native-torch"], target, met, sizes))

    # The step's achieved GFLOP/s against the fastest float32 matmul measured here.
    flops = sum(step_flops(config, b["src"].shape[0], b["src"].shape[1],
                           b["tgt_in"].shape[1]) for b in timed)
    best_engine = max(peak, key=peak.get)
    rows.append(Row("transformer", f"float32 matmul {args.matmul}×{args.matmul}, fastest "
                    f"engine ({best_engine})", peak[best_engine], "GFLOP/s",
                    detail=", ".join(f"{k} {v:.1f}" for k, v in peak.items())))
    achieved = {n: flops / statistics.median(t) / 1e9 for n, t in times.items()}
    for name in ("xpseq-jax", HAND_T, "native-torch"):
        fraction = achieved[name] / peak[best_engine]
        target, met = ("—", None) if name == "native-torch" else at_least(fraction, 0.5)
        rows.append(Row("transformer", f"{name} training step", achieved[name], "GFLOP/s",
                        fraction, target, met, f"ratio = fraction of the {best_engine} matmul "
                        f"rate; {flops / len(timed) / 1e9:.2f} GFLOP per step"))
    trained = train_model(context, setup, args.transformer_train_steps)
    rows += search_rows(context, config, trained)
    context.record("transformer", {"tokens_per_s": tps, "gflops": achieved,
                                   "matmul_gflops": peak, "step_flops_total": flops,
                                   "train_loss": trained["loss"]})
    return rows


def search_rows(context: Context, config: Any, trained: dict) -> list[Row]:
    """Batched beam search (k = ``--beam-k``, the key/value cache) of
    ``--transformer-sentences`` test sentences against the same search called one sentence
    at a time, on PyTorch; the outputs must be identical. Then batched greedy search, in
    output tokens per second."""
    from xpseq.search import SearchOptions
    from xpseq.search import CheckpointDecoder
    from xpseq.tasks import translate
    from xpseq.tasks.metrics import exact_match

    args, task = context.args, context.task
    pairs = context.beam_pairs[:args.transformer_sentences]
    sources = [s for s, _ in pairs]
    beam = SearchOptions(method="beam", k=args.beam_k, length_penalty=args.length_penalty,
                         attention=False)
    greedy = SearchOptions(method="greedy", attention=False)
    on = {name: (be, {k: be.asarray(v) for k, v in trained["params"].items()})
          for name, be in (("torch", context.torch), ("jax", context.jax))}
    outputs: dict[str, list] = {}

    def decode(key: str, name: str, options: SearchOptions, batch_size: int) -> Callable:
        be, params = on[name]
        decoder = CheckpointDecoder(params, config, task.src_vocab, task.tgt_vocab, be)

        def run() -> None:
            outputs[key] = translate(decoder, sources, options, batch_size=batch_size)
        return run

    fns = {"loop": decode("loop", "torch", beam, 1),
           "torch beam": decode("torch beam", "torch", beam, 256),
           "jax beam": decode("jax beam", "jax", beam, 256),
           "torch greedy": decode("torch greedy", "torch", greedy, 256),
           "jax greedy": decode("jax greedy", "jax", greedy, 256)}
    for name in fns:                                   # compile (JAX) and warm up
        if name != "loop":
            fns[name]()
    times = common.take_turns(fns, args.repeats)
    rate = {n: len(sources) / statistics.median(t) for n, t in times.items()}
    differ = {n: sum(list(o["ids"]) != list(ref["ids"])
                     for o, ref in zip(outputs[n], outputs["loop"]))
              for n in ("torch beam", "jax beam")}
    exact = exact_match([task.tgt_vocab.decode(o["ids"]) for o in outputs["loop"]],
                        [t for _, t in pairs])
    loss = "untrained" if trained["loss"] is None else f"loss {trained['loss']:.3f}"
    setting = (f"k={args.beam_k}, {args.length_penalty} penalty, {len(sources)} sentences; "
               f"model after {args.transformer_train_steps} steps ({loss}, exact match "
               f"{100 * exact:.0f}%)")
    target, met = at_least(rate["torch beam"] / rate["loop"], 10)
    rows = [Row("transformer", "per-sentence beam loop (xpseq-torch, one sentence a call)",
                rate["loop"], "sent/s", detail=setting),
            Row("transformer", "xpseq-torch batched beam vs per-sentence loop",
                rate["torch beam"], "sent/s", rate["torch beam"] / rate["loop"], target, met,
                "key/value cache, batches of up to 256 sentences"),
            Row("transformer", "xpseq-jax batched beam vs per-sentence loop",
                rate["jax beam"], "sent/s", rate["jax beam"] / rate["loop"],
                detail="jitted; the loop is xpseq-torch's"),
            Row("transformer", "sentences differing, batched beam vs loop (torch)",
                differ["torch beam"], "", None, "0", differ["torch beam"] == 0),
            Row("transformer", "sentences differing, batched beam vs loop (jax)",
                differ["jax beam"], "",
                detail="float32 on another library: a near-tie may break differently")]
    for name in ("torch greedy", "jax greedy"):
        generated = sum(len(o["ids"]) + 1 for o in outputs[name])      # words and </s>
        rows.append(Row("transformer", f"xpseq-{name.split()[0]} batched greedy",
                        generated / statistics.median(times[name]), "tok/s",
                        detail=f"{len(sources)} sentences, {generated} output tokens"))
    return rows
