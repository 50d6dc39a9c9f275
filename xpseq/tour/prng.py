"""Lesson 11: explicit PRNG keys vs global generators.

Reproducibility of JAX keys and NumPy generators, which are values passed by hand, against
torch's global generator, which any call may advance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xpseq import backends
from xpseq.tour._common import NONE, Cells, Row, _columns, _fact, _jax, _lesson, _table, _torch

__all__ = ["lesson_prng"]


@_lesson(11, "Explicit PRNG keys vs global generators")
def lesson_prng() -> tuple[str, list[Row], dict[str, Any]]:
    """Reproducibility of explicit keys and generators vs torch's global generator."""
    facts: dict[str, Any] = {}

    def same(a: Any, b: Any) -> bool:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))

    def yes_no(flag: bool) -> str:
        return "same" if flag else "different"

    def dropout_cell(name: str, facts: dict[str, Any]) -> str:
        be = backends.get(name)
        masks = [be.to_numpy(be.dropout_keep(0, 3, (8,), 0.5)) for _ in range(2)]
        facts[f"{name}_dropout_keep_repeatable"] = same(*masks)
        return yes_no(same(*masks))

    def numpy_part(facts: dict[str, Any]) -> Cells:
        reseeded = [np.random.default_rng(0).normal(size=3) for _ in range(2)]
        rng = np.random.default_rng(0)
        first, second = rng.normal(size=3), rng.normal(size=3)
        rng = np.random.default_rng(0)
        np.random.default_rng().random(4)         # unrelated code draws from its own generator
        disturbed = rng.normal(size=3)
        children = [c.normal(size=3) for c in np.random.default_rng(0).spawn(2)]
        facts.update(numpy_reseed_same=same(*reseeded), numpy_consecutive_same=same(first, second),
                     numpy_unrelated_same=same(disturbed, first),
                     numpy_split_same=same(*children))
        return {"reseed": yes_no(same(*reseeded)), "again": yes_no(same(first, second)),
                "unrelated": yes_no(same(disturbed, first)),
                "split": "spawn(2): " + yes_no(same(*children)),
                "dropout": dropout_cell("numpy", facts)}

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, _ = _jax()
        random = jax.random
        normal = jax.jit(random.normal, static_argnums=1)   # one compile, not op by op
        reseeded = [normal(random.key(0), (3,)) for _ in range(2)]
        key = random.key(0)
        first, second = normal(key, (3,)), normal(key, (3,))
        normal(random.key(1), (4,))               # unrelated code has its own key
        disturbed = normal(key, (3,))
        children = [normal(k, (3,)) for k in random.split(key, 2)]
        facts.update(jax_reseed_same=same(*reseeded), jax_consecutive_same=same(first, second),
                     jax_unrelated_same=same(disturbed, first), jax_split_same=same(*children),
                     jax_child_equals_parent=same(children[0], first))
        return {"reseed": yes_no(same(*reseeded)),
                "again": yes_no(same(first, second)) + " (a key is a value)",
                "unrelated": yes_no(same(disturbed, first)),
                "split": "split(key, 2): " + yes_no(same(*children)),
                "dropout": dropout_cell("jax", facts)}

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
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
        facts.update(torch_reseed_same=same(*reseeded),
                     torch_consecutive_same=same(first, second),
                     torch_unrelated_same=same(disturbed, first))
        return {"reseed": yes_no(same(*reseeded)), "again": yes_no(same(first, second)),
                "unrelated": yes_no(same(disturbed, first)) + " (global state)",
                "split": NONE, "dropout": dropout_cell("torch", facts)}

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("reseed", "seed 0 twice, draw 3 normals: same numbers?"),
        ("again", "two draws without reseeding (numpy: one default_rng)"),
        ("unrelated", "unrelated random call in between: first draw unchanged?"),
        ("split", "independent child streams (torch: none; pass a Generator by hand)"),
        ("dropout", "xpseq backend.dropout_keep(seed 0, step 3) twice"),
    ])
    explanation = (
        f"A JAX key is a value, so the same key always gives the same numbers (two draws: "
        f"{_fact(facts, 'jax_consecutive_same', yes_no)}) and nothing else can shift it, "
        f"NumPy's default_rng is an explicit generator object passed around by hand, and "
        f"torch.manual_seed seeds one global generator that any other call may advance "
        f"(an unrelated dropout in between: "
        f"{_fact(facts, 'torch_unrelated_same', yes_no)} numbers)."
    )
    return explanation, rows, facts
