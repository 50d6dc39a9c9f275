"""Check built pages of the site as a reader sees them at 1280 x 800: Debian's Chromium,
headless, lays each out and measures.

Run after ``make docs``: ``python -m scripts.check_docs_layout [docs/_build/html]
[--screenshot benchmarks.png]`` (a few seconds a page; ``.ci/run`` runs it). It checks
the benchmarks page, the G2P guide and an API page (:data:`PAGES`), and fails (exit 1,
each problem a line) when

* a summary table is wider than its column (a column cut off, or a scroll bar);
* a table cell's content overflows its cell (a cell clipped);
* a token breaks across lines: a figure, a run id, a peer's name (a summary cell's or a
  run heading's word split mid-way), or a name in the navigation split anywhere but
  after a dot or an underscore;
* a code block is wider than its box (a line cut off at the column's edge);
* the summary chart does not start on the first screen (what a 1280 x 800 window
  shows of the page), on a page that has one;

and, over every built page's text outside code (no browser needed), when a word starts
with an en or em dash: ``--beam`` typed in the source and rendered ``–beam`` (smart
dashes), which a reader would copy wrong.

Each page is copied with a measuring script added at its end; Chromium runs it
(``--dump-dom``) and the script writes what it found into the page as JSON.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

WIDTH, HEIGHT = 1280, 800

# Measures the page: each problem as a line of text.
MEASURE = r"""
<script>
function measure() {
  const problems = [];
  const short = (el) => (el.textContent || "").trim().slice(0, 50);
  for (const table of document.querySelectorAll(".xpseq-summary table")) {
    const box = table.parentElement.getBoundingClientRect();
    const t = table.getBoundingClientRect();
    if (t.right > box.right + 1 || t.right > window.innerWidth)
      problems.push(`a summary table is ${Math.round(t.width)} px wide, its column ` +
                    `${Math.round(box.width)} px: a column is cut off`);
    for (const cell of table.querySelectorAll("td, th")) {
      if (cell.scrollWidth > cell.clientWidth + 1)
        problems.push(`a cell overflows: "${short(cell)}"`);
    }
  }
  // A token never breaks: every word of a summary cell and of a run's heading stays on
  // one line.
  const words = [...document.querySelectorAll(".xpseq-summary td, .xpseq-summary th, " +
                                              "section h3")];
  for (const el of words) {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const re = /\S+/g;
      let m;
      while ((m = re.exec(node.data))) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1) problems.push(`the token "${m[0]}" breaks across lines`);
      }
    }
  }
  // The navigation's names break only after "." or "_" (xpseq.js marks those places).
  for (const link of document.querySelectorAll(".bd-sidebar-primary .bd-links a")) {
    const walker = document.createTreeWalker(link, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 1; i < node.data.length; i++) {
        const range = document.createRange();
        range.setStart(node, i - 1);
        range.setEnd(node, i + 1);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1 && !/[._\s]/.test(node.data[i - 1]) && !/\s/.test(node.data[i]))
          problems.push(`the name "${link.textContent.trim()}" breaks inside a word`);
      }
    }
  }
  for (const pre of document.querySelectorAll(".bd-article pre")) {
    if (pre.scrollWidth > pre.clientWidth + 1)
      problems.push(`a code block is ${pre.scrollWidth} px wide in a ${pre.clientWidth} px ` +
                    `box: "${short(pre)}"`);
  }
  const chart = document.querySelector('img[src*="bench_summary"]');
  if (!chart) {
    if (document.querySelector(".xpseq-summary")) problems.push("no summary chart");
  } else if (chart.getBoundingClientRect().top > window.innerHeight)
    problems.push(`the summary chart starts ${Math.round(chart.getBoundingClientRect().top)}` +
                  ` px down, below the first screen (${window.innerHeight} px)`);
  const out = document.createElement("pre");
  out.id = "xpseq-layout";
  out.textContent = JSON.stringify(problems);
  document.body.appendChild(out);
}
// Measure once the page's own files are in (the chart among them); a resource of another
// host is not waited for (the check runs offline).
document.addEventListener("DOMContentLoaded", () => {
  const chart = document.querySelector('img[src*="bench_summary"]');
  if (chart && !chart.complete) {
    chart.addEventListener("load", measure);
    chart.addEventListener("error", measure);
  } else measure();
});
</script>
"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise SystemExit("check_docs_layout: Chromium is not installed (Debian: apt-get "
                         "install chromium)")
    return found


def measure(page: pathlib.Path, screenshot: pathlib.Path | None = None) -> list[str]:
    """The layout problems of ``page`` (a built HTML file) at 1280 x 800."""
    browser = chromium()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--disable-background-networking", f"--window-size={WIDTH},{HEIGHT}",
             "--virtual-time-budget=10000", "--host-resolver-rules=MAP * ~NOTFOUND"]
    with tempfile.TemporaryDirectory() as tmp:
        copy = page.with_name(f".layout-{page.name}")
        try:
            html = page.read_text(encoding="utf-8")
            copy.write_text(html.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
            done = subprocess.run([browser, *flags, f"--user-data-dir={tmp}", "--dump-dom",
                                   copy.as_uri()], capture_output=True, text=True,
                                  timeout=300)
            if screenshot is not None:
                subprocess.run([browser, *flags, f"--user-data-dir={tmp}",
                                f"--screenshot={screenshot.resolve()}", page.as_uri()],
                               capture_output=True, timeout=300, check=True)
        finally:
            copy.unlink(missing_ok=True)
    found = re.search(r'<pre id="xpseq-layout"[^>]*>(.*?)</pre>', done.stdout, re.S)
    if not found:
        raise SystemExit(f"check_docs_layout: Chromium did not lay out {page}: "
                         f"{done.stderr[-1000:]}")
    text = found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace(
        "&lt;", "<").replace("&gt;", ">")
    return list(json.loads(text))


#: The pages laid out by Chromium, relative to the built site: the benchmarks page (wide
#: tables), the G2P guide (long code lines) and an API page (a long signature).
PAGES = ("benchmarks.html", "guide/g2p.html",
         "_autosummary/xpseq.tasks.translator.Translator.html")
#: A word of text that starts with an en or em dash: a flag's "--" made a dash.
DASHED = re.compile(r"(?:^|[\s(\[\"'])[\u2013\u2014][A-Za-z]")
#: What is code, or not text a reader reads as prose.
SKIP = re.compile(r"<(pre|code|script|style|kbd|samp|tt)\b.*?</\1>", re.S | re.I)


def dashed_words(page: pathlib.Path) -> list[str]:
    """The places in ``page``'s text outside code where a word starts with an en or em
    dash, each with its context."""
    text = SKIP.sub(" ", page.read_text(encoding="utf-8"))
    text = re.sub(r"<[^>]+>", " ", text)
    return ["a word starts with a dash: "
            f"\"{text[max(0, m.start() - 20):m.end() + 20].strip()}\""
            for m in DASHED.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", nargs="?", default="docs/_build/html",
                        help="the built site (make docs)")
    parser.add_argument("--screenshot", type=pathlib.Path,
                        help="also save the first screen as this PNG")
    args = parser.parse_args(argv)
    site = pathlib.Path(args.html).resolve()
    if not (site / PAGES[0]).is_file():
        parser.error(f"{site / PAGES[0]} does not exist: run make docs first")
    problems = []
    for name in PAGES:
        page = site / name
        if not page.is_file():
            problems.append(f"{page}: not built")
            continue
        shot = args.screenshot if name == PAGES[0] else None
        found = measure(page, shot)
        problems += [f"{page}: {problem}" for problem in found]
        if not found:
            print(f"{page}: fits {WIDTH} x {HEIGHT}: no column cut off, no cell clipped, "
                  "no token or name broken, no code line cut")
    pages = sorted(p for p in site.rglob("*.html") if not p.name.startswith("."))
    for page in pages:
        problems += [f"{page}: {problem}" for problem in dashed_words(page)]
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"{len(pages)} pages: no word of text starts with a dash")
    return 1 if problems else 0

if __name__ == "__main__":
    sys.exit(main())
