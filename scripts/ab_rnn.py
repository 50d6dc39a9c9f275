"""A/B of the RNN's hand-derived training step: the working tree against a git revision,
with Keras 3 on JAX as the yardstick, in one process.

A change to ``xpseq/models/rnn`` (its backward pass above all) must not slow training. This
loads the RNN model of ``--before`` (a git revision; a single module or a package) beside
the working tree's, builds for each the training step xpseq runs on JAX with
``gradients="hand-derived"`` (the model's loops with their hand-derived ``custom_vjp``,
JAX's autodiff for the rest, Adam, one ``jax.jit``), checks both give the same loss and
gradients in float64, and times them in turns with the Keras step of ``bench.py --only
peers`` (``scripts/native_keras.py``) on the same batches: the bench's toy task, sizes and
float32 (``--embed``/``--hidden``/``--batch``/``--steps``). It reports each step's
tokens per second (median of ``--repeats``) and its ratio to Keras::

    python -m scripts.ab_rnn --before HEAD~1 --record benchmarks/ab-rnn

The revision's RNN runs on the working tree's ``xpseq.core``: a revision whose RNN calls a
core function removed since cannot be loaded (the recorded A/B against 4982747 ran before
``core.tree.locate`` went).
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from . import _common as common
from . import bench
import numpy as np
from .benchmarks.context import Context
from .benchmarks.peers import Kind, keras_model, warm
from .benchmarks.shared import float32_on, on_backend

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_before(revision: str, folder: pathlib.Path) -> Any:
    """The RNN model module of ``revision`` as ``xpseq.models._rnn_before`` (it imports the
    working tree's ``xpseq.core`` and ``xpseq.models.protocol``)."""
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", revision, "xpseq/models/"],
                             cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    files = [f for f in listing if f == "xpseq/models/rnn.py" or f.startswith("xpseq/models/rnn/")]
    if not files:
        raise SystemExit(f"ab_rnn: {revision} has no xpseq/models/rnn")
    package = folder / "_rnn_before"
    for f in files:
        text = subprocess.run(["git", "show", f"{revision}:{f}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
        rel = pathlib.Path(f).relative_to("xpseq/models")
        target = folder / "_rnn_before.py" if rel.suffix == ".py" and rel.parts == ("rnn.py",) \
            else package / pathlib.Path(*rel.parts[1:])
        target.parent.mkdir(parents=True, exist_ok=True)
        # A package's own relative imports of the protocol reach one level further up.
        target.write_text(text if target.parent == folder else
                          text.replace("from ..protocol", "from xpseq.models.protocol"))
    name = "xpseq.models._rnn_before"
    location = folder / "_rnn_before.py" if (folder / "_rnn_before.py").exists() \
        else package / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        name, location, submodule_search_locations=None if location.name != "__init__.py"
        else [str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def jax_step(module: Any, config: Any, optimizer: Any, backend: Any) -> Any:
    """xpseq's hand-derived JAX training step for ``module``'s model, as
    ``xpseq.train.make_train_step`` builds it (no dropout, no clipping)."""
    import jax

    xp = backend.xp

    def loss(params: dict, batch: dict) -> Any:
        return module.MODEL.kernels.loss(params, config, batch, None, scan=backend.scan,
                                         custom_vjp=backend.custom_vjp, xp=xp)

    @jax.jit
    def step(params: dict, opt_state: dict, batch: dict) -> tuple:
        value, grads = jax.value_and_grad(loss)(params, batch)
        params, opt_state = optimizer.update(grads, opt_state, params)
        return params, opt_state, value

    step.loss = loss
    return step


def check_same(before: Any, after: Any, config_b: Any, config_a: Any, params: dict,
               batch: dict) -> float:
    """The largest difference of the two models' float64 gradients (JAX, x64)."""
    import jax

    from xpseq import backends

    with jax.enable_x64(True):
        be = backends.get("jax")
        p = {k: jax.numpy.asarray(v) for k, v in params.items()}
        b = on_backend(be, batch)
        g_b = jax.grad(jax_step(before, config_b, None, be).loss)(p, b)
        g_a = jax.grad(jax_step(after, config_a, None, be).loss)(p, b)
        return max(float(np.max(np.abs(np.asarray(g_b[k]) - np.asarray(g_a[k])))) for k in p)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--before", required=True, help="the git revision to compare against")
    p.add_argument("--record", metavar="DIR", default=None, help="also keep the result in DIR")
    ours, rest = p.parse_known_args(argv)
    args = bench.parse_args(["--only", "peers", *rest])
    context = Context(args, common.pin_threads(args.threads, args.pin))
    from . import native_keras

    from xpseq.core.optim import adam
    from xpseq.models import rnn as after

    before = load_before(ours.before, pathlib.Path(tempfile.mkdtemp(prefix="ab_rnn-")))
    config_a = context.config
    config_b = before.Seq2SeqConfig(**config_a.to_dict())
    diff = check_same(before, after, config_b, config_a, context.init64, context.timed[0])
    if diff > 1e-10:
        raise SystemExit(f"ab_rnn: the gradients differ by {diff:.2e} (float64)")

    be = context.jax
    optimizer = adam(args.lr)
    batches = [on_backend(be, b) for b in context.timed]

    def runner(step: Any) -> Any:
        state = {"params": float32_on(be, context.init32)}
        state["opt"] = optimizer.init(state["params"])

        def run() -> None:
            for batch in batches:
                state["params"], state["opt"], value = step(state["params"], state["opt"],
                                                            batch)
            value.block_until_ready()
        run()                                               # compile every batch shape
        return run

    impls = {"before": runner(jax_step(before, config_b, optimizer, be)),
             "after": runner(jax_step(after, config_a, optimizer, be))}
    kind = Kind("rnn", None, config_a, context.init64, context.init32, context.timed, "", "")
    keras_step = native_keras.make_step(keras_model(kind, context.init32), args.lr)
    keras_batches = [native_keras.batch_arrays(b) for b in context.timed]
    warm(keras_step, keras_batches)

    def keras_run() -> None:
        for batch in keras_batches:
            loss = keras_step(batch)
        np.asarray(loss)
    impls["keras-jax"] = keras_run
    times = common.take_turns(impls, args.repeats)
    tokens = context.tokens(context.timed)
    tps = {n: tokens / statistics.median(t) for n, t in times.items()}
    result = {"before": ours.before, "gradient_difference_f64": diff, "threads": args.threads,
              "sizes": {"embed": args.embed, "hidden": args.hidden, "batch": args.batch,
                        "steps": args.steps}, "times": times, "tokens_per_s": tps,
              "vs_keras": {n: tps[n] / tps["keras-jax"] for n in ("before", "after")},
              "machine": common.machine()}
    for n in ("before", "after", "keras-jax"):
        ratio = "" if n == "keras-jax" else f"  {result['vs_keras'][n]:.2f}x Keras"
        print(f"{n:>10}: {tps[n]:9.0f} tokens/s{ratio}")
    if ours.record:
        print("recorded", common.record(ours.record, "ab-rnn", result))
    return result


if __name__ == "__main__":
    main()
