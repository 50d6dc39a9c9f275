"""Pictures: attention heatmaps (terminal and PNG) and loss curves (PNG, matplotlib)."""

from __future__ import annotations

import logging
import os
import pathlib
import warnings
from typing import Mapping, Sequence

import numpy as np

from xpseq.io import files

__all__ = ["ascii_heatmap", "save_heatmap", "save_loss_curves", "MatplotlibFolderWarning"]

_SHADES = " .:-=+*#%@"          # light to heavy; weight w gets shade int(w * 10), capped at 9


def ascii_heatmap(weights: np.ndarray, source: Sequence[str], output: Sequence[str]) -> str:
    """Attention weights as text: one row per generated token, one column per source token.

    Parameters
    ----------
    weights : array ``(len(output), len(source))``, rows summing to one
    source, output : the tokens labelling the columns and the rows

    Returns
    -------
    str: a header of source tokens, one line per output token, each cell a shade from
    ``' '`` (weight < 0.1) to ``'@'`` (weight >= 0.9) drawn twice for width, and a legend
    line of the shades.
    """
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (len(output), len(source)):
        raise ValueError(f"ascii_heatmap: weights have shape {weights.shape} but there are "
                         f"{len(output)} output and {len(source)} source tokens")
    width = max(3, *(len(s) for s in source)) + 1
    label = max(len(t) for t in output) if output else 1
    header = " " * (label + 1) + "".join(s[:width - 1].rjust(width) for s in source)
    lines = [header]
    for token, row in zip(output, weights):
        cells = "".join((_SHADES[min(int(w * 10), 9)] * 2).rjust(width) for w in row)
        lines.append(f"{token.rjust(label)} {cells}")
    lines.append(legend())
    return "\n".join(lines)


def legend() -> str:
    """The shades of :func:`ascii_heatmap` and the weights they stand for."""
    steps = [f"'{_SHADES[0]}' < 0.1"]
    steps += [f"'{c}' {i / 10:.1f}-{(i + 1) / 10:.1f}" for i, c in enumerate(_SHADES[1:-1], 1)]
    return "weights: " + ", ".join(steps + [f"'{_SHADES[-1]}' >= 0.9"])


def save_heatmap(path: str | pathlib.Path, weights: np.ndarray, source: Sequence[str],
                 output: Sequence[str], *, title: str = "", force: bool = False) -> pathlib.Path:
    """A PNG heatmap of attention weights with the tokens as tick labels, written through
    :func:`xpseq.io.files.write` (never over an input of the run; over an existing file
    that is not a PNG of xpseq only with ``force``)."""
    files.check(path, kind="png", force=force)
    plt = _pyplot()
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (len(output), len(source)):
        raise ValueError(f"save_heatmap: weights have shape {weights.shape} but there are "
                         f"{len(output)} output and {len(source)} source tokens")
    fig, ax = plt.subplots(figsize=(0.5 * len(source) + 2, 0.45 * len(output) + 1.5))
    image = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(source)), labels=list(source), rotation=60, ha="right")
    ax.set_yticks(range(len(output)), labels=list(output))
    ax.set_xlabel("source")
    ax.set_ylabel("generated")
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.04)
    return _save(plt, fig, path, force)


def save_loss_curves(path: str | pathlib.Path, histories: Mapping[str, Sequence[dict]], *,
                     title: str = "training and dev loss", force: bool = False) -> pathlib.Path:
    """A PNG of train (solid) and dev (dashed) loss per epoch for each named run, written
    as :func:`save_heatmap` writes.

    ``histories`` maps a run's name to its ``fit`` history (dicts with ``epoch``,
    ``train_loss`` and ``dev_loss``).
    """
    files.check(path, kind="png", force=force)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (name, history) in enumerate(histories.items()):
        color = f"C{i}"
        epochs = [h["epoch"] for h in history]
        ax.plot(epochs, [h["train_loss"] for h in history], color=color, label=f"{name} train")
        dev = [h["dev_loss"] for h in history if h.get("dev_loss") is not None]
        if dev:
            ax.plot(epochs[:len(dev)], dev, color=color, linestyle="--", label=f"{name} dev")
    ax.set_xlabel("epoch")
    ax.set_ylabel("cross-entropy per token")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    return _save(plt, fig, path, force)


class MatplotlibFolderWarning(UserWarning):
    """Matplotlib's own folder cannot be written: xpseq gave it another (one note)."""


class _Held(logging.Handler):
    """A logging handler that keeps the records it is given."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no screen needed).

    Where Matplotlib cannot write its own folder (a read-only ``HOME``, ``MPLCONFIGDIR``
    unset) it makes a temporary one, builds its font cache there and logs a warning for
    each; those records are held back while it is imported, and one
    :class:`MatplotlibFolderWarning` says what happened instead (the command's one
    ``xpseq: note:`` line). The process's environment is left as it was (Matplotlib
    would set ``MPLCONFIGDIR`` to its temporary folder)."""
    before = os.environ.get("MPLCONFIGDIR")      # (Matplotlib sets it to its temporary one)
    logger = logging.getLogger("matplotlib")
    hold = _Held(logging.WARNING)
    logger.addHandler(hold)
    propagate, logger.propagate = logger.propagate, False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    finally:
        logger.removeHandler(hold)
        logger.propagate = propagate
        if before is None:                       # the caller's environment as it was
            os.environ.pop("MPLCONFIGDIR", None)
    if hold.records:
        warnings.warn(MatplotlibFolderWarning(
            f"Matplotlib cannot write its folder; it used the temporary "
            f"{matplotlib.get_configdir()} and builds its font cache at each run (set "
            f"MPLCONFIGDIR to a folder it can write)"), stacklevel=3)
    return plt


def _save(plt, fig, path: str | pathlib.Path, force: bool) -> pathlib.Path:
    # exactly at path, whatever its suffix; the Software text names its writer, so that
    # the door knows a PNG of its own from a user's (xpseq.io.files.is_own_png). A label
    # in a script the font lacks is drawn as a box, without a warning per character.
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")
            fig.tight_layout()
            return files.write(path, lambda f: fig.savefig(
                f, dpi=120, format="png", metadata={"Software": files.PNG_SOFTWARE}),
                kind="png", force=force)
    finally:
        plt.close(fig)
