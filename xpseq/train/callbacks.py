"""The parts of a training run that are not the step: stopping, the learning-rate plateau
rule, keeping the best epoch, checkpoints, a time limit and per-epoch metrics.

Each is a :class:`Callback` that :func:`xpseq.train.fit` calls at fixed points of its
loop (Keras's ``EarlyStopping``, ``ModelCheckpoint`` ... are the model; xpseq's
``SaveCheckpoint`` writes what :func:`xpseq.train.checkpoint.load` reads back as a
:class:`xpseq.train.checkpoint.Checkpoint`)::

    on_train_begin(loop)                 before the first step (checks its settings)
    on_epoch_begin(loop)                 before an epoch's first step
    on_step_begin(loop, batch)           before every step (``batch``: NumPy arrays)
    on_step_end(loop)                    after every step
    on_evaluate_begin(loop)              before the dev loss (only with dev batches)
    on_evaluate_end(loop)                after it
    on_epoch_metrics(loop, record)       after the dev loss; a returned mapping is added
                                         to the epoch's history record
    on_epoch_end(loop, record)           after fit has noted whether ``monitor`` improved
    on_train_end(loop)                   once, after the loop

A callback that is also a context manager is entered for the run (and left however it
ends): :class:`xpseq.train.reporting.ProgressBar`, which fit puts first when
``TrainConfig.progress`` is on, is one. fit also puts :class:`MaxSteps` first when
``TrainConfig.max_steps`` is set.

``loop`` is the :class:`xpseq.train.loop.Loop`: its ``params`` and ``opt_state`` (arrays of
the backend), ``state`` (the JSON-serialisable progress a checkpoint keeps: epoch, step,
history, the best value of ``monitor`` and the epochs since it improved), ``improved``
(whether the epoch just recorded improved ``monitor`` by more than ``min_delta``) and
``stop`` (set it to a reason to end the run), and ``last_loss`` (the last training loss
read to the host: fit reads the steps' losses together every few steps, and
``loop.settle()`` reads those not read yet). Callbacks run in the order given.

Order matters at the end of an epoch. A :class:`SaveCheckpoint` comes after the callbacks
that change the state it writes (:class:`ReduceLROnPlateau` lowers the plateau factor,
:class:`RestoreBest` keeps the best parameters for the end), and before the
:class:`MetricsLog`: the log's row for an epoch is then written only once that epoch's
checkpoint is on disk, and a failed save (an exception out of :func:`~xpseq.train.fit`)
leaves the log listing only epochs that a checkpoint holds. :func:`place_checkpoint` puts
it there, and :func:`xpseq.tasks.train_model` and the G2P recipe do so. A resumed run's
``MetricsLog`` starts from the checkpoint's history, so a row of an epoch that an
interrupted run logged but did not save is dropped.
"""

from __future__ import annotations

import math
import os
import pathlib
import time
from typing import Any, Callable, Mapping, Protocol, Sequence, cast

from xpseq.core import checks
from xpseq.core.optim import scale_learning_rate
from xpseq.io import files

__all__ = ["Loop", "Callback", "MaxSteps", "EarlyStopping", "ReduceLROnPlateau", "RestoreBest",
           "TimeLimit", "SaveCheckpoint", "EpochMetrics", "MetricsLog", "place_checkpoint"]


class Loop(Protocol):
    """What a callback sees of a training run (:class:`xpseq.train.loop.Loop` is the one
    :func:`xpseq.train.fit` passes): the run's ``config``, ``train`` settings and
    ``place`` (where it runs); ``params`` and ``opt_state`` (backend arrays) and their NumPy
    copies; ``state`` (JSON-serialisable progress, ``history`` among it); ``dev_batches``;
    ``watched`` and ``improved`` (the monitored value of the last epoch); ``stop``,
    ``stopped``, ``restored`` and ``final_params``, which callbacks set; ``started``."""

    config: Any
    train: Any
    place: Any
    params: dict
    opt_state: dict
    state: dict
    dev_batches: Sequence[Any]
    watched: float | None
    improved: bool
    stop: str | None
    stopped: str
    restored: bool
    final_params: dict | None
    started: float
    last_loss: float | None

    def params_numpy(self) -> dict: ...

    def settle(self) -> None: ...

    def opt_state_numpy(self) -> dict: ...


class Callback:
    """A part of the training loop; override the hooks it needs (see the module docstring)."""

    def on_train_begin(self, loop: Loop) -> None:
        pass

    def on_epoch_begin(self, loop: Loop) -> None:
        pass

    def on_step_begin(self, loop: Loop, batch: Mapping[str, Any]) -> None:
        pass

    def on_step_end(self, loop: Loop) -> None:
        pass

    def on_evaluate_begin(self, loop: Loop) -> None:
        pass

    def on_evaluate_end(self, loop: Loop) -> None:
        pass

    def on_epoch_metrics(self, loop: Loop, record: dict) -> Mapping[str, Any] | None:
        return None

    def on_epoch_end(self, loop: Loop, record: dict) -> None:
        pass

    def on_train_end(self, loop: Loop) -> None:
        pass


class MaxSteps(Callback):
    """End the run once ``steps`` training steps are done in all (``TrainConfig.max_steps``;
    fit puts it first). The epoch it ends in is not recorded (no dev loss, no history
    entry); ``stopped`` is ``"max_steps"``."""

    def __init__(self, steps: int):
        if not checks.is_int(steps) or steps < 1:
            raise ValueError(f"MaxSteps: steps must be a positive int, got {steps!r}")
        self.steps = steps

    def on_step_end(self, loop: Loop) -> None:
        if loop.state["step"] >= self.steps:
            loop.stop = "max_steps"


def _needs_dev(loop: Loop, name: str) -> None:
    if not loop.dev_batches:
        raise ValueError(f"fit: {name} needs dev_batches (it acts on the monitored dev value)")


class EarlyStopping(Callback):
    """Stop after ``patience`` epochs in a row whose ``monitor`` (the fit's
    :class:`~xpseq.train.loop.TrainConfig`) did not improve on the best by more than
    ``min_delta``; ``stopped`` is then ``"early_stop"``."""

    def __init__(self, patience: int = 2):
        if not checks.is_int(patience) or patience < 1:
            raise ValueError(f"EarlyStopping: patience must be a positive int, got {patience!r}")
        self.patience = patience

    def on_epoch_end(self, loop: Loop, record: dict) -> None:
        if loop.watched is not None and loop.state["bad_epochs"] >= self.patience:
            loop.stop = loop.stop or "early_stop"


class ReduceLROnPlateau(Callback):
    """Multiply the learning rate by ``factor`` after every epoch that did not improve
    ``monitor`` (``torch.optim.lr_scheduler.ReduceLROnPlateau`` with no patience).

    It lowers the optimiser state's plateau factor (``opt_state["scale"]``, a 0-d array
    that the optimiser's ``init`` creates, so nothing recompiles) with
    :func:`xpseq.core.optim.scale_learning_rate`; the factor multiplies whatever the
    optimiser's learning-rate schedule gives, and a checkpoint keeps it with the rest of
    the state. The history records each epoch's factor as ``lr_scale``.
    """

    def __init__(self, factor: float = 0.5):
        if not checks.is_real(factor) or not 0 < factor < 1:
            raise ValueError(f"ReduceLROnPlateau: factor must be a number in (0, 1), got "
                             f"{factor!r}")
        self.factor = factor

    def on_train_begin(self, loop: Loop) -> None:
        _needs_dev(loop, "ReduceLROnPlateau")
        if "scale" not in loop.opt_state:
            raise ValueError(f"ReduceLROnPlateau: the optimiser {loop.train.optimizer.name!r} "
                             "keeps no plateau factor in its state ('scale', which adam and "
                             "sgd create)")

    def on_epoch_end(self, loop: Loop, record: dict) -> None:
        if loop.watched is not None and not loop.improved:
            loop.opt_state = scale_learning_rate(loop.opt_state, self.factor)


class RestoreBest(Callback):
    """End with the parameters of the epoch with the best ``monitor`` instead of the
    last epoch's. A :class:`SaveCheckpoint` after it then holds those parameters and no
    optimiser state: a finished model, not a state to resume (the per-epoch checkpoints
    before the end can be resumed)."""

    def __init__(self) -> None:
        self.best: dict | None = None

    def on_train_begin(self, loop: Loop) -> None:
        _needs_dev(loop, "RestoreBest")
        self.best = None

    def on_epoch_end(self, loop: Loop, record: dict) -> None:
        if loop.state.get("best_epoch") == record["epoch"]:
            self.best = loop.params_numpy()

    def on_train_end(self, loop: Loop) -> None:
        if self.best is not None:
            loop.final_params = self.best
            loop.restored = True


class TimeLimit(Callback):
    """Stop after ``seconds`` of this call (checked after every step); the unfinished
    epoch is still evaluated and recorded, and ``stopped`` is ``"time_limit"``."""

    def __init__(self, seconds: float):
        if not checks.is_real(seconds) or not 0 < seconds < math.inf:
            raise ValueError(f"TimeLimit: seconds must be a positive number, got {seconds!r}")
        self.seconds = seconds

    def on_step_end(self, loop: Loop) -> None:
        if time.perf_counter() - loop.started > self.seconds:
            loop.stop = loop.stop or "time_limit"


class SaveCheckpoint(Callback):
    """Write a checkpoint (:func:`xpseq.train.checkpoint.save`) after every epoch, every
    ``every_steps`` steps if given, and at the end (after :class:`RestoreBest`, when it
    comes before this one in the list). ``vocabs`` and ``metadata`` are stored with it.

    ``keep_epochs = k`` also writes each epoch's parameters alone (no optimiser state) to
    :meth:`epoch_path` (``<stem>.epoch<N><suffix>``, next to ``path``) and removes all but
    the last ``k`` of them: the inputs of :func:`xpseq.train.checkpoint.average`.

    A file that cannot be written (a full disk ...) ends the run with an ``OSError`` of the
    same ``errno`` whose ``filename`` is the checkpoint and whose message says what is
    kept: ``cannot write the checkpoint (No space left on device); the previous one (epoch
    1, step 40) is kept`` (the checkpoint file is then that earlier one, intact), or ``...;
    no checkpoint was written``. Put it before a :class:`MetricsLog` (see the module
    docstring), so that the log does not list the epoch either."""

    def __init__(self, path: str | os.PathLike, *, every_steps: int | None = None,
                 vocabs: Mapping[str, list] | None = None,
                 metadata: Mapping[str, Any] | None = None, keep_epochs: int = 0):
        for name, value, low in (("every_steps", every_steps, 1),
                                 ("keep_epochs", keep_epochs, 0)):
            if value is None and name == "every_steps":
                continue
            if not checks.is_int(value) or cast(int, value) < low:
                raise ValueError(f"SaveCheckpoint: {name} must be an int >= {low}"
                                 f"{' or None' if name == 'every_steps' else ''}, got "
                                 f"{value!r}")
        self.path = pathlib.Path(path)
        self.every_steps = every_steps
        self.keep_epochs = keep_epochs
        self.saved_step: int | None = None
        #: (epoch, step) of the last checkpoint this callback wrote, ``None`` before one
        self.saved: tuple[int, int] | None = None
        self.vocabs = vocabs
        self.metadata = metadata

    def save(self, loop: Loop, *, finished: bool = False) -> None:
        """Write the checkpoint; parameters that became non-finite stop the run with a
        ``FloatingPointError`` naming the step and the last checkpoint written (kept), a
        file that cannot be written with an ``OSError`` saying what is kept."""
        from . import checkpoint

        loop.settle()                    # the epoch's loss so far, in the state it writes
        if not loop.place.main:          # one process of several writes the file
            return
        restored = loop.final_params if finished and loop.restored else None
        try:
            checkpoint.save(self.path, config=loop.config,
                            params=loop.params_numpy() if restored is None else restored,
                            opt_state=None if restored is not None else loop.opt_state_numpy(),
                            optimizer=loop.train.optimizer, vocabs=self.vocabs,
                            train_state=loop.state, metadata=self.metadata)
        except FloatingPointError:
            last = ("no checkpoint was written" if self.saved_step is None else
                    f"the last good checkpoint, {self.path}, is from step {self.saved_step}")
            raise FloatingPointError(f"fit: the parameters became non-finite by step "
                                     f"{loop.state['step']} (the training diverged); "
                                     f"{last}") from None
        except OSError as err:
            raise _not_written(err, "cannot write the checkpoint", self.path,
                               self._kept()) from err
        self.saved_step = loop.state["step"]
        self.saved = (int(loop.state["epoch"]), int(loop.state["step"]))

    def _kept(self) -> str:
        """What a failed save leaves at :attr:`path`, in words."""
        if self.saved is not None:
            return f"the previous one (epoch {self.saved[0]}, step {self.saved[1]}) is kept"
        from . import checkpoint

        progress = checkpoint._recorded_progress(self.path)     # e.g. the resumed one
        if progress is not None:
            return (f"the one already there (epoch {progress[0]}, step {progress[1]}) is "
                    "kept")
        return "no checkpoint was written"

    def on_step_end(self, loop: Loop) -> None:
        if self.every_steps and loop.state["step"] % self.every_steps == 0 and not loop.stop:
            self.save(loop)

    def epoch_path(self, epoch: int) -> pathlib.Path:
        """Where ``keep_epochs`` writes the parameters of ``epoch``."""
        return self.path.with_name(f"{self.path.stem}.epoch{epoch}{self.path.suffix}")

    def on_epoch_end(self, loop: Loop, record: dict) -> None:
        self.save(loop)
        if self.keep_epochs and loop.place.main:
            from . import checkpoint

            epoch = int(record["epoch"])
            try:
                checkpoint.save(self.epoch_path(epoch), config=loop.config,
                                params=loop.params_numpy(), vocabs=self.vocabs,
                                train_state=loop.state, metadata=self.metadata)
            except OSError as err:
                raise _not_written(err, f"cannot write the parameters of epoch {epoch} "
                                        "for averaging", self.epoch_path(epoch),
                                   f"the checkpoint {self.path} of that epoch is "
                                   "written") from err
            files.remove(self.epoch_path(epoch - self.keep_epochs), kind="checkpoint")

    def on_train_end(self, loop: Loop) -> None:
        if loop.stopped == "max_steps" or loop.restored:
            self.save(loop, finished=True)


def _not_written(err: OSError, what: str, path: pathlib.Path, kept: str) -> OSError:
    """``err`` (same errno, so the same ``OSError`` subclass) as ``"<what> (<strerror>);
    <kept>"`` about ``path``: the command prints it as that message, ``: path``."""
    reason = err.strerror or str(err)
    return OSError(err.errno, f"{what} ({reason}); {kept}", str(path))


def place_checkpoint(callbacks: Sequence[Callback], save: SaveCheckpoint) -> list[Callback]:
    """``callbacks`` with ``save`` after every one of them but the :class:`MetricsLog`
    ones, which follow it (in their order): the checkpoint then holds what the others
    decided at the end of an epoch (a lowered plateau factor, the best parameters), and the
    log lists an epoch only once its checkpoint is written."""
    callbacks = list(callbacks)
    return ([cb for cb in callbacks if not isinstance(cb, MetricsLog)] + [save]
            + [cb for cb in callbacks if isinstance(cb, MetricsLog)])


class EpochMetrics(Callback):
    """Per-epoch metrics: ``fn(record, params)`` after the dev loss, with the epoch's
    history record and the parameters (arrays of the backend, on one device); the mapping
    it returns is
    added to the record (e.g. a dev error rate for the learning curve, which ``monitor``
    may then watch). Its time is not counted in the record's ``seconds``."""

    def __init__(self, fn: Callable[[dict, dict], Mapping[str, Any] | None]):
        if not callable(fn):
            raise TypeError(f"EpochMetrics: fn must be callable, got {type(fn).__name__}")
        self.fn = fn

    def on_epoch_metrics(self, loop: Loop, record: dict) -> Mapping[str, Any] | None:
        return self.fn(dict(record), loop.place.local(loop.params))


class MetricsLog(Callback):
    """The history as it grows: after every epoch its record (epoch, steps, losses, the
    metrics of :class:`EpochMetrics`, ``lr_scale`` (the plateau factor), seconds,
    elapsed) is written to the CSV file ``path`` (a header, then a row per epoch; a column
    that appears later, such as a metric that starts at epoch 2, is added). With
    ``tensorboard`` a folder and tensorboardX or PyTorch's ``torch.utils.tensorboard``
    (which needs the ``tensorboard`` package) installed, the numbers also go to TensorBoard
    event files there, one scalar per key against the epoch (``tensorboard --logdir
    FOLDER``). Only the main process writes.

    The CSV is rewritten whole each time. A resumed run rewrites it at its start to the
    checkpoint's history, so that its rows are the epochs the checkpoint holds (a row that
    an interrupted run wrote after its last checkpoint is dropped; with the history still
    empty the file is removed). Placed after a :class:`SaveCheckpoint`, it writes an
    epoch's row only once that epoch's checkpoint is saved. TensorBoard event files are
    only added to; their folder is made at the first epoch's end (after its checkpoint),
    so that a run that fails before leaves none behind."""

    def __init__(self, path: str | os.PathLike, *,
                 tensorboard: str | os.PathLike | None = None):
        self.path = pathlib.Path(path)
        self.tensorboard = None if tensorboard is None else pathlib.Path(tensorboard)
        self.rows: list[dict] = []
        self.writer: Any = None
        self.opened = False                       # the writer made (or found missing)

    def on_train_begin(self, loop: Loop) -> None:
        self.rows = [dict(r) for r in loop.state.get("history", [])]     # a resumed run
        if not loop.place.main:
            return
        if self.rows or loop.state.get("step", 0):
            self._write()

    def on_epoch_end(self, loop: Loop, record: dict) -> None:
        if not loop.place.main:
            return
        self.rows.append(dict(record))
        self._write()
        if self.tensorboard is not None and not self.opened:
            self.writer = _summary_writer(self.tensorboard)
            self.opened = True
        if self.writer is not None:
            for key, value in record.items():
                if key != "epoch" and checks.is_real(value):
                    self.writer.add_scalar(key, value, record["epoch"])
            self.writer.flush()

    def _write(self) -> None:
        """The CSV of :attr:`rows` (no file without rows)."""
        import csv
        import io

        if not self.rows:
            files.remove(self.path, kind="metrics")
            return
        columns = list(dict.fromkeys(k for row in self.rows for k in row))
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=columns)
        writer.writeheader()
        writer.writerows(self.rows)
        files.write(self.path, text.getvalue().encode("utf-8"), kind="metrics")

    def on_train_end(self, loop: Loop) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer, self.opened = None, False


def _summary_writer(folder: pathlib.Path) -> Any:
    """A TensorBoard ``SummaryWriter`` for ``folder`` from tensorboardX or PyTorch, or
    ``None`` when neither can write event files here."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:        # no torch, or torch without the tensorboard package
            return None
    return SummaryWriter(str(folder))
