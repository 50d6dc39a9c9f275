"""Grapheme-to-phoneme conversion (G2P) on the CMU Pronouncing Dictionary: the recipe.

The dictionary, its seeded split and the TSV export are :mod:`xpseq.data.cmudict`; word
and phone error rates are :func:`xpseq.tasks.metrics.g2p_scores`. This module joins them to
the training and search code of the toy task: a word is read as its characters
(``"xpseq"`` -> ``x p s e q``) and a pronunciation is its ARPAbet phones; a word with
several pronunciations gives one training pair per pronunciation, and a prediction is
right when it equals any of them.

:data:`RECIPE` holds the defaults of ``xpseq train --task g2p`` (sized for a 2-core
machine: see the README for how they were chosen and what they reach);
:func:`train` trains one model, :func:`evaluate` scores it with greedy and beam search,
:func:`predict` turns words into phones.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from xpseq.backends import Backend
from xpseq.core.optim import adam
from xpseq.data import Vocab
from xpseq.search.decode import SearchOptions
from xpseq.train import callbacks as cb
from xpseq.train.loop import FitResult, TrainConfig

from .experiment import Task, model_config, task_from_pairs, train_model, translate

__all__ = ["RECIPE", "SEARCHES", "word_tokens", "g2p_task", "train", "predict", "evaluate"]

#: The defaults of ``xpseq train --task g2p``: a bi-LSTM encoder and a Luong (general)
#: attention decoder with input feeding, dropout 0.2, Adam whose step size halves whenever
#: the dev WER of greedy search stalls, length-bucketed batches, early stopping on that WER
#: (the best dev epoch is kept) and a wall-clock limit in minutes.
#: ``monitor="dev_loss"`` watches the dev loss instead, which needs no decoding (see
#: :func:`train`'s ``dev_words``). ``gradients="hand-derived"``: the fastest way each
#: backend has (on JAX the encoder's recurrences differentiate by xpseq's rules, see
#: :func:`xpseq.train.make_train_step`; ``None`` for the backend's own).
RECIPE: dict[str, Any] = {
    "embed": 64, "hidden": 128, "attention": "general", "style": "luong", "cell": "lstm",
    "dropout": 0.2, "lr": 2e-3, "lr_decay": 0.5, "batch_size": 128, "bucket": 4,
    "epochs": 40, "patience": 3, "monitor": "dev_wer", "time_limit_minutes": 45.0,
    "gradients": "hand-derived",
}

#: The keys of :data:`RECIPE` that shape the model (:func:`xpseq.tasks.model_config`).
MODEL_KEYS = ("attention", "style", "cell", "embed", "hidden", "dropout")

#: The searches :func:`evaluate` scores by default: greedy, and beam search with k = 5.
SEARCHES: tuple[tuple[str, SearchOptions], ...] = (
    ("greedy", SearchOptions()),
    ("beam k=5", SearchOptions(method="beam", k=5, length_penalty="avg")),
)


def word_tokens(word: str) -> list[str]:
    """A word as the model reads it: its characters, lower-cased, outer whitespace removed
    (the dictionary's words are lower case)."""
    if not isinstance(word, str):
        raise TypeError(f"word_tokens: word must be a str, got {type(word).__name__}")
    return list(word.strip().lower())


def g2p_task(split: Any) -> Task:
    """The training and dev pairs of a :class:`xpseq.data.cmudict.G2PSplit` as a
    :class:`xpseq.tasks.Task`, with the vocabularies of its training pairs
    (characters; phones). The test words are scored by :func:`evaluate`, not kept here."""
    return task_from_pairs(split.pairs("train"), split.pairs("dev"), {})


def train(split: Any, backend: Backend, *, checkpoint: str | None = None, seed: int = 0,
          dtype: str = "float32", progress: bool = True, dev_words: int | None = None,
          devices: int = 1, **overrides: Any) -> tuple[Any, FitResult, Task]:
    """Train a G2P model on ``split`` with :data:`RECIPE`, changed by ``overrides``.

    Parameters
    ----------
    split : :class:`xpseq.data.cmudict.G2PSplit`
    backend : the training backend (``jax`` is the fastest on CPU)
    checkpoint : path of the checkpoint (written after every epoch; at the end it holds
        the best dev epoch's parameters)
    dev_words : after every epoch, score greedy search on the first this many dev words
        (``dev_wer``, ``dev_per`` in the history: the learning curve, and what
        ``monitor="dev_wer"`` watches); ``None`` for all of them, 0 for none (then the
        recipe must monitor ``"dev_loss"``)
    overrides : any key of :data:`RECIPE`, e.g. ``hidden=64, time_limit_minutes=5``;
        ``time_limit_minutes=None`` for no limit
    devices : train data-parallel on this many devices (``TrainConfig.devices``)

    Returns
    -------
    (config, fit result, task)
    """
    if dev_words is not None:
        _check_count("train", "dev_words", dev_words, allow_zero=True)
    unknown = sorted(set(overrides) - set(RECIPE))
    if unknown:
        raise ValueError(f"train: unknown recipe options {unknown}; the recipe has "
                         f"{sorted(RECIPE)}")
    recipe = {**RECIPE, **overrides}
    task = g2p_task(split)
    minutes = recipe.pop("time_limit_minutes")
    metadata = {"task": "g2p", "stress": bool(split.stress), "split_seed": int(split.seed),
                "recipe": {**recipe, "time_limit_minutes": minutes}}
    if dev_words == 0 and recipe["monitor"] != "dev_loss":
        raise ValueError(f"train: monitor={recipe['monitor']!r} needs dev words to score; "
                         "dev_words=0 scores none (monitor='dev_loss' does not need them)")
    config = model_config(task, **{k: recipe[k] for k in MODEL_KEYS})
    parts: list[cb.Callback] = []
    if dev_words != 0:
        def dev_scores(record: dict, params: dict) -> dict:
            [row] = evaluate(params, config, split, task.src_vocab, task.tgt_vocab, backend,
                             part="dev", searches=SEARCHES[:1], limit=dev_words)
            return {"dev_wer": row["wer"], "dev_per": row["per"]}

        parts.append(cb.EpochMetrics(dev_scores))
    if recipe["lr_decay"] is not None:
        parts.append(cb.ReduceLROnPlateau(recipe["lr_decay"]))
    parts += [cb.EarlyStopping(recipe["patience"]), cb.RestoreBest()]
    if minutes is not None:
        parts.append(cb.TimeLimit(60.0 * minutes))
    settings = TrainConfig(epochs=recipe["epochs"], optimizer=adam(recipe["lr"]), seed=seed,
                           monitor=recipe["monitor"], gradients=recipe["gradients"],
                           progress=progress, devices=devices)
    config, result = train_model(task, backend, config, settings,
                                 batch_size=recipe["batch_size"], bucket=recipe["bucket"],
                                 dtype=dtype, callbacks=parts, checkpoint=checkpoint,
                                 metadata=metadata)
    return config, result, task


def predict(params: dict, config: Any, words: Sequence[str], src_vocab: Vocab,
            tgt_vocab: Vocab, backend: Backend,
            options: SearchOptions = SearchOptions()) -> list[list[str]]:
    """The phones of each word (one list per word, in order). ``params`` are arrays of
    ``backend``; characters the model never saw are read as ``<unk>``."""
    results = translate(params, config, [word_tokens(w) for w in words], src_vocab,
                        tgt_vocab, backend, options)
    return [list(r["tokens"]) for r in results]


def evaluate(params: dict, config: Any, split: Any, src_vocab: Vocab,
             tgt_vocab: Vocab, backend: Backend, *, part: str = "test",
             searches: Sequence[tuple[str, SearchOptions]] = SEARCHES,
             limit: int | None = None) -> list[dict]:
    """PER and WER (:func:`xpseq.tasks.metrics.g2p_scores`) of the words of ``split``'s
    ``part`` for each named search.

    ``limit`` scores only the first ``limit`` words (for quick checks). Returns one dict
    per search: ``search``, ``per``, ``wer`` (percent), ``words``, ``seconds`` (decoding
    time, JAX compilation included) and ``predictions``.
    """
    from xpseq.tasks.metrics import g2p_scores

    if limit is not None:
        _check_count("evaluate", "limit", limit, allow_zero=False)
    words, references = split.references(part)
    if limit is not None:
        words, references = words[:limit], references[:limit]
    rows = []
    for name, options in searches:
        start = time.perf_counter()
        predictions = predict(params, config, ["".join(w) for w in words], src_vocab,
                              tgt_vocab, backend, options)
        seconds = time.perf_counter() - start
        scores = g2p_scores(predictions, references)
        rows.append({"search": name, "per": scores.per, "wer": scores.wer,
                     "words": scores.words, "seconds": seconds, "predictions": predictions})
    return rows


def _check_count(fname: str, name: str, value: Any, *, allow_zero: bool) -> None:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{fname}: {name} must be an int >= {low}, got {value!r}")
