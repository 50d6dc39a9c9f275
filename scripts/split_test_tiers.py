"""Measure the quick tier of the tests and move its long tests to the slow tier.

``make test`` promises to finish in 5 minutes on 2 idle cores. A test whose own call
took :data:`LIMIT` seconds or more in a measured run of the quick tier is listed in
``tests/long_tests.txt``; the root ``conftest.py`` marks every listed test ``slow``, so
that ``make test`` skips it and ``make test-slow`` (which ``.ci/run`` runs after it) runs
it. A module's fixtures are not moved: their set-up counts once for the module, and the
module's other tests still need them.

Run: ``python -m scripts.split_test_tiers`` (the quick tier with ``--durations=0`` on two
workers, as ``make test`` runs it: 8 to 15 minutes on 2 cores) or ``python
scripts/split_test_tiers.py --from LOG`` (the output of such a run). Run it on an idle
machine: the times decide. The list it writes names the run's processor, date and limit.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import platform
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "long_tests.txt"
#: A test whose call takes this long (seconds, on the run's machine) leaves the quick tier.
LIMIT = 2.0
_LINE = re.compile(r"^(\d+(?:\.\d+)?)s call\s+(\S.*)$")


def measure() -> str:
    """The output of the quick tier run as ``make test`` runs it, with every duration."""
    command = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-m",
               "not slow", "-p", "no:cacheprovider", "--durations=0", "-q"]
    env = {**os.environ, "XPSEQ_JAX_SUBSET": "1", "XPSEQ_QUICK_TIER_ALL": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    return done.stdout


def long_tests(log: str, limit: float = LIMIT) -> list[tuple[float, str]]:
    """``(seconds, node id)`` of each call at or over ``limit`` in a ``--durations`` log,
    longest first."""
    found = []
    for line in log.splitlines():
        m = _LINE.match(line.strip())
        if m and float(m.group(1)) >= limit:
            found.append((float(m.group(1)), m.group(2).strip()))
    return sorted(found, reverse=True)


def processor() -> str:
    """The ``lscpu`` model name (or the platform's processor), for the list's header."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown processor"


def write(found: list[tuple[float, str]], limit: float = LIMIT) -> None:
    """Write :data:`LIST`: a header, then one node id a line with its seconds."""
    header = [f"# Tests of the quick tier whose call took {limit:g} s or more, measured by "
              "scripts/split_test_tiers.py",
              f"# on {processor()} ({os.cpu_count()} CPUs), "
              f"{datetime.date.today().isoformat()}; conftest.py marks them slow.",
              "# seconds  node id"]
    LIST.write_text("\n".join(header + [f"{s:7.2f}  {node}" for s, node in found]) + "\n",
                    encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="log", help="a --durations=0 log of the quick tier "
                        "(default: run it now)")
    parser.add_argument("--limit", type=float, default=LIMIT,
                        help=f"seconds of a call that move it (default {LIMIT:g})")
    args = parser.parse_args()
    log = pathlib.Path(args.log).read_text(encoding="utf-8") if args.log else measure()
    found = long_tests(log, args.limit)
    if not found and "passed" not in log:
        sys.exit("split_test_tiers: the log holds no test durations")
    write(found, args.limit)
    print(f"{len(found)} tests of {args.limit:g} s or more ({sum(s for s, _ in found):.0f} s) "
          f"listed in {LIST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
