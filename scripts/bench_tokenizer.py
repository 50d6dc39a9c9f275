"""Time per byte of the G2P text front end (:func:`xpseq.g2p.text.normalize`) from 1 kB to
1 MB, on ordinary text and on the runs that make a tokenizer quadratic.

Run: ``python -m scripts.bench_tokenizer [--sizes 1e3,1e4,1e5,1e6] [--repeats 3]
[--record benchmarks/tokenizer]`` (about 6 minutes on one core with the defaults).

A linear tokenizer shows a flat column: the microseconds per byte at 1 MB about those at
1 kB (the report gives their ratio; a quadratic one grows a thousandfold). Each figure is
the median of ``--repeats`` calls (one call at the largest size). Single-threaded Python:
no thread setting applies.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings

from xpseq.g2p.text import normalize

from . import _common as common

#: The inputs: a repeated piece (the adversarial runs a hostile user found; ordinary prose
#: with numbers, dates and addresses).
PIECES = {
    "prose": ("On 3/4/2021 Dr. Smith paid $2.50 for 3 apples at 10:30 am, e-mailed "
              "ann.lee@example.com and read www.example.org/news; it's 50% off! "),
    "1-1-1-": "1-",
    "www.www.": "www.",
    "a@b.a@b.": "a@b.",
    "digits": "1234567890",
    "1/1/1/": "1/",
}


def sample(piece: str, size: int) -> str:
    """``piece`` repeated to ``size`` bytes (UTF-8), cut at a character."""
    text = piece * (size // len(piece.encode("utf-8")) + 1)
    return text.encode("utf-8")[:size].decode("utf-8", "ignore")


def main(argv: list[str] | None = None) -> int:
    parser = common.script_parser(__doc__)
    parser.add_argument("--sizes", default="1e3,1e4,1e5,1e6",
                        help="text sizes in bytes (comma-separated)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inputs", default=",".join(PIECES),
                        help=f"which inputs ({', '.join(PIECES)})")
    parser.add_argument("--record", metavar="DIR",
                        help="also write the results as DIR/<time>-<cpu>-tokenizer.json")
    args = parser.parse_args(argv)
    sizes = [int(float(s)) for s in common.comma_list(args.sizes)]
    names = common.comma_list(args.inputs)
    machine = common.machine()
    versions = common.package_versions(("xpseq", "num2words"))
    print(f"machine: {common.machine_text()}; {common.versions_text(versions)}")
    rows, results = [], {}
    for name in names:
        per_byte = {}
        for size in sizes:
            text = sample(PIECES[name], size)
            repeats = 1 if size >= 10**6 else args.repeats
            times = []
            for _ in range(repeats):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    start = time.perf_counter()
                    normalize(text)
                    times.append(time.perf_counter() - start)
            per_byte[size] = statistics.median(times) / size * 1e6
        results[name] = per_byte
        ratio = per_byte[sizes[-1]] / per_byte[sizes[0]]
        rows.append([name, *(f"{per_byte[s]:.2f}" for s in sizes), f"{ratio:.2f}x"])
        print(common.markdown_row(rows[-1]), flush=True)
    table = common.markdown_table(["input", *(f"µs/byte at {s:,} B" for s in sizes),
                                   f"{sizes[-1]:,} B / {sizes[0]:,} B"], rows)
    print(table)
    if args.record:
        path = common.record(args.record, "tokenizer", {
            "command": common.command_line("bench_tokenizer", argv),
            "machine": machine, "versions": versions, "sizes": sizes,
            "microseconds_per_byte": results, "table": table})
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
