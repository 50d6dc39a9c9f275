"""ONNX export (:mod:`xpseq.export`): a model's encoder and decoder step traced by ndonnx
from the same kernels it trains with, run by onnxruntime inside the same search loops,
against the model decoded by xpseq on NumPy."""

from __future__ import annotations

import json

import numpy as np
import pytest

import xpseq
from xpseq import backends, models
from xpseq.data import make_batches
from xpseq.search import Decoder, SearchOptions, search

pytest.importorskip("ndonnx")
pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from xpseq import export  # noqa: E402
from xpseq.export.runtime import OnnxModel  # noqa: E402

NP = backends.get("numpy")


def float64(model):
    """The model's (float32) parameters in float64: what a float64 export computes with."""
    return {k: NP.to_numpy(v).astype(np.float64) for k, v in model.params.items()}


#: Tiny models of both kinds (a Transformer with two layers each side, so that a layer's
#: key/value cache feeds the next).
KIND_OPTIONS = {"rnn": dict(embed=8, hidden=8),
                "transformer": dict(d_model=8, heads=2, d_ff=16, encoder_layers=2,
                                    decoder_layers=2)}


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    """``train(kind) -> (model, path, test batches)``, each kind trained once."""
    done = {}

    def train(kind):
        if kind not in done:
            task = xpseq.toy_task(n_train=300, n_dev=20, n_test_per_bucket=4)
            model = xpseq.Translator.train(task, model=kind, backend="numpy", epochs=2,
                                           batch_size=32, progress=False,
                                           **KIND_OPTIONS[kind])
            path = model.save(tmp_path_factory.mktemp("model") / f"toy-{kind}.safetensors")
            batches = make_batches(
                task.encode([p for bucket in task.test.values() for p in bucket]), 64, bucket=1)
            done[kind] = model, path, batches
        return done[kind]

    return train


@pytest.fixture(scope="module", params=[
    "rnn", pytest.param("transformer", marks=pytest.mark.slow)])   # (a trace of 10-25 s)
def trained(request, train):
    return train(request.param)


@pytest.fixture(scope="module")
def trained_rnn(train):
    """The command and the errors do not depend on the kind: the RNN (fastest to trace)."""
    return train("rnn")


@pytest.fixture(scope="module")
def rnn_export(train, tmp_path_factory):
    """``rnn_export(dtype) -> folder``: the RNN's export in that dtype, traced once (a trace
    takes seconds). Tests read it as it is, or change a copy of it."""
    done = {}

    def rnn_export(dtype):
        if dtype not in done:
            _, path, _ = train("rnn")
            done[dtype] = export.onnx(path, tmp_path_factory.mktemp("onnx") / f"rnn-{dtype}",
                                      dtype=dtype)
        return done[dtype]

    return rnn_export


@pytest.fixture(scope="module")
def exported(trained, rnn_export, tmp_path_factory):
    model, path, _ = trained
    if models.of(model.config).kind == "rnn":
        folder = rnn_export("float64")
    else:
        folder = export.onnx(path, tmp_path_factory.mktemp("onnx") / "toy", dtype="float64")
    return folder, OnnxModel(folder, threads=1)


def test_the_export_folder_holds_the_graphs_and_what_decoding_needs(trained, exported):
    model, _, _ = trained
    folder, _ = exported
    assert sorted(p.name for p in folder.iterdir()) == ["encoder.onnx", "model.json",
                                                        "step.onnx"]
    meta = json.loads((folder / "model.json").read_text())
    assert meta["kind"] == models.of(model.config).kind and meta["dtype"] == "float64"
    assert meta["vocabs"]["tgt"] == model.tgt_vocab.to_list()
    assert meta["graphs"]["encoder"]["inputs"] == {"src": ["batch", "src_len"],
                                                   "src_len": ["batch"]}
    inputs = meta["graphs"]["step"]["inputs"]
    if meta["kind"] == "rnn":
        assert inputs["enc.memory"] == ["batch", "src_len", 16]
    else:       # the cross-attention keys of the source; the cache of the steps decoded
        assert inputs["enc.k1"] == ["batch", 2, "src_len", 4]
        assert inputs["state.v0"] == ["batch", 2, "steps", 4]
        assert inputs["state.t"] == ["batch"]
        assert meta["graphs"]["encoder"]["outputs"]["state.k0"] == ["batch", 2, 0, 4]
    # Every matrix product is bare: none is left inside the If that ndonnx records for
    # empty operands (the encoder's are in its Loop bodies).
    for name in ("encoder.onnx", "step.onnx"):
        ops = node_ops(onnx.load(folder / name).graph)
        assert ops.count("MatMul") >= 3, name
        assert not any(branch == ["MatMul", "Identity"] for branch in if_else_branches(
            onnx.load(folder / name).graph)), name


def node_ops(graph) -> list[str]:
    """Every node's op type, those of the graphs inside nodes included."""
    found = []
    for node in graph.node:
        found.append(node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found += node_ops(attr.g)
    return found


def if_else_branches(graph) -> list[list[str]]:
    found = []
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                if node.op_type == "If" and attr.name == "else_branch":
                    found.append([n.op_type for n in attr.g.node])
                found += if_else_branches(attr.g)
    return found


def test_float64_export_gives_numpy_log_probabilities(trained, exported):
    model, _, batches = trained
    _, onnx_model = exported
    kernels = models.of(model.config).kernels
    params = float64(model)
    batch = batches[0]
    src, src_len = batch["src"], batch["src_len"]
    enc = kernels.encode(params, model.config, src, src_len, scan=NP.scan, xp=NP.xp)
    step, state = kernels.decoder(params, model.config, enc, max_len=None, xp=NP.xp)
    got_enc, got_state = onnx_model.encode(src, src_len)
    want_enc = export.names_of(enc, "enc")
    assert sorted(got_enc) == sorted(want_enc)
    for name, value in want_enc.items():
        np.testing.assert_allclose(got_enc[name], value, rtol=0, atol=1e-12, err_msg=name)
    y = np.full((src.shape[0],), 1, dtype=np.int64)
    for t in range(batch["tgt_in"].shape[1]):
        y = batch["tgt_in"][:, t]
        want, state, weights = step(state, y)
        got, got_state, got_weights = onnx_model.step(got_enc, got_state, y)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
        np.testing.assert_allclose(got_weights, weights, rtol=0, atol=1e-12)
        for name, value in export.names_of(state, "state").items():    # the cache grows
            np.testing.assert_array_equal(got_state[name].shape, value.shape)


@pytest.mark.parametrize("options", [SearchOptions(),
                                     SearchOptions(method="beam", k=3, n_best=2)],
                         ids=["greedy", "beam3"])
def test_search_over_onnxruntime_gives_numpy_ids(trained, exported, options):
    model, _, batches = trained
    _, onnx_model = exported
    for batch in batches:
        want = search(float64(model), model.config, batch["src"], batch["src_len"], NP,
                      options)
        got = onnx_model.search(batch["src"], batch["src_len"], options)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(got.lengths, want.lengths)
        np.testing.assert_allclose(got.scores, want.scores, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", ["rnn", pytest.param("transformer", marks=pytest.mark.slow)])
def test_float32_export_gives_the_same_ids(train, rnn_export, kind, tmp_path):
    model, path, batches = train(kind)              # (a Transformer traces in ~15 s)
    folder = rnn_export("float32") if kind == "rnn" else export.onnx(path, tmp_path / "f32")
    assert json.loads((folder / "model.json").read_text())["dtype"] == "float32"
    onnx_model = OnnxModel(folder, threads=1)
    for batch in batches:
        want = search(model.params, model.config, batch["src"], batch["src_len"], NP)
        got = onnx_model.search(batch["src"], batch["src_len"])
        np.testing.assert_array_equal(got.tokens, want.tokens)


def test_export_errors(trained_rnn, tmp_path):
    _, path, _ = trained_rnn
    folder = tmp_path / "taken"
    folder.mkdir()
    (folder / "step.onnx").write_bytes(b"a user's file")
    with pytest.raises(ValueError, match="already holds step.onnx"):
        export.onnx(path, folder)
    assert (folder / "step.onnx").read_bytes() == b"a user's file"
    with pytest.raises(ValueError, match="dtype must be one of"):
        export.onnx(path, tmp_path / "x", dtype="int8")
    not_a_model = tmp_path / "notes.safetensors"
    not_a_model.write_bytes(b"hello")
    with pytest.raises(ValueError):
        export.onnx(not_a_model, tmp_path / "y")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    with pytest.raises(ValueError, match="is not an xpseq ONNX export"):
        OnnxModel(tmp_path)


def test_the_command_exports_and_refuses_clearly(trained_rnn, tmp_path, capsys):
    from xpseq.app import cli

    _, path, batches = trained_rnn
    assert cli.main(["export", str(path), "--onnx", str(tmp_path / "cmd")]) == 0
    printed = capsys.readouterr().out
    assert f"{tmp_path / 'cmd' / 'step.onnx'}:" in printed
    model = OnnxModel(tmp_path / "cmd")
    assert model.meta["dtype"] == "float32"
    for argv, message in (
            (["export", "--onnx", str(tmp_path / "z")], "needs a CHECKPOINT or --shipped"),
            (["export", str(path), "--onnx", str(tmp_path / "cmd")], "already holds"),
            (["export", str(tmp_path / "cmd" / "model.json"), "--onnx", str(tmp_path / "w")],
             "model.json")):
        assert cli.main(argv) != 0
        assert message in capsys.readouterr().err


# ------------------------------------------------- decoding an export from the command


def test_translate_on_onnxruntime_prints_what_numpy_prints(trained_rnn, rnn_export, tmp_path,
                                                          capsys):
    from xpseq.app import cli

    _, path, _ = trained_rnn
    folder = rnn_export("float32")
    sentences = ["the cat sees the dog", "", "a dog and the cat"]
    for extra in ([], ["--beam", "3", "--n-best", "2"]):
        printed = {}
        for argv in ([str(path), "--backend", "numpy"], [str(folder)]):
            assert cli.main(["translate", *argv, *extra, *sentences]) == 0
            printed[argv[-1]] = capsys.readouterr().out
        assert printed[str(folder)] == printed["numpy"]
        assert len(printed["numpy"].splitlines()) == (3 if not extra else 5)
    for argv, message in (
            ([str(folder), "--precision", "bf16"], "takes no --precision"),
            ([str(folder), "--dtype", "float64"], "was exported in float32"),
            ([str(tmp_path)], "nor an ONNX export: it holds no model.json")):
        assert cli.main(["translate", *argv, "a cat"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("xpseq: error: ") and message in err, err
        assert len(err.splitlines()) == 1
    # evaluate reads what it reports (the model's configuration) through the Decoder
    printed = {}
    for argv in ([str(path), "--backend", "numpy"], [str(folder)]):
        assert cli.main(["evaluate", *argv, "--task", "toy"]) == 0
        printed[argv[-1]] = capsys.readouterr().out
    assert printed[str(folder)] == printed["numpy"] and "BLEU" in printed["numpy"]


@pytest.mark.slow       # 12 s; the deployment guide's notebook checks the same at each build
def test_the_shipped_g2p_model_exports_and_answers_as_on_numpy(tmp_path, capsys):
    """The shipped G2P model in float32 (a few seconds to trace): the same answers as
    NumPy on 300 test words of its split, greedy and beam, from the library and the
    command."""
    from xpseq import g2p
    from xpseq.app import cli
    from xpseq.data.cmudict import load_g2p

    folder = tmp_path / "g2p-onnx"
    assert cli.main(["export", "--shipped", "--onnx", str(folder)]) == 0
    sizes = sum((folder / f).stat().st_size for f in ("encoder.onnx", "step.onnx"))
    meta = json.loads((folder / "model.json").read_text())
    assert meta["metadata"] == {"task": "g2p", "stress": True}
    # Its float16 parameters stay float16 in the graphs (cast where read): half of float32.
    assert (meta["stored_dtype"], meta["weights_dtype"], meta["dtype"]) == (
        "float16", "float16", "float32")
    from xpseq.train import checkpoint

    n = sum(v.size for v in checkpoint.load(g2p.MODEL_DIR / g2p.shipped()["files"][0]
                                            ).params.values())
    assert 2 * n < sizes < 2.2 * n, (sizes, n)          # 2 bytes a parameter, and the graph
    words = list(load_g2p(stress=True).test)[:300]
    on_numpy = g2p.G2P(backend="numpy")
    on_onnx = g2p.G2P(folder)                    # a folder: the export, on onnxruntime
    assert on_onnx.stress and on_onnx.src_vocab.to_list() == on_numpy.src_vocab.to_list()
    assert on_onnx.pronounce(words) == on_numpy.pronounce(words)
    assert on_onnx.pronounce(words[:40], beam=4, n_best=2) == on_numpy.pronounce(
        words[:40], beam=4, n_best=2)
    capsys.readouterr()
    assert cli.main(["g2p", "--model", str(folder), "hello", "xylophone"]) == 0
    assert capsys.readouterr().out == "".join(
        f"{w}\t{' '.join(p)}\n" for w, p in zip(["hello", "xylophone"],
                                                on_numpy.pronounce(["hello", "xylophone"])))
    for argv, message in ((["--backend", "onnxruntime", "hello"], "--model DIR"),
                          (["--model", str(folder), "--precision", "bf16", "hello"],
                           "takes no --precision")):
        assert cli.main(["g2p", *argv]) == 1
        assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match="an ensemble does not export"):
        g2p.G2P([folder, folder])
    with pytest.raises(ValueError, match="is an ONNX export, decoded by onnxruntime; "
                                         "backend 'numpy' decodes checkpoints"):
        g2p.G2P(folder, backend="numpy")
    decoder = xpseq.load_decoder(folder)
    assert isinstance(decoder, Decoder) and decoder.name == "onnxruntime"
    assert g2p.G2P(decoder).pronounce(words[:20]) == on_numpy.pronounce(words[:20])


def test_g2p_refuses_the_export_of_a_translator(rnn_export, capsys):
    from xpseq import g2p
    from xpseq.app import cli

    folder = rnn_export("float32")
    with pytest.raises(ValueError, match="is not a G2P model"):
        g2p.G2P(folder)
    assert cli.main(["g2p", "--model", str(folder), "cat"]) == 1
    assert "is not a G2P model" in capsys.readouterr().err


#: Configurations whose declared shapes are checked: every cell, attention and style of
#: the RNN, and Transformers where two sizes coincide (d_model / heads == heads).
SPEC_CONFIGS = {
    "rnn-lstm-general": ("rnn", dict(embed=4, hidden=3)),
    "rnn-gru-additive-bahdanau": ("rnn", dict(embed=4, hidden=3, cell="gru",
                                              attention="additive", style="bahdanau")),
    "rnn-dot-no-feeding": ("rnn", dict(embed=4, hidden=3, attention="dot",
                                       input_feeding=False)),
    "rnn-none": ("rnn", dict(embed=4, hidden=3, attention="none")),
    "transformer-width-equals-heads": ("transformer", dict(d_model=16, heads=4, d_ff=8,
                                                           encoder_layers=1,
                                                           decoder_layers=2)),
}


def _config(name):
    kind, options = SPEC_CONFIGS[name]
    return models.get(kind).Config(src_vocab=7, tgt_vocab=9, **options)


@pytest.mark.parametrize("name", sorted(SPEC_CONFIGS))
def test_each_kind_declares_the_shapes_its_kernels_compute(name):
    """``kernels.decoder_spec`` is true of the model's own kernels on NumPy: with a batch of
    3, sources of 3 tokens (batch and length coinciding) and 2 steps decoded, every
    encoded array and state has the declared shape, the names substituted."""
    config = _config(name)
    model = models.get(SPEC_CONFIGS[name][0])
    params = model.init_params(config, 0)
    batch, src_len = 3, 3
    src = np.full((batch, src_len), 3, dtype=np.int64)
    lengths = np.array([3, 2, 1], dtype=np.int64)
    encoded = model.kernels.encode(params, config, src, lengths, scan=NP.scan, xp=NP.xp)
    step, state = model.kernels.decoder(params, config, encoded, max_len=None, xp=NP.xp)
    for _ in range(2):
        _, state, _ = step(state, np.full((batch,), 4, dtype=np.int64))
    sizes = {"batch": batch, "src_len": src_len, "steps": 2}
    shapes = export.graph_shapes(config)
    for traced, declared in ((export.names_of(encoded, "enc"), shapes["encoded"]),
                             (export.names_of(state, "state"), shapes["state"])):
        assert sorted(traced) == sorted(declared)
        for key, array in traced.items():
            assert array.shape == tuple(sizes.get(d, d) for d in declared[key]), key


@pytest.mark.parametrize("name", ["rnn-gru-additive-bahdanau", pytest.param(
    "transformer-width-equals-heads", marks=pytest.mark.slow)])     # (a trace of ~10 s)
def test_the_export_writes_the_declared_shapes_and_decodes_as_numpy(name, tmp_path):
    """The graphs' symbolic shapes are the kind's declaration (no probing), even where two
    sizes coincide (a Transformer whose heads equal d_model / heads); the export decodes
    as NumPy does, on a batch whose size equals its source length."""
    config = _config(name)
    params = models.of(config).init_params(config, 1)
    encoder, step, spec = export.trace(params, config, dtype="float64")
    shapes = export.graph_shapes(config)
    assert spec["encoder"]["outputs"] == {**shapes["encoded"], **shapes["first"]}
    assert spec["step"]["inputs"] == {**shapes["encoded"], **shapes["state"],
                                      "y_prev": ["batch"]}
    if name.startswith("transformer"):
        assert shapes["state"]["state.k1"] == ["batch", 4, "steps", 4]
        assert shapes["first"]["state.k1"] == ["batch", 4, 0, 4]
    import onnxruntime as ort

    run_enc = ort.InferenceSession(encoder.SerializeToString())
    src = np.array([[3, 4, 5], [6, 3, 0], [4, 0, 0]], dtype=np.int64)
    lengths = np.array([3, 2, 1], dtype=np.int64)
    got = dict(zip([o.name for o in run_enc.get_outputs()],
                   run_enc.run(None, {"src": src, "src_len": lengths})))
    want = models.of(config).kernels.encode(params, config, src, lengths, scan=NP.scan,
                                            xp=NP.xp)
    for key, value in export.names_of(want, "enc").items():
        np.testing.assert_allclose(got[key], value, rtol=0, atol=1e-12, err_msg=key)


def test_a_wrong_declaration_is_refused_by_name(monkeypatch):
    """A model kind whose declared shapes are not what its kernels compute cannot export:
    the error names the array and both shapes."""
    config = _config("rnn-lstm-general")
    right = export.graph_shapes

    def wrong(c):
        shapes = right(c)
        shapes["state"]["state.h"] = ["batch", 99]
        return shapes

    monkeypatch.setattr(export, "graph_shapes", wrong)
    with pytest.raises(ValueError, match=r"declares state\.h of shape \['batch', 99\], "
                                         r"but computes \(2, 6\)"):
        export.trace(models.get("rnn").init_params(config, 0), config)


def test_one_decoding_door_for_a_checkpoint_and_its_export(trained_rnn, rnn_export, tmp_path):
    """``xpseq.load_decoder`` gives a Decoder for a checkpoint (on a backend) and for its
    export's folder (on onnxruntime); ``translate`` decodes either the same way, and the
    answers are the same ids. Options that do not apply to what it is given are refused
    by name."""
    from xpseq.search import CheckpointDecoder
    from xpseq.tasks import translate

    model, path, _ = trained_rnn
    folder = rnn_export("float64")
    on_numpy = xpseq.load_decoder(path, backend="numpy", dtype="float64")
    on_onnx = xpseq.load_decoder(folder)
    assert isinstance(on_numpy, CheckpointDecoder) and isinstance(on_onnx, OnnxModel)
    assert isinstance(on_numpy, Decoder) and isinstance(on_onnx, Decoder)
    assert on_onnx.src_vocab.to_list() == on_numpy.src_vocab.to_list()
    sources = [s.split() for s in ["the cat sees the dog", "a small dog", "the old cat"]]
    options = SearchOptions(method="beam", k=3, n_best=2)
    got, want = translate(on_onnx, sources, options), translate(on_numpy, sources, options)
    assert [r["n_best"] for r in got] == [r["n_best"] for r in want]
    with pytest.raises(ValueError, match="exported in float64, not float32"):
        xpseq.load_decoder(folder, dtype="float32")
    with pytest.raises(ValueError, match="precision is fixed by an ONNX export"):
        xpseq.load_decoder(folder, precision="bf16")
    with pytest.raises(ValueError, match="is not a folder"):
        xpseq.load_decoder(path, backend="onnxruntime")
    (tmp_path / "empty").mkdir()                   # a folder but no export: said so
    with pytest.raises(ValueError, match="empty is a folder, not a checkpoint file .nor an "
                       "ONNX export: it holds no model.json"):
        xpseq.load_decoder(tmp_path / "empty", backend="numpy")


# ------------------------------------------------------- an export changed, cut short


def copy_of(folder, to):
    import shutil

    shutil.copytree(folder, to)
    return to


def test_a_changed_or_swapped_file_is_refused_by_the_digest(rnn_export, tmp_path):
    """model.json stores a digest over the graphs and itself: a vocabulary word dropped,
    swapped or added, or a step graph copied from another export of the same shape, is
    refused instead of decoding wrong answers."""
    first = copy_of(rnn_export("float32"), tmp_path / "a")
    other = rnn_export("float64")
    OnnxModel(first)                                            # as written: it loads
    meta = json.loads((first / "model.json").read_text())
    tgt = meta["vocabs"]["tgt"]
    edits = {"dropped": tgt[:-1], "swapped": [*tgt[:4], tgt[5], tgt[4], *tgt[6:]],
             "added": [*tgt, "extra"]}
    for name, words in edits.items():
        folder = copy_of(first, tmp_path / name)
        changed = dict(meta, vocabs=dict(meta["vocabs"], tgt=words))
        (folder / "model.json").write_text(json.dumps(changed))
        with pytest.raises(ValueError, match="do not match the digest"):
            OnnxModel(folder)
    swapped = copy_of(first, tmp_path / "swapped-graph")
    (swapped / "step.onnx").write_bytes((other / "step.onnx").read_bytes())
    with pytest.raises(ValueError, match="do not match the digest"):
        OnnxModel(swapped)


@pytest.mark.parametrize(("edit", "says"), [
    (lambda meta: dict(meta, vocabs=None), "vocabs missing or not what an xpseq export"),
    (lambda meta: dict(meta, format=1, digest=None), "format 1, written by an older xpseq"),
    (lambda meta: "[" * 100_000 + "]" * 100_000, "nests too deep"),
    (lambda meta: [meta], "is not the model.json of an xpseq export")])
def test_a_malformed_model_json_is_one_line_naming_the_file(rnn_export, tmp_path, edit, says):
    folder = copy_of(rnn_export("float32"), tmp_path / "toy")
    changed = edit(json.loads((folder / "model.json").read_text()))
    (folder / "model.json").write_text(changed if isinstance(changed, str) else
                                       json.dumps(changed))
    with pytest.raises(ValueError, match=says) as caught:
        OnnxModel(folder)
    assert str(folder / "model.json") in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.slow           # (two traces of the export: 11 s)
def test_an_export_cut_short_leaves_nothing_in_the_folder(trained_rnn, tmp_path,
                                                         monkeypatch):
    """The files are written beside the folder and moved in only when complete: a failure
    while writing (a full disk, here the second move refused) leaves the folder as it was,
    no temporary folder behind, and a retry succeeds."""
    import os

    _, path, _ = trained_rnn
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    real, calls = os.link, []

    def link(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "link", link)
    with pytest.raises(OSError, match="No space left"):
        export.onnx(path, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]        # no .partial
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    monkeypatch.setattr(os, "link", real)
    OnnxModel(export.onnx(path, out))


def test_the_command_refuses_a_bad_target_or_source_before_any_work(trained_rnn, tmp_path,
                                                                    capsys, monkeypatch):
    """``--onnx`` a file, or a checkpoint that does not exist: said before the trace (which
    takes seconds), naming what is wrong."""
    from xpseq.app import cli

    def no_trace(*args, **kwargs):
        raise AssertionError("traced before the arguments were checked")

    monkeypatch.setattr(export, "trace", no_trace)
    _, path, _ = trained_rnn
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    for argv, says in (([str(path), "--onnx", str(notes)], f"{notes} is not a folder"),
                       ([str(tmp_path / "nothere.safetensors"), "--onnx", str(tmp_path / "o")],
                        f"no checkpoint {tmp_path / 'nothere.safetensors'}")):
        assert cli.main(["export", *argv]) == 1
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith("xpseq: error: "), err
        assert says in err, err
    assert notes.read_text() == "mine" and not (tmp_path / "o").exists()
