"""``peers`` (only with ``--only peers``): xpseq against the strongest peers on each engine.

Both model kinds at the benchmark's sizes (the RNN at ``--embed``/``--hidden``/``--batch`` on
the toy task, the Transformer at ``--transformer``), float32, Adam at ``--lr``, no dropout,
the same initial parameters and the same ``--steps`` batches; training throughput (target
tokens per second, the median of ``--repeats`` repeats taken in turns) of:

* xpseq on JAX (jitted; JAX's autodiff, and ``gradients="hand-derived"``) and on PyTorch
  (eager; autograd, and the hand-derived backward), and both PyTorch steps compiled
  (``xpseq.backends.get("torch", compile=True)``; with the hand-derived backward, the
  loss and its backward are one graph);
* ``scripts/native_torch.py`` (the models as a PyTorch user writes them, ``torch.optim.Adam``)
  eager, and under ``torch.compile``: the model's loss compiled (``mode=None``,
  ``dynamic=False``; its backward by AOTAutograd; see :func:`compiled_native_step` for
  what was measured against the alternatives). Its compile time (the first call on each
  batch shape minus a second call on it, with Inductor's on-disk caches off, so a cold
  compile) is reported apart, with the graph breaks and the graphs compiled
  (``torch._dynamo.utils.counters``, counted over the warm-up of every batch shape, and
  again over the timed repeats, where nothing should recompile; ``--no-torch-compile``
  leaves it out, and xpseq's compiled torch step with it);
* ``scripts/native_keras.py``: the models in Keras 3 on JAX, trained by the stateless API
  (``model.stateless_call``, ``jax.value_and_grad``, ``optimizer.stateless_apply``) under one
  ``jax.jit``, ``keras.optimizers.Adam``; and the same models trained by ``model.fit``
  (``native_keras.make_fit``: ``compile`` with the same Adam and loss, ``jit_compile`` at its
  default, one epoch over the batches per repeat), as most Keras users train;
* the Transformer only: ``scripts/native_flax.py``, a ``flax.linen`` model with
  ``optax.adam``, jitted.
* with ``--peers-numpy``, xpseq on NumPy (its hand-derived backward), for reference.

Each xpseq step names its gradient path (``gradients="autodiff"`` or ``"hand-derived"``),
and a row per engine gives the hand-derived step's throughput against autodiff's: the
ratios that choose the default path (``xpseq.train.paths``, recorded under
``benchmarks/gradient-paths/``).

Before any timing each peer's loss on the first batch is checked against
``xpseq.models.<kind>.loss`` in float64 (native PyTorch to 1e-10, Flax to 1e-10 inside
``jax.enable_x64(True)``); Keras cannot compute in float64 (see ``native_keras``), so its
float32 loss is checked against xpseq's float64 loss to 1e-5 relative, as is the compiled
native step's first (float32) loss. One float64 Adam step of native PyTorch and of Flax
is checked against xpseq's (``xpseq.core.optim.adam`` on xpseq's float64 gradients), the
largest parameter difference to :data:`STEP_TOLERANCE`. Keras's float32 step is checked in
two parts (:func:`check_keras`): its gradients against xpseq's float64 ones, relative to
the largest (:data:`GRAD_TOLERANCE_32`), and its step against xpseq's Adam taken with
Keras's gradients at the epsilon that gives Keras's first step (Keras adds ε before the
second moment's bias correction, ``native_keras.matching_adam_eps``), to
:data:`STEP_TOLERANCE`. The compiled native step is the eager module compiled; its test
compares its step with the eager one. A failed check ends the benchmark (``SystemExit``)
with the difference.

The Keras and Flax steps' compile times are reported the same way (first call minus a
second call on each batch shape; XLA's compilation, no cache; for ``fit``, its first epoch
minus its second). ``fit``'s loss on one batch is checked like the custom step's, and its
parameters after that step against the custom step's.

Targets, for each kind: the best xpseq-JAX >= 1.2x the fastest JAX peer (Keras, Flax), and
>= 1.4x Keras's ``fit``; the
best xpseq-torch >= 1.0x native ``torch.compile``; the best xpseq of any engine >= 1.0x
the fastest peer of any kind. Each row's detail gives the fastest/slowest repeat and the
CPU seconds per wall second.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Callable

from .. import _common as common
import numpy as np

from .context import Context
from .shared import (
    HAND,
    HAND_JAX,
    HAND_T,
    HAND_T_TORCH,
    KEYS,
    Row,
    at_least,
    float32_on,
    native_loop,
    on_backend,
    to_torch,
    xpseq_loop,
)

#: The largest parameter difference allowed after one Adam step from the same parameters
#: and gradients (a thousandth of a step at the default rate 1e-3).
STEP_TOLERANCE = 1e-6
#: Float64 loss checks (native PyTorch, Flax), absolute.
LOSS_TOLERANCE_64 = 1e-10
#: Float32 loss checks (Keras, the compiled native step) against xpseq's float64 loss,
#: relative.
LOSS_TOLERANCE_32 = 1e-5
#: Keras's float32 gradients against xpseq's float64 ones: the largest difference relative
#: to the largest gradient.
GRAD_TOLERANCE_32 = 1e-5
NATIVE, COMPILED, KERAS, FLAX = ("native-torch", "native-torch, torch.compile",
                                 "keras-jax", "flax-jax")
#: Keras 3 trained by ``model.fit``, as most Keras users train (``KERAS`` is the faster
#: custom loop the Keras documentation gives for JAX).
KERAS_FIT = "keras-jax, fit"
XPSEQ_COMPILED = "xpseq-torch, torch.compile"
XPSEQ_COMPILED_HAND = "xpseq-torch, hand-derived backward, torch.compile"
XPSEQ_NUMPY = "xpseq-numpy, hand-derived backward"
#: Each engine's two gradient paths, for the hand-derived / autodiff ratios that
#: ``xpseq.train.paths`` records: (engine, autodiff label, hand-derived label).
PATH_PAIRS = (("jax", "xpseq-jax", None), ("torch", "xpseq-torch", None),
              ("torch.compile", XPSEQ_COMPILED, XPSEQ_COMPILED_HAND))


@dataclasses.dataclass(frozen=True)
class Kind:
    """One model kind as the section runs it: ``name`` (``"rnn"`` or ``"transformer"``),
    its xpseq model, config, initial parameters (NumPy float64 and float32), the timed
    batches (NumPy) and the labels of xpseq's hand-derived steps on JAX and torch."""

    name: str
    model: Any
    config: Any
    init64: dict
    init32: dict
    timed: list
    hand_jax: str
    hand_torch: str


def kinds(context: Context) -> list[Kind]:
    """The RNN at the bench's ``--embed``/``--hidden``/``--batch`` sizes and the Transformer
    at ``--transformer``, as the ``train`` and ``transformer`` sections run them."""
    from xpseq import models

    t = context.transformer
    return [Kind("rnn", models.get("rnn"), context.config, context.init64, context.init32,
                 context.timed, HAND_JAX, HAND),
            Kind("transformer", models.get("transformer"), t.config, t.init64, t.init32,
                 t.timed, HAND_T, HAND_T_TORCH)]


# ------------------------------------------------------------------------- the checks


def reference_steps(kind: Kind, batch: dict, lr: float) -> dict:
    """xpseq's float64 ``loss`` and ``grads`` on ``batch`` (NumPy, the hand-derived
    gradients) and ``after``, the parameters after one ``xpseq.core.optim.adam(lr)`` step
    from ``kind.init64``."""
    value, grads = kind.model.loss_and_grad(kind.init64, kind.config, batch)
    return {"loss": float(value), "grads": grads,
            "after": adam_step(kind.init64, grads, lr, 1e-8)}


def adam_step(params: dict, grads: dict, lr: float, eps: float) -> dict:
    """``params`` after one ``xpseq.core.optim.adam(lr, eps=eps)`` step with ``grads``
    (NumPy float64)."""
    from xpseq.core.optim import adam

    params = {n: np.asarray(p, dtype=np.float64) for n, p in params.items()}
    grads = {n: np.asarray(grads[n], dtype=np.float64) for n in params}
    opt = adam(lr, eps=eps)
    return opt.update(grads, opt.init(params), params)[0]


def largest_difference(a: dict, b: dict) -> float:
    """The largest ``|a[name] − b[name]|`` over ``a``'s names."""
    return max(float(np.max(np.abs(np.asarray(a[n], dtype=np.float64) - b[n]))) for n in a)


def native_model(context: Context, kind: Kind, params: dict, dtype: Any) -> Any:
    native = context.native
    if kind.name == "rnn":
        return native.NativeSeq2Seq.from_xpseq(params, kind.config, dtype)
    return native.NativeTransformer.from_xpseq(params, kind.config, dtype)


def native_values(model: Any) -> dict[str, np.ndarray]:
    """A native model's parameters under xpseq's names, NumPy."""
    if hasattr(model, "xpseq_parameters"):
        return {n: p.detach().numpy() for n, p in model.xpseq_parameters().items()}
    return {n: (t if rows is None else t[rows]).detach().numpy()
            for n, (t, rows) in model.named_xpseq().items()}


def keras_model(kind: Kind, params: dict) -> Any:
    from .. import native_keras

    cls = native_keras.KerasSeq2Seq if kind.name == "rnn" else native_keras.KerasTransformer
    return cls.from_xpseq(params, kind.config)


def make_flax_step(kind: Kind, lr: float) -> Callable[[dict], Any]:
    """The Flax peer's jitted training step (``native_flax.make_step``) of the Transformer
    ``kind``, from xpseq's initial parameters."""
    from .. import native_flax

    return native_flax.make_step(native_flax.FlaxTransformer.from_config(kind.config),
                                 native_flax.params_from_xpseq(kind.init32, kind.config),
                                 kind.config.label_smoothing, lr)


def check_peers(context: Context, kind: Kind) -> dict[str, dict]:
    """Each peer's loss on the first timed batch against xpseq's, and one Adam step's
    largest parameter difference: ``{peer: {"loss_diff", "tolerance", "relative",
    "step_diff", "reference"}}``; Keras's also has ``"grad_diff"`` (see
    :func:`check_keras`). The compiled native step is checked as it warms up, in
    :func:`measure`. Each peer is made here from the initial parameters, apart from the
    one that is timed."""
    import jax
    import torch

    lr = context.args.lr
    batch = {k: kind.timed[0][k] for k in KEYS}
    ref = reference_steps(kind, batch, lr)
    out: dict[str, dict] = {}

    model = native_model(context, kind, kind.init64, torch.float64)
    loss = float(model.loss(to_torch(batch)).detach())
    context.native.make_native_step(model, lr)(to_torch(batch))
    out[NATIVE] = {"loss_diff": abs(loss - ref["loss"]), "tolerance": LOSS_TOLERANCE_64,
                   "relative": False,
                   "step_diff": largest_difference(native_values(model), ref["after"])}

    out[KERAS] = check_keras(kind, batch, ref, lr)
    out[KERAS_FIT] = check_keras_fit(kind, batch, ref, lr)

    if kind.name == "transformer":
        import jax.numpy as jnp
        from .. import native_flax

        with jax.enable_x64(True):
            flax_model = native_flax.FlaxTransformer.from_config(kind.config, jnp.float64)
            variables = native_flax.params_from_xpseq(kind.init64, kind.config, jnp.float64)
            step = native_flax.make_step(flax_model, variables,
                                         kind.config.label_smoothing, lr)
            loss = float(step(native_flax.batch_arrays(batch)))
            stepped = native_flax.xpseq_params(step.state["variables"], kind.config)
        out[FLAX] = {"loss_diff": abs(loss - ref["loss"]), "tolerance": LOSS_TOLERANCE_64,
                     "relative": False, "step_diff": largest_difference(stepped, ref["after"])}
    for check in out.values():
        check["reference"] = ref["loss"]
    return out


def check_keras(kind: Kind, batch: dict, ref: dict, lr: float) -> dict:
    """Keras's float32 loss against xpseq's float64 ``ref`` (:func:`reference_steps`),
    relative; its float32 gradients against xpseq's (``grad_diff``, the largest difference
    relative to the largest gradient); and its Adam step against xpseq's Adam taken with
    Keras's gradients at the epsilon of Keras's first step (``step_diff``).

    Keras's gradients are those its jitted step took (read from Adam's first moment by
    :func:`native_keras.first_step_gradients`). The step is compared on them because Adam's
    first step is ``lr · g / (|g| + ε)``: where a gradient is zero but for rounding (an
    attention's key bias always is: adding ``q·b_k`` to a row's scores leaves its softmax as
    it was), a float32 rounding error ``δ`` of it moves the step by up to ``lr · δ / ε``, far
    above any float32 tolerance; the gradients themselves are compared relative to their
    scale."""
    from .. import native_keras

    step = native_keras.make_step(keras_model(kind, kind.init32), lr)
    model, eps = step.model, native_keras.matching_adam_eps(1e-8)
    start = model.xpseq_values(step.state["trainable"])
    loss = float(step(native_keras.batch_arrays(batch)))     # the loss before the update
    stepped = model.xpseq_values(step.state["trainable"])
    grads = native_keras.first_step_gradients(step)
    expected = adam_step(start, grads, lr, eps)
    scale = max(float(np.max(np.abs(g))) for g in ref["grads"].values())
    return {"loss_diff": abs(loss - ref["loss"]) / abs(ref["loss"]),
            "tolerance": LOSS_TOLERANCE_32, "relative": True,
            "grad_diff": largest_difference(grads, ref["grads"]) / scale,
            # The merged LSTM bias moves as each of xpseq's b_ih and b_hh does.
            "step_diff": largest_difference({n: stepped[n] - start[n] for n in stepped},
                                            {n: expected[n] - start[n] for n in stepped}),
            "step_against": f"xpseq's Adam (ε {eps:.2g}, Keras's first step) on Keras's "
                            f"gradients"}


def check_keras_fit(kind: Kind, batch: dict, ref: dict, lr: float) -> dict:
    """``model.fit``'s float32 loss on one batch against xpseq's float64 ``ref``, relative,
    and its parameters after that step against the custom Keras step's (``step_diff``):
    ``fit`` trains the same model with the same optimiser."""
    from .. import native_keras

    epoch = native_keras.make_fit(keras_model(kind, kind.init32), [batch], lr)
    loss = epoch()
    step = native_keras.make_step(keras_model(kind, kind.init32), lr)
    step(native_keras.batch_arrays(batch))
    return {"loss_diff": abs(loss - ref["loss"]) / abs(ref["loss"]),
            "tolerance": LOSS_TOLERANCE_32, "relative": True,
            "step_diff": largest_difference(epoch.model.xpseq_values(),
                                            step.model.xpseq_values(step.state["trainable"])),
            "step_against": "the custom Keras step's Adam step"}


def require(kind: str, peer: str, check: dict) -> None:
    """End the benchmark if ``check`` (a :func:`check_peers` entry) failed."""
    how = "relative " if check["relative"] else ""
    if not check["loss_diff"] <= check["tolerance"]:
        raise SystemExit(f"{kind}: {peer}'s loss differs from xpseq's by {how}"
                         f"{check['loss_diff']:.3g} (> {check['tolerance']:g}): it is not "
                         f"the same model")
    if not check.get("grad_diff", 0.0) <= GRAD_TOLERANCE_32:
        raise SystemExit(f"{kind}: {peer}'s gradients differ from xpseq's by "
                         f"{check['grad_diff']:.3g} of the largest (> {GRAD_TOLERANCE_32:g})")
    if not check.get("step_diff", 0.0) <= STEP_TOLERANCE:
        raise SystemExit(f"{kind}: one Adam step of {peer} differs from xpseq's by "
                         f"{check['step_diff']:.3g} (> {STEP_TOLERANCE:g})")


# ------------------------------------------------------------------------ the loops


def shape_of(batch: dict) -> tuple:
    return tuple(batch["src"].shape), tuple(batch["tgt_in"].shape)


def warm(step: Callable[[Any], Any], batches: list) -> dict:
    """Call ``step`` twice on each batch shape's first batch: ``{"first_loss": the first
    call's loss (float), "compile_s": {shape: first call − second call}}``."""
    first_loss = None
    compile_s: dict[str, float] = {}
    for b in batches:
        key = shape_of(b)
        if str(key) in compile_s:
            continue
        calls = []
        for _ in range(2):
            start = time.perf_counter()
            loss = float(step(b))
            calls.append(time.perf_counter() - start)
            first_loss = loss if first_loss is None else first_loss
        compile_s[str(key)] = calls[0] - calls[1]
    return {"first_loss": first_loss, "compile_s": compile_s}


def warm_fit(epoch: Callable[[], float], batches: list) -> dict:
    """Two ``fit`` epochs (:func:`native_keras.make_fit`): the first compiles every batch
    shape. ``{"first_loss": the first epoch's mean loss, "compile_s": {the shapes, joined:
    first epoch − second}}`` (one entry: an epoch compiles them all)."""
    calls, losses = [], []
    for _ in range(2):
        start = time.perf_counter()
        losses.append(epoch())
        calls.append(time.perf_counter() - start)
    shapes = sorted({str(shape_of(b)) for b in batches})
    return {"first_loss": losses[0], "compile_s": {", ".join(shapes): calls[0] - calls[1]}}


def dynamo_counts() -> dict[str, int]:
    """Graph breaks and graphs compiled so far in this process (Dynamo's counters)."""
    from torch._dynamo.utils import counters

    return {"graph_breaks": int(sum(counters["graph_break"].values())),
            "graphs": int(counters["stats"]["unique_graphs"]),
            "frames_compiled": int(counters["frames"]["ok"])}


def counts_since(before: dict[str, int]) -> dict[str, int]:
    now = dynamo_counts()
    return {k: now[k] - before[k] for k in now}


def compiled_native_step(model: Any, lr: float) -> Callable[[dict], Any]:
    """``step(batch) -> loss`` of the native model under ``torch.compile``: its loss (the
    forward, and the backward by AOTAutograd) compiled with ``mode=None, dynamic=False``;
    ``zero_grad``, ``backward()`` and ``torch.optim.Adam``'s step as in the eager step.

    What was measured against the alternatives (one core of a loaded 2-core machine, so
    only large differences count): for the RNN at the bench's sizes (five batch shapes),
    eager 5,201 tok/s; this step 8,549; the same with ``dynamic=None`` (automatic dynamic
    shapes after the first recompile) 9,092; with Adam's step compiled too 9,059; the whole
    step function compiled (graph breaks at ``zero_grad`` and ``backward``) 9,089 (fastest
    to slowest repeat 0.8–0.9 in each). For the Transformer (four batches, repeats 0.2–0.7
    apart) eager 1,278, this step 1,316, ``dynamic=None`` 1,269, with Adam compiled 1,243.
    None is distinguishable from the others; this is the simplest, and with
    ``dynamic=False`` each batch shape gets its own graph, whose recompiles the section
    counts (compiling Adam's step too added 40 s of compile for nothing measurable). The
    RNN's ``pack_padded_sequence`` and ``nn.LSTM`` run eagerly: Dynamo does not trace them
    (a graph break, counted).
    """
    import torch

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch.compile(model.loss, dynamic=False)

    def step(batch: dict) -> Any:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(batch)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def xpseq_compiled_torch() -> Any:
    """xpseq's torch backend compiling its step, or ``None`` where this xpseq has none."""
    from xpseq import backends

    try:
        return backends.get("torch", compile=True)
    except TypeError:
        return None


# ----------------------------------------------------------------------- the section


def measure(context: Context, kind: Kind) -> dict:
    """The checks, then every implementation's seconds per repeat, taken in turns."""
    from .. import native_keras
    import torch

    args = context.args
    checks = check_peers(context, kind)
    for peer, check in checks.items():
        require(kind.name, peer, check)
    impls: dict[str, Callable[[], None]] = {}
    # Each path named: ``gradients=None`` is the measured default (xpseq.train.paths).
    xpseq_backends = [("xpseq-jax", context.jax, "autodiff"), (kind.hand_jax, context.jax,
                                                               "hand-derived"),
                      ("xpseq-torch", context.torch, "autodiff"),
                      (kind.hand_torch, context.torch, "hand-derived")]
    compiled_be = xpseq_compiled_torch() if args.torch_compile else None
    if compiled_be is not None:
        xpseq_backends += [(XPSEQ_COMPILED, compiled_be, "autodiff"),
                           (XPSEQ_COMPILED_HAND, compiled_be, "hand-derived")]
    if args.peers_numpy:
        from xpseq import backends

        xpseq_backends.append((XPSEQ_NUMPY, backends.get("numpy"), "hand-derived"))
    from xpseq.core.optim import adam
    from xpseq.train import make_train_step

    optimizer = adam(args.lr)
    for name, be, gradients in xpseq_backends:
        step = make_train_step(kind.config, optimizer, be, clip_norm=None, gradients=gradients)
        impls[name] = xpseq_loop(be, step, float32_on(be, kind.init32), optimizer,
                                 [on_backend(be, b) for b in kind.timed])

    torch_batches = [to_torch(b) for b in kind.timed]
    impls[NATIVE] = native_loop(context.native.make_native_step(
        native_model(context, kind, kind.init32, torch.float32), args.lr), torch_batches)

    warmups = {}
    if args.torch_compile:
        import torch._inductor.config

        compiled = compiled_native_step(
            native_model(context, kind, kind.init32, torch.float32), args.lr)
        before = dynamo_counts()
        with torch._inductor.config.patch(force_disable_caches=True):   # a cold compile
            warmups[COMPILED] = warm(compiled, torch_batches)
        warmups[COMPILED]["dynamo"] = counts_since(before)
        reference = checks[NATIVE]["reference"]
        checks[COMPILED] = {"loss_diff": abs(warmups[COMPILED]["first_loss"] - reference)
                            / abs(reference), "tolerance": LOSS_TOLERANCE_32,
                            "relative": True, "reference": reference}
        require(kind.name, COMPILED, checks[COMPILED])
        impls[COMPILED] = native_loop(compiled, torch_batches, warm_up=False)

    keras_step = native_keras.make_step(keras_model(kind, kind.init32), args.lr)
    keras_batches = [native_keras.batch_arrays(b) for b in kind.timed]
    warmups[KERAS] = warm(keras_step, keras_batches)
    impls[KERAS] = native_loop(keras_step, keras_batches, warm_up=False)
    fit_epoch = native_keras.make_fit(keras_model(kind, kind.init32), kind.timed, args.lr)
    warmups[KERAS_FIT] = warm_fit(fit_epoch, kind.timed)
    impls[KERAS_FIT] = fit_epoch
    if kind.name == "transformer":
        from .. import native_flax

        flax_step = make_flax_step(kind, args.lr)
        flax_batches = [native_flax.batch_arrays(b) for b in kind.timed]
        warmups[FLAX] = warm(flax_step, flax_batches)
        impls[FLAX] = native_loop(flax_step, flax_batches, warm_up=False)

    before = dynamo_counts()
    cpu: dict[str, list[float]] = {}
    times = common.take_turns(impls, args.repeats, cpu)
    tokens = context.tokens(kind.timed)
    return {"times": times, "tokens": tokens, "checks": checks, "warmups": warmups,
            "dynamo_while_timed": counts_since(before),
            "cores_used": {n: sum(cpu[n]) / sum(t) for n, t in times.items()},
            "tokens_per_s": {n: tokens / statistics.median(t) for n, t in times.items()}}


def _best(tps: dict[str, float], names: list[str]) -> str:
    return max((n for n in names if n in tps), key=tps.get)


def rows_of(kind: Kind, r: dict, steps: int) -> list[Row]:
    """The checks, each implementation's throughput, the compile times and the target
    ratios of one kind's :func:`measure`."""
    tps = r["tokens_per_s"]
    section, k = "peers", kind.name
    rows = []
    for peer, check in r["checks"].items():
        precision = "float32, relative" if check["relative"] else "float64"
        step = (f"; one Adam step: largest parameter difference {check['step_diff']:.1e} "
                f"(<= {STEP_TOLERANCE:g})" if "step_diff" in check else
                "; the first loss of the compiled step, before any update")
        if "grad_diff" in check:
            step = (f"; gradients: largest difference {check['grad_diff']:.1e} of the "
                    f"largest (<= {GRAD_TOLERANCE_32:g}){step}")
        if "step_against" in check:
            step += f", against {check['step_against']}"
        rows.append(Row(section, f"{k} {peer} loss check ({precision}, |peer − xpseq|)",
                        check["loss_diff"], "", None, f"<= {check['tolerance']:g}",
                        check["loss_diff"] <= check["tolerance"],
                        f"xpseq.models.{k}.loss = {check['reference']:.6f}{step}"))
    for name, t in r["times"].items():
        rows.append(Row(section, f"{k} {name} throughput", tps[name], "tok/s",
                        detail=f"{steps} steps, {r['tokens']} target tokens per repeat; "
                               f"fastest/slowest repeat {min(t) / max(t):.2f}, CPU/wall "
                               f"{r['cores_used'][name]:.2f}"))
    for name, w in r["warmups"].items():
        shapes = w["compile_s"]
        each = ", ".join(f"{v:.1f}" for v in shapes.values())
        detail = f"{len(shapes)} batch shapes, each {each} s"
        if "dynamo" in w:
            d, timed = w["dynamo"], r["dynamo_while_timed"]
            detail += (f"; Inductor caches off; {d['graphs']} graphs, {d['graph_breaks']} "
                       f"graph breaks, {d['frames_compiled']} frames compiled; while timed: "
                       f"{timed['frames_compiled']} frames compiled, {timed['graphs']} graphs")
        rows.append(Row(section, f"{k} {name} compile (first call − second, all shapes)",
                        float(sum(shapes.values())), "s", detail=detail))

    hand_of = {"jax": kind.hand_jax, "torch": kind.hand_torch}
    for engine, auto, hand in PATH_PAIRS:
        hand = hand or hand_of[engine]
        if auto in tps and hand in tps:
            rows.append(Row(section, f"{k} {engine}: hand-derived vs autodiff", tps[hand],
                            "tok/s", tps[hand] / tps[auto], detail=f"{hand} against {auto} "
                            f"({tps[auto]:,.0f} tok/s)"))
    xpseq_jax = [n for n in tps if n.startswith("xpseq-jax")]
    xpseq_torch = [n for n in tps if n.startswith("xpseq-torch")]
    jax_peers = [n for n in (KERAS, KERAS_FIT, FLAX) if n in tps]
    peers = [n for n in tps if not n.startswith("xpseq")]
    for label, ours, theirs, bound in (
            ("best xpseq-jax vs the fastest JAX peer", xpseq_jax, jax_peers, 1.2),
            ("best xpseq-jax vs Keras 3's fit", xpseq_jax, [KERAS_FIT], 1.4),
            ("best xpseq-torch vs native torch.compile", xpseq_torch, [COMPILED], 1.0),
            ("best xpseq vs the fastest peer of any kind", xpseq_jax + xpseq_torch, peers,
             1.0)):
        if not any(n in tps for n in theirs):
            continue                                # torch.compile left out
        a, b = _best(tps, ours), _best(tps, theirs)
        target, met = at_least(tps[a] / tps[b], bound)
        rows.append(Row(section, f"{k} {label}", tps[a], "tok/s", tps[a] / tps[b], target, met,
                        f"{a} against {b} ({tps[b]:,.0f} tok/s)"))
    return rows


def run(context: Context) -> list[Row]:
    """Both kinds: the peers' checks, throughputs, compile times and the target ratios."""
    rows: list[Row] = []
    details: dict[str, Any] = {}
    for kind in kinds(context):
        if kind.name not in context.args.peers_kinds:
            continue
        details[kind.name] = r = measure(context, kind)
        rows += rows_of(kind, r, len(kind.timed))
    context.record("peers", details)
    return rows
