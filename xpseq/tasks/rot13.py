"""A long-sequence task: ROT13 of random letter strings thousands of letters long.

The source is a string of letters drawn uniformly from ``a``–``z``, one token a letter; the
target is the same string with every letter moved 13 places along the alphabet (``a`` ->
``n``, ``n`` -> ``a``), so target letter ``i`` is a function of source letter ``i`` alone.
Nothing in the target's own past predicts the next letter (the letters are independent), so
a model learns the task only through a cross-attention that finds source position ``i``
from target position ``i``: with sinusoidal positions a one-layer Transformer does, and its
loss falls from ``ln 26`` ≈ 3.26 nats a letter towards zero.

The dev and test strings are ``length`` letters long. The training strings run from
:data:`SHORTEST` letters up to ``length`` (:func:`training_lengths`): many short ones, which
teach the alignment in cheap steps, and a few long ones, which make it hold over thousands
of positions.

At a few thousand letters a side the plain attention path keeps ``(queries, keys)`` arrays
per head and layer for the backward pass, hundreds of megabytes a string; the blockwise path
(``attention="blockwise"``, :func:`xpseq.core.blockwise_attention`) keeps memory linear in
the length. ``xpseq train --task rot13 --length 2048 --model transformer --attention-path
blockwise`` trains it (the training guide's "Long sequences" gives the whole command, its
time and score, and what the plain path needs).

The pairs are a function of ``seed`` alone: the training, dev and test strings come from
three generators seeded ``(seed, 0)``, ``(seed, 1)`` and ``(seed, 2)``, so more training
strings leave the dev and test strings as they were.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np

from xpseq.core import checks

from .experiment import Task, task_from_pairs

__all__ = ["LETTERS", "LIMITS", "MAX_LETTERS", "DEFAULTS", "SHAPES", "SHORTEST", "rot13",
           "rot13_pairs", "training_lengths", "rot13_task", "check_spec"]

#: The source and target alphabet, one token a letter.
LETTERS: tuple[str, ...] = tuple(string.ascii_lowercase)

#: The largest value of each setting of :func:`rot13_task` (``length`` is the letters a
#: string; the pair counts are strings).
LIMITS: dict[str, int] = {"length": 65536, "n_train": 100000, "n_dev": 10000,
                          "n_test": 10000, "seed": 2**32 - 1}

#: The most letters the dev strings, or the test strings, may hold together
#: (``n_dev · length``, ``n_test · length``).
MAX_LETTERS = 2**24

#: The settings ``xpseq train --task rot13`` uses (``--length`` and ``--seed`` set
#: ``length`` and ``seed``): 8,192 training strings, about 370,000 letters at 2,048.
DEFAULTS: dict[str, int] = {"length": 2048, "n_train": 8192, "n_dev": 4, "n_test": 4,
                            "seed": 0}

#: The batch shapes of ``xpseq train --task rot13`` (each a compilation on JAX):
#: :func:`xpseq.data.make_batches`'s ``shapes``.
SHAPES = 8

#: The shortest training string, in letters (:func:`training_lengths`).
SHORTEST = 8

_ROT13 = {c: LETTERS[(i + 13) % 26] for i, c in enumerate(LETTERS)}


def rot13(letters: list[str]) -> list[str]:
    """Each letter of ``letters`` (``a``–``z``) moved 13 places along the alphabet.

    Raises
    ------
    ValueError
        A token that is not one lowercase letter (named).

    Examples
    --------
    >>> from xpseq.tasks.rot13 import rot13
    >>> "".join(rot13(list("hello")))
    'uryyb'
    """
    out = []
    for i, c in enumerate(letters):
        if c not in _ROT13:
            raise ValueError(f"rot13: letters[{i}] = {c!r} is not a lowercase letter a-z")
        out.append(_ROT13[c])
    return out


def rot13_pairs(lengths: Any, rng: np.random.Generator) -> list[tuple[list[str], list[str]]]:
    """One pair (source letters, their ROT13) for each of ``lengths`` (letters a string),
    the letters drawn uniformly by ``rng``."""
    pairs = []
    for n in np.asarray(lengths, dtype=np.int64).tolist():
        ids = rng.integers(0, len(LETTERS), size=n).tolist()
        pairs.append(([LETTERS[i] for i in ids], [LETTERS[(i + 13) % 26] for i in ids]))
    return pairs


def training_lengths(n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` lengths from :data:`SHORTEST` (or ``length`` if smaller) to ``length`` letters,
    drawn with density proportional to ``1 / length²``: every octave of lengths (8 to 16,
    16 to 32, ..., 1,024 to 2,048) holds about as many letters as any other, so short
    strings are many and cheap (they teach the alignment early) and long ones few."""
    low = min(SHORTEST, length)
    u = rng.uniform(0.0, 1.0, size=n)               # the inverse of the 1 / l² density's CDF
    drawn = 1.0 / (1.0 / low - u * (1.0 / low - 1.0 / (length + 1)))
    return np.clip(np.floor(drawn), low, length).astype(np.int64)


def check_spec(spec: Any, where: str = "rot13_task") -> dict[str, int]:
    """``spec`` (settings of :func:`rot13_task` by name) checked against :data:`LIMITS`,
    as Python ints; a ``ValueError`` that starts with ``where`` and names the setting.
    ``length`` and ``n_train`` are at least 1; the others at least 0."""
    if not isinstance(spec, dict) or set(spec) - set(LIMITS):
        unknown = sorted(set(spec) - set(LIMITS)) if isinstance(spec, dict) else spec
        raise ValueError(f"{where}: unknown settings {unknown!r}; expected some of "
                         f"{sorted(LIMITS)}")
    out = {}
    for name, value in spec.items():
        low = 1 if name in ("length", "n_train") else 0
        if not checks.is_int(value) or not low <= value <= LIMITS[name]:
            raise ValueError(f"{where}: {name} must be an int in [{low}, {LIMITS[name]}], "
                             f"got {value!r}")
        out[name] = int(value)
    for name in ("n_dev", "n_test"):
        letters = out.get(name, 0) * out.get("length", 1)
        if letters > MAX_LETTERS:
            raise ValueError(f"{where}: {name} · length must be at most {MAX_LETTERS:,} "
                             f"letters, got {out[name]} · {out['length']} = {letters:,}")
    return out


def rot13_task(*, length: int = DEFAULTS["length"], n_train: int = DEFAULTS["n_train"],
               n_dev: int = DEFAULTS["n_dev"], n_test: int = DEFAULTS["n_test"],
               seed: int = DEFAULTS["seed"]) -> Task:
    """The ROT13 task: random letter strings up to ``length`` letters and their ROT13.

    Parameters
    ----------
    length : int
        Letters of each dev and test string, source and target alike (1 to 65,536), and
        of the longest training strings.
    n_train : int
        Training pairs (at least 1), from :data:`SHORTEST` letters up to ``length``
        (:func:`training_lengths`).
    n_dev : int
        Dev pairs, ``length`` letters each.
    n_test : int
        Test pairs (``task.test["test"]``), ``length`` letters each.
    seed : int
        The seed of the strings drawn: the same seed gives the same pairs.

    Returns
    -------
    Task
        The pairs (lists of one-letter tokens) and the two vocabularies (the 4 reserved ids,
        then the letters that occur).

    Raises
    ------
    ValueError
        A setting that is not an int in its range (:data:`LIMITS`), or dev or test strings
        of more than :data:`MAX_LETTERS` letters together (the message names the setting).

    Examples
    --------
    >>> from xpseq.tasks.rot13 import rot13_task
    >>> task = rot13_task(length=6, n_train=2, n_dev=1, n_test=1, seed=3)
    >>> source, target = task.dev[0]
    >>> "".join(source), "".join(target)
    ('zgpkui', 'mtcxhv')
    """
    spec = check_spec({"length": length, "n_train": n_train, "n_dev": n_dev,
                       "n_test": n_test, "seed": seed})
    rngs = [np.random.default_rng([spec["seed"], i]) for i in range(3)]
    train = rot13_pairs(training_lengths(spec["n_train"], spec["length"], rngs[0]), rngs[0])
    dev, test = (rot13_pairs([spec["length"]] * spec[name], rng)
                 for name, rng in (("n_dev", rngs[1]), ("n_test", rngs[2])))
    return task_from_pairs(train, dev, {"test": test})
