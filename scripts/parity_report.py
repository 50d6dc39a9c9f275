"""How closely the backends agree: the parity suite's cases, measured instead of asserted.

Run: ``python -m scripts.parity_report`` (about two minutes on 2 cores; no options).

For every case of ``parity_tests/`` it records the worst disagreement with the NumPy float64
reference (forward, eager and under ``jax.jit``), between ``jax.grad`` and torch autograd,
and between each and central finite differences, for the attention core and for the model
in every configuration; and the hand-derived backward passes (``xpseq.core.vjp`` and the
model's ``loss_and_grad``, what NumPy trains with) against ``jax.vjp``, torch autograd and
central differences. It prints a Markdown table: the numbers quoted in the README.
Errors are ``max|a - b| / max|b|`` per output (``relative_error``) and the largest
elementwise ``|a - b| / |b|`` over entries with ``|b| > 1e-13``. The gradient with respect
to the key bias ``b_k`` of multi-head attention is zero in theory (it shifts a whole row of
scores) and is left out, as in the tests.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import types

import numpy as np

from xpseq import backends
from xpseq.testing import relative_error

from . import _common as common

#: The parity suite. Its folder is no package: its modules import one another by their
#: bare names (``from parity_helpers import ...``), as pytest imports them.
PARITY = pathlib.Path(__file__).resolve().parents[1] / "parity_tests"


def parity_module(name: str) -> types.ModuleType:
    """``parity_tests/<name>.py``, imported from its file under its bare name (as the
    suite's own modules import it)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, PARITY / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


for _helper in ("parity_helpers", "rnn_cases", "vjp_cases"):   # what the tests import
    parity_module(_helper)
F, G, MT, V = (parity_module(name) for name in
               ("test_forward", "test_gradients", "test_models", "test_vjp"))

common.jax_float64()       # a float64 report: JAX's 64-bit mode for the whole process


def elementwise(actual: np.ndarray, desired: np.ndarray) -> float:
    actual, desired = np.asarray(actual, float), np.asarray(desired, float)
    finite = np.isfinite(desired)
    big = finite & (np.abs(desired) > 1e-13)
    if not big.any():
        return 0.0
    return float(np.max(np.abs(actual[big] - desired[big]) / np.abs(desired[big])))


class Worst:
    """The largest error seen so far, with the case it came from."""

    def __init__(self) -> None:
        self.rel, self.elem, self.where = 0.0, 0.0, "-"

    def add(self, actual, desired, where: str) -> None:
        finite = np.isfinite(np.asarray(desired, float))
        rel = relative_error(np.asarray(actual, float)[finite], np.asarray(desired, float)[finite])
        if rel > self.rel:
            self.rel, self.where = rel, where
        self.elem = max(self.elem, elementwise(actual, desired))

    def row(self, label: str, tolerance: str, elementwise: bool = True) -> str:
        elem = f"{self.elem:.1e}" if elementwise else "-"
        return common.markdown_row([label, f"{self.rel:.1e}", elem, tolerance, self.where])


def main(argv: list[str] | None = None) -> int:
    common.script_parser(__doc__).parse_args(argv)           # --help; there are no options
    names = [n for n in ("jax", "torch", "array_api_strict") if n in backends.available()]
    rows = []
    for name in names + (["jax.jit"] if "jax" in names else []):
        be = backends.get(name.split(".")[0])
        worst = Worst()
        for case in F.CASES:
            out = case.call_jit(be) if name == "jax.jit" else case.call(be)
            for o, r in zip(out, F.reference(case.id)):
                if r.dtype != bool:
                    worst.add(be.to_numpy(o), r, case.id)
        rows.append(worst.row(f"forward, {name} vs numpy ({len(F.CASES)} cases)",
                              "rtol 1e-12, atol 1e-14"))
    if {"jax", "torch"} <= set(names):
        pair, fd = Worst(), {"jax": Worst(), "torch": Worst()}
        for cid in G.IDS:
            _, gj = G.autodiff("jax", cid)
            _, gt = G.autodiff("torch", cid)
            _, gf = G.fd_grads(cid)
            for (leaf, a), (_, b), (_, f) in zip(G.leaves(gj), G.leaves(gt), G.leaves(gf)):
                if leaf.endswith("b_k"):   # exactly zero in theory, see test_gradients.py
                    continue
                pair.add(a, b, f"{cid}: {leaf}")
                fd["jax"].add(a, f, f"{cid}: {leaf}")
                fd["torch"].add(b, f, f"{cid}: {leaf}")
        rows.append(pair.row(f"gradients, jax.grad vs torch autograd ({len(G.IDS)} cases)",
                             "rtol 1e-10"))
        for name, worst in fd.items():
            # Elementwise errors of finite differences on near-zero entries mean nothing.
            rows.append(worst.row(f"gradients, {name} vs central differences",
                                  "relative error 1e-7", elementwise=False))
    model_ids = MT.IDS + MT.DROPOUT_IDS
    for name in names:
        be = backends.get(name)
        worst = Worst()
        for cid in model_ids:
            ref, out = MT.reference(cid), MT.evaluate(be, cid)
            worst.add(out.logits, ref.logits, f"{cid}: logits")
            worst.add(np.asarray(out.loss), np.asarray(ref.loss), f"{cid}: loss")
            if ref.weights is not None:
                worst.add(out.weights, ref.weights, f"{cid}: weights")
        jitted = " (jitted)" if name == "jax" else ""
        rows.append(worst.row(f"model{jitted}, {name} vs numpy ({len(model_ids)} configs)",
                              "rtol 1e-12, atol 1e-14"))
    if {"jax", "torch"} <= set(names):
        pair = Worst()
        for cid in model_ids:
            gj, gt = MT.autodiff("jax", cid).grads, MT.autodiff("torch", cid).grads
            for key in gt:
                pair.add(gj[key], gt[key], f"{cid}: {key}")
        rows.append(pair.row(f"model gradients, jax vs torch ({len(model_ids)} configs)",
                             "rtol 1e-10"))
    if {"jax", "torch"} <= set(names):
        worst = {"jax.vjp": Worst(), "torch autograd": Worst(), "central differences": Worst()}
        for case in V.CASES:
            _, hand = V.numpy_rule(case.id)
            jax_ref = {k: np.asarray(v) for k, v in V.jax_results(case.id)[0].items()}
            refs = {"jax.vjp": jax_ref, "torch autograd": V.torch_vjp(case),
                    "central differences": V.fd_grads(case)}
            for label, ref in refs.items():
                for key in hand:
                    worst[label].add(hand[key], np.asarray(ref[key]), f"{case.id}: {key}")
        for label, w in worst.items():
            fd = label == "central differences"
            rows.append(w.row(f"op rules by hand (numpy) vs {label} ({len(V.CASES)} cases)",
                              "relative error 1e-7" if fd else "rtol 1e-10", elementwise=not fd))
        for name in ("jax", "torch"):
            w = Worst()
            for cid in model_ids:
                hand, auto = MT.autodiff("numpy", cid).grads, MT.autodiff(name, cid).grads
                for key in hand:
                    w.add(hand[key], auto[key], f"{cid}: {key}")
            rows.append(w.row(f"model gradients by hand (numpy) vs {name} "
                              f"({len(model_ids)} configs)", "rtol 1e-10"))
        w = Worst()
        for cid in MT.FD_CONFIGS:
            hand = MT.evaluate(MT.NP, cid, params=MT.fd_params(cid), grads=True).grads
            for key, ref in MT.fd_grads(cid).items():
                w.add(hand[key], ref, f"{cid}: {key}")
        rows.append(w.row(f"model gradients by hand vs central differences "
                          f"({len(MT.FD_CONFIGS)} configs, every element)", "relative error 1e-7",
                          elementwise=False))
    print(common.markdown_table(["comparison", "worst relative error", "worst elementwise",
                                 "contract", "worst case"]))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
