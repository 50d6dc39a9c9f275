"""Model parity: the seq2seq model agrees with itself on every backend, in float64.

A tiny model (src_vocab 7, tgt_vocab 8, embed 3, hidden 2; batch 3, S 4, T 3, with real
padding on both sides) in every configuration attention x cell x style (input feeding on
with attention, off without; plus four attention configurations without input feeding):

* forward: ``forward``'s logits and attention weights and ``loss`` agree across numpy
  (the reference), jax (under ``jax.jit``, and eagerly for a few configurations), torch and
  array_api_strict to ``FORWARD_RTOL``/``FORWARD_ATOL``; ``encode`` + ``decode_step``
  reproduce ``forward`` step by step;
* gradients: jax, torch and the hand-derived backward pass (``loss_and_grad``, which numpy
  and array_api_strict use) agree to ``GRAD_RTOL``; all match central differences of the
  NumPy loss (every parameter element for four configurations, at weights large enough for
  differences to resolve, see ``fd_params``; random directions at ``init_params`` for all);
  gradients are finite and exactly zero at embedding rows no real token uses;
* dropout: one NumPy keep-mask handed to every backend gives the same values and gradients;
  ``keep=None`` turns dropout off;
* five Adam steps (with and without global-norm clipping) leave the same parameters on jax
  and torch;
* padding invariance (hypothesis): ids at padded source positions change nothing, ids at
  padded target positions change no loss, no gradient and no logit at a real position;
* the encoder honours lengths: zero memory at padding, final states and memory equal to
  those of the unpadded sequence, and to a hand-written loop over the public cells.

Every backend runs every configuration. JAX compiles one program per configuration (about
3 s each on 2 CPU cores); ``XPSEQ_JAX_SUBSET=1`` limits JAX to a subset that still covers
every attention, cell, style and the no-feeding case (``JAX_SUBSET``), for quick local runs.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rnn_cases import (
    ADAM_CONFIGS,
    BATCH,
    CONFIGS,
    DROPOUT,
    DROPOUT_IDS,
    FD_CONFIGS,
    FD_H,
    FD_RESOLVABLE,
    HIDDEN,
    IDS,
    JAX_CONFIGS,
    JAX_EAGER_CONFIGS,
    NP,
    PAD,
    PADDING_CONFIGS,
    PARAMS,
    SRC,
    SRC_LEN,
    SRC_REAL,
    SRC_VOCAB,
    STEP_TOL,
    TGT_IN,
    TGT_OUT,
    TGT_REAL,
    TGT_VOCAB,
    UNUSED_SRC_ROWS,
    UNUSED_TGT_ROWS,
    B,
    D,
    Out,
    S,
    T,
    assert_grads_close,
    autodiff,
    evaluate,
    fd_grads,
    fd_params,
    independent_nll,
    jax_program,
    keep_for,
    need,
    np_of,
    numpy_loss,
    reference,
    require_jax_config,
)

from xpseq import backends
from xpseq.core import optim
from xpseq.core.recurrent import gru_cell, lstm_cell
from xpseq.models import rnn as M
from xpseq.testing import (
    FD_REL_ERR,
    FORWARD_ATOL,
    FORWARD_RTOL,
    GRAD_ATOL,
    GRAD_RTOL,
    assert_matches,
    relative_error,
)

# ----------------------------------------------------------------------- 1. forward


@pytest.mark.parametrize("cid", IDS + DROPOUT_IDS)
def test_forward_matches_numpy(backend, cid):
    """Logits, attention weights and loss agree with the NumPy reference (jax: jitted)."""
    ref = reference(cid)
    out = evaluate(backend, cid)
    config = CONFIGS[cid]
    assert ref.logits.shape == (B, T, TGT_VOCAB) and np.isfinite(ref.logits).all()
    if config.attention == "none":
        assert ref.weights is None and out.weights is None
    else:
        assert ref.weights.shape == (B, T, S)
        # exactly zero at padded sources, a distribution over the real ones
        assert (out.weights[np.broadcast_to(~SRC_REAL[:, None, :], out.weights.shape)]
                == 0.0).all(), f"{backend.name}: attention on a padded source position"
        assert (out.weights >= 0).all()
        np.testing.assert_allclose(out.weights.sum(-1), 1.0, rtol=0, atol=1e-14)
        np.testing.assert_allclose(out.weights, ref.weights, rtol=FORWARD_RTOL,
                                   atol=FORWARD_ATOL, err_msg=f"{cid}: weights")
    np.testing.assert_allclose(out.logits, ref.logits, rtol=FORWARD_RTOL, atol=FORWARD_ATOL,
                               err_msg=f"{cid}: logits")
    np.testing.assert_allclose(out.loss, ref.loss, rtol=FORWARD_RTOL, atol=FORWARD_ATOL,
                               err_msg=f"{cid}: loss")
    # the loss is the mean NLL of the real targets under the logits (independent NumPy)
    np.testing.assert_allclose(out.loss, independent_nll(out.logits, TGT_OUT), rtol=1e-13)


@pytest.mark.parametrize("cid", IDS[:1] + ["general-gru-luong"])
def test_forward_returns_backend_arrays(backend, cid):
    """Namespace, dtype and shape of the outputs, eagerly (jax: the eager test below)."""
    if backend.name == "jax":
        pytest.skip("covered by test_jax_eager_forward_matches_numpy")
    params, batch = backend.asarray_tree(PARAMS[cid]), backend.asarray_tree(BATCH)
    logits, weights = M.forward(params, CONFIGS[cid], batch["src"], batch["src_len"],
                                batch["tgt_in"], scan=backend.scan)
    value = M.loss(params, CONFIGS[cid], batch, scan=backend.scan)
    ref = reference(cid)
    assert_matches(backend, logits, ref.logits)
    if ref.weights is not None:
        assert_matches(backend, weights, ref.weights)
    assert backend.is_array(value) and tuple(value.shape) == ()
    assert value.dtype == backend.dtype("float64")


@pytest.mark.parametrize("cid", JAX_EAGER_CONFIGS)
def test_jax_eager_forward_matches_numpy(cid):
    """Eager JAX (lax.scan as backend.scan) gives the reference and the jitted values."""
    be = need("jax")
    params, batch = be.asarray_tree(PARAMS[cid]), be.asarray_tree(BATCH)
    logits, weights = M.forward(params, CONFIGS[cid], batch["src"], batch["src_len"],
                                batch["tgt_in"], scan=be.scan)
    value = M.loss(params, CONFIGS[cid], batch, scan=be.scan)
    ref = reference(cid)
    assert_matches(be, logits, ref.logits)
    assert_matches(be, weights, ref.weights)
    assert_matches(be, value, np.float64(ref.loss))
    jitted = evaluate(be, cid)
    np.testing.assert_allclose(jitted.logits, be.to_numpy(logits), rtol=FORWARD_RTOL,
                               atol=FORWARD_ATOL)
    np.testing.assert_allclose(jitted.loss, float(value), rtol=FORWARD_RTOL, atol=FORWARD_ATOL)


@pytest.mark.parametrize("cid", IDS + DROPOUT_IDS)
def test_encode_and_decode_steps_reproduce_forward(cid):
    """encode + decode_step fed tgt_in[:, t] give forward's logits and weights (numpy)."""
    config, params = CONFIGS[cid], PARAMS[cid]
    ref = reference(cid)
    keep = keep_for(cid)
    encoded = M.encode(params, config, SRC, SRC_LEN, scan=NP.scan)
    state = encoded["state"]
    assert set(state) == {"h"} | ({"c"} if config.cell == "lstm" else set()) \
        | ({"o"} if config.input_feeding else set())
    for t in range(T):
        logits_t, state, weights_t = M.decode_step(
            params, config, np.ascontiguousarray(TGT_IN[:, t]), state, encoded,
            keep=None if keep is None else np.ascontiguousarray(keep[:, t]))
        np.testing.assert_allclose(logits_t, ref.logits[:, t], rtol=STEP_TOL, atol=FORWARD_ATOL,
                                   err_msg=f"{cid}: logits at step {t}")
        if config.attention == "none":
            assert weights_t is None
        else:
            np.testing.assert_allclose(weights_t, ref.weights[:, t], rtol=STEP_TOL,
                                       atol=FORWARD_ATOL, err_msg=f"{cid}: weights at step {t}")


# --------------------------------------------------------------------- 2. gradients


@pytest.mark.parametrize("cid", IDS)
def test_jax_and_torch_gradients_agree(cid):
    need("jax"), need("torch")
    require_jax_config(cid)
    gj, gt = autodiff("jax", cid), autodiff("torch", cid)
    np.testing.assert_allclose(gj.loss, gt.loss, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    np.testing.assert_allclose(gj.loss, reference(cid).loss, rtol=FORWARD_RTOL,
                               atol=FORWARD_ATOL)
    assert sorted(gj.grads) == sorted(M.param_shapes(CONFIGS[cid]))
    assert_grads_close(gj.grads, gt.grads, f"{cid} jax vs torch")


@pytest.mark.parametrize("cid", IDS + DROPOUT_IDS)
def test_hand_derived_gradients_match_jax_and_torch(cid):
    """NumPy's hand-derived backward pass (``loss_and_grad``) against ``jax.grad`` and the
    torch tape, every configuration, dropout included; its loss is ``loss``'s, exactly."""
    hand = autodiff("numpy", cid)
    assert hand.loss == reference(cid).loss
    compared = 0
    for name in ("jax", "torch"):
        if name not in backends.available() or (name == "jax" and cid not in JAX_CONFIGS):
            continue
        assert_grads_close(hand.grads, autodiff(name, cid).grads, f"{cid} numpy vs {name}")
        compared += 1
    if not compared:
        pytest.skip("neither jax nor torch is installed")


@pytest.mark.parametrize("name", ["jax", "torch"])
@pytest.mark.parametrize("cid", IDS + DROPOUT_IDS)
def test_custom_vjp_loss_matches_the_numpy_rules(name, cid):
    """``loss(..., custom_vjp=backend.custom_vjp)`` (what ``gradients="hand-derived"``
    runs on JAX): the encoder's recurrences and the decoder's loop carry the hand-derived
    gradient, the decoder's weight gradients summed over all steps after its loop. JAX
    differentiates it (jitted) and PyTorch's autograd runs it as one node per loop; both
    give NumPy's hand-derived gradients (``loss_and_grad``), every configuration, dropout
    included."""
    be = need(name)
    if name == "jax":
        require_jax_config(cid)
    config, keep = CONFIGS[cid], keep_for(cid)
    params, batch = be.asarray_tree(PARAMS[cid]), be.asarray_tree(BATCH)
    keep = None if keep is None else be.asarray(keep, dtype="bool")

    def objective(p):
        return M.loss(p, config, batch, keep=keep, scan=be.scan, custom_vjp=be.custom_vjp)
    grad = be.value_and_grad(objective)
    value, grads = (be.jit(grad) if name == "jax" else grad)(params)
    hand = autodiff("numpy", cid)
    np.testing.assert_allclose(float(be.to_numpy(value)), hand.loss, rtol=FORWARD_RTOL,
                               atol=FORWARD_ATOL)
    assert_grads_close(np_of(be, grads), hand.grads, f"{cid} custom_vjp on {name} vs numpy")


@pytest.mark.parametrize(("name", "cid"), [
    *((name, cid) for name in ("numpy", "torch") for cid in PADDING_CONFIGS),
    ("jax", PADDING_CONFIGS[1]),
    pytest.param("jax", PADDING_CONFIGS[0], marks=pytest.mark.slow)])
def test_hand_derived_loops_skip_steps_that_are_padding_in_every_row(name, cid):
    """A batch padded past its longest source and target (as bucketed batches are): the
    hand-derived loops run only the steps some row has (``scan``'s ``span``), and the loss
    and gradients are those of the batch without the extra steps, from autodiff (torch,
    or JAX) and NumPy's rules. NumPy runs ``loss_and_grad``; JAX (jitted) and PyTorch
    differentiate ``loss(..., custom_vjp=backend.custom_vjp)`` (JAX's second
    configuration, one more compilation, in the slow tier)."""
    be = need(name)
    config = CONFIGS[cid]
    extra = 3
    batch = {k: v if v.ndim == 1 else np.pad(v, ((0, 0), (0, extra)), constant_values=PAD)
             for k, v in BATCH.items()}
    params, batch = be.asarray_tree(PARAMS[cid]), be.asarray_tree(batch)
    if name == "numpy":
        value, grads = M.loss_and_grad(params, config, batch)
    else:
        grad = be.value_and_grad(lambda p: M.loss(p, config, batch, scan=be.scan,
                                                  custom_vjp=be.custom_vjp))
        value, grads = (be.jit(grad) if name == "jax" else grad)(params)
    unpadded = autodiff("torch" if "torch" in backends.available() else "numpy", cid)
    np.testing.assert_allclose(float(be.to_numpy(value)), unpadded.loss, rtol=FORWARD_RTOL,
                               atol=FORWARD_ATOL)
    assert_grads_close(np_of(be, grads), unpadded.grads, f"{cid} padded, {name}")


@pytest.mark.parametrize("cid", IDS + DROPOUT_IDS)
def test_gradients_are_finite_zero_at_unused_rows_and_match_directional_fd(backend, cid):
    """Every configuration: finite gradients; zero exactly at unused embedding rows (and
    nonzero at used ones); gradient . v equals the central difference of the NumPy loss
    along random directions v of all parameters."""
    if backend.name == "jax":
        require_jax_config(cid)
    g = autodiff(backend.name, cid).grads
    shapes = M.param_shapes(CONFIGS[cid])
    assert sorted(g) == sorted(shapes)
    for name, shape in shapes.items():
        assert g[name].shape == shape and g[name].dtype == np.float64, name
        assert np.isfinite(g[name]).all(), f"{cid}: non-finite d/d{name}"
        assert np.abs(g[name]).max() > 0, f"{cid}: d/d{name} is identically zero"
    for name, unused in (("src_embed", UNUSED_SRC_ROWS), ("tgt_embed", UNUSED_TGT_ROWS)):
        used = sorted(set(range(shapes[name][0])) - set(unused))
        assert (g[name][unused] == 0.0).all(), \
            f"{cid} on {backend.name}: nonzero gradient at unused {name} rows {unused}: " \
            f"{g[name][unused]}"
        assert (np.abs(g[name][used]).max(axis=1) > 0).all(), f"{cid}: {name} used rows"

    params = PARAMS[cid]
    r = np.random.default_rng(7)
    for _ in range(2):
        v = {k: r.standard_normal(p.shape) for k, p in params.items()}
        scale = np.sqrt(sum((x * x).sum() for x in v.values()))
        v = {k: x / scale for k, x in v.items()}
        up = numpy_loss(cid, {k: p + FD_H * v[k] for k, p in params.items()})
        down = numpy_loss(cid, {k: p - FD_H * v[k] for k, p in params.items()})
        fd = (up - down) / (2 * FD_H)
        exact = sum(float((g[k] * v[k]).sum()) for k in params)
        gnorm = np.sqrt(sum((x * x).sum() for x in g.values()))
        err = abs(fd - exact) / gnorm
        assert err < FD_REL_ERR, (f"{cid} on {backend.name}: directional derivative "
                                  f"{exact!r} vs central difference {fd!r} (error {err:.2e} "
                                  f"of |grad|)")


@pytest.mark.parametrize("cid", FD_CONFIGS)
def test_gradients_match_finite_differences(backend, cid):
    """Every parameter element against central differences of the NumPy loss."""
    g = evaluate(backend, cid, params=fd_params(cid), grads=True).grads
    fd = fd_grads(cid)
    for name, ref in fd.items():
        assert np.abs(ref).max() > FD_RESOLVABLE, \
            f"{cid}: d/d{name} is too small for central differences to check"
        err = relative_error(g[name], ref)
        assert err < FD_REL_ERR, (f"{cid} on {backend.name}: d/d{name} relative error "
                                  f"{err:.3e} vs central differences (limit {FD_REL_ERR})")


# ----------------------------------------------------------------------- 3. dropout


@pytest.mark.parametrize("cid", DROPOUT_IDS)
def test_dropout_keep_mask_parity(backend, cid):
    """The same keep mask on every backend: same values; and it really drops."""
    ref = reference(cid)
    out = evaluate(backend, cid)           # keep=KEEP for the dropout configurations
    np.testing.assert_allclose(out.logits, ref.logits, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    np.testing.assert_allclose(out.weights, ref.weights, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    np.testing.assert_allclose(out.loss, ref.loss, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    base = reference(cid.split("-drop")[0])
    assert abs(ref.loss - base.loss) > 1e-3, "the keep mask changed nothing"


@pytest.mark.parametrize("cid", DROPOUT_IDS)
def test_dropout_off_without_keep(backend, cid):
    """keep=None: the dropout config computes what the dropout=0 config computes."""
    out = evaluate(backend, cid, keep=None, jit_grads=False)
    ref = reference(cid.split("-drop")[0])
    np.testing.assert_allclose(out.logits, ref.logits, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    np.testing.assert_allclose(out.weights, ref.weights, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    np.testing.assert_allclose(out.loss, ref.loss, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)


@pytest.mark.parametrize("cid", DROPOUT_IDS)
def test_dropout_drops_o_and_rescales(cid):
    """Inverted dropout on o_t (numpy): all-False keeps give logits = out.b everywhere;
    all-True keeps scale the first step's o_0 by 1/(1 - rate)."""
    config, params = CONFIGS[cid], PARAMS[cid]
    logits, _ = M.forward(params, config, SRC, SRC_LEN, TGT_IN, keep=np.zeros((B, T, D), bool))
    np.testing.assert_array_equal(logits, np.broadcast_to(params["out.b"], logits.shape))
    full, _ = M.forward(params, config, SRC, SRC_LEN, TGT_IN, keep=np.ones((B, T, D), bool))
    base = reference(cid.split("-drop")[0]).logits[:, 0]      # W o_0 + b
    b = params["out.b"]
    np.testing.assert_allclose(full[:, 0], (base - b) / (1 - DROPOUT) + b, rtol=1e-12,
                               atol=1e-14)
    assert np.abs(full[:, 1:] - reference(cid.split("-drop")[0]).logits[:, 1:]).max() > 1e-6


@pytest.mark.parametrize("cid", DROPOUT_IDS)
def test_dropout_gradients_agree(cid):
    need("jax"), need("torch")
    require_jax_config(cid)
    gj, gt = autodiff("jax", cid), autodiff("torch", cid)
    np.testing.assert_allclose(gj.loss, reference(cid).loss, rtol=FORWARD_RTOL,
                               atol=FORWARD_ATOL)
    assert_grads_close(gj.grads, gt.grads, f"{cid} jax vs torch (dropout)")
    base = autodiff("torch", cid.split("-drop")[0]).grads
    assert any(relative_error(gt.grads[k], base[k]) > 1e-3 for k in base), \
        "the keep mask changed no gradient"


# ------------------------------------------------------------------ 4. optimiser steps


def clipped_update(opt: optim.Optimizer, clip: float | None, grads: dict, state: dict,
                   params: dict) -> tuple:
    """(clip_by_global_norm and) opt.update: new params, state, the norms before and after."""
    norm = clipped = None
    if clip is not None:
        grads, norm = optim.clip_by_global_norm(grads, clip)
        clipped = optim.global_norm(grads)
    params, state = opt.update(grads, state, params)
    return params, state, norm, clipped


@pytest.mark.parametrize("clip", [None, 0.1])
@pytest.mark.parametrize("cid", ADAM_CONFIGS)
def test_adam_steps_agree(cid, clip):
    """Five Adam(1e-2) steps on the model loss: the same parameters on jax and torch."""
    results = {}
    for name in ("jax", "torch"):
        be = need(name)
        opt = optim.adam(1e-2)
        params = be.asarray_tree(PARAMS[cid])
        batch = be.asarray_tree(BATCH)
        state = opt.init(params)
        losses, norms = [], []
        update = be.jit(functools.partial(clipped_update, opt, clip))  # jax: one compile
        for _ in range(5):
            if name == "jax":
                _, _, value, grads = jax_program(CONFIGS[cid], True)(params, batch, None)
            else:
                value, grads = be.value_and_grad(
                    lambda p: M.loss(p, CONFIGS[cid], batch, scan=be.scan))(params)
            params, state, norm, clipped = update(grads, state, params)
            if clip is not None:
                norms.append(float(be.to_numpy(norm)))
                expected = min(norms[-1], clip * norms[-1] / (norms[-1] + 1e-6))
                np.testing.assert_allclose(float(be.to_numpy(clipped)), expected, rtol=1e-12)
            losses.append(float(be.to_numpy(value)))
        assert float(be.to_numpy(state["step"])) == 5.0
        results[name] = (np_of(be, params), losses, norms)
    (pj, lj, nj), (pt, lt, nt) = results["jax"], results["torch"]
    np.testing.assert_allclose(lj, lt, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)
    assert lj[-1] < lj[0], f"5 Adam steps did not lower the loss: {lj}"
    if clip is not None:
        assert min(nj) > clip, f"clipping never engaged: norms {nj}"
        np.testing.assert_allclose(nj, nt, rtol=GRAD_RTOL)
    for k in pj:
        assert np.abs(pj[k] - PARAMS[cid][k]).max() > 1e-3, f"{k} did not move"
        np.testing.assert_allclose(pj[k], pt[k], rtol=GRAD_RTOL, atol=GRAD_ATOL,
                                   err_msg=f"{cid}: {k} after 5 Adam steps, jax vs torch")


# -------------------------------------------------------------- 5. padding invariance

SRC_PAD_POS = np.nonzero(~SRC_REAL)          # 5 padded source positions
TGT_PAD_POS = np.nonzero(~TGT_REAL)          # 3 padded target positions
PROPERTY = settings(max_examples=10, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
SRC_IDS = st.lists(st.integers(0, SRC_VOCAB - 1), min_size=len(SRC_PAD_POS[0]),
                   max_size=len(SRC_PAD_POS[0]))
TGT_IDS = st.lists(st.integers(0, TGT_VOCAB - 1), min_size=len(TGT_PAD_POS[0]),
                   max_size=len(TGT_PAD_POS[0]))


def with_padding(src_ids: list[int], tgt_ids: list[int]) -> tuple[dict, dict]:
    src = SRC.copy()
    src[SRC_PAD_POS] = src_ids
    tgt_in = TGT_IN.copy()
    tgt_in[TGT_PAD_POS] = tgt_ids
    return {**BATCH, "src": src}, {**BATCH, "tgt_in": tgt_in}


def assert_same_forward(out: Out, base: Out, what: str, real_targets_only: bool) -> None:
    sel = TGT_REAL if real_targets_only else np.ones_like(TGT_REAL)
    np.testing.assert_array_equal(out.logits[sel], base.logits[sel], err_msg=f"{what}: logits")
    if base.weights is not None:
        np.testing.assert_array_equal(out.weights[sel], base.weights[sel],
                                      err_msg=f"{what}: weights")
    assert out.loss == base.loss, f"{what}: loss {out.loss!r} != {base.loss!r}"


@pytest.mark.parametrize("cid", PADDING_CONFIGS)
@PROPERTY
@given(src_ids=SRC_IDS, tgt_ids=TGT_IDS)
def test_padding_ids_change_no_output(backend, cid, src_ids, tgt_ids):
    base = evaluate(backend, cid)
    src_batch, tgt_batch = with_padding(src_ids, tgt_ids)
    assert_same_forward(evaluate(backend, cid, batch=src_batch), base,
                        f"{backend.name} padded source ids {src_ids}", real_targets_only=False)
    assert_same_forward(evaluate(backend, cid, batch=tgt_batch), base,
                        f"{backend.name} padded target ids {tgt_ids}", real_targets_only=True)


@pytest.mark.parametrize("cid", PADDING_CONFIGS)
@PROPERTY
@given(src_ids=SRC_IDS, tgt_ids=TGT_IDS)
def test_padding_ids_change_no_gradient(grad_backend, cid, src_ids, tgt_ids):
    base = autodiff(grad_backend.name, cid)
    for batch, what in zip(with_padding(src_ids, tgt_ids), ("source", "target")):
        out = evaluate(grad_backend, cid, batch=batch, grads=True)
        assert out.loss == base.loss, f"padded {what} ids changed the loss"
        for k, g in base.grads.items():
            np.testing.assert_array_equal(out.grads[k], g,
                                          err_msg=f"padded {what} ids changed d/d{k}")


@pytest.mark.parametrize("cid", PADDING_CONFIGS)
def test_real_ids_do_change_the_output(backend, cid):
    """The invariance tests can fail: a real source id or an earlier target id matters."""
    base = evaluate(backend, cid)
    src = SRC.copy()
    src[2, 0] = 6                                   # the only real token of sequence 2
    changed = evaluate(backend, cid, batch={**BATCH, "src": src})
    assert np.abs(changed.logits[2] - base.logits[2]).max() > 1e-6
    assert changed.loss != base.loss
    tgt_in = TGT_IN.copy()
    tgt_in[0, 1] = 7                                # a real target input
    changed = evaluate(backend, cid, batch={**BATCH, "tgt_in": tgt_in})
    assert np.abs(changed.logits[0, 1:] - base.logits[0, 1:]).max() > 1e-6
    np.testing.assert_array_equal(changed.logits[0, 0], base.logits[0, 0])  # causal


# ------------------------------------------------------------ 6. the encoder and lengths

ENC_CONFIGS = {"lstm": "general-lstm-luong", "gru": "general-gru-luong"}


@functools.lru_cache(maxsize=None)
def jax_encode(config: M.Seq2SeqConfig):
    be = backends.get("jax")
    return be.jit(lambda p, src, src_len: M.encode(p, config, src, src_len, scan=be.scan))


def run_encode(be: backends.Backend, cell: str, src: np.ndarray, src_len: np.ndarray) -> dict:
    cid = ENC_CONFIGS[cell]
    params = be.asarray_tree(PARAMS[cid])
    args = (be.asarray_tree(src), be.asarray_tree(src_len))
    if be.name == "jax":
        enc = jax_encode(CONFIGS[cid])(params, *args)
    else:
        enc = M.encode(params, CONFIGS[cid], *args, scan=be.scan)
    return {"memory": be.to_numpy(enc["memory"]), "mask": be.to_numpy(enc["mask"]),
            "state": np_of(be, enc["state"])}


def cell_loop(cell: str, params: dict, tokens: np.ndarray) -> tuple[np.ndarray, ...]:
    """One sequence through a public cell, token by token (batch of one)."""
    h = np.zeros((1, HIDDEN))
    c = np.zeros((1, HIDDEN))
    outputs = []
    for tok in tokens:
        x = params["src_embed"][[tok]]
        if cell == "lstm":
            h, c = lstm_cell(params, x, (h, c))
        else:
            h = gru_cell(params, x, h)
        outputs.append(h[0])
    return np.array(outputs), h[0], c[0]


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_encoder_memory_is_zero_at_padding(backend, cell):
    enc = run_encode(backend, cell, SRC, SRC_LEN)
    np.testing.assert_array_equal(enc["mask"], SRC_REAL)
    assert enc["memory"].shape == (B, S, 2 * HIDDEN)
    assert (enc["memory"][~SRC_REAL] == 0.0).all(), "memory at a padded position is not 0"
    assert (np.abs(enc["memory"][SRC_REAL]).min(axis=-1) > 0).all()
    ref = run_encode(NP, cell, SRC, SRC_LEN)
    np.testing.assert_allclose(enc["memory"], ref["memory"], rtol=FORWARD_RTOL,
                               atol=FORWARD_ATOL)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_encoder_states_match_the_unpadded_sequences(backend, cell):
    """Each sequence alone (unpadded, S = its length) gives memory[:L] and final states
    equal to those in the padded batch; and both directions equal a hand loop over the
    public cell (backward: the real tokens reversed)."""
    if backend.name == "jax":
        pytest.skip("one JAX compilation per unpadded length; numpy, torch and "
                    "array_api_strict check it, and jax's padded encoder matches numpy")
    padded = run_encode(backend, cell, SRC, SRC_LEN)
    params = PARAMS[ENC_CONFIGS[cell]]
    fwd = {k[len("enc_fwd."):]: v for k, v in params.items() if k.startswith("enc_fwd.")}
    bwd = {k[len("enc_bwd."):]: v for k, v in params.items() if k.startswith("enc_bwd.")}
    for b in range(B):
        L = int(SRC_LEN[b])
        alone = run_encode(backend, cell, np.ascontiguousarray(SRC[b:b + 1, :L]),
                           np.array([L], dtype=np.int64))
        np.testing.assert_allclose(padded["memory"][b, :L], alone["memory"][0], rtol=STEP_TOL,
                                   atol=FORWARD_ATOL, err_msg=f"sequence {b}: memory[:L]")
        for key in padded["state"]:
            np.testing.assert_allclose(padded["state"][key][b], alone["state"][key][0],
                                       rtol=STEP_TOL, atol=FORWARD_ATOL,
                                       err_msg=f"sequence {b}: initial decoder {key}")
        tokens = SRC[b, :L]
        f_out, f_h, f_c = cell_loop(cell, {**fwd, "src_embed": params["src_embed"]}, tokens)
        b_out, b_h, b_c = cell_loop(cell, {**bwd, "src_embed": params["src_embed"]},
                                    tokens[::-1])
        H = HIDDEN
        np.testing.assert_allclose(padded["state"]["h"][b], np.concatenate([f_h, b_h]),
                                   rtol=STEP_TOL, atol=FORWARD_ATOL,
                                   err_msg=f"sequence {b}: final h [fwd; bwd]")
        if cell == "lstm":
            np.testing.assert_allclose(padded["state"]["c"][b], np.concatenate([f_c, b_c]),
                                       rtol=STEP_TOL, atol=FORWARD_ATOL,
                                       err_msg=f"sequence {b}: final c [fwd; bwd]")
        np.testing.assert_allclose(padded["memory"][b, :L, :H], f_out, rtol=STEP_TOL,
                                   atol=FORWARD_ATOL, err_msg=f"sequence {b}: forward memory")
        np.testing.assert_allclose(padded["memory"][b, :L, H:], b_out[::-1], rtol=STEP_TOL,
                                   atol=FORWARD_ATOL, err_msg=f"sequence {b}: backward memory")
