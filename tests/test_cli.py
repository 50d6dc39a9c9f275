"""The ``xpseq`` command, run as a subprocess: help, translate, evaluate, heatmap, train and
its errors. One tiny checkpoint is trained once for the module (torch, a few seconds).

The key check: a checkpoint trained on torch translates identically on numpy, jax, torch
and array_api_strict in float64, greedy and with beam search.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import assert_ok, show, two_cpus

from xpseq import backends
from xpseq.data import EOS_ID, make_dataset, write_parallel_tsv
from xpseq.models.rnn import init_params
from xpseq.train.checkpoint import load, save

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 180
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# The toy task's test sentences, one per bucket (0-4 prepositional phrases).
DATA = make_dataset(n_train=200, n_dev=10, n_test_per_bucket=5)
SENTENCES = [" ".join(DATA.test[bucket][0][0]) for bucket in range(5)]


def _argv(args) -> list[str]:
    return [sys.executable, "-m", "xpseq", *map(str, args)]


def xpseq(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m xpseq ARGS`` (stdin closed unless given)."""
    return subprocess.run(_argv(args), input=stdin if stdin is not None else "",
                          capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)


def xpseq_many(runs: dict) -> dict[object, subprocess.CompletedProcess]:
    """Several ``xpseq`` commands at once (they spend most of their time importing and
    compiling, so running them side by side uses both cores): {key: (args, stdin)}."""
    procs = {key: subprocess.Popen(_argv(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=ROOT)
             for key, (args, _) in runs.items()}
    done = {}
    for key, proc in procs.items():
        try:
            out, err = proc.communicate(runs[key][1] or "", timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        done[key] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


def assert_one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit 1 and exactly one line on stderr, ``xpseq: error: ...`` holding ``fragments``."""
    assert done.returncode == 1, show(done)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, show(done)
    assert lines[0].startswith("xpseq: error: "), show(done)
    for fragment in fragments:
        assert fragment in lines[0], show(done)
    return lines[0]


def assert_fails_cleanly(done: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit 1, no traceback, and one ``xpseq: error: ...`` line holding ``fragments``, the
    last on stderr (progress lines such as "training on ..." may come before it)."""
    assert done.returncode == 1, show(done)
    assert "Traceback" not in done.stderr, show(done)
    lines = done.stderr.splitlines()
    errors = [line for line in lines if line.startswith("xpseq: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], show(done)
    for fragment in fragments:
        assert fragment in errors[0], show(done)
    return errors[0]


def assert_argument_error(done: subprocess.CompletedProcess, fragment: str) -> None:
    """Exit 2 (argparse), no traceback, nothing on stdout, and one error line (after the
    usage) that mentions ``fragment``."""
    assert done.returncode == 2, show(done)
    assert done.stdout == "", show(done)
    assert "Traceback" not in done.stderr, show(done)
    errors = [line for line in done.stderr.splitlines() if re.match(r"xpseq( \w+)?: error: ", line)]
    assert len(errors) == 1 and errors[0] == done.stderr.splitlines()[-1], show(done)
    assert fragment in errors[0], show(done)


# ------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def toy(workdir) -> pathlib.Path:
    """A toy-task checkpoint: 1 epoch of the quick data, embed 8, hidden 8, on torch
    (about 5 s; batch size 16 and lr 0.01 so that its translations already differ from
    sentence to sentence)."""
    if "torch" not in backends.available():
        pytest.skip("training the CLI's checkpoint needs torch")
    path = workdir / "toy.safetensors"
    done = xpseq("train", "--quick", "--epochs", 1, "--embed", 8, "--hidden", 8,
                 "--batch-size", 16, "--lr", 0.01, "--backend", "torch", "--out", path,
                 "--no-progress")
    assert_ok(done)
    assert path.is_file() and path.stat().st_size > 0
    assert re.match(rf"saved {re.escape(str(path))}: 1 epoch, train loss \d", done.stdout)
    assert "training on torch (float32, hand-derived gradients): 1500 sentence pairs" in done.stderr
    # The metrics log beside it: a header and one row per epoch (the checkpoint's history).
    log = (workdir / "toy.metrics.csv").read_text(encoding="utf-8").splitlines()
    assert log[0].startswith("epoch,train_loss,dev_loss,") and len(log) == 2, log
    assert any((workdir / "toy.tb").iterdir())                 # tensorboardX is installed
    return path


@pytest.fixture(scope="module")
def translations(toy) -> dict[tuple[str, int], subprocess.CompletedProcess]:
    """``translate --dtype float64`` of SENTENCES (on stdin) on every backend, greedy and
    ``--beam 3``: {(backend, beam): finished process}."""
    names = backends.available()
    stdin = "\n".join(SENTENCES) + "\n"
    return xpseq_many({(name, beam): (["translate", toy, "--backend", name, "--dtype",
                                       "float64", "--beam", beam], stdin)
                       for name in names for beam in (1, 3)})


# ---------------------------------------------------------------------------- help


@pytest.mark.parametrize("command, words", [
    ([], ["demo", "train", "translate", "evaluate", "heatmap"]),
    (["demo"], ["--quick", "attention", "--backend"]),
    (["train"], ["--task", "--train", "--dev", "--out", "--attention", "--epochs"]),
    (["translate"], ["beam", "--n-best", "--max-tokens", "stdin", "<unk>"]),
    (["evaluate"], ["BLEU", "--test", "--beam"]),
    (["heatmap"], ["attention", "--png", "PNG"]),
])
def test_help_exits_0_and_says_what_the_command_does(command, words):
    done = xpseq(*command, "--help")
    assert_ok(done)
    assert done.stdout.startswith(f"usage: xpseq {' '.join(command)}".rstrip()), done.stdout
    for word in words:
        assert word in done.stdout, (word, done.stdout)
    if command:
        for option in ("--backend", "--dtype", "--seed"):
            assert option in done.stdout


def test_console_script_is_installed():
    script = pathlib.Path(sys.executable).parent / "xpseq"
    if not script.exists():
        pytest.skip(f"no console script at {script}")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=ROOT)
    assert_ok(done)
    assert done.stdout.startswith("usage: xpseq ")
    assert "translate" in done.stdout


# ----------------------------------------------------------------------- translate


def test_checkpoint_translates_identically_on_every_backend(translations):
    """Trained on torch, decoded in float64: the same words on numpy, jax, torch and
    array_api_strict, greedy and with beam search."""
    names = sorted({name for name, _ in translations})
    if len(names) < 2:
        pytest.skip(f"only {names} installed")
    for (name, beam), done in translations.items():
        assert_ok(done)
        assert "xpseq:" not in done.stderr, show(done)          # no notes, no errors
        lines = done.stdout.splitlines()
        assert len(lines) == len(SENTENCES), show(done)
        assert all(line.strip() for line in lines), show(done)
    for beam in (1, 3):
        reference = translations["numpy", beam].stdout
        for name in names:
            assert translations[name, beam].stdout == reference, (name, beam)
    # The model is trained enough that the check means something: its outputs differ
    # from sentence to sentence.
    assert len(set(translations["numpy", 1].stdout.splitlines())) > 1


def test_translate_arguments_stdin_empty_lines_unknown_words_and_max_tokens(toy):
    long = DATA.test[4][1][0]                   # 19-21 words
    assert len(long) > 12
    unknown_1 = "the zzz follows the qqq"       # two unknown words ...
    unknown_2 = "the qqq follows the zzz"       # ... in swapped places: both read as <unk>
    inputs = [SENTENCES[0], unknown_1, unknown_2, " ".join(long), " ".join(long[:12])]
    runs = xpseq_many({
        "args": (["translate", "--max-tokens", 12, toy, *inputs], None),
        "stdin": (["translate", toy, "--max-tokens", 12],
                  "\n".join([inputs[0], "", *inputs[1:]]) + "\n"),
    })
    by_args, by_stdin = runs["args"], runs["stdin"]
    assert_ok(by_args)
    assert_ok(by_stdin)
    out = by_args.stdout.splitlines()
    assert len(out) == len(inputs), show(by_args)
    assert all(line.strip() for line in out), show(by_args)
    # Unknown words still translate, and both unknown words read as the same <unk>.
    assert out[1] == out[2]
    # The long sentence is cut to its first 12 words.
    assert out[3] == out[4]
    # Stdin: one line out per line in; the empty line stays empty, in its place.
    assert by_stdin.stdout.splitlines() == [out[0], "", *out[1:]], show(by_stdin)
    for done, long_index in ((by_args, 4), (by_stdin, 5)):
        notes = done.stderr.splitlines()
        assert all(n.startswith("xpseq: note: ") for n in notes), show(done)
        assert (f"xpseq: note: sentence {long_index} has {len(long)} tokens; cut to the "
                "first 12 (--max-tokens)") in notes, show(done)
        unknown = [n for n in notes if "unknown" in n]
        assert unknown == ["xpseq: note: 2 unknown source word(s) read as <unk>: qqq, zzz"], \
            show(done)


def test_translate_n_best_prints_index_rank_score_and_hypothesis(toy, translations):
    done = xpseq("translate", toy, "--dtype", "float64", "--beam", 3, "--n-best", 2,
                 stdin=f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n")
    assert_ok(done)
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    full = [r for r in rows if r[0] != "1"]
    assert [r[:2] for r in full] == [["0", "0"], ["0", "1"], ["2", "0"], ["2", "1"]], rows
    assert all(len(r) == 4 and r[3].strip() for r in full), rows
    assert full[0][3] != full[1][3] and full[2][3] != full[3][3], rows
    # Scores: summed log-probabilities, below zero; with the avg length penalty the ranking
    # is per token, so only their sign is fixed here.
    assert all(float(r[2]) < 0 for r in full), rows
    # The best of the 2-best is what --beam 3 prints on its own.
    beam3 = translations["numpy", 3].stdout.splitlines()
    assert [full[0][3], full[2][3]] == beam3[:2]
    # The empty line: its index, rank 0, no score and an empty hypothesis, as
    # tab-separated as every other line (four fields).
    assert [r for r in rows if r[0] == "1"] == [["1", "0", "", ""]], rows


def test_translate_options_may_come_before_the_sentences(toy, translations):
    """``xpseq translate CKPT --beam 3 "sentence"``: options between the checkpoint and
    the sentences, as people type them."""
    done = xpseq("translate", toy, "--dtype", "float64", "--beam", 3, SENTENCES[0])
    assert_ok(done)
    assert done.stdout.splitlines() == translations["numpy", 3].stdout.splitlines()[:1]


def test_translate_argument_errors_exit_2(toy):
    runs = xpseq_many({
        "n_best": (["translate", "--beam", 2, "--n-best", 3, toy, "x"], None),
        "beam0": (["translate", "--beam", 0, toy, "x"], None),
        "max_tokens": (["translate", "--max-tokens", "lots", toy, "x"], None),
        "command": (["frobnicate"], None),
        "dtype": (["translate", "--dtype", "float16", toy, "x"], None),
    })
    assert_argument_error(runs["n_best"], "--n-best")
    assert_argument_error(runs["beam0"], "--beam")
    assert_argument_error(runs["max_tokens"], "--max-tokens")
    assert_argument_error(runs["command"], "frobnicate")
    assert_argument_error(runs["dtype"], "float16")


# ------------------------------------------------------------------ evaluate, heatmap


def _table(stdout: str, first: str = "phrases") -> list[list[str]]:
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in stdout.splitlines() if line.startswith("|")]
    assert rows[0][:2] == [first, "sentences"], stdout
    assert set("".join(rows[1])) <= {"-", ""}, stdout
    return rows[2:]


def test_evaluate_prints_the_bucket_table_and_the_sacrebleu_signature(toy, workdir,
                                                                      translations):
    # A TSV whose references are the model's own translations: BLEU 100, exact 100%.
    own = workdir / "own.tsv"
    outputs = translations["numpy", 1].stdout.splitlines()
    write_parallel_tsv(own, [(s.split(), o.split()) for s, o in zip(SENTENCES, outputs)])
    runs = xpseq_many({
        "toy": (["evaluate", toy, "--backend", "numpy"], None),
        "own": (["evaluate", toy, "--backend", "numpy", "--dtype", "float64", "--test", own],
                None),
    })
    for done in runs.values():
        assert_ok(done)
        assert re.search(r"^BLEU: sacrebleu \S*tok:none\S*$", done.stdout, re.M), show(done)
        widths = {len(line) for line in done.stdout.splitlines() if line.startswith("|")}
        assert len(widths) == 1, show(done)
    rows = _table(runs["toy"].stdout)
    assert [r[0] for r in rows] == ["0", "1", "2", "3", "4"], runs["toy"].stdout
    assert all(r[1] == "40" for r in rows), runs["toy"].stdout      # the quick data
    for r in rows:
        assert 0 <= float(r[2]) <= 100 and r[3].endswith("%")
    # A TSV test set: its file's row, the columns named for what they hold (a toy
    # checkpoint's output is scored as tokens: tok:none above).
    assert _table(runs["own"].stdout, "test set") == [["own.tsv", str(len(SENTENCES)),
                                                      "100.00", "100.0%"]]
    header = runs["own"].stdout.splitlines()[0]
    assert [c.strip() for c in header.strip("|").split("|")] == ["test set", "sentences",
                                                                 "BLEU", "exact"]


def test_heatmap_prints_the_attention_and_writes_a_png(toy, workdir, translations):
    sentence = SENTENCES[1]
    png = workdir / "maps" / "heat.png"
    done = xpseq("heatmap", toy, sentence + " zzz", "--dtype", "float64", "--png", png)
    assert_ok(done)
    lines = done.stdout.splitlines()
    words = lines[0].split()
    assert words                                   # the translation ...
    assert lines[1].split() == sentence.split() + ["<unk>", "</s>"]   # ... the source ...
    rows = lines[2:-2]                              # ... a row per output token and </s>
    assert [r.split()[0] for r in rows] == words + ["</s>"], done.stdout
    assert all(set(r[max(map(len, words + ["</s>"])) + 1:]) <= set(" .:-=+*#%@") for r in rows)
    assert lines[-2].startswith("weights: ' ' < 0.1, '.' 0.1-0.2,")      # the legend
    assert lines[-1] == f"wrote {png}"
    assert "zzz" in done.stderr
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 1000


def test_heatmap_of_a_translation_that_never_ends(toy, workdir):
    """A model that never says </s> runs each translation to its length limit,
    ``ceil(2 * (words + 1) + 5)``: the heatmap has one row per generated token and no
    </s> row (none was generated)."""
    ckpt = load(toy)
    params = init_params(ckpt.config, seed=0)
    params["out.b"][EOS_ID] = -1e4
    endless = save(workdir / "endless.safetensors", config=ckpt.config, params=params,
                   vocabs=ckpt.vocabs, metadata=ckpt.metadata)
    sentence = "the cat sees the dog"
    png = workdir / "endless.png"
    runs = xpseq_many({
        "heatmap": (["heatmap", endless, sentence, "--png", png], None),
        "translate": (["translate", endless, sentence], None),
    })
    assert_ok(runs["translate"])
    words = runs["translate"].stdout.split()
    assert len(words) == 2 * (5 + 1) + 5
    done = runs["heatmap"]
    assert_ok(done)
    lines = done.stdout.splitlines()
    assert lines[0].split() == words
    assert lines[1].split() == sentence.split() + ["</s>"]
    assert [r.split()[0] for r in lines[2:-2]] == words
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_heatmap_of_a_model_without_attention_is_a_one_line_error(toy, workdir):
    ckpt = load(toy)
    config = dataclasses.replace(ckpt.config, attention="none", input_feeding=False)
    plain = save(workdir / "plain.safetensors", config=config,
                 params=init_params(config, seed=0), vocabs=ckpt.vocabs, metadata=ckpt.metadata)
    done = xpseq("heatmap", plain, SENTENCES[0])
    assert_one_line_error(done, "this model has no attention")


def test_heatmap_writes_the_png_at_the_path_it_names(toy, workdir):
    target = workdir / "heat"                      # no suffix: written as named, not heat.png
    done = xpseq("heatmap", toy, SENTENCES[0], "--png", target)
    assert_ok(done)
    assert done.stdout.splitlines()[-1] == f"wrote {target}"
    assert target.read_bytes()[:8] == PNG_MAGIC
    assert not (workdir / "heat.png").exists()


def test_heatmap_to_an_unwritable_png_is_a_one_line_error(toy, workdir):
    blocker = workdir / "a-file"
    blocker.write_text("not a folder\n")
    done = xpseq("heatmap", toy, SENTENCES[0], "--png", blocker / "heat.png")
    assert_one_line_error(done, "heat.png")


# -------------------------------------------------------------------------- train


def test_train_on_a_tsv_corpus_writes_a_checkpoint_that_translates(workdir):
    """Trained on numpy (hand-derived gradients), translated on the fastest backend."""
    train, dev = workdir / "train.tsv", workdir / "dev.tsv"
    write_parallel_tsv(train, DATA.train)
    write_parallel_tsv(dev, DATA.dev)
    out = workdir / "tsv" / "model.safetensors"
    done = xpseq("train", "--task", "tsv", "--train", train, "--dev", dev, "--out", out,
                 "--epochs", 1, "--embed", 4, "--hidden", 4, "--attention", "additive",
                 "--backend", "numpy", "--no-progress")
    assert_ok(done)
    assert done.stdout.startswith(f"saved {out}: 1 epoch")
    ckpt = load(out)
    assert (ckpt.metadata["task"], ckpt.metadata["tokens"]) == ("tsv", ["word", "word"])
    assert ckpt.metadata["options"]["attention"] == "additive"
    assert ckpt.config.attention == "additive" and ckpt.config.hidden == 4
    src_words = {w for s, _ in DATA.train for w in s}
    assert set(ckpt.vocabs["src"][4:]) == src_words
    assert ckpt.train_state is not None
    runs = xpseq_many({
        "translate": (["translate", out, SENTENCES[0]], None),
        # A TSV checkpoint has no toy test set to fall back on.
        "evaluate": (["evaluate", out, "--backend", "numpy"], None),
    })
    assert_ok(runs["translate"])
    assert len(runs["translate"].stdout.splitlines()) == 1
    assert_one_line_error(runs["evaluate"], "--test")


def test_train_errors_are_one_line(workdir):
    bad = workdir / "bad.tsv"
    bad.write_text("the cat\tpelu\nthe dog hanto\n", encoding="utf-8")
    good = workdir / "good.tsv"
    write_parallel_tsv(good, DATA.dev)
    blocker = workdir / "blocker"
    blocker.write_text("a file, not a folder\n")
    # One output each: runs on one --out at once are refused by its lock, whichever is first.
    outs = {key: workdir / f"{key}.st" for key in ("no_train", "malformed", "missing")}
    runs = xpseq_many({
        "no_train": (["train", "--task", "tsv", "--dev", good, "--out", outs["no_train"],
                      "--backend", "numpy"], None),
        "malformed": (["train", "--task", "tsv", "--train", good, "--dev", bad, "--out",
                       outs["malformed"], "--backend", "numpy"], None),
        "missing": (["train", "--task", "tsv", "--train", workdir / "absent.tsv", "--dev",
                     good, "--out", outs["missing"], "--backend", "numpy"], None),
        "unwritable": (["train", "--task", "tsv", "--train", good, "--dev", good, "--out",
                        blocker / "x.st", "--epochs", 1, "--embed", 4, "--hidden", 4,
                        "--backend", "numpy", "--no-progress"], None),
    })
    assert_one_line_error(runs["no_train"], "--train")
    assert_one_line_error(runs["malformed"], f"{bad}:2:")
    assert_one_line_error(runs["missing"], "absent.tsv")
    assert_fails_cleanly(runs["unwritable"], str(blocker / "x.st"))
    assert not any(out.exists() for out in outs.values())


# -------------------------------------------------------------- files that are wrong


def test_missing_and_corrupted_checkpoints_and_bad_tsv_are_one_line_errors(toy, workdir):
    corrupted = workdir / "random.safetensors"
    corrupted.write_bytes(os.urandom(4096))
    flipped = workdir / "flipped.safetensors"
    data = bytearray(toy.read_bytes())
    data[-50] ^= 0xFF                              # one byte of the last tensor
    flipped.write_bytes(bytes(data))
    bad = workdir / "bad-test.tsv"
    bad.write_text("the cat sees the dog\tpelu zo hanto sepra\n\nno tab on this line\n")
    missing = workdir / "absent.safetensors"
    runs = xpseq_many({
        "missing": (["translate", missing, "x"], None),
        "random": (["translate", corrupted, "x"], None),
        "flipped": (["heatmap", flipped, "the cat"], None),
        "evaluate_missing": (["evaluate", missing, "--backend", "numpy"], None),
        "bad_tsv": (["evaluate", toy, "--backend", "numpy", "--test", bad], None),
        "bad_backend": (["translate", "--backend", "cupy", toy, "x"], None),
    })
    assert_one_line_error(runs["missing"], str(missing))
    assert_one_line_error(runs["random"], str(corrupted))
    assert_one_line_error(runs["flipped"], str(flipped), "corrupted")
    assert_one_line_error(runs["evaluate_missing"], str(missing))
    assert_one_line_error(runs["bad_tsv"], f"{bad}:3:")
    assert_argument_error(runs["bad_backend"], "cupy")
    for key in ("missing", "random", "flipped", "bad_tsv"):
        assert runs[key].stdout == "", show(runs[key])


def test_train_translate_and_evaluate_a_transformer(workdir):
    model = workdir / "transformer.safetensors"
    done = xpseq("train", "--task", "toy", "--quick", "--model", "transformer", "--d-model", 16,
                 "--heads", 2, "--layers", 1, "--d-ff", 32, "--epochs", 1, "--warmup", 10,
                 "--max-tokens", 400, "--backend", "numpy", "--no-progress", "--out", model)
    assert_ok(done)
    assert "training on numpy" in done.stderr and "model transformer" in done.stderr
    loaded = load(model)
    assert loaded.model.kind == "transformer" and loaded.config.d_model == 16
    assert loaded.config.encoder_layers == loaded.config.decoder_layers == 1
    runs = xpseq_many({
        "translate": (["translate", model, SENTENCES[0], "--beam", 3], None),
        "evaluate": (["evaluate", model, "--backend", "numpy"], None),
        "foreign": (["train", "--task", "toy", "--model", "transformer", "--cell", "gru",
                     "--out", workdir / "x.safetensors"], None),
    })
    assert_ok(runs["translate"])
    assert len(runs["translate"].stdout.splitlines()) == 1
    assert_ok(runs["evaluate"])
    assert "transformer BLEU" in runs["evaluate"].stdout
    assert_one_line_error(runs["foreign"], "--cell: not an option of --model transformer")


@pytest.mark.slow  # training over two devices
@two_cpus()
def test_train_on_two_devices(workdir):
    """``--devices 2``: on torch two processes of a gloo group train (one prints and writes
    the checkpoint, which translates); numpy is refused with a one-line error."""
    model = workdir / "two.safetensors"
    runs = xpseq_many({
        "torch": (["train", "--task", "toy", "--quick", "--epochs", 1, "--embed", 8,
                   "--hidden", 8, "--backend", "torch", "--devices", 2, "--no-progress",
                   "--out", model], None),
        "numpy": (["train", "--task", "toy", "--quick", "--backend", "numpy", "--devices", 2,
                   "--out", workdir / "np.safetensors"], None),
    })
    assert_ok(runs["torch"])
    assert runs["torch"].stderr.count("training on torch") == 1
    assert runs["torch"].stdout.count("saved ") == 1
    assert load(model).train_state["step"] > 0
    assert_ok(xpseq("translate", model, SENTENCES[0]))
    assert_one_line_error(runs["numpy"], "--devices 2: data parallelism needs --backend jax "
                                         "or torch; numpy trains on one process")


def test_version_names_xpseq_and_the_array_libraries():
    from importlib import metadata

    done = xpseq("--version")
    assert_ok(done)
    line = done.stdout.strip()
    assert line.startswith(f"xpseq {metadata.version('xpseq')} (numpy "), line
    assert f"numpy {metadata.version('numpy')}" in line


def test_data_toy_export_writes_the_demo_pairs_as_tsv(tmp_path):
    """``data toy --export``: the quick toy task's pairs, as ``train --task tsv`` reads them
    (the same pairs as ``xpseq.tasks.toy_task`` makes)."""
    from xpseq.app.demo import QUICK
    from xpseq.tasks import toy_task

    done = xpseq("data", "toy", "--export", tmp_path / "toy", "--quick", "--seed", 3)
    assert_ok(done)
    task = toy_task(**QUICK["data"], seed=3)
    expected = {"train": task.train, "dev": task.dev,
                **{f"test-{b}": pairs for b, pairs in task.test.items()}}
    assert sorted(p.stem for p in (tmp_path / "toy").iterdir()) == sorted(expected)
    for name, pairs in expected.items():
        lines = (tmp_path / "toy" / f"{name}.tsv").read_text(encoding="utf-8").splitlines()
        assert [tuple(x.split() for x in line.split("\t")) for line in lines] == \
            [(list(s), list(t)) for s, t in pairs], name
        assert f"{tmp_path / 'toy' / name}.tsv: {len(pairs)} sentence pairs" in done.stdout
    done = xpseq("data", "toy", "--export", tmp_path / "x", "--stress")
    assert done.returncode == 1 and "--stress is an option of the g2p data" in done.stderr


def test_evaluate_task_toy_for_a_checkpoint_saved_from_python(tmp_path):
    """A toy model saved from Python records no data: evaluate says how to score it, and
    ``--task toy`` scores it on the demo's test sentences (300 per phrase count)."""
    from helpers import untrained_checkpoint

    path = untrained_checkpoint(tmp_path / "m.safetensors", n_train=200)
    done = xpseq("evaluate", path, "--backend", "numpy")
    assert done.returncode == 1 and "pass --task toy" in done.stderr, show(done)
    done = xpseq("evaluate", path, "--backend", "numpy", "--task", "toy")
    assert_ok(done)
    rows = [line for line in done.stdout.splitlines() if re.match(r"\| +\d +\|", line)]
    assert [int(r.split("|")[1]) for r in rows] == [0, 1, 2, 3, 4], show(done)
    assert all(int(r.split("|")[2]) == 300 for r in rows), show(done)


def test_train_config_file_and_exact_resume(tmp_path):
    """Options from a TOML file (the command line wins), stored in the checkpoint with the
    defaults filled in; ``--resume`` of a 1-epoch run with ``--epochs 3`` ends with the
    parameters of a straight 3-epoch run (float64, dropout on); what it may not change is
    refused, and so is a file with an unknown option."""
    from xpseq.train import checkpoint

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{a} {b} c\tc {b} {a}\n" for a in "abcd" for b in "xyz"),
                     encoding="utf-8")
    config = tmp_path / "run.toml"
    config.write_text(f'task = "tsv"\ntrain = "{pairs}"\ndev = "{pairs}"\nbackend = "numpy"\n'
                      'dtype = "float64"\nembed = 4\nhidden = 4\nbatch-size = 6\nepochs = 3\n'
                      "no_progress = true\n", encoding="utf-8")
    full, part, resumed = (tmp_path / f"{n}.ckpt" for n in ("full", "part", "resumed"))
    assert_ok(xpseq("train", "--config", config, "--out", full))
    assert_ok(xpseq("train", "--config", config, "--epochs", 1, "--out", part))
    stored = checkpoint.load(part).metadata["options"]
    assert (stored["embed"], stored["batch_size"], stored["epochs"]) == (4, 6, 1)
    assert stored["dropout"] == 0.1 and stored["task"] == "tsv"          # a default, filled
    done = xpseq("train", "--resume", part, "--epochs", 3, "--out", resumed)
    assert_ok(done)
    a, b = checkpoint.load(full), checkpoint.load(resumed)
    assert [h["epoch"] for h in b.train_state["history"]] == [1, 2, 3]
    for name, value in a.params.items():
        np.testing.assert_array_equal(b.params[name], value, err_msg=name)

    done = xpseq("train", "--resume", part, "--hidden", 8, "--out", resumed)
    assert done.returncode == 1 and "cannot change --hidden" in done.stderr, show(done)
    config.write_text('hiden = 4\n', encoding="utf-8")
    done = xpseq("train", "--config", config, "--out", full)
    assert done.returncode == 1 and "'hiden' is not an option of train" in done.stderr
    config.write_text('embed = -1\n', encoding="utf-8")
    done = xpseq("train", "--config", config, "--out", full)
    assert done.returncode == 2 and f"{config}: embed = -1: expected a positive" in \
        done.stderr, show(done)
