"""PyTorch: gradients from the autograd tape, loops in Python, tensors on one device.

``backends.get("torch", device="cuda")`` places what :meth:`~TorchBackend.asarray` makes on
that device (default ``"cpu"``).

Python floats become float64 tensors through :meth:`asarray`, not torch's float32 default.

``jit`` is the identity, unless the backend is made with ``backends.get("torch",
compile=True)``: then it is ``torch.compile`` (inductor), and its ``capabilities.compile`` is
``"pieces"``.
torch.compile cannot compile through ``torch.autograd.grad`` (a graph break), so the training
step (:mod:`xpseq.train.step`) compiles its pieces: the loss, whose backward AOTAutograd
compiles with it, and clipping with the optimiser's update; the search
(:mod:`xpseq.search`) compiles the decoder step and keeps its loop in Python. What runs is
the core's math either way; compiled and eager steps agree to rounding.

Python loops over time steps (the RNN's recurrences, in :func:`xpseq.core.scan`) are
unrolled into the graph, so the RNN's step compiles once per pair of source and target
lengths whatever ``dynamic=`` says; the Transformer has no such loop. Eager, the encoder's
recurrences run in PyTorch's own LSTM / GRU kernel
(:func:`xpseq.core.delegation.fused_recurrence`); compiled, they are unrolled too (that
kernel, behind graph breaks, made the compiled step no faster).

**dynamic=.** The training step's pieces are compiled with ``dynamic=False``
(:data:`DYNAMIC`): bucketed batches bring a few shapes, each compiled once, and static
graphs were compiled in about half the time of dynamic ones and ran as fast or faster. The
decoder step uses ``dynamic=None`` (``xpseq.search.decode.STEP_DYNAMIC``): every search
brings a new batch size, source length and ``max_len``, and automatic dynamic shapes bound
the graphs to a few whatever the number of shapes.

**Why compile=False is the default.** A cold compile of the RNN's training step takes
minutes (its unrolled loops make big graphs, one per pair of lengths), and the Transformer's
step, dominated by its matrix products, runs little faster compiled: at the sizes of the
toy task the compile time is not paid back, so compiling is asked for, not the default.
``python -m scripts.bench --only peers`` measures it in every run (xpseq's compiled torch steps
beside eager ones, and a cold ``torch.compile`` of the same model written natively); the
benchmarks page has the recorded runs.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Sequence

import array_api_compat.torch as xp_torch
import numpy as np
import torch

from xpseq.core import tree

from ._base import CAPABILITIES, Backend

#: torch.compile's ``dynamic=`` for :meth:`TorchBackend.jit` (what the training step
#: compiles): static shapes, one graph per batch shape (see the module docstring for the
#: measurement that chose it).
DYNAMIC: bool | None = False


class Compiled:
    """``fn`` through ``torch.compile`` with inductor, counting its compilations.

    ``compiles`` is how many graphs torch.compile has built for ``fn`` so far: one per
    input shape it specialised on (or per shape class, with dynamic shapes) and per piece
    between graph breaks. A graph whose outputs need gradients has its backward compiled by
    AOTAutograd with it (counted with its forward).

    Each call runs with torch._dynamo's ``recompile_limit`` raised to at least
    :data:`RECOMPILE_LIMIT` (its default, 8 graphs per Python function, is shared by every
    model and batch shape that runs the same function in the process, and past it
    torch.compile quietly falls back to eager), and without dynamo's warning that it traces
    through ``functools.lru_cache`` (array_api_compat caches the namespace of a type there;
    tracing through it gives the same namespace). Both are restored when the call returns.
    """

    def __init__(self, fn: Callable[..., Any], dynamic: bool | None = DYNAMIC) -> None:
        import torch
        from torch._dynamo.backends.registry import lookup_backend

        inductor = lookup_backend("inductor")
        self.compiles = 0

        def counting(graph: Any, example_inputs: Any) -> Any:
            compiled = inductor(graph, example_inputs)
            self.compiles += 1     # once built: dynamo may restart a trace and try again
            return compiled

        self.fn = fn
        self.dynamic = dynamic
        self._compiled = torch.compile(fn, dynamic=dynamic, backend=counting)
        self._config: Any = torch._dynamo.config          # options made at run time

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        config, limit = self._config, self._config.recompile_limit
        config.recompile_limit = max(limit, RECOMPILE_LIMIT)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", _LRU_CACHE_WARNING, UserWarning)
                return self._compiled(*args, **kwargs)
        finally:
            config.recompile_limit = limit

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", type(self.fn).__name__)
        return f"<torch.compile of {name}, dynamic={self.dynamic}, {self.compiles} compiles>"


#: The most graphs torch.compile keeps for one compiled function (see :class:`Compiled`).
RECOMPILE_LIMIT = 64
_LRU_CACHE_WARNING = "Dynamo detected a call to a `functools.lru_cache`-wrapped function"


class TorchBackend(Backend):
    name = "torch"
    capabilities = CAPABILITIES["torch"]

    def __init__(self, device: Any = None, compile: bool = False) -> None:
        import torch

        self._torch = torch
        if compile:
            self.capabilities = dataclasses.replace(CAPABILITIES["torch"], compile="pieces")
        try:
            place = torch.device("cpu" if device is None else device)
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"backends.get('torch', device=...): {device!r} is not a torch "
                             f"device ({err})") from None
        if place.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"backends.get('torch', device={device!r}): this PyTorch sees no "
                             "CUDA device")
        super().__init__(xp_torch, device=place)

    @property
    def label(self) -> str:
        """``"torch"``, or ``"torch with torch.compile"`` made with ``compile=True``."""
        return "torch with torch.compile" if self.capabilities.compile == "pieces" else "torch"

    def __repr__(self) -> str:
        compiled = " (torch.compile)" if self.capabilities.compile == "pieces" else ""
        return f"<xpseq backend {self.name!r}{compiled} on {self.device}>"

    def is_array(self, x: Any) -> bool:
        return isinstance(x, self._torch.Tensor)

    def compile_piece(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        """``fn`` itself on the eager backend; made with ``compile=True``, ``fn`` through
        ``torch.compile`` (inductor, ``dynamic=DYNAMIC`` unless ``dynamic=`` is given): a
        :class:`Compiled` that counts the graphs it builds. Other keywords (JAX's
        ``static_argnames``) are ignored: torch.compile specialises on non-tensor
        arguments by itself."""
        if self.capabilities.compile != "pieces":
            return fn
        return Compiled(fn, dynamic=kwargs.get("dynamic", DYNAMIC))

    def graphs(self, traces: int, pieces: Sequence[Any] = ()) -> int | None:
        """The graphs torch.compile built for the compiled ``pieces`` (``None`` on the
        eager backend)."""
        if self.capabilities.compile != "pieces":
            return None
        return sum(piece.compiles for piece in pieces if isinstance(piece, Compiled))

    def _from_host(self, host: np.ndarray, dtype: Any) -> Any:
        return self._torch.tensor(host, dtype=dtype, device=self.device)

    def process_group(self) -> tuple[int, int] | None:
        """``(rank, world_size)`` of the initialised ``torch.distributed`` process group,
        or ``None`` without one."""
        dist = self._torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return dist.get_rank(), dist.get_world_size()

    def all_reduce_sum(self, tree_: Any) -> Any:
        """``tree_`` (tensors in dicts, tuples or lists) summed over the processes of the
        group: one ``torch.distributed.all_reduce`` of all its leaves, concatenated."""
        torch = self._torch
        leaves, treedef = tree.flatten(tree_)
        flat = torch.cat([x.detach().reshape(-1) for x in leaves])
        torch.distributed.all_reduce(flat)
        out, start = [], 0
        for x in leaves:
            out.append(flat[start:start + x.numel()].reshape(x.shape))
            start += x.numel()
        return tree.unflatten(treedef, out)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` (any picklable object), on every process of the group."""
        box = [obj]
        self._torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def value_and_grad(self, fn: Callable[..., Any], argnums: int | tuple[int, ...] = 0,
                       has_aux: bool = False) -> Callable[..., Any]:
        """Run ``fn`` on fresh leaf tensors that require grad, then ``torch.autograd.grad``.

        The inputs are detached copies, so nothing accumulates in ``.grad`` between calls
        and the caller's tensors are untouched. An input the value does not depend on gets
        a zero gradient (as with ``jax.grad``).
        """
        torch = self._torch
        single = isinstance(argnums, int)
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)    # single

        def wrapped(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
            argv = list(args)
            groups = []
            for i in nums:
                leaves, treedef = tree.flatten(argv[i])
                fresh = []
                for leaf in leaves:
                    if not isinstance(leaf, torch.Tensor) or not leaf.dtype.is_floating_point:
                        raise TypeError(
                            f"value_and_grad: argument {i} must hold floating torch tensors, "
                            f"got {getattr(leaf, 'dtype', type(leaf).__name__)}"
                        )
                    fresh.append(leaf.detach().requires_grad_(True))
                argv[i] = tree.unflatten(treedef, fresh)
                groups.append((treedef, fresh))
            with torch.enable_grad():
                out = fn(*argv, **kwargs)
            value, aux = out if has_aux else (out, None)
            if not isinstance(value, torch.Tensor) or value.ndim != 0 \
                    or not value.dtype.is_floating_point:
                raise TypeError(
                    "value_and_grad: fn must return a floating scalar (0-d) tensor, got "
                    f"{type(value).__name__} of shape {tuple(getattr(value, 'shape', ()))}"
                )
            inputs = [leaf for _, fresh in groups for leaf in fresh]
            if value.requires_grad:
                grads = torch.autograd.grad(value, inputs, allow_unused=True)
            else:  # the value depends on none of the inputs
                grads = [None] * len(inputs)
            grads = [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]
            trees, pos = [], 0
            for treedef, fresh in groups:
                trees.append(tree.unflatten(treedef, grads[pos:pos + len(fresh)]))
                pos += len(fresh)
            grad = trees[0] if single else tuple(trees)
            value = value.detach()
            if has_aux:
                aux = tree.map_leaves(
                    lambda a: a.detach() if isinstance(a, torch.Tensor) else a, aux)
                return (value, aux), grad
            return value, grad

        return wrapped

    def custom_vjp(self, fn: Callable[..., Any], fwd: Callable[..., tuple[Any, Any]],
                   bwd: Callable[[Any, Any], tuple]) -> Callable[..., Any]:
        """``fn`` as a ``torch.autograd.Function``: the tape records one node whose
        backward is ``bwd`` (``jax.custom_vjp``'s convention, see
        :meth:`xpseq.backends.Backend.custom_vjp`), instead of one node per operation of
        ``fn``. Called outside autograd it runs ``fn`` itself. Arguments and results are
        tensors or nested tuples/lists/dicts of them.

        One ``Function`` class serves every rule (``_Rule``), handed the
        call's ``fwd``, ``bwd`` and structures as a :class:`_RuleCall`: ``torch.compile``
        guards on the class, so a class made per call would be compiled again at every
        call (and break the graph where it is made)."""
        torch = self._torch

        def wrapped(*args: Any) -> Any:
            leaves, treedef = tree.flatten(list(args))
            if not torch.is_grad_enabled() or not any(
                    isinstance(x, torch.Tensor) and x.requires_grad for x in leaves):
                return fn(*args)
            call = _RuleCall(fwd, bwd, treedef, [len(tree.flatten(a)[0]) for a in args])
            outputs = _Rule.apply(call, *leaves)
            return tree.unflatten(call.out_def, list(outputs))

        return wrapped


@dataclasses.dataclass
class _RuleCall:
    """One call of a :meth:`TorchBackend.custom_vjp` rule: its forward and backward, the
    structure of its arguments (``treedef``, and the leaves of each argument, ``sizes``)
    and of its result (``out_def``, set by the forward)."""

    fwd: Callable[..., tuple[Any, Any]]
    bwd: Callable[[Any, Any], tuple]
    treedef: Any
    sizes: list[int]
    out_def: Any = None


class _Rule(torch.autograd.Function):
    """The one ``torch.autograd.Function`` of every :meth:`TorchBackend.custom_vjp` rule,
    handed the call's rule and structures as its first argument, a :class:`_RuleCall`."""

    @staticmethod
    def forward(ctx: Any, call: _RuleCall, *flat: Any) -> tuple:
        out, ctx.residuals = call.fwd(*tree.unflatten(call.treedef, list(flat)))
        out_leaves, call.out_def = tree.flatten(out)
        ctx.call = call
        return tuple(out_leaves)

    @staticmethod
    def backward(ctx: Any, *cotangents: Any) -> tuple:
        call = ctx.call
        grads = call.bwd(ctx.residuals, tree.unflatten(call.out_def, list(cotangents)))
        flat: list = [None]                                 # the _RuleCall argument
        for g, n in zip(grads, call.sizes):
            flat.extend([None] * n if g is None else tree.flatten(g)[0])
        return tuple(flat)
