"""``backends.get("torch", compile=True)``: torch.compile'd training and decoder steps take
the eager steps' values, and the option is refused where it does not apply.

Compiling costs seconds per graph on a warm inductor cache and tens of seconds on a cold
one, so the models are tiny and every compiled program is built once: one training step per
model kind (its loss with the backward, and the update), reused by ``fit``, one with the
hand-derived backward per kind, and the RNN's decoder step. The command line's
``--compile`` errors are rows of tests/test_cli_errors.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from xpseq import backends, models
from xpseq.core.optim import adam
from xpseq.data import EOS_ID, make_batches
from xpseq.search import SearchOptions, search
from xpseq.testing import GRAD_RTOL
from xpseq.train import TrainConfig, fit, make_train_step

torch = pytest.importorskip("torch")

VOCAB = 12
# One-word sentences in batches of 4: source and target of two positions each, so that the
# RNN's unrolled loops stay short; both batches have one shape (one compilation).
PAIRS = [([w, EOS_ID], [w]) for w in (4, 7, 5, 9, 11, 6, 8, 10)]
BATCHES = make_batches(PAIRS, batch_size=4, bucket=2)
CONFIGS = {
    "rnn": models.get("rnn").Config(VOCAB, VOCAB, embed=4, hidden=4, attention="general",
                                    dropout=0.1),
    "transformer": models.get("transformer").Config(
        VOCAB, VOCAB, d_model=8, heads=2, encoder_layers=1, decoder_layers=1, d_ff=16,
        dropout=0.1),
}
OPTIMIZER = adam(3e-2)


def train_steps(kind: str, backend: backends.Backend, steps: int = 2,
                gradients: str | None = None) -> tuple:
    """``steps`` training steps (Adam, clipping, dropout) in float64 from one start: the
    losses, the NumPy parameters, the step and how often its Python body ran in these
    steps (the step is kept for the process: another test may have run it before)."""
    config = CONFIGS[kind]
    step = make_train_step(config, OPTIMIZER, backend, clip_norm=1.0, gradients=gradients)
    before = step.traces
    params = backend.asarray_tree(models.get(kind).init_params(config, seed=3))
    opt_state = OPTIMIZER.init(params)
    losses = []
    for i in range(steps):
        batch = backend.asarray_tree(BATCHES[i % len(BATCHES)])
        params, opt_state, loss = step(params, opt_state, batch, seed=1)
        losses.append(float(backend.to_numpy(loss)))
    return losses, backend.to_numpy_tree(params), step, step.traces - before


def test_get_refuses_compile_where_it_does_not_apply():
    for name in ("jax", "numpy", "array_api_strict"):
        with pytest.raises(ValueError, match=f"backends.get\\('{name}', compile=True\\): "
                           "compile applies to the torch backend"):
            backends.get(name, compile=True)
    with pytest.raises(TypeError, match="compile must be True or False, got str 'yes'"):
        backends.get("torch", compile="yes")


def test_the_compiled_backend_is_torch_cached_apart():
    eager, compiled = backends.get("torch"), backends.get("torch", compile=True)
    assert compiled is backends.get("torch", "cpu", compile=True) and compiled is not eager
    assert (eager.name, eager.capabilities.compile, compiled.name,
            compiled.capabilities.compile) == ("torch", "none", "torch", "pieces")
    assert eager.cache_key != compiled.cache_key
    assert (eager.label, compiled.label) == ("torch", "torch with torch.compile")
    config = CONFIGS["rnn"]
    assert make_train_step(config, OPTIMIZER, eager) is not make_train_step(
        config, OPTIMIZER, compiled)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CONFIGS))
def test_the_compiled_training_step_takes_the_eager_steps(kind):
    """``gradients="autodiff"`` compiled: two float64 steps with the same losses and
    parameters as eager torch, from graphs that torch.compile built (the loss with its
    autograd backward, the update) once for the one batch shape; ``fit`` then reuses them
    and records no compilation."""
    eager_losses, eager_params, eager_step, _ = train_steps(kind, backends.get("torch"))
    compiled = backends.get("torch", compile=True)
    losses, params, step, traces = train_steps(kind, compiled, gradients="autodiff")
    np.testing.assert_allclose(losses, eager_losses, rtol=GRAD_RTOL, atol=1e-12)
    assert losses[1] != losses[0]
    for name in eager_params:
        np.testing.assert_allclose(params[name], eager_params[name], rtol=GRAD_RTOL,
                                   atol=1e-10, err_msg=name)
    assert eager_step.graphs is None
    assert step.graphs == 2 and traces == 2      # two graphs, the Python step twice
    result = fit(CONFIGS[kind], models.get(kind).init_params(CONFIGS[kind], seed=3),
                 BATCHES, compiled,
                 train=TrainConfig(epochs=1, optimizer=OPTIMIZER, clip_norm=1.0,
                                   progress=False, gradients="autodiff"))
    assert result.traces == 0 and result.history[0]["traces"] == 0
    assert step.graphs == 2


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CONFIGS))
def test_the_compiled_hand_derived_step_takes_the_autograd_steps(kind):
    """``gradients="hand-derived"`` compiled (the loss and its hand-derived backward pass
    as one graph, the RNN's loops unrolled in it): two float64 steps with the losses and
    parameters of eager autograd's."""
    eager_losses, eager_params, _, _ = train_steps(kind, backends.get("torch"))
    losses, params, step, traces = train_steps(kind, backends.get("torch", compile=True),
                                               gradients="hand-derived")
    np.testing.assert_allclose(losses, eager_losses, rtol=GRAD_RTOL, atol=1e-12)
    for name in eager_params:
        np.testing.assert_allclose(params[name], eager_params[name], rtol=GRAD_RTOL,
                                   atol=1e-10, err_msg=name)
    assert step.graphs == 2 and traces == 2


@pytest.mark.slow
def test_compiled_greedy_search_gives_the_eager_tokens():
    """The RNN's decoder step compiled once serves every step of a search: the same tokens,
    scores and attention as the eager search."""
    config = CONFIGS["rnn"]
    start = models.get("rnn").init_params(config, seed=5)
    src = np.array([[4, 5, 6], [7, 8, 0], [9, 0, 0]])
    src_len = np.array([3, 2, 1])
    eager, compiled = backends.get("torch"), backends.get("torch", compile=True)
    expected = search(eager.asarray_tree(start), config, src, src_len, eager, SearchOptions())
    params = compiled.asarray_tree(start)
    for _ in range(2):
        found = search(params, config, src, src_len, compiled, SearchOptions())
        np.testing.assert_array_equal(found.tokens, expected.tokens)
        np.testing.assert_array_equal(found.lengths, expected.lengths)
        np.testing.assert_allclose(found.scores, expected.scores, rtol=1e-12)
        np.testing.assert_allclose(found.attention, expected.attention, rtol=1e-12,
                                   atol=1e-14)
    from xpseq.search.decode import compiled_step

    assert compiled_step(config, True, compiled).compiles == 1


def test_a_rule_made_in_each_call_compiles_once():
    """The models make their ``custom_vjp`` rules inside the loss, anew at every call (the
    Transformer's blockwise attention under autodiff): compiled, the loss keeps one graph
    across calls (no compile again, no graph break at the rule), and its gradient is the
    rule's (here 3 x the true one)."""
    backend = backends.get("torch", compile=True)
    xp = backend.xp

    def loss(x, w):
        def fn(a, b):
            return xp.tanh(a @ b)

        def fwd(a, b):
            y = xp.tanh(a @ b)
            return y, (a, b, y)

        def bwd(saved, ct):
            a, b, y = saved
            dz = 3.0 * ct * (1.0 - y * y)
            return dz @ b.T, a.T @ dz

        return xp.sum(backend.custom_vjp(fn, fwd, bwd)(x, w))

    piece = backend.compile_piece(loss)
    grad = backend.value_and_grad(piece, argnums=1)
    rng = np.random.default_rng(0)
    x = backend.asarray(rng.normal(size=(4, 5)))
    counts = []
    for _ in range(3):
        w = rng.normal(size=(5, 3))
        value, g = grad(x, backend.asarray(w))
        y = np.tanh(backend.to_numpy(x) @ w)
        np.testing.assert_allclose(backend.to_numpy(value), y.sum(), rtol=1e-14)
        np.testing.assert_allclose(backend.to_numpy(g),
                                   3.0 * backend.to_numpy(x).T @ (1.0 - y * y), rtol=1e-13)
        counts.append(piece.compiles)
    assert counts[0] == counts[-1] == 1, counts
