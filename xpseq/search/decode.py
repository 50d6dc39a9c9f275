"""Decoding a trained model: greedy or beam search over its ``decode_step``, on any backend.

:func:`search` runs :func:`xpseq.core.decoding.greedy_search` or ``beam_search`` with the
model's step function (its kind's ``decoder``, see :mod:`xpseq.models`); on JAX the whole
search is one ``jax.jit`` program (kept per configuration, search options and padded source
length in :mod:`xpseq.backends.programs`). It returns NumPy arrays;
:func:`to_lists` turns them into Python lists with each hypothesis's attention trimmed to
its own length and its source's length.

The maximum output length is a function of the source length:
``max_len = ceil(max_len_a * src_len + max_len_b)`` for each sentence.

An :class:`Ensemble` of configurations, with a sequence of parameter dicts, decodes
several models as one: their log-probabilities are averaged at every step
(:func:`xpseq.core.decoding.ensemble_step`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping, cast

import numpy as np

from xpseq import models
from xpseq.backends import Backend, programs
from xpseq.core import kernels, values
from xpseq.core import precision as mixed
from xpseq.core.decoding import (
    LENGTH_PENALTIES,
    Hypotheses,
    beam_search,
    ensemble_step,
    greedy_search,
    tile_beams,
)
from xpseq.core.kernels import int_dtype
from xpseq.core.tree import map_leaves
from xpseq.data.batching import BOS_ID, EOS_ID, PAD_ID
from xpseq.models import check_ids

__all__ = ["SearchOptions", "Ensemble", "search", "run", "to_lists", "options_for", "MAX_BEAM"]

#: The largest beam (and n-best) the front doors accept: a batch keeps ``beam`` hypotheses
#: of every sentence, with their attention, so memory grows with it (10,000 asked 1.3 GB
#: for one word).
MAX_BEAM = 64


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """How to decode. ``k = 1`` with ``method="greedy"`` is greedy search.

    Attributes
    ----------
    method : {"greedy", "beam"}
    k : int
        Beam size.
    n_best : int
        Hypotheses returned per sentence (``<= k``).
    length_penalty : {"none", "avg", "gnmt"}
        How beam search ranks hypotheses of different lengths (``"avg"``, the mean
        log-probability per token, by default, as on the command line; greedy search
        ignores it).
    alpha : float
        The GNMT exponent.
    min_len : int
        No ``</s>`` before this many tokens.
    max_len_a, max_len_b : float
        ``max_len = ceil(a · src_len + b)`` per sentence.
    attention : bool
        Return each hypothesis's attention weights (``False`` skips keeping them: beam
        search then moves no ``(B, k, L, S)`` buffers, which is most of its work).
    precision : None or "bf16"
        ``None`` (the parameters' dtype) or ``"bf16"``: decode with the parameters cast
        to bfloat16, the scores accumulated in float32 (:mod:`xpseq.core.precision`; JAX
        and PyTorch).
    """

    method: str = "greedy"
    k: int = 1
    n_best: int = 1
    length_penalty: str = "avg"
    alpha: float = 0.6
    min_len: int = 0
    max_len_a: float = 2.0
    max_len_b: float = 5.0
    attention: bool = True
    precision: mixed.Policy | str | None = None

    @property
    def policy(self) -> mixed.Policy:
        """``precision`` as the :class:`~xpseq.core.precision.Policy` it was made into."""
        return cast(mixed.Policy, self.precision)

    def __post_init__(self) -> None:
        name = "SearchOptions"
        fix = functools.partial(object.__setattr__, self)       # frozen: set the normalised
        # The policy made once here (a name given becomes a Policy).
        fix("precision", mixed.Policy.of(self.precision, "SearchOptions: precision"))
        fix("method", values.choice(name, "method", self.method, ("greedy", "beam")))
        fix("k", values.integer(name, "k", self.k, low=1, high=MAX_BEAM))
        fix("n_best", values.integer(name, "n_best", self.n_best, low=1, high=self.k))
        fix("length_penalty", values.choice(name, "length_penalty", self.length_penalty,
                                            LENGTH_PENALTIES))
        fix("alpha", values.real(name, "alpha", self.alpha, low=0, high=math.inf,
                                 high_open=True))
        fix("min_len", values.integer(name, "min_len", self.min_len, low=0))
        fix("max_len_a", values.real(name, "max_len_a", self.max_len_a, low=0, high=math.inf,
                                     high_open=True))
        fix("max_len_b", values.real(name, "max_len_b", self.max_len_b, low=1, high=math.inf,
                                     high_open=True))
        fix("attention", values.flag(name, "attention", self.attention))
        if self.method == "greedy" and (self.k != 1 or self.n_best != 1):
            raise ValueError("SearchOptions: greedy search has k = 1 and n_best = 1; use "
                             "method='beam'")


def options_for(beam: int, n_best: int = 1, *, caller: str = "search",
                attention: bool = False) -> SearchOptions:
    """The :class:`SearchOptions` of ``beam`` (1: greedy search) and ``n_best``, checked
    for a front-door function named ``caller``: both ints in ``[1, MAX_BEAM]``,
    ``n_best <= beam``."""
    beam = values.integer(caller, "beam", beam, low=1)
    n_best = values.integer(caller, "n_best", n_best, low=1)
    attention = values.flag(caller, "attention", attention)
    for name, value in (("beam", beam), ("n_best", n_best)):
        if value > MAX_BEAM:
            raise ValueError(f"{caller}: {name} must be at most {MAX_BEAM} (memory grows with "
                             f"it), got {value}")
    if n_best > beam:
        raise ValueError(f"{caller}: n_best ({n_best}) must be at most beam ({beam})")
    if beam == 1:
        return SearchOptions(attention=attention)
    return SearchOptions(method="beam", k=beam, n_best=n_best, attention=attention)


@dataclasses.dataclass(frozen=True)
class Ensemble:
    """Several trained models decoded as one: pass ``Ensemble((config_1, ..., config_m))``
    as :func:`search`'s ``config`` and the members' parameters, in the same order, as its
    ``params``. At every step the members' log-probabilities are averaged and renormalised
    (:func:`xpseq.core.decoding.ensemble_step`). The members may be of different kinds;
    they must have the same vocabulary sizes (that their vocabularies are the same lists
    is the caller's to check, e.g. from their checkpoints)."""

    configs: tuple[Any, ...]

    def __post_init__(self) -> None:
        if isinstance(self.configs, (str, bytes)) or not hasattr(self.configs, "__iter__"):
            raise TypeError(f"Ensemble: configs must be a sequence of model configurations, "
                            f"got {type(self.configs).__name__}")
        configs = tuple(self.configs)
        if not configs:
            raise ValueError("Ensemble: configs must hold at least one model configuration")
        for config in configs:
            models.of(config)              # a TypeError names what is not a configuration
        for name in ("src_vocab", "tgt_vocab"):
            values = [getattr(c, name) for c in configs]
            if len(set(values)) > 1:
                raise ValueError(f"Ensemble: the members' {name} differ ({values}); an "
                                 "ensemble needs one vocabulary")
        object.__setattr__(self, "configs", configs)

    @property
    def src_vocab(self) -> int:
        return cast(int, self.configs[0].src_vocab)

    @property
    def tgt_vocab(self) -> int:
        return cast(int, self.configs[0].tgt_vocab)


def _members(params: Any, config: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``(configs, params)`` of the models a search runs: one, or an ensemble's members."""
    if not isinstance(config, Ensemble):
        return (config,), (params,)
    if isinstance(params, Mapping) or len(params) != len(config.configs):
        raise ValueError(f"search: an Ensemble of {len(config.configs)} models needs a "
                         f"sequence of as many parameter dicts, got "
                         f"{type(params).__name__}"
                         f"{'' if isinstance(params, Mapping) else f' of {len(params)}'}")
    return config.configs, tuple(params)


def _search_arrays(params: Any, src: Any, src_len: Any, *, config: Any,
                   options: SearchOptions, max_len: int, backend: Backend) -> Hypotheses:
    xp = backend.xp
    configs, member_params = _members(params, config)
    member_params = tuple(mixed.cast_params(p, options.precision, xp=xp)
                          for p in member_params)
    plan = backend.search_plan(max_len)
    capacity = plan.capacity
    encoded = tuple(models.of(c).kernels.encode(p, c, src, src_len, scan=backend.scan, xp=xp)
                    for c, p in zip(configs, member_params))

    def decoder(encoded: tuple[Any, ...]) -> tuple[Any, Any]:
        pairs: list[tuple[Any, Any]] = [
            models.of(c).kernels.decoder(p, c, e, attention=options.attention,
                                         max_len=capacity, xp=xp)
            for c, p, e in zip(configs, member_params, encoded)]
        if plan.compiled_step:     # the same first states, and each member's step compiled
            pairs = [(_bind(compiled_step(c, options.attention, backend), p, e,
                            cast(int, capacity)),     # compiled: capacity is max_len
                      state) for c, p, e, (_, state) in zip(configs, member_params, encoded,
                                                            pairs)]
        if len(pairs) == 1:
            return pairs[0]
        return ensemble_step([s for s, _ in pairs]), tuple(state for _, state in pairs)

    return run(decoder, encoded, src_len, options=options, max_len=max_len, xp=xp,
               scan=plan.scan, narrowing=plan.narrowing)


def run(decoder: Any, encoded: Any, src_len: Any, *, options: SearchOptions,
        max_len: int, xp: Any, scan: Any = None, narrowing: bool = True) -> Hypotheses:
    """Greedy or beam search (``options``) of the ``src_len.shape[0]`` sentences over
    ``decoder(encoded) -> (step, state)``: the protocol's step (``step(state, y_prev) ->
    (log_probs, state, attention)``) over ``encoded`` (any tree of arrays with the batch
    on axis 0) and its first state. Beam search calls ``decoder`` on ``encoded`` with each
    row repeated ``k`` times; greedy search with ``narrowing`` calls it on the rows of the
    sentences still decoding. What :func:`search` runs, and the decoding of an ONNX export
    (:mod:`xpseq.export`), whose step is an onnxruntime session."""
    # ceil(a n + b) in float64 where the library has it (not JAX outside its 64-bit mode)
    ints = int_dtype(xp)
    wide = xp.float64 if ints == xp.int64 else xp.float32
    limits = xp.astype(xp.ceil(options.max_len_a * xp.astype(src_len, wide)
                               + options.max_len_b), ints)
    batch = src_len.shape[0]
    if options.method == "greedy":
        step, state = decoder(encoded)

        def narrow(rows: Any) -> Any:      # the step of those sentences alone
            return decoder(map_leaves(lambda x: xp.take(x, rows, axis=0), encoded))[0]

        return greedy_search(step, state, batch_size=batch, bos_id=BOS_ID, eos_id=EOS_ID,
                             pad_id=PAD_ID, max_len=max_len, max_lens=limits,
                             min_len=options.min_len, scan=scan,
                             narrow=narrow if narrowing else None)
    step, state = decoder(tile_beams(encoded, options.k))
    return beam_search(step, state, batch_size=batch,
                       k=options.k, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID,
                       max_len=max_len, max_lens=limits, min_len=options.min_len,
                       length_penalty=options.length_penalty, alpha=options.alpha,
                       n_best=options.n_best, scan=scan)


#: torch.compile's ``dynamic=`` for :func:`compiled_step`: ``None``, automatic dynamic
#: shapes (static for the first batch shape, then its changed sizes symbolic), as every
#: search brings a new batch size, source length and ``max_len``; see
#: :mod:`xpseq.backends._torch` for the measurement.
STEP_DYNAMIC = None


def compiled_step(config: Any, attention: bool, backend: Backend) -> Any:
    """The decoder step of ``config`` as one compiled function of everything it reads,
    ``step(params, encoded, state, y_prev, max_len) -> (log_probs (N, V), state, attention
    (N, S) or None)`` (the model's ``decoder`` step for at most ``max_len`` steps, see
    :mod:`xpseq.models`), for a backend made with ``backends.get("torch", compile=True)``:
    ``backend.compile_piece`` of it, built once per configuration and kept in
    :mod:`xpseq.backends.programs`, so that every search reuses its graphs.

    The search around it stays an eager loop that stops when every sentence is finished;
    the state has fixed shapes (a key/value cache of ``max_len`` positions, as under
    ``jax.jit``), so that one graph serves every step of a search, and with dynamic shapes
    every search after the first batch shape (see :mod:`xpseq.backends._torch`)."""
    model = models.of(config)

    def build() -> Any:
        def step(params: Any, encoded: Any, state: Any, y: Any, max_len: int) -> tuple[Any, ...]:
            run, _ = model.kernels.decoder(params, config, encoded, attention=attention,
                                           max_len=max_len, xp=backend.xp)
            return cast(tuple[Any, ...], run(state, y))

        return backend.compile_piece(step, dynamic=STEP_DYNAMIC)

    return programs.cached("decoder_step", (config, attention, backend.cache_key), build)


def _bind(step: Any, params: Any, encoded: Any, max_len: int) -> Any:
    """:func:`compiled_step`'s ``step`` as the protocol's ``step(state, y_prev)``."""
    return lambda state, y: step(params, encoded, state, y, max_len)


def search(params: Any, config: Any, src: np.ndarray,
           src_len: np.ndarray, backend: Backend,
           options: SearchOptions = SearchOptions()) -> Hypotheses:
    """Decode a batch of sources.

    Parameters
    ----------
    params : dict of arrays
        The model's parameters as arrays of ``backend`` (for an :class:`Ensemble`, a
        sequence of its members' parameters).
    config : model configuration or Ensemble
        The model's configuration, or an :class:`Ensemble`.
    src : integer array, shape ``(B, S)``
        The sources, padded.
    src_len : integer array, shape ``(B,)``
        Their real lengths.
    options : SearchOptions
        How to decode.

    Returns
    -------
    Hypotheses
        Of NumPy arrays: tokens ``(B, n, L)``, lengths, scores, ranking, attention
        ``(B, n, L, S)`` (``None`` without attention); ``L = ceil(a · S + b)``.
    """
    import array_api_compat.numpy as np_xp

    src_np, len_np = np.asarray(src), np.asarray(src_len)
    _members(params, config)
    mixed.compute_dtype(options.precision, xp=backend.xp)     # no bfloat16: a clear error
    check_ids("search", config, np_xp, src=src_np, src_len=len_np)
    max_len = math.ceil(options.max_len_a * src_np.shape[1] + options.max_len_b)
    if options.min_len >= max_len:
        raise ValueError(f"search: min_len ({options.min_len}) must be below the longest "
                         f"output ({max_len})")

    def build() -> Any:
        def program(params: Any, src: Any, src_len: Any) -> Hypotheses:
            return _search_arrays(params, src, src_len, config=config, options=options,
                                  max_len=max_len, backend=backend)

        return backend.compile_program(program)

    program = programs.cached("search", (config, options, max_len, backend.cache_key), build)
    hyp = program(params, backend.asarray(src_np), backend.asarray(len_np))
    # A bfloat16 model's attention weights are returned in float32, as NumPy has no bfloat16.
    return Hypotheses(*(None if x is None
                        else backend.to_numpy(kernels.widened(x, xp=backend.xp)) for x in hyp))


def to_lists(hyp: Hypotheses, src_len: np.ndarray, *,
             keep_eos: bool = False) -> list[list[dict[str, Any]]]:
    """Per sentence, per hypothesis: ``{"tokens", "score", "ranking", "attention"}``.

    ``tokens`` excludes ``</s>`` unless ``keep_eos``; ``attention`` is a NumPy array of
    shape ``(generated tokens including </s>, src_len)`` (or ``None``).
    """
    out = []
    for b in range(hyp.tokens.shape[0]):
        sentence = []
        for j in range(hyp.tokens.shape[1]):
            n = int(hyp.lengths[b, j])
            ids = [int(t) for t in hyp.tokens[b, j, :n]]
            if ids and ids[-1] == EOS_ID and not keep_eos:
                ids = ids[:-1]
            attention = None
            if hyp.attention is not None:
                attention = np.array(hyp.attention[b, j, :n, :int(src_len[b])])
            sentence.append({"tokens": ids, "score": float(hyp.scores[b, j]),
                             "ranking": float(hyp.ranking[b, j]), "attention": attention})
        out.append(sentence)
    return out
