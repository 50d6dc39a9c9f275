"""``bench.py``'s part of the benchmarks page, from its recorded runs: the summary, its
chart and the tables of every run (``docs/benchmarks.md``), and the README's summary table.

Every ``*.json`` of ``--results`` (default ``benchmarks/results``) is a run of
``python -m scripts.bench ... --record benchmarks/results``, with its command, date,
machine, versions and every timed repeat; this module fills the page's blocks ``summary``
and ``runs`` and the README's ``readme`` (``scripts.bench_page`` writes them, and checks
them with ``--check``), and draws ``docs/_static/bench_summary.png``.

A summary cell is the range of one ratio (``ratio`` of a results row, xpseq's figure over
the reference's, measured in the same run) over the recorded runs of one machine that
ran with JAX's defaults (64-bit mode off). Runs made with ``JAX_ENABLE_X64=1`` appear in
the table of runs only, and in a row of their own in the summary that compares them with
the default runs of the same machine.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
from typing import Any, Iterable, Sequence

from .. import _common as common
from .shared import Row, results_table

KINDS = {"rnn": "LSTM + attention", "transformer": "Transformer"}

#: The summary's rows: a label and, per model kind, the (section, measurement) of the
#: results row whose ratio it quotes.
SUMMARY: tuple[tuple[str, dict[str, tuple[str, str]]], ...] = (
    ("best xpseq ÷ the fastest peer of any kind", {
        k: ("peers", f"{k} best xpseq vs the fastest peer of any kind") for k in KINDS}),
    ("best xpseq-JAX ÷ the fastest JAX peer (Keras 3; Flax)", {
        k: ("peers", f"{k} best xpseq-jax vs the fastest JAX peer") for k in KINDS}),
    ("best xpseq-JAX ÷ Keras 3 trained by model.fit", {
        k: ("peers", f"{k} best xpseq-jax vs Keras 3's fit") for k in KINDS}),
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
README_ROWS = (0, 1, 2, 3, 4)
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
    its target and the peer of its lowest ratio."""
    cells = {}
    for kind, (section, measure) in spec.items():
        first = CHANGED.get((section, measure), ("",))[0]
        found = [r for r in (row(run, section, measure) for run in runs if run["file"] >= first)
                 if r is not None]
        if not found:
            continue
        # the peer of the lowest ratio: the closest call of the runs
        closest = (winner(min(found, key=lambda r: r["ratio"])["detail"])
                   if section == PEER_SECTION else "")
        cells[kind] = {"ratios": [r["ratio"] for r in found],
                       "met": [r["met"] for r in found], "target": found[0]["target"],
                       "against": [closest] if closest else []}
    return cells


def cell_text(cell: dict[str, Any] | None) -> str:
    """A summary cell: the ratio's range, ✓ or ✗ against its target in every run (or
    ``k of n`` runs), and the peer of its lowest ratio."""
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
    """The README's table: a few summary rows for the processor with the most recorded
    runs, and a pointer to the benchmarks page for the others (the README keeps its length
    whatever the number of processors; the notes on which runs count for which row are
    the page's)."""
    groups = {machine: default_runs(group) for machine, group in by_machine(runs).items()}
    groups = {machine: group for machine, group in groups.items() if group}
    if not groups:
        return ""
    machine = max(groups, key=lambda m: len(groups[m]))
    default, others = groups[machine], len(groups) - 1
    elsewhere = (f"; the benchmarks page has the runs of {others} other processor"
                 f"{'s' if others > 1 else ''} too" if others else "")
    return (f"{machine}; {runs_text(len(default))} ({dates_of(default)}){elsewhere}:\n\n"
            + summary_table(default, README_ROWS))


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



# ------------------------------------------------------------------------------ page


def page_options(parser: argparse.ArgumentParser, root: pathlib.Path) -> None:
    """The folder of the recorded runs and the chart's path."""
    parser.add_argument("--results", default=str(root / "benchmarks" / "results"),
                        help="the folder of recorded runs")
    parser.add_argument("--chart", default=str(root / "docs" / "_static" / "bench_summary.png"))


def page_section(args: argparse.Namespace) -> common.PageSection:
    """The page's ``summary`` and ``runs``, the README's ``readme`` and the chart, from
    every recorded run of ``args.results``; there must be one."""
    runs = load_runs(pathlib.Path(args.results))
    if not runs:
        raise FileNotFoundError(f"no recorded runs in {args.results} "
                                "(python -m scripts.bench --record DIR makes them)")
    quotes = "\n".join([json.dumps(runs, ensure_ascii=False),
                        *(" ".join(Row(**r).cells()) for run in runs for r in run["rows"])])
    return common.PageSection(
        source="scripts.bench", runs=len(runs),
        page={"summary": summary_block(runs), "runs": run_block(runs)},
        readme={"readme": readme_block(runs)}, quotes=quotes,
        charts=[(lambda path: draw(runs, path), pathlib.Path(args.chart))])
