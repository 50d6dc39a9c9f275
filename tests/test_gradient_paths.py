"""The default gradient path (:mod:`xpseq.train.paths`): the table's choice for each model
kind, backend and precision, the fastest in the recorded benchmark it names; bfloat16 and
models defined by users trained by autodiff (the backend's own); ``xpseq train
--gradients`` overriding it, and the command's first line naming the path taken."""

from __future__ import annotations

import json
import pathlib

import pytest

from xpseq import backends
from xpseq.app import cli, commands
from xpseq.core.precision import Policy
from xpseq.tasks import experiment, toy_task
from xpseq.train import TrainConfig
from xpseq.train import paths
from xpseq.train.step import check_gradients, make_train_step

ROOT = pathlib.Path(__file__).resolve().parents[1]
TASK = toy_task(n_train=40, n_dev=4, n_test_per_bucket=1)

#: The peers section's labels of each engine's two xpseq steps (scripts/benchmarks/peers.py),
#: by model kind: (autodiff, hand-derived).
LABELS = {
    ("rnn", "jax"): ("xpseq-jax", "xpseq-jax, hand-derived recurrences"),
    ("transformer", "jax"): ("xpseq-jax", "xpseq-jax, hand-derived backward"),
    ("rnn", "torch"): ("xpseq-torch", "xpseq-torch, hand-derived backward"),
    ("transformer", "torch"): ("xpseq-torch", "xpseq-torch, hand-derived backward"),
}
for _kind in ("rnn", "transformer"):
    LABELS[(_kind, "torch with torch.compile")] = (
        "xpseq-torch, torch.compile", "xpseq-torch, hand-derived backward, torch.compile")


def backend_of(label: str) -> backends.Backend:
    """The backend a table row names by its label (skipped where its library is missing)."""
    name = label.split()[0]
    if name not in backends.available():
        pytest.skip(f"{name} is not installed")
    return backends.get(name, compile=label.endswith("torch.compile"))


@pytest.mark.parametrize("row", sorted(paths.DEFAULTS))
def test_the_default_is_the_tables_choice(row):
    kind, label, precision = row
    be = backend_of(label)
    assert be.label == label
    assert check_gradients(be, None, kind, None) == paths.DEFAULTS[row]
    assert check_gradients(be, None, kind, Policy()) == paths.DEFAULTS[row]
    # bfloat16: autodiff, whatever float32 chose (the hand-derived passes: one dtype)
    assert check_gradients(be, None, kind, "bf16") == "autodiff"
    assert check_gradients(be, None, kind, Policy("bf16")) == "autodiff"
    # A path asked for is the path taken.
    for asked in ("autodiff", "hand-derived"):
        assert check_gradients(be, asked, kind, None) == asked


@pytest.mark.parametrize("row", sorted(paths.DEFAULTS))
def test_each_choice_is_the_faster_in_its_record(row):
    """Every row's record exists and its chosen path trained faster there (medians of
    one run, taking turns); the row's comment quotes the record's file and ratio."""
    kind, label, precision = row
    assert precision == "float32"
    record = ROOT / paths.RECORDS[kind]
    data = json.loads(record.read_text(encoding="utf-8"))
    assert data["args"]["threads"] == 1 and "peers" in data["section_seconds"]
    tps = data["details"]["peers"][kind]["tokens_per_s"]
    auto, hand = LABELS[(kind, label)]
    ratio = tps[hand] / tps[auto]
    assert paths.DEFAULTS[row] == ("hand-derived" if ratio > 1 else "autodiff"), ratio
    source = (ROOT / "xpseq" / "train" / "paths.py").read_text(encoding="utf-8")
    key = "(" + ", ".join(f'"{part}"' for part in row) + ")"
    [line] = [s for s in source.splitlines() if s.strip().startswith(key)]
    assert f"{ratio:.2f}x" in line, (line, ratio)


def test_user_models_unknown_backends_and_numpy_keep_the_backends_own():
    for name in backends.available():
        be = backends.get(name)
        if not be.capabilities.trains:
            continue
        own = be.gradients
        assert check_gradients(be, None, "a-users-model", None) == own      # no row
        assert check_gradients(be, None, None, None) == own                  # kind unknown
        if own != "autodiff":                      # numpy, array_api_strict: one path
            for kind in ("rnn", "transformer"):
                assert check_gradients(be, None, kind, None) == own


def test_bfloat16_steps_are_built_by_autodiff():
    """``make_train_step`` with ``gradients=None`` and bfloat16 builds (the hand-derived
    path would be refused): the default is autodiff there."""
    pytest.importorskip("torch")
    from xpseq.core.optim import adam
    from xpseq.tasks import model_config

    be = backends.get("torch")
    config = model_config(TASK, "rnn", embed=4, hidden=4)
    make_train_step(config, adam(1e-3), be, precision=Policy("bf16"))
    with pytest.raises(ValueError, match="needs gradients='autodiff'"):
        make_train_step(config, adam(1e-3), be, gradients="hand-derived",
                        precision=Policy("bf16"))


def test_bad_arguments_are_refused_by_name():
    be = backends.get("numpy")
    with pytest.raises(TypeError, match="kind must be"):
        paths.default_gradients(be, 3)
    with pytest.raises(TypeError, match="backend must be"):
        paths.default_gradients("jax", "rnn")
    with pytest.raises(ValueError, match="precision"):
        paths.default_gradients(be, "rnn", "fp8")
    with pytest.raises(ValueError, match="gradients must be"):
        check_gradients(be, "by-hand", "rnn")


class Captured(Exception):
    """Raised by a stand-in for ``fit`` once it has seen what it was given."""


@pytest.fixture
def fitted(monkeypatch) -> list:
    """The TrainConfig each ``train`` command hands to ``fit`` (which then raises)."""
    calls: list = []

    def fit(config, params, train_batches, backend, *, train, **kwargs):
        calls.append((config, train, backend))
        raise Captured

    monkeypatch.setattr(commands.train, "toy_task_for", lambda spec: TASK)
    monkeypatch.setattr(experiment, "fit", fit)
    monkeypatch.setenv("XPSEQ_DEBUG", "1")                   # let Captured through
    return calls


@pytest.mark.parametrize("engine", ["jax", "torch"])
@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_the_command_names_the_path_it_takes_and_gradients_overrides_it(
        tmp_path, fitted, capsys, engine, kind):
    pytest.importorskip(engine)
    out = str(tmp_path / "m.safetensors")
    for extra, precision in (([], None), (["--gradients", "autodiff"], None),
                             (["--gradients", "hand-derived"], None), ([], "bf16")):
        if precision is not None:
            extra = [*extra, "--precision", precision]
        with pytest.raises(Captured):
            cli.main(["train", "--quick", "--backend", engine, "--model", kind, "--out", out,
                      "--no-progress", *extra])
        config, train, be = fitted[-1]
        asked = extra[1] if extra[:1] == ["--gradients"] else None
        assert train.gradients == asked                  # fit resolves None itself
        taken = check_gradients(be, train.gradients, kind, train.policy)
        expected = asked or ("autodiff" if precision else paths.DEFAULTS[(kind, engine,
                                                                          "float32")])
        assert taken == expected
        assert (f"training on {engine} (float32, {expected} gradients)"
                in capsys.readouterr().err)


def test_train_config_leaves_the_choice_to_fit():
    """``TrainConfig()``'s ``gradients`` is None: fit chooses by the kind it trains."""
    assert TrainConfig().gradients is None
