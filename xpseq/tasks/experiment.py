"""The experiment: attention vs plain seq2seq on the toy task, by source length.

The pieces ``xpseq demo``, ``xpseq train`` and ``xpseq evaluate`` are built from:
preparing a task (vocabularies and encoded pairs), training a model, translating a list of
sentences in its original order, the table by length bucket, greedy vs beam search, and
the decoder's inputs under teacher forcing beside those under autoregressive decoding.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping, Sequence

import numpy as np

from xpseq import models
from xpseq.backends import Backend
from xpseq.core import values
from xpseq.core.optim import adam
from xpseq.data import BOS_ID, EOS_ID, Vocab, make_batches, make_dataset
from xpseq.io.reading import shown
from xpseq.search.decode import SearchOptions
from xpseq.search.decoder import CheckpointDecoder, Decoder, translate
from xpseq.train.callbacks import Callback, EarlyStopping, SaveCheckpoint, place_checkpoint
from xpseq.train.loop import FitResult, TrainConfig, fit
from xpseq.train.schedules import warmup_inverse_sqrt

from .metrics import corpus_bleu, exact_match

__all__ = ["Task", "toy_task", "task_from_pairs", "model_config", "TRAINING_DEFAULTS",
           "TOY_MODEL_DEFAULTS", "training_defaults", "training_config", "train_model", "translate",
           "attention_labels", "score", "bucket_table", "decoder_inputs"]

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

    def batches(self, pairs: Sequence[Pair], batch_size: int, bucket: int = 8,
                max_tokens: int | None = None, shapes: int | None = None) -> list[dict]:
        """Padded batches of ``pairs`` (see :func:`xpseq.data.make_batches`)."""
        return make_batches(self.encode(pairs), batch_size, bucket=bucket,
                            max_tokens=max_tokens, shapes=shapes)


def task_from_pairs(train: list[Pair], dev: list[Pair], test: dict[Any, list[Pair]]) -> Task:
    """A task of your own data, its vocabularies built from the training pairs.

    Parameters
    ----------
    train : list of (source, target)
        The training pairs, each side a list of str tokens (``(["the", "cat"], ["a"])``);
        at least one.
    dev : list of (source, target)
        The pairs whose loss picks the best epoch (may be empty: no early stopping).
    test : dict
        Test pairs by bucket (any key: ``{"test": pairs}``), what
        :meth:`Translator.evaluate <xpseq.tasks.translator.Translator.evaluate>` scores.

    Returns
    -------
    Task
        ``train``, ``dev``, ``test`` and the two vocabularies (tokens the training pairs
        lack are read as ``<unk>``).

    Raises
    ------
    TypeError
        A pair that is not two lists of str tokens (the error names where).
    ValueError
        ``train`` is empty.

    Examples
    --------
    >>> import xpseq
    >>> pairs = [("the cat".split(), "le chat".split()), ("the dog".split(), "le chien".split())]
    >>> task = xpseq.task_from_pairs(pairs, pairs[:1], {"test": pairs})
    >>> len(task.src_vocab), len(task.tgt_vocab)         # 4 reserved ids, then the words
    (7, 7)
    """
    for part, pairs in (("train", train), ("dev", dev),
                        *((f"test[{k!r}]", v) for k, v in _items(test))):
        _check_pairs(pairs, part)
    if not train:
        raise ValueError("task_from_pairs: train is empty; a task needs training pairs")
    return Task(train, dev, test, Vocab.build(s for s, _ in train),
                Vocab.build(t for _, t in train))


def _items(test: Any) -> list[tuple[Any, Any]]:
    if not isinstance(test, dict):
        raise TypeError(f"task_from_pairs: test must be a dict of pairs by bucket "
                        f"({{'test': pairs}}), got {type(test).__name__}")
    return list(test.items())


def _check_pairs(pairs: Any, part: str) -> None:
    """A TypeError unless ``pairs`` is a list of (source, target) lists of str tokens."""
    if not isinstance(pairs, (list, tuple)):
        raise TypeError(f"task_from_pairs: {part} must be a list of (source, target) pairs, "
                        f"got {type(pairs).__name__}")
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(
                isinstance(side, (list, tuple)) and all(isinstance(t, str) for t in side)
                for side in pair)):
            raise TypeError(f"task_from_pairs: {part}[{i}] must be a (source, target) pair "
                            f"of token lists (['the', 'cat'], ['le', 'chat']), got "
                            f"{shown(repr(pair))}")


def toy_task(*, n_train: int = 12000, n_dev: int = 500, n_test_per_bucket: int = 300,
             seed: int = 0) -> Task:
    """The toy translation task, English -> "Zhoric", a made-up language with
    subject–object–verb order, postpositions and a subject marker
    (:func:`xpseq.data.make_dataset` documents its grammar).

    Parameters
    ----------
    n_train : int
        Training pairs (sentences of 0 to 3 prepositional phrases).
    n_dev : int
        Dev pairs, drawn like the training ones.
    n_test_per_bucket : int
        Test pairs per bucket: one bucket per count of phrases, 0 to 4 (4 is longer
        than any training sentence).
    seed : int
        The seed of the sentences drawn.

    Returns
    -------
    Task
        Its ``train``, ``dev`` and ``test`` (``{0: pairs, ..., 4: pairs}``) pairs of token
        lists, and the two vocabularies.

    Raises
    ------
    ValueError
        A size or ``seed`` that is not a non-negative int.

    Examples
    --------
    >>> import xpseq
    >>> task = xpseq.toy_task(n_train=100, n_dev=10, n_test_per_bucket=5)
    >>> len(task.train), sorted(task.test), len(task.test[4])
    (100, [0, 1, 2, 3, 4], 5)
    """
    data = make_dataset(n_train=n_train, n_dev=n_dev, n_test_per_bucket=n_test_per_bucket,
                        seed=seed)
    return task_from_pairs(data.train, data.dev, data.test)


def model_config(task: Task, kind: str = "rnn", **fields: Any) -> Any:
    """The configuration of a ``kind`` model (:func:`xpseq.models.get`) for ``task``: the
    vocabulary sizes from the task, every other field from ``fields`` or the kind's
    defaults (e.g. ``model_config(task, attention="none", hidden=32)``).

    Raises
    ------
    TypeError
        A field the kind's configuration does not have (the message names it, the
        closest field if one is close, and every field).
    """
    import difflib

    config = models.get(kind).Config
    known = [f.name for f in dataclasses.fields(config)
             if f.init and f.name not in ("src_vocab", "tgt_vocab")]
    for name in fields:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{config.__name__} has no option {name!r}{hint} (its options: "
                            f"{', '.join(known)})")
    return config(src_vocab=len(task.src_vocab), tgt_vocab=len(task.tgt_vocab), **fields)


#: The training defaults of each model kind: at most ``epochs`` epochs (early stopping may
#: end sooner) of Adam at step size ``lr`` over batches of ``batch_size`` sentences;
#: ``warmup`` steps of a linear warm-up and then inverse-square-root decay, or ``None`` for
#: a constant step size. :func:`training_config`, :func:`train_model`,
#: :meth:`Translator.train <xpseq.tasks.translator.Translator.train>` and ``xpseq train``
#: read them (``xpseq demo`` its step sizes and warm-up); a kind the table does not name
#: trains as ``"rnn"``.
TRAINING_DEFAULTS: dict[str, dict[str, Any]] = {
    "rnn": {"epochs": 5, "lr": 3e-3, "batch_size": 64, "warmup": None},
    "transformer": {"epochs": 8, "lr": 1e-3, "batch_size": 64, "warmup": 400},
}


#: Where the toy and TSV tasks' models (``xpseq train``, ``xpseq demo``) differ from their
#: kind's ``Config`` defaults: dropout 0.1, and label smoothing 0.1 for the Transformer.
TOY_MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "rnn": {"dropout": 0.1},
    "transformer": {"dropout": 0.1, "label_smoothing": 0.1},
}


def training_defaults(kind: str) -> dict[str, Any]:
    """:data:`TRAINING_DEFAULTS` of model kind ``kind`` (a copy; the ``"rnn"`` row for a
    kind the table does not name)."""
    return dict(TRAINING_DEFAULTS.get(kind, TRAINING_DEFAULTS["rnn"]))


def training_config(kind: str = "rnn", *, epochs: int | None = None, lr: float | None = None,
                    warmup: int | None = None, **settings: Any) -> TrainConfig:
    """A :class:`~xpseq.train.TrainConfig` for a model of kind ``kind``: Adam at ``lr``,
    after ``warmup`` steps of linear warm-up then inverse-square-root decay (``0`` for a
    constant step size), for at most ``epochs`` epochs; ``None`` takes the kind's
    :data:`TRAINING_DEFAULTS`. ``settings`` are the other fields of ``TrainConfig``
    (``seed``, ``progress``, ``devices``, ...)."""
    table = training_defaults(kind)
    epochs = table["epochs"] if epochs is None else epochs
    lr = table["lr"] if lr is None else lr
    warmup = table["warmup"] if warmup is None else warmup
    rate = lr * warmup_inverse_sqrt(warmup) if warmup else lr
    return TrainConfig(epochs=epochs, optimizer=adam(rate), **settings)


def train_model(task: Task, backend: Backend, config: Any = None,
                train: TrainConfig | None = None, *, batch_size: int | None = None,
                bucket: int = 8, max_tokens: int | None = None, shapes: int | None = None,
                dtype: str = "float32",
                callbacks: Sequence[Callback] | None = None,
                checkpoint: str | None = None,
                metadata: dict | None = None, resume: Any = None) -> tuple[Any, FitResult]:
    """Train one model on ``task``: batch it, initialise, :func:`xpseq.train.fit`.

    Parameters
    ----------
    config : the model's configuration (any kind); ``model_config(task)`` by default
    train : a :class:`~xpseq.train.TrainConfig`; by default ``training_config(kind)``, the
        :data:`TRAINING_DEFAULTS` of the config's kind (for the RNN: Adam at 3e-3, clipping
        at 5, at most 5 epochs). Its ``seed`` also draws the initial parameters.
    batch_size : training sentences per batch (dev batches hold 256); by default the
        kind's :data:`TRAINING_DEFAULTS` (64)
    bucket : pad lengths to multiples of this: fewer distinct shapes (fewer JAX
        compilations) for a larger bucket, less padding for a smaller one
    max_tokens : batch by token count: at most this many padded tokens a batch (and at most
        ``batch_size`` sentences), see :func:`xpseq.data.make_batches`
    shapes : at most this many batch shapes in the training batches, and as many in the dev
        batches (:func:`xpseq.data.make_batches`): each is a compilation on JAX
    dtype : ``"float32"`` or ``"float64"``, the parameters' dtype
    callbacks : :mod:`xpseq.train.callbacks`; ``[EarlyStopping(patience=3)]`` by default
    checkpoint : write a checkpoint here, with the task's vocabularies and ``metadata``:
        after the other callbacks, so that it holds what they decided at an epoch's end,
        but before any ``MetricsLog``, so that the log lists only epochs a checkpoint
        holds (:func:`xpseq.train.callbacks.place_checkpoint`)
    resume : a :class:`xpseq.train.checkpoint.Checkpoint` of this run to continue (see
        :func:`xpseq.train.fit`)

    Returns
    -------
    (config, fit result)
    """
    dtype = values.dtype_name("train_model", "dtype", dtype)
    config = model_config(task) if config is None else config
    kind = models.of(config).kind
    train = training_config(kind) if train is None else train
    if batch_size is None:
        batch_size = training_defaults(kind)["batch_size"]
    callbacks = [EarlyStopping(patience=3)] if callbacks is None else list(callbacks)
    if checkpoint is not None:
        vocabs = {"src": task.src_vocab.to_list(), "tgt": task.tgt_vocab.to_list()}
        callbacks = place_checkpoint(callbacks, SaveCheckpoint(checkpoint, vocabs=vocabs,
                                                               metadata=metadata))
    init = models.of(config).init_params(config, seed=train.seed)
    params = {k: v.astype(dtype) for k, v in init.items()}
    result = fit(config, params,
                 task.batches(task.train, batch_size, bucket, max_tokens, shapes), backend,
                 dev_batches=task.batches(task.dev, 256, bucket, shapes=shapes), train=train,
                 callbacks=callbacks, resume=resume)
    return config, result


def attention_labels(source: Sequence[str], result: dict, src_vocab: Vocab) -> tuple[list, list]:
    """Column and row labels for a translation's attention (see :func:`translate`): the
    source words (unknown ones as ``<unk>``) and ``</s>``; the output words, and ``</s>``
    when the output ended with it."""
    columns = [t if t in src_vocab else "<unk>" for t in source] + ["</s>"]
    ended = len(result["attention"]) > len(result["tokens"])
    return columns, list(result["tokens"]) + (["</s>"] if ended else [])


def score(hypotheses: Sequence[Sequence[str]], pairs: Sequence[Pair], *,
          text: str | None = None) -> dict:
    """BLEU (with sacrebleu's signature) and exact match of hypotheses against ``pairs``;
    ``text``: the target's tokenisation when the model translates text (BLEU on the
    joined strings, :func:`~xpseq.tasks.metrics.corpus_bleu`), ``None`` for tokens."""
    refs = [t for _, t in pairs]
    bleu = corpus_bleu(hypotheses, refs, text=text)
    return {"bleu": bleu.score, "signature": bleu.signature,
            "exact": exact_match(hypotheses, refs),
            "length_diff": float(np.mean([len(h) - len(r) for h, r in zip(hypotheses, refs)]))}


def bucket_table(decoders: Mapping[str, Decoder], task: Task,
                 options: SearchOptions = SearchOptions(), *,
                 shapes: int | None = None, text: str | None = None,
                 buckets: str = "phrases") -> tuple[list[str], list[list], dict]:
    """BLEU and exact match per test bucket for each named model, a
    :class:`~xpseq.search.Decoder` (a checkpoint on a backend or an ONNX export) that reads
    ``task``'s sentences with its own vocabularies (``shapes``: as in :func:`translate`).
    ``text``: as in :func:`score`. ``buckets`` heads the first column (the toy task's
    buckets are its numbers of phrases); a model named ``""`` heads its columns ``BLEU``
    and ``exact``.

    Returns the headers and rows of the table and ``{name: {bucket: score dict and the
    hypotheses}}``.
    """
    headers = [buckets, "sentences"]
    for name in decoders:
        headers += [f"{name} BLEU".lstrip(), f"{name} exact".lstrip()]
    details: dict[str, dict[str, Any]]
    rows, details = [], {name: {} for name in decoders}
    for bucket, pairs in task.test.items():
        row: list = [bucket, len(pairs)]
        for name, decoder in decoders.items():
            out = translate(decoder, [s for s, _ in pairs], options, shapes=shapes)
            result = score([o["tokens"] for o in out], pairs, text=text)
            result["hypotheses"] = [o["tokens"] for o in out]
            details[name][bucket] = result
            row += [result["bleu"], f"{100 * result['exact']:.1f}%"]
        rows.append(row)
    return headers, rows, details


def timed_search_comparison(params: dict, config: Any, pairs: Sequence[Pair],
                            task: Task, backend: Backend,
                            beams: Sequence[int] = (1, 3, 5)) -> list[dict]:
    """Greedy and beam search (each ``k``, ``avg`` length penalty) on the same sentences:
    BLEU, exact match and seconds (the second of two runs, so JAX's compilation is not
    counted)."""
    runs = [("greedy", SearchOptions())]
    runs += [(f"beam k={k}", SearchOptions(method="beam", k=k, length_penalty="avg"))
             for k in beams]
    sources = [s for s, _ in pairs]
    decoder = CheckpointDecoder(params, config, task.src_vocab, task.tgt_vocab, backend)
    out = []
    for label, options in runs:
        translate(decoder, sources, options)
        start = time.perf_counter()
        hyps = translate(decoder, sources, options)
        seconds = time.perf_counter() - start
        result = score([h["tokens"] for h in hyps], pairs)
        out.append({"search": label, "bleu": result["bleu"], "exact": result["exact"],
                    "seconds": seconds, "signature": result["signature"]})
    return out


def decoder_inputs(params: dict, config: Any, pair: Pair, task: Task,
                   backend: Backend) -> list[tuple[str, str, str, str]]:
    """What the decoder reads and predicts at each step, two ways.

    Returns rows ``(teacher-forced input, its prediction, autoregressive input, its
    prediction)``: under teacher forcing the input is the gold target shifted right
    (``<s> y_1 ... y_{n-1}``), whatever the model predicted; under autoregressive decoding
    it is the model's own previous prediction.
    """
    source, target = pair
    src = np.array([task.src_vocab.encode(source, add_eos=True)])
    src_len = np.array([src.shape[1]])
    gold = task.tgt_vocab.encode(target) + [EOS_ID]
    tgt_in = np.array([[BOS_ID, *gold[:-1]]])
    teacher_pred = _teacher_forced_predictions(params, config, src, src_len, tgt_in, backend)
    own = translate(CheckpointDecoder(params, config, task.src_vocab, task.tgt_vocab,
                                      backend), [source])[0]
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


def _teacher_forced_predictions(params: dict, config: Any, src: np.ndarray,
                                src_len: np.ndarray, tgt_in: np.ndarray,
                                backend: Backend) -> np.ndarray:
    """The model's most likely token at each step when it reads ``tgt_in`` (one
    sentence), through its decoder step: ``(T,)`` ids."""
    kernels, xp = models.of(config).kernels, backend.xp
    encoded = kernels.encode(params, config, backend.asarray(src), backend.asarray(src_len),
                             scan=backend.scan, xp=xp)
    step, state = kernels.decoder(params, config, encoded, attention=False,
                                  max_len=tgt_in.shape[1], xp=xp)
    predictions = []
    for t in range(tgt_in.shape[1]):
        log_probs, state, _ = step(state, backend.asarray(tgt_in[:, t]))
        predictions.append(int(np.argmax(backend.to_numpy(log_probs)[0])))
    return np.array(predictions)
