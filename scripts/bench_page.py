"""Make the benchmarks page's figures from the recorded runs, and check them.

Run: ``python -m scripts.bench_page`` from the checkout's root (after a benchmark recorded
a run, e.g. ``python -m scripts.bench ... --record benchmarks/results``); ``--check``
writes nothing and exits with status 1 when a page's figures differ from what the
recorded runs give, or when the page's prose (or the README's part on speed) quotes a
figure that no recorded run has (a test runs it).

Each benchmark owns its part of the page: a module of :data:`SECTIONS` makes, from its
newest recorded runs, its results blocks (the text between ``<!-- results: NAME -->``
and ``<!-- end results: NAME -->`` of ``docs/benchmarks.md``, or of ``README.md``) and
its charts (``common.PageSection``; the module's ``page_options`` adds the options that
say where its runs and charts are). This script only assembles the sections: it rewrites
each block with what its section gives, leaving the prose around them (the authors') as
it is, and draws the charts (not with ``--check``: a drawing differs between matplotlib
versions, its numbers do not).
"""

from __future__ import annotations

import pathlib
import re
import sys
from typing import Sequence

from . import _common as common
from . import bench, bench_long_attention

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: The modules that own a part of the page, in the order their sections are assembled:
#: each has ``page_options(parser, root)`` and ``page_section(args)``.
SECTIONS = (bench, bench_long_attention)


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


def unrecorded_figures(prose: str, known: str) -> list[str]:
    """The figures of ``prose`` (see :data:`FIGURE`) not found in ``known`` (the blocks
    placed and the recorded runs' own text): figures no recorded run backs."""
    return sorted({f for f in FIGURE.findall(prose) if f not in known})


def assemble(sections: Sequence[common.PageSection], page: pathlib.Path,
             readme: pathlib.Path) -> tuple[dict[pathlib.Path, str], dict[str, list[str]]]:
    """The new text of ``page`` and ``readme`` with every section's blocks, and which
    blocks each section placed (by its source). A block of an optional section that a
    page lacks is left out; any other missing block is an error."""
    texts = {page: page.read_text(encoding="utf-8"), readme: readme.read_text(encoding="utf-8")}
    placed: dict[str, list[str]] = {}
    for section in sections:
        for path, blocks in ((page, section.page), (readme, section.readme)):
            for name, content in blocks.items():
                if section.optional and markers(name)[0] not in texts[path]:
                    continue
                texts[path] = replace_block(texts[path], name, content, str(path))
                placed.setdefault(section.source, []).append(name)
    return texts, placed


def check(sections: Sequence[common.PageSection], new: dict[pathlib.Path, str],
          placed: dict[str, list[str]], page: pathlib.Path, readme: pathlib.Path) -> int:
    """1 (saying why) if a page's blocks differ from its sections', or its prose quotes a
    figure that no recorded run has; else 0."""
    stale = False
    for path, text in new.items():
        old = path.read_text(encoding="utf-8")
        if old == text:
            continue
        stale = True
        owners = [s for s in sections if any(block(old, n) != block(text, n)
                                             for n in placed.get(s.source, ()))] or sections
        for section in owners:
            print(f"{path}: its results blocks differ from the {section.runs} recorded runs "
                  f"of {section.source}; run python -m scripts.bench_page", file=sys.stderr)
    known = "\n".join([*(block(new[path], name) for path in (page, readme)
                         for names in placed.values() for name in names),
                       *(s.quotes for s in sections)])
    missing = {page: unrecorded_figures(outside_blocks(new[page]), known),
               readme: unrecorded_figures(outside_blocks(speed_text(new[readme])), known)}
    for path, figures in missing.items():
        if figures:
            print(f"{path}: figures in no recorded run: {', '.join(figures)}", file=sys.stderr)
    return 1 if stale or any(missing.values()) else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = common.script_parser(__doc__, show_defaults=True)
    p.add_argument("--page", default=str(ROOT / "docs" / "benchmarks.md"))
    p.add_argument("--readme", default=str(ROOT / "README.md"))
    for module in SECTIONS:
        module.page_options(p, ROOT)
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a page's blocks differ from the runs'")
    args = p.parse_args(argv)
    try:
        found = [module.page_section(args) for module in SECTIONS]
    except FileNotFoundError as e:
        p.error(str(e))
    sections = [s for s in found if s is not None]
    page, readme = pathlib.Path(args.page), pathlib.Path(args.readme)
    new, placed = assemble(sections, page, readme)
    if args.check:
        return check(sections, new, placed, page, readme)
    for path, text in new.items():
        path.write_text(text, encoding="utf-8")
    charts = []
    for section in sections:
        if section.source not in placed:            # (a page without its part: no chart)
            continue
        for draw, chart in section.charts:
            draw(chart)
            charts.append(str(chart))
    runs = sum(s.runs for s in sections)
    print(f"{runs} runs: wrote {', '.join(str(p) for p in new)} and {', '.join(charts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
