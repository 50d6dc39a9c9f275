"""What the scripts in ``scripts/`` share: their command lines, the machine and thread
settings they report, timing, and the Markdown and JSON files they write.

How a script imports it (the one way, used by every script that needs it)::

    from . import _common as common          # scripts/NAME.py
    from .. import _common as common         # scripts/benchmarks/NAME.py

The scripts are the package ``scripts`` (run ``python -m scripts.NAME`` from the
checkout's root), so no script touches ``sys.path``.

This module imports the standard library only, at import time and in every helper that a
script calls before its own imports: ``compare_backends.py`` sets the BLAS thread variables
before NumPy is first loaded, so neither NumPy nor xpseq may be imported here. (PyTorch is
imported by :func:`set_torch_threads` and :func:`pin_threads`, when they are called.)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import shlex
import sys
import time
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

def jax_float64() -> None:
    """Turn on JAX's 64-bit mode for the whole of this script's process: for the scripts
    that check float64 results only (``parity_report.py``, ``device_check.py``). A script
    that times float32 code leaves it off, as a JAX user runs float32, and turns it on
    around its float64 rows only (:func:`jax_x64_for`). Set before JAX starts
    (``JAX_ENABLE_X64``), or through ``jax.config`` when it has already."""
    if "jax" in sys.modules:
        sys.modules["jax"].config.update("jax_enable_x64", True)
    else:
        os.environ["JAX_ENABLE_X64"] = "1"


@contextlib.contextmanager
def jax_x64_for(dtype: str) -> Iterator[None]:
    """JAX's 64-bit mode on for the duration only (``jax.enable_x64``, scoped) when
    ``dtype`` is ``"float64"`` and JAX is loaded; nothing otherwise. The float32 and
    bfloat16 rows of a benchmark thus run with JAX's defaults (x64 off), unless the caller
    turned it on for the process (``JAX_ENABLE_X64=1``)."""
    if dtype != "float64" or "jax" not in sys.modules:
        yield
        return
    with sys.modules["jax"].enable_x64(True):
        yield


#: The thread-count variables of OpenMP and the BLAS libraries NumPy and PyTorch use; they
#: act only when set before the library loads.
BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: The arrays of a training batch (what the batches of ``Task.batches`` hold besides
#: ``index``).
BATCH_KEYS = ("src", "src_len", "tgt_in", "tgt_out")

# ---------------------------------------------------------------------- command line


def script_parser(doc: str, *, show_defaults: bool = False) -> argparse.ArgumentParser:
    """A script's argument parser, described by the first line of its docstring ``doc``;
    with ``show_defaults`` every option's help ends with its default."""
    formatter = (argparse.ArgumentDefaultsHelpFormatter if show_defaults
                 else argparse.HelpFormatter)
    return argparse.ArgumentParser(description=doc.splitlines()[0],
                                   formatter_class=formatter)


def add_threads_option(parser: argparse.ArgumentParser | Any,
                       help: str = "torch intra-op threads") -> None:
    """``--threads`` (an int, default 1), on ``parser`` or an argument group of it."""
    parser.add_argument("--threads", type=int, default=1, help=help)


def require_at_least(parser: argparse.ArgumentParser, args: argparse.Namespace,
                     names: Iterable[str], minimum: int = 1, reason: str = "") -> None:
    """Exit through ``parser.error`` (status 2) unless each option in ``names`` (attribute
    names, ``beam_k`` for ``--beam-k``) is at least ``minimum``; ``reason`` is added in
    parentheses."""
    for name in names:
        if getattr(args, name) < minimum:
            why = f" ({reason})" if reason else ""
            parser.error(f"--{name.replace('_', '-')} must be at least {minimum}{why}")


def comma_list(text: str) -> list[str]:
    """The non-empty, stripped items of a comma-separated option value."""
    return [item.strip() for item in text.split(",") if item.strip()]


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """How to run this again from the checkout's root: ``python -m scripts.<script>
    <arguments>`` (``script`` the module's name, ``bench``), the arguments quoted for a
    shell (``sys.argv[1:]`` when ``argv`` is None)."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", "-m", f"scripts.{script}", *(shlex.quote(a) for a in args)])


# ------------------------------------------------------------- machine and threads


def cpu_name() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what ``platform`` knows."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def load_average(ndigits: int | None = None) -> list[float] | None:
    """The 1, 5 and 15 minute load averages (rounded to ``ndigits`` if given), None where
    the system has none."""
    try:
        values = os.getloadavg()
    except (AttributeError, OSError):
        return None
    return [x if ndigits is None else round(x, ndigits) for x in values]


#: The CPU features that decide how fast the engines multiply matrices (the names of
#: ``/proc/cpuinfo``'s flags): AVX2 and FMA, AVX-512 (and its VNNI and bfloat16
#: instructions), and the AMX tiles (bfloat16 and int8), with which PyTorch's oneDNN
#: multiplies bfloat16 several times faster than float32.
CPU_FEATURES = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile",
                "amx_bf16", "amx_int8")


def cpu_flags() -> str | None:
    """All the CPU's flags, as ``lscpu`` lists them: ``/proc/cpuinfo``'s first ``flags``
    line; None where that cannot be read (not Linux)."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.startswith("flags")), None)


def cpu_features(flags: str | None = None) -> list[str] | None:
    """Those of :data:`CPU_FEATURES` the CPU has, from :func:`cpu_flags` (or ``flags``,
    the text of a flags line); None where that cannot be read (not Linux)."""
    if flags is None:
        flags = cpu_flags()
        if flags is None:
            return None
    present = set(flags.split())
    return [f for f in CPU_FEATURES if f in present]


def machine() -> dict[str, Any]:
    """The machine the numbers were measured on: ``cpu`` (its name), ``cpu_features``
    (:func:`cpu_features`), ``cpu_count``, ``cpus_usable`` (``xpseq.backends.usable_cpus``),
    ``openblas_coretype`` (the ``OPENBLAS_CORETYPE`` variable, which picks NumPy's BLAS
    kernels) and ``platform``. (It imports xpseq: call it after the script has set its
    thread variables.)"""
    from xpseq.backends import usable_cpus

    return {"cpu": cpu_name(), "cpu_features": cpu_features(), "cpu_count": os.cpu_count(),
            "cpus_usable": usable_cpus(),
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
            "platform": platform.platform()}


def machine_text(env: Mapping[str, Any] | None = None) -> str:
    """The processor in one line, as every report names it: its model, cores (usable),
    its matrix-related features, whether it has AVX-512, AVX512-BF16 and AMX, and
    ``OPENBLAS_CORETYPE``; of ``env`` (a :func:`machine` dict), else of this machine."""
    env = machine() if env is None else env
    features = env.get("cpu_features")
    if features is None:
        units = "features unknown"
    else:
        has = set(features)
        units = ", ".join([
            "AVX-512" if "avx512f" in has else "no AVX-512",
            "AVX512-BF16" if "avx512_bf16" in has else "no AVX512-BF16",
            "AMX" if "amx_tile" in has else "no AMX"])
        units += f" ({' '.join(features) or 'none of ' + ' '.join(CPU_FEATURES)})"
    return (f"{env.get('cpu') or 'unknown CPU'}, {env.get('cpu_count')} cores "
            f"({env.get('cpus_usable')} usable); {units}; OPENBLAS_CORETYPE="
            f"{env.get('openblas_coretype') or 'unset'}")


def package_versions(packages: Iterable[str]) -> dict[str, str | None]:
    """``python`` and each installed distribution's version (None where not installed),
    read from the package metadata without importing the packages."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for package in packages:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def versions_text(versions: Mapping[str, str | None]) -> str:
    """``python 3.12.3, numpy 2.1.0, ...``: the installed ones of ``versions``."""
    return ", ".join(f"{name} {version}" for name, version in versions.items() if version)


def env_vars(names: Iterable[str], missing: str | None = None) -> dict[str, str | None]:
    """Each environment variable of ``names``, ``missing`` for the unset ones."""
    return {name: os.environ.get(name, missing) for name in names}


def settings_text(settings: Mapping[str, Any]) -> str:
    """``NAME=value, ...`` (None shown as ``unset``): how the thread settings are printed."""
    return ", ".join(f"{name}={'unset' if value is None else value}"
                     for name, value in settings.items())


def set_blas_threads(threads: int, names: Sequence[str] = BLAS_THREAD_VARS) -> dict[str, str]:
    """Set the thread variables ``names`` to ``threads`` where the environment leaves them
    unset; returns those set here. They act only on libraries not loaded yet (NumPy)."""
    set_here = {}
    for var in names:
        if var not in os.environ:
            os.environ[var] = set_here[var] = str(threads)
    return set_here


def set_torch_threads(threads: int, backends: Collection[str] | None = None) -> None:
    """``torch.set_num_threads(threads)``: always, or only if ``backends`` names torch."""
    if backends is None or "torch" in backends:
        import torch

        torch.set_num_threads(threads)


class Affinity:
    """Pins every thread of the process (BLAS and XLA pools included) to ``threads`` CPUs,
    or gives them all of the process's CPUs back."""

    def __init__(self, threads: int, enabled: bool):
        usable = hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")
        self.all = sorted(os.sched_getaffinity(0)) if usable else []
        self.pinned = self.all[:threads] if enabled and usable else None

    def _apply(self, cpus: list[int]) -> None:
        for task in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(task), cpus)
            except OSError:                               # the thread has ended
                pass

    def pin(self) -> None:
        """Every thread onto the pinned CPUs (nothing if pinning is off)."""
        if self.pinned:
            self._apply(self.pinned)

    def release(self) -> None:
        """Every thread back onto all of the process's CPUs (nothing if not pinned)."""
        if self.pinned:
            self._apply(self.all)


def pin_threads(threads: int, pin: bool) -> Affinity:
    """Pin the process to ``threads`` CPUs (XLA has no thread-count setting, so this is
    what keeps JAX on as many cores as PyTorch); then ``xpseq.backends.set_threads``:
    ``torch.set_num_threads``, NumPy's BLAS threads and, before JAX starts, XLA's Eigen
    thread pool off for one thread."""
    affinity = Affinity(threads, pin)
    affinity.pin()
    set_torch_threads(threads)          # imports torch, so that set_threads reaches it
    # NumPy's BLAS too: OpenBLAS started with a thread per core, and two of its threads
    # spinning on one pinned core made NumPy's decoding 60x slower (measured).
    from xpseq import backends

    backends.set_threads(threads, jax=True)
    return affinity


# ---------------------------------------------------------------------------- timing


def time_calls(fn: Callable[[], Any], repeats: int,
               sync: Callable[[Any], Any] | None = None) -> tuple[float, list[float], Any]:
    """Call ``fn`` once (warm-up: compilation on JAX), then ``repeats`` times, passing each
    output through ``sync`` (e.g. ``jax.block_until_ready``) before the clock stops.

    Returns the first call's seconds, the later calls' seconds and the last output.
    """
    def call() -> tuple[float, Any]:
        start = time.perf_counter()
        out = fn() if sync is None else sync(fn())
        return time.perf_counter() - start, out

    first, out = call()
    times = []
    for _ in range(repeats):
        seconds, out = call()
        times.append(seconds)
    return first, times, out


#: Every repeat :func:`take_turns` timed in this process, in order: one ``{name: [wall
#: seconds, ...]}`` per call. ``bench.py`` stores them, by section, in its results file.
TIMINGS: list[dict[str, list[float]]] = []


def take_turns(fns: dict[str, Callable[[], Any]], repeats: int,
               cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Wall seconds of each function, ``repeats`` times, rotating which goes first in each
    round (so that the load of a shared machine falls on all alike); the process's CPU
    seconds go into ``cpu`` if given. The times are also appended to :data:`TIMINGS`."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            cpu_start, start = time.process_time(), time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
            if cpu is not None:
                cpu.setdefault(name, []).append(time.process_time() - cpu_start)
    TIMINGS.append(times)
    return times


# --------------------------------------------------------------------------- reports


def markdown_row(cells: Iterable[Any]) -> str:
    """``| a | b |``, with any ``|`` inside a cell escaped."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def markdown_table(headers: Sequence[Any], rows: Iterable[Iterable[Any]] = (), *,
                   rule: str = " --- ") -> str:
    """A Markdown table: the header row, the separator (``| --- | --- |``; ``rule="---"``
    gives ``|---|---|``) and the ``rows``."""
    lines = [markdown_row(headers), "|" + "|".join(rule for _ in headers) + "|"]
    lines += [markdown_row(row) for row in rows]
    return "\n".join(lines)


def made_by(command: str) -> str:
    """``Made by `<command>` on <today>``: how a report opens."""
    return f"Made by `{command}` on {datetime.date.today().isoformat()}"


def output_dir(path: str | os.PathLike) -> pathlib.Path:
    """The ``--out`` folder, made if missing."""
    out = pathlib.Path(path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def json_default(obj: Any) -> Any:
    """For ``json.dumps``: NumPy scalars as Python numbers, tuples as lists, anything else
    as its ``str``."""
    numpy = sys.modules.get("numpy")       # a NumPy scalar implies NumPy is loaded
    if numpy is not None and isinstance(obj, (numpy.integer, numpy.floating, numpy.bool_)):
        return obj.item()
    if isinstance(obj, tuple):
        return list(obj)
    return str(obj)


def write_report(out: pathlib.Path, stem: str, markdown: str, data: Any, *,
                 indent: int = 1) -> tuple[pathlib.Path, pathlib.Path]:
    """Write ``<out>/<stem>.md`` (``markdown`` as it is) and ``<out>/<stem>.json`` (``data``,
    see :func:`json_default`, and a final newline); returns the two paths."""
    md, js = out / f"{stem}.md", out / f"{stem}.json"
    md.write_text(markdown, encoding="utf-8")
    js.write_text(json.dumps(data, indent=indent, default=json_default) + "\n",
                  encoding="utf-8")
    return md, js


def record(folder: str | os.PathLike, kind: str, data: dict[str, Any]) -> pathlib.Path:
    """Write ``data`` as ``<folder>/<time>-<cpu>-<kind>.json`` (a recorded run, named by
    when and on which processor it ran); returns the path."""
    stamp = time.strftime("%Y-%m-%dT%H%M%S")
    name = (cpu_name() or "cpu").lower().replace("(r)", "").replace("(tm)", "")
    cpu = "-".join(name.split()[:3])
    path = output_dir(folder) / f"{stamp}-{cpu}-{kind}.json"
    path.write_text(json.dumps(data, indent=1, default=json_default) + "\n",
                    encoding="utf-8")
    return path


# ------------------------------------------------------------- the benchmarks page


@dataclasses.dataclass
class PageSection:
    """What one benchmark puts on the benchmarks page (``docs/benchmarks.md``) and the
    README, made from its recorded runs: ``scripts.bench_page`` assembles the sections of
    the modules of its ``SECTIONS`` and checks them. Such a module has two functions:
    ``page_options(parser, root)`` adds its options (the folders of its runs, its charts'
    paths, their defaults under the checkout ``root``), and ``page_section(args)`` gives
    its section, or ``None`` where it has nothing recorded."""

    #: The module whose runs these are (``scripts.bench``), for messages.
    source: str
    #: How many recorded runs the blocks come from.
    runs: int
    #: The results blocks of the page (between ``<!-- results: NAME -->`` and ``<!-- end
    #: results: NAME -->``), by name.
    page: dict[str, str]
    #: The results blocks of the README, by name.
    readme: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Whether a page may lack the blocks (they are left out then); else it is an error.
    optional: bool = False
    #: The runs' own text (their JSON, the numbers as printed): a figure of the prose
    #: found here is recorded, though no block quotes it.
    quotes: str = ""
    #: Its charts: how to draw each, and where (not drawn by ``--check``).
    charts: list[tuple[Callable[[pathlib.Path], None], pathlib.Path]] = dataclasses.field(
        default_factory=list)

