"""Learning-rate schedules (pure functions of the step), their place inside the optimiser
(evaluated by its update in the training step), and TrainConfig's checks. References are
plain-Python formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xpseq import backends
from xpseq.core.optim import adam, scale_learning_rate
from xpseq.data import EOS_ID, make_batches
from xpseq.models.rnn import Seq2SeqConfig, init_params
from xpseq.train import TrainConfig, make_train_step, schedules


def python_factor(kind: str, s: int, w: int = 0, n: int = 0, f: float = 0.0) -> float:
    """The factor at step ``s`` (updates already taken), by hand."""
    t = s + 1
    if kind == "constant":
        return 1.0
    if kind == "warmup_inverse_sqrt":
        return min(t / w, (w / t) ** 0.5)
    if t <= w:
        return t / w
    p = min(max((t - w) / (n - w), 0.0), 1.0)
    shape = 0.5 * (1 + math.cos(math.pi * p)) if kind == "warmup_cosine" else 1 - p
    return f + (1 - f) * shape


CASES = [
    (schedules.constant(), ("constant",)),
    (schedules.warmup_inverse_sqrt(4), ("warmup_inverse_sqrt", 4)),
    (schedules.warmup_cosine(3, 10, 0.1), ("warmup_cosine", 3, 10, 0.1)),
    (schedules.warmup_linear(2, 8), ("warmup_linear", 2, 8, 0.0)),
    (schedules.warmup_linear(0, 5, 0.5), ("warmup_linear", 0, 5, 0.5)),
]
IDS = [c[1][0] + str(i) for i, c in enumerate(CASES)]


@pytest.mark.parametrize("schedule, ref", CASES, ids=IDS)
def test_schedules_match_their_formulas_on_every_backend(backend, schedule, ref):
    for s in range(14):
        step = backend.asarray(float(s), dtype="float64")
        got = float(backend.to_numpy(schedule(step)))
        assert got == pytest.approx(python_factor(ref[0], s, *ref[1:]), rel=1e-14, abs=1e-15)


def test_schedules_peak_at_one_and_round_trip_through_dicts():
    warm = schedules.warmup_inverse_sqrt(4)
    values = [float(warm(np.float64(s))) for s in range(10)]
    assert values[3] == 1.0 and max(values) == 1.0 and values[:4] == [0.25, 0.5, 0.75, 1.0]
    cosine = schedules.warmup_cosine(2, 6, final=0.2)
    assert float(cosine(np.float64(5))) == pytest.approx(0.2)        # reaches final at total
    assert float(cosine(np.float64(50))) == pytest.approx(0.2)       # and stays there
    for schedule, _ in CASES:
        assert schedules.from_dict(schedule.to_dict()) == schedule
        assert hash(schedule) == hash(schedules.from_dict(schedule.to_dict()))
        rate = 3e-3 * schedule
        assert rate == schedule * 3e-3 == schedules.Scaled(3e-3, schedule)
        assert schedules.from_dict(rate.to_dict()) == rate
        assert hash(schedules.from_dict(rate.to_dict())) == hash(rate)


@pytest.mark.parametrize("schedule, ref", CASES, ids=IDS)
def test_a_number_times_a_schedule_is_the_rate(schedule, ref):
    rate = 3e-3 * schedule
    assert rate.to_dict() == {"kind": "scaled", "lr": 3e-3, "factor": schedule.to_dict()}
    for s in range(12):
        got = float(rate(np.float64(s)))
        assert got == 3e-3 * float(schedule(np.float64(s)))        # exactly lr · factor
        assert got == pytest.approx(3e-3 * python_factor(ref[0], s, *ref[1:]), rel=1e-14)


def test_schedules_refuse_bad_settings():
    with pytest.raises(ValueError, match="warmup must be a positive int"):
        schedules.warmup_inverse_sqrt(0)
    with pytest.raises(ValueError, match=r"total \(3\) must exceed warmup \(3\)"):
        schedules.warmup_cosine(3, 3)
    with pytest.raises(ValueError, match="final must be a number in"):
        schedules.warmup_linear(1, 4, final=2.0)
    with pytest.raises(ValueError, match="unknown schedule"):
        schedules.from_dict({"kind": "step"})
    with pytest.raises(ValueError, match="scaled: lr must be a positive number"):
        0.0 * schedules.constant()
    with pytest.raises(ValueError, match="scaled: lr must be a positive number"):
        schedules.Scaled(math.inf, schedules.constant())
    with pytest.raises(TypeError, match="scaled: factor must be an xpseq.train.schedules"):
        schedules.Scaled(1e-3, lambda step: 1.0)
    with pytest.raises(TypeError):
        schedules.constant() * schedules.constant()
    with pytest.raises(TypeError, match="from_dict: data must be a dict"):
        schedules.from_dict("constant")


CONFIG = Seq2SeqConfig(9, 9, embed=4, hidden=4, attention="dot")
BATCH = make_batches([([4, 5, EOS_ID], [6, 7]), ([8, EOS_ID], [4])], batch_size=2)[0]


def one_step(be, optimizer, opt_state=None):
    step = make_train_step(CONFIG, optimizer, be, clip_norm=None)
    params = {k: be.asarray(v) for k, v in init_params(CONFIG, seed=1).items()}
    opt_state = optimizer.init(params) if opt_state is None else opt_state(params)
    params, opt_state, _ = step(params, opt_state, {k: be.asarray(v) for k, v in BATCH.items()})
    return {k: be.to_numpy(v) for k, v in params.items()}, opt_state


@pytest.mark.parametrize("name", ["numpy", "jax"])
def test_the_step_scales_the_learning_rate_by_the_schedule(name):
    pytest.importorskip(name)
    be = backends.get(name)
    # warmup_inverse_sqrt(4) is 1/4 at step 0: the first update is adam(lr / 4)'s.
    rate = 4e-2 * schedules.warmup_inverse_sqrt(4)
    # The references are NumPy's plain Adam steps: on JAX only the scheduled step compiles
    # (the halved run below reuses it: the same optimiser, a new factor in its state).
    ref_be = backends.get("numpy")
    scheduled, state = one_step(be, adam(rate))
    reference, reference_state = one_step(ref_be, adam(1e-2))
    for key in reference:
        np.testing.assert_allclose(scheduled[key], reference[key], rtol=1e-12, atol=1e-15)
    assert set(state) == set(reference_state) == {"step", "m", "v", "scale"}
    assert float(be.to_numpy(state["scale"])) == 1.0
    # With the plateau factor lowered to 1/2, the two multiply and the factor stays.
    halved, state = one_step(be, adam(rate),
                             lambda p: scale_learning_rate(adam(rate).init(p), 0.5))
    eighth, _ = one_step(ref_be, adam(5e-3))
    for key in eighth:
        np.testing.assert_allclose(halved[key], eighth[key], rtol=1e-12, atol=1e-15)
    assert float(be.to_numpy(state["scale"])) == 0.5
    assert set(state) == set(reference_state)          # nothing written from outside


def test_the_step_cache_tells_schedules_apart():
    be = backends.get("numpy")
    four = make_train_step(CONFIG, adam(1e-2 * schedules.warmup_inverse_sqrt(4)), be)
    assert make_train_step(CONFIG, adam(1e-2 * schedules.warmup_inverse_sqrt(4)), be) is four
    assert make_train_step(CONFIG, adam(1e-2 * schedules.warmup_inverse_sqrt(5)), be) \
        is not four
    assert make_train_step(CONFIG, adam(2e-2 * schedules.warmup_inverse_sqrt(4)), be) \
        is not four
    assert make_train_step(CONFIG, adam(1e-2), be) is not four


def test_train_config_checks_its_fields():
    assert TrainConfig().optimizer.name == "adam"
    for field, bad, message in [("epochs", 0, "epochs must be a positive int"),
                                ("max_steps", -1, "max_steps must be a positive int"),
                                ("clip_norm", 0.0, "clip_norm must be a positive number"),
                                ("seed", -2, "seed must be a non-negative int"),
                                ("min_delta", -1.0, "min_delta must be a non-negative"),
                                ("monitor", 3, "monitor must be the name")]:
        with pytest.raises((TypeError, ValueError), match=message):
            TrainConfig(**{field: bad})
    with pytest.raises(TypeError, match="schedule"):   # a schedule is the optimiser's lr
        TrainConfig(schedule=schedules.constant())
    with pytest.raises(TypeError, match="optimizer must be an xpseq.core.optim.Optimizer"):
        TrainConfig(optimizer="adam")
