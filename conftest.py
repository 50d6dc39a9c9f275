"""Backend selection shared by tests/ and parity_tests/.

The fixtures read the backends' declared capabilities (``xpseq.backends.CAPABILITIES``), as
SciPy's ``xp`` fixture reads ``xp_capabilities``:

* ``backend``: once per selected backend that trains (numpy, jax, torch,
  array_api_strict). A test marked ``@pytest.mark.forward`` (it runs models forward and
  search only) also runs on the forward-only backends (dask, onnx), each marked
  ``forward_only``, and ``slow`` unless the marker names it in ``quick=``.
  A test marked ``@pytest.mark.slow_on("jax")`` (``backend`` or ``grad_backend``) runs
  on those backends in the slow tier only: the backend-independent logic it checks is
  covered quickly on the others.
* ``grad_backend``: the selected backends whose gradients are automatic (jax, torch);
  numpy and array_api_strict differentiate only functions with a hand-derived rule.
* ``forward_backend``: the selected forward-only backends (dask, onnx) alone, for a test of
  what only they need checked against NumPy; marked as ``backend`` marks them.

Select backends with ``pytest --backend jax --backend torch`` (or ``--backend jax,torch``)
or the environment variable ``XPSEQ_BACKENDS=jax,torch``; the default is all of them. A
selected backend whose library is not installed is skipped, and ``-ra`` lists the skips.
"""

from __future__ import annotations

import os
import pathlib
import threading
import time
from typing import Any

import pytest

# Tests compile JAX programs with XLA's backend optimisation level 0: the same semantics
# and the same tolerances (every test also passes at the default level), about 30% less
# compile time, which is most of this suite's time. The demo, the scripts and the
# benchmarks run with XLA's defaults. Set XLA_FLAGS yourself to override.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_backend_optimization_level=0").strip()

# The parity contract is float64 on every backend, JAX included: the suite turns on JAX's
# 64-bit mode itself, for its own processes (xpseq never changes JAX's settings). Tests of
# JAX's default configuration run in a child process without it.
os.environ.setdefault("JAX_ENABLE_X64", "1")

# Commands that the tests run without --backend use NumPy (the default rule would pick JAX
# and compile for a one-sentence translation); test_backends.py tests the rule itself.
os.environ.setdefault("XPSEQ_BACKEND", "numpy")

# The command keeps JAX's compiled programs in the user's cache folder between runs; the
# tests' commands keep none (tests/test_global_state.py tests the cache in a child process).
os.environ.setdefault("XPSEQ_JAX_CACHE", "0")

from xpseq import backends


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend", action="append", default=None, metavar="NAME",
        help="run backend-parametrised tests on these backends only (repeatable or "
             f"comma-separated; one of {', '.join(backends.CAPABILITIES)}); default: "
             "$XPSEQ_BACKENDS or all",
    )


def selected_backends(config: pytest.Config) -> list[str]:
    raw = config.getoption("--backend") or [os.environ.get("XPSEQ_BACKENDS", "")]
    names = [n.strip() for item in raw for n in item.split(",") if n.strip()]
    if not names:
        return list(backends.CAPABILITIES)
    unknown = [n for n in names if n not in backends.CAPABILITIES]
    if unknown:
        raise pytest.UsageError(f"unknown backend(s) {unknown}; choose from "
                                f"{list(backends.CAPABILITIES)}")
    return names


def backend_params(metafunc: pytest.Metafunc, names: list[str], *,
                   forward_only: bool = False) -> list[Any]:
    """The ``backend`` fixture's parameters for one test: the selected backends that
    train, and with ``@pytest.mark.forward`` the forward-only ones, each marked
    ``forward_only`` and ``slow`` unless the marker's ``quick=`` names it. With
    ``forward_only`` (the ``forward_backend`` fixture): those alone."""
    forward = metafunc.definition.get_closest_marker("forward")
    quick = () if forward is None else forward.kwargs.get("quick", ())
    params: list[Any] = []
    for name in names:
        if backends.capabilities(name).trains:
            if not forward_only:
                params.append(slow_if_named(metafunc, name))
        elif forward is not None or forward_only:
            marks = [pytest.mark.forward_only] + ([] if name in quick else [pytest.mark.slow])
            params.append(pytest.param(name, marks=marks, id=name))
    return params


def slow_if_named(metafunc: pytest.Metafunc, name: str) -> Any:
    """The parameter ``name``, marked ``slow`` if the test's ``slow_on`` marker names it."""
    slow_on = metafunc.definition.get_closest_marker("slow_on")
    if slow_on is not None and name in slow_on.args:
        return pytest.param(name, marks=pytest.mark.slow, id=name)
    return name


def pytest_configure(config: pytest.Config) -> None:
    # Small tensors: one thread avoids the contention that makes torch slow on 2 cores.
    if "torch" in backends.available():
        import torch

        torch.set_num_threads(1)
    if not hasattr(config, "workerinput"):                 # (not in a worker)
        config.pluginmanager.register(Heartbeat(), "xpseq-heartbeat")


class Heartbeat:
    """A line on the terminal whenever no test has ended for :attr:`EVERY` seconds: the
    tests under way, longest first, with how long each has run (its module's fixtures
    count as its set-up). In a run with workers (pytest-xdist, as ``make test`` runs) the
    controller writes it, from the start and end of each test that the workers report."""

    EVERY = 10.0

    def __init__(self) -> None:
        self.reporter: Any = None
        self.started: dict[str, float] = {}
        self.last = time.monotonic()
        self.lock = threading.Lock()
        self.finished = threading.Event()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # The controller of a run with workers: a plain run captures what a thread
        # writes while a test runs (none with -p no:terminal).
        self.reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if self.reporter is not None and session.config.getoption("dist", "no") != "no":
            threading.Thread(target=self.watch, name="xpseq-heartbeat", daemon=True).start()

    def pytest_sessionfinish(self) -> None:
        self.finished.set()

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        with self.lock:
            self.started[nodeid] = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            with self.lock:
                self.started.pop(report.nodeid, None)
                self.last = time.monotonic()

    def watch(self) -> None:
        while not self.finished.wait(1.0):
            with self.lock:
                now = time.monotonic()
                if now - self.last < self.EVERY:
                    continue
                self.last = now
                running = sorted(self.started.items(), key=lambda item: item[1])
            if running:
                line = "; ".join(f"{nodeid} ({now - t:.0f} s)" for nodeid, t in running)
            else:
                line = "collecting and starting"
            self.reporter.write_line(f"[under way: {line}]")


#: The files that take longest, longest first (seconds of test time measured on 2 cores:
#: the findings' two trainings 85 in the slow tier; then the model parity 53, the command
#: line 45, the export 25-50, the command's failures 31, G2P 28, the Transformer 27, the
#: gradients' parity 26). The workers take files in collection order (``--dist
#: loadfile``), so a long file collected last keeps one worker busy while the other idles:
#: started first, they leave the short files to even out the end.
LONGEST_FIRST = ("tests/test_findings.py", "parity_tests/test_models.py", "tests/test_cli.py",
                 "tests/test_export.py", "tests/test_cli_errors.py", "tests/test_g2p.py",
                 "tests/test_transformer.py", "parity_tests/test_gradients.py")


def long_tests() -> set[str]:
    """The node ids in ``tests/long_tests.txt``: tests of the quick tier measured at 2 s or
    more (``scripts/split_test_tiers.py``), which run in the slow tier; none when
    ``XPSEQ_QUICK_TIER_ALL`` is set (the script's measuring run)."""
    if os.environ.get("XPSEQ_QUICK_TIER_ALL"):
        return set()
    listed = pathlib.Path(__file__).parent / "tests" / "long_tests.txt"
    lines = listed.read_text(encoding="utf-8").splitlines() if listed.exists() else []
    return {line.split(None, 1)[1].strip() for line in lines
            if line.strip() and not line.startswith("#")}


@pytest.hookimpl(tryfirst=True)            # before -m selects by the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    long = long_tests()
    for item in items:
        if item.nodeid in long:
            item.add_marker(pytest.mark.slow)

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = selected_backends(metafunc.config)
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", backend_params(metafunc, names), indirect=True)
    if "forward_backend" in metafunc.fixturenames:
        metafunc.parametrize("forward_backend",
                             backend_params(metafunc, names, forward_only=True), indirect=True)
    if "grad_backend" in metafunc.fixturenames:
        metafunc.parametrize("grad_backend", [slow_if_named(metafunc, n) for n in names
                                              if backends.capabilities(n).gradients
                                              == "autodiff"], indirect=True)


def _get(name: str) -> backends.Backend:
    try:
        return backends.get(name)
    except ModuleNotFoundError:
        pytest.skip(f"backend {name!r} is not installed")


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> backends.Backend:
    """One of the selected backends (parametrised)."""
    return _get(request.param)


@pytest.fixture
def forward_backend(request: pytest.FixtureRequest) -> backends.Backend:
    """One of the selected forward-only backends (parametrised)."""
    return _get(request.param)


@pytest.fixture
def grad_backend(request: pytest.FixtureRequest) -> backends.Backend:
    """One of the selected backends that computes gradients (parametrised)."""
    return _get(request.param)
