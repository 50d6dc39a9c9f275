"""Which G2P model ships inside the package: the campaign's decisions, apart from its I/O.

``scripts/g2p_recipe.py`` trains runs of :mod:`xpseq.tasks.g2p_recipe`, scores each run's
candidates (its best dev epoch, the average of its last epochs) and their ensemble, and
copies one into the package. What it decides is here, typed and tested:

* :class:`Run`: a run's name, kind, seed and whether it is a distilled student
  (``rnn:1`` -> ``rnn-seed1``);
* :func:`choose`: the candidate with the lowest dev WER (only single models with
  ``single``); the test words never take part;
* :func:`stores_in_float16`: float16 storage when it moves the greedy dev WER by at most
  :data:`FLOAT16_TOLERANCE` points;
* :func:`stress_free_beside`: whether a stressed model ships alone or keeps the stress-free
  one beside it for ``stress=False`` (:data:`STRESS_FREE_MARGIN`);
* :func:`manifest`: the ``shipped.json`` that :func:`xpseq.g2p.shipped` reads.

Scoring goes through :func:`xpseq.load_decoder` (:func:`score`), so that a candidate is
decoded exactly as a user of the shipped files decodes it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from xpseq.backends import Backend
from xpseq.data.cmudict import G2PSplit
from xpseq.export.decoders import load_decoder
from xpseq.search import SearchOptions

from .g2p_recipe import evaluate

__all__ = ["Run", "choose", "stores_in_float16", "stress_free_beside", "manifest", "score",
           "FLOAT16_TOLERANCE", "STRESS_FREE_MARGIN"]

#: float16 storage ships when it moves the greedy dev WER by at most this many points (one
#: or two of the 6,302 dev words) from float32's.
FLOAT16_TOLERANCE = 0.05

#: A stressed model ships alone when its dev WER with the stress digits removed is within
#: this many points of the stress-free model's that ships now; otherwise that one stays
#: beside it and answers ``stress=False``.
STRESS_FREE_MARGIN = 0.3

_SPEC = re.compile(r"(transformer|rnn)(?::(\d+))?(:distilled)?")
_NAME = re.compile(r"(transformer|rnn)(?:-seed(\d+))?(-distilled)?")


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run of the campaign.

    ``kind`` is the model kind (``"rnn"``, ``"transformer"``); ``seed`` its seed, ``None``
    for the campaign's own; ``distilled``: a student trained on a teacher's answers
    (sequence-level knowledge distillation, Kim & Rush 2016).

    Examples
    --------
    >>> from xpseq.tasks.g2p_campaign import Run
    >>> run = Run.parse("rnn:3:distilled")
    >>> run.name, run.spec(0)
    ('rnn-seed3-distilled', 'rnn:3:distilled')
    >>> Run.from_name("transformer").seed_or(7)
    7
    """

    kind: str
    seed: int | None = None
    distilled: bool = False

    @classmethod
    def parse(cls, spec: str) -> Run:
        """A run from its command-line form ``KIND``, ``KIND:SEED`` or
        ``KIND:SEED:distilled``.

        Raises
        ------
        ValueError
            Anything else.
        """
        found = _SPEC.fullmatch(spec) if isinstance(spec, str) else None
        if found is None:
            raise ValueError(f"a run is transformer, rnn, KIND:SEED (rnn:1) or "
                             f"KIND:SEED:distilled, got {spec!r}")
        kind, seed, distilled = found.groups()
        return cls(kind, None if seed is None else int(seed), distilled is not None)

    @classmethod
    def from_name(cls, name: str) -> Run:
        """A run from its file stem (:attr:`name`).

        Raises
        ------
        ValueError
            A name no run has.
        """
        found = _NAME.fullmatch(name) if isinstance(name, str) else None
        if found is None:
            raise ValueError(f"not the name of a run: {name!r}")
        kind, seed, distilled = found.groups()
        return cls(kind, None if seed is None else int(seed), distilled is not None)

    @property
    def name(self) -> str:
        """The run's file stem: ``rnn``, ``rnn-seed1``, ``rnn-seed3-distilled``."""
        return (self.kind if self.seed is None else f"{self.kind}-seed{self.seed}") + (
            "-distilled" if self.distilled else "")

    def seed_or(self, default: int) -> int:
        """Its seed, or ``default`` (the campaign's) when it names none."""
        return default if self.seed is None else self.seed

    def spec(self, default_seed: int) -> str:
        """Its command-line form with the seed spelled out (``rnn:3:distilled``)."""
        return f"{self.kind}:{self.seed_or(default_seed)}" + (
            ":distilled" if self.distilled else "")


def choose(options: Sequence[Mapping[str, Any]], *, single: bool = False) -> Mapping[str, Any]:
    """The candidate to ship: the lowest ``dev_wer`` among ``options`` (each with its
    ``files``; with ``single``, only those of one file). The test words take no part.

    Raises
    ------
    ValueError
        No candidate (or no single one with ``single``).

    Examples
    --------
    >>> from xpseq.tasks.g2p_campaign import choose
    >>> choose([{"files": ["a"], "dev_wer": 9.0}, {"files": ["a", "b"], "dev_wer": 8.5}])
    {'files': ['a', 'b'], 'dev_wer': 8.5}
    >>> choose([{"files": ["a"], "dev_wer": 9.0}, {"files": ["a", "b"], "dev_wer": 8.5}],
    ...        single=True)["files"]
    ['a']
    """
    pool = [o for o in options if len(o["files"]) == 1] if single else list(options)
    if not pool:
        raise ValueError("choose: no candidate to ship"
                         + (" (of a single model)" if single else ""))
    return min(pool, key=lambda o: float(o["dev_wer"]))


def stores_in_float16(float32_wer: float, float16_wer: float) -> bool:
    """Whether float16 storage ships: its greedy dev WER within :data:`FLOAT16_TOLERANCE`
    points of float32's (either way: a change is a change).

    >>> from xpseq.tasks.g2p_campaign import stores_in_float16
    >>> stores_in_float16(8.20, 8.23), stores_in_float16(8.20, 8.30)
    (True, False)
    """
    return abs(float16_wer - float32_wer) <= FLOAT16_TOLERANCE


def stress_free_beside(previous: Mapping[str, Any] | None, choice: Mapping[str, Any], *,
                       stress: bool) -> tuple[dict[str, Any] | None, str]:
    """The manifest entry of the stress-free model to keep beside the model that ships,
    or ``None``, and why.

    Only a stressed model (``stress``) shipped over a folder whose manifest
    (``previous``) is stress-free, or keeps one beside it, may keep it: it does unless the
    new model's dev WER with its digits removed (``choice["dev_wer_no_stress"]``) is at most
    :data:`STRESS_FREE_MARGIN` points above that model's dev WER. The test words take no
    part.
    """
    if not stress or previous is None:
        return None, "no stress-free model to keep"
    plain = previous if not previous.get("stress") else previous.get("no_stress")
    new = choice.get("dev_wer_no_stress")
    if not plain or new is None:
        return None, "no stress-free model to keep"
    if new <= plain["dev_wer"] + STRESS_FREE_MARGIN:
        return None, (f"stress removed, the new model's dev WER ({new:.2f} %) is within "
                      f"{STRESS_FREE_MARGIN} of the stress-free model's "
                      f"({plain['dev_wer']:.2f} %): it ships alone")
    kept = {k: plain[k] for k in ("files", "model", "storage", "dev_wer", "scores",
                                  "command") if k in plain}
    return kept, (f"stress removed, the new model's dev WER ({new:.2f} %) is more than "
                  f"{STRESS_FREE_MARGIN} above the stress-free model's "
                  f"({plain['dev_wer']:.2f} %): that one stays beside it, for stress=False")


def manifest(files: Sequence[str], choice: Mapping[str, Any], *, stress: bool, storage: str,
             scores: Mapping[str, Any], command: str,
             no_stress: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``shipped.json`` of the model stored as ``files`` (see
    :func:`xpseq.g2p.shipped`): the choice's name and dev WER, the stored model's test
    ``scores`` (by search), how it is stored and the command that made it.

    Raises
    ------
    ValueError
        No file, or a storage other than float16 / float32.
    """
    if not files:
        raise ValueError("manifest: the shipped model needs at least one file")
    if storage not in ("float16", "float32"):
        raise ValueError(f"manifest: storage must be 'float16' or 'float32', got {storage!r}")
    entry = {"files": list(files), "stress": bool(stress), "model": choice["model"],
             "storage": storage, "dev_wer": choice["dev_wer"], "scores": dict(scores),
             "command": command}
    if stress:
        entry["dev_wer_no_stress"] = choice.get("dev_wer_no_stress")
    if no_stress is not None:
        entry["no_stress"] = dict(no_stress)
    return entry


def score(files: Sequence[str | os.PathLike[str]], split: G2PSplit, backend: Backend,
          part: str, search: tuple[str, SearchOptions],
          limit: int | None = None) -> dict[str, Any]:
    """PER and WER of the checkpoint ``files`` (several: their ensemble), decoded in
    float32 on ``backend`` as :func:`xpseq.load_decoder` loads them, on ``part`` of the
    split (with stress kept, also with the digits removed: ``per_no_stress``,
    ``wer_no_stress``), the first ``limit`` words."""
    decoder = load_decoder(list(files), backend=backend, dtype="float32")
    [row] = evaluate(decoder, split, part=part, searches=[search], limit=limit)
    return {k: v for k, v in row.items() if k != "predictions"}
