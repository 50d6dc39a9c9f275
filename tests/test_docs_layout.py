"""The layout check of the site's pages (scripts/check_docs_layout.py) finds what a
reader at 1280 px would see wrong: a table wider than its column, a clipped cell, a token
broken across lines, a navigation name broken inside a word, a code line cut at the
column's edge, the chart below the first screen, a flag's "--" rendered as a dash; and
passes a page that has none.
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


CODE_AND_NAV = """<html><body><nav class="bd-sidebar-primary"><div class="bd-links">
<a style="display:block;width:{nav}px;word-break:{brk}">xpseq.tasks.<wbr>g2p_<wbr>campaign</a></div></nav>
<article class="bd-article"><pre style="width:300px;overflow:auto">{code}</pre></article>
</body></html>"""


def test_a_cut_code_line_and_a_name_broken_inside_a_word_are_found(check, tmp_path):
    page = tmp_path / "g2p.html"
    page.write_text(CODE_AND_NAV.format(nav=60, brk="break-all", code="x = 1  # " + "long " * 40),
                    encoding="utf-8")
    found = " | ".join(check.measure(page))
    assert "a code block is" in found and "in a 300 px box" in found
    assert 'the name "xpseq.tasks.g2p_campaign" breaks inside a word' in found


def test_names_that_break_after_dots_and_wrapped_code_pass(check, tmp_path):
    page = tmp_path / "g2p.html"
    code = '<span style="white-space:pre-wrap">x = 1  # ' + "long " * 40 + "</span>"
    page.write_text(CODE_AND_NAV.format(nav=120, brk="normal", code=code).replace(
        "overflow:auto", "white-space:pre-wrap"), encoding="utf-8")
    assert check.measure(page) == []


def test_a_flag_rendered_with_a_dash_is_found_outside_code_only(tmp_path):
    check = load_script("check_docs_layout")
    page = tmp_path / "page.html"
    page.write_text("<p>Pass \u2013beam 5 or \u2014xla_flag; pages 1\u20132 are fine</p>"
                    "<pre>\u2013in code</pre><code>\u2013kept</code>", encoding="utf-8")
    found = check.dashed_words(page)
    assert len(found) == 2
    assert "\u2013beam" in found[0] and "\u2014xla_flag" in found[1]
