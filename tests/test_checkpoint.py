"""Checkpoints: exact round trips, atomic writes, and refusal of damaged or mismatched files."""

from __future__ import annotations

import ast
import json
import math
import os
import pathlib
import struct

import numpy as np
import pytest
from helpers import dead_pid, rewrite_metadata

from xpseq.core.optim import adam, sgd
from xpseq.models.rnn import Seq2SeqConfig, init_params
from xpseq.train import checkpoint as ckpt

CONFIG = Seq2SeqConfig(src_vocab=9, tgt_vocab=11, embed=3, hidden=2, attention="additive")
VOCABS = {"src": [f"s{i}" for i in range(9)], "tgt": [f"t{i}" for i in range(11)]}
TRAIN_STATE = {"epoch": 2, "batch": 3, "step": 17, "best_dev": 1.25, "bad_epochs": 0,
               "history": [{"epoch": 1, "train_loss": 2.0, "dev_loss": 1.5, "steps": 7}]}


def saved(tmp_path: pathlib.Path, **overrides) -> tuple[pathlib.Path, dict, dict]:
    params = init_params(CONFIG, seed=3)
    opt = adam(0.01)
    state = opt.init(params)
    state = {"step": np.asarray(5.0), "m": {k: v * 0.5 for k, v in params.items()},
             "v": {k: v * v for k, v in params.items()}}
    kwargs = dict(config=CONFIG, params=params, opt_state=state, optimizer=opt, vocabs=VOCABS,
                  train_state=TRAIN_STATE, metadata={"task": "toy", "seed": 4})
    kwargs.update(overrides)
    path = ckpt.save(tmp_path / "model.safetensors", **kwargs)
    return path, params, state


def test_round_trip_is_exact(tmp_path):
    path, params, state = saved(tmp_path)
    loaded = ckpt.load(path)
    assert loaded.config == CONFIG
    assert loaded.vocabs == VOCABS
    assert loaded.train_state == TRAIN_STATE
    assert loaded.metadata == {"task": "toy", "seed": 4}
    assert loaded.optimizer == {"name": "adam",
                                "hyperparams": {"lr": 0.01, "b1": 0.9, "b2": 0.999, "eps": 1e-8}}
    assert set(loaded.params) == set(params)
    for name in params:
        assert loaded.params[name].dtype == np.float64
        assert np.array_equal(loaded.params[name], params[name])
    assert float(loaded.opt_state["step"]) == 5.0
    for key in ("m", "v"):
        for name in params:
            assert np.array_equal(loaded.opt_state[key][name], state[key][name])
    opt = loaded.make_optimizer()
    assert opt.name == "adam" and opt.hyperparams["lr"] == 0.01


def test_sgd_state_and_no_optional_parts(tmp_path):
    params = init_params(CONFIG, seed=0)
    opt = sgd(0.1, momentum=0.9)
    path = ckpt.save(tmp_path / "a.safetensors", config=CONFIG, params=params,
                     opt_state=opt.init(params), optimizer=opt)
    loaded = ckpt.load(path)
    assert loaded.make_optimizer().hyperparams == {"lr": 0.1, "momentum": 0.9}
    assert set(loaded.opt_state) == {"step", "momentum", "scale"}
    bare = ckpt.load(ckpt.save(tmp_path / "b.safetensors", config=CONFIG, params=params))
    assert bare.opt_state is None and bare.vocabs is None and bare.train_state is None
    with pytest.raises(ckpt.CheckpointError, match="no optimiser"):
        bare.make_optimizer()


def test_the_plateau_factor_and_the_schedule_are_kept(tmp_path):
    from xpseq.core.optim import scale_learning_rate
    from xpseq.train import schedules

    params = init_params(CONFIG, seed=0)
    rate = 2e-3 * schedules.warmup_cosine(2, 9, final=0.1)
    opt = adam(rate, b2=0.98)
    state = scale_learning_rate(opt.init(params), 0.25)
    loaded = ckpt.load(ckpt.save(tmp_path / "a.safetensors", config=CONFIG, params=params,
                                 opt_state=state, optimizer=opt))
    assert set(loaded.opt_state) == set(state)
    assert loaded.opt_state["scale"].shape == () and float(loaded.opt_state["scale"]) == 0.25
    assert loaded.optimizer["hyperparams"]["lr"] == {
        "kind": "scaled", "lr": 2e-3,
        "factor": {"kind": "warmup_cosine", "warmup": 2, "total": 9, "final": 0.1}}
    assert loaded.make_optimizer().hyperparams == opt.hyperparams     # the schedule again
    with pytest.raises(TypeError, match="the optimiser's lr is a function without to_dict"):
        ckpt.save(tmp_path / "b.safetensors", config=CONFIG, params=params,
                  optimizer=adam(lambda step: 1e-3))
    assert not (tmp_path / "b.safetensors").exists()


@pytest.mark.parametrize("old", [None, 0.25], ids=["without", "lr_scale"])
def test_an_earlier_optimiser_state_gets_its_plateau_factor(tmp_path, old):
    """States written before the factor was part of every state: an "lr_scale" entry where
    the run lowered its rate on plateaus, none otherwise."""
    params = init_params(CONFIG, seed=0)
    state = {k: v for k, v in adam(1e-2).init(params).items() if k != "scale"}
    if old is not None:
        state["lr_scale"] = np.asarray(old)
    loaded = ckpt.load(ckpt.save(tmp_path / "old.safetensors", config=CONFIG, params=params,
                                 opt_state=state, optimizer=adam(1e-2)))
    assert set(loaded.opt_state) == {"step", "m", "v", "scale"}
    assert float(loaded.opt_state["scale"]) == (1.0 if old is None else old)
    assert loaded.opt_state["scale"].dtype == np.float64 and loaded.opt_state["scale"].shape == ()


@pytest.mark.filterwarnings("ignore::xpseq.train.checkpoint.UnprotectedMetadataWarning")
def test_the_format1_fixture_resumes_with_plateau_factor_one():
    fixture = pathlib.Path(__file__).parent / "fixtures" / "rnn_format1.safetensors"
    loaded = ckpt.load(fixture)
    assert set(loaded.opt_state) == {"step", "m", "v", "scale"}
    assert float(loaded.opt_state["scale"]) == 1.0
    assert loaded.opt_state["scale"].dtype == loaded.opt_state["step"].dtype
    opt = loaded.make_optimizer()
    grads = {k: np.full_like(v, 0.01) for k, v in loaded.params.items()}
    params, state = opt.update(grads, loaded.opt_state, loaded.params)
    assert set(state) == set(loaded.opt_state)
    # The next step is Adam's at the recorded rate, by hand in float64.
    hp, old = loaded.optimizer["hyperparams"], loaded.opt_state
    t = float(old["step"]) + 1
    for name, p in loaded.params.items():
        g = grads[name].astype(np.float64)
        m = hp["b1"] * old["m"][name] + (1 - hp["b1"]) * g
        v = hp["b2"] * old["v"][name] + (1 - hp["b2"]) * g * g
        step = hp["lr"] / (1 - hp["b1"] ** t)
        expected = p - step * m / (np.sqrt(v) / math.sqrt(1 - hp["b2"] ** t) + hp["eps"])
        np.testing.assert_allclose(params[name], expected, rtol=1e-6, atol=1e-7, err_msg=name)
        assert np.any(params[name] != p), name


def test_load_onto_every_backend(tmp_path, backend):
    path, params, _ = saved(tmp_path)
    loaded = ckpt.load(path, backend=backend)
    for name, value in params.items():
        assert backend.is_array(loaded.params[name])
        assert np.array_equal(backend.to_numpy(loaded.params[name]), value)
        assert backend.to_numpy(loaded.params[name]).dtype == np.float64
    assert backend.is_array(loaded.opt_state["m"]["out.W"])


def test_write_is_atomic_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    path, params, _ = saved(tmp_path)
    before = path.read_bytes()

    def failing_replace(src, dst):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(os, "replace", failing_replace)
    other = {k: v + 1.0 for k, v in params.items()}
    with pytest.raises(OSError, match="simulated"):
        ckpt.save(path, config=CONFIG, params=other)
    monkeypatch.undo()
    assert path.read_bytes() == before                      # the old checkpoint is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    ckpt.save(path, config=CONFIG, params=other)            # overwriting works
    assert np.array_equal(ckpt.load(path).params["out.W"], other["out.W"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_truncated_file_is_refused(tmp_path):
    path, _, _ = saved(tmp_path)
    data = path.read_bytes()
    for cut in (len(data) - 1, len(data) // 2, 100, 7):
        path.write_bytes(data[:cut])
        with pytest.raises(ckpt.CheckpointError, match="truncated or corrupted"):
            ckpt.load(path)


def test_flipped_byte_in_the_arrays_is_refused(tmp_path):
    path, _, _ = saved(tmp_path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10                                        # inside the last tensor's bytes
    path.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match="do not match their digest"):
        ckpt.load(path)


def test_garbage_and_foreign_files_are_refused(tmp_path):
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(os.urandom(256))
    with pytest.raises(ckpt.CheckpointError, match="not a readable checkpoint"):
        ckpt.load(junk)
    from safetensors.numpy import save_file

    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": np.zeros(3)}, str(foreign))
    with pytest.raises(ckpt.CheckpointError, match="not an xpseq checkpoint"):
        ckpt.load(foreign)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ckpt.load(tmp_path / "missing.safetensors")


def test_shapes_that_do_not_match_the_config_are_refused(tmp_path):
    path, _, _ = saved(tmp_path)
    rewrite_metadata(path, lambda m: m["config"].update(hidden=3))
    with pytest.raises(ckpt.CheckpointError, match=r"parameter .* has shape .* needs"):
        ckpt.load(path)
    path, _, _ = saved(tmp_path)
    rewrite_metadata(path, lambda m: m["config"].update(attention="general"))
    with pytest.raises(ckpt.CheckpointError, match=r"missing \['att.W'\]"):
        ckpt.load(path)


def test_the_digest_covers_the_metadata(tmp_path):
    path, _, _ = saved(tmp_path)
    rewrite_metadata(path, lambda m: m["vocabs"]["tgt"].__setitem__(4, "changed"),
                     redigest=False)
    with pytest.raises(ckpt.CheckpointError, match="arrays and metadata do not match their "
                                                   "digest"):
        ckpt.load(path)


@pytest.mark.parametrize("change, message", [
    (lambda m: m.__delitem__("config"), "has no config"),
    (lambda m: [1, 2], "must be a JSON object, got list"),
    (lambda m: "text", "must be a JSON object, got str"),
    (lambda m: m["vocabs"].update(tgt=m["vocabs"]["tgt"][:-1]), "'tgt' has 10 words, the model 11"),
    (lambda m: m["vocabs"]["src"].__setitem__(2, "s1"), "'src' holds 's1' twice"),
    (lambda m: m["vocabs"].update(src="s0 s1"), "'src' must be a list of strings"),
    (lambda m: m.update(train_state=[1]), "'train_state' has the wrong type"),
    (lambda m: m.update(model="nope"), "unknown model kind 'nope'"),
    (lambda m: m.__delitem__("model"), "names no model kind"),
    (lambda m: m.update(format=1), "format 1 has no model kind"),
    (lambda m: m.update(optimizer={"name": "adam"}), "unusable optimiser record"),
])
def test_malformed_metadata_is_refused_even_with_a_valid_digest(tmp_path, change, message):
    path, _, _ = saved(tmp_path)
    rewrite_metadata(path, change)
    with pytest.raises(ckpt.CheckpointError, match=message):
        ckpt.load(path)


def test_each_changed_header_byte_is_refused_or_changes_nothing(tmp_path):
    """Change sampled bytes of the header (the JSON with the metadata, the tensor table and
    the digest) one at a time: each file is refused, or loads to the same arrays and
    metadata (a byte of JSON whitespace, say)."""
    path, _, _ = saved(tmp_path)
    reference = ckpt.load(path)
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    rng = np.random.default_rng(0)
    positions = sorted(set(rng.choice(8 + n, size=min(400, 8 + n), replace=False).tolist()))
    outcomes = {"refused": 0, "same": 0}
    for pos in positions:
        damaged = bytearray(data)
        damaged[pos] ^= 1 << int(rng.integers(8))
        path.write_bytes(bytes(damaged))
        try:
            loaded = ckpt.load(path)
        except (ckpt.CheckpointError, FileNotFoundError):
            outcomes["refused"] += 1
            continue
        outcomes["same"] += 1
        assert loaded.config == reference.config, pos
        assert loaded.vocabs == reference.vocabs and loaded.metadata == reference.metadata, pos
        assert loaded.train_state == reference.train_state, pos
        assert loaded.optimizer == reference.optimizer, pos
        for name, value in reference.params.items():
            assert np.array_equal(loaded.params[name], value), (pos, name)
    assert outcomes["refused"] > 0.9 * len(positions), outcomes


def test_nonfinite_parameters_are_neither_written_nor_loaded(tmp_path):
    params = init_params(CONFIG, seed=0)
    params["att.v"][1] = np.nan
    with pytest.raises(FloatingPointError, match=r"params/att.v holds non-finite values"):
        ckpt.save(tmp_path / "nan.safetensors", config=CONFIG, params=params)
    assert not (tmp_path / "nan.safetensors").exists()
    path = ckpt.save(tmp_path / "nan.safetensors", config=CONFIG, params=params,
                     allow_nonfinite=True)
    with pytest.raises(ckpt.CheckpointError, match=r"params/att.v holds non-finite values.*"
                                                   "allow_nonfinite=True"):
        ckpt.load(path)
    assert np.isnan(ckpt.load(path, allow_nonfinite=True).params["att.v"][1])


def test_an_unreadable_file_is_reported_as_unreadable(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    path, _, _ = saved(tmp_path)
    path.chmod(0)
    with pytest.raises(ckpt.CheckpointError, match="permission denied"):
        ckpt.load(path)


def test_a_stale_temporary_file_is_removed_by_the_next_save(tmp_path):
    path, _, _ = saved(tmp_path)
    dead = dead_pid()
    stale = tmp_path / f".{path.name}.xpseq-{dead}-abcd1234.tmp"
    fresh = tmp_path / f".{path.name}.xpseq-{os.getppid()}-abcd1234.tmp"
    other = tmp_path / f".other.safetensors.xpseq-{dead}-abcd1234.tmp"
    users = tmp_path / f".{path.name}.abcd1234.tmp"
    for f in (stale, fresh, other, users):
        f.write_bytes(b"x" * 100)
    saved(tmp_path)
    assert not stale.exists()                      # left by a save that was killed
    assert fresh.exists()                          # a live process's: maybe still writing
    assert not other.exists()                      # another file's, of a killed writer too
    assert users.exists()                          # not a name the door makes


def test_other_format_version_is_refused(tmp_path):
    path, _, _ = saved(tmp_path)
    rewrite_metadata(path, lambda m: m.update(format=99))
    with pytest.raises(ckpt.CheckpointError, match="format 99"):
        ckpt.load(path)


def test_save_checks_its_inputs(tmp_path):
    params = init_params(CONFIG, seed=0)
    with pytest.raises(ckpt.CheckpointError, match="missing"):
        ckpt.save(tmp_path / "x", config=CONFIG, params={k: v for k, v in params.items()
                                                         if k != "out.b"})
    with pytest.raises(TypeError, match="must be a NumPy array"):
        ckpt.save(tmp_path / "x", config=CONFIG, params={**params, "out.b": [0.0] * 11})
    with pytest.raises(TypeError, match="JSON-serialisable"):
        ckpt.save(tmp_path / "x", config=CONFIG, params=params, train_state={"f": object()})
    with pytest.raises(TypeError, match="Config of a model kind"):
        ckpt.save(tmp_path / "x", config={"hidden": 2}, params=params)
    assert not (tmp_path / "x").exists()


def test_the_file_is_plain_safetensors_without_pickle(tmp_path):
    path, _, _ = saved(tmp_path)
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])                      # a JSON header, then raw arrays
    assert header["params/out.W"]["dtype"] == "F64"
    assert set(json.loads(header["__metadata__"]["xpseq"])) == {
        "format", "model", "config", "vocabs", "optimizer", "train_state", "metadata"}
    package = pathlib.Path(ckpt.__file__).parents[1]          # all of xpseq
    for source in package.rglob("*.py"):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("pickle", "cloudpickle", "dill") for n in names), \
                source
