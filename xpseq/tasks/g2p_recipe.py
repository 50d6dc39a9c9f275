"""Grapheme-to-phoneme conversion (G2P) on the CMU Pronouncing Dictionary: the recipe.

The dictionary, its seeded split and the TSV export are :mod:`xpseq.data.cmudict`; word
and phone error rates are :func:`xpseq.tasks.metrics.g2p_scores`. This module joins them to
the training and search code of the toy task: a word is read as its characters
(``"xpseq"`` -> ``x p s e q``) and a pronunciation is its ARPAbet phones; a word with
several pronunciations gives one training pair per pronunciation, and a prediction is
right when it equals any of them.

:data:`RECIPE` holds the defaults of ``xpseq train --task g2p`` (sized for a 2-core
machine: the G2P guide, docs/guide/g2p.md, says how they were chosen and what they reach);
:func:`train` trains one model, :func:`evaluate` scores it with greedy and beam search,
:func:`predict` turns words into phones.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

from xpseq.backends import Backend
from xpseq.core import checks
from xpseq.core.optim import adam
from xpseq.core.precision import Policy
from xpseq.data.cmudict import word_tokens
from xpseq.search.decode import SearchOptions
from xpseq.search.decoder import CheckpointDecoder, Decoder
from xpseq.train import callbacks as cb
from xpseq.train import schedules
from xpseq.train.loop import FitResult, TrainConfig

from .experiment import Task, model_config, task_from_pairs, train_model, translate

__all__ = ["RECIPE", "MODELS", "FIRST_RECIPE", "SEARCHES", "recipe", "g2p_task",
           "train", "predict", "evaluate"]

#: The defaults of ``xpseq train --task g2p`` (the model kind's own options are in
#: :data:`MODELS`): label smoothing 0.1, Adam (β2 = 0.98) whose step size rises linearly for
#: ``warmup`` steps and then falls as the inverse square root of the step, batches of 256
#: words bucketed by length, dropout 0.2, the dev WER of greedy search after every epoch
#: (the best dev epoch is kept, and the last ``keep_epochs`` epochs are written for
#: :func:`xpseq.train.checkpoint.average`) and a wall-clock limit in minutes.
#: ``lr_decay`` (halve the step size after each epoch whose ``monitor`` is not a new best)
#: and ``patience`` (early stopping) are off (``None``); ``warmup=None`` gives a constant
#: step size. ``gradients="hand-derived"``: the fastest way each backend has (see
#: :func:`xpseq.train.make_train_step`; ``None`` for the backend's own).
RECIPE: dict[str, Any] = {
    "model": "transformer", "dropout": 0.2, "label_smoothing": 0.1,
    "lr": 1e-3, "beta2": 0.98, "warmup": 2000, "lr_decay": None, "patience": None,
    "batch_size": 256, "bucket": 4, "epochs": 200, "monitor": "dev_wer",
    "time_limit_minutes": 45.0, "keep_epochs": 5, "gradients": "hand-derived",
}

#: The model options of each kind (:func:`xpseq.tasks.model_config`), as the recipe sets
#: them: a Transformer of 3 + 3 layers, d 256, 4 heads, d_ff 1024; or a bi-LSTM encoder
#: (256 units each way) over 64-dimensional character embeddings and an LSTM decoder (512
#: units) with Luong general attention and input feeding.
MODELS: dict[str, dict[str, Any]] = {
    "transformer": {"d_model": 256, "heads": 4, "encoder_layers": 3, "decoder_layers": 3,
                    "d_ff": 1024},
    "rnn": {"embed": 64, "hidden": 256, "attention": "general", "style": "luong",
            "cell": "lstm"},
}

#: The recipe keys that every model kind takes as a model option.
MODEL_KEYS = ("dropout", "label_smoothing")

#: The first recipe (an LSTM, constant step size halved on plateaus, early stopping), as
#: overrides of :data:`RECIPE`: ``train(split, backend, **FIRST_RECIPE)``.
FIRST_RECIPE: dict[str, Any] = {
    "model": "rnn", "hidden": 128, "label_smoothing": 0.0, "lr": 2e-3, "beta2": 0.999,
    "warmup": None, "lr_decay": 0.5, "patience": 3, "batch_size": 128, "keep_epochs": 0,
}

#: The searches :func:`evaluate` scores by default: greedy, and beam search with k = 5.
SEARCHES: tuple[tuple[str, SearchOptions], ...] = (
    ("greedy", SearchOptions()),
    ("beam k=5", SearchOptions(method="beam", k=5, length_penalty="avg")),
)


def g2p_task(split: Any) -> Task:
    """The training and dev pairs of a :class:`xpseq.data.cmudict.G2PSplit` as a
    :class:`xpseq.tasks.Task`, with the vocabularies of its training pairs
    (characters; phones). The test words are scored by :func:`evaluate`, not kept here."""
    return task_from_pairs(split.pairs("train"), split.pairs("dev"), {})


def recipe(**overrides: Any) -> tuple[dict, dict]:
    """The training options and the model options of :data:`RECIPE` changed by
    ``overrides`` (any key of :data:`RECIPE` or of the chosen kind's :data:`MODELS`)."""
    kind = overrides.get("model", RECIPE["model"])
    if kind not in MODELS:
        raise ValueError(f"g2p: model must be one of {sorted(MODELS)}, got {kind!r}")
    unknown = sorted(set(overrides) - set(RECIPE) - set(MODELS[kind]))
    if unknown:
        raise ValueError(f"g2p: unknown recipe options {unknown} for model {kind!r}; the "
                         f"recipe has {sorted(RECIPE)} and the model "
                         f"{sorted(MODELS[kind])}")
    options = {**RECIPE, **{k: v for k, v in overrides.items() if k in RECIPE}}
    fields = {**MODELS[kind], **{k: v for k, v in overrides.items() if k in MODELS[kind]}}
    fields.update({k: options[k] for k in MODEL_KEYS})
    return options, fields


def train(split: Any, backend: Backend, *, checkpoint: str | None = None, seed: int = 0,
          dtype: str = "float32", progress: bool = True, dev_words: int | None = None,
          devices: int = 1, callbacks: Sequence[cb.Callback] = (), resume: Any = None,
          precision: Policy | str | None = None,
          metadata: dict | None = None, **overrides: Any) -> tuple[Any, FitResult, Task]:
    """Train a G2P model on ``split`` with :data:`RECIPE`, changed by ``overrides``.

    Parameters
    ----------
    split : :class:`xpseq.data.cmudict.G2PSplit`
    backend : the training backend (``jax`` is the fastest on CPU)
    checkpoint : path of the checkpoint (written after every epoch; at the end it holds
        the best dev epoch's parameters); with ``keep_epochs`` the last epochs' parameters
        go next to it (``<stem>.epoch<N>.safetensors``)
    dev_words : after every epoch, score greedy search on the first this many dev words
        (``dev_wer``, ``dev_per`` in the history: the learning curve, and what
        ``monitor="dev_wer"`` watches); ``None`` for all of them, 0 for none (then the
        recipe must monitor ``"dev_loss"``)
    devices : train data-parallel on this many devices (``TrainConfig.devices``)
    precision : ``None`` or ``"bf16"`` (``TrainConfig.precision``); mixed precision trains
        with the library's autodiff (the recipe's hand-derived gradients compute in one
        dtype)
    callbacks : more :mod:`xpseq.train.callbacks`, run after the recipe's own and before
        its checkpoint, except a ``MetricsLog``, which runs after the checkpoint (so that it
        lists only epochs a checkpoint holds)
    resume : a :class:`xpseq.train.checkpoint.Checkpoint` of this run to continue
    metadata : more entries for the checkpoint's metadata (beside the task, the split and
        the effective recipe, which it always holds)
    overrides : any key of :data:`RECIPE` or of the model kind's :data:`MODELS`, e.g.
        ``model="rnn", hidden=64, time_limit_minutes=5``; ``time_limit_minutes=None`` for
        no limit; ``**FIRST_RECIPE`` for the first recipe

    Returns
    -------
    (config, fit result, task)
    """
    if dev_words is not None:
        _check_count("train", "dev_words", dev_words, allow_zero=True)
    options, fields = recipe(**overrides)
    task = g2p_task(split)
    minutes = options["time_limit_minutes"]
    metadata = {**(metadata or {}), "task": "g2p", "stress": bool(split.stress),
                "split_seed": int(split.seed), "recipe": {**options, **fields}}
    if dev_words == 0 and options["monitor"] != "dev_loss":
        raise ValueError(f"train: monitor={options['monitor']!r} needs dev words to score; "
                         "dev_words=0 scores none (monitor='dev_loss' does not need them)")
    config = model_config(task, options["model"], **fields)
    parts: list[cb.Callback] = []
    if dev_words != 0:
        def dev_scores(record: dict, params: dict) -> dict:
            decoder = CheckpointDecoder(params, config, task.src_vocab, task.tgt_vocab,
                                        backend)
            [row] = evaluate(decoder, split, part="dev", searches=SEARCHES[:1],
                             limit=dev_words)
            return {"dev_wer": row["wer"], "dev_per": row["per"]}

        parts.append(cb.EpochMetrics(dev_scores))
    if options["lr_decay"] is not None:
        parts.append(cb.ReduceLROnPlateau(options["lr_decay"]))
    if options["patience"] is not None:
        parts.append(cb.EarlyStopping(options["patience"]))
    parts.append(cb.RestoreBest())
    if minutes is not None:
        parts.append(cb.TimeLimit(60.0 * minutes))
    parts += list(callbacks)
    if checkpoint is not None:
        vocabs = {"src": task.src_vocab.to_list(), "tgt": task.tgt_vocab.to_list()}
        parts = cb.place_checkpoint(parts, cb.SaveCheckpoint(
            checkpoint, vocabs=vocabs, metadata=metadata, keep_epochs=options["keep_epochs"]))
    lr = options["lr"] if not options["warmup"] else (
        options["lr"] * schedules.warmup_inverse_sqrt(options["warmup"]))
    settings = TrainConfig(epochs=options["epochs"], optimizer=adam(lr, b2=options["beta2"]),
                           seed=seed, monitor=options["monitor"], gradients=options["gradients"],
                           progress=progress, devices=devices, precision=precision)
    if settings.policy.reduced:
        settings = dataclasses.replace(settings, gradients="autodiff")
    config, result = train_model(task, backend, config, settings,
                                 batch_size=options["batch_size"], bucket=options["bucket"],
                                 dtype=dtype, callbacks=parts, resume=resume)
    return config, result, task


def predict(decoder: Decoder, words: Sequence[str],
            options: SearchOptions = SearchOptions(), *,
            progress: bool | str = False) -> list[list[str]]:
    """The phones of each word (one list per word, in order) from ``decoder`` (a
    :class:`~xpseq.search.Decoder`: a checkpoint on a backend, an ensemble, an ONNX
    export); characters the model never saw are read as ``<unk>``. ``progress``: a bar
    on standard error (a str: its label)."""
    results = translate(decoder, [word_tokens(w) for w in words], options,
                        progress=progress)
    return [list(r["tokens"]) for r in results]


def evaluate(decoder: Decoder, split: Any, *, part: str = "test",
             searches: Sequence[tuple[str, SearchOptions]] = SEARCHES,
             limit: int | None = None, progress: bool = False) -> list[dict]:
    """PER and WER (:func:`xpseq.tasks.metrics.g2p_scores`) of the words of ``split``'s
    ``part`` for each named search, decoded by ``decoder`` (see :func:`predict`).

    ``limit`` scores only the first ``limit`` words (for quick checks); ``progress`` shows
    a bar per search on standard error. Returns one dict
    per search: ``search``, ``per``, ``wer`` (percent), ``words``, ``seconds`` (decoding
    time, JAX compilation included) and ``predictions``; for a split with stress kept
    also ``per_no_stress`` and ``wer_no_stress``: the predictions' stress digits removed,
    scored against the same words' references with stress removed (the split of the same
    seed without stress), as a model trained without stress is scored.
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
        predictions = predict(decoder, ["".join(w) for w in words], options,
                              progress=name if progress else False)
        seconds = time.perf_counter() - start
        scores = g2p_scores(predictions, references)
        rows.append({"search": name, "per": scores.per, "wer": scores.wer,
                     "words": scores.words, "seconds": seconds, "predictions": predictions})
        if split.stress:
            plain_words, plain_refs = _without_stress(split.seed).references(part)
            assert plain_words[:len(words)] == words            # the same words, in order
            plain = g2p_scores([[p.rstrip("012") for p in h] for h in predictions],
                               plain_refs[:len(words)])
            rows[-1].update(per_no_stress=plain.per, wer_no_stress=plain.wer)
    return rows


_PLAIN: dict[int, Any] = {}


def _without_stress(seed: int) -> Any:
    """The dictionary's split of ``seed`` with stress removed (read once)."""
    from xpseq.data.cmudict import load_g2p

    if seed not in _PLAIN:
        _PLAIN[seed] = load_g2p(stress=False, seed=seed)
    return _PLAIN[seed]


def _check_count(fname: str, name: str, value: Any, *, allow_zero: bool) -> None:
    low = 0 if allow_zero else 1
    if not checks.is_int(value) or value < low:
        raise ValueError(f"{fname}: {name} must be an int >= {low}, got {value!r}")
