"""``g2p`` (only with ``--only g2p``): the shipped G2P model's decoding speed.

The shipped G2P model (``xpseq.g2p``) decoding the 6,304 test words greedily (``--g2p-words``
for fewer), model loaded once, on one core: seconds on numpy, torch and JAX (the second
call; the first, with JAX's compilations, in the detail), target <= 10 s; the ratio is
against the same words decoded one per call on NumPy (``--g2p-loop-words`` of them,
scaled).
"""

from __future__ import annotations

import time

from .context import Context
from .shared import Row


def run(context: Context) -> list[Row]:
    """The shipped G2P model (``xpseq.g2p``) decoding the 6,304 test words greedily, on one
    core, model loaded once: on each backend the whole list (JAX: the second call, and
    the first with its compilations), against the same words one per call on NumPy (on
    ``--g2p-loop-words`` of them, scaled to the whole list)."""
    from xpseq import g2p
    from xpseq.data.cmudict import load_g2p

    args = context.args
    words, _ = load_g2p().references("test")
    words = ["".join(w) for w in words][:args.g2p_words]
    loop_words = words[:args.g2p_loop_words]
    rows, seconds = [], {}
    model = g2p.load(backend="numpy")
    start = time.perf_counter()
    for w in loop_words:
        model.pronounce([w])
    per_word = (time.perf_counter() - start) / len(loop_words)
    for name in ("numpy", "torch", "jax"):
        model = g2p.load(backend=name)
        start = time.perf_counter()
        first = model.pronounce(words)
        seconds[f"{name} first"] = time.perf_counter() - start
        start = time.perf_counter()
        again = model.pronounce(words)
        seconds[name] = time.perf_counter() - start
        assert first == again
        target, met = ("<= 10 s", seconds[name] <= 10.0) if len(words) == 6304 else ("—", None)
        rows.append(Row("g2p", f"shipped model, {len(words)} test words greedy on {name}",
                        seconds[name], "s", per_word * len(words) / seconds[name], target, met,
                        f"ratio: against one word per call on numpy ({1e3 * per_word:.1f} "
                        f"ms a word, {len(loop_words)} words); first call "
                        f"{seconds[name + ' first']:.1f} s"))
    context.record("g2p", {"seconds": seconds, "per_word_numpy": per_word,
                           "words": len(words), "model": g2p.shipped()["model"]})
    return rows
