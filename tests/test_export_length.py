"""The export-length script (``scripts/bench_export_length.py``): it exports a Transformer,
decodes sources of the given lengths in child processes and solves for the longest source
a memory holds; the solving is checked on figures worked by hand."""

from __future__ import annotations

import math

import pytest
from helpers import load_script

bench = load_script("bench_export_length")


def test_the_longest_source_comes_from_the_two_longest_points():
    # Peaks growing exactly as L² from 1 GiB at 4,096: 16 GiB holds 16,384 tokens.
    points = [{"length": n, "peak_bytes": (n / 4096) ** 2 * 2 ** 30}
              for n in (1024, 2048, 4096)]
    slope, most = bench.longest(points, 16.0)
    assert slope == pytest.approx(2.0)
    assert most == pytest.approx(16384, abs=1)
    # A steeper last step decides (the safer estimate), and a failed point is ignored.
    points.append({"length": 8192, "peak_bytes": 2 ** 3 * 2 ** 30})    # slope 3 at the top
    points.append({"length": 16384, "error": "out of memory"})
    slope, most = bench.longest(points, 64.0)
    assert slope == pytest.approx(3.0)
    assert most == pytest.approx(8192 * 2, abs=1)
    assert bench.longest(points[:1], 16.0) == (None, None)


@pytest.mark.slow  # an export traced (~15 s) and two child processes
def test_the_script_exports_and_decodes_each_length(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("ndonnx")
    bench.main(["--lengths", "64,128", "--steps", "2", "--memory-limit", "8",
                "--record", str(tmp_path)])
    out = capsys.readouterr().out
    assert "     64:" in out and "    128:" in out and "fails" not in out
    assert "local exponent" in out
    [record] = tmp_path.glob("*-export-length.json")
    import json

    data = json.loads(record.read_text())
    assert [p["length"] for p in data["points"]] == [64, 128]
    assert all(p["peak_bytes"] > 0 and math.isfinite(p["seconds"]) for p in data["points"])
    assert data["longest"] > 128
