"""Training: the loss falls, NumPy's hand-derived steps follow JAX's, JAX stops tracing,
dropout is seeded, early stopping works, and a resumed run equals the uninterrupted one."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from xpseq import backends
from xpseq.core.optim import adam, scale_learning_rate
from xpseq.data import BOS_ID, EOS_ID, PAD_ID, make_batches
from xpseq.models import check_batch
from xpseq.models.rnn import Seq2SeqConfig, init_params
from xpseq.train import TrainConfig, callbacks, fit, make_train_step
from xpseq.train import checkpoint as ckpt

VOCAB = 12


def reverse_pairs(n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """A toy task: the target is the source reversed (ids 4..11, the source ends in EOS)."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        words = rng.integers(4, VOCAB, rng.integers(1, 7)).tolist()
        pairs.append((words + [EOS_ID], words[::-1]))
    return pairs


# Bucket 8: one batch shape, one JAX compilation per config. (Bucket 4 gives several shapes,
# for the tracing test.)
BATCHES = make_batches(reverse_pairs(40), batch_size=8, bucket=8)
BATCHES_4 = make_batches(reverse_pairs(40), batch_size=8, bucket=4)
DEV = make_batches(reverse_pairs(8, seed=1), batch_size=8, bucket=8)
CONFIG = Seq2SeqConfig(VOCAB, VOCAB, embed=4, hidden=4, attention="general")


def run(backend_name: str, batches=BATCHES, **kwargs):
    """``fit`` with the TrainConfig fields and callbacks that ``kwargs`` name (early
    stopping with patience 2 unless told otherwise)."""
    options = dict(dev_batches=DEV, optimizer=adam(1e-2), epochs=2, progress=False, patience=2)
    options.update(kwargs)
    config = options.pop("config", CONFIG)
    dev, resume = options.pop("dev_batches"), options.pop("resume", None)
    parts = []
    if "on_epoch" in options:
        parts.append(callbacks.EpochMetrics(options.pop("on_epoch")))
    if "lr_decay" in options:
        parts.append(callbacks.ReduceLROnPlateau(options.pop("lr_decay")))
    parts.append(callbacks.EarlyStopping(options.pop("patience")))
    if options.pop("restore_best", False):
        parts.append(callbacks.RestoreBest())
    if "time_limit" in options:
        parts.append(callbacks.TimeLimit(options.pop("time_limit")))
    if "checkpoint" in options:
        parts.append(callbacks.SaveCheckpoint(options.pop("checkpoint")))
    return fit(config, init_params(config, seed=0), batches, backends.get(backend_name),
               dev_batches=dev, train=TrainConfig(**options), callbacks=parts, resume=resume)


def test_batches_are_padded_bucketed_and_shifted():
    shapes = {b["src"].shape[1] for b in BATCHES_4} | {b["tgt_in"].shape[1] for b in BATCHES_4}
    assert all(n % 4 == 0 for n in shapes)
    for b in BATCHES_4:
        assert np.all(b["tgt_in"][:, 0] == BOS_ID)
        for row in range(len(b["src_len"])):
            n = int(np.sum(b["tgt_out"][row] != PAD_ID))
            assert b["tgt_out"][row, n - 1] == EOS_ID             # y_1 .. y_n </s>
            assert np.array_equal(b["tgt_in"][row, 1:n], b["tgt_out"][row, :n - 1])
            assert np.all(b["src"][row, b["src_len"][row]:] == PAD_ID)
    lengths = [int(max(b["src_len"])) for b in BATCHES_4]
    assert lengths == sorted(lengths)                              # sorted by length
    with pytest.raises(ValueError, match="pair 1 has an empty source"):
        make_batches([([4], [5]), ([], [5])], batch_size=2)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        make_batches([([4], [5])], batch_size=0)


def run_steps(name: str, config: Seq2SeqConfig, steps: int,
              gradients: str | None = None) -> tuple[list[float], dict]:
    """``steps`` training steps (Adam, clipping at 5) on the same batches, cycling."""
    be = backends.get(name)
    step = make_train_step(config, adam(3e-2), be, clip_norm=5.0, gradients=gradients)
    params = {k: be.asarray(v) for k, v in init_params(config, seed=3).items()}
    opt_state = adam(3e-2).init(params)
    losses = []
    for i in range(steps):
        batch = {k: be.asarray(v) for k, v in BATCHES[i % len(BATCHES)].items()
                 if k in ("src", "src_len", "tgt_in", "tgt_out")}
        params, opt_state, loss = step(params, opt_state, batch)
        losses.append(float(be.to_numpy(loss)))
    return losses, {k: be.to_numpy(v) for k, v in params.items()}


# The GRU case is a long check (make test-slow): the GRU's step rules are compared with
# JAX's in parity_tests/test_vjp.py; here the LSTM's training is followed for 20 steps.
@pytest.mark.parametrize("config", [
    CONFIG, pytest.param(Seq2SeqConfig(VOCAB, VOCAB, embed=4, hidden=3, cell="gru",
                                       attention="additive", style="bahdanau"),
                         marks=pytest.mark.slow)],
    ids=["general-lstm-luong", "additive-gru-bahdanau"])
def test_numpy_trains_like_jax(config):
    """20 Adam steps in float64 from one initialisation on the same batches: NumPy's
    hand-derived gradients follow JAX's loss curve to 1e-8 and end at the same parameters;
    so does JAX with ``gradients="hand-derived"`` (the encoder's recurrences and the
    decoder's loop differentiated by the rules inside the jitted step), for an LSTM and a
    GRU."""
    pytest.importorskip("jax")
    np_losses, np_params = run_steps("numpy", config, 20)
    assert np_losses[-1] < np_losses[0] - 0.25          # it does learn
    for gradients in (None, "hand-derived"):
        jax_losses, jax_params = run_steps("jax", config, 20, gradients)
        np.testing.assert_allclose(np_losses, jax_losses, rtol=1e-8, err_msg=str(gradients))
        for name in np_params:
            np.testing.assert_allclose(np_params[name], jax_params[name], rtol=1e-8,
                                       atol=1e-10, err_msg=f"{gradients}: {name}")


def test_strict_trains_like_numpy():
    """array_api_strict runs the same hand-derived steps: the backward pass uses only the
    standard."""
    pytest.importorskip("array_api_strict")
    strict_losses, _ = run_steps("array_api_strict", CONFIG, 3)
    np_losses, _ = run_steps("numpy", CONFIG, 3)
    np.testing.assert_allclose(strict_losses, np_losses, rtol=1e-12)


DROPOUT_CONFIG = Seq2SeqConfig(VOCAB, VOCAB, embed=4, hidden=4, attention="general",
                               dropout=0.3)


def test_torch_hand_derived_steps_follow_autograd():
    """``gradients="hand-derived"`` on PyTorch: the rules of xpseq.core.vjp instead of the
    tape give the same float64 training run (dropout included), and since they record no
    tape they never call ``torch.autograd.grad`` (the autograd step does)."""
    torch = pytest.importorskip("torch")
    hand_losses, hand_params = run_steps("torch", DROPOUT_CONFIG, 8, "hand-derived")
    auto_losses, auto_params = run_steps("torch", DROPOUT_CONFIG, 8)
    np.testing.assert_allclose(hand_losses, auto_losses, rtol=1e-10)
    assert hand_losses[-1] < hand_losses[0]
    for name in hand_params:
        np.testing.assert_allclose(hand_params[name], auto_params[name], rtol=1e-10,
                                   atol=1e-12, err_msg=name)
    with mock.patch.object(torch.autograd, "grad", side_effect=AssertionError("tape")):
        tapeless, _ = run_steps("torch", DROPOUT_CONFIG, 2, "hand-derived")
        with pytest.raises(AssertionError, match="tape"):
            run_steps("torch", DROPOUT_CONFIG, 1, "autodiff")
    assert tapeless == hand_losses[:2]


def test_fit_takes_the_gradients_option():
    pytest.importorskip("torch")
    hand = run("torch", epochs=1, gradients="hand-derived")
    auto = run("torch", epochs=1)
    np.testing.assert_allclose(hand.history[0]["train_loss"], auto.history[0]["train_loss"],
                               rtol=1e-10)
    np.testing.assert_allclose(hand.params["out.W"], auto.params["out.W"], rtol=1e-10)


@pytest.mark.parametrize("name, gradients, message", [
    ("numpy", "foo", r"gradients must be None or one of \['autodiff', 'hand-derived'\], "
                     "got 'foo'"),
    ("numpy", "autodiff", "gradients='autodiff' needs a backend with automatic "
                          "differentiation"),
])
def test_bad_gradients_option_is_refused(name, gradients, message):
    pytest.importorskip(name)
    be = backends.get(name)
    with pytest.raises(ValueError, match=message):
        make_train_step(CONFIG, adam(1e-2), be, gradients=gradients)
    with pytest.raises(ValueError, match=message):
        run(name, gradients=gradients)


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_loss_falls(name):
    result = run(name, epochs=3, optimizer=adam(3e-2))
    train = [h["train_loss"] for h in result.history]
    dev = [h["dev_loss"] for h in result.history]
    assert len(train) == 3 and result.stopped == "epochs"
    assert train[-1] < train[0] - 0.2 and dev[-1] < dev[0]
    assert result.params["out.W"].dtype == np.float64


def test_jax_traces_once_per_batch_shape():
    shapes = {(b["src"].shape, b["tgt_in"].shape) for b in BATCHES_4}
    assert 1 < len(shapes) < len(BATCHES_4)      # bucketing collapsed the shapes
    fresh = Seq2SeqConfig(VOCAB, VOCAB, embed=4, hidden=5, attention="general")  # not cached
    result = run("jax", BATCHES_4, config=fresh, epochs=2)
    assert [h["traces"] for h in result.history] == [len(shapes), 0]
    again = run("jax", BATCHES_4, config=fresh, epochs=1, seed=9)  # reused, new seed too
    assert again.traces == 0


def test_early_stop_on_dev_plateau():
    result = run("torch", epochs=5, patience=1, min_delta=1e9)
    assert result.stopped == "early_stop"
    assert len(result.history) == 2              # epoch 1 sets the best, epoch 2 cannot beat it


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_dropout_is_reproducible_from_the_seed(name):
    config = Seq2SeqConfig(VOCAB, VOCAB, embed=4, hidden=4, attention="dot", dropout=0.3)
    a = run(name, config=config, epochs=1, seed=5)
    b = run(name, config=config, epochs=1, seed=5)
    c = run(name, config=config, epochs=1, seed=6)
    for key in a.params:
        assert np.array_equal(a.params[key], b.params[key]), key
    assert not np.array_equal(a.params["out.W"], c.params["out.W"])


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_resumed_run_equals_uninterrupted_run(name, tmp_path):
    config = Seq2SeqConfig(VOCAB, VOCAB, embed=4, hidden=4, attention="additive", dropout=0.2)
    whole = run(name, config=config, epochs=3, max_steps=8)     # 5 batches an epoch: 1 + 3/5
    assert whole.stopped == "max_steps"
    path = tmp_path / "part.safetensors"
    first = run(name, config=config, epochs=3, max_steps=3, checkpoint=path)
    assert first.stopped == "max_steps"
    second = run(name, config=config, epochs=3, max_steps=8, resume=ckpt.load(path),
                 checkpoint=tmp_path / "rest.safetensors")
    for key in whole.params:
        np.testing.assert_allclose(second.params[key], whole.params[key], rtol=1e-13, atol=0,
                                   err_msg=key)
    def without_traces(history):                   # trace counts and timings differ by design
        return [{k: v for k, v in h.items() if k not in ("traces", "seconds", "elapsed")} for h in history]

    assert without_traces(second.history) == without_traces(whole.history)  # dev loss too
    assert second.train_state["step"] == 8


def test_resume_with_another_config_is_refused(tmp_path):
    path = tmp_path / "c.safetensors"
    run("torch", epochs=1, max_steps=1, checkpoint=path)
    other = Seq2SeqConfig(VOCAB, VOCAB, embed=4, hidden=4, attention="dot")
    with pytest.raises(ValueError, match="another config"):
        run("torch", config=other, resume=ckpt.load(path))


def test_bad_batches_are_refused_before_training():
    bad = dict(BATCHES[0])
    bad["src"] = bad["src"].copy()
    bad["src"][0, 0] = VOCAB + 3
    with pytest.raises(ValueError, match=r"src ids must lie in \[0, 12\)"):
        check_batch(CONFIG, bad)
    empty = dict(BATCHES[0], tgt_out=np.zeros_like(BATCHES[0]["tgt_out"]))
    with pytest.raises(ValueError, match="every target token is padding"):
        check_batch(CONFIG, empty)
    with pytest.raises(ValueError, match="missing"):
        check_batch(CONFIG, {"src": BATCHES[0]["src"]})


def test_restore_best_returns_the_best_dev_epoch(tmp_path):
    # A step size this large makes the dev loss go up and down, so the best epoch is
    # not the last; its parameters must equal a run stopped after that epoch.
    options = dict(epochs=5, optimizer=adam(0.3), clip_norm=None, patience=5)
    path = tmp_path / "best.safetensors"
    result = run("numpy", restore_best=True, checkpoint=path, **options)
    dev = [h["dev_loss"] for h in result.history]
    best = int(np.argmin(dev)) + 1
    assert result.best_epoch == best and best < len(dev)
    options["epochs"] = best
    stopped_there = run("numpy", **options)
    last = run("numpy", **dict(options, epochs=5))
    for key, value in stopped_there.params.items():
        assert np.array_equal(result.params[key], value), key
    assert not np.array_equal(result.params["out.W"], last.params["out.W"])
    saved = ckpt.load(path)
    assert saved.opt_state is None                    # a finished model, not a resumable state
    assert np.array_equal(saved.params["out.W"], stopped_there.params["out.W"])
    assert saved.train_state["best_epoch"] == best
    with pytest.raises(ValueError, match="RestoreBest needs dev_batches"):
        run("numpy", dev_batches=(), restore_best=True)


def test_time_limit_stops_after_the_step_that_crosses_it():
    result = run("numpy", epochs=3, time_limit=1e-9)
    assert result.stopped == "time_limit"
    assert len(result.history) == 1 and result.history[0]["steps"] == 1
    assert result.history[0]["dev_loss"] is not None     # the partial epoch is evaluated
    for bad in (0, -1.0, True, "10"):
        with pytest.raises(ValueError, match="TimeLimit: seconds must be a positive number"):
            run("numpy", time_limit=bad)


def test_on_epoch_adds_to_the_history():
    seen = []

    def on_epoch(record, params):
        seen.append((record["epoch"], float(np.sum(np.asarray(params["out.b"])))))
        return {"probe": record["epoch"] * 10}

    result = run("numpy", epochs=2, on_epoch=on_epoch)
    assert [h["probe"] for h in result.history] == [10, 20]
    assert [e for e, _ in seen] == [1, 2]
    assert seen[1][1] == pytest.approx(float(np.sum(result.params["out.b"])), rel=1e-12)


def test_lr_decay_halves_the_step_size_when_the_dev_loss_stalls():
    # min_delta this large makes every epoch after the first (which sets the best) a stall;
    # each stall lowers the scale for the epochs after it.
    result = run("numpy", epochs=4, patience=5, min_delta=1e9, lr_decay=0.5)
    assert [h["lr_scale"] for h in result.history] == [1.0, 1.0, 0.5, 0.25]
    # The factor is the optimiser state's own: after the plateaus the state has exactly
    # the entries init made, its "scale" lowered (to 0.125 after the fourth epoch).
    params = {k: v for k, v in init_params(CONFIG, seed=0).items()}
    state = adam(1e-2).init(params)
    assert set(result.opt_state) == set(state)
    assert float(result.opt_state["scale"]) == 0.125
    # The factor multiplies the learning rate: one step at factor 0.5 is adam(lr / 2)'s.
    grads = {k: np.full_like(v, 0.3) for k, v in params.items()}
    halved, new_state = adam(1e-2).update(grads, scale_learning_rate(state, 0.5), params)
    reference, _ = adam(5e-3).update(grads, state, params)
    for key in params:
        np.testing.assert_allclose(halved[key], reference[key], rtol=1e-15, atol=0)
    assert new_state["scale"] == 0.5 and set(new_state) == set(state)
    for bad in (0, 1, 1.5, True):
        with pytest.raises(ValueError, match="ReduceLROnPlateau: factor must be a number in"):
            run("numpy", lr_decay=bad)


def test_the_plateau_factor_survives_a_checkpoint_and_resume(tmp_path):
    options = dict(epochs=4, patience=5, min_delta=1e9, lr_decay=0.5)
    whole = run("numpy", **options)
    path = tmp_path / "half.safetensors"
    first = run("numpy", **dict(options, epochs=2), checkpoint=path)
    saved = ckpt.load(path)
    assert float(saved.opt_state["scale"]) == 0.5 == float(first.opt_state["scale"])
    second = run("numpy", **options, resume=saved)
    assert [h["lr_scale"] for h in second.history] == [1.0, 1.0, 0.5, 0.25]
    for key, value in whole.params.items():
        assert np.array_equal(second.params[key], value), key
    assert float(second.opt_state["scale"]) == float(whole.opt_state["scale"]) == 0.125


def test_a_scheduled_run_checkpoints_its_schedule_and_resumes_it(tmp_path):
    from xpseq.train import schedules

    rate = 1e-2 * schedules.warmup_inverse_sqrt(3)
    whole = run("numpy", epochs=2, optimizer=adam(rate))
    constant = run("numpy", epochs=2)
    assert not np.array_equal(whole.params["out.W"], constant.params["out.W"])
    path = tmp_path / "warm.safetensors"
    run("numpy", epochs=1, optimizer=adam(rate), checkpoint=path)
    saved = ckpt.load(path)
    assert saved.optimizer["hyperparams"]["lr"] == rate.to_dict()
    rebuilt = saved.make_optimizer()
    assert rebuilt.hyperparams == adam(rate).hyperparams
    second = run("numpy", epochs=2, optimizer=rebuilt, resume=saved)
    for key, value in whole.params.items():
        assert np.array_equal(second.params[key], value), key


def test_monitor_watches_an_on_epoch_metric():
    # A made-up dev metric per epoch: best at epoch 2, then three stalls -> early stop at
    # epoch 5 (patience 3), one halving of the step size per stall, epoch 2's parameters.
    metric = {1: 3.0, 2: 1.0, 3: 2.0, 4: 1.0, 5: 5.0, 6: 0.0}
    result = run("numpy", epochs=6, patience=3, lr_decay=0.5, restore_best=True,
                 monitor="dev_metric", on_epoch=lambda record, _: {
                     "dev_metric": metric[record["epoch"]]})
    assert result.stopped == "early_stop" and len(result.history) == 5
    assert result.best_epoch == 2
    assert [h["lr_scale"] for h in result.history] == [1.0, 1.0, 1.0, 0.5, 0.25]
    at_two = run("numpy", epochs=2)
    for key, value in at_two.params.items():
        assert np.array_equal(result.params[key], value), key
    with pytest.raises(ValueError, match="monitor='dev_wer' is not in the epoch's record"):
        run("numpy", monitor="dev_wer")


def test_a_diverging_run_is_never_saved_as_a_model(tmp_path):
    """adam(1e39) overflows float32 parameters in the first step: nothing is written, and
    fit stops with an error naming the step."""
    path = tmp_path / "div.safetensors"
    float32 = {k: v.astype(np.float32) for k, v in init_params(CONFIG, seed=0).items()}
    with np.errstate(over="ignore", invalid="ignore"), pytest.raises(
            FloatingPointError, match=r"non-finite by step 1 \(the training diverged\); "
                                      "no checkpoint was written"):
        fit(CONFIG, float32, BATCHES, backends.get("numpy"),
            train=TrainConfig(epochs=2, optimizer=adam(1e39), clip_norm=None, progress=False),
            callbacks=[callbacks.SaveCheckpoint(path, every_steps=1)])
    assert not path.exists()


def test_divergence_keeps_the_last_good_checkpoint(tmp_path):
    class Diverge(callbacks.Callback):               # the parameters blow up after step 3
        def on_step_end(self, loop):
            if loop.state["step"] == 3:
                loop.params = {k: v * np.inf for k, v in loop.params.items()}

    path = tmp_path / "div.safetensors"
    with np.errstate(invalid="ignore"), pytest.raises(
            FloatingPointError, match=r"non-finite by step 3 .*the last good checkpoint, "
                                      r".*div.safetensors, is from step 2"):
        fit(CONFIG, init_params(CONFIG, seed=0), BATCHES, backends.get("numpy"),
            train=TrainConfig(epochs=2, progress=False),
            callbacks=[Diverge(), callbacks.SaveCheckpoint(path, every_steps=1)])
    loaded = ckpt.load(path)
    assert loaded.train_state["step"] == 2
    assert all(np.all(np.isfinite(v)) for v in loaded.params.values())


def test_a_non_finite_dev_loss_stops_the_run():
    class Diverge(callbacks.Callback):               # blow up on the epoch's last step
        def on_step_end(self, loop):
            if loop.state["batch"] == len(BATCHES):
                loop.params = {k: v * np.inf for k, v in loop.params.items()}

    with np.errstate(invalid="ignore", over="ignore"), pytest.raises(
            FloatingPointError, match=r"dev loss became nan after epoch 1"):
        fit(CONFIG, init_params(CONFIG, seed=0), BATCHES, backends.get("numpy"), dev_batches=DEV,
            train=TrainConfig(epochs=2, progress=False), callbacks=[Diverge()])


def test_metrics_log_writes_the_history_as_csv_and_tensorboard_events(tmp_path):
    """Three epochs: the CSV holds each epoch's record as it was returned; the TensorBoard
    event file (read back record by record) holds the train and dev loss of each epoch."""
    import csv
    import struct

    from tensorboardX.proto.event_pb2 import Event

    from xpseq.train.callbacks import MetricsLog

    config = Seq2SeqConfig(src_vocab=9, tgt_vocab=9, embed=4, hidden=4)
    rng = np.random.default_rng(0)
    batch = {"src": rng.integers(3, 9, (4, 5)), "src_len": np.array([5, 4, 3, 5]),
             "tgt_in": rng.integers(3, 9, (4, 4)), "tgt_out": rng.integers(3, 9, (4, 4))}
    params = {k: v.astype(np.float64) for k, v in init_params(config).items()}
    log = MetricsLog(tmp_path / "run.csv", tensorboard=tmp_path / "tb")
    result = fit(config, params, [batch], backends.get("numpy"), dev_batches=[batch],
                 train=TrainConfig(epochs=3, progress=False), callbacks=[log])
    with open(tmp_path / "run.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
    for row, record in zip(rows, result.history):
        for key in ("train_loss", "dev_loss", "seconds", "elapsed"):
            assert float(row[key]) == record[key], key
    [events] = list((tmp_path / "tb").iterdir())
    data, scalars = events.read_bytes(), {}
    while data:
        (n,) = struct.unpack("<Q", data[:8])
        event = Event.FromString(data[12:12 + n])
        data = data[12 + n + 4:]
        for value in event.summary.value:
            scalars[value.tag, event.step] = value.simple_value
    for record in result.history:
        for key in ("train_loss", "dev_loss"):
            assert scalars[key, record["epoch"]] == pytest.approx(record[key], rel=1e-6)


def test_progress_to_a_log_file_is_the_epoch_lines_without_the_bar(capsys):
    """``progress=True`` with stderr not a terminal (a log file, CI): a line per epoch and
    no redrawn bar (on a terminal, tqdm draws one)."""
    run("numpy", epochs=2, progress=True)
    out, err = capsys.readouterr()
    assert [line.split(":")[0] for line in out.splitlines()] == ["epoch 1", "epoch 2"]
    assert "it/s" not in err and "\r" not in err


@pytest.mark.parametrize("kind, fields", [
    ("rnn", {"embed": 4, "hidden": 4, "attention": "general"}),
    ("rnn", {"embed": 4, "hidden": 3, "attention": "additive", "style": "bahdanau",
             "cell": "gru"}),
    ("transformer", {"d_model": 8, "heads": 2, "encoder_layers": 1, "decoder_layers": 1,
                     "d_ff": 8, "label_smoothing": 0.1}),
])
def test_more_padding_leaves_the_loss_per_token_unchanged(kind, fields):
    # make_batches(shapes=1) pads every batch to one shape: longer, and the last one with
    # empty rows. Padding is masked: the loss (the mean over real target tokens) and its
    # gradient are those of the tightest batches, in float64.
    from xpseq import models

    model = models.get(kind)
    config = model.Config(VOCAB, VOCAB, **fields)
    params = model.init_params(config, seed=0)
    pairs = reverse_pairs(21, seed=4)
    tight = make_batches(pairs, 8, bucket=1)
    padded = make_batches(pairs, 8, bucket=8, shapes=1)
    assert len({b["src"].shape + b["tgt_in"].shape for b in padded}) == 1
    assert padded[-1]["src"].shape[0] > tight[-1]["src"].shape[0]           # empty rows
    for t, p in zip(tight, padded):
        assert p["src"].shape[1] > t["src"].shape[1] and p["tgt_in"].shape[1] > t["tgt_in"].shape[1]
        loss_t, grads_t = model.loss_and_grad(params, config, t)
        loss_p, grads_p = model.loss_and_grad(params, config, p)
        assert abs(float(loss_t) - float(loss_p)) <= 1e-12
        assert abs(float(model.loss(params, config, p)) - float(loss_t)) <= 1e-12
        for name in grads_t:
            np.testing.assert_allclose(grads_p[name], grads_t[name], rtol=1e-10, atol=1e-14)


def test_the_loss_is_read_every_few_steps_with_the_same_numbers():
    """fit reads the training loss to the host every READ_EVERY steps (and at an epoch's
    end), not after every step; reading it after every step instead (a callback that
    settles each time) gives the same history to the last bit, and a run without progress
    output or callbacks still records its dev loss."""
    from xpseq.train.loop import READ_EVERY

    seen = []

    class Watch(callbacks.Callback):
        def __init__(self, settle):
            self.settle = settle

        def on_step_end(self, loop):
            if self.settle:
                loop.settle()
            seen.append((loop.state["step"], loop.last_loss, len(loop.pending)))

    batches = make_batches(reverse_pairs(100), batch_size=4, bucket=8)
    assert len(batches) > READ_EVERY + 2
    results = []
    for settle in (False, True):
        seen.clear()
        results.append(fit(CONFIG, init_params(CONFIG, seed=0), batches, backends.get("numpy"),
                           dev_batches=DEV, train=TrainConfig(epochs=2, progress=False),
                           callbacks=[Watch(settle)]))
        if not settle:
            assert [s for s, loss, _ in seen if loss is None] == list(range(1, READ_EVERY))
            assert max(n for _, _, n in seen) == READ_EVERY - 1
        else:
            assert all(loss is not None and n == 0 for _, loss, n in seen)
    lazy, eager = results
    assert [h["train_loss"] for h in lazy.history] == [h["train_loss"] for h in eager.history]
    assert all(h["dev_loss"] is not None for h in lazy.history)
    bare = fit(CONFIG, init_params(CONFIG, seed=0), BATCHES, backends.get("numpy"),
               dev_batches=DEV, train=TrainConfig(epochs=1, progress=False))
    assert bare.history[0]["dev_loss"] is not None


def test_a_non_finite_training_loss_names_its_step():
    class Poison(callbacks.Callback):             # the parameters blow up after step 2
        def on_step_end(self, loop):
            if loop.state["step"] == 2:
                loop.params = {k: v * np.nan for k, v in loop.params.items()}

    with np.errstate(invalid="ignore"), pytest.raises(
            FloatingPointError, match=r"the training loss became nan at step 3$"):
        fit(CONFIG, init_params(CONFIG, seed=0), BATCHES, backends.get("numpy"),
            train=TrainConfig(epochs=1, progress=False), callbacks=[Poison()])
