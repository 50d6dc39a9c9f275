"""The training step: a model's loss, its gradient, clipping and the optimiser's update,
as one function of ``(params, opt_state, batch, seed)`` on one backend.

The step is the same code on every backend and for every model kind::

    loss, grads = backend.value_and_grad(model loss)(params)     # jax.grad / tape / by hand
    grads = clip_by_global_norm(grads, clip_norm)                 # optional
    params, opt_state = optimizer.update(grads, opt_state, params)   # its lr(step) × scale

On JAX the whole step is ``jax.jit``-compiled and the recurrences run in ``lax.scan``; a new
batch shape triggers a new trace, so batches are padded to a few bucketed shapes
(:func:`xpseq.data.batching.make_batches`) and ``TrainStep.traces`` counts the traces. On
PyTorch the gradients come from the autograd tape. NumPy (and array_api_strict) run the
model's hand-derived backward pass (its ``loss_vjp`` kernel), attached to the loss with
``defvjp``. Dropout masks are drawn from ``(seed, step)`` (see ``Backend.dropout_keep``).

The step is built the same way on every backend: its two pieces (the loss with its
gradient, and clipping with the optimiser's update) go through
:meth:`~xpseq.backends.Backend.compile_piece`, the whole step through
:meth:`~xpseq.backends.Backend.compile_program`, each the identity where the backend does
not compile that way. On a torch backend made with ``compile=True`` the step stays a
Python function (``torch.compile`` cannot compile through ``torch.autograd.grad``) around
its two compiled pieces: the loss, whose backward AOTAutograd compiles with it (or, with
``gradients="hand-derived"``, the loss and its hand-derived backward as one graph), and the
update. ``TrainStep.graphs`` counts the graphs compiled.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from xpseq import models
from xpseq.backends import Backend, programs
from xpseq.core import precision as mixed
from xpseq.core.optim import Optimizer, clip_by_global_norm
from xpseq.core.rules import value_and_grad_by_rule
from xpseq.core.vjp import defvjp
from xpseq.train import paths

__all__ = ["TrainStep", "GRADIENTS", "make_train_step", "check_gradients",
           "training_precision", "make_eval_loss", "evaluate_loss"]

Batch = Mapping[str, np.ndarray]


class TrainStep:
    """``step(params, opt_state, batch, seed=0) -> (params, opt_state, loss)`` on one backend.

    ``batch`` holds backend arrays (``src``, ``src_len``, ``tgt_in``, ``tgt_out``); ``seed``
    and ``opt_state["step"]`` draw the dropout masks (on JAX the seed is traced, so a new
    seed does not recompile).
    ``traces`` counts how often the Python body ran: on JAX, once per compiled batch shape;
    on the other backends (a compiled torch backend too), once per call.
    ``graphs`` counts the graphs compiled for the step (:meth:`Backend.graphs
    <xpseq.backends.Backend.graphs>`): on JAX its traces; on a torch backend made with
    ``compile=True`` the graphs torch.compile built for its pieces (the loss with its
    backward, the update), one more for each shape it compiles again; ``None`` on the
    backends that do not compile.
    """

    def __init__(self, fn: Callable, backend: Backend, pieces: Sequence[Any] = ()):
        self._fn = fn
        self.backend = backend
        self.traces = 0
        self._pieces = tuple(pieces)

    @property
    def graphs(self) -> int | None:
        return self.backend.graphs(self.traces, self._pieces)

    def __call__(self, params: dict, opt_state: dict, batch: Mapping[str, Any],
                 seed: int = 0) -> tuple:
        return self._fn(params, opt_state, batch, seed)


GRADIENTS = ("autodiff", "hand-derived")


def make_train_step(config: Any, optimizer: Optimizer, backend: Backend, *,
                    clip_norm: float | None = None, gradients: str | None = None,
                    group: tuple[int, int] | None = None, mesh: Any = None,
                    precision: mixed.Policy = mixed.Policy()) -> TrainStep:
    """The training step of ``config`` (any model kind's) for ``backend``.

    Built once, then kept in :mod:`xpseq.backends.programs` by config, optimiser name and
    hyperparameters (a learning-rate schedule among them), ``clip_norm``, ``gradients`` and
    backend, so calling :func:`xpseq.train.fit` again reuses JAX's compilations.

    Parameters
    ----------
    optimizer : an :class:`xpseq.core.optim.Optimizer`, e.g. ``adam(1e-3)``, or
        ``adam(1e-3 * schedules.warmup_inverse_sqrt(400))`` for a scheduled rate (the
        optimiser evaluates its schedule at each update)
    clip_norm : float, optional
        Clip the gradients to this global norm before the update.
    gradients : ``None`` (the fastest path measured for the model kind, backend and
        precision: :mod:`xpseq.train.paths`), ``"autodiff"`` or ``"hand-derived"``
        ``"hand-derived"`` runs the backward pass of :mod:`xpseq.core.vjp` (what NumPy
        always does) on the backend's arrays; on PyTorch that means no autograd tape is
        recorded, and the step is faster (``python -m scripts.bench`` measures it). On JAX it
        depends on the model (its ``kernels.loss_vjp_compiles``): the Transformer's whole
        hand-derived pass is traced into the jitted step; for the RNN, whose Python loops
        over the time steps ``jit`` would unroll, it means its loops (the encoder's
        recurrences and the decoder): their backward is the hand-derived step rules in a
        reverse ``lax.scan`` (``backend.custom_vjp``, see
        :func:`xpseq.core.recurrent.hand_derived_recurrence`), the rest is ``jax.grad``.
        ``"autodiff"`` needs JAX or PyTorch.
    group : ``(rank, processes)`` of a PyTorch process group (see
        :mod:`xpseq.train.parallel`): the batch is this process's rows with a ``"weight"``
        (its share of the real tokens); the weighted value and gradients are summed over
        the group before clipping and the update, and the dropout masks drawn as streams
        of their own for each process.
    mesh : a JAX device mesh (``backend.mesh(n)``) whose devices compute the gradient of
        their rows of the batch (``backend.data_parallel``); the batch and the dropout
        masks are split over it, the parameters replicated.
    precision : :class:`~xpseq.core.precision.Policy`
        ``Policy()`` computes in the parameters' dtype; ``Policy("bf16")`` is mixed
        precision (:mod:`xpseq.core.precision`): the loss is computed from the
        parameters cast to bfloat16, with softmax, layer-norm statistics and the loss in
        float32; the parameters, gradients and optimiser state stay in their own dtype
        (float32). Needs ``gradients="autodiff"`` on JAX or PyTorch.
    """
    precision = mixed.Policy.given(precision, "make_train_step: precision")
    gradients = check_gradients(backend, gradients, models.of(config).kind, precision)
    precision = training_precision(backend, gradients, precision)
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"make_train_step: optimizer must be an xpseq.core.optim.Optimizer, "
                        f"got {type(optimizer).__name__}")
    key = (config, optimizer.name, tuple(sorted(optimizer.hyperparams.items())), clip_norm,
           backend.cache_key, gradients, group, mesh, precision)
    return programs.cached("train_step", key, lambda: _build_train_step(
        config, optimizer, backend, clip_norm, gradients, group, mesh, precision))


def check_gradients(backend: Backend, gradients: str | None, kind: str | None = None,
                    precision: Any = None) -> str:
    """``gradients`` checked against ``backend``; ``None`` becomes the default path of
    model kind ``kind`` (a name, or ``None`` when not known: the backend's own) at
    ``precision`` (a :class:`~xpseq.core.precision.Policy`, ``None`` or ``"bf16"``) on
    ``backend``: the fastest measured, :func:`xpseq.train.paths.default_gradients`."""
    if gradients is None:
        return paths.default_gradients(backend, kind, precision)
    if gradients not in GRADIENTS:
        raise ValueError(f"gradients must be None or one of {list(GRADIENTS)}, "
                         f"got {gradients!r}")
    if gradients == "autodiff" and backend.gradients != "autodiff":
        raise ValueError(f"gradients='autodiff' needs a backend with automatic "
                         f"differentiation (jax or torch); {backend.name} has hand-derived "
                         "gradients only")
    return gradients


def training_precision(backend: Backend, gradients: str,
                       policy: mixed.Policy) -> mixed.Policy:
    """``policy`` checked for training on ``backend`` with the (checked) ``gradients``: a
    reduced precision needs a library with bfloat16 and its automatic differentiation (the
    hand-derived backward passes are written for one dtype)."""
    if not policy.reduced:
        return policy
    policy.compute_dtype(backend.xp)                      # no bfloat16: a clear error
    if gradients != "autodiff":
        raise ValueError(f"precision={policy.name!r} needs gradients='autodiff' (the "
                         "hand-derived backward passes compute in one dtype); got "
                         f"gradients={gradients!r} on {backend.name}")
    return policy


def _build_train_step(config: Any, optimizer: Optimizer, backend: Backend,
                      clip_norm: float | None, gradients: str,
                      group: tuple[int, int] | None, mesh: Any,
                      precision: mixed.Policy) -> TrainStep:
    xp = backend.xp
    model = models.of(config)
    # A compiling backend asked for hand-derived gradients traces the model's whole
    # hand-derived pass when it has no loop over time steps (the Transformer); otherwise it
    # differentiates the loss itself, and the model runs its loops with their
    # hand-derived custom VJP (the RNN).
    rules_inside = (gradients == "hand-derived" and backend.compiles_autodiff
                    and not model.kernels.loss_vjp_compiles)
    # A kind whose rules are only cheaper backward passes of the same function (the
    # Transformer's blockwise attention) gets them under the library's autodiff too, in
    # the parameters' one dtype (the rules are written for one dtype).
    cheaper = (gradients == "autodiff" and model.kernels.rules_under_autodiff
               and not precision.reduced)
    custom_vjp = backend.custom_vjp if rules_inside or cheaper else None

    def loss_of(params: dict, batch: Mapping[str, Any], keep: Any) -> Any:
        params = precision.cast_params(params, xp=xp)
        return model.kernels.loss(params, config, batch, keep, scan=backend.scan,
                                  custom_vjp=custom_vjp, xp=xp)

    def rule(params: dict, batch: Mapping[str, Any], keep: Any) -> tuple:
        value, backprop = model.kernels.loss_vjp(params, config, batch, keep, xp=xp)
        return value, lambda d_loss: (backprop(d_loss), None, None)

    # JAX and PyTorch differentiate loss_of themselves; NumPy and array_api_strict (and
    # PyTorch asked for gradients="hand-derived") run the hand-derived backward pass
    # attached here. A compiled torch backend compiles the loss (its backward with it) or
    # the whole hand-derived pass, and the update (compile_piece); JAX compiles the whole
    # step below (compile_program).
    defvjp(loss_of, rule)
    if gradients == "hand-derived" and not rules_inside:
        grad_fn = loss_part = backend.compile_piece(value_and_grad_by_rule(loss_of))
    else:
        loss_part = backend.compile_piece(loss_of)
        grad_fn = backend.value_and_grad(loss_part)
    if mesh is not None:
        grad_fn = backend.data_parallel(grad_fn, mesh, config.pad_id)

    def apply(grads: dict, opt_state: dict, params: dict) -> tuple:
        if clip_norm is not None:
            grads, _ = clip_by_global_norm(grads, clip_norm)
        return optimizer.update(grads, opt_state, params)

    update = backend.compile_piece(apply)

    def step(params: dict, opt_state: dict, batch: Mapping[str, Any], seed: Any) -> tuple:
        train_step.traces += 1
        shapes = model.dropout_shapes(config, tuple(batch["src"].shape),
                                      tuple(batch["tgt_in"].shape))
        first = 0 if group is None else group[0] * len(shapes)      # a process's streams
        keep = {name: backend.dropout_keep(seed, opt_state["step"], shape, config.dropout,
                                           stream=first + i)
                for i, (name, shape) in enumerate(shapes.items())} or None
        value, grads = grad_fn(params, batch, keep)
        if group is not None:
            weight = batch["weight"]
            value, grads = backend.all_reduce_sum(
                (value * weight, {k: g * weight for k, g in grads.items()}))
        params, opt_state = update(grads, opt_state, params)
        return params, opt_state, value

    train_step = TrainStep(backend.compile_program(step), backend, pieces=(loss_part, update))
    return train_step


def make_eval_loss(config: Any, backend: Backend,
                   precision: mixed.Policy = mixed.Policy()) -> Callable:
    """``fn(params, batch) -> (summed nll, number of real tokens)`` without dropout (jitted
    on JAX, kept in :mod:`xpseq.backends.programs` per config, backend and ``precision``,
    as in :func:`make_train_step`); sum both over batches for a corpus loss per token. A
    compiled torch backend runs it eagerly: the dev loss is a few batches an epoch, each a
    shape torch.compile would compile for."""
    model = models.of(config)
    policy = mixed.Policy.given(precision, "make_eval_loss: precision")

    def build() -> Callable:
        def nll(params: dict, batch: Mapping[str, Any]) -> tuple:
            params = policy.cast_params(params, xp=backend.xp)
            return model.kernels.nll_sum(params, config, batch, scan=backend.scan,
                                         xp=backend.xp)

        return backend.compile_program(nll)

    return programs.cached("eval_loss", (config, backend.cache_key, policy), build)


def evaluate_loss(eval_loss: Callable, backend: Backend, params: dict,
                  batches: Sequence[Batch], place: Callable | None = None) -> float:
    """Mean negative log-likelihood per real target token over ``batches`` (each converted
    by ``place``, :meth:`~xpseq.backends.Backend.asarray_tree` by default)."""
    total, count = 0.0, 0.0
    for batch in batches:
        s, n = eval_loss(params, backend.asarray_tree(batch) if place is None else place(batch))
        total += float(backend.to_numpy(s))
        count += float(backend.to_numpy(n))
    return total / count
