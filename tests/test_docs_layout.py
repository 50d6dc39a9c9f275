"""The layout check of the benchmarks page (scripts/check_docs_layout.py) finds what a
reader at 1280 px would see wrong: a table wider than its column, a clipped cell, a token
broken across lines, the chart below the first screen; and passes a page that has none.
Chromium lays the pages out (``.ci/run`` installs it; without it these are skipped, and
the check itself runs on the built site in ``.ci/run``)."""

from __future__ import annotations

import shutil

import pytest
from helpers import load_script

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None,
                                reason="needs Debian's chromium")

GOOD = """<html><body><section><h3>2026-12-05T004233-amd-epyc-train</h3>
<img src="bench_summary.png" style="width:200px;height:100px">
<div class="xpseq-summary"><table><tr><td>best xpseq</td><td>1.20–1.27×</td></tr></table>
</div></section></body></html>"""

BAD = """<html><body><div style="height:1500px"></div><section>
<h3 style="width:60px;word-break:break-all">2026-12-05T004233-amd-epyc-train</h3>
<img src="bench_summary.png" style="width:200px;height:100px">
<div class="xpseq-summary" style="width:300px"><table style="width:900px;table-layout:fixed">
<tr><td style="width:40px;overflow:hidden;white-space:nowrap">1.20–1.27× ✓ (keras-jax)</td>
<td style="width:860px">x</td></tr></table></div></section></body></html>"""


@pytest.fixture()
def check():
    return load_script("check_docs_layout")


def test_a_page_that_fits_passes(check, tmp_path):
    page = tmp_path / "benchmarks.html"
    page.write_text(GOOD, encoding="utf-8")
    assert check.measure(page) == []


def test_each_layout_fault_is_found(check, tmp_path):
    page = tmp_path / "benchmarks.html"
    page.write_text(BAD, encoding="utf-8")
    found = " | ".join(check.measure(page))
    assert "a summary table is 9" in found and "its column 300 px" in found
    assert "a cell overflows" in found
    assert 'the token "2026-12-05T004233-amd-epyc-train" breaks across lines' in found
    assert "below the first screen" in found
