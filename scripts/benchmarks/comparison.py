"""The report of ``scripts/compare_backends.py``: the differences from the NumPy float64
reference, the speed-ups against a base row measured in the same run, the environment
lines, the Markdown table and the two plots.

Imports xpseq, NumPy and matplotlib inside the functions (the script sets its threads
first).
"""

from __future__ import annotations

import math
import pathlib
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import _common as common

from .devices import device_name

if TYPE_CHECKING:
    from xpseq.backends import Backend

THREAD_VARS = common.BLAS_THREAD_VARS
#: The backends compared when ``--backends`` does not say, in the report's order.
DEFAULT_BACKENDS = ("numpy", "jax", "torch", "array_api_strict")
TIMINGS = (("forward_ms", "forward ms"), ("gradient_ms", "gradient ms"),
           ("step_ms", "step ms"), ("decode_ms", "decode ms"))
DIFFS = (("loss_diff", "Δ loss"), ("logits_diff", "Δ logits"), ("grad_diff", "Δ grads"))


#: How the speed-up is labelled in the table, the JSON (``speedup_label``) and the plot.
SPEEDUP_NOTE = ("speed-up = {base}'s time / this row's time, measured in this run: higher "
                "is faster (2.00× is twice as fast as {base}, 0.50× half as fast)")


def rel_diff(actual: Any, reference: Any) -> float:
    """``max|a - ref| / max|ref|`` in float64 (the absolute difference if ``ref`` is 0)."""
    import numpy as np

    a = np.asarray(actual, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    diff = float(np.max(np.abs(a - ref))) if ref.size else 0.0
    return diff / scale if scale > 0 else diff


def grads_rel_diff(grads: Mapping[str, Any], reference: Mapping[str, Any]) -> tuple[float, str]:
    """The worst :func:`rel_diff` over the parameter arrays, and that array's name."""
    return max(((rel_diff(grads[k], reference[k]), k) for k in reference),
               key=lambda item: item[0])


def is_reference(row: Mapping[str, Any]) -> bool:
    """NumPy float64's row: the reference of the differences and the speed-ups' base."""
    return row["engine"] == "numpy" and row["dtype"] == "float64"


def row_name(row: Mapping[str, Any]) -> str:
    return f"{row['engine']} {row['dtype']}"


def add_speedups(rows: list[dict[str, Any]]) -> str:
    """Fill each row's ``speedups`` (base time / this row's time: higher is faster) and
    ``final_loss_diff``; return the base's name (NumPy float64, else the first row)."""
    reference = next((r for r in rows if is_reference(r)), None)
    base_row = reference or rows[0]
    for key, _ in TIMINGS:
        for r in rows:
            r["speedups"][key] = base_row[key] / r[key] if r[key] > 0 else math.inf
    if reference is not None:
        for r in rows:
            r["final_loss_diff"] = (abs(r["final_loss"] - reference["final_loss"])
                                    / abs(reference["final_loss"]))
    return row_name(base_row)


def environment(bes: Sequence[Backend], device: str,
                set_here: Mapping[str, str], numpy_was_loaded: bool) -> dict[str, Any]:
    """The processor, versions, devices, thread settings and load: what the numbers
    depend on."""
    names = {be.name for be in bes}
    versions = common.package_versions(("xpseq", "numpy", "jax", "jaxlib", "torch",
                                        "array-api-strict", "array-api-compat", "matplotlib"))
    threads: dict[str, Any] = common.env_vars(THREAD_VARS)
    threads["set_by_script"] = sorted(set_here)
    threads["numpy_loaded_before_setting"] = numpy_was_loaded
    threads.update(common.env_vars(("XLA_FLAGS",)))
    if "torch" in names:
        import torch

        threads["torch.get_num_threads"] = torch.get_num_threads()
        threads["torch.get_num_interop_threads"] = torch.get_num_interop_threads()
    if "jax" in names:
        import jax

        threads["jax.devices"] = [str(d) for d in jax.devices()]
    devices = {be.name: device_name(be) for be in bes}
    return {"versions": versions, "threads": threads, **common.machine(),
            "device": device, "devices": devices,
            "load_average_start": common.load_average()}


def environment_lines(env: Mapping[str, Any]) -> list[str]:
    threads = env["threads"]
    versions = common.versions_text(env["versions"])
    thread_vars = common.settings_text({v: threads[v] for v in THREAD_VARS})
    if threads["set_by_script"]:
        thread_vars += f" (set by --threads: {', '.join(threads['set_by_script'])})"
    if threads["numpy_loaded_before_setting"]:
        thread_vars += " (NumPy was loaded before: its BLAS threads are as they were then)"
    devices = ", ".join(f"{name} {where}" for name, where in env["devices"].items())
    lines = [f"processor: {common.machine_text(env)}; load average at start "
             + " ".join(f"{x:.2f}" for x in env["load_average_start"] or []),
             f"versions: {versions}",
             f"device: --device {env['device']} ({devices})",
             f"threads: {thread_vars}"]
    if "torch.get_num_threads" in threads:
        lines.append(f"torch.get_num_threads() = {threads['torch.get_num_threads']}, "
                     f"interop {threads['torch.get_num_interop_threads']}")
    if "jax.devices" in threads:
        lines.append(f"jax.devices() = {threads['jax.devices']}; XLA_FLAGS="
                     f"{threads['XLA_FLAGS'] or 'unset'} (XLA sizes its own CPU thread pool)")
    lines.append(f"platform: {env['platform']}")
    if env.get("load_average_end"):
        lines.append("load average at end " + " ".join(f"{x:.2f}" for x in env["load_average_end"]))
    return lines


def _ms(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _diff(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}"


def _speedup(value: float) -> str:
    return f"{value:.2f}×" if value < 100 else f"{value:.0f}×"


def timing_header(label: str) -> str:
    """``step ms (speed-up)``: a timing column's header (its cells ``time (speed-up×)``)."""
    return f"{label} (speed-up)"


def results_table(rows: Sequence[Mapping[str, Any]], steps: int, base: str,
                   notes: Sequence[str] = ()) -> str:
    headers = ["backend", "dtype", "gradients", *(timing_header(label) for _, label in TIMINGS),
               "compile s", *(label for _, label in DIFFS), f"loss after {steps} steps"]
    table = []
    for r in rows:
        cells = [r["engine"], r["dtype"], r["gradients"]]
        cells += [f"{_ms(r[k])} ({_speedup(r['speedups'][k])})" for k, _ in TIMINGS]
        cells.append("–" if r["compile_total_s"] is None else f"{r['compile_total_s']:.2f}")
        cells += [_diff(r[k]) for k, _ in DIFFS]
        cells.append(f"{r['final_loss']:.8f}")
        table.append(cells)
    lines = [common.markdown_table(headers, table), ""]
    compiles = [f"{row_name(r)} " + " / ".join(f"{r['compile_s'][k]:.2f}" for k in
                                             ("forward", "gradient", "step", "decode"))
                for r in rows if r["compile_s"] is not None]
    if compiles:
        lines.append("compile s (forward / gradient / step / decode; JAX: jax.jit, torch "
                     "(compiled): torch.compile, cold): " + "; ".join(compiles) + ".")
    lines.append(f"Times in ms are medians of the repeats; the {SPEEDUP_NOTE.format(base=base)}. "
                 "Δ is max|a − ref| / max|ref| against NumPy float64 on the first batch (Δ "
                 "grads: the worst parameter array); bf16 is mixed precision (float32 "
                 "parameters, bfloat16 matrix products and activations).")
    lines += [f"Note: {note}" for note in notes]
    return "\n".join(lines)


def _colours(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    engines = list(DEFAULT_BACKENDS) + [r["engine"] for r in rows]
    return {name: f"C{i}" for i, name in enumerate(dict.fromkeys(engines))}


def _style(row: Mapping[str, Any]) -> dict[str, Any]:
    """Line and bar styles by dtype: float64 solid, float32 dashed, bf16 dotted."""
    return {"float64": {"linestyle": "-", "linewidth": 2.5, "alpha": 1.0, "hatch": ""},
            "float32": {"linestyle": "--", "linewidth": 1.2, "alpha": 0.6, "hatch": "//"},
            }.get(row["dtype"], {"linestyle": ":", "linewidth": 1.5, "alpha": 0.4,
                                 "hatch": ".."})


def write_png(rows: Sequence[Mapping[str, Any]], path: pathlib.Path, title: str) -> None:
    """Loss trajectories (top left), their distance from NumPy float64's (bottom left) and
    the timings (right, log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig = plt.figure(figsize=(14, 6.5))
    grid = fig.add_gridspec(2, 2, height_ratios=(3, 2))
    top, bottom, right = (fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0]),
                          fig.add_subplot(grid[:, 1]))
    colours = _colours(rows)
    reference = next((r["trajectory"] for r in rows if is_reference(r)), None)
    floor = 1e-18
    for r in rows:
        s = _style(r)
        style = {"color": colours[r["engine"]], "alpha": 0.8, "linestyle": s["linestyle"],
                 "linewidth": s["linewidth"], "label": row_name(r)}
        steps = range(1, len(r["trajectory"]) + 1)
        top.plot(steps, r["trajectory"], **style)
        if reference is not None:
            gaps = [max(abs(a - b) / abs(b), floor) for a, b in zip(r["trajectory"], reference)]
            bottom.plot(steps, gaps, marker="o", markersize=3, **style)
    top.set_ylabel("training loss")
    top.set_title("loss at each step, before its update (same init, same batches)")
    top.legend(fontsize=8, ncol=2)
    bottom.set_yscale("log")
    bottom.set_xlabel("training step")
    bottom.set_ylabel(f"|loss - ref| / ref\n(0 drawn at {floor:g})")
    if reference is None:
        bottom.set_title("no NumPy float64 row to compare with")
    for axis in (top, bottom):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    width = 0.8 / max(len(rows), 1)
    for i, r in enumerate(rows):
        s = _style(r)
        xs = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(TIMINGS))]
        right.bar(xs, [r[k] for k, _ in TIMINGS], width, color=colours[r["engine"]],
                  alpha=s["alpha"], hatch=s["hatch"], label=row_name(r))
    right.set_xticks(range(len(TIMINGS)), [label for _, label in TIMINGS])
    right.set_yscale("log")
    right.set_ylabel("ms (median of the repeats; log scale)")
    right.set_title("timings (lower is faster; JAX and torch (compiled): after compilation)")
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_speedup_png(rows: Sequence[Mapping[str, Any]], path: pathlib.Path, base: str,
                      title: str) -> None:
    """The speed-ups as horizontal bars, one panel per timing (the step's first), one bar per
    row drawn from the base's 1× (a line) to its value: to the right faster, to the left
    slower; log scale, each bar labelled with its value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    order = sorted(TIMINGS, key=lambda t: t[0] != "step_ms")
    fig, axes = plt.subplots(1, len(order), figsize=(4 * len(order), 2.4 + 0.4 * len(rows)),
                             sharey=True, squeeze=False)
    colours = _colours(rows)
    names = [row_name(r) for r in rows]
    values = [r["speedups"][k] for r in rows for k, _ in order]
    low, high = min(min(values), 1.0), max(max(values), 1.0)
    for axis, (key, label) in zip(axes[0], order):
        ys = range(len(rows))
        for y, r in zip(ys, rows):
            s = _style(r)
            value = r["speedups"][key]
            # From the base's 1× to the value: right is faster, left slower.
            axis.barh(y, value - 1.0, left=1.0, color=colours[r["engine"]], alpha=s["alpha"],
                      hatch=s["hatch"], edgecolor="k", linewidth=0.5)
            axis.text(value, y, f" {_speedup(value)}", va="center", fontsize=8)
        axis.axvline(1.0, color="k", linewidth=1)
        axis.set_xscale("log")
        axis.set_xlim(low / 1.5, high * 2.5)
        axis.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        axis.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        axis.set_title(f"{label}: speed-up", fontsize=10)
        axis.set_xlabel(f"× vs {base} (log; higher is faster)", fontsize=8)
    axes[0][0].set_yticks(range(len(rows)), names, fontsize=8)
    axes[0][0].invert_yaxis()
    fig.suptitle(f"speed-up vs {base} = its time / the row's (1× = as fast; higher is faster)"
                 f"\n{title}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
