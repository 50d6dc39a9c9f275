"""Learning-rate schedules (pure functions of the step), their place in the training step,
and TrainConfig's checks. References are plain-Python formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xpseq import backends
from xpseq.core.optim import adam
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


@pytest.mark.parametrize("schedule, ref", CASES, ids=[c[1][0] + str(i) for i, c in enumerate(CASES)])
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


def test_schedules_refuse_bad_settings():
    with pytest.raises(ValueError, match="warmup must be a positive int"):
        schedules.warmup_inverse_sqrt(0)
    with pytest.raises(ValueError, match=r"total \(3\) must exceed warmup \(3\)"):
        schedules.warmup_cosine(3, 3)
    with pytest.raises(ValueError, match="final must be a number in"):
        schedules.warmup_linear(1, 4, final=2.0)
    with pytest.raises(ValueError, match="unknown schedule"):
        schedules.from_dict({"kind": "step"})


CONFIG = Seq2SeqConfig(9, 9, embed=4, hidden=4, attention="dot")
BATCH = make_batches([([4, 5, EOS_ID], [6, 7]), ([8, EOS_ID], [4])], batch_size=2)[0]


def one_step(be, optimizer, schedule=None, opt_state=None):
    step = make_train_step(CONFIG, optimizer, be, clip_norm=None, schedule=schedule)
    params = {k: be.asarray(v) for k, v in init_params(CONFIG, seed=1).items()}
    opt_state = optimizer.init(params) if opt_state is None else opt_state(params)
    params, opt_state, _ = step(params, opt_state, {k: be.asarray(v) for k, v in BATCH.items()})
    return {k: be.to_numpy(v) for k, v in params.items()}, opt_state


@pytest.mark.parametrize("name", ["numpy", "jax"])
def test_the_step_scales_the_learning_rate_by_the_schedule(name):
    pytest.importorskip(name)
    be = backends.get(name)
    # warmup_inverse_sqrt(4) is 1/4 at step 0: the first update is adam(lr / 4)'s.
    scheduled, state = one_step(be, adam(4e-2), schedules.warmup_inverse_sqrt(4))
    reference, _ = one_step(be, adam(1e-2))
    for key in reference:
        np.testing.assert_allclose(scheduled[key], reference[key], rtol=1e-12, atol=1e-15)
    assert "lr_scale" not in state
    # With the plateau rule's lr_scale in the state, the two multiply and the scale stays.
    halved, state = one_step(be, adam(4e-2), schedules.warmup_inverse_sqrt(4),
                             lambda p: dict(adam(4e-2).init(p), lr_scale=be.asarray(0.5)))
    eighth, _ = one_step(be, adam(5e-3))
    for key in eighth:
        np.testing.assert_allclose(halved[key], eighth[key], rtol=1e-12, atol=1e-15)
    assert float(be.to_numpy(state["lr_scale"])) == 0.5


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
    with pytest.raises(TypeError, match="schedule must be an xpseq.train.schedules"):
        TrainConfig(schedule=lambda step: 1.0)
    with pytest.raises(TypeError, match="optimizer must be an xpseq.core.optim.Optimizer"):
        TrainConfig(optimizer="adam")
