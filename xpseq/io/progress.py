"""Never silent: a long call says what it is doing.

:func:`still` wraps a call that may run long with nothing to show (JAX compiling a program
on its first use, an epoch whose progress bar is hidden because the output is a file, a
decoding pass over thousands of words): when it has run ``every`` seconds, and every
``every`` seconds after that, one line says what is happening and for how long::

    with progress.still("compiling the training step for batch shape (64, 9, 11)"):
        params, state, loss = step(params, state, batch)

prints nothing if the step returns within ``every`` seconds, and otherwise lines such as
``  ... compiling the training step for batch shape (64, 9, 11) (10 s so far)``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Callable, Iterator

__all__ = ["still", "EVERY"]

#: Seconds of silence after which :func:`still` says what is happening (and again every
#: ``EVERY`` seconds).
EVERY = 8.0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def still(what: str | Callable[[], str | None], *, every: float | None = None,
          enabled: bool = True,
          write: Callable[[str], None] | None = None) -> Iterator[None]:
    """Say ``what`` is happening each time the body has run another ``every`` seconds.

    Parameters
    ----------
    what : the activity, or a function called at each line that describes it (e.g. the
        batches done so far), or returns None to say nothing this time (e.g. while a
        progress bar shows)
    every : seconds between lines (the first comes after ``every`` seconds, none if the
        body is quicker); default :data:`EVERY`
    enabled : False: say nothing (the caller's ``progress=False``)
    write : where a line goes (default: standard error); e.g. ``tqdm.write`` beside a bar

    Raises
    ------
    ValueError
        ``every`` is not a positive number of seconds.

    Examples
    --------
    >>> import time
    >>> lines = []
    >>> with still("waiting", every=0.05, write=lines.append):
    ...     time.sleep(0.12)
    >>> lines[0]
    '  ... waiting (0 s so far)'
    """
    every = EVERY if every is None else every
    if not isinstance(every, (int, float)) or isinstance(every, bool) or not every > 0:
        raise ValueError(f"still: every must be a positive number of seconds, got {every!r}")
    if not enabled:
        yield
        return
    out = _stderr if write is None else write
    done = threading.Event()
    started = time.perf_counter()

    def speak() -> None:
        while not done.wait(every):
            text = what() if callable(what) else what
            if text is not None:
                out(f"  ... {text} ({time.perf_counter() - started:.0f} s so far)")

    thread = threading.Thread(target=speak, name="xpseq-still", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
