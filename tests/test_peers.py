"""xpseq against the frameworks' own attention, in float64.

Masks: xpseq and ``torch.nn.functional.scaled_dot_product_attention`` (boolean
``attn_mask``) and ``jax.nn.dot_product_attention`` (``mask``) all use True = attend;
``torch.nn.MultiheadAttention``'s ``key_padding_mask`` uses True = IGNORE.

The last tests record what each library does with a query that has no valid key, and
what the finite ``-1e6`` sentinel of D2L's masked softmax does, next to xpseq's answer.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import xpseq.core as C
from xpseq import backends

RTOL, ATOL = 1e-12, 1e-14

B, H, Q, K, D, DV = 2, 3, 4, 5, 6, 7


def _rng(seed=0):
    return np.random.default_rng(seed)


def qkv(seed=0, dv=DV):
    rng = _rng(seed)
    return (rng.standard_normal((B, H, Q, D)), rng.standard_normal((B, H, K, D)),
            rng.standard_normal((B, H, K, dv)))


def partial_mask(kind: str) -> np.ndarray:
    """A boolean mask (True = attend) that masks some keys of every row, none entirely."""
    if kind == "full":  # (B, H, Q, K): random, every row keeps at least one key
        rng = _rng(1)
        mask = rng.random((B, H, Q, K)) < 0.6
        mask[..., 0] |= ~mask.any(axis=-1)
        mask[0, 0, 0] = [True, False, False, False, False]  # a single valid key
    else:  # key padding (B, 1, 1, K): lengths 3 and 5
        mask = (np.arange(K) < np.array([3, 5])[:, None])[:, None, None, :]
    assert mask.any(axis=-1).all() and not mask.all()
    return mask


def xpseq_sdpa_on(name, q, k, v, mask, scale):
    """xpseq's context and weights computed on backend ``name``, as NumPy arrays."""
    be = backends.get(name)
    ctx, w = C.scaled_dot_product_attention(be.asarray(q), be.asarray(k), be.asarray(v),
                                            mask=be.asarray(mask), scale=scale)
    return be.to_numpy(ctx), be.to_numpy(w)


# ---------------------------------------------- torch scaled_dot_product_attention


@pytest.mark.parametrize("scale", [None, 0.37], ids=["default_scale", "scale_0.37"])
@pytest.mark.parametrize("mask_kind", ["full", "key_padding"])
def test_sdpa_matches_torch_sdpa_with_partial_mask(mask_kind, scale):
    torch = pytest.importorskip("torch")
    q, k, v = qkv()
    mask = partial_mask(mask_kind)
    kwargs = {} if scale is None else {"scale": scale}
    expected = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
        attn_mask=torch.from_numpy(mask), **kwargs).numpy()
    assert expected.dtype == np.float64 and expected.shape == (B, H, Q, DV)

    ctx_t, w_t = xpseq_sdpa_on("torch", q, k, v, mask, scale)
    ctx_n, w_n = xpseq_sdpa_on("numpy", q, k, v, mask, scale)
    for ctx in (ctx_t, ctx_n):
        assert ctx.dtype == np.float64
        np.testing.assert_allclose(ctx, expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(w_t, w_n, rtol=RTOL, atol=ATOL)
    full = np.broadcast_to(mask, w_n.shape)
    assert np.all(w_n[~full] == 0.0) and np.all(w_t[~full] == 0.0)
    np.testing.assert_allclose(w_n.sum(axis=-1), 1.0, rtol=1e-14)


def test_sdpa_matches_torch_sdpa_on_float64_without_mask():
    torch = pytest.importorskip("torch")
    q, k, v = qkv(3)
    expected = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v)).numpy()
    ctx, _ = C.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(ctx, expected, rtol=RTOL, atol=ATOL)


# ------------------------------------------------------ torch MultiheadAttention

E, NH = 8, 2


def _torch_mha(torch, kdim=None, vdim=None, seed=5):
    """A float64 nn.MultiheadAttention with random (non-zero) weights and biases."""
    mha = torch.nn.MultiheadAttention(E, NH, batch_first=True, dtype=torch.float64,
                                      kdim=kdim, vdim=vdim)
    rng = _rng(seed)
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)) * 0.5))
    return mha


def _xpseq_params(mha):
    """``torch.nn.MultiheadAttention``'s weights in xpseq's layout, as NumPy arrays."""
    def np_(t):
        return t.detach().numpy().copy()

    if mha._qkv_same_embed_dim:
        W_q, W_k, W_v = np.split(np_(mha.in_proj_weight), 3, axis=0)
    else:
        W_q, W_k, W_v = np_(mha.q_proj_weight), np_(mha.k_proj_weight), np_(mha.v_proj_weight)
    b_q, b_k, b_v = np.split(np_(mha.in_proj_bias), 3)
    return {"W_q": W_q, "W_k": W_k, "W_v": W_v, "W_o": np_(mha.out_proj.weight),
            "b_q": b_q, "b_k": b_k, "b_v": b_v, "b_o": np_(mha.out_proj.bias)}


@pytest.mark.parametrize("dims", [(None, None), (4, 6)], ids=["same_dims", "kdim4_vdim6"])
@pytest.mark.parametrize("how", ["mask", "valid_lens"])
def test_mha_matches_torch_multihead_attention(dims, how):
    torch = pytest.importorskip("torch")
    kdim, vdim = dims
    mha = _torch_mha(torch, kdim, vdim)
    params = _xpseq_params(mha)
    rng = _rng(7)
    Tq, Tk = 3, 5
    x_q = rng.standard_normal((B, Tq, E))
    x_k = rng.standard_normal((B, Tk, kdim or E))
    x_v = rng.standard_normal((B, Tk, vdim or E))
    lengths = np.array([2, 4])
    ignore = np.arange(Tk) >= lengths[:, None]          # torch: True = IGNORE
    with torch.no_grad():
        out, w = mha(torch.from_numpy(x_q), torch.from_numpy(x_k), torch.from_numpy(x_v),
                     key_padding_mask=torch.from_numpy(ignore), need_weights=True,
                     average_attn_weights=False)
    out, w = out.numpy(), w.numpy()
    assert w.shape == (B, NH, Tq, Tk)

    for name in ("torch", "numpy"):
        be = backends.get(name)
        kw = ({"mask": be.asarray(~ignore[:, None, :])} if how == "mask"   # True = attend
              else {"valid_lens": be.asarray(lengths)})
        ctx, weights = C.multi_head_attention(
            {n: be.asarray(a) for n, a in params.items()}, be.asarray(x_q),
            be.asarray(x_k), be.asarray(x_v), num_heads=NH, **kw)
        ctx, weights = be.to_numpy(ctx), be.to_numpy(weights)
        assert ctx.shape == (B, Tq, E) and weights.shape == (B, NH, Tq, Tk)
        np.testing.assert_allclose(ctx, out, rtol=RTOL, atol=ATOL, err_msg=name)
        np.testing.assert_allclose(weights, w, rtol=RTOL, atol=ATOL, err_msg=name)
        assert np.all(weights[0, :, :, 2:] == 0.0)


# ------------------------------------------------------- fully masked query rows


def _empty_row_inputs(dv=DV):
    """q, k, v of shape (B, H, Q, ·) and a mask whose row [0, 1, 2] is all False."""
    q, k, v = qkv(11, dv)
    mask = partial_mask("full").copy()
    mask[0, 1, 2, :] = False
    return q, k, v, mask


def test_torch_sdpa_fully_masked_row_gives_zeros():
    torch = pytest.importorskip("torch")
    q, k, v, mask = _empty_row_inputs()
    out = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
        attn_mask=torch.from_numpy(mask)).numpy()
    # torch (2.5+) returns zeros for a query with no valid key, not NaN.
    assert np.all(out[0, 1, 2] == 0.0)
    assert np.isfinite(out).all()
    ctx, _ = C.scaled_dot_product_attention(q, k, v, mask=mask, empty="zero")
    np.testing.assert_allclose(ctx, out, rtol=RTOL, atol=ATOL)  # same answer everywhere


def test_jax_dot_product_attention_fully_masked_row_gives_mean_of_values():
    jax = pytest.importorskip("jax")
    jnp = backends.get("jax").xp  # x64 on
    q, k, v, mask = _empty_row_inputs(dv=D)  # jax wants values shaped like keys
    # jax's layout is (batch, length, heads, depth); its mask is (batch, heads, Q, K).
    to_jax = lambda a: jnp.asarray(np.swapaxes(a, 1, 2))  # noqa: E731
    out = jax.nn.dot_product_attention(to_jax(q), to_jax(k), to_jax(v),
                                       mask=jnp.asarray(mask))
    out = np.swapaxes(np.asarray(out), 1, 2)
    # The masked logits are replaced by one large finite negative number, so an all-masked
    # row is a softmax of equal numbers: uniform weights, the mean of the values (to
    # float32 precision: see the next test).
    np.testing.assert_allclose(out[0, 1, 2], v[0, 1].mean(axis=0), rtol=1e-5, atol=1e-6)
    assert not np.allclose(out[0, 1, 2], 0.0)


def test_jax_dot_product_attention_float64_only_matches_to_float32_precision():
    jax = pytest.importorskip("jax")
    jnp = backends.get("jax").xp
    q, k, v = qkv(13, dv=D)  # jax wants values shaped like keys
    mask = partial_mask("full")
    to_jax = lambda a: jnp.asarray(np.swapaxes(a, 1, 2))  # noqa: E731
    out = jax.nn.dot_product_attention(to_jax(q), to_jax(k), to_jax(v),
                                       mask=jnp.asarray(mask))
    assert out.dtype == np.float64   # float64 in, float64 out ...
    out = np.swapaxes(np.asarray(out), 1, 2)
    ctx, _ = C.scaled_dot_product_attention(q, k, v, mask=mask)
    err = np.max(np.abs(out - ctx)) / np.max(np.abs(ctx))
    # ... but jax.nn.dot_product_attention (jax 0.10, implementation "xla") casts the
    # logits to float32 for the softmax ("Softmax and it is always carried out in fp32"
    # in jax/_src/nn/functions.py) and casts the probabilities back, so it agrees with
    # xpseq only to float32 precision (observed ~1e-7 relative), never to 1e-12. Use it as
    # a float32-accurate peer only. If this starts failing on the lower bound, jax now
    # computes float64 attention in float64: tighten the tolerance to 1e-12.
    assert 1e-10 < err < 1e-5, err
    np.testing.assert_allclose(out, ctx, rtol=1e-5, atol=1e-6)


def test_torch_multihead_attention_all_keys_padded_gives_nan():
    torch = pytest.importorskip("torch")
    mha = _torch_mha(torch)
    rng = _rng(17)
    x = torch.from_numpy(rng.standard_normal((B, 3, E)))
    ignore = torch.zeros((B, 4), dtype=torch.bool)
    ignore[0, :] = True                                  # batch element 0: every key padded
    y = torch.from_numpy(rng.standard_normal((B, 4, E)))
    with torch.no_grad():
        out, w = mha(x, y, y, key_padding_mask=ignore, need_weights=True,
                     average_attn_weights=False)
    # Observed with torch 2.13: NaN output and NaN weights for the fully padded element
    # (its key_padding_mask becomes -inf everywhere and softmax(-inf, ..., -inf) is
    # 0/0), while the functional SDPA above returns zeros; the other element is fine.
    assert torch.isnan(out[0]).all()
    assert torch.isnan(w[0]).all()
    assert torch.isfinite(out[1]).all() and torch.isfinite(w[1]).all()


def test_xpseq_fully_masked_row_zero_or_error(backend):
    q, k, v, mask = _empty_row_inputs()
    args = [backend.asarray(a) for a in (q, k, v)]
    ctx, w = C.scaled_dot_product_attention(*args, mask=backend.asarray(mask), empty="zero")
    ctx, w = backend.to_numpy(ctx), backend.to_numpy(w)
    assert np.all(ctx[0, 1, 2] == 0.0) and np.all(w[0, 1, 2] == 0.0)
    assert np.isfinite(ctx).all() and np.isfinite(w).all()
    other = np.ones(w.shape[:-1], bool)
    other[0, 1, 2] = False
    np.testing.assert_allclose(w.sum(axis=-1)[other], 1.0, rtol=1e-14)
    with pytest.raises(ValueError, match="no valid key"):
        C.scaled_dot_product_attention(*args, mask=backend.asarray(mask))
    with pytest.raises(ValueError, match="no valid key"):
        C.scaled_dot_product_attention(*args, mask=backend.asarray(mask), empty="error")


def test_xpseq_mha_all_keys_padded(backend):
    """Where torch's MultiheadAttention gives NaN, xpseq pools zero (output = b_o)."""
    rng = _rng(19)
    d = {"W_q": (E, E), "W_k": (E, E), "W_v": (E, E), "W_o": (E, E),
         "b_q": (E,), "b_k": (E,), "b_v": (E,), "b_o": (E,)}
    params_np = {n: rng.standard_normal(s) for n, s in d.items()}
    params = {n: backend.asarray(a) for n, a in params_np.items()}
    x = backend.asarray(rng.standard_normal((B, 3, E)))
    y = backend.asarray(rng.standard_normal((B, 4, E)))
    lens = backend.asarray([0, 3])
    out, w = C.multi_head_attention(params, x, y, y, num_heads=NH, valid_lens=lens,
                                    empty="zero")
    out, w = backend.to_numpy(out), backend.to_numpy(w)
    assert np.all(w[0] == 0.0)
    np.testing.assert_array_equal(out[0], np.broadcast_to(params_np["b_o"], (3, E)))
    assert np.isfinite(out).all()
    with pytest.raises(ValueError, match="no valid key"):
        C.multi_head_attention(params, x, y, y, num_heads=NH, valid_lens=lens)


# --------------------------------------------------- the finite -1e6 sentinel


def d2l_masked_softmax(scores: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """D2L's masked softmax: fill masked scores with -1e6, then an ordinary softmax."""
    filled = np.where(keep, scores, -1e6)
    e = np.exp(filled - filled.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_sentinel_gives_uniform_row_where_xpseq_gives_zeros(backend):
    scores = np.array([[0.3, -1.2, 2.0, 0.5], [1.0, 4.0, -2.0, 0.0]])
    keep = np.array([[True, True, False, True], [False, False, False, False]])
    sentinel = d2l_masked_softmax(scores, keep)
    np.testing.assert_allclose(sentinel[1], np.full(4, 0.25), rtol=1e-15)  # uniform
    ours = backend.to_numpy(C.masked_softmax(backend.asarray(scores),
                                             mask=backend.asarray(keep), empty="zero"))
    assert np.all(ours[1] == 0.0)
    # The partially masked row agrees.
    np.testing.assert_allclose(ours[0], sentinel[0], rtol=1e-14, atol=1e-300)
    assert ours[0, 2] == 0.0


def test_sentinel_puts_weight_on_masked_keys_below_minus_1e6(backend):
    scores = np.array([[-2e6, -3e6, 5.0, 1.0], [-2e6, -2e6 - 1.0, 0.0, 0.0]])
    keep = np.array([[True, True, False, False], [True, True, False, False]])
    sentinel = d2l_masked_softmax(scores, keep)
    # The -1e6 fill beats every valid score: all the weight goes to the masked keys.
    np.testing.assert_allclose(sentinel[:, 2:], 0.5, rtol=1e-15)
    assert np.all(sentinel[:, :2] == 0.0)
    ours = backend.to_numpy(C.masked_softmax(backend.asarray(scores),
                                             mask=backend.asarray(keep)))
    assert np.all(ours[:, 2:] == 0.0)
    np.testing.assert_allclose(ours[0], [1.0, 0.0, 0.0, 0.0], rtol=1e-15)
    e = 1.0 / (1.0 + math.exp(-1.0))
    np.testing.assert_allclose(ours[1], [e, 1.0 - e, 0.0, 0.0], rtol=1e-14)
