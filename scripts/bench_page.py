"""Make the benchmarks page's figures from the recorded runs: its summary, its chart and
its tables of every run, and the README's summary table.

Run: ``python scripts/bench_page.py`` (after ``python scripts/bench.py ... --record
benchmarks/results``); ``--check`` writes nothing and exits with status 1 when a page's
figures differ from what the recorded runs give, or when the page's prose (or the
README's part on speed) quotes a figure that no recorded run has (a test runs it).

It reads every ``*.json`` of ``--results`` (default ``benchmarks/results``), each a run of
``bench.py`` with its command, date, machine, versions and every timed repeat, and
rewrites only the blocks between ``<!-- results: NAME -->`` and ``<!-- end results: NAME
-->`` of ``docs/benchmarks.md`` (``summary`` and ``runs``) and of ``README.md``
(``readme``); the prose around them is the authors'. It also draws
``docs/_static/bench_summary.png`` (not with ``--check``: a drawing differs between
matplotlib versions, its numbers do not).

A summary cell is the range of one ratio (``ratio`` of a results row, xpseq's figure over
the reference's, measured in the same run) over the recorded runs of one machine that
ran with JAX's defaults (64-bit mode off). Runs made with ``JAX_ENABLE_X64=1`` appear in
the table of runs only, and in a row of their own in the summary that compares them with
the default runs of the same machine.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys
from typing import Any, Iterable, Sequence

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # scripts/: _common
import _common as common  # noqa: E402
from benchmarks.shared import Row, results_table  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
KINDS = {"rnn": "LSTM + attention", "transformer": "Transformer"}

#: The summary's rows: a label and, per model kind, the (section, measurement) of the
#: results row whose ratio it quotes.
SUMMARY: tuple[tuple[str, dict[str, tuple[str, str]]], ...] = (
    ("best xpseq ÷ the fastest peer of any kind", {
        k: ("peers", f"{k} best xpseq vs the fastest peer of any kind") for k in KINDS}),
    ("best xpseq-JAX ÷ the fastest JAX peer (Keras 3; Flax)", {
        k: ("peers", f"{k} best xpseq-jax vs the fastest JAX peer") for k in KINDS}),
    ("best xpseq-torch ÷ native PyTorch under torch.compile", {
        k: ("peers", f"{k} best xpseq-torch vs native torch.compile") for k in KINDS}),
    ("xpseq-JAX (autodiff) ÷ the same model in eager PyTorch", {
        "rnn": ("train", "xpseq-jax throughput vs native"),
        "transformer": ("transformer", "xpseq-jax vs native torch")}),
    ("xpseq-JAX (hand-derived) ÷ eager PyTorch", {
        "rnn": ("train", "xpseq-jax, hand-derived recurrences throughput vs native"),
        "transformer": ("transformer", "xpseq-jax, hand-derived backward vs native torch")}),
    ("xpseq-torch (autograd) ÷ eager PyTorch", {
        "rnn": ("train", "xpseq-torch throughput vs native"),
        "transformer": ("transformer", "xpseq-torch vs native torch")}),
    ("bf16 ÷ float32 training, xpseq-JAX", {
        k: ("precision", f"xpseq-jax {k} training, bf16 vs float32") for k in KINDS}),
    ("bf16 ÷ float32 training, xpseq-torch", {
        k: ("precision", f"xpseq-torch {k} training, bf16 vs float32") for k in KINDS}),
    ("2 JAX devices ÷ 1 (a core each)", {
        k: ("parallel", f"{k} jax 2 devices vs 1") for k in KINDS}),
    ("2 PyTorch processes ÷ 1 (a core each)", {
        k: ("parallel", f"{k} torch 2 processes vs 1") for k in KINDS}),
)
#: Measurements whose xpseq code changed after earlier runs had measured it: the first
#: recorded run of the current code (the start of its file name) and what changed. The
#: summary's ranges for these rows count that run and later ones only; every run's own
#: table below still shows what it measured.
CHANGED: dict[tuple[str, str], tuple[str, str]] = {
    key: ("2026-12-05T095925", "the RNN's hand-derived decoder stacks each array of its "
                               "backward loop once (and since run 2026-12-05T062937 the "
                               "hand-derived loops stop at each batch's longest sentence)")
    for key in (("train", "xpseq-jax, hand-derived recurrences throughput vs native"),
                ("train", "xpseq-torch, hand-derived backward throughput vs native"),
                ("peers", "rnn best xpseq-jax vs the fastest JAX peer"),
                ("peers", "rnn best xpseq-torch vs native torch.compile"),
                ("peers", "rnn best xpseq vs the fastest peer of any kind"))} | {
    key: ("2026-12-05T004233", "xpseq-torch runs PyTorch's own kernels for the linear "
                               "layers, the layer norm, relu's backward and, eager, the "
                               "recurrences")
    for key in (("train", "xpseq-torch throughput vs native"),
                ("transformer", "xpseq-torch vs native torch"),
                ("peers", "transformer best xpseq-torch vs native torch.compile"),
                ("peers", "transformer best xpseq vs the fastest peer of any kind"),
                ("precision", "xpseq-torch rnn training, bf16 vs float32"),
                ("precision", "xpseq-torch transformer training, bf16 vs float32"))}
#: The README's short table: the summary rows it repeats.
README_ROWS = (0, 1, 2, 3, 6)
#: The peers comparisons whose detail names who won (``"<ours> against <theirs> (...)"``).
PEER_SECTION = "peers"


# ---------------------------------------------------------------------------- reading


def load_runs(folder: pathlib.Path) -> list[dict[str, Any]]:
    """Every recorded run of ``folder`` (its ``*.json``, oldest first by their names),
    each with ``file`` (its name) added."""
    runs = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "rows" not in data or "environment" not in data:
            raise ValueError(f"{path}: not a results file of scripts/bench.py")
        data["file"] = path.name
        runs.append(data)
    return runs


def machine_of(run: dict[str, Any]) -> str:
    """The processor line of a run (``common.machine_text`` of its environment)."""
    return common.machine_text(run["environment"])


def row(run: dict[str, Any], section: str, measure: str) -> dict[str, Any] | None:
    """The results row ``measure`` of ``section`` in ``run``, None if the run lacks it."""
    return next((r for r in run["rows"]
                 if r["section"] == section and r["measure"] == measure), None)


def ratio_text(values: Sequence[float]) -> str:
    """``1.23×``, or ``1.20–1.26×`` for several runs (two decimals)."""
    lo, hi = f"{min(values):.2f}", f"{max(values):.2f}"
    return f"{lo}×" if lo == hi else f"{lo}–{hi}×"


def versions_of(runs: Iterable[dict[str, Any]]) -> str:
    """The library versions of ``runs`` (each version seen, in order)."""
    seen: dict[str, list[str]] = {}
    for run in runs:
        env = run["environment"]
        for name in ("python", "numpy", "torch", "jax", "keras", "flax", "optax"):
            if env.get(name) and env[name] not in seen.setdefault(name, []):
                seen[name].append(env[name])
    return ", ".join(f"{name} {' / '.join(v)}" for name, v in seen.items() if v)


# ---------------------------------------------------------------------------- summary


def winner(detail: str) -> str:
    """Who a peers row compared: ``"xpseq-jax against keras-jax (1 tok/s)"`` →
    ``"keras-jax"``."""
    match = re.search(r" against (.+?) \(", detail)
    return match.group(1) if match else ""


def summary_cells(runs: Sequence[dict[str, Any]], spec: dict[str, tuple[str, str]]
                  ) -> dict[str, dict[str, Any]]:
    """Per kind: the ratios of ``spec``'s row over ``runs``, whether each met its target,
    its target and the peers it was against."""
    cells = {}
    for kind, (section, measure) in spec.items():
        first = CHANGED.get((section, measure), ("",))[0]
        found = [r for r in (row(run, section, measure) for run in runs if run["file"] >= first)
                 if r is not None]
        if not found:
            continue
        cells[kind] = {"ratios": [r["ratio"] for r in found],
                       "met": [r["met"] for r in found], "target": found[0]["target"],
                       "against": sorted({winner(r["detail"]) for r in found
                                          if section == PEER_SECTION} - {""})}
    return cells


def cell_text(cell: dict[str, Any] | None) -> str:
    """A summary cell: the ratio's range, ✓ or ✗ against its target in every run (or
    ``k of n`` runs), and the peer it was against."""
    if cell is None:
        return "not recorded"
    text = ratio_text(cell["ratios"])
    judged = [m for m in cell["met"] if m is not None]
    if judged:
        text += " ✓" if all(judged) else (" ✗" if not any(judged)
                                          else f" (met in {sum(judged)} of {len(judged)})")
    if cell["against"]:
        text += f" ({', '.join(cell['against'])})"
    return text


def target_text(cells: dict[str, dict[str, Any]]) -> str:
    """The target of a summary row (``>=`` as ``≥``), each kind's where they differ; ``—``
    where none."""
    def nice(target: str) -> str:
        return target.replace(">=", "≥").replace("<=", "≤")

    targets = {k: c["target"] for k, c in cells.items() if c["target"] != "—"}
    if len(set(targets.values())) > 1:
        return ", ".join(f"{KINDS[k]} {nice(t)}" for k, t in targets.items())
    return nice(next(iter(targets.values()))) if targets else "—"


def runs_text(n: int) -> str:
    """``1 recorded run``, ``2 recorded runs``."""
    return f"{n} recorded run{'s' if n != 1 else ''}"


def default_runs(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs made with JAX's defaults (64-bit mode off)."""
    return [r for r in runs if not r["environment"].get("jax_x64")]


def by_machine(runs: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``runs`` grouped by their processor line, in the order first recorded."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(machine_of(run), []).append(run)
    return groups


def summary_table(runs: Sequence[dict[str, Any]], rows: Sequence[int] | None = None) -> str:
    """The summary table of one machine's default runs (``rows``: which of
    :data:`SUMMARY`)."""
    lines = []
    for i, (label, spec) in enumerate(SUMMARY):
        if rows is not None and i not in rows:
            continue
        cells = summary_cells(runs, spec)
        if cells:
            lines.append([label, *(cell_text(cells.get(k)) for k in KINDS), target_text(cells)])
    return common.markdown_table(["xpseq ÷ reference, tokens/s (higher: xpseq faster)",
                                  *KINDS.values(), "target"], lines)


def x64_table(default: Sequence[dict[str, Any]], x64: Sequence[dict[str, Any]]) -> str:
    """The same ratios with JAX's 64-bit mode on (``JAX_ENABLE_X64=1``) and off, for the
    rows that have JAX in them."""
    lines = []
    for label, spec in SUMMARY:
        if "JAX" not in label and "peer of any kind" not in label:
            continue
        off, on = summary_cells(default, spec), summary_cells(x64, spec)
        for kind in KINDS:
            if kind in off and kind in on:
                lines.append([f"{label}, {KINDS[kind]}", ratio_text(off[kind]["ratios"]),
                              ratio_text(on[kind]["ratios"])])
    return common.markdown_table(["ratio", "x64 off (JAX's default)", "x64 on"], lines)


def dates_of(runs: Sequence[dict[str, Any]]) -> str:
    """The dates of ``runs``, each once."""
    return ", ".join(sorted({r["date"] for r in runs}))


def fenced(table: str, css_class: str) -> str:
    """``table`` in a ``{container}`` of ``css_class`` (for the docs' stylesheet: no
    number breaks inside; the page's tables only, not the README's)."""
    return f":::{{container}} {css_class}\n{table}\n:::"


def summary_block(runs: Sequence[dict[str, Any]]) -> str:
    """The page's summary: per machine, its processor, the runs and the summary table;
    then the 64-bit comparison where runs with x64 on exist."""
    parts = []
    for machine, group in by_machine(runs).items():
        default = default_runs(group)
        x64 = [r for r in group if r not in default]
        parts.append(f"**{machine}**; {runs_text(len(default))} with JAX's defaults "
                     f"({dates_of(default) or 'none'}); {versions_of(group)}; each "
                     "implementation on one pinned core (PyTorch 1 thread, XLA's Eigen "
                     "pool off), the devices and processes rows on both cores.")
        if default:
            parts.append(fenced(summary_table(default), "xpseq-summary"))
            parts.extend(changed_notes(default))
        if x64 and default:
            parts.append(f"The same machine with JAX's 64-bit mode on for the whole process "
                         f"(`JAX_ENABLE_X64=1`, {runs_text(len(x64))}), as the benchmark "
                         "processes ran before; the float32 computations are the same, "
                         "only the setting differs:")
            parts.append(fenced(x64_table(default, x64), "xpseq-summary"))
    return "\n\n".join(parts)


def changed_notes(runs: Sequence[dict[str, Any]]) -> list[str]:
    """A line for each change of :data:`CHANGED` that left earlier runs out of a summary
    range: which rows, from which run on, and why."""
    notes = []
    for (first, why) in sorted(set(CHANGED.values())):
        left_out = [run for run in runs if run["file"] < first and any(
            row(run, section, measure) for (section, measure), (f, _) in CHANGED.items()
            if f == first)]
        if left_out:
            measures = sorted({measure for (_, measure), (f, _) in CHANGED.items()
                               if f == first})
            notes.append(f"Since run `{first}`, {why}: the rows built on "
                         f"{', '.join(f'“{m}”' for m in measures)} count that run and later "
                         f"ones ({len(left_out)} earlier run{'s' if len(left_out) != 1 else ''}"
                         " left out; their tables below keep what they measured).")
    return notes


def readme_block(runs: Sequence[dict[str, Any]]) -> str:
    """The README's table: a few summary rows, per machine (the notes on which runs count
    for which row are the benchmarks page's)."""
    parts = []
    for machine, group in by_machine(runs).items():
        default = default_runs(group)
        if default:
            parts.append(f"{machine}; {runs_text(len(default))} ({dates_of(default)}):")
            parts.append(summary_table(default, README_ROWS))
    return "\n\n".join(parts)


# ------------------------------------------------------------------------------- runs


def run_block(runs: Sequence[dict[str, Any]]) -> str:
    """Every run, newest first: how it was made and its table (the rows of ``bench.md``)."""
    parts = []
    for run in reversed(runs):
        env = run["environment"]
        sections = ", ".join(run["section_seconds"])
        load, end = env.get("load_average_start"), env.get("load_average_end")
        parts.append(f"### {run['file'].removesuffix('.json')}")
        parts.append(
            f"`{run['command']}` on {run['date']}, {run['seconds']:,.0f} s: sections "
            f"{sections}. {machine_of(run)}. {versions_of([run])}. PyTorch "
            f"{env.get('torch_threads')} thread, pinned to CPUs {env.get('pinned_cpus')}; "
            f"JAX's 64-bit mode {'on' if env.get('jax_x64') else 'off'}; "
            f"{common.settings_text(env.get('env', {}))}; load average (1 min) "
            f"{load[0] if load else 'unknown'} at the start, {end[0] if end else 'unknown'} "
            "at the end. Every time is the median of "
            f"{run['args']['repeats']} repeats; the implementations took turns within "
            "each repeat.")
        parts.append(fenced(results_table([Row(**r) for r in run["rows"]]), "xpseq-run"))
    return "\n\n".join(parts)


# ------------------------------------------------------------------------------ chart


def draw(runs: Sequence[dict[str, Any]], path: pathlib.Path) -> None:
    """The summary's ratios as bars (the range over the runs as a line), one panel per
    machine and model kind, the 1× line marked: right of it xpseq is faster."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {m: default_runs(g) for m, g in by_machine(runs).items() if default_runs(g)}
    fig, axes = plt.subplots(len(groups), len(KINDS), squeeze=False, sharey=True,
                             figsize=(13, 1.2 + 0.45 * len(SUMMARY) * len(groups)))
    for (machine, group), panels in zip(groups.items(), axes):
        for ax, kind in zip(panels, KINDS):
            labels, mids, lows, highs = [], [], [], []
            for label, spec in SUMMARY:
                cell = summary_cells(group, spec).get(kind)
                labels.append(label)
                values = cell["ratios"] if cell else [float("nan")]
                mids.append(sorted(values)[len(values) // 2])
                lows.append(min(values))
                highs.append(max(values))
            y = range(len(labels))
            colours = ["#2a7" if m >= 1 else "#c44" for m in mids]
            ax.barh(y, mids, color=colours, alpha=0.8)
            ax.hlines(y, lows, highs, color="black", linewidth=2)
            ax.axvline(1.0, color="black", linewidth=0.8)
            ax.set_yticks(list(y), labels)
            if ax is panels[0]:
                ax.invert_yaxis()               # the axes share y: inverted once for all
            ax.set_xlabel("xpseq ÷ reference (right of 1: xpseq faster)")
            ax.set_title(f"{KINDS[kind]}: {machine.split(';')[0]}, {runs_text(len(group))}",
                         fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": "xpseq scripts/bench_page.py"})
    plt.close(fig)


# ------------------------------------------------------------------- long attention
#
# The recorded runs of scripts/bench_long_attention.py: the newest one's tables, fitted
# exponents and ratios in the block "long-attention", and its curves in a chart.

LONG_PATHS = {"numpy-plain": "NumPy, plain", "numpy-blockwise": "NumPy, blockwise",
              "torch-plain": "PyTorch, plain", "torch-blockwise": "PyTorch, blockwise",
              "torch-sdpa": "PyTorch's SDPA", "jax-plain": "JAX, plain",
              "jax-blockwise": "JAX, blockwise", "jax-dpa": "jax.nn.dot_product_attention"}
LONG_PEERS = (("jax-blockwise", "jax-dpa"), ("torch-blockwise", "torch-sdpa"))


def newest_long_attention(folder: pathlib.Path) -> dict[str, Any] | None:
    """The newest recorded run of ``folder`` (by name), with ``file`` added; ``None`` if
    there is none."""
    files = sorted(folder.glob("*.json"))
    if not files:
        return None
    data = json.loads(files[-1].read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "points" not in data:
        raise ValueError(f"{files[-1]}: not a results file of scripts/bench_long_attention.py")
    data["file"] = files[-1].name
    return data


def long_attention_block(run: dict[str, Any]) -> str:
    """The run's tables (time and peak memory by length, forward and backward), fitted
    exponents, longest lengths and ratios to the libraries' own kernels."""
    points = [p for p in run["points"] if "median" in p]
    at = {(p["mode"], p["path"], p["length"]): p for p in points}
    paths = [p for p in LONG_PATHS if any(q["path"] == p for q in run["points"])]
    lines = [f"Run `{run['file']}`: {common.machine_text(run['machine'])}; "
             f"{common.versions_text(run['versions'])}; {run['threads']} threads; batch 1, "
             f"{run['heads']} heads, depth {run['depth']}, {run['dtype']}, self-attention, "
             f"blocks of {run['block']}"
             + "".join(f"; {name}={value}" for name, value in (run.get("malloc") or {}).items()
                       if value is not None)
             + f". `{run['command']}`", ""]
    for mode in ("forward", "backward"):
        lines += [f"**{mode}** (time / peak memory; a blank: failed or not run)", ""]
        lengths = sorted({p["length"] for p in points if p["mode"] == mode})
        rows = []
        for n in lengths:
            cells = []
            for path in paths:
                p = at.get((mode, path, n))
                cells.append("" if p is None else
                             f"{p['median']:.3g} s / {p['peak_bytes'] / 2**20:,.0f} MiB")
            rows.append([f"{n:,}", *cells])
        lines += [common.markdown_table(["length", *(LONG_PATHS[p] for p in paths)], rows), ""]
    rows = []
    for path in paths:
        cells = [LONG_PATHS[path]]
        for mode in ("forward", "backward"):
            fit = run["exponents"].get(f"{mode} {path}", {})
            cells += ["-" if fit.get(k) is None else f"{fit[k]:.2f}"
                      for k in ("median", "peak_bytes")]
            longest = run["longest"].get(f"{mode} {path}")
            cells.append("-" if longest is None else f"{longest:,}")
        rows.append(cells)
    lines += ["**Exponents** of time and memory against length (least squares from 2,048 "
              "tokens on) and the longest length each path ran:", "",
              common.markdown_table(["path", "forward time", "forward memory",
                                     "forward longest", "backward time", "backward memory",
                                     "backward longest"], rows), ""]
    rows = []
    for n in sorted({p["length"] for p in points}):
        cells = []
        for ours, theirs in LONG_PEERS:
            for mode in ("forward", "backward"):
                a, b = at.get((mode, ours, n)), at.get((mode, theirs, n))
                cells.append("" if a is None or b is None else f"{a['median'] / b['median']:.2f}")
        if any(cells):
            rows.append([f"{n:,}", *cells])
    lines += ["**Ratios**, time of xpseq's blockwise path ÷ the library's own kernel (below "
              "1: xpseq faster):", "",
              common.markdown_table(["length", "JAX forward", "JAX backward",
                                     "PyTorch forward", "PyTorch backward"], rows)]
    sweep = run.get("block_sweep") or []
    if sweep:
        columns = sorted({(p["mode"], p["path"]) for p in sweep},
                         key=lambda c: (c[0] != "forward", list(LONG_PATHS).index(c[1])))
        found = {(p["mode"], p["path"], p["block"]): p for p in sweep if "median" in p}
        rows = [[f"{b:,}", *("" if (m, p, b) not in found else
                             f"{found[(m, p, b)]['median']:.3g} s" for m, p in columns)]
                for b in sorted({p["block"] for p in sweep})]
        length = sweep[0]["length"]
        lines += ["", f"**Block sizes** at {length:,} tokens, time per call (what the default "
                  "block size is chosen by):", "",
                  common.markdown_table(["block", *(f"{LONG_PATHS[p]}, {m}" for m, p in columns)],
                                        rows)]
    return "\n".join(lines)


def draw_long_attention(run: dict[str, Any], path: pathlib.Path) -> None:
    """Time and peak memory against length, forward and backward, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    for col, mode in enumerate(("forward", "backward")):
        for path_name, label in LONG_PATHS.items():
            pts = sorted((p["length"], p["median"], p["peak_bytes"]) for p in run["points"]
                         if p["mode"] == mode and p["path"] == path_name and "median" in p)
            if not pts:
                continue
            # colour: the library; line: plain (dashed), blockwise (solid), own (dotted)
            style = "-" if "blockwise" in path_name else ("--" if "plain" in path_name
                                                          else ":")
            colour = {"numpy": "#1f77b4", "torch": "#d62728", "jax": "#2ca02c"}[
                path_name.split("-")[0]]
            n, t, m = zip(*pts)
            axes[0][col].plot(n, t, style, color=colour, marker="o", markersize=3, label=label)
            axes[1][col].plot(n, [b / 2**20 for b in m], style, color=colour, marker="o",
                              markersize=3, label=label)
        axes[0][col].set_title(f"{mode}: seconds per call")
        axes[1][col].set_title(f"{mode}: peak memory (MiB)")
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.3)
        axes[1][col].set_xlabel("sequence length (queries = keys)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Attention against length: {run['file']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": "xpseq scripts/bench_page.py"})
    plt.close(fig)


# ------------------------------------------------------------------------------ pages


def markers(name: str) -> tuple[str, str]:
    """The two markers around the results block ``name``."""
    return f"<!-- results: {name} -->", f"<!-- end results: {name} -->"


def replace_block(text: str, name: str, content: str, where: str) -> str:
    """``text`` with the block ``name`` (between its two markers) holding ``content``."""
    start, end = markers(name)
    if text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"{where}: needs one {start} and one {end}")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n\n{content}\n\n{end}{tail}"


def block(text: str, name: str) -> str:
    """What ``text``'s block ``name`` holds now ('' if it has none)."""
    start, end = markers(name)
    if start not in text or end not in text:
        return ""
    return text.split(start, 1)[1].split(end, 1)[0]


#: A figure in a page's prose: a ratio (``1.2×``), a decimal (``0.84``) or a number with
#: thousands separated (``3,000``). Small whole numbers (sizes, counts) are not figures.
FIGURE = re.compile(r"\d+(?:\.\d+)?×|\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+")
#: Where the README speaks of speed: from this line to the next heading.
README_SPEED = "**Speed**"


def speed_text(readme_text: str) -> str:
    """The README's part on speed (from :data:`README_SPEED` to the next ``## `` heading)."""
    if README_SPEED not in readme_text:
        return ""
    return readme_text.split(README_SPEED, 1)[1].split("\n## ", 1)[0]


def outside_blocks(text: str) -> str:
    """``text`` without its results blocks: the authors' prose."""
    return re.sub(r"<!-- results: (\w+) -->.*?<!-- end results: \1 -->", "", text,
                  flags=re.S)


def unrecorded_figures(prose: str, runs: Sequence[dict[str, Any]], generated: str) -> list[str]:
    """The figures of ``prose`` (see :data:`FIGURE`) found neither in the ``generated``
    blocks nor in the recorded ``runs`` (their JSON text, and each number as a results
    table prints it): figures no recorded run backs."""
    known = generated + json.dumps(runs, ensure_ascii=False)
    known += " ".join(" ".join(Row(**r).cells()) for run in runs for r in run["rows"])
    return sorted({f for f in FIGURE.findall(prose) if f not in known})


def pages(runs: Sequence[dict[str, Any]], page: pathlib.Path, readme: pathlib.Path,
          long_runs: dict[str, dict[str, Any] | None] | None = None
          ) -> dict[pathlib.Path, str]:
    """The new text of ``page`` and ``readme``."""
    text = page.read_text(encoding="utf-8")
    text = replace_block(text, "summary", summary_block(runs), str(page))
    text = replace_block(text, "runs", run_block(runs), str(page))
    for name, run in (long_runs or {}).items():     # (a page without the section: left)
        if run is not None and markers(name)[0] in text:
            text = replace_block(text, name, long_attention_block(run), str(page))
    readme_text = replace_block(readme.read_text(encoding="utf-8"), "readme",
                                readme_block(runs), str(readme))
    return {page: text, readme: readme_text}


def main(argv: Sequence[str] | None = None) -> int:
    p = common.script_parser(__doc__, show_defaults=True)
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results"),
                   help="the folder of recorded runs")
    p.add_argument("--page", default=str(ROOT / "docs" / "benchmarks.md"))
    p.add_argument("--readme", default=str(ROOT / "README.md"))
    p.add_argument("--chart", default=str(ROOT / "docs" / "_static" / "bench_summary.png"))
    p.add_argument("--long-attention", default=str(ROOT / "benchmarks" / "long-attention"),
                   help="the folder of scripts/bench_long_attention.py's recorded runs")
    p.add_argument("--long-attention-malloc",
                   default=str(ROOT / "benchmarks" / "long-attention-malloc"),
                   help="its runs with glibc's allocator settings changed")
    p.add_argument("--long-chart", default=str(ROOT / "docs" / "_static" / "long_attention.png"))
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a page's blocks differ from the runs'")
    args = p.parse_args(argv)
    runs = load_runs(pathlib.Path(args.results))
    if not runs:
        p.error(f"no recorded runs in {args.results} (bench.py --record DIR makes them)")
    long_runs = {"long-attention": newest_long_attention(pathlib.Path(args.long_attention)),
                 "long-attention-malloc": newest_long_attention(
                     pathlib.Path(args.long_attention_malloc))}
    long_run = long_runs["long-attention"]
    new = pages(runs, pathlib.Path(args.page), pathlib.Path(args.readme), long_runs)
    if args.check:
        stale = [str(path) for path, text in new.items()
                 if path.read_text(encoding="utf-8") != text]
        for path in stale:
            print(f"{path}: its results blocks differ from the {len(runs)} recorded runs; "
                  "run python scripts/bench_page.py", file=sys.stderr)
        page, readme = (new[pathlib.Path(args.page)], new[pathlib.Path(args.readme)])
        generated = "".join([block(page, "summary"), block(page, "runs"),
                             *(block(page, name) for name in long_runs),
                             block(readme, "readme"),
                             *(json.dumps(r) for r in long_runs.values() if r is not None)])
        missing = {args.page: unrecorded_figures(outside_blocks(page), runs, generated),
                   args.readme: unrecorded_figures(outside_blocks(speed_text(readme)), runs,
                                                   generated)}
        for path, figures in missing.items():
            if figures:
                print(f"{path}: figures in no recorded run: {', '.join(figures)}",
                      file=sys.stderr)
        return 1 if stale or any(missing.values()) else 0
    for path, text in new.items():
        path.write_text(text, encoding="utf-8")
    draw(runs, pathlib.Path(args.chart))
    charts = [args.chart]
    if long_run is not None:
        draw_long_attention(long_run, pathlib.Path(args.long_chart))
        charts.append(args.long_chart)
    print(f"{len(runs)} runs: wrote {', '.join(str(p) for p in new)} and {', '.join(charts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
