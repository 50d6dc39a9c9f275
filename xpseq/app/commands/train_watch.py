"""Where an ``xpseq train`` run stands, for the line of a Ctrl-C: the epoch under way, the
epoch its checkpoint holds, and the command that continues it.

``xpseq: interrupted during epoch 3: the checkpoint m.safetensors holds epoch 2; continue
with: xpseq train --resume m.safetensors``. The checkpoint is written at the end of each
epoch (whole or not at all), so while an epoch runs it holds the one before, or the
checkpoint the run resumed from; between an epoch's end and the next one's start (while
it is being written) the file itself says. Imported by :mod:`.train` when it trains (it
imports :mod:`xpseq.train`).
"""

from __future__ import annotations

import shlex
from typing import Any

from xpseq.train.callbacks import Callback

__all__ = ["EpochWatch"]


class EpochWatch(Callback):
    """A training callback that keeps track of the epoch under way and of the epoch that
    the checkpoint at ``out`` holds, and words them (:meth:`interruption`).

    Parameters
    ----------
    out : str
        The run's checkpoint (``train --out``).
    held : int or None
        The epoch the checkpoint holds as the run starts: the resumed checkpoint's
        (``--resume OUT``), ``None`` for a run that has written none yet.
    again : str
        Options to give again with ``--resume`` (those not stored in a checkpoint, such
        as ``" --compile"``), each after a space; ``""`` for none.
    """

    def __init__(self, out: str, held: int | None, again: str = ""):
        self.out = out
        self.held = held
        self.again = again
        #: The epoch under way (from 1), ``None`` before training starts.
        self.under_way: int | None = None
        #: Between an epoch's end and the next one's start: its checkpoint being written.
        self.ending = False

    def on_train_begin(self, loop: Any) -> None:
        self.under_way = int(loop.state["epoch"]) + 1

    def on_epoch_begin(self, loop: Any) -> None:
        if self.ending:                  # the previous epoch's checkpoint was written
            self.held = int(loop.state["epoch"])
        self.ending = False
        self.under_way = int(loop.state["epoch"]) + 1

    def on_epoch_end(self, loop: Any, record: dict) -> None:
        self.ending = True

    def interruption(self) -> str | None:
        """What a Ctrl-C now interrupts and leaves, in words, or ``None`` before training
        started.

        Returns
        -------
        str or None
            E.g. ``"during epoch 3: the checkpoint m.safetensors holds epoch 2; continue
            with: xpseq train --resume m.safetensors"``; ``"during epoch 1: no checkpoint
            was written yet"`` before the first one.
        """
        if self.under_way is None:
            return None
        held = self.read_held() if self.ending else self.held
        if held is None:
            return f"during epoch {self.under_way}: no checkpoint was written yet"
        where = (f"during epoch {self.under_way}" if held < self.under_way
                 else f"after epoch {held}")
        return (f"{where}: the checkpoint {self.out} holds epoch {held}; continue with: "
                f"xpseq train --resume {shlex.quote(self.out)}{self.again}")

    def read_held(self) -> int | None:
        """The epoch the checkpoint at :attr:`out` holds, read from the file (its state may
        have been written just now); :attr:`held` where it cannot be read.

        Returns
        -------
        int or None
            The epoch, ``None`` where no checkpoint of this run is known.
        """
        from xpseq.train import checkpoint

        try:
            state = checkpoint.load(self.out).train_state
        except Exception:  # noqa: BLE001 (a Ctrl-C's line: what is known, whatever failed)
            return self.held
        return self.held if not state or "epoch" not in state else int(state["epoch"])
