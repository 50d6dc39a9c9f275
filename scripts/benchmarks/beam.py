"""``beam``: batched beam search against a per-sentence loop.

Beam search (k = ``--beam-k``, length penalty ``--length-penalty``) of
``--beam-sentences`` test sentences with a model trained ``--beam-train-steps`` steps (the
context's trained parameters): xpseq's batched search (``xpseq.tasks.translate``) on
PyTorch and on JAX against the per-sentence beam loop of ``native_torch.beam_search_one``
(one decoder call per hypothesis), in sentences per second, and the number of sentences
whose translations differ. Target: torch batched >= 30x the loop, 0 differing sentences.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from .. import _common as common

from .context import Context
from .shared import Row, at_least


def run(context: Context) -> list[Row]:
    """Sentences per second of the loop and of xpseq's batched search on each library,
    and how many translations differ from the loop's."""
    import torch

    from xpseq.search import SearchOptions
    from xpseq.search import CheckpointDecoder
    from xpseq.tasks import translate
    from xpseq.tasks.metrics import exact_match

    args, task = context.args, context.task
    trained = context.trained
    params = trained["params"]
    pairs = context.beam_pairs
    sources = [s for s, _ in pairs]
    # Translations only, as the loop gives: no attention weights kept per hypothesis.
    options = SearchOptions(method="beam", k=args.beam_k, length_penalty=args.length_penalty,
                            attention=False)
    model = context.native.NativeSeq2Seq.from_xpseq(params, context.config, torch.float32)
    src_ids = [task.src_vocab.encode(s, add_eos=True) for s in sources]
    outputs: dict[str, list] = {}
    on = {"xpseq-torch": (context.torch, {k: context.torch.asarray(v)
                                          for k, v in params.items()}),
          "xpseq-jax": (context.jax, {k: context.jax.asarray(v) for k, v in params.items()})}

    def batched(name: str) -> Callable[[], None]:
        be, p = on[name]
        decoder = CheckpointDecoder(p, context.config, task.src_vocab, task.tgt_vocab, be)

        def run() -> None:
            outputs[name] = translate(decoder, sources, options)
        return run

    def loop() -> None:
        outputs["loop"] = [context.native.beam_search_one(
            model, ids, k=args.beam_k, length_penalty=args.length_penalty) for ids in src_ids]

    fns = {"loop": loop, "xpseq-torch": batched("xpseq-torch"),
           "xpseq-jax": batched("xpseq-jax")}
    start = time.perf_counter()
    fns["xpseq-jax"]()                                 # compile the jitted searches
    jax_first = time.perf_counter() - start
    fns["xpseq-torch"]()
    times = common.take_turns(fns, args.repeats)
    rate = {n: len(sources) / statistics.median(t) for n, t in times.items()}
    differ = {n: [i for i, (o, ref) in enumerate(zip(outputs[n], outputs["loop"]))
                  if list(o["ids"]) != list(ref["ids"])] for n in ("xpseq-torch", "xpseq-jax")}
    score_gap = max(abs(o["score"] - ref["score"]) for o, ref in
                    zip(outputs["xpseq-torch"], outputs["loop"]))
    exact = exact_match([task.tgt_vocab.decode(o["ids"]) for o in outputs["loop"]],
                        [t for _, t in pairs])
    context.record("beam", {"differ": differ, "score_gap_torch": score_gap,
                            "exact_match": exact, "jax_first_call_s": jax_first,
                            "train_loss": trained["loss"]})
    setting = (f"k={args.beam_k}, {args.length_penalty} penalty, {len(sources)} sentences, "
               f"model after {args.beam_train_steps} steps (exact match {100 * exact:.0f}%)")
    t_target, t_met = at_least(rate["xpseq-torch"] / rate["loop"], 30)
    return [
        Row("beam", "per-sentence beam loop (native PyTorch)", rate["loop"], "sent/s",
            detail=setting),
        Row("beam", "xpseq-torch batched beam vs loop", rate["xpseq-torch"], "sent/s",
            rate["xpseq-torch"] / rate["loop"], t_target, t_met),
        Row("beam", "xpseq-jax batched beam vs loop", rate["xpseq-jax"], "sent/s",
            rate["xpseq-jax"] / rate["loop"],
            detail=f"jitted; first call with compilation {jax_first:.1f} s"),
        Row("beam", "sentences differing, xpseq-torch vs loop", len(differ["xpseq-torch"]),
            "", None, "0", not differ["xpseq-torch"],
            f"largest score difference {score_gap:.1e}"),
        Row("beam", "sentences differing, xpseq-jax vs loop", len(differ["xpseq-jax"]), "",
            detail="float32 on another library: a near-tie may break differently"),
    ]
