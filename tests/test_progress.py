"""Long calls say what they are doing (xpseq.io.progress.still), and training says when it
compiles a batch shape for the first time."""

from __future__ import annotations

import time

import pytest

from xpseq.io import progress


def test_still_speaks_every_interval_and_stops_with_the_body():
    lines: list[str] = []
    with progress.still("compiling", every=0.05, write=lines.append):
        time.sleep(0.18)
    count = len(lines)
    assert 2 <= count <= 4 and all(l.startswith("  ... compiling (") for l in lines), lines
    time.sleep(0.12)
    assert len(lines) == count                            # nothing after the body ended


def test_still_is_silent_for_a_quick_body_when_disabled_or_when_told_nothing():
    lines: list[str] = []
    with progress.still("quick", every=0.5, write=lines.append):
        pass
    with progress.still("off", every=0.01, enabled=False, write=lines.append):
        time.sleep(0.05)
    with progress.still(lambda: None, every=0.01, write=lines.append):
        time.sleep(0.05)
    assert lines == []
    counter = iter(range(100))
    with progress.still(lambda: f"step {next(counter)}", every=0.02, write=lines.append):
        time.sleep(0.07)
    assert lines[0].startswith("  ... step 0 (") and lines[1].startswith("  ... step 1 (")


@pytest.mark.parametrize("every", [0, -1.0, "1", True, float("nan")])
def test_still_refuses_a_bad_interval(every):
    with pytest.raises(ValueError, match="still: every must be a positive number"):
        with progress.still("x", every=every):
            pass


def test_still_lets_the_body_error_through():
    with pytest.raises(KeyError):
        with progress.still("x", every=0.01, write=lambda line: None):
            raise KeyError("boom")


def test_training_on_jax_says_it_compiles_each_new_batch_shape(monkeypatch, capsys):
    """On a backend that compiles, the first step of a batch shape that runs longer than
    progress.EVERY says what it is doing; the same shape again says nothing."""
    pytest.importorskip("jax")
    import xpseq

    monkeypatch.setattr(progress, "EVERY", 0.001)
    task = xpseq.toy_task(n_train=64, n_dev=8, n_test_per_bucket=2)
    xpseq.Translator.train(task, backend="jax", epochs=2, batch_size=64, embed=8, hidden=8,
                           progress=True)
    out = capsys.readouterr()
    said = [l for l in (out.out + out.err).splitlines() if "compiling the training step" in l]
    shapes = {l.split("batch shape ")[1].split(" (")[0] for l in said}
    assert said and len(shapes) == 1, said            # one batch shape: said in epoch 1 only
    assert "(once per shape)" in said[0]
