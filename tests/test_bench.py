"""scripts/bench.py runs and reports every section of scripts/benchmarks/; its native PyTorch
reference is xpseq's model (the same loss and gradients in float64), its per-sentence beam
loop finds the same translations as xpseq's batched beam search, and the sections share
what the context builds once."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import load_script  # noqa: E402

from xpseq import backends  # noqa: E402
from xpseq.models.rnn import Seq2SeqConfig, init_params, loss_and_grad  # noqa: E402
from xpseq.search import SearchOptions, search, to_lists  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTIONS = ("compile", "train", "flops", "beam", "sdpa", "profile", "transformer", "parallel",
            "g2p", "threads", "peers", "precision", "scaling")
#: Sections the run of every section leaves out: ``threads`` and ``scaling`` (tests of their
#: own: below and tests/test_bench_scaling.py) and ``peers`` (tests/test_peers_bench.py).
OWN_TESTS = ("threads", "peers", "scaling")
RUN_HERE = tuple(s for s in SECTIONS if s not in OWN_TESTS)
TINY = ["--embed", "4", "--hidden", "4", "--batch", "8", "--steps", "1", "--repeats", "1",
        "--pairs", "40", "--bucket", "32", "--beam-sentences", "5", "--beam-train-steps", "3",
        "--sdpa", "2,2,8,4", "--sdpa-iters", "2", "--matmul", "64",
        "--transformer", "8,2,1,16,200", "--transformer-train-steps", "1",
        "--transformer-sentences", "2", "--g2p-words", "12", "--g2p-loop-words", "3"]


def _benchmarks():
    """The ``scripts.benchmarks`` package and the entry script ``scripts.bench``."""
    bench = load_script("bench")
    from scripts import benchmarks

    return benchmarks, bench


def _random_batch(config: Seq2SeqConfig, rng: np.random.Generator, B: int = 4, S: int = 6,
                  T: int = 5) -> dict:
    src_len = rng.integers(1, S + 1, size=B)
    src_len[0] = S
    src = rng.integers(3, config.src_vocab, size=(B, S))
    src[np.arange(S)[None, :] >= src_len[:, None]] = 0
    tgt_len = rng.integers(1, T + 1, size=B)
    tgt_in = rng.integers(3, config.tgt_vocab, size=(B, T))
    tgt_in[:, 0] = 1
    tgt_out = np.roll(tgt_in, -1, axis=1)
    tgt_out[np.arange(B), tgt_len - 1] = 2
    pad = np.arange(T)[None, :] >= tgt_len[:, None]
    tgt_in[pad], tgt_out[pad] = 0, 0
    return {"src": src, "src_len": src_len, "tgt_in": tgt_in, "tgt_out": tgt_out}


def test_native_model_has_xpseqs_loss_and_gradients_in_float64():
    native = load_script("native_torch")
    config = Seq2SeqConfig(11, 13, embed=5, hidden=3, dropout=0.0)
    params = init_params(config, seed=3)
    batch = _random_batch(config, np.random.default_rng(0))
    model = native.NativeSeq2Seq.from_xpseq(params, config, torch.float64)
    value = model.loss({k: torch.as_tensor(v) for k, v in batch.items()})
    value.backward()
    expected, grads = loss_and_grad(params, config, batch)
    assert abs(float(value.detach()) - float(expected)) <= 1e-10
    for name, p in model.xpseq_parameters().items():
        np.testing.assert_allclose(p.grad.numpy(), grads[name], rtol=0, atol=1e-10,
                                   err_msg=name)


def test_native_model_rejects_other_configs():
    native = load_script("native_torch")
    config = Seq2SeqConfig(11, 13, embed=5, hidden=3, attention="dot", dropout=0.0)
    with pytest.raises(ValueError, match="attention"):
        native.NativeSeq2Seq.from_xpseq(init_params(config), config)


@pytest.mark.parametrize("penalty", ["none", "avg"])
@pytest.mark.parametrize("scale", [3.0, 5.0])
def test_per_sentence_beam_loop_matches_batched_beam_search(penalty, scale):
    # Scaled-up weights make the outputs depend on the input: with these settings the
    # searches end in </s> after 1 to 18 tokens, or stop at the length limit.
    native = load_script("native_torch")
    config = Seq2SeqConfig(9, 10, embed=6, hidden=5, dropout=0.0)
    params = {k: v.astype(np.float32) for k, v in init_params(config, seed=1).items()}
    for name in ("out.W", "out.W_u", "dec.W_ih", "dec.W_hh"):
        params[name] *= np.float32(scale)
    rng = np.random.default_rng(2)
    src_len = np.array([7, 3, 5, 1, 6, 2])
    src = rng.integers(3, config.src_vocab, size=(len(src_len), 7))
    src[np.arange(7)[None, :] >= src_len[:, None]] = 0
    src[np.arange(len(src_len)), src_len - 1] = 2                  # sources end in </s>
    be = backends.get("torch")
    options = SearchOptions(method="beam", k=3, length_penalty=penalty)
    hyp = search({k: be.asarray(v) for k, v in params.items()}, config, src, src_len, be,
                 options)
    batched = [s[0] for s in to_lists(hyp, src_len)]
    model = native.NativeSeq2Seq.from_xpseq(params, config, torch.float32)
    for b, n in enumerate(src_len):
        found = native.beam_search_one(model, [int(t) for t in src[b, :n]], k=3,
                                       length_penalty=penalty)
        assert found["ids"] == batched[b]["tokens"], b
        assert found["score"] == pytest.approx(batched[b]["score"], abs=1e-4)


@pytest.mark.slow
def test_bench_script_reports_every_section(tmp_path):
    pytest.importorskip("jax")
    out = tmp_path / "bench"
    # As a user starts it: JAX's defaults (the suite's own processes run with x64 on).
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    done = subprocess.run([sys.executable, "-m", "scripts.bench", *TINY,
                           "--only", ",".join(RUN_HERE), "--out", str(out),
                           "--record", str(tmp_path / "results")], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env=env)  # 2.5-3 min alone
    assert done.returncode == 0, done.stdout + done.stderr
    assert "threads: torch 1 intra-op" in done.stdout and "OMP_NUM_THREADS=" in done.stdout
    report = json.loads((out / "bench.json").read_text())
    [recorded] = (tmp_path / "results").glob("*.json")
    assert json.loads(recorded.read_text()) == report
    env = report["environment"]
    assert env["jax_x64"] is False                  # float32 timed with JAX's defaults
    assert env["cpu_flags"] is None or "fpu" in env["cpu_flags"].split()
    assert list(report["timings"]) == list(RUN_HERE)
    for section, comparisons in report["timings"].items():   # every repeat, by section
        # compile times first calls, not turns
        assert bool(comparisons) is (section != "compile"), section
        for times in comparisons:
            assert all(len(t) >= 1 and min(t) > 0 for t in times.values()), section
    rows = {r["measure"]: r for r in report["rows"]}
    assert {r["section"] for r in report["rows"]} == set(RUN_HERE)
    assert list(report["details"]) == ["train", "beam", "flops", "profile", "transformer",
                                       "parallel", "g2p", "threads", "peers", "precision",
                                       "scaling"]
    assert all(report["details"][s] is None for s in OWN_TESTS)
    assert report["details"]["train"]["tokens"] > 0
    precision = report["details"]["precision"]
    assert set(precision["tokens_per_s"]) == {"rnn", "transformer"}
    assert all(d <= 0.01 for d in precision["first_loss_diff"].values())
    assert rows["xpseq-torch transformer training, bf16 vs float32"]["ratio"] > 0
    assert report["details"]["beam"]["differ"]["xpseq-torch"] == []
    assert list(report["section_seconds"]) == list(RUN_HERE)
    for backend in ("numpy", "torch", "jax"):
        g2p = rows[f"shipped model, 12 test words greedy on {backend}"]
        assert g2p["section"] == "g2p" and g2p["value"] > 0 and g2p["target"] == "—"
    assert report["details"]["g2p"]["words"] == 12
    onnx = report["details"]["g2p"]["onnxruntime"]
    if onnx["missing"] is None:          # xpseq[onnx]: the export decoded by onnxruntime
        assert rows["shipped model, 12 test words greedy on onnxruntime, 1 thread"]["value"] > 0
        same = rows["words whose ids equal numpy float32's, onnxruntime"]
        assert same["value"] == onnx["equal"] == onnx["words"] == 12 and same["met"] is True
        [versus] = [r for m, r in rows.items() if m.startswith("onnxruntime (1 thread) vs")]
        assert versus["ratio"] > 0 and versus["target"] == ">= 1x"
        assert onnx["export_seconds"] > 0 and onnx["megabytes"]["step.onnx"] > 1
        assert set(onnx["batch"]["ms"]) == {f"{engine} {part}" for part in ("encoder", "step")
                                            for engine in ("numpy", "torch", "onnxruntime")}
        for part in ("encoder", "step"):
            shares = onnx["batch"]["onnxruntime_profile"][part]["ops"]
            assert shares["Gemm"] > 0 and sum(shares.values()) == pytest.approx(100)
    else:
        assert rows["shipped model greedy on onnxruntime"]["value"] == onnx["missing"]
    for kind in ("rnn", "transformer"):
        for label in ("jax 2 devices vs 1", "torch 2 processes vs 1",
                      "jax 2 devices vs 1 device on both cores",
                      "torch 2 intra-op threads vs 1"):
            assert rows[f"{kind} {label}"]["ratio"] > 0, (kind, label)
    assert rows["transformer jax 2 devices vs 1"]["target"] == ">= 1.7x"
    assert rows["native loss check (float64, |native − xpseq|)"]["met"] is True
    assert rows["xpseq-jax throughput vs native"]["target"] == ">= 1.3x"
    assert rows["xpseq-torch throughput vs native"]["target"] == "—"
    for name in ("xpseq-jax", "xpseq-jax, hand-derived backward", "xpseq-torch",
                 "xpseq-torch, hand-derived backward"):
        assert rows[f"{name} vs native torch"]["ratio"] > 0, name
    assert 0 < rows["xpseq-jax, hand-derived backward training step"]["ratio"] < 2
    assert rows["xpseq-torch batched beam vs per-sentence loop"]["target"] == ">= 10x"
    assert rows["sentences differing, batched beam vs loop (torch)"]["value"] == 0
    assert rows["xpseq-jax batched greedy"]["value"] > 0
    assert report["details"]["transformer"]["step_flops_total"] > 0
    shares = [r["value"] for r in report["rows"] if r["measure"].endswith("share of ATen time")
              or r["measure"].endswith("matrix products' share")]
    assert len(shares) == 4 and all(0 < v < 100 for v in shares)
    assert report["details"]["profile"]["ms_per_batch"]["jax gradient"] > 0
    xla = report["details"]["profile"]["xla"]
    assert set(xla["rnn"]) == {"xpseq-jax", "xpseq-jax, hand-derived recurrences", "keras-jax"}
    assert set(xla["transformer"]) == {"xpseq-jax", "xpseq-jax, hand-derived backward",
                                       "flax-jax"}
    for kind, label in (("rnn", "RNN"), ("transformer", "Transformer")):
        for name, p in xla[kind].items():
            # The RNN: the encoder's two directions and the decoder, both ways; the
            # Transformer's layers are not loops.
            loops = 6 if kind == "rnn" else 0
            assert len(p["loops_ms"]) == loops and p["hlo"]["while"] == loops, name
            assert p["total_ms"] == pytest.approx(sum(p["loops_ms"]) + p["products_ms"]
                                                  + p["copies_ms"] + p["other_ms"])
            assert p["products_ms"] > 0 and p["hlo"]["mflop"] > 0 and p["hlo"]["dot"] > 0
            assert rows[f"{name} {label} step under XLA: ms per batch"]["value"] == \
                p["total_ms"]
    ratios = [name for name, r in rows.items() if r["ratio"] is not None]
    for wanted in ("xpseq-jax throughput vs native", "xpseq-torch throughput vs native",
                   "xpseq-torch batched beam vs loop", "xpseq-jax batched beam vs loop",
                   "xpseq-jax training step", "xpseq-torch training step",
                   "xpseq-torch, hand-derived backward throughput vs native",
                   "xpseq-torch, hand-derived backward training step",
                   "xpseq-jax, hand-derived recurrences throughput vs native"):
        assert wanted in ratios, wanted
    compile_row = rows["JAX training-step compile (first call − steady step)"]
    assert isinstance(compile_row["value"], float) and compile_row["target"] == "<= 3 s"
    assert sum(r["section"] == "sdpa" and r["ratio"] is not None for r in rows.values()) == 4
    assert rows["native loss check (float64, |native − xpseq.models.loss|)"]["met"] is True
    assert rows["sentences differing, xpseq-torch vs loop"]["value"] == 0
    assert rows["retraces in epoch 2"]["value"] == 0
    assert rows["outputs agree (max |Δ| over the four comparisons)"]["met"] is True
    table = (out / "bench.md").read_text()
    assert "python -m scripts.bench --embed 4" in table
    for measure in rows:
        assert measure.replace("|", "\\|") in table
    assert "| sentences differing, xpseq-torch vs loop | 0 |" in table


def test_every_section_is_a_module_with_run():
    benchmarks, bench = _benchmarks()
    assert benchmarks.SECTIONS + benchmarks.EXTRA_SECTIONS == bench.SECTIONS + \
        bench.EXTRA_SECTIONS
    assert sorted(benchmarks.SECTIONS + benchmarks.EXTRA_SECTIONS) == sorted(SECTIONS)
    for name in SECTIONS:
        module = benchmarks.section(name)
        assert module.__name__ == f"scripts.benchmarks.{name}" and callable(module.run), name
    with pytest.raises(ValueError, match="unknown section 'nope'"):
        benchmarks.section("nope")
    with pytest.raises(SystemExit):
        bench.parse_args(["--only", "train,nope"])


@pytest.mark.slow  # a benchmark harness run
def test_sections_share_what_the_context_builds_once(monkeypatch):
    """``train`` and ``flops`` both use the ``train`` timings: the context measures them
    once, and builds nothing before a section asks."""
    benchmarks, bench = _benchmarks()
    from scripts.benchmarks.context import Context

    context = Context(bench.parse_args(TINY + ["--only", "train,flops"]))
    assert set(vars(context)) == {"args", "affinity", "_details", "train_timings"}
    assert context.train_timings is None                                # nothing built yet
    names = ("xpseq-jax", "xpseq-jax, hand-derived recurrences", "xpseq-torch",
             "xpseq-torch, hand-derived backward", "native-torch")
    timings = {"times": {n: [0.5, 0.25] for n in names}, "tokens": 100, "loss_diff": 0.0,
               "step_diff": 0.0, "cores_used": dict.fromkeys(names, 1.0),
               "tokens_per_s": {n: 100.0 * (i + 1) for i, n in enumerate(names)}}
    calls = []
    monkeypatch.setattr(benchmarks.section("train"), "measure",
                        lambda c: calls.append(c) or timings)
    rows = benchmarks.section("train").run(context) + benchmarks.section("flops").run(context)
    assert calls == [context]
    by_name = {r.measure: r for r in rows}
    assert by_name["xpseq-jax throughput vs native"].ratio == pytest.approx(100 / 500)
    assert by_name["xpseq-torch, hand-derived backward throughput vs native"].value == 400.0
    flops = context.details(["flops"])["flops"]
    expected = sum(benchmarks.section("flops").step_flops(
        context.config, b["src"].shape[0], b["src"].shape[1], b["tgt_in"].shape[1])
        for b in context.timed)
    assert flops["step_flops_total"] == expected > 0
    assert by_name["native-torch training step"].value == pytest.approx(
        expected / 0.375 / 1e9)                                  # the median of the times
    assert context.details(["train", "beam"]) == {"train": timings, "beam": None}
    assert "trained" not in vars(context) and "transformer" not in vars(context)


def test_threads_section_compares_two_threads_with_one_idle_and_busy(monkeypatch):
    benchmarks, bench = _benchmarks()
    from scripts.benchmarks.context import Context

    threads = benchmarks.section("threads")
    runs = []

    def epoch_seconds(backend, model, n, folder):
        runs.append((backend, model, n))
        return {"numpy": 3.0, "torch": 2.0, "jax": 1.0}[backend] / n

    monkeypatch.setattr(threads, "epoch_seconds", epoch_seconds)
    context = Context(bench.parse_args(["--only", "threads", "--repeats", "2"]))
    rows = threads.run(context)
    assert len(runs) == 2 * 2 * 3 * 2 * 2               # idle/busy, repeats, backends, ...
    assert [r.measure for r in rows[:2]] == ["toy rnn on numpy, 2 threads vs 1, idle machine",
                                             "toy transformer on numpy, 2 threads vs 1, "
                                             "idle machine"]
    assert len(rows) == 12 and rows[-1].measure.endswith("on jax, 2 threads vs 1, busy machine")
    assert all(r.ratio == pytest.approx(2.0) and r.unit == "s/epoch" for r in rows)
    assert rows[0].value == pytest.approx(1.5) and rows[0].detail == "1 thread: 3.00 s/epoch"
    assert context.details(["threads"])["threads"]["median"]["busy jax rnn 2"] == 0.5


@pytest.mark.slow  # a benchmark harness run
def test_threads_section_reads_the_second_epoch_of_the_command(tmp_path):
    """The ``threads`` section times ``xpseq --threads N train`` in a child process: the
    seconds it returns are the second epoch's, as the run's metrics log has them."""
    benchmarks, _ = _benchmarks()
    seconds = benchmarks.section("threads").epoch_seconds("numpy", "rnn", 1, tmp_path,
                                                          quick=True)
    log = (tmp_path / "numpy-rnn-1.metrics.csv").read_text().splitlines()
    assert len(log) == 3 and log[0].startswith("epoch,")
    assert seconds == float(log[2].split(",")[log[0].split(",").index("seconds")]) > 0
