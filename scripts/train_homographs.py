"""Train the homograph sense model that the G2P text front end ships, with xpseq itself.

Run: ``python -m scripts.train_homographs [--data DIR] [--out FILE] [--epochs N]
[--backend NAME] [--force]``.

The data is Google's Wikipedia Homograph Data (``--data``, by default
``../shared/external/wikipedia_homograph`` beside the checkout; Apache-2.0, Gorman,
Mazovetskiy and Nikolaev 2018). Only its ``train/`` split is read for training: one
sentence in ten of it (chosen by a hash of the sentence, so the same every run) is held
out as the dev split that picks the epoch and the settings; ``eval/`` is read only at the
end, to report. Each example is :func:`xpseq.g2p.disambiguator.source` of the sentence
(the words around the homograph, the homograph marked) with its sense's label as the
one-token target; the examples of homographs told apart by part of speech (a noun or
adjective against a verb) appear a second time with the word hidden, so that the model
learns the parts of speech from the context alone, for the dictionary's other stress pairs.

The model is :mod:`xpseq.models.rnn` (a bidirectional LSTM encoder, attention, one
decoding step), trained by the library's training loop; what ships is the mean of the
parameters of the epoch with the lowest dev loss and the two after it (``--average``;
:func:`xpseq.train.checkpoint.average` of the epochs that ``SaveCheckpoint(keep_epochs=)``
wrote), which chose the sense of 0.3 to 0.8 points more dev sentences than the best
epoch alone. It is written to ``--out``
(the package's ``xpseq/g2p/homograph_model/senses.safetensors`` by default; an existing
file is replaced only with ``--force``), and the dev and eval accuracy of the choice among
each word's own senses is printed.
"""

from __future__ import annotations

import csv
import hashlib
import pathlib
import tempfile
import time
from typing import Any

from . import _common as common

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "external" / "wikipedia_homograph"


def labels(folder: pathlib.Path) -> dict[str, dict[str, str]]:
    """Homograph -> WORDID -> the data's label for that sense."""
    out: dict[str, dict[str, str]] = {}
    with open(folder / "wordids.tsv", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            out.setdefault(row["homograph"], {})[row["wordid"]] = row["label"]
    return out


def read_split(folder: pathlib.Path, split: str) -> list[dict[str, str]]:
    """Every row of ``folder/split/*.tsv``."""
    rows = []
    for path in sorted((folder / split).glob("*.tsv")):
        with open(path, encoding="utf-8", newline="") as f:
            rows += list(csv.DictReader(f, delimiter="\t"))
    return rows


def is_dev(sentence: str) -> bool:
    """One train sentence in ten, the same every run."""
    return hashlib.sha256(sentence.encode("utf-8")).digest()[0] % 10 == 0


def examples(rows: list[dict[str, str]], senses: dict[str, dict[str, str]], *,
             hidden_copies: bool,
             window: int) -> list[tuple[list[str], list[str], str, list[str]]]:
    """(source, [label], homograph, its labels) for each row."""
    from xpseq.g2p import disambiguator

    out = []
    for row in rows:
        word = row["homograph"]
        words, index = disambiguator.sentence_words(row["sentence"], int(row["start"]),
                                                    int(row["end"]))
        options = list(senses[word].values())
        label = senses[word][row["wordid"]]
        out.append((disambiguator.source(words, index, window=window), [label], word,
                    options))
        if hidden_copies and "verb" in options and any(
                o in disambiguator.NOUN_LABELS for o in options):
            out.append((disambiguator.source(words, index, hidden=True, window=window),
                        [label], word, options))
    return out


def accuracy(model: Any, data: list[tuple[list[str], list[str], str, list[str]]]) -> float:
    """The share of ``data`` whose label the model picks among its homograph's labels."""
    chosen = []
    for start in range(0, len(data), 512):
        part = data[start:start + 512]
        chosen += model.choose([s for s, *_ in part], [o for *_, o in part])
    return sum(o[c] == t[0] for c, (_, t, _, o) in zip(chosen, data)) / max(1, len(data))


def main(argv: list[str] | None = None) -> int:
    parser = common.script_parser(__doc__)
    parser.add_argument("--data", default=str(DATA), metavar="DIR")
    parser.add_argument("--out", default=str(ROOT / "xpseq" / "g2p" / "homograph_model"
                                             / "senses.safetensors"), metavar="FILE")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--window", type=int, default=8,
                        help="words read on each side of the homograph")
    parser.add_argument("--embed", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=96)
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--label-smoothing", type=float, default=0.0)
    parser.add_argument("--lr", type=float, default=None, help="Adam's step size")
    parser.add_argument("--no-hidden-copies", action="store_true",
                        help="leave out the copies with the word hidden")
    parser.add_argument("--min-count", type=int, default=3,
                        help="a source word seen fewer times is <unk>")
    parser.add_argument("--backend", default=None, help="the training backend")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--average", type=int, default=3, metavar="K",
                        help="ship the mean of the parameters of the best epoch (lowest dev "
                             "loss) and the K-1 epochs after it (1: the best epoch alone)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    parser.add_argument("--record", metavar="DIR",
                        help="also write the run as DIR/<time>-<cpu>-homograph-model.json")
    args = parser.parse_args(argv)

    import xpseq
    from xpseq import backends
    from xpseq.data import Vocab
    from xpseq.g2p.disambiguator import Disambiguator
    from xpseq.tasks.experiment import Task, model_config, train_model, training_config
    from xpseq.train import checkpoint
    from xpseq.train.callbacks import EarlyStopping, SaveCheckpoint

    folder = pathlib.Path(args.data)
    out = pathlib.Path(args.out)
    if out.exists() and not args.force:
        parser.error(f"--out {out} exists; --force replaces it")
    senses = labels(folder)
    start = time.perf_counter()
    rows = read_split(folder, "train")
    train = examples([r for r in rows if not is_dev(r["sentence"])], senses,
                     hidden_copies=not args.no_hidden_copies, window=args.window)
    dev = examples([r for r in rows if is_dev(r["sentence"])], senses, hidden_copies=False,
                   window=args.window)
    evaluation = examples(read_split(folder, "eval"), senses, hidden_copies=False,
                          window=args.window)
    print(f"examples: train {len(train)}, dev {len(dev)}, eval {len(evaluation)} "
          f"({time.perf_counter() - start:.1f} s to read)")
    pairs = [(s, t) for s, t, *_ in train]
    task = Task(pairs, [(s, t) for s, t, *_ in dev], {"dev": [(s, t) for s, t, *_ in dev]},
                Vocab.build((s for s, _ in pairs), min_count=args.min_count),
                Vocab.build(t for _, t in pairs))
    start = time.perf_counter()
    backend = backends.resolve(args.backend, "train")
    config = model_config(task, "rnn", embed=args.embed, hidden=args.hidden,
                          dropout=args.dropout, label_smoothing=args.label_smoothing)
    settings = training_config("rnn", epochs=args.epochs, lr=args.lr, seed=args.seed,
                               progress=False)
    with backends.blas_threads(), tempfile.TemporaryDirectory() as folder:
        epochs = SaveCheckpoint(pathlib.Path(folder) / "senses.safetensors",
                                keep_epochs=args.epochs)
        config, result = train_model(task, backend, config, settings, callbacks=[
            EarlyStopping(patience=max(3, args.average)), epochs])
        best = min(result.history, key=lambda e: e["dev_loss"])["epoch"]
        averaged = [e for e in range(best, best + args.average)
                    if epochs.epoch_path(e).exists()]
        params = checkpoint.average([epochs.epoch_path(e) for e in averaged]).params
    model = xpseq.Translator({k: backend.asarray(v) for k, v in params.items()},
                             config, task.src_vocab, task.tgt_vocab, backend,
                             history=result.history, task=task)
    seconds = time.perf_counter() - start
    for epoch in model.history:
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in epoch.items()})
    model.metadata["window"] = args.window
    model.metadata["data"] = ("Wikipedia Homograph Data (Gorman, Mazovetskiy and Nikolaev "
                              "2018; Apache-2.0), train split")
    path = model.save(out, force=args.force)
    trained = Disambiguator(path)
    print(f"trained in {seconds:.0f} s on {model.backend.name}, the mean of epochs "
          f"{', '.join(map(str, averaged))} (best {best}); {path} "
          f"{path.stat().st_size / 2**20:.2f} MiB; source vocabulary {len(task.src_vocab)}")
    scores = {"dev": accuracy(trained, dev), "eval": accuracy(trained, evaluation)}
    print(f"dev accuracy {scores['dev']:.4f}; eval accuracy {scores['eval']:.4f} "
          f"({len(evaluation)} sentences, {len({w for _, _, w, _ in evaluation})} homographs)")
    print(common.machine_text())
    if args.record:
        data = {"command": common.command_line("train_homographs", argv),
                "machine": common.machine(), "backend": model.backend.name,
                "seconds": round(seconds, 1), "best_epoch": best,
                "averaged_epochs": averaged,
                "history": model.history, "bytes": path.stat().st_size,
                "source_vocabulary": len(task.src_vocab),
                "examples": {"train": len(train), "dev": len(dev), "eval": len(evaluation)},
                "accuracy": {k: round(v, 4) for k, v in scores.items()}}
        print("recorded", common.record(args.record, "homograph-model", data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
