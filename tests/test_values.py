"""The one door for values (:mod:`xpseq.core.values`) and the doors that go through it.

Property: every field of every configuration (the RNN's and the Transformer's, the
training's and the search's), given any value, is either refused at construction with a
TypeError or ValueError that names the field, or is taken in a plain Python form with
which the model trains a step, is saved, is loaded and comes back equal. The examples per
property: ``XPSEQ_VALUE_EXAMPLES`` (12; 300 found the overflow that clip_by_global_norm now
avoids); the fuzz suite drives ``Translator.train``'s whole option surface (slow tier).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xpseq
from xpseq import backends
from xpseq.core import values
from xpseq.core.optim import adam
from xpseq.models.rnn import Seq2SeqConfig
from xpseq.models.transformer import TransformerConfig
from xpseq.search import SearchOptions, search
from xpseq.tasks import model_config, train_model
from xpseq.train import TrainConfig
from xpseq.train import checkpoint as ckpt

# ------------------------------------------------------------------ the checkers


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), np.uint8(3)])
def test_an_integer_of_any_library_comes_back_a_python_int(value):
    got = values.integer("f", "n", value, low=1)
    assert got == 3 and type(got) is int


@pytest.mark.parametrize(("value", "error", "says"), [
    (True, TypeError, "f: n must be a positive int, got bool True"),
    (np.True_, TypeError, "f: n must be a positive int, got bool"),
    (3.0, TypeError, "f: n must be a positive int, got float 3.0"),
    ("3", TypeError, "f: n must be a positive int, got str '3'"),
    (None, TypeError, "f: n must be a positive int, got NoneType None"),
    (0, ValueError, "f: n must be a positive int, got 0"),
    (np.int64(-2), ValueError, "f: n must be a positive int, got -2"),
])
def test_an_integer_check_refuses_by_name(value, error, says):
    with pytest.raises(error, match=f"^{says}"):
        values.integer("f", "n", value, low=1)


def test_integer_bounds_and_none():
    assert values.integer("f", "n", None, low=1, optional=True) is None
    assert values.integer("f", "n", 0, low=0) == 0
    with pytest.raises(ValueError, match=r"must be an int in \[2, 4\], got 5"):
        values.integer("f", "n", 5, low=2, high=4)
    with pytest.raises(ValueError, match="must be a non-negative int or None, got -1"):
        values.integer("f", "n", -1, low=0, optional=True)


@pytest.mark.parametrize("value", [0.25, np.float32(0.25), np.float64(0.25)])
def test_a_real_of_any_library_comes_back_a_python_float(value):
    got = values.real("f", "x", value, low=0, high=1, high_open=True)
    assert got == 0.25 and type(got) is float
    assert type(values.real("f", "x", np.int64(0), low=0)) is float


@pytest.mark.parametrize(("value", "error"), [
    (math.nan, ValueError), (np.float32("nan"), ValueError), (1.0, ValueError),
    (-1e-9, ValueError), (True, TypeError), ("0.1", TypeError), (1j, TypeError),
    (None, TypeError), ([0.1], TypeError),
])
def test_a_real_check_refuses_nan_out_of_range_and_other_kinds(value, error):
    with pytest.raises(error, match=r"^f: x must be a number in \[0, 1\)"):
        values.real("f", "x", value, low=0, high=1, high_open=True)


def test_real_names_its_common_intervals():
    with pytest.raises(ValueError, match="lr must be a positive number, got 0.0"):
        values.real("f", "lr", 0, low=0, low_open=True, high=math.inf, high_open=True)
    with pytest.raises(ValueError, match="must be a positive number, got inf"):
        values.real("f", "lr", math.inf, low=0, low_open=True, high=math.inf, high_open=True)
    with pytest.raises(ValueError, match="must be a non-negative number or inf, got -1.0"):
        values.real("f", "x", -1, low=0)
    assert values.real("f", "x", math.inf, low=0) == math.inf


def test_a_flag_is_a_python_or_numpy_bool_and_nothing_else():
    for value, want in ((True, True), (np.False_, False), (np.bool_(True), True)):
        got = values.flag("f", "progress", value)
        assert got is want
    for bad in (1, 0, "no", "False", None, np.int64(1), 1.0):
        with pytest.raises(TypeError, match="^f: progress must be True or False, got"):
            values.flag("f", "progress", bad)
    assert values.flag("f", "p", None, optional=True) is None


def test_a_choice_is_a_str_among_the_choices():
    got = values.choice("f", "cell", np.str_("gru"), ("lstm", "gru"))
    assert got == "gru" and type(got) is str
    with pytest.raises(ValueError, match=r"^f: cell must be one of \['lstm', 'gru'\], got 'LSTM'"):
        values.choice("f", "cell", "LSTM", ("lstm", "gru"))
    with pytest.raises(TypeError, match=r"cell must be one of \['lstm', 'gru'\], got int 1"):
        values.choice("f", "cell", 1, ("lstm", "gru"))
    with pytest.raises(TypeError, match=r"must be None or one of \['a'\], got list"):
        values.choice("f", "g", ["a"], ("a",), optional=True)


def test_a_dtype_is_named_however_it_is_given():
    torch = pytest.importorskip("torch")
    for given_ in ("float32", np.float32, np.dtype("float32"), torch.float32):
        assert values.dtype_name("f", "dtype", given_) == "float32"
    for bad in ("float16", np.float16, "int32", np.dtype("int32"), torch.int64, "bogus"):
        with pytest.raises(ValueError, match=r"^f: dtype must be one of \['float32', "
                                             r"'float64'\], got '"):
            values.dtype_name("f", "dtype", bad)
    for bad in (None, 32, np.float32(1.0), np.zeros(2), float):
        with pytest.raises(TypeError, match="dtype must be one of .* got"):
            values.dtype_name("f", "dtype", bad)


def test_a_long_value_is_shown_cut():
    with pytest.raises(TypeError) as caught:
        values.flag("f", "p", "x" * 1000)
    assert len(str(caught.value)) < 120


# ------------------------------------------------- every field of every configuration

TASK = xpseq.toy_task(n_train=24, n_dev=4, n_test_per_bucket=1)
BATCH = 32                                  # the whole training set: an epoch is one step
NUMPY = backends.get("numpy")
SMALL = {
    Seq2SeqConfig: {"embed": 4, "hidden": 3},
    TransformerConfig: {"d_model": 8, "heads": 2, "encoder_layers": 1, "decoder_layers": 1,
                        "d_ff": 8, "max_len": 64, "attention_block": 4},
}
VOCAB = {"src_vocab": len(TASK.src_vocab), "tgt_vocab": len(TASK.tgt_vocab)}
CHOICES = {"cell": ("lstm", "gru"), "attention": ("none", "dot", "general", "additive",
                                                  "scaled_dot", "plain", "blockwise", "auto"),
           "style": ("luong", "bahdanau"), "norm": ("pre", "post"),
           "positions": ("sinusoidal", "learned"), "activation": ("relu", "gelu"),
           "method": ("greedy", "beam"), "length_penalty": ("none", "avg", "gnmt"),
           "gradients": ("autodiff", "hand-derived"), "monitor": ("dev_loss",)}

ANYTHING = st.one_of(st.none(), st.booleans(), st.integers(-3, 9),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
                     st.lists(st.integers(0, 3), max_size=2))


def variants(default):
    """Values a user might pass where ``default`` is expected: it in the other libraries'
    and Python's types, its neighbours, and hostile ones."""
    if isinstance(default, bool):
        return st.sampled_from([default, not default, np.bool_(default), int(default),
                                str(default), None])
    if isinstance(default, int):
        return st.sampled_from([default, np.int64(default), np.int32(default), float(default),
                                np.float64(default), str(default), True, np.True_, 0, -1,
                                default + 1, 2 * default, 2**40, None])
    if isinstance(default, float):
        return st.sampled_from([default, np.float32(0.5), np.float64(default), 0, 0.1, 1,
                                1.0, -0.1, math.nan, math.inf, str(default), True, None])
    return st.none()


def field_values(cls, name, default):
    """A strategy of values for ``cls``'s field ``name``."""
    if name in CHOICES:
        return st.one_of(st.sampled_from(CHOICES[name]),
                         st.sampled_from(CHOICES[name]).map(np.str_),
                         st.sampled_from(["bogus", "LSTM", "", 1, None]), ANYTHING)
    return st.one_of(variants(default), ANYTHING)


def fields_of(cls, base):
    out = {}
    for f in dataclasses.fields(cls):
        default = base.get(f.name, f.default)
        if default is dataclasses.MISSING or f.name in ("optimizer", "precision"):
            continue
        out[f.name] = field_values(cls, f.name, False if default is None else default)
    return out


def one_field(cls, base):
    return st.sampled_from(sorted(fields_of(cls, base).items())).flatmap(
        lambda item: st.tuples(st.just(item[0]), item[1]))


def plain(value):
    """A value that JSON writes and reads back equal, of a Python type."""
    return value is None or type(value) in (bool, int, float, str)


def refused_by_name(error, cls, field):
    message = str(error)
    return f"{cls.__name__}: {field} " in message or f"{field} (" in message or \
        f" {field})" in message or f"{field} and" in message


MODEL_CASES = [pytest.param(Seq2SeqConfig, id="rnn"),
               pytest.param(TransformerConfig, id="transformer")]
EXAMPLES = int(os.environ.get("XPSEQ_VALUE_EXAMPLES", "12"))


@pytest.mark.parametrize("cls", MODEL_CASES)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_model_field_is_refused_by_name_or_trains_saves_and_loads_equal(cls, data):
    base = {**VOCAB, **SMALL[cls]}
    field, value = data.draw(one_field(cls, base), label="field, value")
    try:
        config = cls(**{**base, field: value})
    except (TypeError, ValueError) as error:
        assert refused_by_name(error, cls, field), (field, value, error)
        return
    assert all(plain(getattr(config, f.name)) for f in dataclasses.fields(cls)), config
    if field in VOCAB and getattr(config, field) != VOCAB[field]:
        return                              # a legal size, but not the task's vocabulary
    kind = "rnn" if cls is Seq2SeqConfig else "transformer"
    given_ = {**SMALL[cls], **({field: value} if field not in VOCAB else {})}
    assert config == model_config(TASK, kind, **given_)
    train = TrainConfig(epochs=1, progress=False, optimizer=adam(1e-3))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "m.safetensors")
        config, result = train_model(TASK, NUMPY, config, train, batch_size=BATCH,
                                     checkpoint=path)
        assert result.history[0]["steps"] == 1
        loaded = ckpt.load(path)
    assert loaded.config == config
    assert [type(getattr(loaded.config, f.name)) for f in dataclasses.fields(cls)] == \
        [type(getattr(config, f.name)) for f in dataclasses.fields(cls)]


TRAIN_BASE = {"epochs": 1, "max_steps": 1, "progress": False, "min_delta": 0.0,
              "clip_norm": 5.0, "seed": 0, "devices": 1, "gradients": "hand-derived"}
CONFIG = Seq2SeqConfig(**VOCAB, embed=4, hidden=3)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_training_field_is_refused_by_name_or_trains_a_step(data):
    field, value = data.draw(one_field(TrainConfig, TRAIN_BASE), label="field, value")
    settings_ = {**TRAIN_BASE, field: value}
    try:
        train = TrainConfig(**settings_)
    except (TypeError, ValueError) as error:
        assert refused_by_name(error, TrainConfig, field), (field, value, error)
        return
    fields = {f.name: getattr(train, f.name) for f in dataclasses.fields(TrainConfig)
              if f.name not in ("optimizer", "precision")}
    assert all(plain(v) for v in fields.values()), fields
    assert json.loads(json.dumps(fields)) == fields or any(
        isinstance(v, float) and math.isinf(v) for v in fields.values())
    if train.devices > 1 or train.monitor != "dev_loss" or train.gradients == "autodiff":
        return                              # (a process group / a metric / JAX or PyTorch)
    train = dataclasses.replace(train, epochs=1, max_steps=None)
    _, result = train_model(TASK, NUMPY, CONFIG, train, batch_size=BATCH)
    assert result.history[0]["steps"] == 1


SEARCH_BASE = {"method": "beam", "k": 2, "n_best": 1}
PARAMS = {k: NUMPY.asarray(v) for k, v in xpseq.models.get("rnn").init_params(CONFIG).items()}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_search_field_is_refused_by_name_or_decodes(data):
    field, value = data.draw(one_field(SearchOptions, SEARCH_BASE), label="field, value")
    try:
        options = SearchOptions(**{**SEARCH_BASE, field: value})
    except (TypeError, ValueError) as error:
        assert refused_by_name(error, SearchOptions, field) or "greedy search has" in \
            str(error), (field, value, error)
        return
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(SearchOptions)
              if f.name != "precision"}
    assert all(plain(v) for v in fields.values()), fields
    src, src_len = NUMPY.asarray(np.array([[5, 6, 2]])), NUMPY.asarray(np.array([3]))
    longest = options.min_len + min(options.max_len_b, 4)
    if options.min_len > 8:                 # legal, but more than this search decodes
        with pytest.raises(ValueError, match=r"search: min_len \(\d+\) must be below"):
            search(PARAMS, CONFIG, src, src_len, NUMPY,
                   dataclasses.replace(options, max_len_a=0.0, max_len_b=8.0))
        return
    options = dataclasses.replace(options, max_len_a=0.0, max_len_b=longest)
    hyp = search(PARAMS, CONFIG, src, src_len, NUMPY, options)
    assert hyp.tokens.shape[:2] == (1, options.n_best)


# ------------------------------------------------------------------ the front door


@pytest.fixture(scope="module")
def tiny_task():
    return xpseq.toy_task(n_train=40, n_dev=8, n_test_per_bucket=2)


@pytest.mark.parametrize(("dtype", "error"), [
    ("float16", ValueError), ("int32", ValueError), ("bogus", ValueError),
    (np.float16, ValueError), (None, TypeError), (32, TypeError)])
def test_train_refuses_a_dtype_it_does_not_train_in(tiny_task, dtype, error):
    with pytest.raises(error, match=r"Translator.train: dtype must be one of \['float32', "
                                    r"'float64'\]"):
        xpseq.Translator.train(tiny_task, dtype=dtype, backend="numpy", progress=False)


@pytest.mark.parametrize("task", [[], "toy", None, {"train": []}])
def test_train_names_a_task_that_is_not_one(task):
    with pytest.raises(TypeError, match="^Translator.train: task must be a Task .*got"):
        xpseq.Translator.train(task)


@pytest.mark.parametrize(("option", "value", "error"), [
    ("progress", "no", TypeError), ("progress", 1, TypeError), ("seed", -1, ValueError),
    ("seed", 1.0, TypeError), ("epochs", 0, ValueError), ("lr", math.nan, ValueError),
    ("lr", "1e-3", TypeError), ("batch_size", 2.5, TypeError), ("warmup", -1, ValueError),
    ("model", "lstm", ValueError), ("model", 1, TypeError)])
def test_train_refuses_bad_settings_by_name(tiny_task, option, value, error):
    with pytest.raises(error, match=f"^Translator.train: {option} must be"):
        xpseq.Translator.train(tiny_task, backend="numpy", **{option: value})


def test_numpy_values_train_save_and_load_as_python_values(tiny_task, tmp_path):
    rnn = xpseq.Translator.train(tiny_task, epochs=np.int64(1), backend="numpy",
                                 progress=np.False_, seed=np.int32(0), dtype=np.float64,
                                 hidden=np.int64(4), embed=np.int16(4), dropout=np.float32(0.5),
                                 input_feeding=np.True_)
    assert type(rnn.config.hidden) is int and type(rnn.config.dropout) is float
    assert rnn.config.input_feeding is True and rnn.params["out.W"].dtype == np.float64
    again = xpseq.load(rnn.save(tmp_path / "rnn.safetensors"), backend="numpy")
    assert again.config == rnn.config
    transformer = xpseq.Translator.train(
        tiny_task, model="transformer", epochs=1, backend="numpy", progress=False,
        d_model=np.int64(8), heads=np.int64(2), d_ff=np.int64(8), encoder_layers=np.int8(1),
        decoder_layers=np.uint8(1), attention_block=np.int64(4), tie_output=np.bool_(True))
    again = xpseq.load(transformer.save(tmp_path / "t.safetensors"), backend="numpy")
    assert again.config == transformer.config and again.config.attention_block == 4
