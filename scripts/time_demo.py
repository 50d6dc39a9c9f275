"""Time ``make demo`` as a new user meets it: a fresh clone, its set-up, the demo on a cold
JAX compilation cache and again on the warm one, and the longest silence of each run.

Run: ``python -m scripts.time_demo [--repo .] [--record benchmarks/demo]`` (about 8
minutes with a cold pip cache, less with a warm one). The clone is made of ``--repo``'s
committed HEAD in a temporary folder; ``make .venv/.demo`` is the set-up (the make target
``make demo`` runs first); the demo runs with a compilation cache of its own
(``XPSEQ_JAX_CACHE``), empty for the first run. The silence of a run is the longest time
between two lines (or progress redraws) of its output: the demo means never to go quiet
for more than 10 s. Nothing else should run on the machine meanwhile: the figures are
wall times.
"""

from __future__ import annotations

import os
import pathlib
import selectors
import subprocess
import sys
import tempfile
import time

from . import _common as common

ROOT = pathlib.Path(__file__).resolve().parents[1]


def timed(command: list[str], cwd: pathlib.Path, env: dict[str, str]) -> dict:
    """Run ``command``: its seconds, its longest silence and its last output lines."""
    start = last = time.perf_counter()
    silence, tail = 0.0, b""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    while True:
        selector.select(timeout=1.0)
        chunk = os.read(process.stdout.fileno(), 65536)
        now = time.perf_counter()
        if not chunk:
            if process.poll() is not None:
                break
            continue
        if b"\n" in chunk or b"\r" in chunk:
            silence, last = max(silence, now - last), now
        tail = (tail + chunk)[-4000:]
    code = process.wait()
    seconds = time.perf_counter() - start
    silence = max(silence, seconds - (last - start))
    if code:
        raise SystemExit(f"{' '.join(command)} exited {code}: {tail.decode(errors='replace')}")
    return {"seconds": seconds, "longest_silence": silence,
            "last_lines": tail.decode(errors="replace").splitlines()[-3:]}


def main(argv: list[str] | None = None) -> int:
    parser = common.script_parser(__doc__)
    parser.add_argument("--repo", default=str(ROOT), help="the repository to clone")
    parser.add_argument("--record", metavar="DIR",
                        help="also write the results as DIR/<time>-<cpu>-demo.json")
    args = parser.parse_args(argv)
    machine = common.machine()
    print(f"machine: {common.machine_text()}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        clone, cache = pathlib.Path(tmp) / "xpseq", pathlib.Path(tmp) / "jax-cache"
        subprocess.run(["git", "clone", "-q", args.repo, str(clone)], check=True)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone,
                                capture_output=True, text=True).stdout.strip()
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
        results["set-up"] = timed(["make", ".venv/.demo"], clone, env)
        print(f"set-up: {results['set-up']['seconds']:.0f} s", flush=True)
        env["XPSEQ_JAX_CACHE"] = str(cache)
        for run in ("demo, cold cache", "demo, warm cache"):
            results[run] = timed([str(clone / ".venv" / "bin" / "xpseq"), "demo", "--out",
                                  str(pathlib.Path(tmp) / "out")], clone, env)
            print(f"{run}: {results[run]['seconds']:.0f} s, longest silence "
                  f"{results[run]['longest_silence']:.0f} s", flush=True)
        packages = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-m", "pip",
                                   "list", "--format=freeze"], capture_output=True,
                                  text=True).stdout.split()
        size = sum(f.stat().st_size for f in (clone / ".venv").rglob("*") if f.is_file())
    print(f"the demo's .venv: {len(packages)} packages, {size / 2**20:.0f} MiB")
    if args.record:
        path = common.record(args.record, "demo", {
            "command": common.command_line("time_demo", argv), "commit": commit,
            "machine": machine, "results": results, "venv_packages": packages,
            "venv_mib": size / 2**20})
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
