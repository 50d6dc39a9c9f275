"""Score the G2P text front end on two suites that nobody on the project wrote.

Run: ``python -m scripts.score_text_suites [--nemo DIR] [--homographs DIR] [--failures]
[--record benchmarks/text-suites]``.

**NeMo-text-processing's English normalization cases** (``--nemo``, by default
``../shared/external/nemo_en_tn`` beside the checkout): each ``test_cases_CLASS.txt`` is
``written~spoken`` a line, and ``test_cases_normalize_with_audio.txt`` gives a ``~written``
line followed by its acceptable spoken forms, one a line (its cases count as the class
``audio``). A case counts as right when the words :func:`xpseq.g2p.normalize` says for the
written form equal **any one** of the suite's spoken forms for it (a written form listed on
several lines, or with several forms, is one case), both sides folded: lower case,
accents dropped (the front end says ``Müller`` as the dictionary's ``muller``; the suite
writes the letters it read), apostrophes and full stops dropped (``a.m.`` is ``am``),
hyphens and other punctuation as spaces, letters said one by one written together
(``w w w`` is ``www``: the suite writes a spelled word whole, and its own speech front
end spells it), and an ``and`` between two number words (or after a currency's name,
before a number) left out ("one hundred and five" is "one hundred five"). Words that the
CMU dictionary says alike count as the same (a pronunciation in common, stress left out:
the front end's ``missus`` for the suite's ``misses``, ``eighties`` for ``eighty's``):
the phones are what a speech front end hands on.
``test_cases_special_text.txt`` (markup passed through, not reading) is left out.

**Google's Wikipedia Homograph Data** (``--homographs``): each eval sentence's homograph
is found by its UTF-8 byte offsets (:func:`xpseq.g2p.disambiguator.sentence_words`: the
words around it are those :func:`xpseq.g2p.normalize` gives for the text before and after
it), and the front end's choice (:func:`xpseq.g2p.reading.homograph_reading`: the context
rules where they decide, else the sense model shipped with the package) is mapped to the
data's WORDID by the table ``xpseq/g2p/homograph_senses.tsv``
(:func:`xpseq.g2p.senses.table`). Reported beside it, overall and per homograph
(``--failures``): the rules alone, as the front end chose before the model; the majority
sense of each homograph counted on the TRAIN split only; and the dictionary's first
entry. Nothing is learned from the eval split: the model is trained on the train split
(``python -m scripts.train_homographs``).
"""

from __future__ import annotations

import collections
import csv
import json
import pathlib
import re
import time
import unicodedata
from typing import Any, Iterable

from . import _common as common

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXTERNAL = ROOT.parent / "shared" / "external"
#: Files of the NeMo folder that are not reading tests.
LEFT_OUT = ("special_text",)
AUDIO = "normalize_with_audio"

NUMBER_WORDS = frozenset(
    "zero oh one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty "
    "seventy eighty ninety hundred thousand million billion trillion first second third "
    "fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth twentieth thirtieth fortieth "
    "fiftieth sixtieth seventieth eightieth ninetieth hundredth thousandth millionth".split())
#: Words after which "and" may join an amount's second part ("five dollars and ten cents").
AMOUNT_WORDS = frozenset(
    "dollar dollars pound pounds euro euros cent cents penny pence yen won rupee rupees "
    "point".split())


def read_nemo(folder: pathlib.Path) -> dict[str, dict[str, list[str]]]:
    """Class -> written form -> the suite's spoken forms (in order, each once)."""
    suites: dict[str, dict[str, list[str]]] = {}
    for path in sorted(folder.glob("test_cases_*.txt")):
        name = path.stem.removeprefix("test_cases_")
        if name in LEFT_OUT:
            continue
        cases: dict[str, list[str]] = {}
        lines = path.read_text(encoding="utf-8").splitlines()
        if name == AUDIO:
            written = None
            for line in lines:
                if line.startswith("~"):
                    written = line[1:]
                    cases.setdefault(written, [])
                elif written is not None and line.strip():
                    cases[written].append(line)
            name = "audio"
        else:
            for line in lines:
                if "~" in line:
                    written, spoken = line.split("~", 1)
                    cases.setdefault(written, []).append(spoken)
        suites[name] = {w: list(dict.fromkeys(s)) for w, s in cases.items() if s}
    if not suites:
        raise SystemExit(f"no test_cases_*.txt in {folder}")
    return suites


def fold(words: Iterable[str] | str, *, apostrophes: bool = False) -> str:
    """Words as compared (the module's docstring says how): lower case, accents,
    apostrophes (unless ``apostrophes``: kept as ``'``, to look a word up in the
    dictionary) and full stops dropped, other punctuation as spaces, single letters
    joined, an ``and`` inside a number or an amount left out."""
    text = words if isinstance(words, str) else " ".join(words)
    text = "".join(c for c in unicodedata.normalize("NFKD", text)
                   if not unicodedata.combining(c))
    text = text.lower().replace("’", "'")
    text = re.sub(r"\.(?!\d)" if apostrophes else r"'|\.(?!\d)", "", text)
    text = re.sub(r"[^\w\s']|_" if apostrophes else r"[^\w\s]|_", " ", text)
    said = re.sub(r"\b(?:[a-z] )+[a-z]\b", lambda m: m.group(0).replace(" ", ""),
                  " ".join(text.split())).split()
    kept = [w for i, w in enumerate(said)
            if not (w == "and" and 0 < i < len(said) - 1 and said[i + 1] in NUMBER_WORDS
                    and (said[i - 1] in NUMBER_WORDS or said[i - 1] in AMOUNT_WORDS))]
    return " ".join(kept)


def sound_alike(said: str, form: str, entries: dict[str, list[tuple[str, ...]]]) -> bool:
    """Whether the words ``said`` and ``form`` (both folded with their apostrophes) are
    the same words or words the dictionary ``entries`` (word -> pronunciations, stress
    left out) says alike, one by one."""
    ours, theirs = said.split(), form.split()
    return len(ours) == len(theirs) and all(
        a == b or bool(set(entries.get(a, ())) & set(entries.get(b, ())))
        for a, b in zip(ours, theirs))


def spoken(text: str) -> list[str]:
    """The words the front end says for ``text`` (punctuation tokens left out)."""
    import warnings

    from xpseq import g2p
    from xpseq.g2p.reading import is_word

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [t for t in g2p.normalize(text) if is_word(t)]


def score_nemo(suites: dict[str, dict[str, list[str]]]) -> dict[str, Any]:
    """Per class: cases, right, and each failure (written, said, the suite's forms)."""
    from xpseq.g2p.lexicon import Lexicon

    entries = Lexicon().entries(stress=False)
    classes: dict[str, Any] = {}
    for name, cases in suites.items():
        failures = []
        for written, forms in cases.items():
            words = spoken(written)
            said, whole = fold(words), fold(words, apostrophes=True)
            if said not in {fold(f) for f in forms} and not any(
                    sound_alike(whole, fold(f, apostrophes=True), entries) for f in forms):
                failures.append({"written": written, "said": said, "expected": forms})
        classes[name] = {"cases": len(cases), "right": len(cases) - len(failures),
                         "failures": failures}
    total = sum(c["cases"] for c in classes.values())
    right = sum(c["right"] for c in classes.values())
    return {"classes": classes, "cases": total, "right": right}


# ------------------------------------------------------------------- homographs


def read_tsv(path: pathlib.Path) -> list[dict[str, str]]:
    """The rows of one of the homograph data's TSV files."""
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def score_homographs(folder: pathlib.Path) -> dict[str, Any]:
    """Accuracy on the eval split, overall and per homograph, of the front end's choice
    (:func:`xpseq.g2p.reading.homograph_reading`: the context rules where they decide, else
    the sense model), of the rules alone as they stood before the model (the context
    rules, then the stress rule, else the dictionary's first entry), of the train split's
    majority sense and of the dictionary's first entry."""
    from xpseq.g2p import disambiguator, homographs, reading, senses
    from xpseq.g2p.lexicon import Lexicon

    table = senses.table()                       # word -> wordid -> phones
    prons = Lexicon().entries(True)
    majority: dict[str, str] = {}
    for path in sorted((folder / "train").glob("*.tsv")):
        senses_seen = collections.Counter(r["wordid"] for r in read_tsv(path))
        if senses_seen:
            majority[path.stem] = senses_seen.most_common(1)[0][0]
    rows = [row for path in sorted((folder / "eval").glob("*.tsv")) for row in read_tsv(path)]
    located = [disambiguator.sentence_words(r["sentence"], int(r["start"]), int(r["end"]))
               for r in rows]
    start = time.perf_counter()
    learned = disambiguator.readings([words for words, _ in located], prons)
    model_seconds = time.perf_counter() - start
    kinds = ("model", "rules", "majority", "first")
    counts: collections.Counter[str] = collections.Counter()
    per_word: dict[str, collections.Counter[str]] = collections.defaultdict(
        collections.Counter)
    skipped: collections.Counter[str] = collections.Counter()
    for n, (row, (words, at)) in enumerate(zip(rows, located)):
        word = row["homograph"]
        if words[at] != word:
            skipped["offsets do not give the word"] += 1
            continue
        _, _, before, before2, after = next(c for c in reading.contexts(words) if c[0] == at)
        options = prons.get(word)
        by_phones = {" ".join(p): w for w, p in table[word].items()}
        said = reading.homograph_reading(word, before, before2, after, options,
                                         learned.get((n, at)))
        rule = None
        if options:
            rule = homographs.choose_sound(word, options, before, before2, after)
            rule = homographs.choose(options, before) if rule is None else rule
        picks = {"model": by_phones.get(" ".join(said or ())),
                 "rules": by_phones.get(" ".join(options[rule or 0])) if options else None,
                 "majority": majority.get(word),
                 "first": by_phones.get(" ".join(options[0])) if options else None}
        counts["cases"] += 1
        per_word[word]["cases"] += 1
        for kind in kinds:
            counts[kind] += picks[kind] == row["wordid"]
            per_word[word][kind] += picks[kind] == row["wordid"]
    n = counts["cases"] or 1
    return {"cases": counts["cases"], "skipped": dict(skipped),
            "homographs": len(per_word), "model_seconds": round(model_seconds, 2),
            "accuracy": {k: round(counts[k] / n, 4) for k in kinds},
            "right": {k: counts[k] for k in kinds},
            "per_homograph": {w: dict(c) for w, c in sorted(per_word.items())}}


# ---------------------------------------------------------------------- report


def report(nemo: dict[str, Any] | None, homograph: dict[str, Any] | None,
           failures: bool) -> str:
    """The scores as text: a table of classes, the overall figure, the homographs."""
    lines = []
    if nemo:
        lines.append(f"{'class':<26} {'right':>5} / {'cases':<5}  share")
        for name, c in sorted(nemo["classes"].items(), key=lambda kv: kv[0]):
            lines.append(f"{name:<26} {c['right']:>5} / {c['cases']:<5}  "
                         f"{100 * c['right'] / c['cases']:5.1f} %")
        lines.append(f"{'overall':<26} {nemo['right']:>5} / {nemo['cases']:<5}  "
                     f"{100 * nemo['right'] / nemo['cases']:5.1f} %")
        if failures:
            for name, c in sorted(nemo["classes"].items()):
                for f in c["failures"]:
                    lines.append(f"[{name}] {f['written']!r}\n    said:     {f['said']}\n"
                                 f"    expected: {' | '.join(fold(e) for e in f['expected'])}")
    if homograph:
        acc = homograph["accuracy"]
        lines.append(f"homographs (eval, {homograph['cases']} sentences, "
                     f"{homograph['homographs']} words): front end {100 * acc['model']:.1f} %"
                     f", rules alone {100 * acc['rules']:.1f} %, train majority "
                     f"{100 * acc['majority']:.1f} %, dictionary's first "
                     f"{100 * acc['first']:.1f} %"
                     + (f"; left out {homograph['skipped']}" if homograph["skipped"] else ""))
        if failures:
            lines.append(f"{'homograph':<14} {'cases':>5} {'front end':>9} {'rules':>6} "
                         f"{'majority':>8} {'first':>6}")
            for word, c in sorted(homograph["per_homograph"].items(),
                                  key=lambda kv: kv[1]["model"] / kv[1]["cases"]):
                lines.append(f"{word:<14} {c['cases']:>5} {c['model']:>9} {c['rules']:>6} "
                             f"{c['majority']:>8} {c['first']:>6}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = common.script_parser(__doc__)
    parser.add_argument("--nemo", default=str(EXTERNAL / "nemo_en_tn"), metavar="DIR",
                        help="NeMo's English test cases (test_cases_*.txt)")
    parser.add_argument("--homographs", default=str(EXTERNAL / "wikipedia_homograph"),
                        metavar="DIR", help="the Wikipedia homograph data (train/, eval/)")
    parser.add_argument("--skip", choices=("nemo", "homographs"), action="append",
                        default=[], help="leave one suite out")
    parser.add_argument("--failures", action="store_true", help="list every failed case")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    parser.add_argument("--record", metavar="DIR",
                        help="also write the run as DIR/<time>-<cpu>-text-suites.json")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    nemo = None if "nemo" in args.skip else score_nemo(read_nemo(pathlib.Path(args.nemo)))
    homograph = (None if "homographs" in args.skip
                 else score_homographs(pathlib.Path(args.homographs)))
    data = {"command": common.command_line("score_text_suites", argv),
            "machine": common.machine(), "seconds": round(time.perf_counter() - start, 1),
            "nemo": nemo, "homographs": homograph}
    print(json.dumps(data, indent=1) if args.json else report(nemo, homograph, args.failures))
    if args.record:
        from xpseq.io import files

        stamp = time.strftime("%Y-%m-%dT%H%M%S")
        cpu = "-".join((common.cpu_name() or "cpu").lower().replace("(r)", "")
                       .replace("(tm)", "").split()[:3])
        path = pathlib.Path(args.record) / f"{stamp}-{cpu}-text-suites.json"
        files.write(path, (json.dumps(data, indent=1, default=common.json_default)
                           + "\n").encode("utf-8"), kind="json")
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
