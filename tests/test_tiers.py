"""The two tiers of the suite: the tests measured long (``tests/long_tests.txt``, written by
``scripts/split_test_tiers.py``) run in the slow tier, and the quick tier's heartbeat (the
root ``conftest.py``): in a run with workers, as ``make test`` runs, a line names the tests
under way whenever none has ended for 10 s."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest
from helpers import load_script

from conftest import long_tests

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_silence_of_10_s_is_broken_by_a_line_naming_the_test_under_way(tmp_path):
    (tmp_path / "test_wait.py").write_text("import time\n\n\ndef test_waits():\n"
                                           "    time.sleep(23)\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-p", "conftest", "-p",
                           "no:cacheprovider", "test_wait.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines()
             if "[under way: test_wait.py::test_waits (" in line]
    assert lines, done.stdout
    seconds = [int(line.rsplit("(", 1)[1].split(" s)")[0]) for line in lines]
    assert max(seconds) >= 10 and len(lines) <= 3, done.stdout   # one each 10 s


def test_every_long_test_listed_exists_and_is_left_to_the_slow_tier():
    listed = long_tests()
    assert len(listed) > 50
    for nodeid in listed:
        path, name = nodeid.split("::", 1)
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name.split("[", 1)[0] in functions, f"{nodeid}: no such test (stale entry)"
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                           "no:cacheprovider", "-m", "not slow", "tests/test_export.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    quick = set(done.stdout.split())
    moved = {n for n in listed if n.startswith("tests/test_export.py::")}
    assert moved and not moved & quick, done.stdout


def test_the_split_reads_the_calls_of_a_durations_log():
    split = load_script("split_test_tiers")
    log = ("12.50s call     tests/test_a.py::test_one[x y]\n"
           "40.00s setup    tests/test_a.py::test_two\n"
           "3.00s call     tests/test_b.py::test_three\n"
           "2.99s call     tests/test_b.py::test_four\n"
           "(12 durations < 0.005s hidden.)\n")
    assert split.long_tests(log, 3.0) == [(12.5, "tests/test_a.py::test_one[x y]"),
                                          (3.0, "tests/test_b.py::test_three")]
