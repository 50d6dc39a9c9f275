"""The long-sequence task ``rot13`` (:mod:`xpseq.tasks.rot13`): its pairs are a function of
the seed, ``xpseq train --task rot13`` trains on it (a tiny length here; the training guide
gives the long run), and bad settings give one-line errors that name the option."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from helpers import assert_ok

from xpseq.tasks.rot13 import LETTERS, SHORTEST, rot13, rot13_task, training_lengths

TIMEOUT = 180


def xpseq(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xpseq", *map(str, args)], input="",
                          capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd)


def test_the_pairs_are_a_function_of_the_seed():
    a = rot13_task(length=50, n_train=3, n_dev=2, n_test=2, seed=7)
    b = rot13_task(length=50, n_train=3, n_dev=2, n_test=2, seed=7)
    c = rot13_task(length=50, n_train=3, n_dev=2, n_test=2, seed=8)
    assert (a.train, a.dev, a.test) == (b.train, b.dev, b.test)
    assert a.train != c.train
    assert a.train[0] != a.dev[0] != a.test["test"][0]        # three streams of one seed
    # more training pairs leave the dev and test pairs as they were
    d = rot13_task(length=50, n_train=5, n_dev=2, n_test=2, seed=7)
    assert (d.dev, d.test) == (a.dev, a.test)


def test_every_target_letter_is_the_rot13_of_its_source_letter():
    task = rot13_task(length=300, n_train=200, n_dev=2, n_test=2, seed=0)
    for source, target in task.train + task.dev + task.test["test"]:
        assert len(source) == len(target)
        assert set(source) <= set(LETTERS)
        assert target == [LETTERS[(LETTERS.index(c) + 13) % 26] for c in source]
        assert rot13(target) == source                      # its own inverse
    assert len(task.src_vocab) == len(task.tgt_vocab) == 4 + 26
    # the dev and test strings are all as long as asked; the training ones from 8 letters
    # up, about as many letters in each octave of lengths
    assert {len(s) for s, _ in task.dev + task.test["test"]} == {300}
    lengths = np.array([len(s) for s, _ in task.train])
    assert lengths.min() >= SHORTEST and lengths.max() <= 300
    drawn = training_lengths(20000, 2048, np.random.default_rng(0))
    octaves = [drawn[(drawn >= 2 ** k) & (drawn < 2 ** (k + 1))].sum() for k in range(3, 10)]
    assert max(octaves) < 1.3 * min(octaves)
    assert list(training_lengths(3, 5, np.random.default_rng(0))) == [5, 5, 5]


@pytest.mark.parametrize("setting, value", [("length", 0), ("length", 65537), ("n_train", 0),
                                            ("n_dev", -1), ("seed", 1.5), ("seed", True),
                                            ("n_test", "3")])
def test_a_bad_setting_is_named(setting, value):
    with pytest.raises(ValueError, match=f"rot13_task: {setting} must be an int"):
        rot13_task(**{setting: value})


def test_dev_and_test_strings_are_bounded_in_letters():
    with pytest.raises(ValueError, match="rot13_task: n_test · length must be at most"):
        rot13_task(length=65536, n_test=300)


def test_rot13_names_a_token_that_is_not_a_letter():
    with pytest.raises(ValueError, match=r"letters\[1\] = 'B'"):
        rot13(["a", "B"])


def test_the_command_trains_it(tmp_path):
    out = tmp_path / "m.safetensors"
    done = xpseq("train", "--backend", "numpy", "--task", "rot13", "--length", "6",
                 "--model", "transformer", "--attention-path", "blockwise",
                 "--attention-block", "4", "--d-model", "8", "--heads", "2", "--layers", "1",
                 "--d-ff", "8", "--epochs", "1", "--batch-size", "64", "--no-progress",
                 "--out", out, cwd=tmp_path)
    assert_ok(done)
    assert "saved" in done.stdout and "1 epoch" in done.stdout
    assert "8192 sentence pairs, vocabularies 30 / 30" in done.stderr
    from xpseq.train.checkpoint import load

    meta = load(out).metadata
    assert meta["task"] == "rot13" and meta["data"]["length"] == 6
    assert meta["options"]["length"] == 6


@pytest.mark.parametrize("args, message", [
    (["--task", "rot13", "--length", "0"], "--length: expected a positive integer, got 0"),
    (["--task", "rot13", "--length", "70000"], "--length: expected at most 65536"),
    (["--task", "rot13", "--length", "x"], "--length: expected a positive integer, got 'x'"),
    (["--task", "toy", "--length", "10"], "--length is an option of --task rot13"),
    (["--task", "rot13", "--quick"], "--task rot13 draws its strings"),
])
def test_bad_options_give_one_line_errors(tmp_path, args, message):
    done = xpseq("train", "--backend", "numpy", *args, "--out", tmp_path / "m.safetensors",
                 cwd=tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert message in last, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "m.safetensors").exists()
