"""The cases of test_vjp.py: every hand-derived backward rule of :mod:`xpseq.core.vjp`
with float64 inputs, an adapter that calls the rule and names its gradients, and a
reference forward written with the public xpseq functions (or the private kernels where
there is no public one) that knows nothing about the rule."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import xpseq.core as C
from xpseq import backends
from xpseq.core import blockwise, kernels, vjp
from xpseq.core.masking import lengths_for
from xpseq.models.rnn import backward as rnn_backward
from xpseq.models.transformer import backward as transformer_backward

NP = backends.get("numpy")

# Sizes: batch, steps, input, hidden, vocabulary.
B, T, D_IN, H, V = 3, 4, 2, 3, 7


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(4242 + seed)


def seed_of(text: str) -> int:
    return sum((i + 1) * ord(ch) for i, ch in enumerate(text))


# ------------------------------------------------------------------------------ cases


@dataclass
class Case:
    """``rule(xp, inputs, consts) -> (outputs, back)`` with ``back(cotangents) -> {name:
    gradient}`` for every name of ``inputs``; ``forward(xp, inputs, consts) -> outputs``
    is the reference math (public functions or private kernels, never the rule)."""

    id: str
    inputs: dict[str, np.ndarray]
    consts: dict[str, Any]
    rule: Callable[..., tuple[tuple, Callable]]
    forward: Callable[..., tuple]
    cots: tuple = ()


def assert_no_gradient(value: Any) -> None:
    assert value is None, f"expected no gradient (None) for an id/mask argument, got {value!r}"


# Adapters: call one rule, check its gradient structure, name the gradients.

def linear_rule(xp, a, c):
    y, bp = vjp.linear(a["x"], a["W"], a.get("b"), xp=xp)

    def back(cots):
        dx, dW, db = bp(cots[0])
        grads = {"x": dx, "W": dW}
        if "b" in a:
            grads["b"] = db
        else:
            assert_no_gradient(db)
        return grads

    return (y,), back


def linear_ref(xp, a, c):
    return (C.linear(a["x"], a["W"], a.get("b")),)


def embedding_rule(xp, a, c):
    y, bp = vjp.embedding(c["ids"], a["E"], xp=xp)

    def back(cots):
        d_ids, dE = bp(cots[0])
        assert_no_gradient(d_ids)
        return {"E": dE}

    return (y,), back


def embedding_ref(xp, a, c):
    return (C.embedding(c["ids"], a["E"]),)


def unary_rule(name):
    def rule(xp, a, c):
        y, bp = getattr(vjp, name)(a["x"], xp=xp)

        def back(cots):
            (dx,) = bp(cots[0])
            return {"x": dx}

        return (y,), back

    return rule


def sigmoid_ref(xp, a, c):
    return (C.sigmoid(a["x"]),)


def tanh_ref(xp, a, c):
    return (xp.tanh(a["x"]),)


def concat_rule(xp, a, c):
    names = list(a)
    y, bp = vjp.concat([a[n] for n in names], axis=c["axis"], xp=xp)

    def back(cots):
        pieces = bp(cots[0])
        assert isinstance(pieces, tuple) and len(pieces) == len(names)
        return dict(zip(names, pieces))

    return (y,), back


def concat_ref(xp, a, c):
    return (xp.concat(list(a.values()), axis=c["axis"]),)


def dropout_rule(xp, a, c):
    y, bp = vjp.dropout(a["x"], c["keep"], c["rate"], xp=xp)

    def back(cots):
        dx, d_keep = bp(cots[0])
        assert_no_gradient(d_keep)
        return {"x": dx}

    return (y,), back


def dropout_ref(xp, a, c):
    return (C.dropout(a["x"], c["keep"], c["rate"]),)


def masked_softmax_rule(xp, a, c):
    w, bp = vjp.masked_softmax(a["scores"], c["keep"], xp=xp)

    def back(cots):
        ds, d_keep = bp(cots[0])
        assert_no_gradient(d_keep)
        return {"scores": ds}

    return (w,), back


def masked_softmax_ref(xp, a, c):
    if c["keep"] is None:
        return (C.masked_softmax(a["scores"]),)
    return (C.masked_softmax(a["scores"], mask=c["keep"], empty="zero"),)


def attend_rule(xp, a, c):
    (context, w), bp = vjp.attend(a["scores"], a["values"], c["keep"], xp=xp)

    def back(cots):
        ds, dvalues, d_keep = bp(cots[0], cots[1])
        assert_no_gradient(d_keep)
        return {"scores": ds, "values": dvalues}

    return (context, w), back


def attend_ref(xp, a, c):
    if c["keep"] is None:
        return C.attend(a["scores"], a["values"])
    return C.attend(a["scores"], a["values"], mask=c["keep"], empty="zero")


def log_softmax_rule(xp, a, c):
    y, bp = vjp.log_softmax(a["x"], xp=xp)

    def back(cots):
        (dx,) = bp(cots[0])
        return {"x": dx}

    return (y,), back


def log_softmax_ref(xp, a, c):
    return (C.log_softmax(a["x"]),)


def layer_norm_rule(xp, a, c):
    y, bp = vjp.layer_norm(a["x"], a["gamma"], a["beta"], c["eps"], xp=xp)

    def back(cots):
        dx, dg, db = bp(cots[0])
        return {"x": dx, "gamma": dg, "beta": db}

    return (y,), back


def layer_norm_ref(xp, a, c):
    return (C.layer_norm(a["x"], a["gamma"], a["beta"], eps=c["eps"]),)


def gelu_ref(xp, a, c):
    return (C.gelu(a["x"]),)


def relu_ref(xp, a, c):
    return (C.relu(a["x"]),)


FF = ("W_1", "b_1", "W_2", "b_2")


def feed_forward_rule(xp, a, c):
    y, bp = vjp.feed_forward({n: a[n] for n in FF}, a["x"], c["activation"], c["keep"],
                             c["rate"], xp=xp)

    def back(cots):
        dx, grads = bp(cots[0])
        assert set(grads) == set(FF)
        return {"x": dx, **grads}

    return (y,), back


def feed_forward_ref(xp, a, c):
    return (C.feed_forward({n: a[n] for n in FF}, a["x"], activation=c["activation"],
                           keep=c["keep"], rate=c["rate"]),)


MHA = ("W_q", "W_k", "W_v", "W_o", "b_q", "b_k", "b_v", "b_o")


def attention_rule(rule, names, kv, xp, a, c):
    """A multi-head attention rule (``rule(params, q, *kv, keep, heads, scale)``) and its
    ``back``: the gradients of ``q``, of the two ``kv`` inputs and of the ``names`` in ``a``."""
    params = {n: a.get(n) for n in names}
    (out, weights), bp = rule(params, a["q"], *(a[n] for n in kv), c["keep"], c["heads"],
                              c["scale"], xp=xp)

    def back(cots):
        dq, dk, dv, grads = bp(cots[0], cots[1])
        assert set(grads) == {n for n in names if n in a}
        return {"q": dq, kv[0]: dk, kv[1]: dv, **grads}

    return (out, weights), back


def mha_rule(xp, a, c):
    return attention_rule(transformer_backward.multi_head_attention, MHA, ("k", "v"), xp, a, c)


def mha_ref(xp, a, c):
    params = {n: a[n] for n in MHA if n in a}
    return C.multi_head_attention(params, a["q"], a["k"], a["v"], num_heads=c["heads"],
                                  mask=c["keep"], empty="zero", scale=c["scale"])


def heads_rule(xp, a, c):
    y, bp = vjp.heads(a["x"], a["W"], a.get("b"), c["heads"], xp=xp)

    def back(cots):
        dx, dW, db = bp(cots[0])
        return {"x": dx, "W": dW, **({} if db is None else {"b": db})}

    return (y,), back


def heads_ref(xp, a, c):
    return (kernels.split_heads(kernels.linear(a["x"], a["W"], a.get("b"), xp=xp), c["heads"],
                                xp=xp),)


OVER_HEADS = ("W_q", "b_q", "W_o", "b_o")


def over_heads_rule(xp, a, c):
    return attention_rule(transformer_backward.attention_over_heads, OVER_HEADS, ("kh", "vh"),
                          xp, a, c)


def over_heads_ref(xp, a, c):
    qh = kernels.split_heads(kernels.linear(a["q"], a["W_q"], a.get("b_q"), xp=xp), c["heads"],
                             xp=xp)
    scores = kernels.dot_scores(qh, a["kh"], c["scale"], xp=xp)
    keep = None if c["keep"] is None else xp.broadcast_to(
        xp.expand_dims(xp.asarray(c["keep"]), axis=-3), tuple(scores.shape))
    context, weights = kernels.attend(scores, a["vh"], keep, xp=xp)
    out = kernels.linear(kernels.merge_heads(context, xp=xp), a["W_o"], a.get("b_o"), xp=xp)
    return out, weights


def nll_rule(xp, a, c):
    out, bp = vjp.nll_sum(a["logits"], c["targets"], c["pad_id"], xp=xp,
                          smoothing=c.get("smoothing", 0.0))
    assert isinstance(out, tuple) and len(out) == 2
    total, _count = out

    def back(cots):
        dlogits, d_targets = bp(cots[0])
        assert_no_gradient(d_targets)
        return {"logits": dlogits}

    return (total,), back


def nll_ref(xp, a, c):
    # cross_entropy is the mean over real tokens; times their (constant) number, the sum.
    return (C.cross_entropy(a["logits"], c["targets"], pad_id=c["pad_id"],
                            label_smoothing=c.get("smoothing", 0.0)) * c["count"],)


def dot_rule(xp, a, c):
    s, bp = vjp.dot_scores(a["q"], a["k"], c["scale"], xp=xp)

    def back(cots):
        dq, dk = bp(cots[0])
        return {"q": dq, "k": dk}

    return (s,), back


def dot_ref(xp, a, c):
    return (C.dot_scores(a["q"], a["k"], c["scale"]),)


def general_rule(xp, a, c):
    s, bp = vjp.general_scores(a["q"], a["k"], a["W"], xp=xp)

    def back(cots):
        dq, dk, dW = bp(cots[0])
        return {"q": dq, "k": dk, "W": dW}

    return (s,), back


def general_ref(xp, a, c):
    return (C.general_scores(a["q"], a["k"], a["W"]),)


def additive_rule(xp, a, c):
    s, bp = vjp.additive_from_projections(a["pq"], a["pk"], a["v"], xp=xp)

    def back(cots):
        dpq, dpk, dv = bp(cots[0])
        return {"pq": dpq, "pk": dpk, "v": dv}

    return (s,), back


def additive_ref(xp, a, c):
    return (kernels.additive_from_projections(a["pq"], a["pk"], a["v"], xp=xp),)


def weighted_sum_rule(xp, a, c):
    out, bp = vjp.weighted_sum(a["w"], a["values"], xp=xp)

    def back(cots):
        dw, dvalues = bp(cots[0])
        return {"w": dw, "values": dvalues}

    return (out,), back


def blockwise_rule(xp, a, c):
    blocks = blockwise.BlockMask(lens=c.get("lens"), mask=c.get("mask"), causal=c["causal"])
    out, bp = vjp.blockwise_attention(a["q"], a["k"], a["v"], blocks, c["scale"],
                                      c["block_q"], c["block_k"], xp=xp)

    def back(cots):
        dq, dk, dv = bp(cots[0])
        return {"q": dq, "k": dk, "v": dv}

    return (out,), back


def blockwise_ref(xp, a, c):
    """The plain path with the whole keep mask the blocks are cut from."""
    out, _ = C.scaled_dot_product_attention(a["q"], a["k"], a["v"], mask=c["keep"],
                                            empty="zero", scale=c["scale"])
    return (out,)


def blockwise_consts(q, k, *, lens=None, mask=None, causal=False, block_q, block_k):
    """The rule's constants (lengths as the blocks read them) and the plain keep mask."""
    shape = (*np.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
    keep = np.ones(shape, dtype=bool)
    consts = {"causal": causal, "scale": 0.6, "block_q": block_q, "block_k": block_k}
    if lens is not None:
        consts["lens"] = lengths_for("case", shape, lens, xp=np)
        keep &= np.arange(shape[-1]) < consts["lens"][..., None]
    if mask is not None:
        consts["mask"] = mask
        keep &= mask
    if causal:
        keep &= np.tril(np.ones(shape[-2:], dtype=bool))
    consts["keep"] = keep
    return consts


def weighted_sum_ref(xp, a, c):
    return (xp.matmul(a["w"], a["values"]),)


def lstm_step_rule(xp, a, c):
    p = {"W_hh": a["W_hh"], "b_hh": a["b_hh"]}
    (h1, c1), bp = vjp.lstm_step(a["xw"], (a["h"], a["c"]), p, xp=xp)

    def back(cots):
        dxw, d_state, grads = bp(cots[0], cots[1])
        assert isinstance(d_state, tuple) and len(d_state) == 2
        assert sorted(grads) == ["W_hh", "b_hh"]
        return {"xw": dxw, "h": d_state[0], "c": d_state[1], **grads}

    return (h1, c1), back


def lstm_step_ref(xp, a, c):
    return tuple(kernels.lstm_step(a["xw"], (a["h"], a["c"]),
                            {"W_hh": a["W_hh"], "b_hh": a["b_hh"]}, xp=xp))


def gru_step_rule(xp, a, c):
    p = {"W_hh": a["W_hh"], "b_hh": a["b_hh"]}
    (h1,), bp = vjp.gru_step(a["xw"], (a["h"],), p, xp=xp)

    def back(cots):
        dxw, d_state, grads = bp(cots[0])
        assert isinstance(d_state, tuple) and len(d_state) == 1
        assert sorted(grads) == ["W_hh", "b_hh"]
        return {"xw": dxw, "h": d_state[0], **grads}

    return (h1,), back


def gru_step_ref(xp, a, c):
    cell = {"W_hh": a["W_hh"], "b_hh": a["b_hh"]}
    return tuple(kernels.gru_step(a["xw"], (a["h"],), cell, xp=xp))


PARAMS = ("W_ih", "W_hh", "b_ih", "b_hh")


def state_names(cell: str) -> tuple[str, ...]:
    return ("h0", "c0") if cell == "lstm" else ("h0",)


def run_sequence_rule(xp, a, c):
    cell = c["cell"]
    p = {n: a[n] for n in PARAMS}
    s0 = tuple(a[n] for n in state_names(cell))
    (out, final), bp = rnn_backward.run_sequence(cell, p, a["xs"], c["lengths"], s0,
                                        reverse=c["reverse"], xp=xp)
    assert isinstance(final, tuple) and len(final) == len(s0)

    def back(cots):
        dxs, d_state0, grads = bp(cots[0], tuple(cots[1:]))
        assert isinstance(d_state0, tuple) and len(d_state0) == len(s0)
        assert sorted(grads) == sorted(PARAMS)
        return {"xs": dxs, **dict(zip(state_names(cell), d_state0)), **grads}

    return (out, *final), back


def run_sequence_ref(xp, a, c):
    cell = c["cell"]
    out, final = C.run_sequence({n: a[n] for n in PARAMS}, a["xs"], c["lengths"], cell=cell,
                                initial_state=tuple(a[n] for n in state_names(cell)),
                                reverse=c["reverse"])
    return (out, *final)


def seq_inputs(r: np.random.Generator, cell: str, steps: int) -> dict[str, np.ndarray]:
    gates = C.recurrent.CELLS[cell] * H
    a = {"xs": r.standard_normal((B, steps, D_IN)),
         "W_ih": r.standard_normal((gates, D_IN)) * 0.6,
         "W_hh": r.standard_normal((gates, H)) * 0.6,
         "b_ih": r.standard_normal(gates) * 0.3,
         "b_hh": r.standard_normal(gates) * 0.3}
    for name in state_names(cell):
        a[name] = r.standard_normal((B, H)) * 0.8
    return a


SEQ_LENGTHS = {
    "mixed": (T, [0, 1, T]),      # one empty, one of length 1, one full
    "partial": (T, [2, T, 3]),
    "full": (T, [T, T, T]),
    "empty": (T, [0, 0, 0]),
    "nosteps": (0, [0, 0, 0]),    # T = 0
}


def build_cases() -> list[Case]:
    cases: list[Case] = []

    def add(id_, inputs, consts, rule, forward):
        cases.append(Case(id_, inputs, consts, rule, forward))

    r = rng(1)
    add("linear-2d", {"x": r.standard_normal((B, 4)), "W": r.standard_normal((5, 4)),
                      "b": r.standard_normal(5)}, {}, linear_rule, linear_ref)
    add("linear-3d", {"x": r.standard_normal((2, B, 4)), "W": r.standard_normal((5, 4)),
                      "b": r.standard_normal(5)}, {}, linear_rule, linear_ref)
    add("linear-4d-nobias", {"x": r.standard_normal((2, 2, B, 4)),
                             "W": r.standard_normal((5, 4))}, {}, linear_rule, linear_ref)

    # ids 2, 4 and 5 never occur; 1 and 3 repeat.
    ids = np.array([[1, 3, 3, 0], [6, 1, 1, 1], [3, 0, 6, 1]], dtype=np.int64)
    add("embedding-2d", {"E": r.standard_normal((V, 3))}, {"ids": ids},
        embedding_rule, embedding_ref)
    add("embedding-1d", {"E": r.standard_normal((V, 2))},
        {"ids": np.array([5, 5, 0, 5, 2], dtype=np.int64)}, embedding_rule, embedding_ref)

    x = r.standard_normal((B, 5)) * 3.0
    x[0, :3] = [-12.0, 12.0, 0.0]                   # both branches of the stable sigmoid
    add("sigmoid", {"x": x}, {}, unary_rule("sigmoid"), sigmoid_ref)
    add("tanh", {"x": r.standard_normal((2, B, 4)) * 1.5}, {}, unary_rule("tanh"), tanh_ref)

    add("concat-last", {"a0": r.standard_normal((2, B, 1)), "a1": r.standard_normal((2, B, 2)),
                        "a2": r.standard_normal((2, B, 4))}, {"axis": -1},
        concat_rule, concat_ref)
    add("concat-axis1", {"a0": r.standard_normal((2, 1, 3)), "a1": r.standard_normal((2, 3, 3))},
        {"axis": 1}, concat_rule, concat_ref)
    add("concat-axis0", {"a0": r.standard_normal((2, 3)), "a1": r.standard_normal((1, 3)),
                         "a2": r.standard_normal((B, 3))}, {"axis": 0}, concat_rule, concat_ref)

    keep = r.random((B, 5)) >= 0.5
    keep[0, 0], keep[0, 1] = True, False
    add("dropout-0.5", {"x": r.standard_normal((B, 5))}, {"keep": keep, "rate": 0.5},
        dropout_rule, dropout_ref)
    add("dropout-0.2", {"x": r.standard_normal((B, 5))},
        {"keep": r.random((B, 5)) >= 0.2, "rate": 0.2}, dropout_rule, dropout_ref)
    add("dropout-0.3-broadcast-keep", {"x": r.standard_normal((2, B, 5))},
        {"keep": np.array([[True, False, True, True, False]]), "rate": 0.3},
        dropout_rule, dropout_ref)
    add("dropout-0", {"x": r.standard_normal((B, 5))},
        {"keep": np.ones((B, 5), dtype=bool), "rate": 0.0}, dropout_rule, dropout_ref)

    add("masked_softmax-nomask", {"scores": r.standard_normal((2, B, 5)) * 2.0},
        {"keep": None}, masked_softmax_rule, masked_softmax_ref)
    keep = r.random((2, B, 5)) >= 0.4
    keep[..., 0] = True
    add("masked_softmax-mask", {"scores": r.standard_normal((2, B, 5)) * 2.0},
        {"keep": keep}, masked_softmax_rule, masked_softmax_ref)
    keep = r.random((2, 2, B, 4)) >= 0.3
    keep[0, 1, 2, :] = False                         # rows with no kept key
    keep[1, 0, 0, :] = False
    keep[1, 1, 1, :] = [False, False, True, False]   # a single kept key
    add("masked_softmax-empty-rows-4d", {"scores": r.standard_normal((2, 2, B, 4)) * 2.0},
        {"keep": keep}, masked_softmax_rule, masked_softmax_ref)

    keep = r.random((2, B, 5)) >= 0.4
    keep[0, 1, :] = False                            # a query with no kept key
    add("attend-mask", {"scores": r.standard_normal((2, B, 5)),
                        "values": r.standard_normal((2, 5, 3))}, {"keep": keep},
        attend_rule, attend_ref)
    add("attend-shared-values", {"scores": r.standard_normal((2, B, 5)),
                                 "values": r.standard_normal((5, 3))}, {"keep": None},
        attend_rule, attend_ref)

    add("log_softmax-2d", {"x": r.standard_normal((B, 6)) * 2.0}, {},
        log_softmax_rule, log_softmax_ref)
    add("log_softmax-3d", {"x": r.standard_normal((2, B, 4)) * 3.0}, {},
        log_softmax_rule, log_softmax_ref)

    targets = np.array([[3, 1, 0, 0], [6, 0, 5, 0], [2, 2, 4, 1]], dtype=np.int64)
    add("nll_sum-pad0", {"logits": r.standard_normal((B, 4, V)) * 2.0},
        {"targets": targets, "pad_id": 0, "count": float(np.sum(targets != 0))},
        nll_rule, nll_ref)
    add("nll_sum-pad6", {"logits": r.standard_normal((B, 4, V)) * 2.0},
        {"targets": targets, "pad_id": 6, "count": float(np.sum(targets != 6))},
        nll_rule, nll_ref)
    add("nll_sum-nopad", {"logits": r.standard_normal((B, 4, V)) * 2.0},
        {"targets": targets, "pad_id": None, "count": float(targets.size)}, nll_rule, nll_ref)
    add("nll_sum-1d-nopad", {"logits": r.standard_normal((5, V))},
        {"targets": np.array([0, 6, 6, 2, 3], dtype=np.int64), "pad_id": None, "count": 5.0},
        nll_rule, nll_ref)

    add("nll_sum-smoothed-pad0", {"logits": r.standard_normal((B, 4, V)) * 2.0},
        {"targets": targets, "pad_id": 0, "count": float(np.sum(targets != 0)),
         "smoothing": 0.1}, nll_rule, nll_ref)
    add("nll_sum-smoothed-nopad", {"logits": r.standard_normal((5, V))},
        {"targets": np.array([0, 6, 6, 2, 3], dtype=np.int64), "pad_id": None, "count": 5.0,
         "smoothing": 0.3}, nll_rule, nll_ref)

    def ln_inputs(*shape):
        return {"x": r.standard_normal(shape) * 2.0 + 0.5,
                "gamma": 1.0 + 0.3 * r.standard_normal(shape[-1]),
                "beta": 0.3 * r.standard_normal(shape[-1])}

    add("layer_norm-2d", ln_inputs(B, 6), {"eps": 1e-5}, layer_norm_rule, layer_norm_ref)
    add("layer_norm-3d", ln_inputs(2, B, 4), {"eps": 1e-3}, layer_norm_rule, layer_norm_ref)
    add("gelu", {"x": r.standard_normal((2, B, 5)) * 2.5}, {}, unary_rule("gelu"), gelu_ref)
    x = r.standard_normal((B, 6))
    x[np.abs(x) < 1e-3] = 0.5                        # away from the kink, for differences
    add("relu", {"x": x}, {}, unary_rule("relu"), relu_ref)

    def ff_inputs(d, d_ff, *lead):
        return {"x": r.standard_normal((*lead, d)), "W_1": r.standard_normal((d_ff, d)) * 0.5,
                "b_1": r.standard_normal(d_ff) * 0.3, "W_2": r.standard_normal((d, d_ff)) * 0.5,
                "b_2": r.standard_normal(d) * 0.3}

    add("feed_forward-relu", ff_inputs(4, 6, 2, B),
        {"activation": "relu", "keep": None, "rate": 0.0}, feed_forward_rule, feed_forward_ref)
    add("feed_forward-gelu-dropout", ff_inputs(3, 5, B),
        {"activation": "gelu", "keep": r.random((B, 5)) >= 0.3, "rate": 0.3},
        feed_forward_rule, feed_forward_ref)

    def mha_inputs(d_in, d_model, d_out, q_len, k_len, *lead, bias=True):
        a = {"q": r.standard_normal((*lead, q_len, d_in)),
             "k": r.standard_normal((*lead, k_len, d_in)),
             "v": r.standard_normal((*lead, k_len, d_in)),
             "W_q": r.standard_normal((d_model, d_in)) * 0.5,
             "W_k": r.standard_normal((d_model, d_in)) * 0.5,
             "W_v": r.standard_normal((d_model, d_in)) * 0.5,
             "W_o": r.standard_normal((d_out, d_model)) * 0.5}
        if bias:
            a.update({"b_q": r.standard_normal(d_model) * 0.2,
                      "b_k": r.standard_normal(d_model) * 0.2,
                      "b_v": r.standard_normal(d_model) * 0.2,
                      "b_o": r.standard_normal(d_out) * 0.2})
        return a

    keep = r.random((B, 3, 4)) >= 0.3
    keep[0, 1, :] = False                            # a query with no key: a zero row
    keep[1, :, 0] = True
    add("multi_head_attention-mask", mha_inputs(3, 4, 5, 3, 4, B),
        {"keep": keep, "heads": 2, "scale": 0.5}, mha_rule, mha_ref)
    causal = np.tril(np.ones((4, 4), dtype=bool))
    add("multi_head_attention-causal-nobias-4d", mha_inputs(4, 6, 4, 4, 4, 2, 2, bias=False),
        {"keep": causal, "heads": 3, "scale": 1.0 / math.sqrt(2)}, mha_rule, mha_ref)
    add("multi_head_attention-nomask", mha_inputs(2, 2, 3, 1, 5, B),
        {"keep": None, "heads": 1, "scale": 1.0}, mha_rule, mha_ref)

    add("heads-bias", {"x": r.standard_normal((B, 3, 4)), "W": r.standard_normal((6, 4)),
                       "b": r.standard_normal(6)}, {"heads": 3}, heads_rule, heads_ref)
    add("heads-nobias-4d", {"x": r.standard_normal((2, B, 3, 4)),
                            "W": r.standard_normal((4, 4))}, {"heads": 2}, heads_rule, heads_ref)
    over = {"q": r.standard_normal((B, 3, 5)), "kh": r.standard_normal((B, 2, 4, 3)),
            "vh": r.standard_normal((B, 2, 4, 3)), "W_q": r.standard_normal((6, 5)) * 0.5,
            "b_q": r.standard_normal(6) * 0.2, "W_o": r.standard_normal((5, 6)) * 0.5,
            "b_o": r.standard_normal(5) * 0.2}
    add("attention_over_heads-mask", over, {"keep": keep, "heads": 2, "scale": 0.5},
        over_heads_rule, over_heads_ref)
    add("attention_over_heads-nobias-nomask",
        {n: x for n, x in over.items() if not n.startswith("b_")},
        {"keep": None, "heads": 2, "scale": 1.0}, over_heads_rule, over_heads_ref)

    add("dot_scores-dot", {"q": r.standard_normal((2, B, 4)), "k": r.standard_normal((2, 5, 4))},
        {"scale": None}, dot_rule, dot_ref)
    add("dot_scores-scaled", {"q": r.standard_normal((2, B, 3)),
                              "k": r.standard_normal((2, 5, 3))},
        {"scale": 1.0 / math.sqrt(3)}, dot_rule, dot_ref)
    add("dot_scores-scaled-4d", {"q": r.standard_normal((2, 2, B, 4)),
                                 "k": r.standard_normal((2, 2, 5, 4))},
        {"scale": 1.0 / math.sqrt(4)}, dot_rule, dot_ref)

    add("general_scores", {"q": r.standard_normal((2, B, 4)), "k": r.standard_normal((2, 5, 3)),
                           "W": r.standard_normal((4, 3)) * 0.5}, {}, general_rule, general_ref)
    add("general_scores-4d", {"q": r.standard_normal((2, 2, B, 4)),
                              "k": r.standard_normal((2, 2, 5, 3)),
                              "W": r.standard_normal((4, 3)) * 0.5}, {},
        general_rule, general_ref)

    add("additive", {"pq": r.standard_normal((2, B, 4)), "pk": r.standard_normal((2, 5, 4)),
                     "v": r.standard_normal(4)}, {}, additive_rule, additive_ref)
    add("additive-shared-keys", {"pq": r.standard_normal((2, B, 4)),
                                 "pk": r.standard_normal((5, 4)), "v": r.standard_normal(4)},
        {}, additive_rule, additive_ref)
    add("additive-one-query", {"pq": r.standard_normal((B, 1, 4)),
                               "pk": r.standard_normal((B, 5, 4)), "v": r.standard_normal(4)},
        {}, additive_rule, additive_ref)

    add("weighted_sum", {"w": r.random((2, B, 5)), "values": r.standard_normal((2, 5, 4))}, {},
        weighted_sum_rule, weighted_sum_ref)

    # Broadcast leading axes (as matmul): a shared input's gradient sums over its copies.
    add("dot_scores-shared-keys", {"q": r.standard_normal((2, B, 4)),
                                   "k": r.standard_normal((5, 4))},
        {"scale": 0.5}, dot_rule, dot_ref)
    add("dot_scores-size1-batch", {"q": r.standard_normal((1, B, 4)),
                                   "k": r.standard_normal((2, 5, 4))},
        {"scale": None}, dot_rule, dot_ref)
    add("general_scores-shared-keys", {"q": r.standard_normal((2, B, 4)),
                                       "k": r.standard_normal((5, 3)),
                                       "W": r.standard_normal((4, 3)) * 0.5}, {},
        general_rule, general_ref)
    add("additive-shared-queries", {"pq": r.standard_normal((B, 4)),
                                    "pk": r.standard_normal((2, 5, 4)),
                                    "v": r.standard_normal(4)}, {}, additive_rule, additive_ref)
    add("weighted_sum-shared-values", {"w": r.random((2, B, 5)),
                                       "values": r.standard_normal((5, 4))}, {},
        weighted_sum_rule, weighted_sum_ref)
    add("weighted_sum-4d", {"w": r.random((2, 2, B, 5)),
                            "values": r.standard_normal((2, 2, 5, 3))}, {},
        weighted_sum_rule, weighted_sum_ref)

    add("lstm_step", {"xw": r.standard_normal((B, 4 * H)), "h": r.standard_normal((B, H)),
                      "c": r.standard_normal((B, H)),
                      "W_hh": r.standard_normal((4 * H, H)) * 0.6,
                      "b_hh": r.standard_normal(4 * H) * 0.3}, {}, lstm_step_rule, lstm_step_ref)
    add("gru_step", {"xw": r.standard_normal((B, 3 * H)), "h": r.standard_normal((B, H)),
                     "W_hh": r.standard_normal((3 * H, H)) * 0.6,
                     "b_hh": r.standard_normal(3 * H) * 0.3}, {}, gru_step_rule, gru_step_ref)

    for cell in ("lstm", "gru"):
        for reverse in (False, True):
            for label, (steps, lengths) in SEQ_LENGTHS.items():
                id_ = f"run_sequence-{cell}-{'reverse' if reverse else 'forward'}-{label}"
                add(id_, seq_inputs(rng(seed_of(id_)), cell, steps),
                    {"cell": cell, "reverse": reverse,
                     "lengths": np.array(lengths, dtype=np.int64)},
                    run_sequence_rule, run_sequence_ref)

    # Blocks that do not divide the lengths; keys and values shared by the heads; rows
    # without a key (length 0, and causal with lengths) and key blocks all masked.
    q, k, v = r.standard_normal((2, 2, 5, 3)), r.standard_normal((2, 1, 6, 3)), \
        r.standard_normal((2, 1, 6, 2))
    add("blockwise_attention-plain", {"q": q, "k": k, "v": v},
        blockwise_consts(q, k, block_q=2, block_k=4), blockwise_rule, blockwise_ref)
    add("blockwise_attention-lens-per-query", {"q": q, "k": k, "v": v},
        blockwise_consts(q, k, lens=np.array([[6, 0, 3, 1, 6], [2, 2, 5, 4, 0]]),
                         block_q=3, block_k=2), blockwise_rule, blockwise_ref)
    q, k, v = r.standard_normal((2, 1, 5, 3)), r.standard_normal((2, 1, 5, 3)), \
        r.standard_normal((2, 1, 5, 2))
    mask = r.random((2, 1, 5, 5)) >= 0.3
    add("blockwise_attention-causal-mask-lens", {"q": q, "k": k, "v": v},
        blockwise_consts(q, k, lens=np.array([5, 3]), mask=mask, causal=True, block_q=2,
                         block_k=2), blockwise_rule, blockwise_ref)

    for case in cases:   # one fixed random cotangent per output
        outs = case.forward(NP.xp, case.inputs, case.consts)
        r = rng(seed_of(case.id))
        case.cots = tuple(np.asarray(r.standard_normal(np.shape(o))) for o in outs)
    return cases


CASES = build_cases()
IDS = [case.id for case in CASES]
BY_ID = {case.id: case for case in CASES}
