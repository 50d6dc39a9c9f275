"""Where an array library's own kernel replaces the generic array API code.

All delegation of :mod:`xpseq.core` lives here, in the manner of array-api-extra's
``_delegation.py``: each kernel decides inside itself, from the namespace of its arrays
alone, whether the library has its own version with the same semantics (dtype, mask,
empty-row policy) and calls it; otherwise it runs the generic body, which stays the
reference. Nothing registers anywhere: the same arrays take the same path whatever ran
earlier in the process (creating a backend included). The parity tests compare both paths
on every library that delegates.

=============================  ============  ================================================
kernel                         delegates on  to
=============================  ============  ================================================
``sigmoid``                    jax, torch,   ``jax.nn.sigmoid``, ``torch.sigmoid`` (their
                               ndonnx        gradient keeps only the output); on ndonnx
                                             ``(1 + tanh(x/2)) / 2``: onnxruntime runs the
                                             generic body's two ``Where`` branches over every
                                             gate at 13 % of a G2P step each
``relu``                       torch         ``torch.nn.functional.relu`` (about 15x faster
                                             than ``where``, forward and backward)
``relu_backward``              torch         ``torch.ops.aten.threshold_backward`` (relu's
                                             own backward kernel: ``where`` runs at a tenth
                                             of a multiply's rate on PyTorch's CPU build)
``linear``                     torch         ``torch.nn.functional.linear`` (one ``addmm``:
                                             the bias added inside the matrix product, not
                                             in a second pass over the output)
``fused_attention``            torch         ``torch.nn.functional.scaled_dot_product_attention``
                                             where every query row keeps a key
``fused_blockwise_attention``  torch (CPU)   ``torch.nn.functional.scaled_dot_product_attention``
                                             (its CPU flash kernel: memory linear in the
                                             lengths, forward and backward) for
                                             :func:`xpseq.core.blockwise_attention` and the
                                             Transformer's blockwise path, where every query
                                             row keeps a key and the mask is over keys only
                                             (no ``(Q, K)`` mask is ever built); otherwise
                                             the generic blockwise loops
``fused_layer_norm``           torch         ``torch.native_layer_norm`` and its backward
                                             kernel, where ``x``, ``γ`` and ``β`` share a
                                             dtype (the generic body takes nine passes
                                             over the array forward and as many backward)
``fused_recurrence``           torch         ``torch.lstm`` / ``torch.gru`` over the packed
                                             sequences (``nn.LSTM``'s and ``nn.GRU``'s own
                                             kernels), for a recurrence over a padded batch
                                             whose lengths are all in ``1..T``
``scan``                       jax           ``jax.lax.scan`` for the loops over blocks of
                                             :func:`xpseq.core.blockwise_attention` (a Python
                                             loop inside ``jax.jit`` would put one copy of
                                             its body per block in the program: 16,384 at
                                             64k tokens in blocks of 512)
``cos``                        ndonnx        ``1 - 2 sin(x/2)^2`` (onnxruntime has no float64
                                             ``Cos``, and ndonnx records one in float32)
=============================  ============  ================================================

Delegation is a speed choice, never a semantic one: each library's function computes the
generic body's values to rounding (``cos`` is the one choice of precision: on ndonnx, the
identity keeps float64 to a few units in the last place where the library's own ``cos``
would keep float32's). No library is imported here: a kernel reaches its
library's function only when handed that library's arrays, so the library is loaded.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable, Mapping, Sequence

import array_api_compat as compat

from . import loops
from .checks import concrete, library

__all__ = ["DELEGATES", "delegates", "sigmoid", "generic_sigmoid", "relu",
           "generic_relu", "relu_backward", "generic_relu_backward", "linear",
           "generic_linear", "has_fused_attention", "fused_attention",
           "fused_blockwise_attention", "fused_layer_norm",
           "fused_recurrence", "scan", "cos"]

#: For each delegating kernel, the libraries whose own version it calls.
DELEGATES = {"sigmoid": ("jax", "torch", "ndonnx"), "relu": ("torch",),
             "relu_backward": ("torch",), "linear": ("torch",),
             "fused_attention": ("torch",), "fused_blockwise_attention": ("torch",),
             "fused_layer_norm": ("torch",),
             "fused_recurrence": ("torch",), "scan": ("jax",), "cos": ("ndonnx",)}


def delegates(kernel: str, xp: Any) -> bool:
    """Whether ``kernel`` (a key of :data:`DELEGATES`) calls the library's own version on
    arrays of namespace ``xp``."""
    if kernel not in DELEGATES:
        raise ValueError(f"delegates: kernel must be one of {sorted(DELEGATES)}, got {kernel!r}")
    return library(xp) in DELEGATES[kernel]


def sigmoid(x: Any, *, xp: Any) -> Any:
    """``1 / (1 + exp(-x))``: ``jax.nn.sigmoid`` / ``torch.sigmoid`` on their arrays, whose
    gradient keeps only the output (differentiating :func:`generic_sigmoid`'s two branches
    keeps the branch mask and four arrays the size of ``x``, at every step of a
    recurrence); on ndonnx (an exported graph) ``(1 + tanh(x/2)) / 2``, one pass instead
    of two branches and a ``Where`` (the shipped G2P model's export went from 0.79x to
    1.5x PyTorch's greedy decoding speed: the benchmarks page), equal to the
    generic body to a few units in the last place of 1 (an absolute error; the negative
    tail loses its relative accuracy, which only a gradient would need);
    :func:`generic_sigmoid` elsewhere."""
    lib = library(xp)
    if lib == "torch":
        return xp.sigmoid(x)
    if lib == "jax":
        return sys.modules["jax"].nn.sigmoid(x)     # JAX's arrays: JAX is loaded
    if lib == "ndonnx":
        return 0.5 * xp.tanh(0.5 * x) + 0.5
    return generic_sigmoid(x, xp=xp)


def generic_sigmoid(x: Any, *, xp: Any) -> Any:
    """The reference body of :func:`sigmoid`: ``1 / (1 + e)`` or ``e / (1 + e)`` from
    ``e = exp(-|x|)`` (no overflow; relatively accurate in the negative tail)."""
    positive = x >= 0
    e = xp.exp(xp.where(positive, -x, x))   # exp(-|x|), in (0, 1]; not abs: its derivative
    return xp.where(positive, 1.0, e) / (1.0 + e)           # at 0 is 0 under autodiff


def relu(x: Any, *, xp: Any) -> Any:
    """``max(x, 0)``: ``torch.nn.functional.relu`` on PyTorch (the same values and the same
    zero derivative at 0), :func:`generic_relu` elsewhere."""
    if library(xp) == "torch":
        return xp.nn.functional.relu(x)
    return generic_relu(x, xp=xp)


def generic_relu(x: Any, *, xp: Any) -> Any:
    """The reference body of :func:`relu`."""
    return xp.where(x > 0, x, 0.0)


def relu_backward(dy: Any, y: Any, *, xp: Any) -> Any:
    """``dy`` where ``y > 0``, else 0: relu's backward from its output ``y`` (``y > 0``
    exactly where the input was). PyTorch's ``threshold_backward`` on its tensors (the
    kernel autograd runs for ``relu``), :func:`generic_relu_backward` elsewhere."""
    if library(xp) == "torch":
        return sys.modules["torch"].ops.aten.threshold_backward(dy, y, 0)
    return generic_relu_backward(dy, y, xp=xp)


def generic_relu_backward(dy: Any, y: Any, *, xp: Any) -> Any:
    """The reference body of :func:`relu_backward`."""
    return xp.where(y > 0, dy, 0.0)


def linear(x: Any, W: Any, b: Any, *, xp: Any) -> Any:
    """``x Wᵀ + b`` with ``x (..., I)``, ``W (O, I)``, ``b (O,)`` or ``None``:
    ``torch.nn.functional.linear`` on PyTorch (the bias added by the matrix product's own
    kernel), :func:`generic_linear` elsewhere and for a stack of matrices ``W (..., O, I)``
    (a product per matrix, broadcast against ``x``'s leading axes)."""
    if library(xp) == "torch" and W.ndim == 2:
        return xp.nn.functional.linear(x, W, b)
    return generic_linear(x, W, b, xp=xp)


def generic_linear(x: Any, W: Any, b: Any, *, xp: Any) -> Any:
    """The reference body of :func:`linear`."""
    y = x @ xp.matrix_transpose(W)
    return y if b is None else y + b


def scan(xp: Any) -> Callable[..., Any]:
    """``scan(fn, carry, xs) -> (carry, ys)`` for arrays of namespace ``xp``:
    ``jax.lax.scan`` on JAX, :func:`xpseq.core.loops.scan` (a Python loop, the same
    semantics) elsewhere.

    Only the default of a loop whose caller passes none: a rule that loops takes the loop
    as ``scan=`` (the backend's ``backend.scan``, which the models pass), and falls back to
    this where the caller has no backend (the checked :func:`xpseq.core.blockwise_attention`,
    a model's ``loss_vjp`` called without ``scan``)."""
    if library(xp) == "jax":
        jax_scan: Callable[..., Any] = sys.modules["jax"].lax.scan
        return jax_scan
    return loops.scan


def cos(x: Any, *, xp: Any) -> Any:
    """``cos(x)``; on ndonnx ``1 - 2 sin(x/2)^2``: onnxruntime has no float64 ``Cos``
    kernel, so ndonnx records ``Cos`` of ``x`` cast to float32, while its ``Sin`` is
    float64's (the identity's error is a few units in the last place, absolute)."""
    if library(xp) == "ndonnx" and x.dtype == xp.float64:
        half = xp.sin(x * 0.5)
        return 1.0 - 2.0 * (half * half)
    return xp.cos(x)


def has_fused_attention(q: Any, k: Any, v: Any, *, xp: Any) -> bool:
    """Whether :func:`fused_attention` may apply to ``q``, ``k``, ``v``: the library has a
    fused kernel with the core's semantics and the three share their leading shape (the
    fused kernel does not broadcast them). The rows' rule is :func:`fused_attention`'s."""
    return delegates("fused_attention", xp) and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]


def fused_attention(q: Any, k: Any, v: Any, keep: Any, scale: float, *, xp: Any) -> Any:
    """``softmax(q kᵀ scale) v`` by the library's fused kernel, or ``None`` where it does
    not apply: where :func:`has_fused_attention` is false, or where some query row of
    ``keep`` (a boolean mask that broadcasts to the scores, or ``None``) keeps no key (the
    fused kernel's answer there is NaN; the core's policy is an error or a zero row), or
    where that cannot be told because the values are not concrete. The caller then runs
    the generic body."""
    if not has_fused_attention(q, k, v, xp=xp):
        return None
    if keep is not None and not concrete(xp.all(xp.any(keep, axis=-1))):
        return None
    return xp.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)


def fused_blockwise_attention(q: Any, k: Any, v: Any, lens: Any, mask: Any, causal: bool,
                              scale: float, *, xp: Any) -> Any:
    """The context of :func:`xpseq.core.blockwise_attention` (``q (..., Q, d)``, ``k (...,
    K, d)``, ``v (..., K, d)``) by PyTorch's fused kernel on CPU, in memory linear in the
    lengths, or ``None`` where it does not apply; the caller then runs the generic blockwise
    loops. Under autograd the kernel's own backward (also memory linear) gives the
    gradients.

    ``lens`` are lengths from :func:`xpseq.core.masking.lengths_for` (``(batch, 1, ...,
    1)``, or ``(batch, 1, ..., Q)``) or ``None``, ``mask`` a boolean array broadcasting to
    the scores ``(..., Q, K)`` or ``None``, ``causal``: keys ``j <= i`` only.

    It applies to PyTorch tensors on the CPU, float32 or float64 alike, with ``q``, ``k``
    and ``v`` of one leading shape and one depth, at least one query and one key, and masks
    over keys alone: lengths per batch row (not per query) and a ``mask`` whose query axis
    is 1 (a key-padding mask, ``(..., 1, K)``), turned into one boolean ``(..., 1, K)``
    keep array that the kernel broadcasts over the queries (its CPU flash kernel reads it
    block by block: peak memory stays linear, measured). A mask over queries and keys, or
    lengths per query, would be a ``(Q, K)`` array: those fall back. So does a query row
    that keeps no key (PyTorch's answer there is not the core's error or zero row), so
    that the rule is checked on values: without causality every row must keep some key,
    with it every row's first key (row 0 sees key 0 alone). Where the values are not
    concrete (under ``torch.compile``) masks are taken without causality, and with it for
    lengths alone: there a row that keeps no key means a sequence that keeps none, which
    then attends to all its keys and has its context set to zero afterwards (the core's
    zero row; an error cannot be raised on values that are not known); a causal ``mask``
    falls back. Pure causality is ``is_causal=True``; causality with a key mask is the CPU
    flash operator itself, ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu``
    (the public function refuses ``is_causal`` with a mask), given the mask as an additive
    ``0 / -inf`` bias; both align the causal mask top-left as the core does (query ``i``
    sees keys ``j <= i`` whatever ``Q`` and ``K``). Leading shapes other than ``(batch,
    heads)`` are flattened into four axes, which the flash kernel needs.
    """
    if library(xp) != "torch" or not has_fused_attention(q, k, v, xp=xp) or q.ndim < 2:
        return None
    torch = sys.modules["torch"]
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    if (not q.is_cpu or q.dtype not in (torch.float32, torch.float64)
            or not q.dtype == k.dtype == v.dtype or v.shape[-1] != d or n_q == 0 or n_k == 0):
        return None
    keys = _key_mask(lens, mask, n_k, xp=xp)
    if keys is False:
        return None
    lead = tuple(q.shape[:-2])
    kept = None                 # the rows to keep, where some may be zeroed (compiling)
    if keys is not None:
        rows = keys[..., 0] if causal else xp.any(keys, axis=-1)
        every = concrete(xp.all(rows))
        if every is None and (mask is None or not causal):
            # Values unknown (torch.compile). Without causality every query of a sequence
            # keeps the same keys; with it and lengths alone, a row keeps no key only where
            # the length is 0. Either way a row without a key means a sequence without one:
            # it attends to all its keys and its context is zeroed below (no NaN, forward
            # or backward), the loops' zero row.
            kept = xp.expand_dims(rows, axis=-1)
            keys = keys | ~kept
        elif not every:
            return None
        keys = (xp.reshape(keys, (*(1,) * (4 - keys.ndim), *keys.shape))
                if q.ndim == 4 and keys.ndim <= 4
                else xp.reshape(xp.broadcast_to(keys, (*lead, 1, n_k)), (-1, 1, 1, n_k)))
    q4, k4, v4 = _four_axes(q, xp=xp), _four_axes(k, xp=xp), _four_axes(v, xp=xp)
    if keys is None or not causal:
        out = torch.nn.functional.scaled_dot_product_attention(
            q4, k4, v4, attn_mask=keys, is_causal=causal, scale=scale)
    else:
        op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
        if op is None:
            return None
        bias = torch.zeros(keys.shape, dtype=q.dtype).masked_fill(~keys, -math.inf)
        out = op(q4, k4, v4, 0.0, True, attn_mask=bias, scale=scale)[0]
    out = out if q.ndim == 4 else xp.reshape(out, (*lead, n_q, d))
    return out if kept is None else xp.where(kept, out, 0.0)


def _key_mask(lens: Any, mask: Any, n_k: int, *, xp: Any) -> Any:
    """The keys that ``lens`` and ``mask`` keep as one boolean ``(..., 1, K)`` array,
    ``None`` when nothing is masked, or ``False`` when they mask per query."""
    keys = None
    if lens is not None:
        if lens.shape[-1] != 1:
            return False
        cols = xp.arange(n_k, dtype=lens.dtype, device=compat.device(lens))
        keys = cols < xp.expand_dims(lens, axis=-1)
    if mask is not None:
        if mask.ndim == 0 or mask.shape[-1] != n_k or (mask.ndim > 1 and mask.shape[-2] != 1):
            return False
        keys = mask if keys is None else keys & mask
    return keys


def _four_axes(x: Any, *, xp: Any) -> Any:
    """``x (..., T, d)`` as ``(N, H, T, d)`` with its last axis contiguous (what PyTorch's
    CPU flash kernel takes; the generic kernel it would otherwise pick builds the scores)."""
    if x.ndim != 4:
        x = xp.reshape(x, (-1, 1, *x.shape[-2:]))
    return x if x.stride(-1) == 1 else x.contiguous()


def fused_layer_norm(x: Any, gamma: Any, beta: Any, eps: float, *,
                     xp: Any) -> tuple[Any, Callable[[Any], tuple[Any, Any, Any]]] | None:
    """The layer norm of :func:`xpseq.core.vjp.layer_norm` over the last axis by the
    library's fused kernels: ``(y, backprop)`` with ``backprop(dy) -> (dx, dγ, dβ)``, or
    ``None`` where there are none (not PyTorch), or where ``x``, ``gamma`` and ``beta``
    differ in dtype (bfloat16 activations with float32 gains: the generic body then keeps
    the statistics in float32). The caller then runs the generic body. PyTorch's kernels
    compute the same biased variance and the same gradients; autograd differentiates the
    forward kernel too."""
    if library(xp) != "torch" or not x.dtype == gamma.dtype == beta.dtype:
        return None
    torch = sys.modules["torch"]
    features = [x.shape[-1]]
    y, mean, rstd = torch.native_layer_norm(x, features, gamma, beta, eps)

    def backprop(dy: Any) -> tuple[Any, Any, Any]:
        return tuple(torch.ops.aten.native_layer_norm_backward(
            dy, x, features, mean, rstd, gamma, beta, [True, True, True]))

    return y, backprop


def fused_recurrence(cell: str, directions: Sequence[tuple[Mapping[str, Any], bool]], xs: Any,
                     lengths: Any, state0: tuple[Any, ...], *,
                     xp: Any) -> list[tuple[Any, tuple[Any, ...]]] | None:
    """:func:`xpseq.core.kernels.run_sequence` (an LSTM or GRU over a padded batch
    ``xs (B, T, I)``, each sequence's state held through its padding) for each of
    ``directions``, ``(params, reverse)`` pairs (one direction, or ``[(p_fwd, False),
    (p_bwd, True)]``, both from ``state0``), by the library's fused recurrent kernel: a
    list of ``(outputs (B, T, H), final_state)``, one per direction. ``None`` where there
    is none (not PyTorch) or it does not apply: a length outside ``1..T``, or parameters,
    inputs and state that differ in dtype. The caller then runs the generic body.

    On PyTorch: the sequences packed (``pack_padded_sequence``, as ``nn.LSTM`` with
    variable lengths), ``torch.lstm`` / ``torch.gru`` over them with ``W_ih, W_hh, b_ih,
    b_hh`` (the gate order ``[i; f; g; o]`` and ``[r; z; n]`` is PyTorch's), both
    directions in one call, the outputs padded with zeros; a reverse direction alone
    reverses each sequence's real tokens before and its outputs after. Autograd
    differentiates it. Not while ``torch.compile`` traces: the packing depends on the
    lengths' values, so the kernel would run outside the graph, behind graph breaks, and
    the LSTM model's compiled step was no faster for it (0.938x native ``torch.compile``
    with it, 0.934x with the generic loop unrolled into one graph, in the recorded
    benchmark runs)."""
    if library(xp) != "torch" or cell not in ("lstm", "gru") or xs.ndim != 3:
        return None
    names = ("W_ih", "W_hh", "b_ih", "b_hh")
    if [r for _, r in directions] not in ([False], [True], [False, True]) or any(
            p.get(n) is None or p[n].dtype != xs.dtype for p, _ in directions
            for n in names) or any(s.dtype != xs.dtype for s in state0):
        return None
    torch = sys.modules["torch"]
    if torch.compiler.is_compiling():
        return None
    return _torch_recurrence(torch, cell, [[p[n] for n in names] for p, _ in directions],
                             directions[0][1], xs, lengths, tuple(state0))


def _torch_recurrence(torch: Any, cell: str, weights: list[list[Any]], reverse: bool, xs: Any,
                      lengths: Any, state0: tuple[Any, ...]
                      ) -> list[tuple[Any, tuple[Any, ...]]] | None:
    """:func:`fused_recurrence` on PyTorch: ``weights`` one list per direction,
    ``reverse`` whether a single direction runs backwards."""
    rnn = torch.nn.utils.rnn
    steps, both = xs.shape[1], len(weights) == 2
    counts = lengths.to(device="cpu", dtype=torch.int64)
    if counts.numel() == 0 or not bool(((counts >= 1) & (counts <= steps)).all()):
        return None
    order = None
    if reverse:                                # each sequence's real tokens reversed
        t = torch.arange(steps, device=xs.device)[None, :]
        n = counts.to(xs.device)[:, None]
        order = torch.where(t < n, n - 1 - t, t)[..., None]              # (B, T, 1)
        xs = torch.gather(xs, 1, order.expand(-1, -1, xs.shape[2]))
    packed = rnn.pack_padded_sequence(xs, counts, batch_first=True, enforce_sorted=False)
    hx = [torch.stack([s.index_select(0, packed.sorted_indices)] * len(weights)) for s in state0]
    flat = [w for ws in weights for w in ws]
    train = torch.is_grad_enabled()
    if cell == "lstm":
        data, *final = torch.lstm(packed.data, packed.batch_sizes, hx, flat, True, 1, 0.0,
                                  train, both)
    else:
        data, *final = torch.gru(packed.data, packed.batch_sizes, hx[0], flat, True, 1, 0.0,
                                 train, both)
    outputs, _ = rnn.pad_packed_sequence(
        rnn.PackedSequence(data, packed.batch_sizes, packed.sorted_indices,
                           packed.unsorted_indices), batch_first=True, total_length=steps)
    if order is not None:
        outputs = torch.gather(outputs, 1, order.expand(-1, -1, outputs.shape[2]))
    hidden = outputs.shape[2] // len(weights)
    return [(outputs[..., d * hidden:(d + 1) * hidden],
             tuple(s[d].index_select(0, packed.unsorted_indices) for s in final))
            for d in range(len(weights))]
