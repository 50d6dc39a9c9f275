"""The one door for decoding: a :class:`Decoder` is a trained model ready to decode,
whatever runs it.

Two implementations: :class:`CheckpointDecoder`, a model's parameters on a backend (one
model, or an :class:`~xpseq.search.Ensemble`), and :class:`xpseq.export.runtime.OnnxModel`,
an ONNX export on onnxruntime. :func:`xpseq.load_decoder` chooses by what it is given (a
checkpoint file or an export folder); :func:`xpseq.tasks.translate`, ``Translator``,
``G2P`` and the commands decode through it and never ask which one they have.

>>> import numpy as np
>>> from xpseq import backends, models
>>> from xpseq.data import Vocab
>>> from xpseq.search import CheckpointDecoder, SearchOptions
>>> config = models.get("rnn").Config(src_vocab=6, tgt_vocab=6, embed=4, hidden=3)
>>> params = models.get("rnn").init_params(config, seed=0)
>>> vocab = Vocab.from_list(["<pad>", "<unk>", "<s>", "</s>", "a", "b"])
>>> decoder = CheckpointDecoder(params, config, vocab, vocab, backends.get("numpy"))
>>> hyp = decoder.search(np.array([[4, 5, 3]]), np.array([3]), SearchOptions())
>>> hyp.tokens.shape[:2]
(1, 1)
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Mapping, Protocol, Sequence, cast, runtime_checkable

import numpy as np

from xpseq import models
from xpseq.backends import Backend
from xpseq.core.decoding import Hypotheses
from xpseq.core.precision import Policy
from xpseq.data import Vocab, make_batches
from xpseq.io import reading
from xpseq.io.reading import MAX_TOKENS

from .decode import Ensemble, SearchOptions, search, to_lists

__all__ = ["Decoder", "CheckpointDecoder", "translate", "LongSourceWarning"]


@runtime_checkable
class Decoder(Protocol):
    """What decoding needs of a trained model.

    Its method: ``search(src, src_len, options)``, greedy or beam search of a padded
    batch of NumPy ids ``(B, S)`` with their lengths ``(B,)``, NumPy results
    (:func:`xpseq.search.search`'s :class:`~xpseq.core.decoding.Hypotheses`).

    Attributes
    ----------
    src_vocab, tgt_vocab : Vocab
        The vocabularies of its sources and outputs.
    config : a model configuration (an :class:`Ensemble` of them for an ensemble)
        What model it decodes with (what a report names it by; its parameters are the
        decoder's own business).
    metadata : dict
        What the model says it was trained for (``task``; for a G2P model ``stress`` and
        ``tokens``), empty when it says nothing.
    name : str
        How a message names it: the backend (``"numpy"``, ``"torch with torch.compile"``)
        or ``"onnxruntime"``.
    batch_sizes : tuple of int or None
        The row counts :func:`translate` pads a batch of sources to (each a compilation
        of the search: :attr:`xpseq.backends.SearchPlan.batch_sizes`), or ``None``.
    precision : Policy
        The precision it decodes in (an export's: its own dtype, ``Policy(None)``).
    """

    src_vocab: Vocab
    tgt_vocab: Vocab
    config: Any
    metadata: dict[str, Any]
    batch_sizes: tuple[int, ...] | None
    precision: Policy

    @property
    def name(self) -> str: ...

    def search(self, src: np.ndarray, src_len: np.ndarray,
               options: SearchOptions = ...) -> Hypotheses: ...


class CheckpointDecoder:
    """A model's parameters on a backend as a :class:`Decoder`.

    Parameters
    ----------
    params : dict of arrays, or a sequence of them for an :class:`Ensemble`
        The parameters (NumPy arrays are converted to ``backend``'s, their dtype kept).
    config : a model configuration, or an :class:`Ensemble` of them
    src_vocab, tgt_vocab : Vocab
    backend : Backend
    metadata : dict, optional
        What the model was trained for (a checkpoint's metadata).
    precision : :class:`~xpseq.core.precision.Policy`
        Decode in this precision unless the search options ask for one
        (``Policy("bf16")``; :func:`xpseq.load_decoder` takes the name).

    Raises
    ------
    TypeError
        ``precision`` is not a :class:`~xpseq.core.precision.Policy`.
    ValueError
        The backend has no bfloat16 for ``precision``.
    """

    def __init__(self, params: Any, config: Any, src_vocab: Vocab, tgt_vocab: Vocab,
                 backend: Backend, *, metadata: Mapping[str, Any] | None = None,
                 precision: Policy = Policy()) -> None:
        self.config = config
        self.backend = backend
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.metadata = dict(metadata or {})
        self.precision = Policy.given(precision, "CheckpointDecoder: precision")
        self.precision.compute_dtype(backend.xp)        # no bfloat16: a clear error
        self.batch_sizes = backend.search_plan().batch_sizes
        if isinstance(config, Ensemble):
            self.params: Any = [backend.asarray_tree(dict(p)) for p in params]
        else:
            self.params = backend.asarray_tree(dict(params))

    @property
    def name(self) -> str:
        return self.backend.label

    def __repr__(self) -> str:
        what = "an ensemble" if isinstance(self.config, Ensemble) else \
            f"a {models.of(self.config).kind} model"
        return f"<CheckpointDecoder of {what} on {self.name}>"

    def search(self, src: np.ndarray, src_len: np.ndarray,
               options: SearchOptions = SearchOptions()) -> Hypotheses:
        """:func:`xpseq.search.search` of the batch, in the decoder's precision unless
        ``options`` asks for one."""
        if self.precision.reduced and not options.policy.reduced:
            options = dataclasses.replace(options, precision=self.precision)
        return search(self.params, self.config, src, src_len, self.backend, options)


class LongSourceWarning(UserWarning):
    """A source sentence was longer than :func:`translate`'s ``max_tokens`` and was cut
    to that many tokens."""


def translate(decoder: Decoder, sources: Sequence[Sequence[str]],
              options: SearchOptions = SearchOptions(), *,
              batch_size: int = 256, shapes: int | None = None,
              progress: bool | str = False,
              max_tokens: int | None = MAX_TOKENS) -> list[dict[str, Any]]:
    """Translate token lists with ``decoder`` (a :class:`~xpseq.search.Decoder`: a
    checkpoint on a backend, :func:`xpseq.load_decoder`, or an ONNX export); results come
    back in the order of ``sources``.

    Each result: ``tokens`` (the output words), ``score`` (its summed log-probability),
    ``n_best`` and ``n_best_scores`` (every hypothesis kept, best first), ``attention`` of
    shape ``(rows, len(source) + 1)`` over the source and its ``</s>``; the rows are the output
    words and the ``</s>`` that ended it (``len(tokens) + 1`` rows), or only the words
    when the output was cut at its length limit without ``</s>``.
    Unknown source words become ``<unk>``; an empty source translates to an empty output
    (no search: ``tokens`` ``[]``, score 0, attention of shape ``(0, 1)``). A source of
    more than ``max_tokens`` tokens (default :data:`xpseq.io.reading.MAX_TOKENS`, 1000;
    ``None``: no bound) is cut to that many, with a :class:`LongSourceWarning` (the
    search's memory grows with the source's length).
    A model whose best score for a source is not finite (weights that overflow) raises a
    ``FloatingPointError`` instead of an empty or wrong answer.
    ``shapes`` bounds the batches' shapes, each a compilation of the search on JAX (see
    :func:`xpseq.data.make_batches`); a batch's rows are padded to the decoder's
    ``batch_sizes``. ``progress``: a tqdm bar of the sources decoded, on
    standard error (a str: its label).
    """
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"translate: max_tokens must be a positive int or None, got "
                         f"{max_tokens!r}")
    src_vocab, tgt_vocab = decoder.src_vocab, decoder.tgt_vocab
    results: list[dict[str, Any] | None] = [None] * len(sources)
    cut = [reading.cut_tokens(s, max_tokens) for s in sources]
    if any(n for _, n in cut):
        longest = max(len(s) for s in sources)
        warnings.warn(LongSourceWarning(
            f"{sum(1 for _, n in cut if n)} source sentence(s) longer than {max_tokens} "
            f"tokens (the longest {longest}) cut to {max_tokens}"), stacklevel=2)
    for i, (tokens, _) in enumerate(cut):
        if not tokens:                      # nothing to translate: an empty output
            results[i] = {"tokens": [], "ids": [], "score": 0.0,
                          "attention": np.zeros((0, 1)), "n_best": [[]],
                          "n_best_scores": [0.0]}
    keep = [i for i, (tokens, _) in enumerate(cut) if tokens]
    pairs: list[tuple[Any, list[int]]] = [(src_vocab.encode(cut[i][0], add_eos=True), [])
                                          for i in keep]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(keep), unit=" sentences", leave=False,
                   desc=progress if isinstance(progress, str) else None)
    for batch in make_batches(pairs, batch_size, bucket=8, shapes=shapes,
                                           rows=decoder.batch_sizes) if pairs else []:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # checked below
            hyp = decoder.search(batch["src"], batch["src_len"], options)
        top_scores = np.asarray(hyp.scores)[:, 0][np.asarray(batch["index"]) >= 0]
        if not np.all(np.isfinite(top_scores)):
            raise FloatingPointError(
                "translate: the model's scores are not finite (a NaN or infinite "
                "log-probability): its weights overflow in the dtype it decodes in, or are "
                "damaged; no translation is given")
        for i, best in zip(batch["index"], to_lists(hyp, batch["src_len"])):
            if i < 0:                                    # a row that only fills the shape
                continue
            top = best[0]
            results[keep[int(i)]] = {
                "tokens": tgt_vocab.decode(top["tokens"]), "ids": top["tokens"],
                "score": top["score"], "attention": top["attention"],
                "n_best": [tgt_vocab.decode(h["tokens"]) for h in best],
                "n_best_scores": [h["score"] for h in best]}
        if bar is not None:
            bar.update(int(np.sum(np.asarray(batch["index"]) >= 0)))
    if bar is not None:
        bar.close()
    return cast(list[dict[str, Any]], results)                # every source translated
