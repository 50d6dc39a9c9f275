"""Forward parity: every public core function agrees with its NumPy float64 result.

The contract: ``xpseq.core`` run on NumPy float64 arrays is the reference. The same call on
jax (eager and under ``jax.jit``), torch and array_api_strict must agree with it to
``FORWARD_RTOL`` / ``FORWARD_ATOL``, with the same namespace, dtype and shape, and masked
keys must get weights that are exactly ``0.0`` on every backend.

So that the NumPy result is not only compared with itself, a few small cases are also
computed with scalar Python code (loops, ``math.exp``, ``math.fsum``) and NumPy must agree
with those to 1e-14.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
from parity_helpers import lens_keep, normals

import xpseq.core as C
from xpseq import backends
from xpseq.testing import FORWARD_ATOL, FORWARD_RTOL, assert_matches

NP = backends.get("numpy")
SCALAR_TOL = 1e-14  # numpy vs scalar Python references

B, Q, K, D = 2, 3, 5, 4  # batch, queries, keys, depth


# --------------------------------------------------------------------------- helpers


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(20240611 + seed)


def as_tuple(out: Any) -> tuple:
    return out if isinstance(out, tuple) else (out,)


@dataclass
class Case:
    """One call of a public core function.

    ``fn`` holds the static keyword arguments (``functools.partial``); ``args`` and
    ``kwargs`` hold the arrays (NumPy, converted per backend), all of them traced under
    ``jax.jit``. ``keep`` maps an output index to the boolean keep mask of that (weights)
    output: those entries must be exactly zero where ``keep`` is False. ``zero_rows`` maps
    an output index to a boolean mask over all but its last axis: rows that must be
    exactly zero (contexts of query rows with no valid key).
    """

    id: str
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict = field(default_factory=dict)
    keep: dict = field(default_factory=dict)
    zero_rows: dict = field(default_factory=dict)
    allow_neg_inf: bool = False

    def call(self, be: backends.Backend) -> tuple:
        args = tuple(be.asarray_tree(a) for a in self.args)
        kwargs = {n: be.asarray_tree(a) for n, a in self.kwargs.items()}
        return as_tuple(self.fn(*args, **kwargs))

    def call_jit(self, be: backends.Backend) -> tuple:
        args = tuple(be.asarray_tree(a) for a in self.args)
        kwargs = {n: be.asarray_tree(a) for n, a in self.kwargs.items()}
        return as_tuple(be.jit(self.fn)(*args, **kwargs))


def mha_params(seed: int, *, d_q=3, d_k=5, d_v=2, d_model=4, d_value=8, d_out=3,
               biases=True) -> dict[str, np.ndarray]:
    r = rng(seed)
    p = {
        "W_q": r.standard_normal((d_model, d_q)),
        "W_k": r.standard_normal((d_model, d_k)),
        "W_v": r.standard_normal((d_value, d_v)),
        "W_o": r.standard_normal((d_out, d_value)),
    }
    if biases:
        p.update(b_q=r.standard_normal(d_model), b_k=r.standard_normal(d_model),
                 b_v=r.standard_normal(d_value), b_o=r.standard_normal(d_out))
    return p


def build_cases() -> list[Case]:
    cases: list[Case] = []
    add = cases.append

    # ---- sequence_mask
    add(Case("sequence_mask-1d", functools.partial(C.sequence_mask, max_len=K),
             (np.array([0, 2, 5], dtype=np.int64),)))
    add(Case("sequence_mask-2d", functools.partial(C.sequence_mask, max_len=K),
             (np.array([[1, 3, 5], [0, 4, 2]], dtype=np.int64),)))

    # ---- masked_softmax
    r = rng(1)
    s = r.standard_normal((B, Q, K)) * 2.0
    lens_b = np.array([2, 5], dtype=np.int64)
    lens_bq = np.array([[1, 3, 5], [2, 2, 4]], dtype=np.int64)
    mask = r.random((B, Q, K)) < 0.6
    mask[..., 1] = True  # every row keeps key 1 (no empty row without empty="zero")
    mask_bc = np.array([[[True, False, True, True, False]],
                        [[False, True, True, False, True]]])  # (B, 1, K), broadcasts
    add(Case("masked_softmax-nomask", C.masked_softmax, (s,)))
    add(Case("masked_softmax-lens_b", C.masked_softmax, (s, lens_b),
             keep={0: lens_keep(lens_b, s.shape)}))
    add(Case("masked_softmax-lens_bq", C.masked_softmax, (s, lens_bq),
             keep={0: lens_keep(lens_bq, s.shape)}))
    add(Case("masked_softmax-mask", C.masked_softmax, (s,), {"mask": mask}, keep={0: mask}))
    add(Case("masked_softmax-mask_broadcast", C.masked_softmax, (s,), {"mask": mask_bc},
             keep={0: np.broadcast_to(mask_bc, s.shape)}))
    add(Case("masked_softmax-lens_and_mask", C.masked_softmax, (s, lens_bq), {"mask": mask},
             keep={0: lens_keep(lens_bq, s.shape) & mask}))
    s4 = rng(2).standard_normal((B, 2, Q, K)) * 2.0
    mask4 = np.array([[True, True, False, True, True]])  # (1, K) broadcasts to 4-d
    add(Case("masked_softmax-4d-nomask", C.masked_softmax, (s4,)))
    add(Case("masked_softmax-4d-lens_b", C.masked_softmax, (s4, lens_b),
             keep={0: lens_keep(lens_b, s4.shape)}))
    add(Case("masked_softmax-4d-lens_bq", C.masked_softmax, (s4, lens_bq),
             keep={0: lens_keep(lens_bq, s4.shape)}))
    add(Case("masked_softmax-4d-lens_and_mask", C.masked_softmax, (s4, lens_bq),
             {"mask": mask4}, keep={0: lens_keep(lens_bq, s4.shape) & mask4}))
    lens_empty = np.array([[0, 3, 5], [2, 0, 4]], dtype=np.int64)
    add(Case("masked_softmax-empty_zero", functools.partial(C.masked_softmax, empty="zero"),
             (s, lens_empty), keep={0: lens_keep(lens_empty, s.shape)}))
    mask_empty = mask.copy()
    mask_empty[1, 2] = False
    add(Case("masked_softmax-empty_zero-mask",
             functools.partial(C.masked_softmax, empty="zero"), (s4,),
             {"mask": mask_empty[:, None]},
             keep={0: np.broadcast_to(mask_empty[:, None], s4.shape)}))

    # ---- log_softmax / logsumexp
    x = rng(3).standard_normal((B, Q, K)) * 3.0
    xinf = x.copy()
    xinf[0, 1, 2] = -np.inf
    xinf[1, 0, :] = -np.inf  # an all -inf slice along the last axis
    for axis in (-1, 0, 1, 2):
        add(Case(f"log_softmax-axis{axis}", functools.partial(C.log_softmax, axis=axis), (x,)))
    add(Case("log_softmax-neginf", C.log_softmax, (xinf,), allow_neg_inf=True))
    for axis, keepdims in ((-1, False), (-1, True), (0, True), (1, False), (2, True)):
        add(Case(f"logsumexp-axis{axis}-keepdims{keepdims}",
                 functools.partial(C.logsumexp, axis=axis, keepdims=keepdims), (x,)))
    add(Case("logsumexp-neginf", C.logsumexp, (xinf,), allow_neg_inf=True))
    add(Case("logsumexp-neginf-axis1", functools.partial(C.logsumexp, axis=1), (xinf,),
             allow_neg_inf=True))

    # ---- score functions
    r = rng(4)
    q = r.standard_normal((B, Q, D))
    k = r.standard_normal((B, K, D))
    add(Case("dot_scores", C.dot_scores, (q, k)))
    add(Case("dot_scores-scale", functools.partial(C.dot_scores, scale=0.5), (q, k)))
    q4 = r.standard_normal((B, 2, Q, D))
    k4 = r.standard_normal((B, 1, K, D))  # broadcasts over heads
    add(Case("dot_scores-4d-scale", functools.partial(C.dot_scores, scale=1 / math.sqrt(D)),
             (q4, k4)))
    kw = r.standard_normal((B, K, 6))
    W = r.standard_normal((D, 6))
    add(Case("general_scores", C.general_scores, (q, kw, W)))
    W_q, W_k, v_add = r.standard_normal((7, D)), r.standard_normal((7, 6)), r.standard_normal(7)
    add(Case("additive_scores", C.additive_scores, (q, kw, W_q, W_k, v_add)))

    # ---- attend
    r = rng(5)
    sc = r.standard_normal((B, Q, K)) * 2.0
    vals = r.standard_normal((B, K, D))
    add(Case("attend-nomask", C.attend, (sc, vals)))
    add(Case("attend-lens_b", C.attend, (sc, vals), {"valid_lens": lens_b},
             keep={1: lens_keep(lens_b, sc.shape)}))
    add(Case("attend-lens_bq-mask", C.attend, (sc, vals), {"valid_lens": lens_bq, "mask": mask},
             keep={1: lens_keep(lens_bq, sc.shape) & mask}))
    keep_e = lens_keep(lens_empty, sc.shape)
    add(Case("attend-empty_zero", functools.partial(C.attend, empty="zero"), (sc, vals),
             {"valid_lens": lens_empty}, keep={1: keep_e}, zero_rows={0: ~keep_e.any(-1)}))
    sc4 = r.standard_normal((B, 2, Q, K))
    vals4 = r.standard_normal((B, 1, K, D))
    add(Case("attend-4d-lens_b", C.attend, (sc4, vals4), {"valid_lens": lens_b},
             keep={1: lens_keep(lens_b, sc4.shape)}))

    # ---- scaled_dot_product_attention
    r = rng(6)
    q, k, v = normals(r, (B, Q, D), (B, K, D), (B, K, 3))
    sdpa = C.scaled_dot_product_attention
    add(Case("sdpa-nomask", sdpa, (q, k, v)))
    add(Case("sdpa-lens_b", sdpa, (q, k, v), {"valid_lens": lens_b},
             keep={1: lens_keep(lens_b, (B, Q, K))}))
    add(Case("sdpa-lens_bq", sdpa, (q, k, v), {"valid_lens": lens_bq},
             keep={1: lens_keep(lens_bq, (B, Q, K))}))
    add(Case("sdpa-mask-scale", functools.partial(sdpa, scale=0.3), (q, k, v), {"mask": mask},
             keep={1: mask}))
    add(Case("sdpa-empty_zero", functools.partial(sdpa, empty="zero"), (q, k, v),
             {"valid_lens": lens_empty, "mask": mask},
             keep={1: keep_e & mask}, zero_rows={0: ~(keep_e & mask).any(-1)}))
    q4, k4, v4 = (r.standard_normal((B, 2, Q, D)), r.standard_normal((B, 2, K, D)),
                  r.standard_normal((B, 2, K, 3)))
    add(Case("sdpa-4d-lens_bq", sdpa, (q4, k4, v4), {"valid_lens": lens_bq},
             keep={1: lens_keep(lens_bq, (B, 2, Q, K))}))

    # ---- multi_head_attention (d_q=3, d_k=5, d_v=2, d_model=4, d_value=8, d_out=3)
    r = rng(7)
    q, k, v = normals(r, (B, Q, 3), (B, K, 5), (B, K, 2))
    for heads, biases in ((1, True), (2, False), (4, True)):
        p = mha_params(10 + heads, biases=biases)
        mha = functools.partial(C.multi_head_attention, num_heads=heads)
        tag = f"mha-h{heads}-{'bias' if biases else 'nobias'}"
        add(Case(f"{tag}-nomask", mha, (p, q, k, v)))
        kl = lens_keep(lens_b, (B, Q, K))
        add(Case(f"{tag}-lens_b", mha, (p, q, k, v), {"valid_lens": lens_b},
                 keep={1: np.broadcast_to(kl[:, None], (B, heads, Q, K))}))
        kl = lens_keep(lens_bq, (B, Q, K)) & mask
        add(Case(f"{tag}-lens_bq-mask", mha, (p, q, k, v),
                 {"valid_lens": lens_bq, "mask": mask},
                 keep={1: np.broadcast_to(kl[:, None], (B, heads, Q, K))}))
    p = mha_params(20)  # with biases
    add(Case("mha-h2-bias-scale-empty_zero",
             functools.partial(C.multi_head_attention, num_heads=2, empty="zero", scale=0.7),
             (p, q, k, v), {"valid_lens": lens_empty},
             keep={1: np.broadcast_to(keep_e[:, None], (B, 2, Q, K))}))
    return cases


CASES = build_cases()
MASKED = [c for c in CASES if c.keep or c.zero_rows]


@functools.lru_cache(maxsize=None)
def reference(case_id: str) -> tuple:
    case = next(c for c in CASES if c.id == case_id)
    out = case.call(NP)
    for o in out:
        assert isinstance(o, np.ndarray)
        assert not np.isnan(o).any(), f"{case_id}: NaN in the numpy reference"
        if not case.allow_neg_inf and o.dtype != np.bool_:
            assert np.isfinite(o).all(), f"{case_id}: non-finite numpy reference"
    return out


def check_outputs(be: backends.Backend, case: Case, out: tuple, what: str) -> None:
    ref = reference(case.id)
    assert len(out) == len(ref)
    for i, (o, r) in enumerate(zip(out, ref)):
        msg = f"{case.id} output {i} on {what}"
        if r.dtype == np.bool_:
            assert be.is_array(o), msg
            assert o.dtype == be.dtype("bool"), msg
            assert tuple(o.shape) == r.shape, msg
            np.testing.assert_array_equal(be.to_numpy(o), r, err_msg=msg)
        else:
            assert_matches(be, o, r, rtol=FORWARD_RTOL, atol=FORWARD_ATOL, err_msg=msg)


def check_exact_zeros(be: backends.Backend, case: Case, out: tuple, what: str) -> None:
    for i, keep in case.keep.items():
        w = be.to_numpy(out[i])
        assert w.shape == keep.shape
        assert (w[~keep] == 0.0).all(), f"{case.id} on {what}: masked weights not exactly 0"
        assert (w[keep] > 0.0).all(), f"{case.id} on {what}: a kept weight is not positive"
        rows = keep.any(-1)
        np.testing.assert_allclose(w.sum(-1)[rows], 1.0, rtol=0, atol=1e-14)
        assert (w.sum(-1)[~rows] == 0.0).all()
    for i, rows in case.zero_rows.items():
        assert rows.any(), "the case should have an all-masked row"
        c = be.to_numpy(out[i])
        assert (c[rows] == 0.0).all(), f"{case.id} on {what}: empty-row context not exactly 0"


# ----------------------------------------------------------------- parity tests


@pytest.mark.forward(quick=("dask",))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forward_matches_numpy(backend, case):
    """Every case on every backend, the forward-only ones too: dask.array (every case in
    the quick tier, about 4 s for all: each operation builds a task graph, a value check
    computes the one flag it needs, and the outputs stay lazy until compared) and ndonnx
    eager (each operation recorded in an ONNX graph and computed; slow)."""
    out = case.call(backend)
    if backend.name == "dask":
        assert all(type(o).__module__.startswith("dask.") for o in out), case.id
    check_outputs(backend, case, out, backend.name)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forward_jax_jit_matches_numpy(case):
    pytest.importorskip("jax")
    jx = backends.get("jax")
    check_outputs(jx, case, case.call(jx), "jax eager")
    check_outputs(jx, case, case.call_jit(jx), "jax.jit")


@pytest.mark.forward(quick=("dask",))
@pytest.mark.parametrize("case", MASKED, ids=lambda c: c.id)
def test_masked_entries_exactly_zero(backend, case):
    check_exact_zeros(backend, case, case.call(backend), backend.name)
    if backend.name == "jax":
        check_exact_zeros(backend, case, case.call_jit(backend), "jax.jit")


def test_cases_cover_every_public_function():
    called = set()
    for c in CASES:
        fn = c.fn.func if isinstance(c.fn, functools.partial) else c.fn
        called.add(fn.__name__)
    assert called == set(C.attention.__all__) | set(C.masking.__all__)


@pytest.mark.parametrize("garbage", [1e4, -1e4, 1e300, np.inf, -np.inf, np.nan])
def test_masked_scores_are_ignored(backend, garbage):
    """Whatever a masked score is, the weights are those of the same scores with 0 there."""
    r = rng(8)
    s = r.standard_normal((B, Q, K))
    lens = np.array([[1, 3, 5], [2, 0, 4]], dtype=np.int64)
    keep = lens_keep(lens, s.shape)
    dirty = np.where(keep, s, garbage)
    clean = np.where(keep, s, 0.0)
    f = functools.partial(C.masked_softmax, empty="zero")
    w_dirty = f(backend.asarray(dirty), backend.asarray(lens))
    w_clean = f(backend.asarray(clean), backend.asarray(lens))
    np.testing.assert_array_equal(backend.to_numpy(w_dirty), backend.to_numpy(w_clean))
    assert_matches(backend, w_dirty, f(dirty, lens))
    assert (backend.to_numpy(w_dirty)[~keep] == 0.0).all()
    ctx, w = C.attend(backend.asarray(dirty), backend.asarray(r.standard_normal((B, K, D))),
                      valid_lens=backend.asarray(lens), empty="zero")
    assert np.isfinite(backend.to_numpy(ctx)).all()
    np.testing.assert_array_equal(backend.to_numpy(w), backend.to_numpy(w_clean))


# ------------------------------------------------ independent scalar references


def py_masked_softmax(scores: list, keep: list) -> list:
    """Row-wise softmax over kept keys in plain Python; masked keys 0, empty rows 0."""
    if isinstance(scores[0], list):
        return [py_masked_softmax(s, kp) for s, kp in zip(scores, keep)]
    kept = [x for x, kp in zip(scores, keep) if kp]
    if not kept:
        return [0.0] * len(scores)
    m = max(kept)
    e = [math.exp(x - m) if kp else 0.0 for x, kp in zip(scores, keep)]
    total = math.fsum(e)
    return [x / total for x in e]


def py_matmul(a: list, b: list) -> list:
    return [[math.fsum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))]
            for i in range(len(a))]


def py_transpose(a: list) -> list:
    return [list(col) for col in zip(*a)]


def py_dot(q: list, k: list, scale: float = 1.0) -> list:
    return [[scale * math.fsum(qi * kj for qi, kj in zip(qrow, krow)) for krow in k]
            for qrow in q]


def py_general(q: list, k: list, W: list) -> list:
    return [[math.fsum(qrow[a] * W[a][b] * krow[b] for a in range(len(qrow))
                       for b in range(len(krow))) for krow in k] for qrow in q]


def py_additive(q: list, k: list, W_q: list, W_k: list, v: list) -> list:
    out = []
    for qrow in q:
        row = []
        for krow in k:
            terms = []
            for h in range(len(v)):
                pre = math.fsum([*(W_q[h][a] * qrow[a] for a in range(len(qrow))),
                                 *(W_k[h][b] * krow[b] for b in range(len(krow)))])
                terms.append(v[h] * math.tanh(pre))
            row.append(math.fsum(terms))
        out.append(row)
    return out


def py_logsumexp(xs: list) -> float:
    finite = [x for x in xs if x != -math.inf]
    if not finite:
        return -math.inf
    m = max(finite)
    return m + math.log(math.fsum(math.exp(x - m) for x in finite))


def assert_scalar_close(actual: np.ndarray, desired: Any, what: str) -> None:
    desired = np.asarray(desired, dtype=np.float64)
    assert actual.shape == desired.shape, what
    np.testing.assert_allclose(actual, desired, rtol=SCALAR_TOL, atol=SCALAR_TOL, err_msg=what)


def test_numpy_masked_softmax_matches_scalar_python():
    r = rng(30)
    s = r.standard_normal((B, Q, K)) * 3.0
    lens = np.array([[1, 3, 5], [2, 0, 4]], dtype=np.int64)
    mask = r.random((B, Q, K)) < 0.7
    keep = lens_keep(lens, s.shape) & mask
    expected = py_masked_softmax(s.tolist(), keep.tolist())
    got = C.masked_softmax(s, lens, mask=mask, empty="zero")
    assert_scalar_close(got, expected, "masked_softmax")
    assert (got[~keep] == 0.0).all()
    everything = np.ones_like(keep).tolist()
    assert_scalar_close(C.masked_softmax(s), py_masked_softmax(s.tolist(), everything),
                        "softmax without mask")


def test_numpy_scores_match_scalar_python():
    r = rng(31)
    q, k, kw = normals(r, (Q, D), (K, D), (K, 6))
    W, W_q, W_k, v = (r.standard_normal((D, 6)), r.standard_normal((7, D)),
                      r.standard_normal((7, 6)), r.standard_normal(7))
    assert_scalar_close(C.dot_scores(q, k), py_dot(q.tolist(), k.tolist()), "dot_scores")
    assert_scalar_close(C.dot_scores(q, k, scale=0.5), py_dot(q.tolist(), k.tolist(), 0.5),
                        "dot_scores scale")
    assert_scalar_close(C.general_scores(q, kw, W), py_general(q.tolist(), kw.tolist(), W.tolist()),
                        "general_scores")
    assert_scalar_close(C.additive_scores(q, kw, W_q, W_k, v),
                        py_additive(*(a.tolist() for a in (q, kw, W_q, W_k, v))),
                        "additive_scores")


def test_numpy_attend_and_sdpa_match_scalar_python():
    r = rng(32)
    s, vals = r.standard_normal((B, Q, K)) * 2.0, r.standard_normal((B, K, D))
    lens = np.array([[1, 3, 5], [2, 0, 4]], dtype=np.int64)
    keep = lens_keep(lens, s.shape)
    ctx, w = C.attend(s, vals, valid_lens=lens, empty="zero")
    w_ref = [py_masked_softmax(s[b].tolist(), keep[b].tolist()) for b in range(B)]
    ctx_ref = [py_matmul(w_ref[b], vals[b].tolist()) for b in range(B)]
    assert_scalar_close(w, w_ref, "attend weights")
    assert_scalar_close(ctx, ctx_ref, "attend context")
    assert (ctx[~keep.any(-1)] == 0.0).all()

    q, k, v = normals(r, (B, Q, D), (B, K, D), (B, K, 3))
    ctx, w = C.scaled_dot_product_attention(q, k, v, valid_lens=lens, empty="zero")
    sc = [py_dot(q[b].tolist(), k[b].tolist(), 1 / math.sqrt(D)) for b in range(B)]
    w_ref = [py_masked_softmax(sc[b], keep[b].tolist()) for b in range(B)]
    assert_scalar_close(w, w_ref, "sdpa weights")
    assert_scalar_close(ctx, [py_matmul(w_ref[b], v[b].tolist()) for b in range(B)], "sdpa context")


def test_numpy_multi_head_attention_matches_scalar_python():
    r = rng(33)
    heads = 2
    p = mha_params(34)
    q, k, v = normals(r, (B, Q, 3), (B, K, 5), (B, K, 2))
    lens = np.array([3, 5], dtype=np.int64)
    ctx, w = C.multi_head_attention(p, q, k, v, num_heads=heads, valid_lens=lens)
    P = {n: a.tolist() for n, a in p.items()}

    def linear(x, Wn, bn):
        y = py_matmul(x, py_transpose(P[Wn]))
        return [[yi + bi for yi, bi in zip(row, P[bn])] for row in y]

    for b in range(B):
        qp, kp, vp = linear(q[b].tolist(), "W_q", "b_q"), linear(k[b].tolist(), "W_k", "b_k"), \
            linear(v[b].tolist(), "W_v", "b_v")
        dh, dvh = len(qp[0]) // heads, len(vp[0]) // heads
        keep = [[j < lens[b] for j in range(K)] for _ in range(Q)]
        merged = [[] for _ in range(Q)]
        for h in range(heads):
            qh = [row[h * dh:(h + 1) * dh] for row in qp]
            kh = [row[h * dh:(h + 1) * dh] for row in kp]
            vh = [row[h * dvh:(h + 1) * dvh] for row in vp]
            wh = py_masked_softmax(py_dot(qh, kh, 1 / math.sqrt(dh)), keep)
            assert_scalar_close(w[b, h], wh, f"mha weights b={b} h={h}")
            for i, row in enumerate(py_matmul(wh, vh)):
                merged[i].extend(row)
        out = linear(merged, "W_o", "b_o")
        assert_scalar_close(ctx[b], out, f"mha context b={b}")


def test_numpy_log_softmax_and_logsumexp_match_scalar_python():
    r = rng(35)
    x = r.standard_normal((B, Q, K)) * 3.0
    x[0, 1, 2] = -np.inf
    x[1, 0, :] = -np.inf
    for axis in (0, 1, 2):
        moved = np.moveaxis(x, axis, -1)
        lse_ref = [[py_logsumexp(moved[i, j].tolist()) for j in range(moved.shape[1])]
                   for i in range(moved.shape[0])]
        lse_ref = np.asarray(lse_ref)
        lse = C.logsumexp(x, axis=axis)
        np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_ref))
        fin = np.isfinite(lse_ref)
        assert_scalar_close(lse[fin], lse_ref[fin], f"logsumexp axis={axis}")
        lse_kd = C.logsumexp(x, axis=axis, keepdims=True)
        assert lse_kd.shape == tuple(1 if a == axis else n for a, n in enumerate(x.shape))
        np.testing.assert_array_equal(np.squeeze(lse_kd, axis), lse)

        ls = C.log_softmax(x, axis=axis)
        ls_ref = np.moveaxis(
            np.array([[[xv - lse_ref[i, j] if math.isfinite(lse_ref[i, j]) else -math.inf
                        for xv in moved[i, j].tolist()]
                       for j in range(moved.shape[1])] for i in range(moved.shape[0])]),
            -1, axis)
        np.testing.assert_array_equal(np.isneginf(ls), np.isneginf(ls_ref))
        assert not np.isnan(ls).any()
        fin = np.isfinite(ls_ref)
        assert_scalar_close(ls[fin], ls_ref[fin], f"log_softmax axis={axis}")
        # probabilities sum to one (rows not all -inf)
        rows = np.moveaxis(ls, axis, -1).reshape(-1, x.shape[axis]).tolist()
        sums = [math.fsum(math.exp(t) for t in row) for row in rows]
        rows_ok = np.isfinite(lse_ref).reshape(-1)
        np.testing.assert_allclose(np.asarray(sums)[rows_ok], 1.0, rtol=0, atol=1e-14)


# ------------------------------------------- libraries that are not training backends


class _WithoutTakeAlongAxis:
    """An array namespace less ``take_along_axis`` (a library that lacks the standard's
    2024.12 function, as dask.array does)."""

    def __init__(self, xp: Any) -> None:
        self._xp = xp

    def __getattr__(self, name: str) -> Any:
        if name == "take_along_axis":
            raise AttributeError(name)
        return getattr(self._xp, name)


@pytest.mark.parametrize(("x_shape", "i_shape"), [((3, 7), (3, 7)), ((2, 3, 7), (2, 3, 1)),
                                                  ((2, 1, 7), (1, 3, 4)), ((7,), (9,))])
@pytest.mark.parametrize("dtype", ["float64", "int64", "bool"])
def test_take_along_last_without_take_along_axis(backend, x_shape, i_shape, dtype):
    """The core's gather (``kernels.take_along_last``) on a namespace that lacks
    ``take_along_axis``: one ``take`` from the flattened array gives the standard
    function's result exactly, broadcasting the leading dimensions."""
    from xpseq.core import kernels

    r = rng(40)
    x = np.asarray(r.standard_normal(x_shape) * 5).astype(dtype)
    index = r.integers(0, x_shape[-1], size=i_shape)
    lead = np.broadcast_shapes(x_shape[:-1], i_shape[:-1])
    want = np.take_along_axis(np.broadcast_to(x, (*lead, x_shape[-1])),
                              np.broadcast_to(index, (*lead, i_shape[-1])), axis=-1)
    xs, ids = backend.asarray(x), backend.asarray(index)
    got = kernels.take_along_last(xs, ids, xp=_WithoutTakeAlongAxis(backend.xp))
    assert got.dtype == xs.dtype
    np.testing.assert_array_equal(backend.to_numpy(got), want)
    np.testing.assert_array_equal(
        backend.to_numpy(kernels.take_along_last(xs, ids, xp=backend.xp)), want)
