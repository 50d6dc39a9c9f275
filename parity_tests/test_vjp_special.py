"""The special cases the hand-derived backward rules of :mod:`xpseq.core.vjp` promise
(fully masked softmax rows, repeated and unused embedding ids, padding in the loss,
dropout's scale, zero-length sequences and zero steps), and :func:`xpseq.core.vjp.defvjp`
with the backends' ``value_and_grad`` (the rules against autodiff and finite differences
are in test_vjp.py, whose cases and helpers these share)."""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest
from test_vjp import FORWARD_TOL, SEQUENCE_CASES, check_grads, numpy_rule, torch_vjp
from vjp_cases import (
    BY_ID,
    D_IN,
    NP,
    PARAMS,
    B,
    Case,
    H,
    T,
    V,
    masked_softmax_ref,
    masked_softmax_rule,
    rng,
    seq_inputs,
    state_names,
)

import xpseq.core as C
from xpseq import backends
from xpseq.core import kernels, vjp
from xpseq.models.rnn import backward as rnn_backward
from xpseq.testing import GRAD_ATOL, GRAD_RTOL, assert_matches

# ------------------------------------------- the recurrences' custom_vjp on JAX and torch


@pytest.mark.parametrize("name", ["jax", "torch"])
@pytest.mark.parametrize("case", SEQUENCE_CASES, ids=[c.id for c in SEQUENCE_CASES])
def test_custom_vjp_recurrence_matches_the_numpy_rule(case: Case, name: str) -> None:
    """``run_sequence(..., custom_vjp=backend.custom_vjp)``: the recurrence whose gradient
    is the hand-derived step rules in a reverse scan (a ``jax.custom_vjp`` under
    ``jax.jit``, a ``torch.autograd.Function`` on the tape) gives the NumPy rule's outputs
    and gradients (padding, empty rows and zero steps included)."""
    pytest.importorskip(name)
    be = backends.get(name)
    consts = be.asarray_tree(case.consts)
    cell = case.consts["cell"]

    def forward(a: dict) -> tuple:
        out, final = C.run_sequence(
            {n: a[n] for n in PARAMS}, a["xs"], consts["lengths"], cell=cell,
            initial_state=tuple(a[n] for n in state_names(cell)),
            reverse=case.consts["reverse"], scan=be.scan, custom_vjp=be.custom_vjp)
        return (out, *final)

    inputs = be.asarray_tree(case.inputs)
    cots = tuple(be.asarray(t) for t in case.cots)
    if name == "jax":
        import jax

        @jax.jit
        def run(inputs: dict, cots: tuple) -> tuple:
            outs, pullback = jax.vjp(forward, inputs)
            return outs, pullback(cots)[0]

        outs, grads = run(inputs, cots)
    else:
        import torch

        inputs = {n: v.requires_grad_(True) for n, v in inputs.items()}
        outs = forward(inputs)
        total = sum((o * c).sum() for o, c in zip(outs, cots))
        names = list(inputs)
        found = torch.autograd.grad(total, [inputs[n] for n in names], allow_unused=True)
        grads = {n: torch.zeros_like(inputs[n]) if g is None else g
                 for n, g in zip(names, found)}
    ref_outs, ref_grads = numpy_rule(case.id)
    for o, r in zip(outs, ref_outs):
        np.testing.assert_allclose(be.to_numpy(o), r, rtol=FORWARD_TOL, atol=FORWARD_TOL)
    check_grads({n: be.to_numpy(g) for n, g in grads.items()}, ref_grads,
                what=f"{case.id}: custom_vjp recurrence on {name} vs the numpy rule")


def test_torch_custom_vjp_records_one_node() -> None:
    """On PyTorch the recurrence is one ``autograd.Function`` node on the tape: its
    backward is the hand-derived rule, not the tape of every operation of the loop."""
    torch = pytest.importorskip("torch")
    be = backends.get("torch")
    case = BY_ID["run_sequence-lstm-forward-mixed"]
    a = be.asarray_tree(case.inputs)
    xs = a["xs"].requires_grad_(True)
    lengths = be.asarray(case.consts["lengths"])
    out, _ = C.run_sequence({n: a[n] for n in PARAMS}, xs, lengths, custom_vjp=be.custom_vjp)
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(n for n, _ in node.next_functions)
    names = {type(n).__name__ for n in seen}
    assert any("Rule" in n for n in names), names
    assert not any(n.startswith(("Sigmoid", "Tanh", "Where")) for n in names), names
    with torch.no_grad():                               # outside autograd: fn itself
        plain, _ = C.run_sequence({n: a[n] for n in PARAMS}, xs, lengths,
                                  custom_vjp=be.custom_vjp)
    np.testing.assert_array_equal(be.to_numpy(plain), be.to_numpy(out.detach()))


def test_jax_custom_vjp_recurrence_has_no_forward_mode() -> None:
    """What the docstring says: the custom VJP has no JVP, so ``jax.jvp`` refuses."""
    jax = pytest.importorskip("jax")
    be = backends.get("jax")
    case = BY_ID["run_sequence-lstm-forward-mixed"]
    a = be.asarray_tree(case.inputs)
    lengths = be.asarray(case.consts["lengths"])

    def f(xs):
        return C.run_sequence({n: a[n] for n in PARAMS}, xs, lengths, scan=be.scan,
                              custom_vjp=be.custom_vjp)[0]
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(f, (a["xs"],), (a["xs"],))
    jax.jvp(lambda xs: C.run_sequence({n: a[n] for n in PARAMS}, xs, lengths,
                                      scan=be.scan)[0], (a["xs"],), (a["xs"],))


# ------------------------------------------------------------------------ special cases


def test_masked_softmax_empty_rows_give_zero_gradient() -> None:
    r = rng(11)
    scores = r.standard_normal((2, B, 5))
    keep = r.random((2, B, 5)) >= 0.5
    keep[:, :, 1] = True
    keep[0, 1, :] = False
    keep[1, 2, :] = False
    # Masked scores are ignored, even infinite or NaN ones.
    scores[0, 1, 0], scores[0, 1, 3], scores[1, 0, :] = np.inf, np.nan, \
        np.where(keep[1, 0], scores[1, 0], -np.inf)
    w, bp = vjp.masked_softmax(scores, keep, xp=NP.xp)
    dw = r.standard_normal(w.shape)
    ds, none = bp(dw)
    assert none is None
    assert np.all(np.isfinite(w)) and np.all(np.isfinite(ds))
    assert np.all(w[0, 1] == 0.0) and np.all(w[1, 2] == 0.0)
    assert np.all(ds[0, 1] == 0.0) and np.all(ds[1, 2] == 0.0)
    assert np.all(ds[~keep] == 0.0)
    assert np.all(ds[keep] != 0.0)
    # Kept rows: the rows of ds sum to zero (softmax is shift invariant).
    np.testing.assert_allclose(np.sum(ds, axis=-1), 0.0, atol=1e-15)
    # The same as the reference on the finite scores, where only kept positions matter.
    clean = np.where(keep, scores, 0.0)
    case = Case("empty", {"scores": clean}, {"keep": keep}, masked_softmax_rule,
                masked_softmax_ref, (dw,))
    np.testing.assert_array_equal(w, masked_softmax_ref(NP.xp, case.inputs, case.consts)[0])
    np.testing.assert_allclose(ds, torch_vjp(case)["scores"], rtol=GRAD_RTOL, atol=GRAD_ATOL)


def test_masked_softmax_single_kept_key_has_zero_gradient() -> None:
    """A row with one kept key has the constant weight 1, so no gradient."""
    scores = rng(12).standard_normal((2, 4))
    keep = np.array([[False, True, False, False], [True, True, True, True]])
    w, bp = vjp.masked_softmax(scores, keep, xp=NP.xp)
    ds, _ = bp(np.ones_like(w) + np.arange(4.0))
    np.testing.assert_array_equal(w[0], [0.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(ds[0], 0.0, atol=1e-16)
    assert np.all(np.abs(ds[1]) > 1e-3)


def test_embedding_accumulates_repeated_ids_and_leaves_unused_rows_zero() -> None:
    r = rng(13)
    ids = np.array([[1, 3, 3, 0], [6, 1, 1, 1], [3, 0, 6, 1]], dtype=np.int64)
    E = r.standard_normal((V, 3))
    y, bp = vjp.embedding(ids, E, xp=NP.xp)
    np.testing.assert_array_equal(y, E[ids])
    dy = r.standard_normal(y.shape)
    none, dE = bp(dy)
    assert none is None
    expected = np.zeros_like(E)
    np.add.at(expected, ids.reshape(-1), dy.reshape(-1, 3))
    np.testing.assert_allclose(dE, expected, rtol=1e-14, atol=1e-15)
    for v in (2, 4, 5):
        assert np.all(dE[v] == 0.0)
    np.testing.assert_allclose(dE[1], dy[0, 0] + dy[1, 1] + dy[1, 2] + dy[1, 3] + dy[2, 3],
                               rtol=1e-14)


def log_softmax_np(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


@pytest.mark.parametrize("pad_id", [0, None])
def test_nll_sum_padding_and_count(pad_id: int | None) -> None:
    r = rng(14)
    logits = r.standard_normal((B, 4, V)) * 2.0
    targets = np.array([[3, 1, 0, 0], [6, 0, 5, 0], [2, 2, 4, 1]], dtype=np.int64)
    (total, count), bp = vjp.nll_sum(logits, targets, pad_id, xp=NP.xp)
    real = np.ones(targets.shape, bool) if pad_id is None else targets != pad_id
    picked = np.take_along_axis(log_softmax_np(logits), targets[..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(total, -np.sum(picked[real]), rtol=1e-14)
    assert float(count) == float(np.sum(real))
    kernel_total, kernel_count = kernels.nll_sum(logits, targets, pad_id, xp=NP.xp)
    assert float(total) == float(kernel_total) and float(count) == float(kernel_count)
    dlogits, none = bp(np.asarray(1.0))
    assert none is None
    expected = np.exp(log_softmax_np(logits)) - np.eye(V)[targets]
    expected[~real] = 0.0
    np.testing.assert_allclose(dlogits, expected, rtol=1e-13, atol=1e-15)
    assert np.all(dlogits[~real] == 0.0)
    assert np.all(dlogits[real] != 0.0)
    np.testing.assert_allclose(np.sum(dlogits, axis=-1), 0.0, atol=1e-15)
    # Linear in the cotangent.
    scaled, _ = bp(np.asarray(-2.5))
    np.testing.assert_allclose(scaled, -2.5 * dlogits, rtol=1e-15, atol=1e-16)


def test_dropout_half_rate_doubles_kept_entries() -> None:
    r = rng(15)
    x, dy = r.standard_normal((B, 6)), r.standard_normal((B, 6))
    keep = r.random((B, 6)) >= 0.5
    keep[0, :2] = [True, False]
    y, bp = vjp.dropout(x, keep, 0.5, xp=NP.xp)
    np.testing.assert_array_equal(y, np.where(keep, 2.0 * x, 0.0))
    dx, none = bp(dy)
    assert none is None
    np.testing.assert_array_equal(dx, np.where(keep, 2.0 * dy, 0.0))


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_run_sequence_padding_and_empty_rows(cell: str, reverse: bool) -> None:
    lengths = np.array([0, 2, T], dtype=np.int64)
    r = rng(16)
    a = seq_inputs(r, cell, T)
    p = {n: a[n] for n in PARAMS}
    s0 = tuple(a[n] for n in state_names(cell))
    (out, final), bp = rnn_backward.run_sequence(cell, p, a["xs"], lengths, s0, reverse=reverse,
                                        xp=NP.xp)
    ref_out, ref_final = kernels.run_sequence(cell, p, a["xs"], lengths, s0, reverse=reverse,
                                       scan=None, xp=NP.xp)
    np.testing.assert_allclose(out, ref_out, rtol=FORWARD_TOL, atol=FORWARD_TOL)
    for f, rf in zip(final, ref_final):
        np.testing.assert_allclose(f, rf, rtol=FORWARD_TOL, atol=FORWARD_TOL)
    pad = np.arange(T)[None, :] >= lengths[:, None]                 # (B, T)
    assert np.all(out[pad] == 0.0)
    # The empty row keeps its initial state; the others end at their last real step
    # (their first, in reverse).
    for f, s in zip(final, s0):
        np.testing.assert_array_equal(f[0], s[0])
    for b in (1, 2):
        last = 0 if reverse else lengths[b] - 1
        np.testing.assert_array_equal(final[0][b], out[b, last])

    d_out = r.standard_normal(out.shape)
    d_final = tuple(r.standard_normal(f.shape) for f in final)
    dxs, d_state0, grads = bp(d_out, d_final)
    # Padding (and every step of the empty row) gets no gradient; the empty row hands
    # its final-state cotangent straight to the initial state.
    assert np.all(dxs[pad] == 0.0)
    assert np.all(dxs[~pad] != 0.0)
    for ds, df in zip(d_state0, d_final):
        np.testing.assert_array_equal(ds[0], df[0])
        assert not np.allclose(ds[1:], df[1:])
    # d_outputs at padded positions is ignored.
    d_out_noise = np.where(pad[..., None], 1e3, d_out)
    dxs2, d_state02, grads2 = bp(d_out_noise, d_final)
    np.testing.assert_array_equal(dxs2, dxs)
    for g2, g in zip(d_state02, d_state0):
        np.testing.assert_array_equal(g2, g)
    for n in PARAMS:
        np.testing.assert_array_equal(grads2[n], grads[n])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_run_sequence_all_empty_passes_state_gradient_through(cell: str) -> None:
    for steps in (T, 0):
        r = rng(17 + steps)
        a = seq_inputs(r, cell, steps)
        p = {n: a[n] for n in PARAMS}
        s0 = tuple(a[n] for n in state_names(cell))
        lengths = np.zeros(B, dtype=np.int64)
        (out, final), bp = rnn_backward.run_sequence(cell, p, a["xs"], lengths, s0, reverse=False,
                                            xp=NP.xp)
        assert out.shape == (B, steps, H)
        assert np.all(out == 0.0)
        for f, s in zip(final, s0):
            np.testing.assert_array_equal(f, s)
        d_final = tuple(r.standard_normal((B, H)) for _ in s0)
        dxs, d_state0, grads = bp(r.standard_normal(out.shape), d_final)
        assert dxs.shape == (B, steps, D_IN)
        assert np.all(dxs == 0.0)
        for ds, df in zip(d_state0, d_final):
            np.testing.assert_array_equal(ds, df)
        for n in PARAMS:
            assert grads[n].shape == p[n].shape
            assert np.all(grads[n] == 0.0), n


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_cell_steps_match_public_cells(cell: str) -> None:
    """The step rules from ``xw = x W_ihᵀ + b_ih`` are the public cells."""
    r = rng(18)
    a = seq_inputs(r, cell, 1)
    x = a["xs"][:, 0, :]
    p = {n: a[n] for n in PARAMS}
    xw, _ = vjp.linear(x, p["W_ih"], p["b_ih"], xp=NP.xp)
    if cell == "lstm":
        (h, c), _ = vjp.lstm_step(xw, (a["h0"], a["c0"]), p, xp=NP.xp)
        ref_h, ref_c = C.lstm_cell(p, x, (a["h0"], a["c0"]))
        np.testing.assert_allclose(c, ref_c, rtol=FORWARD_TOL, atol=FORWARD_TOL)
    else:
        (h,), _ = vjp.gru_step(xw, (a["h0"],), p, xp=NP.xp)
        ref_h = C.gru_cell(p, x, a["h0"])
    np.testing.assert_allclose(h, ref_h, rtol=FORWARD_TOL, atol=FORWARD_TOL)


# ------------------------------------------------------------- defvjp and value_and_grad


def make_loss(*, aux: bool = False, scale_grads: float = 1.0, with_rule: bool = True):
    """``L(x, W, b, R) = sum(linear(x, W, b) * R)`` (and ``y`` as aux), a fresh function
    with (optionally) a rule whose gradients are multiplied by ``scale_grads``."""

    def loss(x, W, b, R):
        y = C.linear(x, W, b)
        value = array_api_compat.array_namespace(y).sum(y * R)
        return (value, y) if aux else value

    def rule(x, W, b, R):
        xp = array_api_compat.array_namespace(x)
        y, bp = vjp.linear(x, W, b, xp=xp)
        value = xp.sum(y * R)

        def backprop(g):
            dx, dW, db = bp(g * R)
            return dx * scale_grads, dW * scale_grads, db * scale_grads, None

        return ((value, y) if aux else value), backprop

    if with_rule:
        assert vjp.defvjp(loss, rule) is loss
        assert loss.vjp is rule
    return loss


def linear_loss_args() -> tuple[np.ndarray, ...]:
    r = rng(19)
    return (r.standard_normal((2, B, 4)), r.standard_normal((5, 4)), r.standard_normal(5),
            r.standard_normal((2, B, 5)))


def linear_loss_expected() -> tuple[float, tuple[np.ndarray, ...], np.ndarray]:
    x, W, b, R = linear_loss_args()
    y = x @ W.T + b
    grads = (R @ W, R.reshape(-1, 5).T @ x.reshape(-1, 4), R.sum(axis=(0, 1)))
    return float(np.sum(y * R)), grads, y


HAND_DERIVED = ("numpy", "array_api_strict")


@pytest.mark.parametrize("name", HAND_DERIVED)
def test_value_and_grad_uses_the_rule(name: str) -> None:
    pytest.importorskip(name)
    be = backends.get(name)
    args = be.asarray_tree(linear_loss_args())
    value0, grads0, y0 = linear_loss_expected()

    value, grads = be.value_and_grad(make_loss(), argnums=(0, 1, 2))(*args)
    assert_matches(be, value, np.asarray(value0), rtol=1e-14, atol=0.0)
    assert isinstance(grads, tuple) and len(grads) == 3
    for g, ref in zip(grads, grads0):
        assert_matches(be, g, ref, rtol=1e-13, atol=1e-14)

    value, g1 = be.value_and_grad(make_loss(), argnums=1)(*args)
    assert_matches(be, g1, grads0[1], rtol=1e-13, atol=1e-14)
    value, (g2, g0) = be.value_and_grad(make_loss(), argnums=(2, 0))(*args)
    assert_matches(be, g2, grads0[2], rtol=1e-13, atol=1e-14)
    assert_matches(be, g0, grads0[0], rtol=1e-13, atol=1e-14)

    (value, aux), g0 = be.value_and_grad(make_loss(aux=True), has_aux=True)(*args)
    assert_matches(be, value, np.asarray(value0), rtol=1e-14, atol=0.0)
    assert_matches(be, aux, y0, rtol=1e-14, atol=1e-15)
    assert_matches(be, g0, grads0[0], rtol=1e-13, atol=1e-14)

    # The gradient is the rule's, whatever it says (here: twice the truth).
    _, (gx,) = be.value_and_grad(make_loss(scale_grads=2.0), argnums=(0,))(*args)
    assert_matches(be, gx, 2.0 * grads0[0], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("name", HAND_DERIVED)
def test_value_and_grad_without_rule_names_defvjp(name: str) -> None:
    pytest.importorskip(name)
    be = backends.get(name)
    loss = make_loss(with_rule=False)
    assert not hasattr(loss, "vjp")
    with pytest.raises(NotImplementedError, match="defvjp"):
        be.value_and_grad(loss)(*be.asarray_tree(linear_loss_args()))


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_autodiff_backends_ignore_the_rule(name: str) -> None:
    pytest.importorskip(name)
    be = backends.get(name)
    args = be.asarray_tree(linear_loss_args())
    value0, grads0, _ = linear_loss_expected()
    value, grads = be.value_and_grad(make_loss(scale_grads=2.0), argnums=(0, 1, 2))(*args)
    np.testing.assert_allclose(be.to_numpy(value), value0, rtol=1e-14)
    for g, ref in zip(grads, grads0):
        np.testing.assert_allclose(be.to_numpy(g), ref, rtol=GRAD_RTOL, atol=GRAD_ATOL)
