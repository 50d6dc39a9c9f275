"""What the benchmark scripts report about the machine they ran on."""

from __future__ import annotations

import pathlib
import platform


def cpu_name() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what ``platform`` knows."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None
