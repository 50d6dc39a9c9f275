"""``xpseq demo``: the attention experiment end to end (what ``make demo`` runs).

1. Trains the attention model (Luong "general" attention with input feeding, the
   multiplicative ``sᵀ W m``), the plain seq2seq baseline (no attention; the decoder
   starts from the encoder's final states) and a small Transformer on the toy
   English -> Zhoric task.
2. Prints BLEU and exact match by the number of prepositional phrases, 0-4; 4 is longer
   than anything in training.
3. Compares greedy search with beam search (k = 1, 3, 5), with the time each took.
4. Draws one attention heatmap in the terminal and as a PNG, and the loss curves.
5. Shows, for one sentence, what the decoder reads under teacher forcing (the gold prefix
   shifted right) beside what it reads when it decodes on its own (its own predictions).
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import numpy as np

from xpseq.backends import Backend
from xpseq.io.progress import still
from xpseq.tasks.experiment import TOY_MODEL_DEFAULTS, TRAINING_DEFAULTS

# The demo's two sizes. "model" (with the batches' "bucket") and "transformer" are the model
# options the demo sets beyond the toy task's (xpseq.tasks.experiment.TOY_MODEL_DEFAULTS): none
# at full size, where the models have their kinds' default sizes (Seq2SeqConfig,
# TransformerConfig). The step sizes are xpseq.tasks.experiment.TRAINING_DEFAULTS'; each
# model trains for at most "epochs" epochs (the same for all three, so that their curves
# compare), the Transformer after "warmup" steps of warm-up. "shapes" bounds the distinct
# batch shapes of the training and dev batches (xpseq.data.make_batches): on JAX each shape
# is a compilation of 3-15 s. Measured on 2 cores, 3 training shapes instead of 5 cost 4%
# more padded positions and saved 15-20% of each model's training time (2 shapes: the
# same time, more padding). Each search of the table pads its batches to one shape
# (SEARCH_SHAPES); the timed comparison of searches does not, so that its times are those
# of the sentences alone.
FULL: dict[str, Any] = {"data": {"n_train": 12000, "n_dev": 500, "n_test_per_bucket": 300},
        "model": {"bucket": 8}, "epochs": 5, "beam_sentences": 300, "transformer": {},
        "warmup": TRAINING_DEFAULTS["transformer"]["warmup"], "shapes": 3}
# Quick: one padded batch shape, so JAX compiles the training step once per model.
QUICK: dict[str, Any] = {"data": {"n_train": 1500, "n_dev": 100, "n_test_per_bucket": 40},
         "model": {"embed": 16, "hidden": 32, "bucket": 8}, "epochs": 1, "beam_sentences": 40,
         "transformer": {"d_model": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 1,
                         "d_ff": 64}, "warmup": 20, "shapes": 1}
SEARCH_SHAPES = 1


def _title(text: str) -> None:
    print(f"\n{'=' * 78}\n  {text}\n{'=' * 78}")


def run_demo(backend: Backend, *, quick: bool = False, out: pathlib.Path = pathlib.Path("out"),
             dtype: str = "float32", seed: int = 0, progress: bool = True) -> int:
    from xpseq.search import CheckpointDecoder
    from xpseq.tasks import (
        attention_labels,
        bucket_table,
        decoder_inputs,
        model_config,
        timed_search_comparison,
        toy_task,
        train_model,
        translate,
    )
    from xpseq.tasks.experiment import training_config
    from xpseq.tasks.metrics import format_table

    from .plots import ascii_heatmap, save_heatmap, save_loss_curves

    started = time.perf_counter()
    setup = QUICK if quick else FULL
    task = toy_task(**setup["data"], seed=seed)
    src, tgt = task.test[2][0]
    print(f"xpseq demo{' --quick' if quick else ''}: backend {backend.name}, {dtype}, seed {seed}"
          + (", torch with 1 thread" if backend.name == "torch" else ""))
    print(f"toy task: {len(task.train)} training pairs (0-3 phrases), {len(task.dev)} dev, "
          f"{sum(len(v) for v in task.test.values())} test in buckets 0-4; vocabularies "
          f"{len(task.src_vocab)} English / {len(task.tgt_vocab)} Zhoric")
    print(f"  English: {' '.join(src)}\n  Zhoric:  {' '.join(tgt)}")

    models, histories, saved = {}, {}, []
    rnn = {**TOY_MODEL_DEFAULTS["rnn"], **setup["model"]}
    bucket = rnn.pop("bucket")
    shapes = setup.get("shapes")
    transformer = {**TOY_MODEL_DEFAULTS["transformer"], **setup["transformer"]}
    recipes = {
        "attention": ("rnn", model_config(task, **dict(rnn, attention="general"))),
        "seq2seq": ("rnn", model_config(task, **dict(rnn, attention="none"))),
        "transformer": ("transformer", model_config(task, "transformer", **transformer))}
    for name, (kind, config) in recipes.items():
        _title(f"training the {name} model ({setup['epochs']} "
               f"{'epoch' if setup['epochs'] == 1 else 'epochs'} at most)")
        t0 = time.perf_counter()
        settings = training_config(kind, epochs=setup["epochs"],
                                   warmup=setup["warmup"] if kind == "transformer" else None,
                                   seed=seed, progress=progress)
        path = pathlib.Path(out) / f"{name}.safetensors"
        config, result = train_model(task, backend, config, settings, bucket=bucket,
                                     shapes=shapes,
                                     dtype=dtype, checkpoint=str(path),
                                     metadata={"task": "toy", "data": dict(setup["data"],
                                                                           seed=seed)})
        saved.append(str(path))
        models[name] = ({k: backend.asarray(v) for k, v in result.params.items()}, config)
        histories[name] = result.history
        for h in result.history if not progress else ():   # (fit printed them already)
            traces = "" if h["traces"] is None else f", {h['traces']} traces"
            print(f"  epoch {h['epoch']}: train loss {h['train_loss']:.4f}, dev loss "
                  f"{h['dev_loss']:.4f} ({h['seconds']:.1f} s{traces})")
        print(f"  {time.perf_counter() - t0:.1f} s in all")

    _title("by source length: phrases 0-3 as in training, 4 longer than any training sentence")
    order = {name: CheckpointDecoder(*models[name], task.src_vocab, task.tgt_vocab, backend)
             for name in ("seq2seq", "attention", "transformer")}
    whole_program = backend.search_plan().whole_program
    compiled = " (each search compiled on its first use)" if whole_program else ""
    with still(f"decoding the {sum(map(len, task.test.values()))} test sentences "
               f"with each model{compiled}", enabled=progress):
        headers, rows, details = bucket_table(order, task, shapes=SEARCH_SHAPES)
    print(format_table(headers, rows))
    print(f"BLEU: sacrebleu, signature {details['attention'][0]['signature']}")
    print("\nAt 4 phrases (longer than anything seen in training):")
    for name in order:
        d = details[name][4]
        i = int(np.argmax([len(h) != len(r) for h, (_, r) in zip(d["hypotheses"], task.test[4])]))
        diff = d["length_diff"]
        print(f"  {name}: outputs are {abs(diff):.1f} words {'longer' if diff > 0 else 'shorter'}"
              f" than the reference on average; for example")
        print(f"    reference: {' '.join(task.test[4][i][1])}")
        print(f"    output:    {' '.join(d['hypotheses'][i])}")

    n = setup["beam_sentences"]
    mixed = [pair for bucket in task.test.values() for pair in bucket]
    subset = [mixed[i] for i in np.random.default_rng(seed).permutation(len(mixed))[:n]]
    _title(f"greedy vs beam search, attention model, {len(subset)} test sentences (all buckets)")
    params, config = models["attention"]
    rows = []
    with still(f"decoding {len(subset)} sentences by greedy and beam search, each "
               f"twice{compiled}", enabled=progress):
        compared = timed_search_comparison(params, config, subset, task, backend)
    for r in compared:
        rows.append([r["search"], r["bleu"], f"{100 * r['exact']:.1f}%",
                     f"{r['seconds']:.2f} s"])
    print(format_table(["search", "BLEU", "exact", "time"], rows))
    after = ", after JAX compiled" if whole_program else ""
    print("(beam search ranks hypotheses by mean log-probability per token; times are for a "
          f"second run{after})")

    _title("attention heatmap: rows are generated Zhoric words, columns the English source")
    src, ref = task.test[3][0]
    [example] = translate(CheckpointDecoder(params, config, task.src_vocab, task.tgt_vocab,
                                            backend), [src])
    source, output = attention_labels(src, example, task.src_vocab)
    print(f"  English:   {' '.join(src)}\n  reference: {' '.join(ref)}\n"
          f"  output:    {' '.join(example['tokens'])}\n")
    print(ascii_heatmap(example["attention"], source, output))
    focus = [f"{w}->{source[int(np.argmax(row))]}" for w, row in zip(output, example["attention"])]
    print("\n  the source word each output word attends to most: " + ", ".join(focus))

    _title("teacher forcing vs autoregressive decoding (seq2seq model, one long sentence)")
    s2s_params, s2s_config = models["seq2seq"]
    s2s_out = translate(CheckpointDecoder(s2s_params, s2s_config, task.src_vocab,
                                          task.tgt_vocab, backend),
                        [s for s, _ in task.test[3]], shapes=SEARCH_SHAPES)
    wrong = [i for i, (o, (_, r)) in enumerate(zip(s2s_out, task.test[3])) if o["tokens"] != r]
    pair = task.test[3][wrong[0] if wrong else 0]
    print(f"  English:   {' '.join(pair[0])}\n  reference: {' '.join(pair[1])}\n")
    table = decoder_inputs(s2s_params, s2s_config, pair, task, backend)
    print(format_table(["teacher-forced input", "predicts", "autoregressive input", "predicts"],
                       [list(r) for r in table]))
    print("  Under teacher forcing the decoder always reads the gold prefix, so one mistake does "
          "not\n  change what it reads next; decoding on its own, it reads its own earlier "
          "outputs, and a\n  mistake carries forward.")

    out = pathlib.Path(out)
    heat = save_heatmap(out / "attention_heatmap.png", example["attention"], source, output,
                        title="attention (general, Luong)")
    curves = save_loss_curves(out / "loss_curves.png", histories)
    print(f"\nwrote {heat} and {curves}; the trained models: {', '.join(saved)} "
          f"(xpseq translate {saved[0]} \"the cat sees the dog\")")
    print(f"demo finished in {time.perf_counter() - started:.0f} s")
    return 0
