"""Every failure of the installed ``xpseq`` command is one clean line.

A table of cases, each run as a subprocess of the installed command: bad argument values
(exit 2, refused by the parser before anything is created on disk), and every other
failure (exit 1): unusable files, damaged or inconsistent checkpoints, outputs that would
destroy a file the run did not make, unusable config files, standard input that is closed
or not UTF-8, a full disk. Each must print exactly one line on stderr and
no traceback. Output cut short by its reader ends quietly with 141.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
from helpers import rewrite_metadata

from xpseq.train import checkpoint as ckpt

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "rnn_format1.safetensors"
ROOT = pathlib.Path(__file__).resolve().parents[1]


def command() -> list[str]:
    """The installed console script (beside this Python), else ``python -m xpseq``."""
    script = pathlib.Path(sys.executable).parent / "xpseq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "xpseq"]


@dataclasses.dataclass
class Case:
    args: list
    code: int
    says: str                          # a fragment of the one line on stderr
    stdin: str | bytes | None = ""     # None: standard input closed
    stdout: str | None = None          # a file to send stdout to (e.g. /dev/full)


VARIANTS = ("good", "no_config", "meta_list", "meta_string", "short_vocab", "twice_word",
            "unknown_data", "huge_data", "no_vocabs", "nan", "flipped", "truncated",
            "overflow")


def build(folder: pathlib.Path) -> None:
    """The files the cases use: damaged and inconsistent variants of the fixture
    checkpoint (saved again, so in today's format), and small TSV corpora."""
    with warnings.catch_warnings():         # format 1, deliberately: saved again below
        warnings.simplefilter("ignore", ckpt.UnprotectedMetadataWarning)
        good = ckpt.load(FIXTURE)
    fields = dict(config=good.config, params=good.params, opt_state=good.opt_state,
                  vocabs=good.vocabs, train_state=good.train_state, metadata=good.metadata)
    made = {"good": ckpt.save(folder / "good.safetensors", **fields)}

    def variant(name: str, change) -> None:
        path = folder / f"{name}.safetensors"
        shutil.copy(made["good"], path)
        rewrite_metadata(path, change)
        made[name] = path

    variant("no_config", lambda m: m.__delitem__("config"))
    variant("meta_list", lambda m: [m])
    variant("meta_string", lambda m: "xpseq")
    variant("short_vocab", lambda m: m["vocabs"].update(tgt=m["vocabs"]["tgt"][:-3]))
    variant("twice_word", lambda m: m["vocabs"]["src"].__setitem__(5, m["vocabs"]["src"][6]))
    variant("unknown_data", lambda m: m["metadata"].update(data={"n_train": 5, "colour": 1}))
    variant("huge_data", lambda m: m["metadata"]["data"].update(n_test_per_bucket=10**8))
    variant("no_vocabs", lambda m: m.update(vocabs=None))
    os.mkfifo(folder / "fifo.safetensors")                   # never opened: it would block
    (folder / "loop.safetensors").symlink_to(folder / "loop.safetensors")
    nan = {k: v.copy() for k, v in good.params.items()}
    nan["out.W"][0, 0] = np.nan
    made["nan"] = ckpt.save(folder / "nan.safetensors", **dict(fields, params=nan),
                            allow_nonfinite=True)
    huge = {k: v.copy() for k, v in good.params.items()}
    huge["out.W"][:] = 3e38                       # finite, but its products overflow
    made["overflow"] = ckpt.save(folder / "overflow.safetensors", **dict(fields, params=huge))
    flipped = folder / "flipped.safetensors"
    data = bytearray(made["good"].read_bytes())
    at = data.index(b"0.", data.index(b"dropout")) + 2    # the config's dropout 0.1 -> 0.3
    data[at] = ord("3") if data[at] != ord("3") else ord("4")
    flipped.write_bytes(bytes(data))
    made["flipped"] = flipped
    truncated = folder / "truncated.safetensors"
    truncated.write_bytes(made["good"].read_bytes()[:-100])
    assert set(made) | {"truncated"} == set(VARIANTS)
    (folder / "empty.tsv").write_text("")
    (folder / "one.tsv").write_text("a b\tc d\n")
    (folder / "notab.tsv").write_text("a b c d\n")
    (folder / "latin1.tsv").write_bytes("caf\xe9\tx\n".encode("latin-1"))
    (folder / "a_folder").mkdir()
    # what train must never write over
    os.mkfifo(folder / "fifo")
    (folder / "notes.txt").write_text("my notes\n")
    (folder / "link.tsv").symlink_to(folder / "one.tsv")
    (folder / "lone.metrics.csv").write_text("my notes\n")
    (folder / "run.toml").write_text('task = "tsv"\ntrain = "one.tsv"\ndev = "one.tsv"\n')
    (folder / "a_folder.toml").mkdir()
    (folder / "latin1.toml").write_bytes(b"epochs = 1\n# caf\xe9\n")
    (folder / "table.toml").write_text("[train]\nepochs = 1\n")
    (folder / "dropout.toml").write_text("dropout = -inf\n")
    (folder / "huge.toml").write_text("model = \"transformer\"\nlayers = 100000000\n")
    (folder / "exported").mkdir()
    (folder / "exported" / "train.tsv").write_text("my notes\n")


#: Files the cases refuse to write over, with their content (the FIFO stays a FIFO).
UNTOUCHED = {"notes.txt": "my notes\n", "one.tsv": "a b\tc d\n",
             "lone.metrics.csv": "my notes\n", "exported/train.tsv": "my notes\n"}


def cases(folder: pathlib.Path) -> dict[str, Case]:
    """The table: every case by name (the files are :func:`build`'s)."""
    c = {name: folder / f"{name}.safetensors" for name in VARIANTS}
    out = folder / "never" / "m.safetensors"
    train = ["train", "--out", out, "--backend", "numpy"]
    def tsv(name: str) -> list:                    # one --out each: runs at once lock theirs
        return ["train", "--task", "tsv", "--out", folder / f"{name}.safetensors",
                "--backend", "numpy"]

    good, words = c["good"], "the cat sees the dog"
    one = folder / "one.tsv"

    def on_one(out: pathlib.Path, *more) -> list:      # a TSV run of one.tsv writing out
        return ["train", "--task", "tsv", "--train", one, "--dev", one, "--out", out,
                "--backend", "numpy", "--epochs", "1", "--no-progress", *more]

    def config(name: str) -> list:
        return ["train", "--config", folder / name, "--out", folder / "c.safetensors"]
    return {
        # argument values: refused by the parser (exit 2), nothing created on disk
        "lr nan": Case([*train, "--lr", "nan"], 2, "argument --lr: expected a number"),
        "lr negative": Case([*train, "--lr", "-1"], 2, "argument --lr"),
        "lr huge": Case([*train, "--lr", "1e39"], 2, "argument --lr"),
        "lr text": Case([*train, "--lr", "fast"], 2, "argument --lr: expected a number"),
        "resume a format-1 file": Case(["train", "--resume", FIXTURE], 1,
                                       "not a checkpoint of xpseq train that can be continued"),
        "devices beyond the CPUs": Case([*train, "--devices", "100000"], 2,
                                        "argument --devices: expected at most"),
        "layers 1e8": Case([*train, "--model", "transformer", "--layers", "100000000"], 2,
                           "argument --layers: expected at most 1024"),
        "hidden 1e6": Case([*train, "--hidden", "1000000"], 2,
                           "argument --hidden: expected at most 65536"),
        "layers 1e8 in a file": Case(config("huge.toml"), 2,
                                     "huge.toml: layers = 100000000: expected at most 1024"),
        "too big for memory": Case(["train", "--out", folder / "big.safetensors", "--backend",
                                    "numpy", "--model", "transformer", "--d-model", "65536",
                                    "--d-ff", "65536", "--layers", "64"], 1,
                                   "GiB of memory are available; choose smaller sizes"),
        "dropout 1.5": Case([*train, "--dropout", "1.5"], 2, "argument --dropout"),
        "dropout -inf": Case([*train, "--dropout", "-inf"], 2,
                             "argument --dropout: expected a number in [0, 1), got -inf"),
        "lr -1e-3": Case([*train, "--lr", "-1e-3"], 2,
                         "argument --lr: expected a number in [1e-12, 10], got -1e-3"),
        "seed -1": Case([*train, "--seed", "-1"], 2, "argument --seed"),
        "epochs 0": Case([*train, "--epochs", "0"], 2, "argument --epochs"),
        "hidden 1.5": Case([*train, "--hidden", "1.5"], 2, "argument --hidden"),
        "alpha nan": Case(["translate", good, "--beam", "3", "--length-penalty", "gnmt",
                           "--alpha", "nan", words], 2, "argument --alpha"),
        "beam 0": Case(["translate", good, "--beam", "0", words], 2, "argument --beam"),
        "beam huge": Case(["translate", good, "--beam", "10000", words], 2,
                          "argument --beam: expected at most 64 (memory grows with the beam)"),
        "n-best huge": Case(["g2p", "--beam", "64", "--n-best", "65", "hello"], 2,
                            "argument --n-best: expected at most 64"),
        "n-best > beam": Case(["translate", good, "--beam", "2", "--n-best", "3", words], 2,
                              "--n-best (3) cannot exceed --beam (2)"),
        "unknown option": Case(["translate", good, "--colour", words], 2,
                               "unrecognized arguments"),
        "data seed": Case(["data", "g2p", "--export", folder / "x", "--seed", "x"], 2,
                          "argument --seed"),
        "compile on numpy": Case([*train, "--compile"], 2, "--compile applies to --backend "
                                 "torch (torch.compile), not --backend numpy"),
        "compile on jax": Case(["translate", good, "--backend", "jax", "--compile", words], 2,
                               "--compile applies to --backend torch (torch.compile), not "
                               "--backend jax: JAX always compiles with jax.jit"),
        "compile g2p strict": Case(["g2p", "--backend", "array_api_strict", "--compile",
                                    "hello"], 2, "not --backend array_api_strict"),
        # files
        "tsv is a folder": Case([*tsv("t1"), "--train", folder / "a_folder", "--dev",
                                 folder / "one.tsv"], 1, "is a folder, not a TSV file"),
        "tsv missing": Case([*tsv("t2"), "--train", folder / "nope.tsv", "--dev",
                             folder / "one.tsv"], 1, "nope.tsv"),
        "empty train tsv": Case([*tsv("t3"), "--train", folder / "empty.tsv", "--dev",
                                 folder / "one.tsv"], 1, "no sentence pairs"),
        "empty dev tsv": Case([*tsv("t4"), "--train", folder / "one.tsv", "--dev",
                               folder / "empty.tsv"], 1, "no sentence pairs"),
        "tsv without tab": Case([*tsv("t5"), "--train", folder / "notab.tsv", "--dev",
                                 folder / "one.tsv"], 1, "expected source<TAB>target"),
        "tsv not utf-8": Case([*tsv("t6"), "--train", folder / "latin1.tsv", "--dev",
                               folder / "one.tsv"], 1, "not valid UTF-8"),
        "tsv needs files": Case(["train", "--task", "tsv", "--out", folder / "t.safetensors"],
                                1, "--task tsv needs --train FILE and --dev FILE"),
        "evaluate two on a tsv": Case(["evaluate", good, good, "--test", folder / "one.tsv"],
                                      1, "several checkpoints are scored as one G2P "
                                      "ensemble on the CMU dictionary's test split, which "
                                      "takes no --test; to compare models on a test set, "
                                      "evaluate each in its own call: xpseq evaluate "),
        "evaluate shipped on a tsv": Case(["evaluate", "--shipped", "--test",
                                           folder / "one.tsv"], 1,
                                          "--shipped scores the shipped G2P model on the CMU "
                                          "dictionary's test split, which takes no --test"),
        "evaluate tsv folder": Case(["evaluate", good, "--test", folder / "a_folder",
                                     "--backend", "numpy"], 1, "is a folder"),
        # outputs that train must not write over (UNTOUCHED), and its other files
        "out a FIFO": Case(on_one(folder / "fifo"), 1, "is a FIFO (named pipe); train "
                           "writes a regular file there"),
        "out a folder": Case(on_one(folder / "a_folder"), 1, "it is a folder"),
        "out an unrelated file": Case(on_one(folder / "notes.txt"), 1, "notes.txt exists and "
                                      "is not an xpseq checkpoint; choose a new path, or "
                                      "pass --force"),
        "out the corpus": Case(on_one(one), 1, "is the run's --train file"),
        "out a link to the corpus": Case(on_one(folder / "link.tsv"), 1,
                                         "is the run's --train file"),
        "out the config": Case(["train", "--config", folder / "run.toml", "--out",
                                folder / "run.toml"], 1, "is the run's --config file"),
        "metrics log unrelated": Case(on_one(folder / "lone.safetensors"), 1,
                                      "lone.metrics.csv exists and is not a metrics log"),
        "data change without resume": Case(on_one(folder / "x.safetensors",
                                                  "--allow-data-change"), 1,
                                           "--allow-data-change is an option of --resume"),
        "resume missing": Case(["train", "--resume", folder / "nope.safetensors"], 1,
                               "nope.safetensors: no such checkpoint"),
        "config missing": Case(config("absent.toml"), 1, "absent.toml: no such file"),
        "config a folder": Case(config("a_folder.toml"), 1, "a_folder.toml is a folder, not a file"),
        "config not utf-8": Case(config("latin1.toml"), 1, "latin1.toml: not UTF-8 (line 2"),
        "config table": Case(config("table.toml"), 1, "table.toml: [train] is a table; "
                             "options are top-level keys"),
        "config value": Case(config("dropout.toml"), 2, "dropout.toml: dropout = -inf: "
                             "expected a number in [0, 1)"),
        "export over a file": Case(["data", "toy", "--quick", "--export", folder / "exported"],
                                   1, "exported/train.tsv exists; choose another --export "
                                   "folder, or pass --force"),
        "heatmap too long": Case(["heatmap", good, " ".join(["the"] * 101)], 1,
                                 "the sentence has 101 words; a heatmap draws at most 100"),
        # checkpoints
        "checkpoint missing": Case(["translate", folder / "nope.safetensors", words], 1,
                                   "does not exist"),
        "checkpoint a folder": Case(["translate", folder, words], 1, "is a folder"),
        "checkpoint a FIFO": Case(["translate", folder / "fifo.safetensors", words], 1,
                                  "fifo.safetensors is a FIFO (named pipe), not a checkpoint"),
        "checkpoint a link loop": Case(["translate", folder / "loop.safetensors", words], 1,
                                       "loop.safetensors is a symbolic link loop"),
        "checkpoint truncated": Case(["translate", c["truncated"], words], 1,
                                     "not a readable checkpoint"),
        "one byte flipped": Case(["translate", c["flipped"], words], 1,
                                 "do not match their digest"),
        "no config": Case(["translate", c["no_config"], words], 1, "has no config"),
        "metadata a list": Case(["translate", c["meta_list"], words], 1,
                                "must be a JSON object, got list"),
        "metadata a string": Case(["translate", c["meta_string"], words], 1,
                                  "must be a JSON object, got str"),
        "vocabulary too short": Case(["translate", c["short_vocab"], words], 1,
                                     "vocabulary 'tgt' has"),
        "word twice": Case(["translate", c["twice_word"], words], 1, "twice"),
        "no vocabularies": Case(["translate", c["no_vocabs"], words], 1,
                                "holds no vocabularies"),
        "weights overflow": Case(["translate", c["overflow"], words], 1,
                                 "the model's scores are not finite"),
        "weights overflow on torch": Case(["translate", c["overflow"], words, "--backend",
                                           "torch", "--n-best", "2", "--beam", "2"], 1,
                                          "the model's scores are not finite"),
        "weights overflow, heatmap": Case(["heatmap", c["overflow"], words], 1,
                                          "the model's scores are not finite"),
        "unknown data keys": Case(["evaluate", c["unknown_data"], "--backend", "numpy"], 1,
                                  "unknown entries ['colour']"),
        "huge data sizes": Case(["evaluate", c["huge_data"], "--backend", "numpy"], 1,
                                "n_test_per_bucket = 100000000"),
        "bf16 on numpy, translate": Case(["translate", good, words, "--backend", "numpy",
                                          "--precision", "bf16"], 1,
                                         "needs an array library with a bfloat16 dtype"),
        "bf16 on numpy, train": Case(on_one(folder / "bf16.safetensors", "--precision", "bf16"),
                                     1, "numpy has none"),
        "nan weights heatmap": Case(["heatmap", c["nan"], words], 1, "non-finite"),
        "nan weights translate": Case(["translate", c["nan"], words], 1, "non-finite"),
        "not a g2p model": Case(["evaluate", good, "--task", "g2p", "--backend", "numpy"], 1,
                                "was not trained with --task g2p"),
        # standard input and output
        "stdin closed": Case(["translate", good], 1, "standard input is closed", stdin=None),
        "stdin not utf-8": Case(["translate", good], 1, "standard input is not UTF-8",
                                stdin=b"the \xff cat\n"),
        "disk full": Case(["translate", good, words], 1, "No space left on device",
                          stdout="/dev/full"),
    }


def run(case: Case) -> subprocess.Popen:
    env = dict(os.environ, LC_ALL="C.UTF-8", PYTHONIOENCODING="", XPSEQ_DEBUG="")
    argv = [*command(), *map(str, case.args)]
    if case.stdin is None:                          # the shell's <&-: no fd 0 at all
        argv = ["sh", "-c", 'exec "$0" "$@" <&-', *argv]
    if not case.stdout:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=ROOT, env=env)
    with open(case.stdout, "w") as stdout:          # the child keeps its own descriptor
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=stdout,
                                stderr=subprocess.PIPE, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("cli_errors")
    build(folder)
    return folder


@pytest.fixture(scope="module")
def outcomes(folder) -> dict[str, tuple[Case, int, str]]:
    table, results = cases(folder), {}
    names = list(table)
    for start in range(0, len(names), 6):          # a few at a time: each imports xpseq
        procs = {name: run(table[name]) for name in names[start:start + 6]}
        for name, proc in procs.items():
            data = table[name].stdin
            data = data.encode() if isinstance(data, str) else (data or b"")
            out, err = proc.communicate(data, timeout=180)
            results[name] = (table[name], proc.returncode, err.decode("utf-8", "replace"))
    assert not (folder / "never").exists()          # no argument error created a folder
    return results


@pytest.mark.parametrize("name", list(cases(pathlib.Path("unused"))))
def test_each_failure_is_one_clean_line(outcomes, name):
    case, code, err = outcomes[name]
    lines = err.strip().splitlines()
    assert code == case.code, (name, code, err)
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    prefix = "xpseq: error: " if code == 1 else "xpseq "
    assert lines[0].startswith(prefix) and "error:" in lines[0], lines[0]
    assert case.says in lines[0], (case.says, lines[0])


def test_refused_outputs_are_left_as_they_were(outcomes, folder):
    for name, text in UNTOUCHED.items():
        assert (folder / name).read_text() == text, name
    assert (folder / "fifo").is_fifo() and (folder / "link.tsv").is_symlink()
    assert not list(folder.glob("*.safetensors.lock")) and not list(folder.glob(".*.lock"))


def test_output_cut_short_ends_quietly():
    proc = subprocess.Popen([*command(), "translate", str(FIXTURE)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdin.write(b"the cat sees the dog\n" * 5000)
    proc.stdin.close()
    first = proc.stdout.readline()
    proc.stdout.close()                             # the reader goes away, as | head -1
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=180) == 141 and first.strip(), err
    # Nothing but the one note that the fixture, of format 1, has unprotected metadata.
    [note] = err.splitlines()
    assert note.startswith(f"xpseq: note: {FIXTURE} is a format-1 checkpoint: its metadata "
                           "(configuration, vocabularies, training state) is not covered"), err


def test_debug_shows_the_traceback():
    env = dict(os.environ, XPSEQ_DEBUG="")
    base = [*command(), "translate", str(ROOT / "nope.safetensors"), "x"]
    quiet = subprocess.run(base, capture_output=True, text=True, env=env, timeout=180)
    loud = subprocess.run([base[0], "--debug", *base[1:]] if len(command()) == 1 else
                          [*command()[:2], "--debug", *base[2:]],
                          capture_output=True, text=True, env=env, timeout=180)
    assert quiet.returncode == 1 and "Traceback" not in quiet.stderr
    assert loud.returncode != 0 and "Traceback" in loud.stderr


def test_threads_beyond_the_cpus_are_one_clean_line(tmp_path):
    done = subprocess.run([*command(), "--threads", "32768", "g2p", "hello"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("xpseq: error: argument --threads: expected at most ")
    assert "(the CPUs this process may use), got 32768" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_omp_num_threads_beyond_the_cpus_is_one_clean_line(tmp_path):
    # The thread count xpseq takes from the environment is bounded like --threads.
    env = dict(os.environ, OMP_NUM_THREADS="32768", XPSEQ_DEBUG="")
    done = subprocess.run([*command(), "g2p", "hello"], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("xpseq: error: set_threads: OMP_NUM_THREADS=32768 "
                                          "asks for 32768 threads, but this process may use")
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [
    ["translate", "--backend", "torch", "missing.safetensors", "a"],
    ["evaluate", "--backend", "jax", "missing.safetensors"],
    ["heatmap", "--backend", "torch", "missing.safetensors", "a"],
    ["g2p", "--backend", "torch", "--model", "missing.safetensors", "a"],
    ["evaluate", "--backend", "torch", "missing.safetensors", "other.safetensors"],
])
def test_a_missing_checkpoint_is_named_before_any_array_library_is_imported(argv, tmp_path):
    """Importing PyTorch alone takes seconds: the error about a file that is not there
    comes first."""
    import subprocess
    import sys

    code = ("import sys; from xpseq.app import cli; code = cli.main(sys.argv[1:]); "
            "print(code, [m for m in ('torch', 'jax') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "1 []", (done.stdout, done.stderr)
    assert "checkpoint missing.safetensors does not exist" in done.stderr
