"""What :func:`xpseq.train.fit` says while it runs, as a callback: a progress bar per epoch,
one line per finished epoch, and what a long step or the dev loss is doing.

:func:`~xpseq.train.fit` adds a :class:`ProgressBar` in front of the caller's callbacks when
``TrainConfig.progress`` is on (in the process that prints, when several train together).
The bar shows on a terminal only (a log file gets the epoch lines, not every redraw; a
notebook's widget shows anyway). When nothing shows for a while (a batch shape's first
step while JAX or ``torch.compile`` compiles it, an epoch whose bar is hidden, the dev
loss), :func:`xpseq.io.progress.still` says what is happening every few seconds.
"""

from __future__ import annotations

import contextlib
import sys
from types import TracebackType
from typing import Any, Callable, Mapping

from xpseq.io import progress

from .callbacks import Callback, Loop

__all__ = ["ProgressBar", "epoch_line"]

#: The keys of every epoch's record (:class:`~xpseq.train.FitResult`'s ``history``); an
#: epoch line also shows the ones a callback added.
RECORD_KEYS = ("epoch", "train_loss", "dev_loss", "steps", "traces", "lr_scale", "seconds",
               "elapsed")


class ProgressBar(Callback):
    """The progress of a :func:`~xpseq.train.fit` run, on standard output.

    Parameters
    ----------
    steps : int
        Batches per epoch.
    label : str
        What the bar and its lines name (the backend).
    compiles : callable returning bool
        Whether the training step compiles each new batch shape (then the first step of a
        shape is announced while it runs).

    A context manager too: :func:`~xpseq.train.fit` enters it for the run, so that the bar
    and any line in progress stop however the run ends.
    """

    def __init__(self, steps: int, label: str, compiles: Callable[[], bool]):
        # tqdm.auto: a notebook's widget where one can be drawn
        from tqdm.auto import tqdm

        self.tqdm = tqdm
        self.steps, self.label, self.compiles = steps, label, compiles
        self.bar: Any = None
        self.status: _Status | None = None
        self.seen: set[tuple[int, ...]] = set()       # batch shapes stepped once
        self.shape: tuple[int, ...] | None = None      # the one compiling now
        self.talking = contextlib.ExitStack()

    def say(self, line: str) -> None:
        """A line beside the bar, out at once (a pipe buffers)."""
        self.tqdm.write(line)
        if sys.stdout is not None:
            sys.stdout.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._quiet()

    def _quiet(self) -> None:
        self.talking.close()
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_epoch_begin(self, loop: Loop) -> None:
        state, epochs = loop.state, loop.train.epochs
        name = f"epoch {state['epoch'] + 1}/{epochs} [{self.label}]"
        self.bar = self.tqdm(total=self.steps, initial=state["batch"], disable=None,
                             desc=name, leave=False)
        self.status = _Status(name, self.steps, state, shown=not self.bar.disable)
        self.talking.enter_context(progress.still(self.status, write=self.say))

    def on_step_begin(self, loop: Loop, batch: Mapping[str, Any]) -> None:
        shape = tuple(batch["src"].shape) + tuple(batch["tgt_in"].shape[1:])
        if self.status is None or shape in self.seen or not self.compiles():
            return
        self.shape = shape
        self.status.compiling = (f"compiling the training step for batch shape {shape[0]} x "
                                 f"{shape[1]} -> {shape[2]} (once per shape)")

    def on_step_end(self, loop: Loop) -> None:
        if self.shape is not None and self.status is not None:
            self.seen.add(self.shape)
            self.shape = self.status.compiling = None
        if self.bar is not None:
            self.bar.update(1)
            if loop.last_loss is not None:
                self.bar.set_postfix(loss=f"{loop.last_loss:.4f}", refresh=False)

    def on_evaluate_begin(self, loop: Loop) -> None:
        self._quiet()
        compiled = " (compiled for each batch shape on first use)" if self.compiles() else ""
        self.talking.enter_context(progress.still(
            f"computing the dev loss after epoch {loop.state['epoch'] + 1}{compiled}",
            write=self.say))

    def on_evaluate_end(self, loop: Loop) -> None:
        self.talking.close()

    def on_epoch_end(self, loop: Loop, record: dict) -> None:
        self.say(epoch_line(record, self.label))

    def on_train_end(self, loop: Loop) -> None:
        self._quiet()


def epoch_line(record: Mapping[str, Any], label: str) -> str:
    """``epoch 3: train loss 1.2345, dev loss 1.3456, dev_wer 12.5 (numpy, 4 s)``: an
    epoch's record, with what callbacks added to it."""
    dev = record["dev_loss"]
    dev_text = "" if dev is None else f", dev loss {dev:.4f}"
    extra_text = "".join(f", {k} {v:.4g}" if isinstance(v, float) else f", {k} {v}"
                         for k, v in record.items() if k not in RECORD_KEYS)
    return (f"epoch {record['epoch']}: train loss {record['train_loss']:.4f}{dev_text}"
            f"{extra_text} ({label}, {record['seconds']:.0f} s)")


class _Status:
    """What an epoch is doing, for :func:`xpseq.io.progress.still`: the compilation of a
    batch shape's first step while it runs, else nothing while a bar shows the epoch,
    else the batches done so far."""

    def __init__(self, label: str, total: int, state: dict[str, Any], *, shown: bool):
        self.label, self.total, self.state, self.shown = label, total, state, shown
        self.compiling: str | None = None

    def __call__(self) -> str | None:
        if self.compiling is not None:
            return f"{self.label}: {self.compiling}"
        if self.shown:
            return None
        return f"{self.label}: {self.state['batch']}/{self.total} batches"
