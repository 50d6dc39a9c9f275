"""Wall time of ``xpseq g2p`` per decoding engine, start-up included: one word, 1,000 words
and 6,304 words on standard input, and the time a missing checkpoint's error takes to appear.
What :data:`xpseq.backends.PREFERENCE` ``["decode"]`` is chosen by.

Run: ``python -m scripts.bench_startup [--repeats 3] [--record benchmarks/startup]`` (about
3 minutes). Each figure is the median of ``--repeats`` runs of the installed ``xpseq``
command, one thread (``xpseq --threads 1``, the default), the engines taking turns so that a
change in the machine's load falls on all of them. The words are a seeded sample of the CMU
dictionary's entries, every one asked of the model (``xpseq g2p --model-only``).
"""

from __future__ import annotations

import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from . import _common as common

ENGINES = ("numpy", "torch", "jax")
SIZES = (1, 1000, 6304)


def words(n: int, seed: int = 0) -> list[str]:
    """``n`` words of the CMU dictionary, a seeded sample of its sorted entries."""
    from xpseq.data.cmudict import read_cmudict

    entries = sorted(read_cmudict())
    return random.Random(seed).sample(entries, n)


def timed(command: list[str], stdin: pathlib.Path | None) -> float:
    """Seconds the command took (it must succeed, or fail with exit code 1 when no input)."""
    with open(stdin if stdin else os.devnull, "rb") as source:
        start = time.perf_counter()
        done = subprocess.run(command, stdin=source, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=600)
        seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode()[-500:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = common.script_parser(__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--record", metavar="DIR",
                        help="also write the results as DIR/<time>-<cpu>-startup.json")
    args = parser.parse_args(argv)
    engines = common.comma_list(args.engines)
    xpseq = shutil.which("xpseq", path=str(pathlib.Path(sys.executable).parent)) or "xpseq"
    machine = common.machine()
    versions = common.package_versions(("xpseq", "numpy", "torch", "jax"))
    print(f"machine: {common.machine_text()}; {common.versions_text(versions)}")
    seconds: dict[str, dict[str, list[float]]] = {e: {} for e in engines}
    with tempfile.TemporaryDirectory() as tmp:
        inputs: dict[str, pathlib.Path | None] = {}
        for n in SIZES:
            path = pathlib.Path(tmp) / f"{n}.txt"
            path.write_text("\n".join(words(n)) + "\n", encoding="utf-8")
            inputs[f"{n} words"] = path
        inputs["missing checkpoint"] = None
        for _ in range(args.repeats):
            for label, path in inputs.items():
                for engine in engines:
                    if path is None:
                        command = [xpseq, "translate", "--backend", engine,
                                   str(pathlib.Path(tmp) / "missing.safetensors"), "a"]
                    elif label == "1 words":
                        command = [xpseq, "g2p", "--model-only", "--backend", engine,
                                   path.read_text().strip()]
                    else:
                        command = [xpseq, "g2p", "--model-only", "--backend", engine]
                    seconds[engine].setdefault(label, []).append(timed(command, path
                                                                       if label != "1 words"
                                                                       else None))
    labels = ["1 word", *(f"{n:,} words" for n in SIZES[1:]), "missing checkpoint"]
    keys = list(inputs)
    medians = {e: {k: statistics.median(v) for k, v in seconds[e].items()} for e in engines}
    rows = [[e, *(f"{medians[e][k]:.2f} s" for k in keys)] for e in engines]
    fastest = [min(engines, key=lambda e: medians[e][k]) for k in keys]
    rows.append(["fastest", *fastest])
    table = common.markdown_table(["engine", *labels], rows)
    print(table)
    if args.record:
        path = common.record(args.record, "startup", {
            "command": common.command_line("bench_startup", argv),
            "machine": machine, "versions": versions, "seconds": seconds,
            "medians": medians, "table": table})
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
