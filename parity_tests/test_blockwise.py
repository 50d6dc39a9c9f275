"""Blockwise attention (:func:`xpseq.core.blockwise_attention`) against the plain path.

The plain path (:func:`xpseq.core.scaled_dot_product_attention`, which builds the whole
``(Q, K)`` weights) is the reference: the blockwise context must equal it to 1e-12 in
float64 on every backend, whatever the shapes, the block sizes (dividing the lengths or
not), the lengths, masks and causal masking, with rows that have no key and blocks whose
keys are all masked. The hand-derived backward (:func:`xpseq.core.vjp.blockwise_attention`)
must equal automatic differentiation of the plain path (JAX, PyTorch) and central
differences (NumPy) to the gradient tolerance; autodiff through the blockwise forward
must too. The memory test measures that no ``(Q, K)`` array is allocated.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xpseq.core as C
from xpseq import backends
from xpseq.core import blockwise, vjp
from xpseq.core.masking import lengths_for
from xpseq.testing import (
    FD_REL_ERR,
    GRAD_ATOL,
    GRAD_RTOL,
    assert_matches,
    central_difference_grad,
    relative_error,
)

NP = backends.get("numpy")
FIXTURE = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@st.composite
def problems(draw: st.DrawFn, *, max_len: int = 9) -> dict:
    """Arrays and masks of one call: batch, heads (keys and values shared across heads or
    not), query and key lengths from 0, depths, block sizes from 1, and one of: nothing
    masked, lengths ``(B,)``, lengths ``(B, Q)``, a boolean mask; causal when square."""
    b, h = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    n_q, n_k = draw(st.integers(0, max_len)), draw(st.integers(0, max_len))
    d, d_v = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    shared = draw(st.booleans())
    kv_heads = 1 if shared else h
    problem = {"q": rng.standard_normal((b, h, n_q, d)),
               "k": rng.standard_normal((b, kv_heads, n_k, d)),
               "v": rng.standard_normal((b, kv_heads, n_k, d_v)),
               "block_q": draw(st.integers(1, 5)), "block_k": draw(st.integers(1, 5)),
               "scale": draw(st.sampled_from([None, 0.5])), "lens": None, "mask": None,
               "causal": n_q == n_k and draw(st.booleans())}
    how = draw(st.sampled_from(["none", "lens", "lens_per_query", "mask"]))
    if how == "lens":
        problem["lens"] = rng.integers(0, n_k + 1, size=b)
    elif how == "lens_per_query":
        problem["lens"] = rng.integers(0, n_k + 1, size=(b, n_q))
    elif how == "mask":
        problem["mask"] = rng.random((b, 1, n_q, n_k)) < 0.5
    return problem


def plain_keep(problem: dict) -> np.ndarray | None:
    """The whole ``(B, H, Q, K)`` keep mask of a problem (what the plain path builds)."""
    q, k = problem["q"], problem["k"]
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    keep = np.ones(shape, dtype=bool)
    if problem["lens"] is not None:
        lens = problem["lens"]
        lens = lens[:, None, None] if lens.ndim == 1 else lens[:, None, :]
        keep &= np.arange(shape[-1]) < lens[..., None]
    if problem["mask"] is not None:
        keep &= problem["mask"]
    if problem["causal"]:
        keep &= np.tril(np.ones(shape[-2:], dtype=bool))
    return keep


def block_mask(problem: dict) -> blockwise.BlockMask:
    q, k = problem["q"], problem["k"]
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    lens = None if problem["lens"] is None else lengths_for("test", shape, problem["lens"],
                                                            xp=np)
    return blockwise.BlockMask(lens=lens, mask=problem["mask"], causal=problem["causal"])


def scale_of(problem: dict) -> float:
    return problem["scale"] or 1.0 / np.sqrt(problem["q"].shape[-1])


def on(be: backends.Backend, problem: dict) -> dict:
    """The problem's arrays on ``be``."""
    return {key: (be.asarray(value) if isinstance(value, np.ndarray) else value)
            for key, value in problem.items()}


# ------------------------------------------------------------------------------- values


@pytest.mark.slow_on("jax")            # (eager JAX compiles each new shape: 15 s)
@settings(max_examples=20, deadline=None, suppress_health_check=FIXTURE)
@given(problem=problems())
def test_the_context_equals_the_plain_paths(backend, problem):
    arrays = on(backend, problem)
    out, weights = C.blockwise_attention(
        arrays["q"], arrays["k"], arrays["v"], valid_lens=arrays["lens"],
        mask=arrays["mask"], causal=problem["causal"], empty="zero", scale=problem["scale"],
        block_q=problem["block_q"], block_k=problem["block_k"])
    assert weights is None
    keep = plain_keep(problem)
    reference, _ = C.scaled_dot_product_attention(problem["q"], problem["k"], problem["v"],
                                                  mask=keep, empty="zero",
                                                  scale=problem["scale"])
    assert_matches(backend, out, reference)
    rows_without_key = ~np.any(keep, axis=-1)
    assert np.all(backend.to_numpy(out)[rows_without_key] == 0.0)      # zeros, never NaN


@pytest.mark.slow_on("jax")
def test_a_row_without_a_key_is_the_plain_paths_error_or_zero(backend):
    rng = np.random.default_rng(3)
    q, k, v = (backend.asarray(rng.standard_normal((2, 4, 3))) for _ in range(3))
    lens = backend.asarray(np.array([4, 0]))
    for fn in (C.scaled_dot_product_attention, C.blockwise_attention):
        with pytest.raises(ValueError, match=r"query row \(1, 0\) .* has no valid key"):
            fn(q, k, v, valid_lens=lens)
    # The first key blocks of the second row are all masked, its later ones not: the
    # running maximum starts at -inf and the masked blocks add nothing.
    lens = backend.asarray(np.array([[4, 4, 4, 4], [0, 0, 3, 4]]))
    causal = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=bool)
    mask = backend.asarray(~causal[::-1, ::-1])          # the last keys kept
    out, _ = C.blockwise_attention(q, k, v, mask=mask, empty="zero", block_k=1, block_q=3)
    ref, _ = C.scaled_dot_product_attention(q, k, v, mask=mask, empty="zero")
    assert_matches(backend, out, backend.to_numpy(ref))
    out, _ = C.blockwise_attention(q, k, v, valid_lens=lens, empty="zero", block_k=2)
    ref, _ = C.scaled_dot_product_attention(q, k, v, valid_lens=lens, empty="zero")
    assert_matches(backend, out, backend.to_numpy(ref))


@pytest.mark.forward(quick=("dask",))             # (ndonnx: 7 s, the slow tier)
def test_the_forward_only_libraries_give_the_plain_context(forward_backend):
    be = forward_backend
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 2, 9, 3)) for _ in range(3))
    lens = np.array([[9, 9, 9, 9, 9, 9, 9, 9, 9], [0, 1, 2, 3, 4, 4, 4, 4, 0]])
    out, _ = C.blockwise_attention(*(be.asarray(x) for x in (q, k, v)), valid_lens=be.asarray(lens),
                                   causal=True, empty="zero", block_q=4, block_k=2)
    keep = np.tril(np.ones((9, 9), dtype=bool)) & (np.arange(9) < lens[:, None, :, None])
    reference, _ = C.scaled_dot_product_attention(q, k, v, mask=keep, empty="zero")
    assert_matches(be, out, reference)


@pytest.mark.slow_on("jax")
def test_float32_stays_within_float32_rounding(backend):
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 3, 37, 8)) for _ in range(3))
    lens = np.array([37, 20])
    out, _ = C.blockwise_attention(*(backend.asarray(x, dtype="float32") for x in (q, k, v)),
                                   valid_lens=backend.asarray(lens), block_q=8, block_k=16)
    reference, _ = C.scaled_dot_product_attention(q, k, v, valid_lens=lens)
    assert backend.to_numpy(out).dtype == np.float32
    assert relative_error(backend.to_numpy(out), reference) < 1e-6


# ---------------------------------------------------------------------------- gradients


def _plain_loss(problem: dict, cot: np.ndarray):
    keep = plain_keep(problem)

    def loss(q, k, v, xp):
        out, _ = C.scaled_dot_product_attention(q, k, v, mask=xp.asarray(keep), empty="zero",
                                                scale=problem["scale"])
        return xp.sum(out * xp.asarray(cot))

    return loss


@pytest.mark.slow_on("jax")            # (40 s)
@settings(max_examples=15, deadline=None, suppress_health_check=FIXTURE)
@given(problem=problems(max_len=7), seed=st.integers(0, 2**16))
def test_the_hand_derived_gradients_equal_autodiff_of_the_plain_path(grad_backend, problem,
                                                                     seed):
    be = grad_backend
    arrays = on(be, problem)
    out, backprop = vjp.blockwise_attention(
        arrays["q"], arrays["k"], arrays["v"], on_blocks(be, problem), scale_of(problem),
        problem["block_q"], problem["block_k"], xp=be.xp)
    cot = np.random.default_rng(seed).standard_normal(tuple(out.shape))
    grads = backprop(be.asarray(cot))
    loss = _plain_loss(problem, cot)
    _, reference = be.value_and_grad(lambda q, k, v: loss(q, k, v, be.xp), argnums=(0, 1, 2))(
        arrays["q"], arrays["k"], arrays["v"])
    for name, got, want in zip("qkv", grads, reference):
        assert_matches(be, got, be.to_numpy(want), rtol=GRAD_RTOL, atol=GRAD_ATOL,
                       err_msg=f"d{name}")

    def blockwise_loss(q, k, v):
        context, _ = C.blockwise_attention(
            q, k, v, valid_lens=arrays["lens"], mask=arrays["mask"], causal=problem["causal"],
            empty="zero", scale=problem["scale"], block_q=problem["block_q"],
            block_k=problem["block_k"])
        return be.xp.sum(context * be.asarray(cot))

    # Automatic differentiation through the blockwise forward: the other way to its gradient.
    _, through = be.value_and_grad(blockwise_loss, argnums=(0, 1, 2))(
        arrays["q"], arrays["k"], arrays["v"])
    for name, got, want in zip("qkv", through, reference):
        assert_matches(be, got, be.to_numpy(want), rtol=GRAD_RTOL, atol=GRAD_ATOL,
                       err_msg=f"autodiff d{name}")


def on_blocks(be: backends.Backend, problem: dict) -> blockwise.BlockMask:
    blocks = block_mask(problem)
    return blockwise.BlockMask(
        lens=None if blocks.lens is None else be.asarray(blocks.lens),
        mask=None if blocks.mask is None else be.asarray(blocks.mask), causal=blocks.causal)


@pytest.mark.parametrize("how", ["none", "lens", "causal"])
def test_the_hand_derived_gradients_equal_central_differences(how):
    rng = np.random.default_rng(11)
    problem = {"q": rng.standard_normal((2, 1, 5, 3)), "k": rng.standard_normal((2, 1, 5, 3)),
               "v": rng.standard_normal((2, 1, 5, 2)), "block_q": 2, "block_k": 3, "scale": None,
               "lens": np.array([5, 2]) if how == "lens" else None, "mask": None,
               "causal": how == "causal"}
    blocks, scale = block_mask(problem), scale_of(problem)
    out, backprop = vjp.blockwise_attention(problem["q"], problem["k"], problem["v"], blocks,
                                            scale, 2, 3, xp=np)
    cot = rng.standard_normal(out.shape)
    grads = backprop(cot)
    for n, name in enumerate("qkv"):
        def f(x, n=n):
            args = [problem["q"], problem["k"], problem["v"]]
            args[n] = x
            return float(np.sum(blockwise.forward(*args, blocks, scale, 2, 3, xp=np)[0] * cot))

        numeric = central_difference_grad(f, problem[name])
        assert relative_error(grads[n], numeric) < FD_REL_ERR, name


# -------------------------------------------------------------------- memory and errors


def test_no_quadratic_array_is_allocated():
    """At 4,096 queries and keys the weights alone take 128 MiB (float64); the blockwise
    forward and backward peak below 4 MiB (tracemalloc counts NumPy's buffers)."""
    rng = np.random.default_rng(0)
    n, d = 4096, 8
    q, k, v = (rng.standard_normal((1, n, d)) for _ in range(3))
    blocks = blockwise.BlockMask(lens=np.array([n - 5]).reshape(1, 1), causal=True)
    tracemalloc.start()
    try:
        out, backprop = vjp.blockwise_attention(q, k, v, blocks, 0.3, 256, 256, xp=np)
        backprop(np.ones_like(out))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    assert n * n * 8 > 30 * peak


@pytest.mark.parametrize(("kwargs", "error", "says"), [
    ({"need_weights": True}, ValueError, "never builds"),
    ({"block_q": 0}, ValueError, "block_q must be a positive int, got 0"),
    ({"block_k": 2.0}, TypeError, "block_k must be a positive int, got float 2.0"),
    ({"block_q": np.bool_(True)}, TypeError, "block_q must be a positive int, got bool"),
    ({"causal": 1}, TypeError, "causal must be True or False, got int 1"),
    ({"empty": "nan"}, ValueError, "empty must be 'error' or 'zero'"),
    ({"mask": np.ones((2, 4), dtype=np.int8)}, TypeError, "mask must have a bool dtype"),
    ({"valid_lens": np.array([5, 1])}, ValueError, r"valid_lens must be <= 4"),
])
def test_bad_arguments_are_named(kwargs, error, says):
    q = k = v = np.ones((2, 4, 3))
    with pytest.raises(error, match=says):
        C.blockwise_attention(q, k, v, **kwargs)
    with pytest.raises(ValueError, match="has depth 3 but k has depth 2"):
        C.blockwise_attention(q, np.ones((2, 4, 2)), v)
    big = np.full((1, 2, 1), 1e200)
    with np.errstate(over="ignore", invalid="ignore"), \
            pytest.raises(ValueError, match="q kᵀ overflows"):
        C.blockwise_attention(big, big, v[:1, :2])


@pytest.mark.slow_on("jax")        # (eager scans compile; the jitted program: below)
@pytest.mark.parametrize("masked", [False, True])
def test_the_hand_derived_attention_is_each_librarys_gradient(grad_backend, masked):
    """``hand_derived_attention`` through ``backend.custom_vjp`` (jax.custom_vjp, a torch
    autograd.Function) gives the plain path's gradients, under jit on JAX too."""
    be = grad_backend
    rng = np.random.default_rng(13)
    problem = {"q": rng.standard_normal((2, 2, 7, 3)), "k": rng.standard_normal((2, 1, 6, 3)),
               "v": rng.standard_normal((2, 1, 6, 2)), "block_q": 3, "block_k": 4,
               "scale": None, "lens": np.array([[6, 5, 4, 3, 2, 1, 0], [6] * 7]) if masked
               else None, "mask": None, "causal": False}
    cot = rng.standard_normal((2, 2, 7, 2))
    attention = blockwise.hand_derived_attention(causal=False, scale=scale_of(problem),
                                                 block_q=3, block_k=4,
                                                 custom_vjp=be.custom_vjp, xp=be.xp)
    blocks = on_blocks(be, problem)

    def loss(q, k, v):
        return be.xp.sum(attention(q, k, v, blocks.lens, blocks.mask) * be.asarray(cot))

    arrays = on(be, problem)
    plain = _plain_loss(problem, cot)
    _, reference = be.value_and_grad(lambda q, k, v: plain(q, k, v, be.xp), argnums=(0, 1, 2))(
        arrays["q"], arrays["k"], arrays["v"])
    for fn in (be.value_and_grad(loss, argnums=(0, 1, 2)),
               be.jit(be.value_and_grad(loss, argnums=(0, 1, 2)))):
        _, grads = fn(arrays["q"], arrays["k"], arrays["v"])
        for name, got, want in zip("qkv", grads, reference):
            assert_matches(be, got, be.to_numpy(want), rtol=GRAD_RTOL, atol=GRAD_ATOL,
                           err_msg=f"d{name}")


def test_a_jitted_program_holds_one_copy_of_each_loop_whatever_the_length():
    """On JAX the loops over blocks are ``lax.scan``: the traced program of the forward and
    hand-derived backward has as many equations at 4,096 tokens in 256 blocks a side as at
    64 tokens in 4 (a Python loop would repeat its body once per block)."""
    jax = pytest.importorskip("jax")
    be = backends.get("jax")
    attention = blockwise.hand_derived_attention(causal=True, scale=0.5, block_q=16,
                                                 block_k=16, custom_vjp=be.custom_vjp,
                                                 xp=be.xp)

    def size(n: int) -> int:
        x = jax.ShapeDtypeStruct((1, 2, n, 4), np.float32)

        def loss(q, k, v):
            return be.xp.sum(attention(q, k, v, None, None))
        closed = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(x, x, x)
        assert str(closed).count("scan[") >= 4, "the forward's and backward's nested loops"
        return equations(closed.jaxpr)

    assert size(64) == size(4096)


def equations(jaxpr) -> int:
    """The equations of a jaxpr, those of the programs inside its equations included."""
    count = 0
    for eqn in jaxpr.eqns:
        count += 1
        for param in eqn.params.values():
            for sub in (param if isinstance(param, (list, tuple)) else (param,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    count += equations(inner)
    return count
