"""The peers of ``scripts/bench.py --only peers``: the models written in Keras 3 (on JAX), in
Flax and in PyTorch under ``torch.compile`` are xpseq's models (the same loss, and one Adam
step to a float32 tolerance), and the section runs and reports at tiny sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
os.environ.setdefault("KERAS_BACKEND", "jax")    # as scripts/native_keras.py sets it
pytest.importorskip("keras")
pytest.importorskip("flax")
pytest.importorskip("optax")

#: Long checks (Keras and Flax programs compiled, torch.compile, the section run whole):
#: make test-slow (and .ci/run) runs them, make test leaves them out.
pytestmark = pytest.mark.slow

from helpers import ROOT, load_script, show  # noqa: E402
from test_bench import TINY, _random_batch  # noqa: E402

from xpseq import models  # noqa: E402
from xpseq.models.rnn import Seq2SeqConfig  # noqa: E402

RNN = Seq2SeqConfig(11, 13, embed=5, hidden=3, dropout=0.0)
TRANSFORMER = models.get("transformer").Config(11, 13, d_model=8, heads=2, encoder_layers=2,
                                               decoder_layers=1, d_ff=16,
                                               label_smoothing=0.1)


def _bench():
    bench = load_script("bench")
    from scripts import native_flax, native_keras
    from scripts.benchmarks import peers
    from scripts.benchmarks.context import Context

    return bench, peers, Context, native_keras, native_flax


def _kind(name: str, seed: int = 3):
    """A tiny model kind with one random batch, as the section's checks take it."""
    _, peers, _, _, _ = _bench()
    config = RNN if name == "rnn" else TRANSFORMER
    model = models.get(name)
    init64 = model.init_params(config, seed=seed)
    init32 = {k: v.astype(np.float32) for k, v in init64.items()}
    batch = _random_batch(config, np.random.default_rng(seed))
    return peers.Kind(name, model, config, init64, init32, [batch], "hand jax", "hand torch")


@pytest.mark.parametrize("name", ["rnn", "transformer"])
def test_every_peer_has_xpseqs_loss_and_adam_step(name):
    bench, peers, Context, _, _ = _bench()
    import keras

    context = Context(bench.parse_args(["--lr", "1e-3"]))
    x64 = bool(jax.config.jax_enable_x64)
    checks = peers.check_peers(context, _kind(name))
    # The float64 checks leave JAX's and Keras's settings as they were.
    assert bool(jax.config.jax_enable_x64) is x64 and keras.config.floatx() == "float32"
    keras_peers = {"keras-jax", "keras-jax, fit"}
    expected = {"native-torch"} | keras_peers | ({"flax-jax"} if name == "transformer"
                                                 else set())
    assert set(checks) == expected
    for peer, check in checks.items():
        # float64 to 1e-10 (native torch, Flax); Keras float32 to 1e-5 relative
        assert check["loss_diff"] <= (1e-5 if peer in keras_peers else 1e-10), (peer, check)
        assert check["relative"] == (peer in keras_peers)
        assert check["step_diff"] <= 1e-6, (peer, check)
        if peer == "keras-jax":                 # float32: its gradients relative to xpseq's
            assert check["grad_diff"] <= 1e-5, check
        peers.require(name, peer, check)                         # does not end the run


def test_a_wiring_mistake_fails_the_check():
    """Swapping the encoder's directions (RNN) or the query and key projections
    (Transformer) moves the Keras and Flax losses far beyond the tolerances, and
    ``require`` ends the benchmark with the difference."""
    _, peers, _, native_keras, native_flax = _bench()
    kind = _kind("rnn")
    swapped = dict(kind.init32)
    for n in ("W_ih", "W_hh", "b_ih", "b_hh"):
        swapped[f"enc_fwd.{n}"], swapped[f"enc_bwd.{n}"] = (kind.init32[f"enc_bwd.{n}"],
                                                          kind.init32[f"enc_fwd.{n}"])
    reference = float(kind.model.loss(kind.init64, kind.config, kind.timed[0]))
    keras_loss = native_keras.model_loss(
        native_keras.KerasSeq2Seq.from_xpseq(swapped, kind.config), kind.timed[0])
    assert abs(keras_loss - reference) / reference > 1e-3
    t = _kind("transformer")
    swapped = dict(t.init64)
    swapped["enc0.att.W_q"], swapped["enc0.att.W_k"] = t.init64["enc0.att.W_k"], \
        t.init64["enc0.att.W_q"]
    reference = float(t.model.loss(t.init64, t.config, t.timed[0]))
    with jax.enable_x64(True):
        model = native_flax.FlaxTransformer.from_config(t.config, jax.numpy.float64)
        flax_loss = float(native_flax.loss(
            model, native_flax.params_from_xpseq(swapped, t.config, jax.numpy.float64),
            native_flax.batch_arrays(t.timed[0]), t.config.label_smoothing))
    assert abs(flax_loss - reference) > 1e-6
    with pytest.raises(SystemExit, match=r"flax-jax's loss differs from xpseq's by 3e-05"):
        peers.require("transformer", "flax-jax", {"loss_diff": 3e-5, "tolerance": 1e-10,
                                                  "relative": False})
    with pytest.raises(SystemExit, match=r"one Adam step of keras-jax differs .* by 0\.002"):
        peers.require("rnn", "keras-jax", {"loss_diff": 0.0, "tolerance": 1e-5,
                                           "relative": True, "step_diff": 2e-3})
    with pytest.raises(SystemExit, match=r"keras-jax's gradients differ .* by 0\.01 of the"):
        peers.require("rnn", "keras-jax", {"loss_diff": 0.0, "tolerance": 1e-5,
                                           "relative": True, "grad_diff": 0.01,
                                           "step_diff": 0.0})


def test_keras_and_flax_hold_xpseqs_parameters():
    _, _, _, native_keras, native_flax = _bench()
    kind = _kind("rnn")
    back = native_keras.KerasSeq2Seq.from_xpseq(kind.init32, kind.config).xpseq_values()
    for name, value in back.items():
        if name.endswith(("b_ih", "b_hh")):             # Keras's one bias: their sum
            cell = name[:-4]
            value = value - kind.init32[f"{cell}b_hh" if name.endswith("b_ih") else
                                        f"{cell}b_ih"]
        np.testing.assert_allclose(value, kind.init32[name], rtol=0, atol=1e-6, err_msg=name)
    t = _kind("transformer")
    back = native_keras.KerasTransformer.from_xpseq(t.init32, t.config).xpseq_values()
    assert set(back) == set(t.init32)
    for name, value in back.items():
        np.testing.assert_array_equal(value, t.init32[name], err_msg=name)
    tree = native_flax.params_from_xpseq(t.init32, t.config)
    init = native_flax.FlaxTransformer.from_config(t.config).init(
        jax.random.key(0), *(native_flax.batch_arrays(t.timed[0])[k]
                             for k in ("src", "src_len", "tgt_in")))
    assert jax.tree.map(np.shape, init) == jax.tree.map(np.shape, tree)
    back = native_flax.xpseq_params(tree, t.config)
    for name, value in back.items():
        np.testing.assert_array_equal(value, t.init32[name], err_msg=name)
    with pytest.raises(ValueError, match=r"params: names differ .*'out\.b'"):
        native_flax.params_from_xpseq({k: v for k, v in t.init32.items() if k != "out.b"},
                                      t.config)
    with pytest.raises(ValueError, match="config: KerasTransformer is pre-LN"):
        native_keras.KerasTransformer(models.get("transformer").Config(
            11, 13, d_model=8, heads=2, norm="post"))


def test_compiled_native_step_is_the_eager_step():
    """The section's native step under ``torch.compile`` (left out of the tiny run below,
    whose cold compile takes minutes) takes the eager step: the same loss and the same
    parameters after it on one small Transformer batch (float32; the smaller model kind to
    compile). The attention's key biases are left out: their gradient is zero but for
    rounding (a softmax does not change when every score of a row moves by ``q·b_k``), and
    Adam's first step ``lr · g / (|g| + ε)`` turns float32 noise there into steps of up to
    ``lr``."""
    _, peers, _, _, _ = _bench()
    from scripts import native_torch

    kind = models.get("transformer")
    config = kind.Config(7, 8, d_model=4, heads=1, encoder_layers=1, decoder_layers=1, d_ff=4)
    params = kind.init_params(config, seed=5)
    batch = {k: torch.as_tensor(v) for k, v in
             _random_batch(config, np.random.default_rng(5), B=2, S=3, T=2).items()}
    eager = native_torch.NativeTransformer.from_xpseq(params, config, torch.float32)
    compiled = native_torch.NativeTransformer.from_xpseq(params, config, torch.float32)
    before = peers.dynamo_counts()
    loss = float(peers.compiled_native_step(compiled, 1e-3)(batch))
    assert peers.counts_since(before)["graphs"] >= 1                  # it did compile
    assert loss == pytest.approx(float(native_torch.make_native_step(eager, 1e-3)(batch)),
                                 rel=1e-6)
    after, expected = peers.native_values(compiled), peers.native_values(eager)
    assert set(after) == set(params)
    after = {n: v for n, v in after.items() if not n.endswith(".b_k")}
    assert peers.largest_difference(after, expected) <= 1e-6


def test_bench_peers_section_runs_and_reports(tmp_path):
    out = tmp_path / "bench"
    done = subprocess.run([sys.executable, "-m", "scripts.bench", *TINY,
                           "--only", "peers", "--no-torch-compile", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, show(done)
    report = json.loads((out / "bench.json").read_text())
    rows = {r["measure"]: r for r in report["rows"]}
    assert {r["section"] for r in report["rows"]} == {"peers"}
    keras_peers = ["keras-jax", "keras-jax, fit"]
    for kind, peers in (("rnn", ["native-torch", *keras_peers]),
                        ("transformer", ["native-torch", *keras_peers, "flax-jax"])):
        for peer in peers:
            precision = "float32, relative" if peer in keras_peers else "float64"
            check = rows[f"{kind} {peer} loss check ({precision}, |peer − xpseq|)"]
            assert check["met"] is True and "one Adam step" in check["detail"], check
        hand = ("xpseq-jax, hand-derived recurrences" if kind == "rnn" else
                "xpseq-jax, hand-derived backward")
        for name in ["xpseq-jax", hand, "xpseq-torch", "xpseq-torch, hand-derived backward",
                     *peers]:
            assert rows[f"{kind} {name} throughput"]["value"] > 0, (kind, name)
        assert f"{kind} native-torch, torch.compile throughput" not in rows
        assert f"{kind} xpseq-torch, torch.compile throughput" not in rows
        assert f"{kind} best xpseq-torch vs native torch.compile" not in rows
        jax_row = rows[f"{kind} best xpseq-jax vs the fastest JAX peer"]
        assert jax_row["target"] == ">= 1.2x" and jax_row["ratio"] > 0
        assert rows[f"{kind} best xpseq vs the fastest peer of any kind"]["target"] == ">= 1x"
        fit_row = rows[f"{kind} best xpseq-jax vs Keras 3's fit"]
        assert fit_row["target"] == ">= 1.4x" and "against keras-jax, fit" in fit_row["detail"]
        assert rows[f"{kind} keras-jax compile (first call − second, all shapes)"]["unit"] == "s"
        details = report["details"]["peers"][kind]
        assert details["tokens"] > 0 and set(details["checks"]) == set(peers)
    assert report["args"]["torch_compile"] is False
    table = (out / "bench.md").read_text()
    assert "| peers | transformer flax-jax loss check (float64, \\|peer − xpseq\\|) |" in table
