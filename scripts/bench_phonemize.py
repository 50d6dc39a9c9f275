"""What the homograph sense model costs :func:`xpseq.g2p.phonemize` on running text.

Run: ``python -m scripts.bench_phonemize [--repeats N] [--homographs DIR]
[--record benchmarks/phonemize]``.

The shipped G2P model loaded once on NumPy, one sentence a ``phonemize`` call, on one
BLAS thread: milliseconds per sentence with the sense model
(:mod:`xpseq.g2p.disambiguator`, as every user runs it) and without it (the package's
model withheld, so that the front end chooses by its rules alone, as it did before the
model), the two taking turns in each repeat; the median of ``--repeats``, and their ratio.
Two texts:

* **prose**: the sentences of this checkout's documentation pages (``docs/**/*.md``,
  prose lines only: no code, tables or headings), text with the homographs English
  prose happens to hold;
* **homograph sentences**: the eval split of Google's Wikipedia Homograph Data
  (``--homographs``, by default ``../shared/external/wikipedia_homograph``; left out
  when absent), a homograph in every sentence: the most the model can cost.
"""

from __future__ import annotations

import pathlib
import re
import statistics
import time
import warnings
from typing import Any
from unittest import mock

from . import _common as common

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOMOGRAPHS = ROOT.parent / "shared" / "external" / "wikipedia_homograph"


def prose(root: pathlib.Path = ROOT / "docs") -> list[str]:
    """The sentences of the documentation's prose lines."""
    text = []
    for path in sorted(root.rglob("*.md")):
        fenced = False
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
            elif not fenced and line.strip() and not line.startswith(
                    ("|", "#", " ", "\t", "<", ":", "{", ">", "!", "[")):
                text.append(line.strip())
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text))
    return [s for s in sentences if len(s.split()) >= 4]


def homograph_sentences(folder: pathlib.Path) -> list[str]:
    """The eval split's sentences (empty without the folder)."""
    import csv

    out = []
    for path in sorted((folder / "eval").glob("*.tsv")):
        with open(path, encoding="utf-8", newline="") as f:
            out += [row["sentence"] for row in csv.DictReader(f, delimiter="\t")]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = common.script_parser(__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--homographs", default=str(HOMOGRAPHS), metavar="DIR")
    parser.add_argument("--record", metavar="DIR",
                        help="also write the run as DIR/<time>-<cpu>-phonemize.json")
    args = parser.parse_args(argv)
    settings = common.set_blas_threads(1)

    from xpseq import g2p
    from xpseq.g2p import disambiguator

    warnings.simplefilter("ignore")
    model = g2p.load(backend="numpy")
    model.phonemize("They record the present.")            # the sense model read once
    texts = {"prose": prose(), "homograph sentences":
             homograph_sentences(pathlib.Path(args.homographs))}
    rows: list[dict[str, Any]] = []
    for name, sentences in texts.items():
        if not sentences:
            continue

        def run(sentences: list[str] = sentences) -> None:
            for sentence in sentences:
                model.phonemize(sentence)

        def without(run: Any = run) -> None:
            with mock.patch.object(disambiguator, "shipped", lambda: None):
                run()

        times = common.take_turns({"with": run, "without": without}, args.repeats)
        ms = {k: 1000 * statistics.median(v) / len(sentences) for k, v in times.items()}
        rows.append({"text": name, "sentences": len(sentences),
                     "ms_with": round(ms["with"], 3), "ms_without": round(ms["without"], 3),
                     "ratio": round(ms["with"] / ms["without"], 3)})
    print(common.markdown_table(
        ["text", "sentences", "ms a sentence, with the model", "without", "ratio"],
        [[r["text"], r["sentences"], f"{r['ms_with']:.2f}", f"{r['ms_without']:.2f}",
          f"{r['ratio']:.2f}x"] for r in rows]))
    print(common.machine_text(), "|", common.settings_text(settings))
    if args.record:
        data = {"command": common.command_line("bench_phonemize", argv),
                "machine": common.machine(), "settings": settings,
                "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "repeats": args.repeats,
                "rows": rows}
        print("recorded", common.record(args.record, "phonemize", data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
