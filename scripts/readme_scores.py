"""The README's ten lines of Python, run as printed under several of OpenBLAS's kernel
choices, to show that what they print holds across processors.

Run: ``python -m scripts.readme_scores [--coretypes default,Haswell] [--record
benchmarks/readme]`` (about 45 s per setting on one core). Each setting runs the README's
first Python block in a fresh process in a temporary folder, with ``OPENBLAS_CORETYPE``
set to it (``default``: as the environment has it), so that one machine runs the kernels an
AVX2-only processor (``Haswell``) would take. The report gives each setting's printed
lines, its seconds, and the largest BLEU and exact-match differences between settings.
NumPy trains on one thread (xpseq's default).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

from . import _common as common

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCORE = re.compile(r"(\d) phrases: BLEU ([\d.]+), exact (\d+)%")


def ten_lines() -> str:
    """The README's first Python block (the ten lines)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def run(coretype: str, source: str) -> dict:
    """What the block printed and how long it took, with ``coretype``'s kernels."""
    env = dict(os.environ)
    if coretype != "default":
        env["OPENBLAS_CORETYPE"] = coretype
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", source], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=1800)
        seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"OPENBLAS_CORETYPE={coretype}: {done.stderr[-2000:]}")
    lines = done.stdout.splitlines()
    scores = {int(m.group(1)): (float(m.group(2)), int(m.group(3)))
              for m in map(SCORE.fullmatch, lines) if m}
    return {"printed": lines, "scores": scores, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = common.script_parser(__doc__)
    parser.add_argument("--coretypes", default="default,Haswell")
    parser.add_argument("--record", metavar="DIR",
                        help="also write the results as DIR/<time>-<cpu>-readme.json")
    args = parser.parse_args(argv)
    machine = common.machine()
    versions = common.package_versions(("xpseq", "numpy"))
    print(f"machine: {common.machine_text()}; {common.versions_text(versions)}")
    source = ten_lines()
    results = {}
    for coretype in common.comma_list(args.coretypes):
        results[coretype] = run(coretype, source)
        print(f"\nOPENBLAS_CORETYPE={coretype} ({results[coretype]['seconds']:.0f} s):")
        print("\n".join(results[coretype]["printed"]), flush=True)
    settings = list(results)
    buckets = sorted(results[settings[0]]["scores"])
    bleu = max(abs(results[a]["scores"][b][0] - results[c]["scores"][b][0])
               for a in settings for c in settings for b in buckets)
    exact = max(abs(results[a]["scores"][b][1] - results[c]["scores"][b][1])
                for a in settings for c in settings for b in buckets)
    same = len({tuple(r["printed"][:1]) for r in results.values()}) == 1
    print(f"\nlargest difference between settings: BLEU {bleu:.1f}, exact {exact} points; "
          f"the translation {'the same' if same else 'differs'}")
    if args.record:
        path = common.record(args.record, "readme", {
            "command": common.command_line("readme_scores", argv), "machine": machine,
            "versions": versions, "source": source, "results": results,
            "largest_difference": {"bleu": bleu, "exact_points": exact}})
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
