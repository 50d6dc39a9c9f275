"""Training: a step built from a model, an optimiser and a backend, and the loop around it.

The step is the same code on every backend::

    loss, grads = backend.value_and_grad(model loss)(params)     # jax.grad / tape / by hand
    grads = clip_by_global_norm(grads, clip_norm)                 # optional
    params, opt_state = optimizer.update(grads, opt_state, params)

On JAX the whole step is ``jax.jit``-compiled and the recurrences run in ``lax.scan``; a new
batch shape triggers a new trace, so batches are padded to a few bucketed shapes
(:func:`xpseq.data.batching.make_batches`) and ``TrainStep.traces`` counts the traces. On
PyTorch the gradients come from the autograd tape. NumPy (and array_api_strict) run the
hand-derived backward pass (:func:`xpseq.models.loss_and_grad`, built from the rules of
:mod:`xpseq.core.vjp`), attached to the loss with ``defvjp``.

Dropout masks are drawn from ``(seed, step)`` (see ``Backend.dropout_keep``), and the batch
order of each epoch from ``(seed, epoch)``, so a run resumed from a checkpoint takes exactly
the steps the uninterrupted run would have taken.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from typing import Any, Callable, Mapping, Sequence

import array_api_compat.numpy
import numpy as np

from xpseq.backends import Backend
from xpseq.core.losses import _nll_sum
from xpseq.core.optim import Optimizer, adam, clip_by_global_norm
from xpseq.core.vjp import defvjp
from xpseq.models.seq2seq import Seq2SeqConfig, _forward, _loss, _loss_vjp, check_ids

__all__ = ["TrainStep", "make_train_step", "make_eval_loss", "evaluate_loss", "fit", "FitResult",
           "check_batch"]

Batch = Mapping[str, np.ndarray]


class TrainStep:
    """``step(params, opt_state, batch, seed=0) -> (params, opt_state, loss)`` on one backend.

    ``batch`` holds backend arrays (``src``, ``src_len``, ``tgt_in``, ``tgt_out``); ``seed``
    and ``opt_state["step"]`` draw the dropout masks (on JAX the seed is traced, so a new
    seed does not recompile).
    ``traces`` counts how often the Python body ran: on JAX, once per compiled batch shape;
    on the eager backends, once per call.
    """

    def __init__(self, fn: Callable, backend: Backend):
        self._fn = fn
        self.backend = backend
        self.traces = 0

    def __call__(self, params: dict, opt_state: dict, batch: Mapping[str, Any],
                 seed: int = 0) -> tuple:
        return self._fn(params, opt_state, batch, seed)


_STEPS: dict = {}


GRADIENTS = ("autodiff", "hand-derived")


def make_train_step(config: Seq2SeqConfig, optimizer: Optimizer, backend: Backend, *,
                    clip_norm: float | None = None,
                    gradients: str | None = None) -> TrainStep:
    """The training step of ``config`` for ``backend`` (built once, then cached).

    Steps are cached by config, optimiser name and hyperparameters, ``clip_norm``,
    ``gradients`` and backend, so calling :func:`fit` again reuses JAX's compilations.

    Parameters
    ----------
    optimizer : an :class:`xpseq.core.optim.Optimizer` (e.g. ``adam(1e-3)``)
    clip_norm : float, optional
        Clip the gradients to this global norm before the update.
    gradients : ``None`` (the backend's own: ``backend.gradients``), ``"autodiff"`` or
        ``"hand-derived"``
        ``"hand-derived"`` runs the backward pass of :mod:`xpseq.core.vjp` (what NumPy
        always does) on the backend's arrays; on PyTorch that means no autograd tape is
        recorded, and the step is faster (``scripts/bench.py`` measures it). On JAX, whose
        ``jit`` would unroll the whole pass's Python loops over the time steps, it means
        the encoder's recurrences: their backward is the hand-derived step rules in a
        reverse ``lax.scan`` (a ``jax.custom_vjp``, see
        :class:`xpseq.backends._jax.RuleScan`), the rest is ``jax.grad``.
        ``"autodiff"`` needs JAX or PyTorch.
    """
    gradients = _check_gradients(backend, gradients)
    key = (config, optimizer.name, tuple(sorted(optimizer.hyperparams.items())), clip_norm,
           backend.name, gradients)
    if key not in _STEPS:
        _STEPS[key] = _build_train_step(config, optimizer, backend, clip_norm, gradients)
    return _STEPS[key]


def _check_gradients(backend: Backend, gradients: str | None) -> str:
    if gradients is None:
        return backend.gradients
    if gradients not in GRADIENTS:
        raise ValueError(f"gradients must be None or one of {list(GRADIENTS)}, "
                         f"got {gradients!r}")
    if gradients == "autodiff" and backend.gradients != "autodiff":
        raise ValueError(f"gradients='autodiff' needs a backend with automatic "
                         f"differentiation (jax or torch); {backend.name} has hand-derived "
                         "gradients only")
    return gradients


def _build_train_step(config: Seq2SeqConfig, optimizer: Optimizer, backend: Backend,
                      clip_norm: float | None, gradients: str) -> TrainStep:
    xp = backend.xp
    # A compiling backend asked for hand-derived gradients differentiates the loss itself
    # but runs the encoder's recurrences with their hand-derived custom VJP.
    rules_inside = gradients == "hand-derived" and backend.compiles
    scan = backend.rule_scan if rules_inside else backend.scan

    def loss_of(params: dict, batch: Mapping[str, Any], keep: Any) -> Any:
        return _loss(params, config, batch, keep, scan=scan, xp=xp)

    # JAX and PyTorch differentiate loss_of themselves; NumPy and array_api_strict (and
    # PyTorch asked for gradients="hand-derived") run the hand-derived backward pass
    # attached here.
    defvjp(loss_of, lambda params, batch, keep: _loss_vjp(params, config, batch, keep, xp=xp))
    if gradients == "hand-derived" and not rules_inside:
        grad_fn = Backend.value_and_grad(backend, loss_of)
    else:
        grad_fn = backend.value_and_grad(loss_of)

    def step(params: dict, opt_state: dict, batch: Mapping[str, Any], seed: Any) -> tuple:
        train_step.traces += 1
        keep = None
        if config.dropout > 0:
            shape = (*batch["tgt_in"].shape, config.decoder_size)
            keep = backend.dropout_keep(seed, opt_state["step"], shape, config.dropout)
        value, grads = grad_fn(params, batch, keep)
        if clip_norm is not None:
            grads, _ = clip_by_global_norm(grads, clip_norm)
        params, opt_state = optimizer.update(grads, opt_state, params)
        return params, opt_state, value

    train_step = TrainStep(backend.jit(step), backend)
    return train_step


_EVALS: dict = {}


def make_eval_loss(config: Seq2SeqConfig, backend: Backend) -> Callable:
    """``fn(params, batch) -> (summed nll, number of real tokens)`` without dropout (jitted
    on JAX, cached per config and backend); sum both over batches for a corpus loss per
    token."""
    key = (config, backend.name)
    if key not in _EVALS:
        _EVALS[key] = _build_eval_loss(config, backend)
    return _EVALS[key]


def _build_eval_loss(config: Seq2SeqConfig, backend: Backend) -> Callable:
    xp = backend.xp

    def nll(params: dict, batch: Mapping[str, Any]) -> tuple:
        logits, _ = _forward(params, config, batch["src"], batch["src_len"], batch["tgt_in"],
                             None, scan=backend.scan, xp=xp)
        return _nll_sum(logits, batch["tgt_out"], config.pad_id, xp=xp)

    return backend.jit(nll)


def check_batch(config: Seq2SeqConfig, batch: Batch) -> None:
    """Validate a NumPy batch against ``config`` once, before it reaches the (unchecked,
    possibly jitted) training step: dtypes, shapes, id and length ranges."""
    missing = [k for k in ("src", "src_len", "tgt_in", "tgt_out") if k not in batch]
    if missing:
        raise ValueError(f"batch is missing {missing}")
    arrays = {name: np.asarray(batch[key]) for name, key in
              (("src", "src"), ("src_len", "src_len"), ("tgt", "tgt_in"), ("tgt_out", "tgt_out"))}
    check_ids("check_batch", config, array_api_compat.numpy, **arrays)
    if np.shape(batch["tgt_in"]) != np.shape(batch["tgt_out"]):
        raise ValueError("batch: tgt_in and tgt_out must have the same shape")
    if np.all(np.asarray(batch["tgt_out"]) == config.pad_id):
        raise ValueError("batch: every target token is padding")


def to_backend(backend: Backend, tree: Any) -> Any:
    """NumPy arrays (alone or in dicts) converted to ``backend``."""
    if isinstance(tree, Mapping):
        return {k: to_backend(backend, v) for k, v in tree.items()}
    return backend.asarray(tree)


def to_numpy(backend: Backend, tree: Any) -> Any:
    """Backend arrays (alone or in dicts) converted to NumPy."""
    if isinstance(tree, Mapping):
        return {k: to_numpy(backend, v) for k, v in tree.items()}
    return backend.to_numpy(tree)


def evaluate_loss(eval_loss: Callable, backend: Backend, params: dict,
                  batches: Sequence[Batch]) -> float:
    """Mean negative log-likelihood per real target token over ``batches``."""
    total, count = 0.0, 0.0
    for batch in batches:
        s, n = eval_loss(params, to_backend(backend, batch))
        total += float(backend.to_numpy(s))
        count += float(backend.to_numpy(n))
    return total / count


@dataclasses.dataclass
class FitResult:
    """What :func:`fit` returns: NumPy parameters and optimiser state, and the history.

    ``history`` has one dict per finished epoch: ``epoch``, ``train_loss`` (mean per real
    token), ``dev_loss`` (or ``None``), ``steps`` (total so far) and ``traces`` (how many
    times the training step was traced in that epoch: JAX compilations, 0 once every
    batch shape has been seen; ``None`` on backends that do not compile) and ``seconds``
    (wall time of the epoch, compilation and dev evaluation included), ``elapsed``
    (seconds since the call began, at the epoch's end), and what ``on_epoch`` added.
    ``stopped`` says why the loop ended: ``"epochs"``, ``"early_stop"``, ``"max_steps"`` or
    ``"time_limit"``. ``traces`` is the total over this call. ``best_epoch`` is the epoch
    with the lowest dev loss, or the lowest value of ``fit``'s ``monitor`` (``None``
    without dev batches); with ``restore_best`` the returned ``params`` are that epoch's.
    """

    params: dict
    opt_state: dict
    history: list
    stopped: str
    traces: int | None
    train_state: dict
    best_epoch: int | None = None


def _is_number(value: Any, low: float, high: float) -> bool:
    """A real number (not a bool) strictly between ``low`` and ``high``."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and low < value < high)


def fit(config: Seq2SeqConfig, params: Mapping[str, np.ndarray], train_batches: Sequence[Batch],
        backend: Backend, *, dev_batches: Sequence[Batch] = (), optimizer: Optimizer | None = None,
        epochs: int = 10, patience: int = 2, min_delta: float = 0.0,
        clip_norm: float | None = 5.0, seed: int = 0, max_steps: int | None = None,
        checkpoint: str | pathlib.Path | None = None, checkpoint_every: int | None = None,
        resume: Any = None, vocabs: Mapping[str, list] | None = None,
        metadata: Mapping[str, Any] | None = None, progress: bool = True,
        restore_best: bool = False, time_limit: float | None = None,
        lr_decay: float | None = None, monitor: str = "dev_loss",
        on_epoch: Callable[[dict, dict], Mapping[str, Any] | None] | None = None,
        gradients: str | None = None) -> FitResult:
    """Train with early stopping on the dev loss.

    Parameters
    ----------
    params : NumPy parameter dict (``init_params``, or a checkpoint's)
    train_batches, dev_batches : lists of NumPy batches (``src``, ``src_len``, ``tgt_in``,
        ``tgt_out``); every epoch visits the train batches in an order drawn from
        ``(seed, epoch)``
    backend : the backend to train on (any: numpy and array_api_strict by hand-derived
        gradients)
    optimizer : defaults to ``adam(1e-3)``
    epochs : the most epochs to run
    patience, min_delta : stop after ``patience`` epochs in a row whose dev loss did not
        fall below the best by more than ``min_delta``
    monitor : the history entry (lower is better) that early stopping, ``lr_decay`` and
        ``restore_best`` watch: ``"dev_loss"``, or one that ``on_epoch`` returns, e.g. a
        dev error rate
    clip_norm : global-norm gradient clipping (``None`` for none)
    seed : seeds the batch order and the dropout masks
    max_steps : stop after this many steps in total (a checkpoint is written then)
    checkpoint : path of a checkpoint written after every epoch (and at ``max_steps``)
    checkpoint_every : also write it every this many steps
    resume : a :class:`xpseq.train.checkpoint.Checkpoint` to continue from (its parameters,
        optimiser state, epoch, position in the epoch and history); ``params`` is then
        ignored
    vocabs, metadata : stored in the checkpoints
    progress : show a tqdm progress bar per epoch
    restore_best : return the parameters of the epoch with the lowest dev loss (or
        ``monitor``) instead of the last epoch's (needs ``dev_batches``). The checkpoint
        written at the end then holds those parameters and no optimiser state: a finished
        model, not a state to resume (the per-epoch checkpoints before it can be resumed).
    time_limit : stop after this many seconds of this call (checked after every step);
        the unfinished epoch is then evaluated on the dev set and recorded, and
        ``stopped`` is ``"time_limit"``
    lr_decay : after an epoch whose dev loss (or ``monitor``) did not improve on the best
        by more than ``min_delta``, multiply the learning rate by this factor in ``(0, 1)`` (as
        ``ReduceLROnPlateau`` with no patience; early stopping still counts the epoch).
        The factor lives in the optimiser state as ``lr_scale``, so nothing recompiles;
        the history records each epoch's ``lr_scale``.
    on_epoch : ``on_epoch(record, params)``, called after each epoch's dev evaluation with
        the epoch's history record and the parameters (arrays of ``backend``); a mapping
        it returns is added to the record (e.g. a dev error rate for the learning curve).
        Its time is not counted in the record's ``seconds``.
    gradients : ``None`` (the backend's own), ``"autodiff"`` or ``"hand-derived"``, as in
        :func:`make_train_step` (e.g. PyTorch without its autograd tape)

    Returns
    -------
    FitResult
    """
    from tqdm.auto import tqdm

    from xpseq.train import checkpoint as ckpt

    optimizer = optimizer or adam(1e-3)
    if not train_batches:
        raise ValueError("fit: train_batches is empty")
    if restore_best and not dev_batches:
        raise ValueError("fit: restore_best=True needs dev_batches to choose the best epoch")
    if time_limit is not None and not _is_number(time_limit, 0, math.inf):
        raise ValueError(f"fit: time_limit must be a positive number of seconds, got "
                         f"{time_limit!r}")
    if lr_decay is not None and not _is_number(lr_decay, 0, 1):
        raise ValueError(f"fit: lr_decay must be a number in (0, 1), got {lr_decay!r}")
    if not isinstance(monitor, str):
        raise TypeError(f"fit: monitor must be the name of a history entry, got "
                        f"{type(monitor).__name__}")
    _check_gradients(backend, gradients)
    if lr_decay is not None and not dev_batches:
        raise ValueError("fit: lr_decay needs dev_batches (it acts when the dev loss stalls)")
    started = time.perf_counter()
    for batch in list(train_batches) + list(dev_batches):
        check_batch(config, batch)
    if resume is not None:
        if resume.config != config:
            raise ValueError("fit: the checkpoint to resume was made with another config: "
                             f"{resume.config} != {config}")
        params, opt_np, state = resume.params, resume.opt_state, dict(resume.train_state)
        if opt_np is None:
            raise ValueError("fit: the checkpoint to resume holds no optimiser state")
        opt_state = to_backend(backend, opt_np)
    else:
        state = {"epoch": 0, "batch": 0, "step": 0, "best_dev": None, "bad_epochs": 0,
                 "history": [], "epoch_nll": 0.0, "epoch_tokens": 0.0}
        opt_state = None
    params = to_backend(backend, dict(params))
    if opt_state is None:
        opt_state = optimizer.init(params)
    if lr_decay is not None and "lr_scale" not in opt_state:
        opt_state = dict(opt_state, lr_scale=backend.xp.ones_like(opt_state["step"]))
    train_step = make_train_step(config, optimizer, backend, clip_norm=clip_norm,
                                 gradients=gradients)
    eval_loss = make_eval_loss(config, backend)

    def save() -> None:
        if checkpoint is not None:
            ckpt.save(checkpoint, config=config, params=to_numpy(backend, params),
                      opt_state=to_numpy(backend, opt_state), optimizer=optimizer,
                      vocabs=vocabs, train_state=state, metadata=metadata)

    stopped = "epochs"
    best_params = None
    traces_before = epoch_traces = train_step.traces
    while state["epoch"] < epochs:
        epoch_start = time.perf_counter()
        order = np.random.default_rng([seed, state["epoch"]]).permutation(len(train_batches))
        bar = tqdm(total=len(order), initial=state["batch"], disable=not progress,
                   desc=f"epoch {state['epoch'] + 1}/{epochs} [{backend.name}]", leave=False)
        while state["batch"] < len(order):
            batch = train_batches[order[state["batch"]]]
            params, opt_state, value = train_step(params, opt_state, to_backend(backend, batch),
                                                  seed)
            tokens = float(np.sum(np.asarray(batch["tgt_out"]) != config.pad_id))
            value = float(backend.to_numpy(value))
            if not math.isfinite(value):
                raise FloatingPointError(f"fit: the training loss became {value} at step "
                                         f"{state['step'] + 1}")
            state["epoch_nll"] += value * tokens
            state["epoch_tokens"] += tokens
            state["batch"] += 1
            state["step"] += 1
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}")
            if max_steps is not None and state["step"] >= max_steps:
                stopped = "max_steps"
                break
            if checkpoint_every and state["step"] % checkpoint_every == 0:
                save()
            if time_limit is not None and time.perf_counter() - started > time_limit:
                stopped = "time_limit"
                break
        bar.close()
        if stopped == "max_steps":
            save()
            break
        dev = evaluate_loss(eval_loss, backend, params, dev_batches) if dev_batches else None
        record = {"epoch": state["epoch"] + 1,
                  "train_loss": state["epoch_nll"] / state["epoch_tokens"],
                  "dev_loss": dev, "steps": state["step"],
                  "traces": (train_step.traces - epoch_traces) if backend.compiles else None,
                  "lr_scale": (float(backend.to_numpy(opt_state["lr_scale"]))
                               if "lr_scale" in opt_state else 1.0),
                  "seconds": time.perf_counter() - epoch_start}
        epoch_traces = train_step.traces
        extra = dict(on_epoch(dict(record), params) or {}) if on_epoch is not None else {}
        record.update(extra)
        record["elapsed"] = time.perf_counter() - started
        state["history"].append(record)
        if progress:
            dev_text = "" if dev is None else f", dev loss {dev:.4f}"
            extra_text = "".join(f", {k} {v:.4g}" if isinstance(v, float) else f", {k} {v}"
                                 for k, v in extra.items())
            tqdm.write(f"epoch {record['epoch']}: train loss {record['train_loss']:.4f}"
                       f"{dev_text}{extra_text} ({backend.name}, {record['seconds']:.0f} s)")
        state.update(epoch=state["epoch"] + 1, batch=0, epoch_nll=0.0, epoch_tokens=0.0)
        watched = record.get(monitor) if dev is not None else None
        if dev is not None and watched is None:
            raise ValueError(f"fit: monitor={monitor!r} is not in the epoch's record "
                             f"{sorted(record)}; on_epoch must return it")
        if watched is not None:
            if state["best_dev"] is None or watched < state["best_dev"] - min_delta:
                state["best_dev"], state["bad_epochs"] = watched, 0
            else:
                state["bad_epochs"] += 1
                if lr_decay is not None:
                    opt_state = dict(opt_state, lr_scale=opt_state["lr_scale"] * lr_decay)
            if state.get("best_epoch_dev") is None or watched < state["best_epoch_dev"]:
                state["best_epoch_dev"], state["best_epoch"] = watched, record["epoch"]
                if restore_best:
                    best_params = to_numpy(backend, params)
        save()
        if stopped == "time_limit":
            break
        if watched is not None and state["bad_epochs"] >= patience:
            stopped = "early_stop"
            break
    final_params = to_numpy(backend, params)
    if restore_best and best_params is not None:
        final_params = best_params
        if checkpoint is not None:
            ckpt.save(checkpoint, config=config, params=best_params, opt_state=None,
                      optimizer=optimizer, vocabs=vocabs, train_state=state,
                      metadata=metadata)
    return FitResult(params=final_params, opt_state=to_numpy(backend, opt_state),
                     history=list(state["history"]), stopped=stopped,
                     traces=(train_step.traces - traces_before) if backend.compiles else None,
                     train_state=dict(state), best_epoch=state.get("best_epoch"))
