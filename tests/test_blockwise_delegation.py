"""Blockwise attention delegated to PyTorch's fused kernel
(:func:`xpseq.core.delegation.fused_blockwise_attention`): the same values and gradients as
the written-once blockwise loops in float64 and float32, under every kind of mask, the same
empty-row policy, the kernel taken where it applies (its CPU flash kernel, memory linear) and
the loops elsewhere: on NumPy and JAX always, on PyTorch wherever a ``(Q, K)`` mask or a row
without a key would be involved."""

from __future__ import annotations

import math

import numpy as np
import pytest

import xpseq.core as C
from xpseq import backends
from xpseq.core import blockwise, delegation, masking, vjp

torch = pytest.importorskip("torch")

B, H, Q, K, D = 2, 3, 9, 9, 4
BLOCK = 4                                       # several blocks per axis
TOL = {np.float64: dict(rtol=1e-12, atol=1e-13), np.float32: dict(rtol=2e-5, atol=2e-6)}
GRAD_TOL = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=1e-5, atol=1e-5)}
DTYPES = [np.float64, np.float32]


def inputs(dtype, q_len=Q, k_len=K, lead=(B, H), seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((*lead, n, D)).astype(dtype) for n in (q_len, k_len, k_len))


def key_mask(k_len=K, seed=1):
    """A key-padding mask ``(B, 1, 1, K)`` that keeps key 0 of every row (so that causal
    rows keep a key too) and drops some others."""
    rng = np.random.default_rng(seed)
    m = rng.random((B, 1, 1, k_len)) > 0.4
    m[..., 0] = True
    return m


#: name -> (keyword arguments of blockwise_attention, whether PyTorch's kernel applies)
CASES = {
    "none": (lambda: {}, True),
    "causal": (lambda: {"causal": True}, True),
    "lens": (lambda: {"valid_lens": np.array([9, 4])}, True),
    "lens causal": (lambda: {"valid_lens": np.array([9, 4]), "causal": True}, True),
    "key mask": (lambda: {"mask": key_mask()}, True),
    "key mask causal": (lambda: {"mask": key_mask(), "causal": True}, True),
    "key mask lens": (lambda: {"mask": key_mask(), "valid_lens": np.array([5, 9])}, True),
    "key vector": (lambda: {"mask": key_mask()[0, 0, 0]}, True),
    "lens per query": (lambda: {"valid_lens": np.tile(np.arange(1, Q + 1), (B, 1))}, False),
    "full mask": (lambda: {"mask": np.tril(np.ones((Q, K), dtype=bool))}, False),
}


def torch_args(kwargs):
    return {n: torch.from_numpy(x) if isinstance(x, np.ndarray) else x
            for n, x in kwargs.items()}


@pytest.fixture
def spies(monkeypatch):
    """Count the calls of PyTorch's SDPA, of its CPU flash operator and of the blockwise
    loops' forward and backward passes."""
    calls = {"sdpa": [], "flash": 0, "forward": 0, "backward": 0}
    real_sdpa = torch.nn.functional.scaled_dot_product_attention

    def sdpa(*args, **kwargs):
        calls["sdpa"].append((args, kwargs))
        return real_sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", sdpa)
    for name in ("forward", "backward"):
        real = getattr(blockwise, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(blockwise, name, spy)
    return calls


def flash_applies(args, kwargs):
    """Whether PyTorch picks its CPU flash kernel (memory linear) for the arguments given
    to SDPA, rather than the generic kernel that builds the ``(Q, K)`` scores."""
    from torch.nn.attention import SDPBackend

    choice = torch._fused_sdp_choice(*args[:3], kwargs.get("attn_mask"), 0.0,
                                     kwargs.get("is_causal", False))
    return choice == SDPBackend.FLASH_ATTENTION.value


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(CASES))
def test_the_same_context_as_the_loops_under_every_mask(dtype, case, spies):
    make, applies = CASES[case]
    kwargs = make()
    q, k, v = inputs(dtype)
    ref, _ = C.blockwise_attention(q, k, v, block_q=BLOCK, block_k=BLOCK, **kwargs)
    assert spies["forward"] == 1
    out, _ = C.blockwise_attention(*map(torch.from_numpy, (q, k, v)), block_q=BLOCK,
                                   block_k=BLOCK, **torch_args(kwargs))
    assert out.dtype == torch.from_numpy(q).dtype and tuple(out.shape) == ref.shape
    np.testing.assert_allclose(out.numpy(), ref, **TOL[dtype])
    assert spies["forward"] == (1 if applies else 2)       # the loops: only where it falls back
    causal_and_mask = kwargs.get("causal") and ("mask" in kwargs or "valid_lens" in kwargs)
    assert len(spies["sdpa"]) == (1 if applies and not causal_and_mask else 0)
    for args, kw in spies["sdpa"]:
        assert flash_applies(args, kw)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("q_len,k_len", [(9, 5), (5, 9), (1, 7)])
@pytest.mark.parametrize("masked", [False, True])
def test_causal_rows_see_keys_up_to_their_own_position_when_lengths_differ(
        dtype, q_len, k_len, masked, spies):
    q, k, v = inputs(dtype, q_len, k_len)
    kwargs = {"causal": True, **({"mask": key_mask(k_len)} if masked else {})}
    ref, _ = C.blockwise_attention(q, k, v, block_q=BLOCK, block_k=BLOCK, **kwargs)
    out, _ = C.blockwise_attention(*map(torch.from_numpy, (q, k, v)), block_q=BLOCK,
                                   block_k=BLOCK, **torch_args(kwargs))
    np.testing.assert_allclose(out.numpy(), ref, **TOL[dtype])
    assert spies["forward"] == 1                               # the reference's alone


@pytest.mark.parametrize("lead", [(), (B,), (B, H, 2)])
def test_other_leading_shapes_are_flattened_for_the_flash_kernel(lead, spies):
    q, k, v = inputs(np.float64, lead=lead)
    mask = np.ones((*lead, 1, K), dtype=bool)
    mask[..., K - 3:] = False
    ref, _ = C.blockwise_attention(q, k, v, mask=mask, block_q=BLOCK, block_k=BLOCK)
    out, _ = C.blockwise_attention(*map(torch.from_numpy, (q, k, v)),
                                   mask=torch.from_numpy(mask), block_q=BLOCK, block_k=BLOCK)
    np.testing.assert_allclose(out.numpy(), ref, **TOL[np.float64])
    assert spies["forward"] == 1 and len(spies["sdpa"]) == 1
    args, kw = spies["sdpa"][0]
    assert all(a.ndim == 4 for a in args[:3]) and flash_applies(args, kw)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("how", ["lens", "mask"])
def test_a_row_without_a_key_falls_back_to_the_loops_policy(causal, how, spies):
    """A zero row with ``empty="zero"``, the loops' ValueError with ``"error"``; never NaN."""
    q, k, v = inputs(np.float64)
    if how == "lens":
        kwargs = {"valid_lens": np.array([9, 0])}
    else:
        mask = key_mask()
        mask[1, ..., 0] = False                      # row 0 of batch 1: none when causal
        if not causal:
            mask[1] = False
        kwargs = {"mask": mask}
    kwargs["causal"] = causal
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    ref, _ = C.blockwise_attention(q, k, v, empty="zero", block_q=BLOCK, block_k=BLOCK, **kwargs)
    out, _ = C.blockwise_attention(tq, tk, tv, empty="zero", block_q=BLOCK, block_k=BLOCK,
                                   **torch_args(kwargs))
    assert not torch.isnan(out).any()
    np.testing.assert_allclose(out.numpy(), ref, **TOL[np.float64])
    assert np.all(ref[1, :, 0] == 0)
    with pytest.raises(ValueError, match="has no valid key"):
        C.blockwise_attention(tq, tk, tv, block_q=BLOCK, block_k=BLOCK, **torch_args(kwargs))
    assert spies["sdpa"] == []


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["none", "causal", "lens", "key mask", "key mask causal",
                                  "lens per query"])
def test_gradients_under_autograd_are_the_hand_derived_rules(dtype, case, spies):
    """``hand_derived_attention`` on PyTorch: where the kernel applies, its context and
    autograd's backward of it (the rule's loops not run); elsewhere the rule. Both equal
    the hand-derived rule of the loops run on NumPy (float64 to 1e-10)."""
    make, applies = CASES[case]
    kwargs = make()
    q, k, v = inputs(dtype)
    g = np.random.default_rng(5).standard_normal(q.shape).astype(dtype)
    scale = 1.0 / math.sqrt(D)
    causal = kwargs.get("causal", False)
    shape = (B, H, Q, K)
    lens = (None if "valid_lens" not in kwargs else masking.lengths_for(
        "test", shape, kwargs["valid_lens"], xp=backends.get("numpy").xp))
    mask = kwargs.get("mask")
    np_xp = backends.get("numpy").xp
    ref, backprop = vjp.blockwise_attention(q, k, v, blockwise.BlockMask(lens, mask, causal),
                                            scale, BLOCK, BLOCK, xp=np_xp)
    ref_grads = backprop(g)
    spies["backward"] = 0

    be = backends.get("torch")
    attention = blockwise.hand_derived_attention(causal=causal, scale=scale, block_q=BLOCK,
                                                 block_k=BLOCK, custom_vjp=be.custom_vjp,
                                                 xp=be.xp)
    tq, tk, tv = (torch.from_numpy(x).requires_grad_(True) for x in (q, k, v))
    tlens = None if lens is None else torch.from_numpy(np.asarray(lens))
    tmask = None if mask is None else torch.from_numpy(mask)
    out = attention(tq, tk, tv, tlens, tmask)
    grads = torch.autograd.grad((out * torch.from_numpy(g)).sum(), (tq, tk, tv))
    np.testing.assert_allclose(out.detach().numpy(), ref, **TOL[dtype])
    for name, got, want in zip("qkv", grads, ref_grads):
        np.testing.assert_allclose(got.numpy(), want, err_msg=name, **GRAD_TOL[dtype])
    assert spies["backward"] == (0 if applies else 1)
    assert spies["sdpa"] == [] or applies


@pytest.mark.parametrize("name", ["numpy", "jax"])
def test_numpy_and_jax_run_the_loops(name, spies):
    if name == "jax":
        pytest.importorskip("jax")
    be = backends.get(name)
    assert not delegation.delegates("fused_blockwise_attention", be.xp)
    q, k, v = (be.asarray(x) for x in inputs(np.float32))
    C.blockwise_attention(q, k, v, block_q=BLOCK, block_k=BLOCK)
    attention = blockwise.hand_derived_attention(causal=True, scale=0.5, block_q=BLOCK,
                                                 block_k=BLOCK, custom_vjp=be.custom_vjp,
                                                 xp=be.xp)
    attention(q, k, v, None, None)
    assert spies["forward"] == 2 and spies["sdpa"] == []


def test_torch_delegates_and_falls_back_where_the_kernel_differs(spies):
    xp = backends.get("torch").xp
    assert delegation.delegates("fused_blockwise_attention", xp)
    assert "``fused_blockwise_attention``  torch (CPU)" in delegation.__doc__
    q, k, v = (torch.from_numpy(x) for x in inputs(np.float32))
    fused = delegation.fused_blockwise_attention
    assert fused(q, k, v, None, None, False, 0.5, xp=xp) is not None
    # bfloat16 (the loops compute it in float32), a value depth other than the key's
    assert fused(*(x.to(torch.bfloat16) for x in (q, k, v)), None, None, False, 0.5,
                 xp=xp) is None
    assert fused(q, k, v[..., :2], None, None, False, 0.5, xp=xp) is None
    # no queries or no keys, leading shapes that only broadcast
    assert fused(q[..., :0, :], k, v, None, None, False, 0.5, xp=xp) is None
    assert fused(q, k[:1], v[:1], None, None, False, 0.5, xp=xp) is None
    # a mask over keys whose key axis broadcasts
    assert fused(q, k, v, None, torch.ones((B, 1, 1, 1), dtype=torch.bool), False, 0.5,
                 xp=xp) is None
    # the bfloat16 context through the public function is the loops'
    spies["sdpa"].clear()
    out, _ = C.blockwise_attention(*(x.to(torch.bfloat16) for x in (q, k, v)))
    assert out.dtype == torch.bfloat16 and spies["forward"] >= 1 and spies["sdpa"] == []


@pytest.mark.parametrize("how, causal", [("lens", False), ("lens", True), ("mask", False)])
def test_compiled_masks_take_the_kernel_with_the_loops_zero_row(how, causal):
    """Under ``torch.compile`` the masks' values are not known: lengths, and key masks
    without causality, still take the kernel (a sequence that keeps no key attends to all
    its keys, its context then zeroed), giving the loops' values and gradients, a zero row
    for that sequence, no NaN."""
    q, k, v = inputs(np.float64)
    g = np.random.default_rng(5).standard_normal(q.shape)
    lens = mask = None
    if how == "lens":
        valid = np.array([4, 0]) if causal else np.array([9, 0])
        lens = masking.lengths_for("test", (B, H, Q, K), valid, xp=backends.get("numpy").xp)
    else:
        mask = key_mask()
        mask[1] = False                                  # batch row 1 keeps no key
    np_xp = backends.get("numpy").xp
    ref, backprop = vjp.blockwise_attention(q, k, v, blockwise.BlockMask(lens, mask, causal),
                                            0.5, BLOCK, BLOCK, xp=np_xp)
    ref_grads = backprop(g)
    xp = backends.get("torch").xp

    def attend(tq, tk, tv, tlens, tmask):
        out = delegation.fused_blockwise_attention(tq, tk, tv, tlens, tmask, causal, 0.5,
                                                   xp=xp)
        return (out * torch.from_numpy(g)).sum(), out

    compiled = torch.compile(attend, dynamic=False, fullgraph=True)
    tq, tk, tv = (torch.from_numpy(x).requires_grad_(True) for x in (q, k, v))
    value, out = compiled(tq, tk, tv, None if lens is None else torch.from_numpy(lens),
                          None if mask is None else torch.from_numpy(mask))
    grads = torch.autograd.grad(value, (tq, tk, tv))
    np.testing.assert_allclose(out.detach().numpy(), ref, **TOL[np.float64])
    assert np.all(out.detach().numpy()[1] == 0)
    for name, got, want in zip("qkv", grads, ref_grads):
        assert not torch.isnan(got).any()
        np.testing.assert_allclose(got.numpy(), want, err_msg=name, **GRAD_TOL[np.float64])


def test_a_compiled_causal_mask_falls_back_to_the_loops():
    """A causal key mask whose values are not known could leave a row without a key while
    later rows of its sequence keep one: under ``torch.compile`` it is not delegated."""
    xp = backends.get("torch").xp
    q, k, v = (torch.from_numpy(x) for x in inputs(np.float32))

    def delegated(tq, tk, tv, tmask):
        return delegation.fused_blockwise_attention(tq, tk, tv, None, tmask, True, 0.5,
                                                    xp=xp) is not None

    assert delegated(q, k, v, torch.from_numpy(key_mask()))
    assert not torch.compile(delegated, fullgraph=True)(q, k, v, torch.from_numpy(key_mask()))
