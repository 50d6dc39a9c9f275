"""The Transformer's core parts against their peers (float64): layer_norm as
``torch.nn.functional.layer_norm``, GELU's tanh form as ``F.gelu(approximate="tanh")``,
the feed-forward block as two ``nn.Linear`` around the activation, label-smoothed
cross-entropy as ``F.cross_entropy(label_smoothing=..., ignore_index=...)``, and the
sinusoidal positions as the plain-Python formula; on every backend, and under
``jax.jit``. Their gradients are in parity_tests/test_vjp.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import xpseq.core as C
from xpseq import backends

torch = pytest.importorskip("torch")
F = torch.nn.functional


def data(seed, *shape, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def on(be, *arrays):
    return [be.asarray(a) for a in arrays]


def close(be, got, want, rtol=1e-13, atol=1e-14):
    np.testing.assert_allclose(be.to_numpy(got), np.asarray(want), rtol=rtol, atol=atol)


def test_layer_norm_matches_torch(backend):
    x, g, b = data(0, 2, 3, 6, scale=3.0) + 1.0, data(1, 6) + 1.0, data(2, 6)
    want = F.layer_norm(torch.tensor(x), (6,), torch.tensor(g), torch.tensor(b), eps=1e-5)
    close(backend, C.layer_norm(*on(backend, x, g, b)), want.numpy())
    want = F.layer_norm(torch.tensor(x), (6,), torch.tensor(g), torch.tensor(b), eps=0.1)
    close(backend, C.layer_norm(*on(backend, x, g, b), eps=0.1), want.numpy())


def test_gelu_and_relu_match_torch(backend):
    x = data(3, 4, 5, scale=3.0)
    close(backend, C.gelu(backend.asarray(x)), F.gelu(torch.tensor(x), approximate="tanh"))
    close(backend, C.relu(backend.asarray(x)), F.relu(torch.tensor(x)))
    exact = F.gelu(torch.tensor(x)).numpy()        # erf form: within 5e-4 of the tanh form
    assert np.max(np.abs(backend.to_numpy(C.gelu(backend.asarray(x))) - exact)) < 5e-4


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_matches_two_torch_linears(backend, activation):
    d, d_ff = 4, 7
    x = data(4, 2, 3, d)
    params = {"W_1": data(5, d_ff, d), "b_1": data(6, d_ff), "W_2": data(7, d, d_ff),
              "b_2": data(8, d)}
    keep = np.random.default_rng(9).random((2, 3, d_ff)) >= 0.25
    first, second = torch.nn.Linear(d, d_ff).double(), torch.nn.Linear(d_ff, d).double()
    with torch.no_grad():
        first.weight.copy_(torch.tensor(params["W_1"]))
        first.bias.copy_(torch.tensor(params["b_1"]))
        second.weight.copy_(torch.tensor(params["W_2"]))
        second.bias.copy_(torch.tensor(params["b_2"]))
        act = (lambda h: F.gelu(h, approximate="tanh")) if activation == "gelu" else F.relu
        hidden = act(first(torch.tensor(x)))
        want = second(hidden)
        dropped = second(torch.where(torch.tensor(keep), hidden / 0.75, 0.0))
    p = {k: backend.asarray(v) for k, v in params.items()}
    close(backend, C.feed_forward(p, backend.asarray(x), activation=activation), want.numpy())
    got = C.feed_forward(p, backend.asarray(x), activation=activation,
                         keep=backend.asarray(keep, dtype="bool"), rate=0.25)
    close(backend, got, dropped.numpy())


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
@pytest.mark.parametrize("pad_id", [None, 0])
def test_label_smoothed_cross_entropy_matches_torch(backend, smoothing, pad_id):
    logits = data(10, 3, 5, 9, scale=2.0)
    targets = np.array([[1, 4, 0, 0, 0], [8, 2, 2, 0, 0], [3, 1, 5, 7, 6]])
    want = F.cross_entropy(torch.tensor(logits).reshape(-1, 9),
                           torch.tensor(targets).reshape(-1), label_smoothing=smoothing,
                           ignore_index=-100 if pad_id is None else pad_id)
    got = C.cross_entropy(*on(backend, logits, targets), pad_id=pad_id,
                          label_smoothing=smoothing)
    close(backend, got, want.numpy(), rtol=1e-13)


def test_sinusoidal_positions_follow_the_formula(backend):
    positions = backend.asarray(np.array([[0, 1, 7], [3, 50, 511]]))
    d = 8
    pe = backend.to_numpy(C.sinusoidal_positions(positions, d, dtype=backend.xp.float64))
    assert pe.shape == (2, 3, d)
    for (row, col), p in np.ndenumerate(np.array([[0, 1, 7], [3, 50, 511]])):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert pe[row, col, 2 * i] == pytest.approx(math.sin(angle), rel=1e-13, abs=1e-13)
            assert pe[row, col, 2 * i + 1] == pytest.approx(math.cos(angle), rel=1e-13,
                                                           abs=1e-13)
    pe32 = C.sinusoidal_positions(positions, d, dtype=backend.xp.float32)
    assert pe32.dtype == backend.xp.float32


def test_the_new_parts_run_under_jax_jit():
    jax = pytest.importorskip("jax")
    be = backends.get("jax")
    x, g, b = on(be, data(0, 3, 6) + 1.0, data(1, 6) + 1.0, data(2, 6))

    @jax.jit
    def run(x, g, b, positions):
        h = C.layer_norm(x, g, b)
        return C.gelu(h) + C.relu(h) + C.sinusoidal_positions(positions, 6, dtype=x.dtype)

    eager = C.gelu(C.layer_norm(x, g, b)) + C.relu(C.layer_norm(x, g, b)) \
        + C.sinusoidal_positions(be.asarray(np.arange(3)), 6, dtype=x.dtype)
    close(be, run(x, g, b, be.asarray(np.arange(3))), be.to_numpy(eager))


@pytest.mark.parametrize("call, error, message", [
    (lambda be: C.layer_norm(be.asarray(data(0, 2, 4)), be.asarray(np.ones(3)),
                             be.asarray(np.zeros(4))), ValueError, "gamma has 3 along axis 0"),
    (lambda be: C.layer_norm(be.asarray(data(0, 2, 4)), be.asarray(np.ones(4)),
                             be.asarray(np.zeros(4)), eps=0.0), ValueError, "eps must be"),
    (lambda be: C.gelu(be.asarray(np.array([1.0, np.nan]))), ValueError, "must be finite"),
    (lambda be: C.relu(be.asarray(np.array([1, 2]))), TypeError, "floating"),
    (lambda be: C.feed_forward({"W_1": be.asarray(data(0, 5, 4))}, be.asarray(data(1, 2, 4))),
     ValueError, r"missing \['b_1', 'W_2', 'b_2'\]"),
    (lambda be: C.feed_forward({"W_1": be.asarray(data(0, 5, 4)), "b_1": be.asarray(data(1, 5)),
                                "W_2": be.asarray(data(2, 4, 5)), "b_2": be.asarray(data(3, 4))},
                               be.asarray(data(4, 2, 4)), activation="swish"),
     ValueError, "activation must be one of"),
    (lambda be: C.feed_forward({"W_1": be.asarray(data(0, 5, 4)), "b_1": be.asarray(data(1, 5)),
                                "W_2": be.asarray(data(2, 4, 6)), "b_2": be.asarray(data(3, 4))},
                               be.asarray(data(4, 2, 4))), ValueError, r"W_2 must have shape"),
    (lambda be: C.cross_entropy(be.asarray(data(0, 2, 5)), be.asarray(np.array([1, 2])),
                                label_smoothing=1.0), ValueError, "label_smoothing must be"),
    (lambda be: C.sinusoidal_positions(be.asarray(np.arange(3)), 5, dtype=be.xp.float64),
     ValueError, "d_model must be an even int"),
    (lambda be: C.sinusoidal_positions(be.asarray(np.array([0, -1])), 4, dtype=be.xp.float64),
     ValueError, "positions must be >= 0"),
    (lambda be: C.sinusoidal_positions(be.asarray(np.arange(3)), 4, dtype=be.xp.int64),
     TypeError, "dtype must be a real floating dtype"),
], ids=["ln-gamma", "ln-eps", "gelu-nan", "relu-int", "ff-missing", "ff-activation",
        "ff-shape", "ce-smoothing", "pe-odd", "pe-negative", "pe-dtype"])
def test_bad_input_is_refused(backend, call, error, message):
    with pytest.raises(error, match=message):
        call(backend)


# ------------------------------------------- the fused kernel on PyTorch, proven equal


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("masking", ["none", "valid_lens", "mask", "causal"])
def test_torch_delegates_sdpa_to_its_fused_kernel_with_the_same_result(dtype, masking):
    from unittest import mock

    be = backends.get("torch")
    r = np.random.default_rng(11)
    q, k, v = (be.asarray(r.standard_normal((2, 3, 5, 4)), dtype=dtype) for _ in range(3))
    kwargs = {"none": {}, "valid_lens": {"valid_lens": be.asarray(np.array([3, 5]))},
              "mask": {"mask": be.asarray(r.random((2, 1, 5, 5)) > 0.3, dtype="bool")},
              "causal": {"mask": be.asarray(np.tril(np.ones((5, 5), dtype=bool)))}}[masking]
    if masking == "mask":
        kwargs["mask"][..., 0] = True                  # every query keeps a key
    reference, _ = C.scaled_dot_product_attention(q, k, v, **kwargs)        # generic body
    fused = torch.nn.functional.scaled_dot_product_attention
    with mock.patch.object(torch.nn.functional, "scaled_dot_product_attention",
                           side_effect=fused) as spy:
        got, weights = C.scaled_dot_product_attention(q, k, v, need_weights=False, **kwargs)
    assert spy.call_count == 1 and weights is None
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(be.to_numpy(got), be.to_numpy(reference), rtol=tol, atol=tol)
    # and the same gradients through autograd
    qs = [x.detach().requires_grad_(True) for x in (q, k, v)]
    gen = torch.autograd.grad(C.scaled_dot_product_attention(*qs, **kwargs)[0].sum(), qs)
    fus = torch.autograd.grad(C.scaled_dot_product_attention(*qs, need_weights=False,
                                                             **kwargs)[0].sum(), qs)
    for a, b in zip(gen, fus):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=tol * 10, atol=tol * 10)


def test_sdpa_keeps_the_empty_row_policy_where_the_fused_kernel_would_give_nan():
    from unittest import mock

    be = backends.get("torch")
    r = np.random.default_rng(12)
    q, k, v = (be.asarray(r.standard_normal((2, 3, 4))) for _ in range(3))
    lens = be.asarray(np.array([0, 3]))                 # batch 0 has no valid key
    with mock.patch.object(torch.nn.functional, "scaled_dot_product_attention") as spy:
        context, _ = C.scaled_dot_product_attention(q, k, v, valid_lens=lens, empty="zero",
                                                     need_weights=False)
        with pytest.raises(ValueError, match="has no valid key"):
            C.scaled_dot_product_attention(q, k, v, valid_lens=lens, need_weights=False)
    assert spy.call_count == 0                         # the generic body, by the policy
    assert np.all(be.to_numpy(context)[0] == 0.0)


def test_other_backends_return_no_weights_when_not_asked(backend):
    q, k, v = (backend.asarray(data(i, 2, 3, 4)) for i in range(3))
    context, weights = C.scaled_dot_product_attention(q, k, v, need_weights=False)
    reference, _ = C.scaled_dot_product_attention(q, k, v)
    assert weights is None
    close(backend, context, backend.to_numpy(reference), rtol=1e-12)


@pytest.mark.parametrize("need_weights", [True, False])
def test_an_empty_batch_gives_an_empty_result_on_every_backend(backend, need_weights):
    """Batch 0: an empty context (and weights), not torch's ``amax()`` error from the fused
    path's finiteness check."""
    q, k = (backend.asarray(np.zeros((0, n, 4))) for n in (3, 5))
    context, weights = C.scaled_dot_product_attention(q, k, k, need_weights=need_weights)
    assert tuple(context.shape) == (0, 3, 4)
    assert (weights is None) != need_weights
    if need_weights:
        assert tuple(weights.shape) == (0, 3, 5)


@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_the_fused_path_refuses_non_finite_input_too(where):
    be = backends.get("torch")
    arrays = {n: data(i, 2, 3, 4) for i, n in enumerate("qkv")}
    arrays[where][0, 1, 2] = np.nan
    q, k, v = (be.asarray(arrays[n]) for n in "qkv")
    with pytest.raises(ValueError, match="the result is not finite"):
        C.scaled_dot_product_attention(q, k, v, need_weights=False)
    with pytest.raises(ValueError, match="must be finite"):
        C.scaled_dot_product_attention(q, k, v)
