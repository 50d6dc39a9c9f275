"""Every code block of the README and the documentation runs as printed.

Each page's ```python, ```sh and ```bash blocks run in order in a fresh temporary folder
(holding links to the clone's ``scripts/`` and to this environment as ``.venv``),
in one process per page (the Python blocks share their names, as a reader's session
does; the shell blocks run in bash, ``set -e``, with the ``xpseq`` of this environment on
the PATH). A block runs unless the line before it says otherwise:

* ``<!-- run: slow -->``: it trains or evaluates for a minute or more; the slow tier
  (``make test-slow``) runs the page whole, this one and the fast ones.
* ``<!-- run: devices -->``: it trains on two devices: the slow tier runs it where two CPUs
  are usable (one CPU refuses ``--devices 2``).
* ``<!-- run: ci -->``: it sets up the clone or runs the project's own checks (``make
  test``, ``make docs``, the pip route of ``.ci/install-cpu``, the layout check), which
  ``.ci/run`` runs from the clone; running them here would repeat CI inside CI.

Text that is not meant to run (a synopsis, output) is a ```text block, shown as such.
The tutorials' ```{code-cell} blocks are not read here: the documentation build executes
them. Running the README's blocks leaves only files that ``.gitignore`` names, so that a
reader who follows it in the clone keeps a clean ``git status``.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/index.md", "docs/getting-started.md", "docs/development.md",
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*/*.md")
                 if p.parent.name in ("guide", "tutorials"))]
RUNNABLE = ("python", "sh", "bash")
MARKS = ("slow", "devices", "ci")
_FENCE = re.compile(r"^```([\w{}-]*)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
_MARK = re.compile(r"<!-- run: (\w+) -->\s*$")

# Runs the blocks of one page (a JSON list of [language, source]) in the current folder.
DRIVER = r"""
import json, subprocess, sys, traceback
names = {"__name__": "__main__"}
for i, (language, source) in enumerate(json.loads(sys.argv[1])):
    print(f"--- block {i} ({language})", flush=True)
    if language == "python":
        try:
            exec(compile(source, f"block {i}", "exec"), names)
        except BaseException:
            traceback.print_exc()
            sys.exit(f"block {i} ({language}) failed")
    else:
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", source])
        if done.returncode:
            sys.exit(f"block {i} ({language}) exited {done.returncode}")
"""


def blocks(page: str) -> list[tuple[str, str, str | None]]:
    """``(language, source, mark)`` of every fenced block of ``page`` in order (``mark``:
    the ``<!-- run: ... -->`` line before it, or None)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found = []
    for m in _FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        found.append((m.group(1), m.group(2), mark.group(1) if mark else None))
    return found


def runnable(page: str, slow: bool) -> list[tuple[str, str]]:
    """The blocks of ``page`` the tier runs: not ``ci``; ``slow`` ones in the slow tier,
    ``devices`` ones there too where two CPUs are usable."""
    from xpseq.backends import usable_cpus

    return [(lang, src) for lang, src, mark in blocks(page) if lang in RUNNABLE
            and mark != "ci" and (slow or mark not in ("slow", "devices"))
            and (mark != "devices" or usable_cpus() >= 2)]


def run_page(page: str, folder: pathlib.Path, slow: bool) -> subprocess.CompletedProcess:
    """Run the page's blocks in ``folder``, which holds the clone's ``scripts/`` and this
    environment as ``.venv`` (links), as a reader in the clone has them; the result of
    the driver process."""
    (folder / "scripts").symlink_to(ROOT / "scripts", target_is_directory=True)
    (folder / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    bin_dir = pathlib.Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               MPLBACKEND="Agg", PYTHONIOENCODING="utf-8")
    return subprocess.run([sys.executable, "-c", DRIVER, json.dumps(runnable(page, slow))],
                          cwd=folder, env=env, capture_output=True, text=True,
                          timeout=3600 if slow else 300)


def check_page(page: str, folder: pathlib.Path, slow: bool) -> None:
    done = run_page(page, folder, slow)
    assert done.returncode == 0, (f"{page}: {done.stderr[-3000:]}\n--- stdout\n"
                                  f"{done.stdout[-2000:]}")


def test_every_block_is_fenced_as_code_or_text_and_marks_are_known():
    """A fenced block says its language (no bare ``` that could be either), and a mark is
    one this runner knows, before a block it runs."""
    for page in PAGES:
        for lang, source, mark in blocks(page):
            assert lang, f"{page}: a fence without a language before {source[:60]!r}"
            assert mark is None or (mark in MARKS and lang in RUNNABLE), (page, mark, lang)


def test_no_runnable_block_holds_a_placeholder():
    """Runnable blocks hold commands as typed: no ``[--option]``, ``A | B`` alternatives
    of a command, ``...`` for arguments, or ``<placeholder>``."""
    for page in PAGES:
        for lang, source, _ in blocks(page):
            if lang not in ("sh", "bash"):
                continue
            for line in source.splitlines():
                code = line.split(" #")[0]
                assert not re.search(r"\[--|<[A-Za-z_]+>|\.\.\.|^xpseq \S+ \| ", code), \
                    f"{page}: {line!r}"


# The README's fast blocks run in tests/test_readme.py, which also checks what they print;
# the slow tier runs the README whole.
@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p, slow=False)
                                  and p != "README.md"])
def test_the_fast_blocks_of_the_page_run(page, tmp_path):
    check_page(page, tmp_path, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES
                                  if any(m in ("slow", "devices") for _, _, m in blocks(p))])
def test_the_whole_page_runs(page, tmp_path):
    check_page(page, tmp_path, slow=True)
    if page == "README.md":
        made = [p.name + "/" * p.is_dir() for p in tmp_path.iterdir()
                if p.name not in ("scripts", ".venv")]
        ignored = subprocess.run(["git", "check-ignore", "--no-index", *made], cwd=ROOT,
                                 capture_output=True, text=True).stdout.split()
        assert sorted(ignored) == sorted(made), (
            f"the README's commands leave files .gitignore does not name: "
            f"{sorted(set(made) - set(ignored))}")
