"""The training loop: :func:`fit` runs epochs of training steps over a
:class:`TrainConfig`, and leaves everything else to callbacks.

>>> from xpseq.train import TrainConfig, fit, callbacks, schedules
>>> rate = 3e-3 * schedules.warmup_inverse_sqrt(400)          # a schedule of the step
>>> result = fit(config, params, train_batches, backend, dev_batches=dev,     # doctest: +SKIP
...              train=TrainConfig(epochs=20, optimizer=adam(rate)),
...              callbacks=[callbacks.EarlyStopping(patience=3),
...                         callbacks.SaveCheckpoint("model.safetensors")])

Every epoch visits the training batches in an order drawn from ``(seed, epoch)``, and
dropout masks come from ``(seed, step)``, so a run resumed from a checkpoint takes exactly
the steps the uninterrupted run would have taken. After each epoch the loop evaluates the
dev loss, asks the callbacks for per-epoch metrics, records the epoch in the history,
notes whether ``monitor`` improved, and hands the record to the callbacks (see
:mod:`xpseq.train.callbacks`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np

from xpseq.backends import Backend
from xpseq.core import values
from xpseq.core.optim import Optimizer, adam
from xpseq import models
from xpseq.core.precision import Policy
from xpseq.models import check_batch

from .callbacks import Callback, MaxSteps
from .parallel import Placement, placement
from .reporting import ProgressBar
from .step import (
    GRADIENTS,
    Batch,
    check_gradients,
    make_eval_loss,
    make_train_step,
    training_precision,
)

__all__ = ["TrainConfig", "Loop", "fit", "FitResult"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train, apart from the model and the data.

    Attributes
    ----------
    epochs
        the most epochs to run
    optimizer
        an :class:`xpseq.core.optim.Optimizer`; ``adam(1e-3)`` by default. A
        learning-rate schedule is the optimiser's own ``lr``, e.g.
        ``adam(1e-3 * schedules.warmup_inverse_sqrt(400))`` (see
        :mod:`xpseq.train.schedules`)
    clip_norm
        global-norm gradient clipping (``None`` for none)
    seed
        seeds the batch order and the dropout masks
    max_steps
        stop after this many steps in total (``stopped == "max_steps"``)
    monitor
        the history entry (lower is better) whose improvement the loop tracks:
        ``"dev_loss"``, or one that an :class:`~xpseq.train.callbacks.EpochMetrics`
        returns (a dev error rate); early stopping, the plateau rule and the best epoch
        watch it
    min_delta
        an epoch improves ``monitor`` when it beats the best by more than this
    gradients
        ``None`` (the fastest path measured for the model kind, backend and precision:
        :mod:`xpseq.train.paths`), ``"autodiff"`` or ``"hand-derived"``, as in
        :func:`xpseq.train.make_train_step`
    progress
        a tqdm progress bar per epoch (on a terminal or in a notebook) and a line
        per finished epoch
    devices
        train data-parallel on this many devices (see :mod:`xpseq.train.parallel`):
        on JAX a device mesh (on CPU, the host's cores, which XLA exposes only when told
        before it starts), on PyTorch as many processes of a ``gloo`` process group
        (started by ``xpseq train --devices`` or ``torchrun``); 1 elsewhere
    precision
        ``None`` (compute in the parameters' dtype) or ``"bf16"``: mixed precision,
        as in :func:`xpseq.train.make_train_step` (the dev loss is computed the same way)
    """

    epochs: int = 10
    optimizer: Optimizer = dataclasses.field(default_factory=lambda: adam(1e-3))
    clip_norm: float | None = 5.0
    seed: int = 0
    max_steps: int | None = None
    monitor: str = "dev_loss"
    min_delta: float = 0.0
    gradients: str | None = None
    progress: bool = True
    devices: int = 1
    precision: Policy | str | None = None

    @property
    def policy(self) -> Policy:
        """``precision`` as the :class:`~xpseq.core.precision.Policy` it was made into."""
        return cast(Policy, self.precision)

    def __post_init__(self) -> None:
        name = "TrainConfig"
        fix = functools.partial(object.__setattr__, self)       # frozen: set the normalised
        if self.optimizer is None:         # (None asks for the default too)
            fix("optimizer", adam(1e-3))
        fix("epochs", values.integer(name, "epochs", self.epochs, low=1))
        fix("max_steps", values.integer(name, "max_steps", self.max_steps, low=1,
                                        optional=True))
        fix("devices", values.integer(name, "devices", self.devices, low=1))
        if not isinstance(self.optimizer, Optimizer):
            raise TypeError(f"TrainConfig: optimizer must be an xpseq.core.optim.Optimizer, "
                            f"got {type(self.optimizer).__name__}")
        fix("clip_norm", values.real(name, "clip_norm", self.clip_norm, low=0, low_open=True,
                                     high=math.inf, high_open=True, optional=True))
        fix("seed", values.integer(name, "seed", self.seed, low=0))
        fix("precision", Policy.of(self.precision, "TrainConfig: precision"))
        if not isinstance(self.monitor, str):
            raise TypeError(f"TrainConfig: monitor must be the name of a history entry, got "
                            f"{type(self.monitor).__name__}")
        fix("monitor", str(self.monitor))
        fix("min_delta", values.real(name, "min_delta", self.min_delta, low=0,
                                         high=math.inf, high_open=True))
        fix("gradients", values.choice(name, "gradients", self.gradients, GRADIENTS,
                                       optional=True))
        fix("progress", values.flag(name, "progress", self.progress))


@dataclasses.dataclass
class FitResult:
    """What :func:`fit` returns: NumPy parameters and optimiser state, and the history.

    ``history`` has one dict per finished epoch: ``epoch``, ``train_loss`` (mean per real
    token), ``dev_loss`` (or ``None``), ``steps`` (total so far) and ``traces`` (how many
    times the training step was compiled in that epoch, ``TrainStep.graphs``: JAX
    traces, or the graphs of a torch backend made with ``compile=True``; 0 once every
    batch shape has been seen; ``None`` on backends that do not compile) and ``seconds``
    (wall time of the epoch, compilation and dev evaluation included), ``elapsed``
    (seconds since the call began, at the epoch's end), ``lr_scale`` (the optimiser
    state's plateau factor ``scale`` at the epoch's end, which
    :class:`~xpseq.train.callbacks.ReduceLROnPlateau` lowers), and what the
    :class:`~xpseq.train.callbacks.EpochMetrics` added.
    ``stopped`` says why the loop ended: ``"epochs"``, ``"max_steps"``, or the reason a
    callback gave (``"early_stop"``, ``"time_limit"``). ``traces`` is the total over this
    call. ``best_epoch`` is the epoch with the lowest ``monitor`` (``None`` without dev
    batches); with :class:`~xpseq.train.callbacks.RestoreBest` the returned ``params``
    are that epoch's.
    """

    params: dict
    opt_state: dict
    history: list
    stopped: str
    traces: int | None
    train_state: dict
    best_epoch: int | None = None


#: Steps between two reads of the training loss to the host (see :meth:`Loop.record_step`).
READ_EVERY = 10


class Loop:
    """The state of one :func:`fit` call, as the callbacks see it.

    ``config``, ``train`` (the :class:`TrainConfig`), ``backend``, ``dev_batches``;
    ``params`` and ``opt_state`` (backend arrays, replaced after every step); ``state``
    (JSON-serialisable progress: ``epoch``, ``batch`` (position in the epoch), ``step``,
    ``history``, ``best_dev`` and ``bad_epochs`` (``monitor``'s best and the epochs since it
    improved by more than ``min_delta``), ``best_epoch``); ``watched`` (the last epoch's
    value of ``monitor``, ``None`` without dev batches) and ``improved``; ``stop`` (a reason
    to end, set by a callback); ``started`` (``time.perf_counter()`` at the call's start);
    ``last_loss`` (the latest training loss read to the host, see :meth:`settle`).
    """

    def __init__(self, config: Any, train: TrainConfig, backend: Backend, params: dict,
                 opt_state: dict, state: dict, dev_batches: Sequence[Batch],
                 place: Placement | None = None):
        self.config, self.train, self.backend = config, train, backend
        self.place = Placement(backend) if place is None else place
        self.params, self.opt_state, self.state = params, opt_state, state
        self.dev_batches = dev_batches
        self.watched: float | None = None
        self.improved = False
        self.stop: str | None = None
        self.stopped = "epochs"
        self.restored = False
        self.final_params: dict | None = None
        self.started = time.perf_counter()
        self.last_loss: float | None = None
        #: The steps whose losses are still on the device: (step, loss, real tokens).
        self.pending: list[tuple[int, Any, float]] = []

    def record_step(self, batch: Batch, value: Any) -> None:
        """Count a step done, its loss (a 0-d backend array) kept on the device: the
        losses are read to the host together every :data:`READ_EVERY` steps
        (:meth:`settle`), so that a backend that runs ahead of Python (JAX dispatches
        asynchronously) is not made to wait after every step."""
        state = self.state
        state["batch"] += 1
        state["step"] += 1
        tokens = float(np.sum(np.asarray(batch["tgt_out"]) != self.config.pad_id))
        self.pending.append((state["step"], value, tokens))
        if len(self.pending) >= READ_EVERY:
            self.settle()

    def settle(self) -> None:
        """Read the losses of the steps not read yet (one transfer) into the epoch's running
        sum per real token, in step order; ``last_loss`` is the latest.

        Raises
        ------
        FloatingPointError
            A step's loss is not finite (named by its step: the training diverged).
        """
        if not self.pending:
            return
        xp, state = self.backend.xp, self.state
        values = self.backend.to_numpy(xp.stack([v for _, v, _ in self.pending]))
        for (step, _, tokens), value in zip(self.pending, values.tolist()):
            if not math.isfinite(value):
                self.pending.clear()
                raise FloatingPointError(f"fit: the training loss became {value} at step "
                                         f"{step}")
            state["epoch_nll"] += value * tokens
            state["epoch_tokens"] += tokens
            self.last_loss = value
        self.pending.clear()

    def params_numpy(self) -> dict:
        return self.backend.to_numpy_tree(self.params)

    def opt_state_numpy(self) -> dict:
        return self.backend.to_numpy_tree(self.opt_state)

    def note(self, record: dict) -> None:
        """Track ``monitor`` after an epoch's record is complete."""
        monitor, state = self.train.monitor, self.state
        self.watched = record.get(monitor) if record["dev_loss"] is not None else None
        if record["dev_loss"] is not None and self.watched is None:
            raise ValueError(f"fit: monitor={monitor!r} is not in the epoch's record "
                             f"{sorted(record)}; an EpochMetrics callback must return it")
        self.improved = False
        if self.watched is None:
            return
        if state["best_dev"] is None or self.watched < state["best_dev"] - self.train.min_delta:
            state["best_dev"], state["bad_epochs"] = self.watched, 0
            self.improved = True
        else:
            state["bad_epochs"] += 1
        if state.get("best_epoch_dev") is None or self.watched < state["best_epoch_dev"]:
            state["best_epoch_dev"], state["best_epoch"] = self.watched, record["epoch"]


def fit(config: Any, params: Mapping[str, np.ndarray], train_batches: Sequence[Batch],
        backend: Backend, *, dev_batches: Sequence[Batch] = (), train: TrainConfig | None = None,
        callbacks: Sequence[Callback] = (), resume: Any = None) -> FitResult:
    """Train a model (any kind of :mod:`xpseq.models`) on ``backend``.

    Parameters
    ----------
    config : the model's configuration; its kind comes from :func:`xpseq.models.of`
    params : NumPy parameter dict (``init_params``, or a checkpoint's)
    train_batches, dev_batches : lists of NumPy batches (``src``, ``src_len``, ``tgt_in``,
        ``tgt_out``), each checked once before training
    backend : the backend to train on (any: numpy and array_api_strict by hand-derived
        gradients)
    train : a :class:`TrainConfig` (its defaults without one)
    callbacks : :class:`xpseq.train.callbacks.Callback` objects, run in this order (put a
        ``SaveCheckpoint`` after those that change the state and before a ``MetricsLog``,
        so that it saves what the others changed and the log lists saved epochs only:
        :func:`xpseq.train.callbacks.place_checkpoint` does it); fit puts
        :class:`~xpseq.train.callbacks.MaxSteps` (with ``max_steps``) and
        :class:`~xpseq.train.reporting.ProgressBar` (with ``progress``) before them
    resume : a :class:`xpseq.train.checkpoint.Checkpoint` to continue from (its parameters,
        optimiser state, epoch, position in the epoch and history); ``params`` is then
        ignored

    Returns
    -------
    FitResult
    """
    train = _checked(config, train, train_batches, dev_batches, callbacks, backend)
    place = placement(backend, train.devices)
    loop = _start(config, params, backend, train, resume, dev_batches, place)
    step = make_train_step(config, train.optimizer, backend, clip_norm=train.clip_norm,
                           gradients=train.gradients, group=place.group, mesh=place.mesh,
                           precision=train.policy)
    everything = _default_callbacks(train, place, len(train_batches), backend,
                                    lambda: step.graphs is not None) + list(callbacks)
    compiles_before = step.graphs                 # None: nothing compiles
    with contextlib.ExitStack() as run:
        for cb in everything:
            if isinstance(cb, contextlib.AbstractContextManager):
                run.enter_context(cb)
        for cb in everything:
            cb.on_train_begin(loop)
        eval_loss = make_eval_loss(config, backend, train.policy)
        while loop.state["epoch"] < train.epochs and loop.stop is None:
            record = _epoch(loop, everything, train_batches, step, eval_loss)
            if record is not None:
                for cb in everything:
                    cb.on_epoch_end(loop, record)
                loop.stop = place.agree(loop.stop)
        loop.stopped = loop.stop or "epochs"
        loop.final_params = loop.params_numpy()
        for cb in everything:
            cb.on_train_end(loop)
    state = loop.state
    return FitResult(params=loop.final_params, opt_state=loop.opt_state_numpy(),
                     history=list(state["history"]), stopped=loop.stopped,
                     traces=_since(step.graphs, compiles_before), train_state=dict(state),
                     best_epoch=state.get("best_epoch"))


def _epoch(loop: Loop, callbacks: Sequence[Callback], batches: Sequence[Batch],
           step: Any, eval_loss: Any) -> dict | None:
    """One epoch (from where the state says it is): its steps, the dev loss and its
    record, noted and added to the history; ``None`` when a stop ended it early
    (``max_steps``: the epoch is not recorded)."""
    state, train, place = loop.state, loop.train, loop.place
    started, graphs = time.perf_counter(), step.graphs
    order = np.random.default_rng([train.seed, state["epoch"]]).permutation(len(batches))
    for cb in callbacks:
        cb.on_epoch_begin(loop)
    while state["batch"] < len(order) and loop.stop is None:
        batch = batches[order[state["batch"]]]
        for cb in callbacks:
            cb.on_step_begin(loop, batch)
        loop.params, loop.opt_state, value = step(loop.params, loop.opt_state,
                                                  place.batch(batch), train.seed)
        loop.record_step(batch, value)
        for cb in callbacks:
            cb.on_step_end(loop)
        loop.stop = place.agree(loop.stop)
    loop.settle()
    if loop.stop == "max_steps":
        return None
    dev = None
    if loop.dev_batches:
        for cb in callbacks:
            cb.on_evaluate_begin(loop)
        dev = place.evaluate(eval_loss, loop.params, loop.dev_batches)
        for cb in callbacks:
            cb.on_evaluate_end(loop)
    if dev is not None and not math.isfinite(dev):
        raise FloatingPointError(f"fit: the dev loss became {dev} after epoch "
                                 f"{state['epoch'] + 1} (the training diverged)")
    record = {"epoch": state["epoch"] + 1,
              "train_loss": state["epoch_nll"] / state["epoch_tokens"],
              "dev_loss": dev, "steps": state["step"], "traces": _since(step.graphs, graphs),
              "lr_scale": _plateau_factor(loop), "seconds": time.perf_counter() - started}
    extra: dict = {}
    for cb in callbacks:
        extra.update(cb.on_epoch_metrics(loop, dict(record, **extra)) or {})
    record.update(extra)
    record["elapsed"] = time.perf_counter() - loop.started
    state["history"].append(record)
    state.update(epoch=state["epoch"] + 1, batch=0, epoch_nll=0.0, epoch_tokens=0.0)
    loop.note(record)
    return record


def _checked(config: Any, train: TrainConfig | None, train_batches: Sequence[Batch],
             dev_batches: Sequence[Batch], callbacks: Sequence[Callback],
             backend: Backend) -> TrainConfig:
    """fit's arguments checked (every batch once); the :class:`TrainConfig`."""
    train = TrainConfig() if train is None else train
    if not isinstance(train, TrainConfig):
        raise TypeError(f"fit: train must be a TrainConfig, got {type(train).__name__}")
    for cb in callbacks:
        if not isinstance(cb, Callback):
            raise TypeError(f"fit: callbacks must be xpseq.train.callbacks.Callback objects, "
                            f"got {type(cb).__name__}")
    if not train_batches:
        raise ValueError("fit: train_batches is empty")
    gradients = check_gradients(backend, train.gradients, models.of(config).kind, train.policy)
    training_precision(backend, gradients, train.policy)
    for batch in list(train_batches) + list(dev_batches):
        check_batch(config, batch)
    return train


def _default_callbacks(train: TrainConfig, place: Placement, steps: int, backend: Backend,
                       compiles: Callable[[], bool]) -> list[Callback]:
    """What fit puts in front of the caller's callbacks: :class:`MaxSteps` and, in the
    process that prints, the :class:`~xpseq.train.reporting.ProgressBar`."""
    found: list[Callback] = []
    if train.max_steps is not None:
        found.append(MaxSteps(train.max_steps))
    if train.progress and place.main:
        found.append(ProgressBar(steps, backend.name, compiles))
    return found


def _start(config: Any, params: Mapping[str, np.ndarray], backend: Backend,
           train: TrainConfig, resume: Any, dev_batches: Sequence[Batch],
           place: Placement) -> Loop:
    """The loop at its first step: fresh, or where the checkpoint ``resume`` left off."""
    if resume is not None:
        if resume.config != config:
            raise ValueError("fit: the checkpoint to resume was made with another config: "
                             f"{resume.config} != {config}")
        if resume.opt_state is None:
            raise ValueError("fit: the checkpoint to resume holds no optimiser state")
        params, state = resume.params, dict(resume.train_state)
        opt_state = place.params(resume.opt_state)
        params = place.params(params)
    else:
        state = {"epoch": 0, "batch": 0, "step": 0, "best_dev": None, "bad_epochs": 0,
                 "history": [], "epoch_nll": 0.0, "epoch_tokens": 0.0}
        params = place.params(params)
        opt_state = place.params(train.optimizer.init(params))
    return Loop(config, train, backend, params, opt_state, state, dev_batches, place)


def _since(now: int | None, before: int | None) -> int | None:
    """Compilations since ``before`` (``None`` where the backend compiles nothing)."""
    return None if now is None or before is None else now - before


def _plateau_factor(loop: Loop) -> float:
    """The optimiser state's ``scale`` (1 for an optimiser whose state has none)."""
    scale = loop.opt_state.get("scale")
    return 1.0 if scale is None else float(loop.backend.to_numpy(scale))
