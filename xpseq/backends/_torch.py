"""PyTorch: gradients from the autograd tape, loops in Python, tensors on one device.

``backends.get("torch", device="cuda")`` places what :meth:`~TorchBackend.asarray` makes on
that device (default ``"cpu"``).

``jit`` is the identity: ``torch.compile`` is left to the caller (it is opt-in and slow to
warm up for the small models here). Python floats become float64 tensors through
:meth:`asarray`, not torch's float32 default.
"""

from __future__ import annotations

from typing import Any, Callable

import array_api_compat.torch as xp_torch
import numpy as np

from xpseq.core import tree

from ._base import Backend


class TorchBackend(Backend):
    name = "torch"
    gradients = "autodiff"

    def __init__(self, device: Any = None) -> None:
        import torch

        self._torch = torch
        try:
            place = torch.device("cpu" if device is None else device)
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"backends.get('torch', device=...): {device!r} is not a torch "
                             f"device ({err})") from None
        if place.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"backends.get('torch', device={device!r}): this PyTorch sees no "
                             "CUDA device")
        super().__init__(xp_torch, device=place)

    def is_array(self, x: Any) -> bool:
        return isinstance(x, self._torch.Tensor)

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
        nums = (argnums,) if single else tuple(argnums)

        def wrapped(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
            args = list(args)
            groups = []
            for i in nums:
                leaves, treedef = tree.flatten(args[i])
                fresh = []
                for leaf in leaves:
                    if not isinstance(leaf, torch.Tensor) or not leaf.dtype.is_floating_point:
                        raise TypeError(
                            f"value_and_grad: argument {i} must hold floating torch tensors, "
                            f"got {getattr(leaf, 'dtype', type(leaf).__name__)}"
                        )
                    fresh.append(leaf.detach().requires_grad_(True))
                args[i] = tree.unflatten(treedef, fresh)
                groups.append((treedef, fresh))
            with torch.enable_grad():
                out = fn(*args, **kwargs)
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
        tensors or nested tuples/lists/dicts of them."""
        torch = self._torch

        def wrapped(*args: Any) -> Any:
            leaves, treedef = tree.flatten(list(args))
            if not torch.is_grad_enabled() or not any(
                    isinstance(x, torch.Tensor) and x.requires_grad for x in leaves):
                return fn(*args)
            sizes = [len(tree.flatten(a)[0]) for a in args]
            out_def: list = []

            class Rule(torch.autograd.Function):
                @staticmethod
                def forward(ctx: Any, *flat: Any) -> tuple:
                    out, ctx.residuals = fwd(*tree.unflatten(treedef, list(flat)))
                    out_leaves, d = tree.flatten(out)
                    out_def.append(d)
                    return tuple(out_leaves)

                @staticmethod
                def backward(ctx: Any, *cotangents: Any) -> tuple:
                    grads = bwd(ctx.residuals, tree.unflatten(out_def[0], list(cotangents)))
                    flat: list = []
                    for g, n in zip(grads, sizes):
                        flat.extend([None] * n if g is None else tree.flatten(g)[0])
                    return tuple(flat)

            outputs = Rule.apply(*leaves)
            return tree.unflatten(out_def[0], list(outputs))

        return wrapped
