"""Which G2P model ships inside the package: the campaign that trains, scores and ships it.

``python -m scripts.g2p_recipe`` is the command line over this module. :class:`Campaign` works
in one folder: it trains runs of :mod:`xpseq.tasks.g2p_recipe` (:meth:`Campaign.train`,
resumable, a distilled student on a teacher's answers), scores each run's candidates (its
best dev epoch, the average of its last epochs) and their ensemble
(:meth:`Campaign.evaluate`), and copies one into the package (:meth:`Campaign.ship`);
:func:`report` writes the tables. What it decides is in functions of their own, typed and
tested:

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
import json
import os
import pathlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from xpseq.backends import Backend
from xpseq.data.cmudict import G2PSplit
from xpseq.export.decoders import load_decoder
from xpseq.io import files as io_files
from xpseq.search import SearchOptions
from xpseq.train import callbacks as cb

from . import g2p_recipe
from .g2p_recipe import evaluate

__all__ = ["Run", "choose", "stores_in_float16", "stress_free_beside", "manifest", "score",
           "Campaign", "report", "FLOAT16_TOLERANCE", "STRESS_FREE_MARGIN",
           "FIRST_RECIPE_SCORES", "PUBLISHED"]

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
        return cls._of(found)

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
        return cls._of(found)

    @classmethod
    def _of(cls, found: re.Match[str]) -> Run:
        """The run of a match of :data:`_SPEC` or :data:`_NAME` (kind, seed, distilled)."""
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


def _number(value: Any) -> Any:
    """For ``json.dumps``: a NumPy scalar as its Python number."""
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _write_json(path: pathlib.Path, data: Any) -> None:
    # The campaign's own record in its own folder: rewritten as the campaign goes.
    io_files.write(path, (json.dumps(data, indent=1, default=_number) + "\n").encode("utf-8"),
                kind="json", force=True)


def _read_json(path: pathlib.Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _epoch_of(path: pathlib.Path) -> int:
    """``N`` of ``<name>.epoch<N>.safetensors``."""
    return int(path.suffixes[-2][len(".epoch"):])


def _epoch_files(out: pathlib.Path, name: str) -> list[pathlib.Path]:
    """Run ``name``'s kept epochs (``<name>.epoch<N>.safetensors``), oldest first."""
    return sorted(out.glob(f"{name}.epoch*.safetensors"), key=_epoch_of)


class _LastState(cb.SaveCheckpoint):
    """After every epoch the run's whole state (parameters, optimiser, progress), for a
    resumed run; never the best epoch's parameters that the run ends with."""

    def on_train_end(self, loop: Any) -> None:
        pass


@dataclasses.dataclass
class Campaign:
    """The campaign in its folder ``out``: train runs, score their candidates, ship one.

    Every step reads what the one before wrote in ``out``, so that each may run in a
    session of its own: per run ``<run>.safetensors`` (its best dev epoch),
    ``<run>.epoch<N>.safetensors`` (its last epochs), ``<run>.avg.safetensors`` (their
    average), ``<run>.state.safetensors`` (its last whole state, to resume) and
    ``<run>.run.json`` (its record: recipe, learning curve); ``teacher.tsv`` (a teacher's
    answers, for distilled runs).

    Parameters
    ----------
    out : the campaign's folder (made if missing)
    split : the CMU dictionary's split (:func:`xpseq.data.cmudict.load_g2p`)
    backend : training and decoding backend
    seed : the seed of the runs that name none
    beam : the beam search's size (greedy search is always scored)
    dev_words, test_words : score only the first this many dev / test words (quick
        checks; the scores are then not comparable); ``None`` for all
    log : where progress lines go (``print`` by default)
    """

    out: pathlib.Path
    split: G2PSplit
    backend: Backend
    seed: int = 0
    beam: int = 5
    dev_words: int | None = None
    test_words: int | None = None
    log: Callable[[str], None] = print

    def __post_init__(self) -> None:
        self.out = pathlib.Path(self.out)
        io_files.make_folder(self.out)

    @property
    def searches(self) -> list[tuple[str, SearchOptions]]:
        """Greedy search and beam search of :attr:`beam` (length-normalised scores)."""
        return [("greedy", SearchOptions()),
                (f"beam k={self.beam}", SearchOptions(method="beam", k=self.beam,
                                                      length_penalty="avg"))]

    def distilled_split(self, teacher: Sequence[str] | None = None) -> G2PSplit:
        """The split whose training words carry the teacher's answers (each word once, its
        answer the teacher's greedy search): what a distilled run trains on. ``teacher``:
        checkpoint files in ``out`` (several: an ensemble), by default the choice that
        :meth:`evaluate` wrote (``results.json``). The answers are written once to
        ``teacher.tsv`` and read back after; a word the teacher gave no phones keeps its
        dictionary pronunciations.

        Raises
        ------
        ValueError
            ``teacher.tsv`` lacks training words of this split.
        """
        path = self.out / "teacher.tsv"
        if not path.is_file():
            files = teacher or _read_json(self.out / "results.json")["choice"]["files"]
            decoder = load_decoder([self.out / f for f in files], backend=self.backend)
            words = list(self.split.train)
            start = time.perf_counter()
            answers = g2p_recipe.predict(decoder, words)
            self.log(f"   teacher {' + '.join(files)}: {len(words)} training words in "
                     f"{time.perf_counter() - start:.0f} s")
            text = "".join(f"{w}\t{' '.join(a)}\n" for w, a in zip(words, answers))
            io_files.write(path, text.encode("utf-8"), kind="tsv")
        train = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            word, _, phones = line.partition("\t")
            train[word] = phones.split()
        missing = [w for w in self.split.train if w not in train]
        if missing:
            raise ValueError(f"{path} lacks {len(missing)} training words (from another "
                             "split? remove it to decode them again)")
        return G2PSplit(train={w: [tuple(train[w])] if train[w] else self.split.train[w]
                               for w in self.split.train}, dev=self.split.dev,
                        test=self.split.test, stress=self.split.stress, seed=self.split.seed)

    def train(self, run: Run, *, minutes: float, overrides: Mapping[str, Any] | None = None,
              devices: int = 1, resume: bool = False, progress: bool = True,
              teacher: Sequence[str] | None = None) -> dict[str, Any]:
        """Train ``run`` with :data:`xpseq.tasks.g2p_recipe.RECIPE` (changed by
        ``overrides``; an option of the other model kind is left out) for ``minutes``
        more, data-parallel on ``devices``; with ``resume`` from its last state, its
        learning curve and epoch files kept. Writes and returns its record.

        Raises
        ------
        ValueError
            An override that no recipe option names.
        FileNotFoundError
            ``resume`` without the run's state in ``out``.
        ValueError
            ``resume`` from a file that holds no training state.
        """
        from xpseq.train import checkpoint

        known = set(g2p_recipe.RECIPE).union(*g2p_recipe.MODELS.values())
        unknown = sorted(set(overrides or {}) - known)
        if unknown:
            raise ValueError(f"train: unknown recipe options {unknown}; known: {sorted(known)}")
        name, kind, seed = run.name, run.kind, run.seed_or(self.seed)
        mine = {k: v for k, v in (overrides or {}).items()
                if k in g2p_recipe.RECIPE or k in g2p_recipe.MODELS[kind]}
        split = self.distilled_split(teacher) if run.distilled else self.split
        self.log(f"\n== {name}: {len(split.train)} train / {len(split.dev)} dev words, "
                 f"{self.backend.name} on {devices} device(s), seed {seed}, {minutes} min")
        state_path, record_path = self.out / f"{name}.state.safetensors", \
            self.out / f"{name}.run.json"
        resumed, before, earlier = None, 0.0, {}
        if resume:
            if not state_path.is_file():
                raise FileNotFoundError(f"resume: {state_path} is missing (run {name} was "
                                        f"not trained in {self.out})")
            resumed = checkpoint.load(state_path)
            state = resumed.train_state
            if state is None:
                raise ValueError(f"resume: {state_path} holds no training state")
            if record_path.is_file():
                earlier = _read_json(record_path)
            else:            # a run stopped before its end wrote no record: the state's
                history = [{**h, "minutes": h["elapsed"] / 60}
                           for h in state["history"]]
                earlier = {"history": history,
                           "train_minutes": history[-1]["minutes"] if history else 0.0}
            before = earlier["train_minutes"]
            self.log(f"   resumed from {state_path.name}: epoch "
                     f"{state['epoch']}, step {state['step']}, "
                     f"{before:.1f} minutes so far")
        else:
            for old in _epoch_files(self.out, name):          # an earlier run's
                io_files.remove(old, kind="checkpoint")
        task = g2p_recipe.g2p_task(split)
        last = _LastState(state_path, vocabs={"src": task.src_vocab.to_list(),
                                              "tgt": task.tgt_vocab.to_list()})
        start = time.perf_counter()
        _, result, task = g2p_recipe.train(
            split, self.backend, checkpoint=str(self.out / f"{name}.safetensors"),
            seed=seed, progress=progress, dev_words=self.dev_words, devices=devices,
            callbacks=[last], resume=resumed,
            **{**mine, "model": kind, "time_limit_minutes": minutes})
        # Minutes since the run began: an earlier call's epochs keep theirs.
        prior = {h["epoch"]: h["minutes"] for h in earlier.get("history", [])}
        for h in result.history:
            h["minutes"] = prior.get(h["epoch"], before + h["elapsed"] / 60)
        options, fields = g2p_recipe.recipe(**{**mine, "model": kind})
        epochs = _epoch_files(self.out, name)
        for old in epochs[:max(len(epochs) - options["keep_epochs"], 0)]:   # resumed: older
            io_files.remove(old, kind="checkpoint")
        record = {"name": name, "kind": kind, "seed": seed, "distilled": run.distilled,
                  "recipe": {**options, **fields, "devices": devices,
                             "time_limit_minutes": minutes},
                  "parameters": int(sum(v.size for v in result.params.values())),
                  "train_pairs": len(task.train),
                  "train_minutes": before + (time.perf_counter() - start) / 60,
                  "resumed": earlier.get("resumed", 0) + 1 if resumed is not None else 0,
                  "epochs": len(result.history), "best_epoch": result.best_epoch,
                  "stopped": result.stopped, "history": result.history}
        _write_json(record_path, record)
        return record

    def records(self) -> list[dict[str, Any]]:
        """The records of every run in ``out`` (earlier calls' too), by name."""
        return [_read_json(p) for p in sorted(self.out.glob("*.run.json"))]

    def candidates(self, record: dict[str, Any]) -> dict[str, str]:
        """A run's candidates, named, and their files in ``out``: its best dev epoch and
        the average of its kept epochs (written here; a member of an earlier session keeps
        its average and record, its epochs gone). Notes the averaged epochs in its record,
        so that it may join an ensemble later.

        Raises
        ------
        FileNotFoundError
            The run has no checkpoint to score.
        """
        from xpseq.train import checkpoint

        name = record.get("name", record["kind"])
        epochs = _epoch_files(self.out, name)
        files = {}
        if (self.out / f"{name}.safetensors").is_file():
            files[f"{name}, best epoch ({record['best_epoch']})"] = f"{name}.safetensors"
        if len(epochs) > 1:
            averaged = checkpoint.average(epochs)
            checkpoint.save(self.out / f"{name}.avg.safetensors", config=averaged.config,
                            params=averaged.params, vocabs=averaged.vocabs,
                            train_state=averaged.train_state, metadata=averaged.metadata)
            span = [_epoch_of(epochs[0]), _epoch_of(epochs[-1])]
            if record.get("averaged") != span:
                record["averaged"] = span
                _write_json(self.out / f"{name}.run.json", record)
        elif not (record.get("averaged") and (self.out / f"{name}.avg.safetensors").is_file()):
            span = []
        else:
            span = record["averaged"]
        if span:
            files[f"{name}, average of epochs {span[0]}-{span[1]}"] = f"{name}.avg.safetensors"
        if not files:
            raise FileNotFoundError(f"{self.out}: run {name} has no checkpoint to score (its "
                                    f"{name}.safetensors or epoch files)")
        return files

    def evaluate(self, runs: Sequence[str], *, single: bool = False) -> dict[str, Any]:
        """Score the candidates of ``runs`` (names): each on the dev words (to choose)
        and the test words with greedy search, each run's best with beam search too, and
        the ensemble of the runs' best (distilled students are no members) both ways; then
        :func:`choose` one (``single``: no ensemble). Returns ``runs`` (their records),
        ``rows`` (the scores), ``options`` (the candidates) and ``choice``."""
        greedy, beam = self.searches
        records = [r for r in self.records() if r.get("name", r["kind"]) in runs]
        rows: list[dict[str, Any]] = []
        chosen: list[tuple[str, str]] = []
        options: list[dict[str, Any]] = []

        def test_row(name: str, files: list[pathlib.Path], dev_wer: float,
                     search: tuple[str, SearchOptions]) -> None:
            test = score(files, self.split, self.backend, "test", search, self.test_words)
            rows.append({"model": name, "dev_wer": dev_wer, **test})
            self.log(f"   {name}, {search[0]}: dev WER {dev_wer:.2f} %, test PER "
                     f"{test['per']:.2f} % WER {test['wer']:.2f} %")

        for record in records:
            files = self.candidates(record)
            dev = {name: score([self.out / file], self.split, self.backend, "dev", greedy,
                               self.dev_words) for name, file in files.items()}
            for name, file in files.items():
                test_row(name, [self.out / file], dev[name]["wer"], greedy)
            best = min(dev, key=lambda n: dev[n]["wer"])
            test_row(best, [self.out / files[best]], dev[best]["wer"], beam)
            member = not record.get("distilled")
            if member:
                chosen.append((best, files[best]))
            options.append({"model": best, "files": [files[best]],
                            "dev_wer": dev[best]["wer"],
                            "dev_wer_no_stress": dev[best].get("wer_no_stress"),
                            "member": member})
        if len(chosen) > 1:
            ensemble = [self.out / file for _, file in chosen]
            name = "ensemble: " + " + ".join(n for n, _ in chosen)
            on_dev = score(ensemble, self.split, self.backend, "dev", greedy, self.dev_words)
            for search in (greedy, beam):
                test_row(name, ensemble, on_dev["wer"], search)
            options.append({"model": name, "files": [file for _, file in chosen],
                            "dev_wer": on_dev["wer"],
                            "dev_wer_no_stress": on_dev.get("wer_no_stress")})
        return {"runs": records, "rows": rows, "options": options,
                "choice": dict(choose(options, single=single))}

    def ship(self, results: Mapping[str, Any], folder: str | os.PathLike[str], *,
             command: str) -> dict[str, Any]:
        """Copy the chosen model (``results["choice"]``) into ``folder`` with float16
        storage if :func:`stores_in_float16` says so (else float32; the test words take no
        part), keeping the stress-free model beside a stressed one if
        :func:`stress_free_beside` says so, and write its :func:`manifest`
        ``shipped.json`` with the stored model's test scores. Files of ``folder`` other
        than a kept stress-free model's are replaced. Returns the manifest.

        Raises
        ------
        ValueError
            A file of the model has the name of the stress-free model kept beside it.
        """
        from xpseq.train import checkpoint

        choice, stress = results["choice"], bool(self.split.stress)
        target = pathlib.Path(folder)
        io_files.make_folder(target)
        path = target / "shipped.json"
        previous = _read_json(path) if path.is_file() else None
        plain, why = stress_free_beside(previous, choice, stress=stress)
        if previous is not None and stress:
            self.log(f"   {why}")
        kept = set(plain["files"]) if plain is not None else set()

        def store(dtype: str) -> tuple[list[str], dict[str, Any]]:
            for old in target.glob("*.safetensors"):
                if old.name not in kept:
                    io_files.remove(old, kind="checkpoint")
            names = []
            for name in choice["files"]:
                ckpt = checkpoint.load(self.out / name)
                stored = target / name.replace(".avg", "")
                if stored.name in kept:
                    raise ValueError(f"ship: {stored.name} is the name of the model without "
                                     "stress that ships beside it")
                checkpoint.save(stored, config=ckpt.config, vocabs=ckpt.vocabs,
                                params={k: v.astype(dtype) for k, v in ckpt.params.items()},
                                metadata={**(ckpt.metadata or {}), "shipped_from": name})
                names.append(stored.name)
            files = [target / n for n in names]                  # as a user loads them
            dev_wer = score(files, self.split, self.backend, "dev", self.searches[0],
                            self.dev_words)["wer"]
            if dtype == "float16" and not stores_in_float16(choice["dev_wer"], dev_wer):
                return names, {"dev_wer": dev_wer}
            scores = {}
            for search in self.searches:
                row = score(files, self.split, self.backend, "test", search, self.test_words)
                scores[search[0]] = {k: v for k, v in row.items() if k != "search"}
            return names, {**scores, "dev_wer": dev_wer}

        storage = "float16"
        names, scores = store(storage)
        self.log(f"   float16 storage: greedy dev WER {choice['dev_wer']:.2f} -> "
                 f"{scores['dev_wer']:.2f} %")
        if "greedy" not in scores:
            self.log("   (more than the tolerance): shipping float32")
            storage = "float32"
            names, scores = store(storage)
        scores.pop("dev_wer")
        entry = manifest(names, choice, stress=stress, storage=storage, scores=scores,
                         command=command, no_stress=plain)
        _write_json(path, entry)
        return entry


#: The first recipe's test scores (an LSTM, constant step size halved on plateaus, early
#: stopping on the dev WER; 45 minutes on one core): the first row of the report's table.
FIRST_RECIPE_SCORES = {"greedy": (6.94, 28.63), "beam": (6.84, 28.39)}

#: Published results on the CMU dictionary, for context only: older dictionary versions
#: and other splits (PER %, WER %).
PUBLISHED = [
    ("Sequitur joint-sequence (Bisani & Ney 2008)", "5.88", "24.53",
     "CMUdict 106,837 / 12,000 split, no stress"),
    ("Yao & Zweig 2015, bi-LSTM", "5.45", "23.55", "same split"),
    ("Toshniwal & Livescu 2016, global attention ensemble", "4.69", "20.24", "same split"),
    ("CMUSphinx g2p-seq2seq, Transformer", "", "30.2", "current dictionary, its own split"),
    ("Phonetisaurus", "", "33.9", "current dictionary, its own split"),
]


def report(results: Mapping[str, Any], header: str) -> str:
    """The Markdown of :meth:`Campaign.evaluate`'s ``results`` under the line ``header``:
    the scores (with the first recipe's first), each run's learning curve, and the
    published results for context."""
    from xpseq.tasks.metrics import format_table

    first = "first recipe: LSTM, step size halved on plateaus (earlier run)"
    table: list[list[Any]] = [[first, "", "greedy", *FIRST_RECIPE_SCORES["greedy"], ""],
                              [first, "", "beam k=5", *FIRST_RECIPE_SCORES["beam"], ""]]
    stress = any("wer_no_stress" in r for r in results["rows"])
    for r in results["rows"]:
        table.append([r["model"], f"{r['dev_wer']:.2f}", r["search"], f"{r['per']:.2f}",
                      f"{r['wer']:.2f}", r["words"]] + ([
                          f"{r['per_no_stress']:.2f}", f"{r['wer_no_stress']:.2f}"]
                          if stress else []))
    lines = [header, ""]
    if stress:
        table = [row + ["", ""] if len(row) == 6 else row for row in table]
        lines += ["With stress kept (dev WER and the first columns: stress digits must match; "
                  "the last two: the predictions' digits and the references' removed).", ""]
    lines += [format_table(["model", "dev WER %", "search", "test PER %", "test WER %",
                            "test words"] + (["test PER % (stress removed)",
                                              "test WER % (stress removed)"] if stress else []),
                           table), ""]
    for run in results["runs"]:
        lines += [f"Learning curve, {run.get('name', run['kind'])} ({run['parameters']:,} "
                  f"parameters, seed {run.get('seed', 0)}, "
                  f"{run['recipe']['devices']} devices, stopped: {run['stopped']}; dev "
                  "WER/PER: greedy search on the dev words after every epoch):", ""]
        curve = [[f"{h['epoch']}{' (best)' if h['epoch'] == run['best_epoch'] else ''}",
                  f"{h['minutes']:.1f}", h["steps"], f"{h['train_loss']:.4f}",
                  f"{h['dev_loss']:.4f}", h.get("dev_per", ""), h.get("dev_wer", "")]
                 for h in run["history"]]
        lines += [format_table(["epoch", "minutes", "steps", "train loss", "dev loss",
                                "dev PER %", "dev WER %"], curve), ""]
    lines += ["Published results, for context only (older dictionary, other splits):", "",
              format_table(["system", "PER %", "WER %", "data"], PUBLISHED), ""]
    return "\n".join(lines)
