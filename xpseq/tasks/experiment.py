"""The seeds' experiment: attention vs plain seq2seq on the toy task, by source length.

The pieces ``xpseq demo``, ``xpseq train`` and ``xpseq evaluate`` are built from:
preparing a task (vocabularies and encoded pairs), training a model, translating a list of
sentences in its original order, the table by length bucket, greedy vs beam search, and
the decoder's inputs under teacher forcing beside those under autoregressive decoding.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import numpy as np

from xpseq.backends import Backend
from xpseq.core.optim import adam
from xpseq.data import EOS_ID, Vocab, make_batches, make_dataset
from xpseq.tasks.metrics import corpus_bleu, exact_match
from xpseq.models import Seq2SeqConfig, forward, init_params
from xpseq.train.loop import FitResult, fit
from xpseq.search.decode import SearchOptions, search, to_lists

__all__ = ["Task", "toy_task", "task_from_pairs", "model_config", "train_model", "translate",
           "attention_labels", "score",
           "bucket_table", "decoder_inputs"]

Pair = tuple[list[str], list[str]]


@dataclasses.dataclass
class Task:
    """Sentence pairs and the vocabularies built from the training pairs.

    ``test`` maps a bucket name (for the toy task, the number of prepositional phrases
    0-4) to its pairs.
    """

    train: list[Pair]
    dev: list[Pair]
    test: dict[Any, list[Pair]]
    src_vocab: Vocab
    tgt_vocab: Vocab

    def encode(self, pairs: Sequence[Pair]) -> list[tuple[list[int], list[int]]]:
        """Source ids end in ``</s>``; target ids do not (batching adds ``<s>``/``</s>``)."""
        return [(self.src_vocab.encode(s, add_eos=True), self.tgt_vocab.encode(t))
                for s, t in pairs]

    def batches(self, pairs: Sequence[Pair], batch_size: int, bucket: int = 8) -> list[dict]:
        return make_batches(self.encode(pairs), batch_size, bucket=bucket)


def task_from_pairs(train: list[Pair], dev: list[Pair], test: dict[Any, list[Pair]]) -> Task:
    """A task whose vocabularies come from the training pairs."""
    return Task(train, dev, test, Vocab.build(s for s, _ in train),
                Vocab.build(t for _, t in train))


def toy_task(*, n_train: int = 12000, n_dev: int = 500, n_test_per_bucket: int = 300,
             seed: int = 0) -> Task:
    """The English -> Zhoric task (:func:`xpseq.data.make_dataset`)."""
    data = make_dataset(n_train=n_train, n_dev=n_dev, n_test_per_bucket=n_test_per_bucket,
                        seed=seed)
    return task_from_pairs(data.train, data.dev, data.test)


def model_config(task: Task, *, attention: str = "general", style: str = "luong",
                 cell: str = "lstm", embed: int = 32, hidden: int = 64,
                 dropout: float = 0.1) -> Seq2SeqConfig:
    """The model :func:`train_model` trains on ``task``: vocabulary sizes from the task,
    input feeding whenever there is attention."""
    return Seq2SeqConfig(len(task.src_vocab), len(task.tgt_vocab), embed=embed, hidden=hidden,
                         cell=cell, attention=attention, style=style,
                         input_feeding=attention != "none", dropout=dropout)


def train_model(task: Task, backend: Backend, *, attention: str = "general",
                style: str = "luong", cell: str = "lstm", embed: int = 32, hidden: int = 64,
                dropout: float = 0.1, epochs: int = 5, lr: float = 3e-3,
                batch_size: int = 64, bucket: int = 8, dtype: str = "float32", seed: int = 0,
                patience: int = 3, progress: bool = True, checkpoint: str | None = None,
                metadata: dict | None = None, restore_best: bool = False,
                time_limit: float | None = None, lr_decay: float | None = None,
                monitor: str = "dev_loss", on_epoch: Any = None,
                gradients: str | None = None) -> tuple[Seq2SeqConfig, FitResult]:
    """Train one model on ``task`` (Adam, clipping at 5, early stopping on the dev loss).

    Batches are padded to multiples of ``bucket`` tokens: fewer distinct shapes (fewer JAX
    compilations) for a larger bucket, less padding for a smaller one. ``restore_best``,
    ``time_limit`` (seconds), ``lr_decay``, ``monitor``, ``on_epoch`` and ``gradients`` go
    to :func:`xpseq.train.fit`.
    """
    config = model_config(task, attention=attention, style=style, cell=cell, embed=embed,
                          hidden=hidden, dropout=dropout)
    params = {k: v.astype(dtype) for k, v in init_params(config, seed=seed).items()}
    result = fit(config, params, task.batches(task.train, batch_size, bucket), backend,
                 dev_batches=task.batches(task.dev, 256, bucket), optimizer=adam(lr),
                 epochs=epochs,
                 patience=patience, seed=seed, progress=progress, checkpoint=checkpoint,
                 vocabs={"src": task.src_vocab.to_list(), "tgt": task.tgt_vocab.to_list()},
                 metadata=metadata, restore_best=restore_best, time_limit=time_limit,
                 lr_decay=lr_decay, monitor=monitor, on_epoch=on_epoch, gradients=gradients)
    return config, result


def translate(params: dict, config: Seq2SeqConfig, sources: Sequence[Sequence[str]],
              src_vocab: Vocab, tgt_vocab: Vocab, backend: Backend,
              options: SearchOptions = SearchOptions(), *,
              batch_size: int = 256) -> list[dict]:
    """Translate token lists; results come back in the order of ``sources``.

    Each result: ``tokens`` (the output words), ``score``, ``attention`` of shape
    ``(rows, len(source) + 1)`` over the source and its ``</s>``; the rows are the output
    words and the ``</s>`` that ended it (``len(tokens) + 1`` rows), or only the words
    when the output was cut at its length limit without ``</s>``.
    ``params`` are arrays of ``backend``. Unknown source words become ``<unk>``; an empty
    source translates to an empty output.
    """
    results: list[dict | None] = [None] * len(sources)
    pairs = [(src_vocab.encode(s, add_eos=True), []) for s in sources]
    for batch in make_batches(pairs, batch_size, bucket=8) if pairs else []:
        hyp = search(params, config, batch["src"], batch["src_len"], backend, options)
        for i, best in zip(batch["index"], to_lists(hyp, batch["src_len"])):
            top = best[0]
            results[int(i)] = {"tokens": tgt_vocab.decode(top["tokens"]), "ids": top["tokens"],
                               "score": top["score"], "attention": top["attention"],
                               "n_best": [tgt_vocab.decode(h["tokens"]) for h in best]}
    return results


def attention_labels(source: Sequence[str], result: dict, src_vocab: Vocab) -> tuple[list, list]:
    """Column and row labels for a translation's attention (see :func:`translate`): the
    source words (unknown ones as ``<unk>``) and ``</s>``; the output words, and ``</s>``
    when the output ended with it."""
    columns = [t if t in src_vocab else "<unk>" for t in source] + ["</s>"]
    ended = len(result["attention"]) > len(result["tokens"])
    return columns, list(result["tokens"]) + (["</s>"] if ended else [])


def score(hypotheses: Sequence[Sequence[str]], pairs: Sequence[Pair]) -> dict:
    """BLEU (with sacrebleu's signature) and exact match of hypotheses against ``pairs``."""
    refs = [t for _, t in pairs]
    bleu = corpus_bleu(hypotheses, refs)
    return {"bleu": bleu.score, "signature": bleu.signature,
            "exact": exact_match(hypotheses, refs),
            "length_diff": float(np.mean([len(h) - len(r) for h, r in zip(hypotheses, refs)]))}


def bucket_table(models: dict[str, tuple[dict, Seq2SeqConfig]], task: Task, backend: Backend,
                 options: SearchOptions = SearchOptions()) -> tuple[list[str], list[list], dict]:
    """BLEU and exact match per test bucket for each named model.

    Returns the headers and rows of the table and ``{name: {bucket: score dict and the
    hypotheses}}``.
    """
    headers = ["phrases", "sentences"]
    for name in models:
        headers += [f"{name} BLEU", f"{name} exact"]
    rows, details = [], {name: {} for name in models}
    for bucket, pairs in task.test.items():
        row: list = [bucket, len(pairs)]
        for name, (params, config) in models.items():
            out = translate(params, config, [s for s, _ in pairs], task.src_vocab,
                            task.tgt_vocab, backend, options)
            result = score([o["tokens"] for o in out], pairs)
            result["hypotheses"] = [o["tokens"] for o in out]
            details[name][bucket] = result
            row += [result["bleu"], f"{100 * result['exact']:.1f}%"]
        rows.append(row)
    return headers, rows, details


def timed_search_comparison(params: dict, config: Seq2SeqConfig, pairs: Sequence[Pair],
                            task: Task, backend: Backend,
                            beams: Sequence[int] = (1, 3, 5)) -> list[dict]:
    """Greedy and beam search (each ``k``, ``avg`` length penalty) on the same sentences:
    BLEU, exact match and seconds (the second of two runs, so JAX's compilation is not
    counted)."""
    runs = [("greedy", SearchOptions())]
    runs += [(f"beam k={k}", SearchOptions(method="beam", k=k, length_penalty="avg"))
             for k in beams]
    sources = [s for s, _ in pairs]
    out = []
    for label, options in runs:
        translate(params, config, sources, task.src_vocab, task.tgt_vocab, backend, options)
        start = time.perf_counter()
        hyps = translate(params, config, sources, task.src_vocab, task.tgt_vocab, backend,
                         options)
        seconds = time.perf_counter() - start
        result = score([h["tokens"] for h in hyps], pairs)
        out.append({"search": label, "bleu": result["bleu"], "exact": result["exact"],
                    "seconds": seconds, "signature": result["signature"]})
    return out


def decoder_inputs(params: dict, config: Seq2SeqConfig, pair: Pair, task: Task,
                   backend: Backend) -> list[tuple[str, str, str, str]]:
    """What the decoder reads and predicts at each step, two ways (seed 000's contrast).

    Returns rows ``(teacher-forced input, its prediction, autoregressive input, its
    prediction)``: under teacher forcing the input is the gold target shifted right
    (``<s> y_1 ... y_{n-1}``), whatever the model predicted; under autoregressive decoding
    it is the model's own previous prediction.
    """
    source, target = pair
    src = np.array([task.src_vocab.encode(source, add_eos=True)])
    src_len = np.array([src.shape[1]])
    gold = task.tgt_vocab.encode(target) + [EOS_ID]
    tgt_in = np.array([[1, *gold[:-1]]])
    logits, _ = forward(params, config, backend.asarray(src), backend.asarray(src_len),
                        backend.asarray(tgt_in), scan=backend.scan)
    teacher_pred = np.argmax(backend.to_numpy(logits)[0], axis=-1)
    own = translate(params, config, [source], task.src_vocab, task.tgt_vocab, backend)[0]
    own_ids = own["ids"] + [EOS_ID]
    tok = task.tgt_vocab.token
    rows = []
    for t in range(max(len(gold), len(own_ids))):
        tf_in = tok(int(tgt_in[0, t])) if t < len(gold) else ""
        tf_out = tok(int(teacher_pred[t])) if t < len(gold) else ""
        ar_in = ("<s>" if t == 0 else tok(own_ids[t - 1])) if t < len(own_ids) else ""
        ar_out = tok(own_ids[t]) if t < len(own_ids) else ""
        rows.append((tf_in, tf_out, ar_in, ar_out))
    return rows
