"""The G2P recipe end to end: train on the CMU dictionary, score the test split, write a table.

Run: ``python scripts/g2p_recipe.py`` (needs ``pip install "xpseq[g2p]"``; ``make test``'s
set-up installs it). For each variant (stress removed, stress kept) it trains the model of
``xpseq.tasks.g2p.RECIPE`` on the seeded split with early stopping on the dev WER of greedy
search (all dev words, scored after every epoch) and the recipe's wall-clock limit
(45 minutes each by default), keeps the best dev epoch, then
scores the test words with greedy search and beam search (k = 5). Writes
``<out>/results.md`` (the table, the learning curves, the published numbers for context
and the command that made it), ``<out>/results.json`` and one checkpoint per variant
(``<out>/<variant>.safetensors``, usable with ``xpseq translate`` / ``xpseq evaluate``).

``--variants nostress`` runs one variant; ``--time-limit``, ``--epochs``, ``--hidden``,
``--embed``, ``--dropout``, ``--lr``, ``--batch-size`` change the recipe; ``--train-words``
and ``--test-words`` cut the data for a quick check (the results are then not comparable).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xpseq import backends  # noqa: E402
from xpseq.app.cli import positive  # noqa: E402
from xpseq.data.cmudict import G2PSplit, load_g2p  # noqa: E402
from xpseq.search import SearchOptions  # noqa: E402
from xpseq.tasks import g2p  # noqa: E402
from xpseq.tasks.metrics import format_table  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # scripts/: _common
import _common as common  # noqa: E402

VARIANTS = {"nostress": False, "stress": True}

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
SIZES = ("epochs", "hidden", "embed", "dropout", "lr", "batch_size")
RECIPE_OPTIONS = SIZES + ("monitor",)


def parse_args(argv=None) -> argparse.Namespace:
    p = common.script_parser(__doc__)
    p.add_argument("--variants", default="nostress,stress",
                   help="comma-separated: nostress, stress (default: both)")
    p.add_argument("--backend", default=None, choices=backends.NAMES,
                   help="training and decoding backend (default: the fastest installed: "
                   "jax, torch, numpy)")
    p.add_argument("--time-limit", type=positive(float),
                   default=g2p.RECIPE["time_limit_minutes"],
                   metavar="MINUTES", help="training time per variant (default: %(default)s)")
    for name in SIZES:
        kind = int if isinstance(g2p.RECIPE[name], int) else float
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None,
                       help=f"recipe option (default: {g2p.RECIPE[name]})")
    p.add_argument("--beam", type=int, default=5, help="beam size (default: 5)")
    p.add_argument("--dev-words", type=positive(int), default=None,
                   help="dev words scored with greedy search after every epoch: the "
                   "learning curve, and what --monitor dev_wer watches (default: all)")
    p.add_argument("--monitor", choices=("dev_loss", "dev_wer"), default=None,
                   help="what early stopping, the step-size decay and the choice of the "
                   f"best epoch watch (default: {g2p.RECIPE['monitor']})")
    p.add_argument("--train-words", type=positive(int), default=None,
                   help="train on the first N training words only (quick checks)")
    p.add_argument("--test-words", type=positive(int), default=None,
                   help="score the first N test words only (quick checks)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/g2p", help="output folder (default: out/g2p)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    args.variants = common.comma_list(args.variants)
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad or not args.variants:
        p.error(f"--variants takes {sorted(VARIANTS)}, got {bad or args.variants}")
    common.require_at_least(p, args, ("beam",), 2, "greedy search is always scored")
    return args


def cut(split: G2PSplit, train_words: int | None) -> G2PSplit:
    if train_words is None:
        return split
    keep = dict(list(split.train.items())[:train_words])
    return G2PSplit(train=keep, dev=split.dev, test=split.test, stress=split.stress,
                    seed=split.seed)


def run_variant(name: str, args: argparse.Namespace, backend) -> dict:
    split = cut(load_g2p(stress=VARIANTS[name], seed=0), args.train_words)
    overrides = {k: getattr(args, k) for k in RECIPE_OPTIONS if getattr(args, k) is not None}
    overrides["time_limit_minutes"] = args.time_limit
    out = pathlib.Path(args.out)
    print(f"\n== {name}: {len(split.train)} train / {len(split.dev)} dev / {len(split.test)} "
          f"test words, {backend.name}, at most {args.time_limit} min", flush=True)
    start = time.perf_counter()
    config, result, task = g2p.train(split, backend, checkpoint=str(out / f"{name}.safetensors"),
                                     seed=args.seed, progress=not args.no_progress,
                                     dev_words=args.dev_words, **overrides)
    train_minutes = (time.perf_counter() - start) / 60
    params = {k: backend.asarray(v) for k, v in result.params.items()}
    searches = [("greedy", SearchOptions()),
                (f"beam k={args.beam}", SearchOptions(method="beam", k=args.beam,
                                                      length_penalty="avg"))]
    rows = g2p.evaluate(params, config, split, task.src_vocab, task.tgt_vocab, backend,
                        searches=searches, limit=args.test_words)
    for r in rows:
        print(f"   {r['search']}: PER {r['per']:.2f} %, WER {r['wer']:.2f} % "
              f"({r['words']} words, {r['seconds']:.0f} s)", flush=True)
    return {"variant": name, "stress": VARIANTS[name], "backend": backend.name,
            "recipe": {**g2p.RECIPE, **overrides}, "parameters": int(sum(
                v.size for v in result.params.values())),
            "train_pairs": len(task.train), "train_minutes": train_minutes,
            "dev_words": len(split.dev) if args.dev_words is None
            else min(args.dev_words, len(split.dev)),
            "epochs": len(result.history), "best_epoch": result.best_epoch,
            "stopped": result.stopped, "history": result.history,
            "scores": [{k: r[k] for k in ("search", "per", "wer", "words", "seconds")}
                       for r in rows]}


def markdown(results: list[dict], command: str) -> str:
    lines = [f"{common.made_by(command)} ({platform.machine()}, "
             f"{os.cpu_count()} CPUs, float32).", ""]
    headers = ["variant", "search", "PER %", "WER %", "test words", "backend",
               "training (min)", "epochs (best)"]
    rows = []
    for res in results:
        for s in res["scores"]:
            rows.append([
                "stress kept" if res["stress"] else "stress removed", s["search"], s["per"],
                s["wer"], s["words"], res["backend"], f"{res['train_minutes']:.1f}",
                f"{res['epochs']} ({res['best_epoch']})"])
    lines += [format_table(headers, rows), ""]
    for res in results:
        lines += [f"Learning curve, {res['variant']} ({res['parameters']:,} parameters, "
                  f"stopped: {res['stopped']}; dev WER/PER: greedy search on "
                  f"{res['dev_words']} dev words):",
                  ""]
        best = res["best_epoch"]
        curve = [[f"{h['epoch']}{' (best)' if h['epoch'] == best else ''}",
                  f"{h['minutes']:.1f}", f"{h['train_loss']:.4f}", f"{h['dev_loss']:.4f}",
                  h.get("dev_per", ""), h.get("dev_wer", ""), f"{h.get('lr_scale', 1):g}"]
                 for h in res["history"]]
        lines += [format_table(["epoch", "minutes", "train loss", "dev loss", "dev PER %",
                                "dev WER %", "lr scale"], curve), ""]
    lines += ["Published results, for context only (older dictionary, other splits):", "",
              format_table(["system", "PER %", "WER %", "data"], PUBLISHED), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    installed = backends.available()
    name = args.backend or next(n for n in ("jax", "torch", "numpy") if n in installed)
    backend = backends.get(name)
    out = common.output_dir(args.out)
    results = []
    command = common.command_line("g2p_recipe.py", argv)
    for variant in args.variants:
        res = run_variant(variant, args, backend)
        for h in res["history"]:
            h["minutes"] = h["elapsed"] / 60
        results.append(res)
        # Written after every variant, so a long run keeps what it finished.
        text = markdown(results, command)
        md, js = common.write_report(out, "results", text + "\n", results, indent=1)
    print("\n" + text)
    print(f"wrote {md} and {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
