"""The parity contract on an accelerator: both model kinds on a GPU against NumPy float64.

Run: ``python -m scripts.device_check`` on a machine with a GPU (not run in CI: CI has
none). For each model configuration below, the NumPy float64 reference (the loss, its
hand-derived gradient, greedy and beam-search output ids) is computed on the CPU, then the
same parameters and batch are placed on each accelerator backend found
(``backends.get("torch", device="cuda")``, ``backends.get("jax", device="gpu")``) and
compared there: the loss to rtol 1e-12, the gradients (autodiff, and the hand-derived pass
run on the device) to rtol 1e-10, the decoded ids identical; and every result must live on
the chosen device. ``--devices torch=cuda:1,jax=gpu:0`` chooses them; ``--cpu`` runs the
same checks on the CPU devices (what the tests do, since this machine has no GPU).

Prints one line per check and exits with 1 if any failed, 2 if no accelerator was found
(without ``--cpu``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

import numpy as np

from . import _common as common

common.jax_float64()       # float64 checks: JAX's 64-bit mode for the whole process

import array_api_compat as compat  # noqa: E402

from xpseq import backends, models  # noqa: E402
from xpseq.data import make_batches  # noqa: E402
from xpseq.search import SearchOptions, search  # noqa: E402
from xpseq.testing import relative_error  # noqa: E402

LOSS_RTOL, GRAD_RTOL = 1e-12, 1e-10
CONFIGS = {
    "rnn general lstm luong": ("rnn", dict(attention="general", cell="lstm", style="luong")),
    "rnn additive gru bahdanau": ("rnn", dict(attention="additive", cell="gru",
                                              style="bahdanau")),
    "transformer": ("transformer", dict(d_model=16, heads=2, encoder_layers=2, decoder_layers=2,
                                        d_ff=32)),
}
SEARCHES = {"greedy": SearchOptions(), "beam 3": SearchOptions(method="beam", k=3, n_best=2)}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default=None,
                        help="backend=device pairs, e.g. torch=cuda:0,jax=gpu (default: "
                             "each accelerator library's first GPU)")
    parser.add_argument("--cpu", action="store_true",
                        help="run the checks on the CPU devices (a dry run without a GPU)")
    return parser.parse_args(argv)


def accelerators(args: argparse.Namespace) -> dict[str, str]:
    """``{backend: device}`` to check."""
    if args.devices:
        pairs = dict(item.split("=", 1) for item in args.devices.split(","))
        return {name: device for name, device in pairs.items()}
    if args.cpu:
        return {name: "cpu" for name in ("torch", "jax") if name in backends.available()}
    found = {}
    if "torch" in backends.available():
        import torch

        if torch.cuda.is_available():
            found["torch"] = "cuda"
    if "jax" in backends.available():
        import jax

        try:
            jax.devices("gpu")
            found["jax"] = "gpu"
        except RuntimeError:
            pass
    return found


def task(kind: str, options: dict) -> tuple[Any, Any, dict, dict]:
    """A tiny configuration, its float64 initial parameters and one padded batch."""
    model = models.get(kind)
    config = model.Config(src_vocab=13, tgt_vocab=11, **options,
                          **({"embed": 6, "hidden": 8} if kind == "rnn" else {}))
    rng = np.random.default_rng(0)
    pairs = [([int(t) for t in rng.integers(4, 13, n)] + [2],
              [int(t) for t in rng.integers(4, 11, n)]) for n in (5, 3, 4, 2)]
    [batch] = make_batches(pairs, 4, bucket=8)
    batch = {k: batch[k] for k in models.BATCH_KEYS}
    return model, config, model.init_params(config, seed=1), batch


def reference(model: Any, config: Any, params64: dict, batch: dict) -> dict:
    """The NumPy float64 loss, hand-derived gradients and search output ids."""
    be = backends.get("numpy")
    params, data = be.asarray_tree(params64), be.asarray_tree(batch)
    value, grads = model.loss_and_grad(params, config, data)
    out = {"loss": float(value), "grads": be.to_numpy_tree(grads)}
    for name, options in SEARCHES.items():
        out[name] = search(params, config, batch["src"], batch["src_len"], be, options).tokens
    return out


def check(model: Any, config: Any, params64: dict, batch: dict, ref: dict,
          be: backends.Backend) -> list[tuple[str, bool, str]]:
    """``(what, passed, detail)`` for one configuration on one device backend."""
    params, data = be.asarray_tree(params64), be.asarray_tree(batch)
    rows = []
    value = model.loss(params, config, data)
    on_device = compat.device(value) == be.device
    rows.append(("loss on the device", on_device, str(compat.device(value))))
    error = abs(float(be.to_numpy(value)) - ref["loss"]) / abs(ref["loss"])
    rows.append(("loss", error <= LOSS_RTOL, f"rel {error:.1e}"))
    grad_fn = be.jit(be.value_and_grad(lambda p: model.loss(p, config, data)))
    for label, (_, grads) in (("gradients (autodiff)", grad_fn(params)),
                              ("gradients (hand-derived)",
                               model.loss_and_grad(params, config, data))):
        # The key bias of attention moves a whole row of scores: its gradient is zero in
        # theory (rounding, 1e-18), so it is left out, as in the parity tests.
        worst = max(relative_error(be.to_numpy(grads[k]), ref["grads"][k]) for k in grads
                    if not k.endswith(".b_k"))
        rows.append((label, worst <= GRAD_RTOL, f"worst rel {worst:.1e}"))
    for name, options in SEARCHES.items():
        tokens = search(params, config, batch["src"], batch["src_len"], be, options).tokens
        same = tokens.shape == ref[name].shape and bool(np.all(tokens == ref[name]))
        rows.append((f"{name} ids", same, "identical" if same else "differ"))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    targets = accelerators(args)
    if not targets:
        print("device_check: no GPU found (torch.cuda, jax 'gpu'); --cpu runs the checks on "
              "the CPU", file=sys.stderr)
        return 2
    versions = common.package_versions(("xpseq", "numpy", "jax", "jaxlib", "torch"))
    print(f"# {common.machine_text()}; {common.versions_text(versions)}")
    failed = 0
    for label, (kind, options) in CONFIGS.items():
        model, config, params64, batch = task(kind, options)
        ref = reference(model, config, params64, batch)
        for name, device in targets.items():
            be = backends.get(name, device=device)
            for what, passed, detail in check(model, config, params64, batch, ref, be):
                failed += not passed
                print(f"{'ok  ' if passed else 'FAIL'} {label:27s} {name}:{be.device}  "
                      f"{what}: {detail}")
    print(f"{failed} check(s) failed" if failed else "all checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
