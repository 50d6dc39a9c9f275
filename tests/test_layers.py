"""Layers, recurrent cells, the sequence runner, the encoder and the loss against peers.

Peers, all in float64: ``torch.nn.LSTMCell``/``GRUCell`` (weights copied one to one),
``torch.nn.LSTM``/``GRU`` on packed sequences (``pack_padded_sequence``, single direction
and bi-directional), ``torch.nn.functional.dropout`` and ``cross_entropy``, and plain Python
(``math.exp``/``math.log`` loops). Then the error paths of the same functions.

xpseq runs on every selected backend (the ``backend`` fixture); the torch peer runs once.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from xpseq import backends
from xpseq.core import layers, losses, recurrent
from xpseq.models.rnn import Seq2SeqConfig, encode, init_params
from xpseq.testing import assert_matches

RTOL, ATOL = 1e-12, 1e-14

B, T, IN, H = 4, 6, 3, 5         # batch, steps, input size, hidden size
# Unsorted lengths (pack_padded_sequence(enforce_sorted=False) sorts them itself).
LENGTHS_FULL = np.array([6, 2, 5, 1])     # the longest fills every step
LENGTHS_SHORT = np.array([3, 4, 1, 2])    # every sequence ends before the last step

GATES = {"lstm": 4, "gru": 3}


def _rng(seed=0):
    return np.random.default_rng(seed)


# ------------------------------------------------------------------ torch helpers


def _randomize(torch, module, seed, scale=0.6):
    """Overwrite every parameter of ``module`` with N(0, scale²) draws (saturating gates)."""
    rng = _rng(seed)
    with torch.no_grad():
        for _, p in sorted(module.named_parameters()):
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)) * scale))
    return module


def _np(t):
    return t.detach().numpy().copy()


def torch_cell(torch, cell, seed=0):
    cls = torch.nn.LSTMCell if cell == "lstm" else torch.nn.GRUCell
    return _randomize(torch, cls(IN, H, dtype=torch.float64), seed)


def torch_rnn(torch, cell, input_size=IN, hidden=H, bidirectional=False):
    cls = torch.nn.LSTM if cell == "lstm" else torch.nn.GRU
    return cls(input_size, hidden, batch_first=True, bidirectional=bidirectional,
               dtype=torch.float64)


def cell_params_from_torch(module, suffix=""):
    """xpseq's ``W_ih, W_hh, b_ih, b_hh`` from a torch cell or (layer-0) RNN, as NumPy."""
    return {"W_ih": _np(getattr(module, "weight_ih" + suffix)),
            "W_hh": _np(getattr(module, "weight_hh" + suffix)),
            "b_ih": _np(getattr(module, "bias_ih" + suffix)),
            "b_hh": _np(getattr(module, "bias_hh" + suffix))}


def copy_params_into_torch(torch, module, params, suffix):
    with torch.no_grad():
        for name, attr in (("W_ih", "weight_ih"), ("W_hh", "weight_hh"), ("b_ih", "bias_ih"),
                           ("b_hh", "bias_hh")):
            getattr(module, attr + suffix).copy_(torch.from_numpy(params[name]))


def torch_packed_run(torch, module, xs, lengths, state0=None):
    """``module`` (batch_first) on the packed sequences: padded outputs (B, T, ·), h_n, c_n."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    packed = pack_padded_sequence(torch.from_numpy(xs), torch.from_numpy(lengths),
                                  batch_first=True, enforce_sorted=False)
    with torch.no_grad():
        out, state = module(packed, state0)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=xs.shape[1])
    h_n, c_n = state if isinstance(state, tuple) else (state, None)
    return _np(out), _np(h_n), None if c_n is None else _np(c_n)


def reverse_real_steps(a, lengths):
    """A copy of ``a`` (B, T, ·) with the first ``lengths[b]`` steps of each row reversed."""
    out = a.copy()
    for b, n in enumerate(lengths):
        out[b, :n] = a[b, :n][::-1]
    return out


# ----------------------------------------------------------------- cells vs torch


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_cell_matches_torch_cell(backend, cell):
    torch = pytest.importorskip("torch")
    module = torch_cell(torch, cell, seed=1)
    params_np = cell_params_from_torch(module)
    assert params_np["W_ih"].shape == (GATES[cell] * H, IN)
    params = backend.asarray_tree(params_np)
    rng = _rng(2)
    for trial in range(4):
        scale = 3.0 if trial == 3 else 1.0   # the last trial saturates the gates
        x, h, c = (rng.standard_normal(s) * scale for s in ((B, IN), (B, H), (B, H)))
        tx, th, tc = (torch.from_numpy(a) for a in (x, h, c))
        with torch.no_grad():
            expected = module(tx, (th, tc)) if cell == "lstm" else (module(tx, th),)
        if cell == "lstm":
            got = recurrent.lstm_cell(params, backend.asarray(x),
                                      (backend.asarray(h), backend.asarray(c)))
            assert isinstance(got, tuple) and len(got) == 2
        else:
            got = (recurrent.gru_cell(params, backend.asarray(x), backend.asarray(h)),)
        for g, e, name in zip(got, expected, "hc"):
            assert_matches(backend, g, _np(e), rtol=RTOL, atol=ATOL,
                           err_msg=f"{cell} {name}' trial {trial}")


def test_cell_param_shapes_match_torch_layout():
    torch = pytest.importorskip("torch")
    for cell in ("lstm", "gru"):
        module = torch_cell(torch, cell)
        expected = {k: v.shape for k, v in cell_params_from_torch(module).items()}
        assert recurrent.cell_param_shapes(cell, IN, H) == expected


# ------------------------------------------------------- run_sequence vs torch packed


SEQ_CASES = {
    "longest_fills_T_zero_state": (LENGTHS_FULL, False),
    "all_shorter_than_T_given_state": (LENGTHS_SHORT, True),
}


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("case", list(SEQ_CASES))
def test_run_sequence_matches_torch_on_packed_sequences(backend, case, cell, reverse):
    torch = pytest.importorskip("torch")
    lengths, given_state = SEQ_CASES[case]
    module = _randomize(torch, torch_rnn(torch, cell), seed=3)
    params = backend.asarray_tree(cell_params_from_torch(module, "_l0"))
    rng = _rng(4)
    xs = rng.standard_normal((B, T, IN))
    real = np.arange(T)[None, :] < lengths[:, None]                      # (B, T)
    xs[~real] = 50.0 * rng.standard_normal((int((~real).sum()), IN))    # loud padding
    state0 = [rng.standard_normal((B, H)) for _ in range(2 if cell == "lstm" else 1)]

    # torch has no single-direction reverse RNN: reverse each sequence's real steps, run
    # forward, and reverse the outputs back. Its first step is then each sequence's own
    # last real token, which is what xpseq's reverse=True must do.
    torch_xs = reverse_real_steps(xs, lengths) if reverse else xs
    t_state0 = None
    if given_state:
        t_state0 = tuple(torch.from_numpy(s[None]) for s in state0)
        t_state0 = t_state0 if cell == "lstm" else t_state0[0]
    out, h_n, c_n = torch_packed_run(torch, module, torch_xs, lengths, t_state0)
    if reverse:
        out = reverse_real_steps(out, lengths)
    assert np.all(out[~real] == 0.0)

    init = tuple(backend.asarray(s) for s in state0) if given_state else None
    got_out, got_state = recurrent.run_sequence(
        params, backend.asarray(xs), backend.asarray(lengths), cell=cell,
        initial_state=init, reverse=reverse, scan=backend.scan)
    got_out_np = backend.to_numpy(got_out)
    assert got_out_np.shape == (B, T, H)
    assert np.all(got_out_np[~real] == 0.0), "padded outputs must be exactly 0"
    np.testing.assert_allclose(got_out_np[real], out[real], rtol=RTOL, atol=ATOL)
    assert isinstance(got_state, tuple) and len(got_state) == (2 if cell == "lstm" else 1)
    assert_matches(backend, got_state[0], h_n[0], err_msg="h_n")
    if cell == "lstm":
        assert_matches(backend, got_state[1], c_n[0], err_msg="c_n")


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_run_sequence_ignores_padding_and_zero_lengths(backend, reverse):
    """Padded inputs never matter (bit for bit), and a length-0 row keeps its initial state."""
    rng = _rng(5)
    params = backend.asarray_tree({n: rng.standard_normal(s) * 0.5 for n, s in
                                  recurrent.cell_param_shapes("lstm", IN, H).items()})
    lengths = np.array([3, 0, 6, 1])
    real = np.arange(T)[None, :] < lengths[:, None]
    xs = rng.standard_normal((B, T, IN))
    other = xs.copy()
    other[~real] = 1e3 * rng.standard_normal((int((~real).sum()), IN))
    state0 = (rng.standard_normal((B, H)), rng.standard_normal((B, H)))
    results = []
    for inputs in (xs, other):
        out, state = recurrent.run_sequence(
            params, backend.asarray(inputs), backend.asarray(lengths),
            initial_state=tuple(backend.asarray(s) for s in state0), reverse=reverse)
        results.append([backend.to_numpy(a) for a in (out, *state)])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    out, h, c = results[0]
    assert np.all(out[1] == 0.0)
    np.testing.assert_array_equal(h[1], state0[0][1])
    np.testing.assert_array_equal(c[1], state0[1][1])


# ------------------------------------------------ the bi-directional encoder vs torch


ENC_B, ENC_S = 4, 6
SRC_LEN = np.array([3, 6, 1, 4])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_encoder_matches_torch_bidirectional_rnn(backend, cell):
    torch = pytest.importorskip("torch")
    config = Seq2SeqConfig(src_vocab=11, tgt_vocab=7, embed=5, hidden=4, cell=cell)
    params_np = init_params(config, seed=1)
    rng = _rng(6)
    src = rng.integers(1, config.src_vocab, size=(ENC_B, ENC_S))
    real = np.arange(ENC_S)[None, :] < SRC_LEN[:, None]
    src[~real] = config.pad_id

    module = torch_rnn(torch, cell, config.embed, config.hidden, bidirectional=True)
    for prefix, suffix in (("enc_fwd", "_l0"), ("enc_bwd", "_l0_reverse")):
        copy_params_into_torch(torch, module, {n: params_np[f"{prefix}.{n}"] for n in
                                               ("W_ih", "W_hh", "b_ih", "b_hh")}, suffix)
    emb = params_np["src_embed"][src]                                      # (B, S, E)
    out, h_n, c_n = torch_packed_run(torch, module, emb, SRC_LEN)
    assert out.shape == (ENC_B, ENC_S, 2 * config.hidden) and h_n.shape[0] == 2

    encoded = encode(backend.asarray_tree(params_np), config, backend.asarray(src),
                     backend.asarray(SRC_LEN), scan=backend.scan)
    memory = backend.to_numpy(encoded["memory"])
    assert memory.shape == (ENC_B, ENC_S, 2 * config.hidden)
    assert np.all(memory[~real] == 0.0), "memory at padded positions must be exactly 0"
    np.testing.assert_allclose(memory[real], out[real], rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(backend.to_numpy(encoded["mask"]), real)
    state = encoded["state"]
    assert_matches(backend, state["h"], np.concatenate([h_n[0], h_n[1]], axis=-1),
                   err_msg="decoder h0")
    if cell == "lstm":
        assert_matches(backend, state["c"], np.concatenate([c_n[0], c_n[1]], axis=-1),
                       err_msg="decoder c0")
    else:
        assert "c" not in state


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_both_directions_in_one_loop_equal_two_loops(grad_backend, cell):
    """The encoder's two directions advanced together (one loop of T steps) give what two
    runs of the sequence runner give: outputs, final states and their gradients, with a
    length-0 row, a full row and padding whose values never matter."""
    from xpseq.core import kernels

    be, xp = grad_backend, grad_backend.xp
    rng = _rng(11)
    shapes = recurrent.cell_param_shapes(cell, IN, H)
    p_fwd, p_bwd = ({n: rng.standard_normal(s) * 0.5 for n, s in shapes.items()}
                    for _ in range(2))
    lengths = be.asarray(np.array([3, 0, 6, 1]))
    xs = rng.standard_normal((B, T, IN))
    state0 = tuple(rng.standard_normal((B, H)) for _ in range(2 if cell == "lstm" else 1))
    weights = [rng.standard_normal(s) for s in ([(B, T, H)] + [(B, H)] * len(state0)) * 2]

    def results(inputs, together):
        x, pf, pb, *s0 = inputs
        if together:
            runs = kernels.run_both_directions(cell, pf, pb, x, lengths, tuple(s0),
                                               scan=be.scan, xp=xp)
        else:
            runs = [kernels.run_sequence(cell, p, x, lengths, tuple(s0), reverse=r,
                                         scan=be.scan, xp=xp) for p, r in ((pf, False),
                                                                           (pb, True))]
        return [a for out, final in runs for a in (out, *final)]

    def weighted(inputs, together):
        return sum(xp.sum(a * be.asarray(w)) for a, w in zip(results(inputs, together),
                                                             weights))

    inputs = be.asarray_tree([xs, p_fwd, p_bwd, *state0])
    one, two = results(inputs, True), results(inputs, False)
    assert len(one) == len(two) == 2 * (1 + len(state0))
    for a, b in zip(one, two):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(be.to_numpy(a), be.to_numpy(b), rtol=0, atol=1e-14)
    assert np.all(be.to_numpy(one[0])[1] == 0.0)                 # the length-0 row
    grads = [be.value_and_grad(lambda i, t=t: weighted(i, t))(inputs)[1] for t in (True, False)]
    for a, b in zip(*(_flat_numpy(be, g) for g in grads)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    # Without a recurrent bias the caller runs the directions one by one.
    assert kernels.run_both_directions(cell, {**p_fwd, "b_hh": None}, p_bwd, inputs[0],
                                       lengths, inputs[3:], scan=be.scan, xp=xp) is None


def _flat_numpy(be, tree):
    from xpseq.core.tree import flatten

    return [be.to_numpy(a) for a in flatten(tree)[0]]


# ------------------------------------------------------------------------- sigmoid


def _sigmoid_math(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_sigmoid_exact_at_extremes_without_warnings(backend):
    x = np.array([-1000.0, -800.0, -750.0, 750.0, 800.0, 1000.0, -np.inf, np.inf])
    # Underflow to 0 is the right answer far in the tails; overflow, 0/0 or inf/inf is not.
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        s = backend.to_numpy(layers.sigmoid(backend.asarray(x)))
    assert s.dtype == np.float64
    np.testing.assert_array_equal(s, [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0])


def test_sigmoid_matches_math_exp_on_moderate_inputs(backend):
    x = np.concatenate([np.linspace(-8.0, 8.0, 161), [0.0, 1e-8, -1e-8, 0.5, -0.5]])
    expected = np.array([_sigmoid_math(v) for v in x])
    s = backend.to_numpy(layers.sigmoid(backend.asarray(x)))
    np.testing.assert_allclose(s, expected, rtol=0, atol=1e-15)
    assert s[x == 0.0][0] == 0.5


def test_sigmoid_is_relatively_accurate_in_the_negative_tail(backend):
    """The docstring: "the result is exactly 0 or 1 only where float64 must round".

    sigmoid(-40) = 4.25e-18 is a normal float64, so it must not round to 0, and a tail
    value should carry the relative accuracy of float64 (``torch.sigmoid`` and
    ``jax.nn.sigmoid`` do: ~2e-16).
    """
    x = np.array([-700.0, -100.0, -40.0, -30.0, -20.0, -10.0, -5.0])
    expected = np.array([math.exp(v) / (1.0 + math.exp(v)) for v in x])
    s = backend.to_numpy(layers.sigmoid(backend.asarray(x)))
    assert np.all(s > 0.0), f"sigmoid rounds to 0 where float64 need not: {s}"
    np.testing.assert_allclose(s, expected, rtol=1e-14, atol=0)


def test_sigmoid_gradient_is_s_times_one_minus_s(grad_backend):
    be = grad_backend
    x = np.concatenate([np.linspace(-8.0, 8.0, 33), [-1000.0, 1000.0]])
    value, grad = be.value_and_grad(lambda a: be.xp.sum(layers.sigmoid(a)))(be.asarray(x))
    s = be.to_numpy(layers.sigmoid(be.asarray(x)))
    grad = be.to_numpy(grad)
    assert np.isfinite(grad).all()
    np.testing.assert_allclose(grad, s * (1.0 - s), rtol=1e-12, atol=1e-16)
    exact = np.array([math.exp(-abs(v)) / (1.0 + math.exp(-abs(v))) ** 2 for v in x])
    np.testing.assert_allclose(grad, exact, rtol=1e-12, atol=1e-16)
    assert grad[-1] == 0.0 and grad[-2] == 0.0
    np.testing.assert_allclose(float(be.to_numpy(value)), s.sum(), rtol=1e-15)


def test_sigmoid_rejects_integer_input(backend):
    with pytest.raises(TypeError, match="sigmoid: x must have a real floating dtype"):
        layers.sigmoid(backend.asarray([1, 2]))


# ----------------------------------------------------------------------- embedding


V, DE = 7, 3


@pytest.mark.parametrize("ids, id_dtype", [([4, 0, 6, 4], "int64"), ([[1, 2, 3], [6, 0, 0]], "int64"),
                                           (5, "int64"), ([[1, 2, 3], [6, 0, 0]], "int32")],
                         ids=["1-d", "2-d", "0-d", "2-d_int32"])
def test_embedding_equals_indexing(backend, ids, id_dtype):
    E = _rng(7).standard_normal((V, DE))
    ids = np.asarray(ids, dtype=id_dtype)
    got = layers.embedding(backend.asarray(ids), backend.asarray(E))
    got = backend.to_numpy(got)
    assert got.shape == (*ids.shape, DE)
    np.testing.assert_array_equal(got, E[ids])


@pytest.mark.parametrize("ids, bad", [([0, V, 1], V), ([[0, 1], [-1, 2]], -1), (V + 3, V + 3)],
                         ids=["equal_to_V", "negative", "0-d_above"])
def test_embedding_out_of_range_ids(backend, ids, bad):
    E = backend.asarray(_rng(7).standard_normal((V, DE)))
    with pytest.raises(ValueError, match=rf"embedding: ids must lie in \[0, {V}\).*got {bad}"):
        layers.embedding(backend.asarray(np.asarray(ids)), E)


def test_embedding_float_ids(backend):
    E = backend.asarray(_rng(7).standard_normal((V, DE)))
    with pytest.raises(TypeError, match="embedding: ids must have an integer dtype"):
        layers.embedding(backend.asarray([0.0, 1.0]), E)


# -------------------------------------------------------------------------- linear


@pytest.mark.parametrize("x_shape", [(4, 3), (2, 5, 3), (3,)], ids=["2-d", "3-d", "1-d"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_linear_equals_x_WT_plus_b(backend, x_shape, bias):
    rng = _rng(8)
    x, W, b = rng.standard_normal(x_shape), rng.standard_normal((6, 3)), rng.standard_normal(6)
    expected = x @ W.T + (b if bias else 0.0)
    got = layers.linear(backend.asarray(x), backend.asarray(W),
                        backend.asarray(b) if bias else None)
    assert_matches(backend, got, expected, rtol=RTOL, atol=ATOL)


LINEAR_BAD = {
    "W_in_mismatch": ((4, 3), (6, 2), (6,), r"linear: W has 2 along axis 1 .* last dimension of x is 3"),
    "W_1-d": ((4, 3), (3,), (6,), r"linear: W must have exactly 2 dimensions"),
    "W_3-d": ((4, 3), (1, 6, 3), (6,), r"linear: W must have exactly 2 dimensions"),
    "b_wrong_length": ((4, 3), (6, 3), (5,), r"linear: b has 5 along axis 0 .* rows of W is 6"),
    "b_2-d": ((4, 3), (6, 3), (1, 6), r"linear: b must have exactly 1 dimensions"),
    "x_0-d": ((), (6, 3), (6,), r"linear: x must have at least 1 dimensions"),
}


@pytest.mark.parametrize("case", list(LINEAR_BAD))
def test_linear_shape_mismatch_names_the_argument(backend, case):
    xs, ws, bs, msg = LINEAR_BAD[case]
    rng = _rng(9)
    args = [backend.asarray(rng.standard_normal(s)) for s in (xs, ws, bs)]
    with pytest.raises(ValueError, match=msg):
        layers.linear(*args)


def test_linear_integer_or_mixed_dtypes_raise_type_error(backend):
    W = backend.asarray(_rng(9).standard_normal((2, 3)))
    with pytest.raises(TypeError, match="linear: x must have a real floating dtype"):
        layers.linear(backend.asarray([[1, 2, 3]]), W)
    with pytest.raises(TypeError, match=r"linear: x is \S*float32 but W is \S*float64"):
        layers.linear(backend.asarray([[1.0, 2.0, 3.0]], dtype="float32"), W)


# ------------------------------------------------------------------------- dropout


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5, 0.9])
def test_dropout_equals_where_keep_scaled(backend, rate):
    rng = _rng(10)
    x = rng.standard_normal((3, 4, 5))
    keep = rng.random((3, 4, 5)) >= rate
    got = backend.to_numpy(layers.dropout(backend.asarray(x), backend.asarray(keep), rate))
    assert got.dtype == np.float64
    assert np.all(got[~keep] == 0.0)
    # Bit for bit: x times the reciprocal of (1 - rate), as torch's dropout scales ...
    np.testing.assert_array_equal(got, np.where(keep, x * (1.0 / (1.0 - rate)), 0.0))
    # ... which is x / (1 - rate) to within one rounding (1 ulp), not always bit for bit.
    np.testing.assert_allclose(got, np.where(keep, x / (1.0 - rate), 0.0), rtol=2.3e-16, atol=0)


def test_dropout_mask_broadcasts_over_leading_axes(backend):
    rng = _rng(11)
    x = rng.standard_normal((2, 4, 5))
    keep = rng.random((4, 5)) >= 0.5
    got = backend.to_numpy(layers.dropout(backend.asarray(x), backend.asarray(keep), 0.5))
    np.testing.assert_array_equal(got, np.where(keep, x * 2.0, 0.0))


def test_dropout_matches_torch_functional_dropout(backend):
    torch = pytest.importorskip("torch")
    rate = 0.3
    x = _rng(12).standard_normal((6, 7)) + 3.0      # no exact zeros
    with torch.random.fork_rng():       # leave torch's global generator as it was
        torch.manual_seed(0)
        expected = torch.nn.functional.dropout(torch.from_numpy(x), rate, training=True).numpy()
    keep = expected != 0.0
    assert 0 < keep.sum() < keep.size
    got = layers.dropout(backend.asarray(x), backend.asarray(keep), rate)
    np.testing.assert_array_equal(backend.to_numpy(got), expected)


KEEP_SHAPE = (8, 16)   # one shape for the jax draws: each new shape compiles again


def test_dropout_rate_zero_returns_x(backend):
    x = backend.asarray(_rng(13).standard_normal(KEEP_SHAPE))
    keep = backend.dropout_keep(0, 0, KEEP_SHAPE, 0.0)
    assert bool(backend.xp.all(keep))
    np.testing.assert_array_equal(backend.to_numpy(layers.dropout(x, keep, 0.0)),
                                  backend.to_numpy(x))


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5, math.nan])
def test_dropout_rate_outside_unit_interval(backend, rate):
    x = backend.asarray(_rng(13).standard_normal((3, 4)))
    keep = backend.asarray(np.ones((3, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"dropout: rate must lie in \[0, 1\)"):
        layers.dropout(x, keep, rate)


@pytest.mark.parametrize("rate", [True, "0.5", None])
def test_dropout_rate_not_a_number(backend, rate):
    x = backend.asarray(_rng(13).standard_normal((3, 4)))
    keep = backend.asarray(np.ones((3, 4), dtype=bool))
    with pytest.raises(TypeError, match=r"dropout: rate must be a real number"):
        layers.dropout(x, keep, rate)


@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_dropout_keep_not_bool(backend, dtype):
    x = backend.asarray(_rng(13).standard_normal((3, 4)))
    keep = backend.asarray(np.ones((3, 4)), dtype=dtype)
    with pytest.raises(TypeError, match="dropout: keep must have a bool dtype"):
        layers.dropout(x, keep, 0.5)


def test_dropout_keep_shape_mismatch(backend):
    x = backend.asarray(_rng(13).standard_normal((3, 4)))
    keep = backend.asarray(np.ones((3, 5), dtype=bool))
    with pytest.raises(ValueError, match="dropout: .*keep"):
        layers.dropout(x, keep, 0.5)


def test_dropout_keep_reproducible_per_seed_and_step(backend):
    shape, rate = KEEP_SHAPE, 0.4
    a = backend.dropout_keep(7, 3, shape, rate)
    b = backend.dropout_keep(7, 3, shape, rate)
    assert a.dtype == backend.xp.bool and tuple(a.shape) == shape
    a, b = backend.to_numpy(a), backend.to_numpy(b)
    np.testing.assert_array_equal(a, b)
    other_step = backend.to_numpy(backend.dropout_keep(7, 4, shape, rate))
    other_seed = backend.to_numpy(backend.dropout_keep(8, 3, shape, rate))
    assert not np.array_equal(a, other_step)
    assert not np.array_equal(a, other_seed)


def test_dropout_keep_fraction(backend):
    for rate in (0.1, 0.5, 0.0):
        keep = backend.to_numpy(backend.dropout_keep(1, 2, (1000, 100), rate))
        assert keep.shape == (1000, 100) and keep.dtype == np.bool_
        assert abs(keep.mean() - (1.0 - rate)) < 0.01, rate
    assert keep.all()   # rate 0 keeps everything


def test_jax_dropout_keep_under_jit_with_traced_step():
    jax = pytest.importorskip("jax")
    be = backends.get("jax")
    traces = 0

    def draw(step):
        nonlocal traces
        traces += 1
        return be.dropout_keep(5, step, KEEP_SHAPE, 0.5)

    jitted = jax.jit(draw)
    masks = [np.asarray(jitted(be.asarray(s))) for s in (3, 4, 3)]
    assert traces == 1
    np.testing.assert_array_equal(masks[0], masks[2])
    assert not np.array_equal(masks[0], masks[1])
    np.testing.assert_array_equal(masks[0], np.asarray(be.dropout_keep(5, 3, KEEP_SHAPE, 0.5)))


# ------------------------------------------------------------------- cross_entropy


CE_B, CE_T, CE_V, PAD = 3, 4, 6, 0


def _ce_inputs():
    rng = _rng(14)
    logits = rng.standard_normal((CE_B, CE_T, CE_V)) * 2.0
    logits[1, 0] += 400.0                  # a large shift: stable log-softmax needed
    logits[2, 1] = [-300.0, 0.0, 300.0, 1.0, -2.0, 299.5]
    targets = np.array([[1, 2, 5, PAD], [3, 0, PAD, PAD], [2, 5, 4, 1]])
    return logits, targets


def _ce_math(logits, targets, pad_id):
    """Mean NLL over the non-pad tokens, one scalar at a time with math.exp / math.log."""
    total, count = 0.0, 0
    for b in range(logits.shape[0]):
        for t in range(logits.shape[1]):
            y = int(targets[b, t])
            if pad_id is not None and y == pad_id:
                continue
            row = [float(v) for v in logits[b, t]]
            m = max(row)
            lse = m + math.log(sum(math.exp(v - m) for v in row))
            total += lse - row[y]
            count += 1
    return total / count


@pytest.mark.parametrize("pad_id", [PAD, None], ids=["pad_0", "no_pad"])
def test_cross_entropy_matches_plain_python(backend, pad_id):
    logits, targets = _ce_inputs()
    got = losses.cross_entropy(backend.asarray(logits), backend.asarray(targets), pad_id=pad_id)
    got = backend.to_numpy(got)
    assert got.shape == () and got.dtype == np.float64
    expected = _ce_math(logits, targets, pad_id)
    assert abs(float(got) - expected) <= 1e-14 * abs(expected), (float(got), expected)


def test_cross_entropy_pad_changes_the_average():
    logits, targets = _ce_inputs()
    # Targets equal to 0 count under pad_id=None but not under pad_id=0: different means.
    assert abs(_ce_math(logits, targets, PAD) - _ce_math(logits, targets, None)) > 1e-3
    got_pad = float(losses.cross_entropy(logits, targets, pad_id=PAD))
    got_all = float(losses.cross_entropy(logits, targets))
    assert abs(got_pad - got_all) > 1e-3


@pytest.mark.parametrize("pad_id", [PAD, None], ids=["pad_0", "no_pad"])
def test_cross_entropy_matches_torch(backend, pad_id):
    torch = pytest.importorskip("torch")
    logits, targets = _ce_inputs()
    expected = torch.nn.functional.cross_entropy(
        torch.from_numpy(logits.reshape(-1, CE_V)), torch.from_numpy(targets.reshape(-1)),
        ignore_index=-100 if pad_id is None else pad_id, reduction="mean").item()
    got = losses.cross_entropy(backend.asarray(logits), backend.asarray(targets), pad_id=pad_id)
    assert abs(float(backend.to_numpy(got)) - expected) <= 1e-12 * abs(expected)


def test_cross_entropy_all_padding(backend):
    logits, _ = _ce_inputs()
    targets = np.full((CE_B, CE_T), PAD)
    with pytest.raises(ValueError, match=r"cross_entropy: every target is padding"):
        losses.cross_entropy(backend.asarray(logits), backend.asarray(targets), pad_id=PAD)


@pytest.mark.parametrize("bad", [CE_V, CE_V + 5, -1])
def test_cross_entropy_target_out_of_range(backend, bad):
    logits, targets = _ce_inputs()
    targets = targets.copy()
    targets[2, 3] = bad
    with pytest.raises(ValueError, match=rf"cross_entropy: targets must lie in \[0, {CE_V}\), got {bad}"):
        losses.cross_entropy(backend.asarray(logits), backend.asarray(targets), pad_id=PAD)


def test_cross_entropy_integer_logits(backend):
    _, targets = _ce_inputs()
    logits = np.ones((CE_B, CE_T, CE_V), dtype=np.int64)
    with pytest.raises(TypeError, match="cross_entropy: logits must have a real floating dtype"):
        losses.cross_entropy(backend.asarray(logits), backend.asarray(targets), pad_id=PAD)


def test_cross_entropy_float_targets_and_shape_mismatch(backend):
    logits, targets = _ce_inputs()
    with pytest.raises(TypeError, match="cross_entropy: targets must have an integer dtype"):
        losses.cross_entropy(backend.asarray(logits), backend.asarray(targets * 1.0))
    with pytest.raises(ValueError, match=r"cross_entropy: targets has shape \(3, 3\)"):
        losses.cross_entropy(backend.asarray(logits), backend.asarray(targets[:, :3]))


# ------------------------------------------------ errors of the cells and the runner


def _cell_inputs(be, cell, seed=15):
    rng = _rng(seed)
    params = {n: be.asarray(rng.standard_normal(s))
              for n, s in recurrent.cell_param_shapes(cell, IN, H).items()}
    x = be.asarray(rng.standard_normal((B, IN)))
    state = tuple(be.asarray(rng.standard_normal((B, H))) for _ in range(2 if cell == "lstm" else 1))
    xs = be.asarray(rng.standard_normal((B, T, IN)))
    return params, x, state, xs


def _call(fname, cell, params, x, state, xs, lengths=None, be=None):
    if fname == "lstm_cell":
        return recurrent.lstm_cell(params, x, state)
    if fname == "gru_cell":
        return recurrent.gru_cell(params, x, state[0])
    lengths = be.asarray(LENGTHS_FULL) if lengths is None else lengths
    return recurrent.run_sequence(params, xs, lengths, cell=cell, initial_state=state)


CELL_FUNCS = [("lstm_cell", "lstm"), ("gru_cell", "gru"), ("run_sequence", "lstm"),
              ("run_sequence", "gru")]
CELL_IDS = ["lstm_cell", "gru_cell", "run_sequence_lstm", "run_sequence_gru"]


@pytest.mark.parametrize("missing", ["W_ih", "W_hh", "b_ih", "b_hh"])
@pytest.mark.parametrize("fname, cell", CELL_FUNCS, ids=CELL_IDS)
def test_missing_param(backend, fname, cell, missing):
    params, x, state, xs = _cell_inputs(backend, cell)
    del params[missing]
    with pytest.raises(ValueError, match=rf"{fname}: params is missing \['{missing}'\]"):
        _call(fname, cell, params, x, state, xs, be=backend)


@pytest.mark.parametrize("shape_of", ["W_hh_cols", "W_hh_rows", "W_hh_1d", "W_ih", "b_ih", "b_hh"])
@pytest.mark.parametrize("fname, cell", CELL_FUNCS, ids=CELL_IDS)
def test_wrong_param_shape(backend, fname, cell, shape_of):
    params, x, state, xs = _cell_inputs(backend, cell)
    G = GATES[cell]
    rng = _rng(16)
    new = {"W_hh_cols": ("W_hh", (G * H, H + 1)), "W_hh_rows": ("W_hh", (G * H - 1, H)),
           "W_hh_1d": ("W_hh", (G * H,)), "W_ih": ("W_ih", (G * H, IN + 1)),
           "b_ih": ("b_ih", (G * H + 1,)), "b_hh": ("b_hh", (H,))}[shape_of]
    params[new[0]] = backend.asarray(rng.standard_normal(new[1]))
    with pytest.raises(ValueError, match=rf"{fname}: {new[0]} must have shape"):
        _call(fname, cell, params, x, state, xs, be=backend)


@pytest.mark.parametrize("fname, cell, which", [
    (f, c, w) for f, c in CELL_FUNCS for w in ((0, 1) if c == "lstm" else (0,))])
def test_state_of_wrong_shape(backend, fname, cell, which):
    params, x, state, xs = _cell_inputs(backend, cell)
    state = list(state)
    state[which] = backend.asarray(_rng(17).standard_normal((B, H + 1)))
    name = "hc"[which]
    with pytest.raises(ValueError, match=rf"{fname}: {name} must have shape \(batch, H\) = \({B}, {H}\)"):
        _call(fname, cell, params, x, tuple(state), xs, be=backend)


@pytest.mark.parametrize("fname, cell, n", [("lstm_cell", "lstm", 1), ("lstm_cell", "lstm", 3),
                                            ("run_sequence", "lstm", 1),
                                            ("run_sequence", "gru", 2)])
def test_state_tuple_of_wrong_length(backend, fname, cell, n):
    params, x, _, xs = _cell_inputs(backend, cell)
    state = tuple(backend.asarray(np.zeros((B, H))) for _ in range(n))
    with pytest.raises(ValueError, match=rf"{fname}: a {cell} state is a tuple .*got {n} arrays"):
        _call(fname, cell, params, x, state, xs, be=backend)


def test_lstm_cell_state_not_a_tuple(backend):
    params, x, state, _ = _cell_inputs(backend, "lstm")
    with pytest.raises(TypeError, match="lstm_cell: state must be a tuple"):
        recurrent.lstm_cell(params, x, list(state))


@pytest.mark.parametrize("cell", ["rnn", "LSTM", None])
def test_unknown_cell_name(backend, cell):
    params, _, _, xs = _cell_inputs(backend, "lstm")
    with pytest.raises(ValueError, match=r"run_sequence: cell must be one of \['lstm', 'gru'\]"):
        recurrent.run_sequence(params, xs, backend.asarray(LENGTHS_FULL), cell=cell)
    with pytest.raises(ValueError, match=r"cell_param_shapes: cell must be one of"):
        recurrent.cell_param_shapes(cell, IN, H)


@pytest.mark.parametrize("lengths, msg", [
    ([6, 7, 1, 2], r"lengths must be <= the number of steps, got lengths\[1\] = 7"),
    ([6, 2, -1, 2], r"lengths must be >= 0, got lengths\[2\] = -1"),
], ids=["above_T", "negative"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_run_sequence_lengths_out_of_range(backend, cell, lengths, msg):
    params, _, _, xs = _cell_inputs(backend, cell)
    with pytest.raises(ValueError, match="run_sequence: " + msg):
        recurrent.run_sequence(params, xs, backend.asarray(lengths), cell=cell)


def test_run_sequence_lengths_wrong_shape_or_float(backend):
    params, _, _, xs = _cell_inputs(backend, "lstm")
    with pytest.raises(TypeError, match="run_sequence: lengths must have an integer dtype"):
        recurrent.run_sequence(params, xs, backend.asarray([6.0, 2.0, 5.0, 1.0]))
    with pytest.raises(ValueError, match="run_sequence: lengths has 3 along axis 0"):
        recurrent.run_sequence(params, xs, backend.asarray([6, 2, 5]))
    with pytest.raises(ValueError, match="run_sequence: xs must have exactly 3 dimensions"):
        recurrent.run_sequence(params, xs[0, ...], backend.asarray([6, 2, 5, 1]))
