"""The front door in Python: train, translate, evaluate, save and load in a few lines.

>>> import xpseq
>>> task = xpseq.toy_task(n_train=2000)                          # doctest: +SKIP
>>> model = xpseq.Translator.train(task, model="transformer", epochs=3)  # doctest: +SKIP
>>> model.translate(["the old cat sees the dog"], beam=5)        # doctest: +SKIP
['zo gulu ...']
>>> model.evaluate()                                             # doctest: +SKIP
>>> model.save("toy.safetensors")                                # doctest: +SKIP
>>> xpseq.load("toy.safetensors", backend="numpy")               # doctest: +SKIP

A :class:`Translator` is a trained model with its vocabularies on a backend. Underneath are
the functions it calls, unchanged: :func:`xpseq.tasks.train_model`,
:func:`xpseq.tasks.translate`, :func:`xpseq.tasks.bucket_table` and
:mod:`xpseq.train.checkpoint`.
"""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

from xpseq import backends, models
from xpseq.core import values
from xpseq.data import Vocab
from xpseq.data import tokens as tok
from xpseq.io import reading
from xpseq.search import CheckpointDecoder, options_for

from .experiment import Task, model_config, train_model, training_config, translate

__all__ = ["Translator", "load"]


class Translator:
    """A trained sequence-to-sequence model, its vocabularies and the backend it runs on.

    Make one with :meth:`train` or :func:`load`; the constructor takes what they found.

    Parameters
    ----------
    params : dict
        The model's parameters by name, arrays of ``backend``.
    config : the model's configuration (:class:`xpseq.models.rnn.Seq2SeqConfig`,
        :class:`xpseq.models.transformer.TransformerConfig`)
    src_vocab, tgt_vocab : Vocab
        The source and target vocabularies.
    backend : Backend
        The backend the parameters live on, which decodes.
    history : sequence of dict
        The training's per-epoch record (empty for a loaded model without one).
    task : Task, optional
        The task it was trained on, when known (:meth:`evaluate` scores its test set).
    metadata : dict, optional
        What its checkpoint stores beside the parameters (the data, the recipe, the
        ``tokens`` it reads and writes: see :attr:`tokens`).

    Raises
    ------
    TypeError
        ``config`` is the configuration of no model kind, a vocabulary is not a
        :class:`~xpseq.data.Vocab`, or ``backend`` is not a
        :class:`~xpseq.backends.Backend` (the values themselves are checked by
        :meth:`train` and :func:`load`, which make a Translator).

    Examples
    --------
    A small model trained for one epoch on NumPy (a model that translates well takes
    the defaults: see the README's first example), saved, and read back on another
    backend:

    >>> import os, tempfile
    >>> import xpseq
    >>> task = xpseq.toy_task(n_train=300, n_dev=50, n_test_per_bucket=10)
    >>> model = xpseq.Translator.train(task, epochs=1, backend="numpy", progress=False,
    ...                                embed=16, hidden=16)
    >>> len(model.history), "dev_loss" in model.history[0]
    (1, True)
    >>> [sentence] = model.translate(["the cat sees the dog"])     # one str per sentence
    >>> path = model.save(os.path.join(tempfile.mkdtemp(), "toy.safetensors"))
    >>> xpseq.load(path, backend="numpy").translate(["the cat sees the dog"]) == [sentence]
    True
    """

    def __init__(self, params: dict[str, Any], config: Any, src_vocab: Vocab, tgt_vocab: Vocab,
                 backend: backends.Backend, *, history: Sequence[dict[str, Any]] = (),
                 task: Task | None = None, metadata: dict[str, Any] | None = None):
        models.of(config)                                # a TypeError naming config
        for name, vocab in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab)):
            if not isinstance(vocab, Vocab):
                raise TypeError(f"Translator: {name} must be a Vocab, got "
                                f"{type(vocab).__name__}")
        if not isinstance(backend, backends.Backend):
            raise TypeError(f"Translator: backend must be a Backend (xpseq.backends.get), "
                            f"got {type(backend).__name__}")
        self.params, self.config = params, config
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.backend = backend
        self.history = list(history)
        self.task = task
        self.metadata = dict(metadata or {})

    @classmethod
    def train(cls, task: Task, *, model: str = "rnn",
              backend: str | backends.Backend | None = None,
              epochs: int | None = None, lr: float | None = None,
              batch_size: int | None = None, warmup: int | None = None,
              dtype: str = "float32", seed: int = 0, progress: bool = True,
              tokens: str | Sequence[str] | None = None, **options: Any) -> Translator:
        """Train a model of kind ``model`` (``"rnn"`` or ``"transformer"``) on ``task``.

        Parameters
        ----------
        task : Task
            The data and vocabularies: :func:`xpseq.toy_task`,
            :func:`xpseq.tasks.task_from_pairs`.
        model : {"rnn", "transformer"}
            The LSTM encoder–decoder with attention, or the Transformer.
        backend : str, Backend or None
            A backend name or a :class:`~xpseq.backends.Backend` (such as
            ``backends.get("torch", compile=True)``); ``None`` for
            :func:`xpseq.backends.default` for training.
        epochs : int, optional
            At most this many epochs (training stops early after 3 epochs without a
            better dev loss).
        lr : float, optional
            Adam's step size.
        batch_size : int, optional
            Training sentences per batch.
        warmup : int, optional
            Steps of a linear warm-up then inverse-square-root decay (``0``: none).
            For ``epochs``, ``lr``, ``batch_size`` and ``warmup``, ``None`` takes the
            model kind's :data:`xpseq.tasks.experiment.TRAINING_DEFAULTS` (the RNN: at
            most 5 epochs of batches of 64 at 3e-3, no warm-up; the Transformer: 8 epochs
            of batches of 64 at 1e-3 after 400 warm-up steps).
        dtype : {"float32", "float64"}
            The parameters' dtype.
        seed : int
            The seed of the initial parameters, the batch order and the dropout masks.
        progress : bool
            A progress bar per epoch and a line per finished epoch.
        tokens : ``"word"``, ``"char"``, ``"SOURCE,TARGET"``, a (source, target) pair, or None
            How the task's sentences were split into tokens
            (:func:`xpseq.data.read_parallel_tsv`'s ``tokens``; a ``"bpe"`` or
            ``"unigram"`` side the :class:`xpseq.data.tokens.Side` of
            :func:`xpseq.data.tokens.train_sides` that split them): stored with the model, so
            that :meth:`translate` splits text and joins its output the same way, and
            :meth:`evaluate` scores the output as text. ``None``: a task made of tokens
            (the toy task): words in and out, BLEU over the tokens.
        **options
            The model's options (:class:`xpseq.models.rnn.Seq2SeqConfig`,
            :class:`xpseq.models.transformer.TransformerConfig`), e.g. ``hidden=64`` or
            ``d_model=128, heads=4``.

        Returns
        -------
        Translator
            The trained model, its ``history`` one dict per epoch (``train_loss``,
            ``dev_loss``, ...).

        Raises
        ------
        ValueError
            An unknown ``model``, a bad ``tokens``, or an option's value its
            configuration refuses (the message names it).
        TypeError
            An option the model kind does not have (the message suggests the closest).

        Examples
        --------
        >>> import xpseq
        >>> task = xpseq.toy_task(n_train=200, n_dev=20, n_test_per_bucket=5)
        >>> model = xpseq.Translator.train(task, epochs=1, backend="numpy",
        ...                                progress=False, hidden=16)
        >>> model.config.hidden, len(model.history)
        (16, 1)
        """
        name = "Translator.train"
        if not isinstance(task, Task):
            raise TypeError(f"{name}: task must be a Task (xpseq.toy_task(), "
                            f"xpseq.tasks.task_from_pairs(train, dev, test)), got "
                            f"{values.kind_of(task)}")
        model = values.choice(name, "model", model, ("rnn", "transformer"))
        epochs = values.integer(name, "epochs", epochs, low=1, optional=True)
        lr = values.real(name, "lr", lr, low=0, low_open=True, high=math.inf, high_open=True,
                         optional=True)
        batch_size = values.integer(name, "batch_size", batch_size, low=1, optional=True)
        warmup = values.integer(name, "warmup", warmup, low=0, optional=True)
        dtype = values.dtype_name(name, "dtype", dtype)
        seed = values.integer(name, "seed", seed, low=0)
        progress = values.flag(name, "progress", progress)
        metadata = {} if tokens is None else _tokens_metadata(tokens, f"{name}: tokens")
        be = backends.resolve(backend, "train")
        config = model_config(task, model, **options)
        settings = training_config(model, epochs=epochs, lr=lr, warmup=warmup, seed=seed,
                                   progress=progress)
        with backends.blas_threads():
            config, result = train_model(task, be, config, settings, batch_size=batch_size,
                                         dtype=dtype)
        params = {k: be.asarray(v) for k, v in result.params.items()}
        return cls(params, config, task.src_vocab, task.tgt_vocab, be,
                   history=result.history, task=task, metadata=metadata)

    @property
    def tokens(self) -> tuple[str, str]:
        """How the model reads its source and writes its target, ``(source, target)``, each
        ``"word"``, ``"char"``, ``"bpe"`` or ``"unigram"`` (:func:`xpseq.data.tokens.of_model`
        of its metadata; a subword side carries its tokenizer):
        :meth:`translate` splits a str sentence and joins the output this way."""
        return tok.of_model(self.metadata)

    @property
    def decoder(self) -> CheckpointDecoder:
        """The model as a :class:`~xpseq.search.Decoder` (its parameters on its backend)."""
        return CheckpointDecoder(self.params, self.config, self.src_vocab, self.tgt_vocab,
                                 self.backend, metadata=self.metadata)

    def translate(self, sentences: Iterable[str | Sequence[str]], *, beam: int = 1,
                  n_best: int = 1) -> list[Any]:
        """Translate sentences (plain text, or token lists), in order.

        Parameters
        ----------
        sentences : iterable of str or of token lists
            A list (or tuple, generator ...) of sentences: each a str, split as the model
            was trained (:attr:`tokens`: on whitespace, or into its characters), or a
            sequence of str tokens; not one str.
        beam : int
            Beam size (1: greedy search).
        n_best : int
            Translations per sentence (``<= beam``).

        Returns
        -------
        list
            One string per sentence, its tokens joined as the model writes its target
            (words with spaces, characters without); with ``n_best > 1`` a list of
            ``n_best`` strings per sentence, best first. Unknown tokens are read as
            ``<unk>``.

        Raises
        ------
        TypeError
            ``sentences`` is one str, not iterable, or holds an item that is neither a
            str nor a sequence of str (the error names its index and type).
        ValueError
            A bad ``beam`` or ``n_best`` (``n_best > beam``).

        Examples
        --------
        With ``model`` trained as the class's example trains it:

        >>> model.translate(["the cat sees the dog"])                   # doctest: +SKIP
        ['zo bolgat ... ']
        >>> model.translate([["the", "cat"]], beam=5, n_best=2)         # doctest: +SKIP
        [['...', '...']]
        """
        options = options_for(beam, n_best, caller="translate")
        src, tgt = self.tokens
        given = reading.iterate(sentences, "translate: sentences", of="sentences",
                                example="a list of str or of token lists",
                                forms="a list of str or of token lists")
        sources = [_sentence_tokens(i, s, src) for i, s in enumerate(given)]
        with backends.blas_threads():
            results = translate(self.decoder, sources, options)
        if n_best == 1:
            return [tok.join(r["tokens"], tgt) for r in results]
        return [[tok.join(h, tgt) for h in r["n_best"]] for r in results]

    def evaluate(self, pairs: Sequence[tuple[Any, ...]] | None = None, *,
                 beam: int = 1) -> dict[int | str, dict[str, Any]]:
        """BLEU (sacrebleu) and exact match, on ``pairs`` or by test bucket of the task
        it was trained on.

        Parameters
        ----------
        pairs : sequence of (source, target), optional
            Sentences and their reference translations, each a str (split as the model
            was trained, :attr:`tokens`) or a token list; ``None``: the test set of its
            task.
        beam : int
            Beam size (1: greedy search).

        Returns
        -------
        dict
            ``{bucket: {"bleu", "exact", "sentences"}}``: the toy task's buckets are its
            extra phrases, ints ``0`` to ``4``; ``pairs`` make one bucket, ``"test"``.
            BLEU is sacrebleu's corpus BLEU (0-100): over the tokens for a task made of
            tokens, over the joined text (tokenizer 13a, or char for characters) for a
            model trained with ``tokens``; exact the share of sentences translated
            exactly (0-1).

        Raises
        ------
        ValueError
            No ``pairs`` and no task with a test set (a loaded model), or a bad ``beam``.

        Examples
        --------
        >>> model.evaluate([("the cat sees the dog", "zo bolgat ...")])  # doctest: +SKIP
        {'test': {'bleu': 23.6, 'exact': 0.0, 'sentences': 1}}
        """
        from .experiment import bucket_table

        if pairs is None:
            if self.task is None or not self.task.test:
                raise ValueError("evaluate: this model knows no test set (it was loaded, or "
                                 "its task has none); pass pairs=[(source, target), ...]")
            test = self.task.test
        else:
            src, tgt = self.tokens
            test = {"test": [(tok.split(s, src) if isinstance(s, str) else list(s),
                              tok.split(t, tgt) if isinstance(t, str) else list(t))
                             for s, t in pairs]}
        task = Task([], [], test, self.src_vocab, self.tgt_vocab)
        options = options_for(beam, caller="evaluate")
        text = self.tokens[1] if tok.is_text_model(self.metadata) else None
        with backends.blas_threads():
            _, _, details = bucket_table({"model": self.decoder}, task, options, text=text)
        return {bucket: {"bleu": d["bleu"], "exact": d["exact"],
                         "sentences": len(test[bucket])}
                for bucket, d in details["model"].items()}

    def save(self, path: str | pathlib.Path, *, force: bool = False) -> pathlib.Path:
        """Write a checkpoint (:func:`xpseq.train.checkpoint.save`) that :func:`load`, and
        ``xpseq translate`` / ``evaluate`` read.

        Parameters
        ----------
        path : str or path-like
            The file to write (``.safetensors``), whole or not at all.
        force : bool
            Replace a file at ``path`` that xpseq did not write. An existing xpseq
            checkpoint is replaced without it.

        Returns
        -------
        pathlib.Path
            The file written.

        Raises
        ------
        xpseq.io.OutputRefused
            ``path`` is a file xpseq did not write, and ``force`` is False (a
            ``ValueError``).

        Examples
        --------
        >>> model.save("toy.safetensors")                               # doctest: +SKIP
        PosixPath('toy.safetensors')
        """
        from xpseq.train import checkpoint

        return checkpoint.save(path, config=self.config,
                               params={k: self.backend.to_numpy(v)
                                       for k, v in self.params.items()},
                               vocabs={"src": self.src_vocab.to_list(),
                                       "tgt": self.tgt_vocab.to_list()},
                               train_state={"history": self.history},
                               metadata=self.metadata or None, force=force)


def _tokens_metadata(value: Any, where: str) -> dict[str, Any]:
    """``value`` (:func:`xpseq.data.tokens.modes`) as a checkpoint stores it
    (:func:`xpseq.data.tokens.metadata_of`: a subword side with its tokenizer)."""
    pair = tok.modes(value, where)
    try:
        return tok.metadata_of(pair)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _sentence_tokens(index: int, sentence: Any, mode: str = "word") -> list[str]:
    """The tokens of ``sentences[index]``: a str split as the model reads its source
    (``mode``, :func:`xpseq.data.tokens.split`), or the str tokens of a sequence (any
    iterable but bytes)."""
    if isinstance(sentence, str):
        return tok.split(sentence, mode)
    if isinstance(sentence, (bytes, bytearray)) or not isinstance(sentence, Iterable):
        raise TypeError(f"translate: sentences[{index}] must be a str or a sequence of str "
                        f"tokens, got {type(sentence).__name__}")
    tokens = list(sentence)
    for j, token in enumerate(tokens):
        if not isinstance(token, str):
            raise TypeError(f"translate: sentences[{index}][{j}] must be a str token, got "
                            f"{type(token).__name__}")
    return tokens


def load(path: str | pathlib.Path, *,
         backend: str | backends.Backend | None = None) -> Translator:
    """A :class:`Translator` from a checkpoint, ready to translate.

    Any backend reads a checkpoint written on any other: its parameters are stored as
    NumPy arrays with their dtype.

    Parameters
    ----------
    path : str or path-like
        A checkpoint of :meth:`Translator.save`, ``xpseq train`` or ``xpseq demo``.
    backend : str, Backend or None
        A backend name or a :class:`~xpseq.backends.Backend` (such as
        ``backends.get("torch", compile=True)``); ``None``: :func:`xpseq.backends.default`
        for decoding.

    Returns
    -------
    Translator
        The model on ``backend``, its vocabularies, its training history (when the
        checkpoint holds one) and metadata; its ``task`` is None, so :meth:`~Translator.
        evaluate` needs pairs.

    Raises
    ------
    TypeError
        ``path`` is not a str or path-like.
    FileNotFoundError
        No file at ``path``.
    ValueError
        The file is no xpseq checkpoint, or one without vocabularies (a bare
        parameter file); a float64 checkpoint on JAX without its 64-bit mode.

    Examples
    --------
    >>> import xpseq
    >>> model = xpseq.load("toy.safetensors", backend="numpy")         # doctest: +SKIP
    >>> model.translate(["the cat sees the dog"])                      # doctest: +SKIP
    """
    from xpseq.train import checkpoint

    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise TypeError(f"load: path must be a str or path-like (a checkpoint file), got "
                        f"{type(path).__name__}")
    be = backends.resolve(backend, "decode")
    loaded = checkpoint.load(path)
    if not loaded.vocabs:
        raise ValueError(f"load: {path} holds no vocabularies; it cannot translate")
    params = {k: be.asarray(v) for k, v in loaded.params.items()}
    history = (loaded.train_state or {}).get("history", [])
    return Translator(params, loaded.config, Vocab.from_list(loaded.vocabs["src"]),
                      Vocab.from_list(loaded.vocabs["tgt"]), be, history=history,
                      metadata=loaded.metadata)
