"""Lesson 11: explicit PRNG keys vs global generators.

Reproducibility of JAX keys and NumPy generators, which are values passed by hand, against
torch's global generator, which any call may advance.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from xpseq import backends
from xpseq.tour._common import (
    NONE,
    Cells,
    Part,
    Row,
    format_fact,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["lesson_prng", "numpy_draws", "jax_draws", "torch_draws", "dropout_twice"]


# ------------------------------------------------------------------------ the code


def numpy_draws() -> dict[str, Any]:
    """Three normals from ``default_rng(0)``: twice reseeded, twice from one generator, after
    an unrelated generator drew, and from two spawned children."""
    reseeded = [np.random.default_rng(0).normal(size=3) for _ in range(2)]
    rng = np.random.default_rng(0)
    first, second = rng.normal(size=3), rng.normal(size=3)
    rng = np.random.default_rng(0)
    np.random.default_rng().random(4)         # unrelated code draws from its own generator
    disturbed = rng.normal(size=3)
    children = [c.normal(size=3) for c in np.random.default_rng(0).spawn(2)]
    return {"reseeded": reseeded, "first": first, "second": second, "disturbed": disturbed,
            "children": children}


def jax_draws() -> dict[str, Any]:
    """Three normals from ``jax.random.key(0)``: twice from a fresh key, twice from one key,
    after unrelated code drew with its own key, and from the two halves of ``split``."""
    import jax

    random = jax.random
    normal = jax.jit(random.normal, static_argnums=1)   # one compile, not op by op
    reseeded = [normal(random.key(0), (3,)) for _ in range(2)]
    key = random.key(0)
    first, second = normal(key, (3,)), normal(key, (3,))
    normal(random.key(1), (4,))               # unrelated code has its own key
    disturbed = normal(key, (3,))
    children = [normal(k, (3,)) for k in random.split(key, 2)]
    return {"reseeded": reseeded, "first": first, "second": second, "disturbed": disturbed,
            "children": children}


def torch_draws() -> dict[str, Any]:
    """Three normals after ``torch.manual_seed(0)``: twice reseeded, twice in a row, and
    after an unrelated dropout drew from the same global generator."""
    import torch

    with torch.random.fork_rng(devices=[]):   # leave the caller's global state alone
        reseeded = []
        for _ in range(2):
            torch.manual_seed(0)
            reseeded.append(torch.randn(3))
        torch.manual_seed(0)
        first, second = torch.randn(3), torch.randn(3)
        torch.manual_seed(0)
        torch.nn.functional.dropout(torch.ones(4), 0.5)   # unrelated code, same generator
        disturbed = torch.randn(3)
    return {"reseeded": reseeded, "first": first, "second": second, "disturbed": disturbed}


def dropout_twice(name: str) -> list[np.ndarray]:
    """xpseq's ``backend.dropout_keep(seed 0, step 3)`` twice on backend ``name``: a mask
    that is a function of the seed and the step only."""
    be = backends.get(name)
    return [be.to_numpy(be.dropout_keep(0, 3, (8,), 0.5)) for _ in range(2)]


# ------------------------------------------------------------------------ the table


@register_lesson(11, "Explicit PRNG keys vs global generators",
                 code=(numpy_draws, jax_draws, torch_draws, dropout_twice))
def lesson_prng() -> tuple[str, list[Row], dict[str, Any]]:
    """Reproducibility of explicit keys and generators vs torch's global generator."""
    facts: dict[str, Any] = {}

    def same(a: Any, b: Any) -> bool:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))

    def yes_no(flag: bool) -> str:
        return "same" if flag else "different"

    def part(name: str, draws: Callable[[], dict[str, Any]], split: str,
             again: str = "", unrelated: str = "") -> Part:
        def fill(facts: dict[str, Any]) -> Cells:
            d = draws()
            facts[f"{name}_reseed_same"] = reseed = same(*d["reseeded"])
            facts[f"{name}_consecutive_same"] = consecutive = same(d["first"], d["second"])
            facts[f"{name}_unrelated_same"] = kept = same(d["disturbed"], d["first"])
            facts[f"{name}_dropout_keep_repeatable"] = dropout = same(*dropout_twice(name))
            cells = {"reseed": yes_no(reseed), "again": yes_no(consecutive) + again,
                     "unrelated": yes_no(kept) + unrelated, "split": NONE,
                     "dropout": yes_no(dropout)}
            if "children" in d:
                facts[f"{name}_split_same"] = split_same = same(*d["children"])
                cells["split"] = f"{split}: {yes_no(split_same)}"
            if name == "jax":
                facts["jax_child_equals_parent"] = same(d["children"][0], d["first"])
            return cells
        return fill

    numpy_part = part("numpy", numpy_draws, "spawn(2)")
    jax_part = part("jax", jax_draws, "split(key, 2)", again=" (a key is a value)")
    torch_part = part("torch", torch_draws, "", unrelated=" (global state)")
    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [
        ("reseed", "seed 0 twice, draw 3 normals: same numbers?"),
        ("again", "two draws without reseeding (numpy: one default_rng)"),
        ("unrelated", "unrelated random call in between: first draw unchanged?"),
        ("split", "independent child streams (torch: none; pass a Generator by hand)"),
        ("dropout", "xpseq backend.dropout_keep(seed 0, step 3) twice"),
    ])
    explanation = (
        f"A JAX key is a value, so the same key always gives the same numbers (two draws: "
        f"{format_fact(facts, 'jax_consecutive_same', yes_no)}) and nothing else can shift it, "
        f"NumPy's default_rng is an explicit generator object passed around by hand, and "
        f"torch.manual_seed seeds one global generator that any other call may advance "
        f"(an unrelated dropout in between: "
        f"{format_fact(facts, 'torch_unrelated_same', yes_no)} numbers)."
    )
    return explanation, rows, facts
