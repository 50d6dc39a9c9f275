"""What the two model kinds share (:mod:`xpseq.models.protocol`): one check of their
parameters and batches, one padding id (the data's, not a configuration field), and every
array they make placed on their inputs' device."""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import numpy as np
import pytest

from xpseq import data, models
from xpseq.core.decoding import beam_search, greedy_search, tile_beams
from xpseq.models import protocol

KINDS = {"rnn": models.get("rnn").Config(src_vocab=11, tgt_vocab=13, embed=4, hidden=3),
         "transformer": models.get("transformer").Config(
             src_vocab=11, tgt_vocab=13, d_model=8, heads=2, encoder_layers=1,
             decoder_layers=2, d_ff=12, positions="learned", max_len=16)}
BATCH = {"src": np.array([[4, 5, 6, 2, 0], [7, 8, 2, 0, 0], [9, 2, 0, 0, 0]]),
         "src_len": np.array([4, 3, 2]),
         "tgt_in": np.array([[1, 5, 6, 7], [1, 9, 10, 0], [1, 12, 0, 0]]),
         "tgt_out": np.array([[5, 6, 7, 2], [9, 10, 2, 0], [12, 2, 0, 0]])}
MODELS = pathlib.Path(models.__file__).parent


# ------------------------------------------------------------------ one parameter check


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_both_kinds_check_parameters_and_batches_alike(kind, monkeypatch):
    model, config = models.get(kind), KINDS[kind]
    params = model.init_params(config, seed=0)
    other = KINDS["rnn" if kind == "transformer" else "transformer"]
    seen = []
    real = protocol.check_params
    monkeypatch.setattr(protocol, "check_params",
                        lambda fname, *a, **k: seen.append(fname) or real(fname, *a, **k))
    model.loss(params, config, BATCH)
    model.loss_and_grad(params, config, BATCH)
    assert seen == ["loss", "loss_and_grad"]               # the protocol's one check

    first = next(iter(model.param_shapes(config)))
    cases = [
        (params, other, TypeError, rf"loss: config must be a {type(config).__name__}"),
        ([1, 2], config, TypeError, "loss: params must be a mapping of arrays"),
        ({k: v for k, v in params.items() if k != "out.b"}, config, ValueError,
         r"loss: params do not match the config: missing \['out.b'\], unknown \[\]"),
        ({**params, "extra": np.zeros(2)}, config, ValueError, r"unknown \['extra'\]"),
        ({**params, "out.b": params["out.b"].astype(np.float32)}, config, TypeError,
         rf"loss: out.b is float32 but {first} is float64; all parameters must share one"),
        ({**params, "out.b": np.zeros(3)}, config, ValueError,
         r"loss: out.b must have shape \(13,\) for this config, got \(3,\)"),
        ({**params, "out.b": np.zeros(13, dtype=np.int64)}, config, TypeError,
         "loss: out.b must have a real floating dtype"),
    ]
    for bad_params, bad_config, error, message in cases:
        with pytest.raises(error, match=message):
            model.loss(bad_params, bad_config, BATCH)
    for batch, message in [({k: v for k, v in BATCH.items() if k != "tgt_out"},
                            r"loss: batch is missing \['tgt_out'\]"),
                           ({**BATCH, "tgt_out": BATCH["tgt_out"][:, :3]},
                            r"loss: tgt_out has shape \(3, 3\) but tgt_in has \(3, 4\)"),
                           ({**BATCH, "tgt_out": np.zeros_like(BATCH["tgt_out"])},
                            "loss: every target token is padding"),
                           ({**BATCH, "src": BATCH["src"] + 20},
                            r"loss: src ids must lie in \[0, 11\)"),
                           ({**BATCH, "src_len": np.array([4, 0, 2])},
                            r"loss: src_len must lie in \[1, 5\]")]:
        with pytest.raises(ValueError, match=message):
            model.loss(params, config, batch)


# -------------------------------------------------------------------- the padding id


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_padding_id_is_the_datas_not_a_field(kind):
    model, config = models.get(kind), KINDS[kind]
    assert config.pad_id == model.Config.pad_id == protocol.PAD_ID == data.PAD_ID == 0
    assert "pad_id" not in config.to_dict()
    assert "pad_id" not in {f.name for f in dataclasses.fields(config)}
    # A configuration stored by an earlier version names pad_id; it still loads.
    assert model.Config.from_dict({**config.to_dict(), "pad_id": 0}) == config
    with pytest.raises(ValueError, match=rf"{type(config).__name__}: pad_id must be 0"):
        model.Config.from_dict({**config.to_dict(), "pad_id": 3})
    with pytest.raises(TypeError, match="pad_id"):
        dataclasses.replace(config, pad_id=3)


def test_a_model_kind_with_another_padding_id_is_refused():
    @dataclasses.dataclass(frozen=True)
    class PadFive(protocol.DictConfig):
        src_vocab: int = 4
        tgt_vocab: int = 4
        dropout: float = 0.0
        pad_id: int = 5

    rnn = models.get("rnn")
    with pytest.raises(ValueError, match="Config.pad_id must be 0"):
        protocol.Model(kind="pad_five", Config=PadFive, param_shapes=rnn.param_shapes,
                       init_params=rnn.init_params, loss=rnn.loss,
                       loss_and_grad=rnn.loss_and_grad, forward=rnn.forward,
                       dropout_shapes=rnn.dropout_shapes,
                       kernels=rnn.kernels)


# ------------------------------------------------------------------------- devices

CREATORS = {"arange", "zeros", "ones", "full", "empty", "eye", "linspace", "asarray"}


def test_every_array_the_models_create_names_a_device():
    """No ``device=None``, and every ``xp.zeros``-like call passes ``device=``."""
    missing = []
    for path in sorted(MODELS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            device = [k for k in node.keywords if k.arg == "device"]
            if any(isinstance(k.value, ast.Constant) and k.value.value is None for k in device):
                missing.append(f"{path.name}:{node.lineno} device=None")
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in CREATORS \
                    and isinstance(func.value, ast.Name) and func.value.id == "xp" \
                    and not device:
                missing.append(f"{path.name}:{node.lineno} xp.{func.attr} without device=")
    assert missing == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_models_compute_on_their_inputs_device(kind):
    """array_api_strict refuses to combine arrays of two devices: the loss, its gradient,
    the encoder and every search step on ``device1`` (not the default device) make
    nothing elsewhere."""
    strict = pytest.importorskip("array_api_strict")
    device = strict.Device("device1")
    model, config = models.get(kind), KINDS[kind]

    def put(tree):
        return {k: strict.asarray(v, device=device) for k, v in tree.items()}

    params, batch = put(model.init_params(config, seed=1)), put(BATCH)
    value, grads = model.loss_and_grad(params, config, batch)
    assert value.device == device and {g.device for g in grads.values()} == {device}
    assert model.loss(params, config, batch).device == device
    encoded = model.kernels.encode(params, config, batch["src"], batch["src_len"], scan=None,
                                   xp=strict)
    for max_len in (5, None):
        step, state = model.kernels.decoder(params, config, encoded, max_len=max_len, xp=strict)
        greedy = greedy_search(step, state, batch_size=3, bos_id=1, eos_id=2, max_len=5)
        step, state = model.kernels.decoder(params, config, tile_beams(encoded, 2),
                                            max_len=max_len, xp=strict)
        beam = beam_search(step, state, batch_size=3, k=2, bos_id=1, eos_id=2, max_len=5)
        for hyp in (greedy, beam):
            assert hyp.tokens.device == device and hyp.scores.device == device
            assert hyp.attention.device == device


def test_sizes_have_stated_bounds_and_parameters_must_fit_in_memory(monkeypatch):
    """A typo (``layers = 100000000``) is refused by the configuration at once, naming the
    bound; sizes within the bounds whose parameters would not fit are refused by
    ``init_params`` before any allocation, saying how much they need."""
    from xpseq.models import protocol, rnn, transformer

    with pytest.raises(ValueError, match=r"encoder_layers must be at most 1,024 .* got "
                       r"100,000,000"):
        transformer.TransformerConfig(src_vocab=5, tgt_vocab=5, encoder_layers=10**8)
    with pytest.raises(ValueError, match="hidden must be at most 65,536"):
        rnn.Seq2SeqConfig(src_vocab=5, tgt_vocab=5, hidden=2**16 + 1)
    with pytest.raises(ValueError, match="src_vocab must be at most 16,777,216"):
        rnn.Seq2SeqConfig(src_vocab=2**24 + 1, tgt_vocab=5)
    big = transformer.TransformerConfig(src_vocab=5, tgt_vocab=5, d_model=2**16, d_ff=2**16,
                                        encoder_layers=64, decoder_layers=64)
    with pytest.raises(MemoryError, match=r"init_params: the parameters need [\d,.]+ GiB but"):
        transformer.init_params(big)
    monkeypatch.setattr(protocol, "available_memory", lambda: 10_000)   # 10 kB left
    with pytest.raises(MemoryError, match="choose smaller sizes"):
        rnn.init_params(rnn.Seq2SeqConfig(src_vocab=50, tgt_vocab=50))
    monkeypatch.setattr(protocol, "available_memory", lambda: None)     # unknown: no check
    assert rnn.init_params(rnn.Seq2SeqConfig(src_vocab=5, tgt_vocab=5, embed=2, hidden=2))
