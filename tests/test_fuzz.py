"""Hostile inputs, drawn by hypothesis: the command and the public functions answer with a
documented result or a documented error, never a traceback, in bounded time and memory,
and nothing outside the run's folder (or made by someone else inside it) is touched.

Slow tier (``make test-slow``, which ``.ci/run`` runs). The number of examples per test
is ``XPSEQ_FUZZ_EXAMPLES`` (default 12 for a command, 10x that for a library function);
raise it for a longer search. Hypothesis keeps what it found in ``.hypothesis/``, which
git ignores.
"""

from __future__ import annotations

import os
import pathlib
import resource
import shutil
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("XPSEQ_FUZZ_EXAMPLES", "12"))
FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "transformer_format2.safetensors"
COMMAND = settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
                   suppress_health_check=[HealthCheck.function_scoped_fixture,
                                          HealthCheck.too_slow])
LIBRARY = settings(max_examples=10 * EXAMPLES, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow,
                                          HealthCheck.function_scoped_fixture])

#: Alphabets a careless or hostile user reaches: controls, bidi overrides, private use,
#: surrogate-escaped bytes, other scripts, digits and the tokenizer's separators.
HOSTILE = st.one_of(
    st.characters(codec="utf-8", exclude_categories=("Cs",)),
    st.sampled_from(list("\x00\x07\x1b\x7f\x85\x9b\u202e\u2066\ue000\ufeff\u0301"
                         "1-./:@$%,'\"\\\t\r\n <>|&*?[]{}")),
)
TEXT = st.text(HOSTILE, max_size=200) | st.builds(
    lambda piece, n: piece * n, st.text(HOSTILE, min_size=1, max_size=6),
    st.integers(1, 3000))
ARGUMENT = TEXT.filter(lambda s: "\x00" not in s)      # the kernel refuses NUL in argv
PATHLIKE = st.sampled_from(["", ".", "..", "/", "/dev/null", "/dev/zero", "M.safetensors",
                            "notes.txt", "sub/", "missing/x.png", "fifo", "-", "--force"])


def run_command(folder: pathlib.Path, argv: list[str], stdin: bytes = b"") -> tuple[
        int, str, str, float, int]:
    """``xpseq ARGV`` in ``folder``: exit code, stdout, stderr, seconds and peak memory
    (kB, the child's maximum resident set)."""
    script = pathlib.Path(sys.executable).parent / "xpseq"
    env = dict(os.environ, HOME=str(folder), XPSEQ_DEBUG="0", JAX_PLATFORMS="cpu")
    start = time.perf_counter()
    proc = subprocess.Popen([str(script), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=folder, env=env)
    try:
        out, err = proc.communicate(stdin, timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"xpseq {argv!r} ran over 240 s")
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (proc.returncode, out.decode("utf-8", "backslashreplace"),
            err.decode("utf-8", "backslashreplace"), seconds, peak)


def snapshot(folder: pathlib.Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``folder``: ``(inode, size, mtime_ns)``."""
    out = {}
    for path in folder.rglob("*"):
        info = path.lstat()
        out[str(path.relative_to(folder))] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> pathlib.Path:
    """A folder with what a user has: a checkpoint, a notes file, a TSV, a FIFO."""
    folder = tmp_path_factory.mktemp("fuzz")
    shutil.copy(FIXTURE, folder / "M.safetensors")
    (folder / "notes.txt").write_text("the user's notes\n")
    (folder / "pairs.tsv").write_text("the cat\tzo pelu\n")
    os.mkfifo(folder / "fifo")
    return folder


def check_run(world: pathlib.Path, argv: list[str], stdin: bytes = b"") -> None:
    """Run the command in ``world`` and hold it to the properties; then remove what it
    made, so that every run starts from the user's files alone."""
    users = {k: v for k, v in snapshot(world).items() if not k.startswith(".cache")}
    code, out, err, seconds, peak = run_command(world, argv, stdin)
    args = [a if len(a) < 60 else f"{a[:40]!r}... ({len(a)} characters)" for a in argv]
    shown = f"xpseq {args} (stdin {stdin[:80]!r}) -> {code}\n{err[-2000:]}"
    after = snapshot(world)
    try:
        assert code in (0, 1, 2), shown
        assert "Traceback" not in err, shown
        assert len(err.splitlines()) <= 25, shown
        assert seconds < 240 and peak < 6 * 2**20, shown      # kB: under 6 GB
        changed = [k for k, v in users.items() if after.get(k) != v]
        assert not changed, f"{shown}\nchanged: {changed}"   # nothing of the user's
        partial = [k for k in after if ".xpseq-" in k]
        assert not partial, f"{shown}\nleft: {partial}"      # no temporary left behind
    finally:
        for name in sorted(set(after) - set(users), key=len):    # what it made, removed
            path = world / name
            if name.startswith(".cache") or not (path.exists() or path.is_symlink()):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


@COMMAND
@given(words=st.lists(ARGUMENT, max_size=4), stdin=st.binary(max_size=3000) | TEXT.map(
    lambda s: s.encode("utf-8", "surrogatepass")), text=st.booleans())
def test_g2p_takes_any_words_and_any_stdin(world, words, stdin, text):
    check_run(world, ["g2p", "--backend", "numpy", *(["--text"] if text else []), "--",
                      *words], stdin if not words else b"")


@COMMAND
@given(sentence=ARGUMENT, png=PATHLIKE | st.just("out.png"), beam=st.sampled_from(
    ["1", "3", "0", "-1", "x", "99999"]))
def test_translate_and_heatmap_take_any_sentence_and_output(world, sentence, png, beam):
    check_run(world, ["translate", "M.safetensors", "--backend", "numpy", "--beam", beam,
                      "--", sentence])
    check_run(world, ["heatmap", "M.safetensors", "--backend", "numpy", "--png", png, "--",
                      sentence])


@COMMAND
@given(config=st.binary(max_size=4000) | TEXT.map(lambda s: s.encode("utf-8", "ignore")),
       export=PATHLIKE | st.just("out-data"), force=st.booleans())
def test_train_config_and_data_export_take_any_file_and_folder(world, config, export, force):
    (world / "out-config.toml").write_bytes(config)
    check_run(world, ["train", "--config", "out-config.toml", "--epochs", "1", "--quick",
                      "--backend", "numpy", "--out", "out-model.safetensors"])
    check_run(world, ["data", "toy", "--quick", "--export", export,
                      *(["--force"] if force else [])])


@COMMAND
@given(test=TEXT, options=st.lists(st.sampled_from(
    ["--beam", "2", "--test", "pairs.tsv", "--onnx", "out-x", "--shipped", "M.safetensors",
     "notes.txt", "fifo", "/dev/zero", "--dtype", "float64", "--force"]), max_size=5))
def test_evaluate_and_export_take_any_test_file_and_options(world, test, options):
    (world / "out-test.tsv").write_text(test, encoding="utf-8", errors="surrogatepass")
    check_run(world, ["evaluate", "M.safetensors", "--backend", "numpy", "--test",
                      "out-test.tsv"])
    check_run(world, ["export", *options])


# ------------------------------------------------------------------ the library

#: What the public functions document raising for a bad argument.
DOCUMENTED = (ValueError, TypeError, FileNotFoundError)


@pytest.fixture(scope="module")
def g2p_model():
    from xpseq import g2p

    return g2p.load(backend="numpy")


@pytest.fixture(scope="module")
def translator():
    import xpseq

    return xpseq.load(FIXTURE, backend="numpy")


@LIBRARY
@given(text=TEXT)
def test_normalize_and_phonemize_answer_any_text(g2p_model, text):
    from xpseq.g2p.text import normalize

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokens = normalize(text)
        assert all(isinstance(t, str) and t and not any(
            c in t for c in "\x00\x1b\x07\u202e\ue000") for t in tokens), tokens
        phones = g2p_model.phonemize(text[:300])
    assert all(isinstance(p, str) for p in phones)


@LIBRARY
@given(words=st.lists(TEXT | st.integers() | st.none(), max_size=5),
       lookup=st.sampled_from([True, False, "no", None, 1]),
       beam=st.sampled_from([1, 2, 0, -3, 2.5, "3"]))
def test_pronounce_answers_or_raises_a_documented_error(g2p_model, words, lookup, beam):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            answers = g2p_model.pronounce(words, lookup=lookup, beam=beam)
        except DOCUMENTED:
            return
    assert len(answers) == len(words) and all(isinstance(p, list) for p in answers)


@LIBRARY
@given(sentences=st.lists(TEXT.map(lambda s: s[:400]) | st.lists(TEXT, max_size=3),
                          max_size=4) | TEXT | st.integers())
def test_translate_answers_or_raises_a_documented_error(translator, sentences):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = translator.translate(sentences)
        except DOCUMENTED:
            return
    assert len(out) == len(sentences)
    for source, target in zip(sentences, out):
        if (source.split() if isinstance(source, str) else source) == []:
            assert target == ""


#: The option surface of ``Translator.train``: its own settings and both kinds' fields.
TRAIN_OPTIONS = ("epochs", "lr", "batch_size", "warmup", "dtype", "seed", "progress",
                 "hidden", "embed", "cell", "attention", "style", "input_feeding", "dropout",
                 "label_smoothing", "d_model", "heads", "d_ff", "norm", "positions",
                 "activation", "share_embeddings", "tie_output", "max_len",
                 "attention_block", "encoder_layers")
OPTION_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 12), st.floats(allow_nan=True),
    st.sampled_from([np.int64(4), np.int32(2), np.bool_(True), np.float32(0.5), np.float64(1e-3),
                     "float64", "float16", np.float64, "gru", "dot", "bahdanau", "post",
                     "learned", "gelu", "blockwise", "plain", "no", "", [4], 2**40, 0.5]),
    st.text(max_size=3))


@LIBRARY
@given(model=st.sampled_from(["rnn", "transformer"]),
       options=st.dictionaries(st.sampled_from(TRAIN_OPTIONS), OPTION_VALUE, max_size=3))
def test_train_takes_an_option_by_name_or_trains_saves_and_loads_equal(model, options,
                                                                      tmp_path_factory):
    """Any options to ``Translator.train``: refused at once by name (a TypeError or
    ValueError naming one of them), or the model trains, saves and loads back equal."""
    import xpseq

    task = xpseq.toy_task(n_train=16, n_dev=4, n_test_per_bucket=1)
    small = ({"hidden": 4, "embed": 4} if model == "rnn" else
             {"d_model": 8, "heads": 2, "d_ff": 8, "encoder_layers": 1, "decoder_layers": 1})
    given_ = {"epochs": 1, "progress": False, **small, **options}
    start = time.perf_counter()
    try:
        trained = xpseq.Translator.train(task, model=model, backend="numpy", **given_)
    except (TypeError, ValueError) as error:
        assert any(name in str(error) for name in options), (options, error)
        assert time.perf_counter() - start < 5, "refused only after work"
        return
    path = trained.save(tmp_path_factory.mktemp("train") / "m.safetensors")
    again = xpseq.load(path, backend="numpy")
    assert again.config == trained.config
    assert again.translate(["the cat"]) == trained.translate(["the cat"])


@LIBRARY
@given(path=st.one_of(PATHLIKE, st.none(), st.integers(), st.binary(max_size=8),
                      st.lists(PATHLIKE, max_size=3)))
def test_load_and_load_decoder_raise_documented_errors(path):
    import xpseq
    from xpseq.train.checkpoint import CheckpointError

    for fn in (xpseq.load, xpseq.load_decoder):
        try:
            made = fn(path, backend="numpy")
        except DOCUMENTED + (CheckpointError,):
            continue
        # None of the drawn paths is a model (M.safetensors is not in the test's folder):
        # nothing may be returned for them.
        raise AssertionError(f"{fn.__name__}({path!r}) returned {made!r}")


ARRAY = st.builds(lambda shape, seed, scale: np.random.default_rng(seed).normal(
    size=shape) * scale, st.lists(st.integers(0, 4), min_size=1, max_size=4).map(tuple),
    st.integers(0, 2**16), st.sampled_from([1.0, 1e300, 1e-300, 0.0]))


@LIBRARY
@given(scores=ARRAY, lens=st.one_of(st.none(), st.lists(st.integers(-2, 6), max_size=4)),
       empty=st.sampled_from(["error", "zero", "nan", None]))
def test_masked_softmax_and_attention_answer_or_raise_a_documented_error(scores, lens, empty):
    from xpseq.core import masked_softmax, scaled_dot_product_attention

    valid = None if lens is None else np.asarray(lens)
    with np.errstate(all="ignore"):            # overflow is refused below, not warned of
        try:
            out = masked_softmax(scores, valid, empty=empty)
        except DOCUMENTED:
            out = None
        if out is not None:
            assert out.shape == scores.shape and not np.isnan(out).any()
        try:
            context, weights = scaled_dot_product_attention(scores, scores, scores,
                                                            valid_lens=valid)
        except DOCUMENTED:
            return
    assert not np.isnan(weights).any() and not np.isnan(context).any()


@LIBRARY
@given(a=st.recursive(st.none() | st.integers(), lambda c: st.lists(c, max_size=3)
                      | st.dictionaries(st.sampled_from("abc"), c, max_size=3), max_leaves=8),
       b=st.recursive(st.none() | st.integers(), lambda c: st.lists(c, max_size=3)
                      | st.dictionaries(st.sampled_from("abc"), c, max_size=3), max_leaves=8))
def test_tree_helpers_pair_by_key_or_raise_value_error(a, b):
    from xpseq.core.tree import flatten, map_leaves, unflatten

    leaves, treedef = flatten(a)
    assert unflatten(treedef, leaves) == a
    class Pair:                                 # a leaf, not a container
        def __init__(self, x, y):
            self.x, self.y = x, y

    try:
        both = map_leaves(Pair, a, b)
    except ValueError as err:
        assert "map_leaves: the trees differ" in str(err)
        return
    assert map_leaves(lambda pair: pair.x, both) == a
    assert map_leaves(lambda pair: pair.y, both) == b


#: Subcommands that a drawn argv must not name: a valid draw would train for minutes.
LONG = {"demo", "train"}


@COMMAND
@given(argv=st.lists(ARGUMENT | st.sampled_from(
    ["--lesson", "3", "0", "99", "--list", "--code", "--backend", "jax", "--seed", "-1",
     "--threads", "0", "--version", "-h", "translate", "g2p"]), max_size=4).filter(
        lambda a: not LONG & set(a)),
    first=st.sampled_from(["tour", "--version", "--threads", "nosuch", ""]))
def test_any_argv_is_answered_or_refused_in_a_line(world, first, argv):
    check_run(world, [first, *argv] if first else argv or ["--version"])
