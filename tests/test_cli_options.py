"""The command's floor plan and its options, in process (no training): ``cli`` imports
``options`` and ``commands``, never the other way round; ``--config`` and ``--resume``
merge their options as defaults (the command line wins) through argparse's public API
only; the command's defaults are the model configs' and the one training-defaults table
that ``Translator.train`` and ``train_model`` read; on JAX the command (and only the
command) enables 64-bit types before its backend exists.
"""

from __future__ import annotations

import argparse
import ast
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
from helpers import two_cpus

from xpseq.app import cli, commands, demo
from xpseq.app.commands import train_options
from xpseq.models.rnn import Seq2SeqConfig
from xpseq.models.transformer import TransformerConfig
from xpseq.tasks import experiment, toy_task, translator
from xpseq.tasks.experiment import TRAINING_DEFAULTS

ROOT = pathlib.Path(__file__).resolve().parents[1]
APP = ROOT / "xpseq" / "app"


# ----------------------------------------------------------------- floor plan


def app_imports(source: str, package: str = "xpseq.app") -> set[str]:
    """The ``xpseq.app`` modules (a subpackage, such as ``commands``, counts as one) that the
    source of an app module in ``package`` imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                module = ".".join(base) + (f".{module}" if module else "")
            if module == "xpseq.app":
                found.update(f"xpseq.app.{a.name}" for a in node.names)
            elif module.startswith("xpseq.app."):
                found.add(module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("xpseq.app."))
    tops = {".".join(m.split(".")[:3]) for m in found}
    return {m for m in tops if (APP / f"{m.split('.')[2]}.py").exists()
            or (APP / m.split(".")[2]).is_dir()}


def app_graph() -> dict[str, set[str]]:
    """``xpseq.app`` module -> the app modules it imports; a subpackage's modules are one
    node (its imports of itself left out)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(APP.rglob("*.py")):
        parts = path.relative_to(APP).with_suffix("").parts
        node = f"xpseq.app.{parts[0]}"
        package = "xpseq.app" if len(parts) == 1 else f"xpseq.app.{parts[0]}"
        graph.setdefault(node, set()).update(app_imports(path.read_text(encoding="utf-8"),
                                                         package) - {node})
    return graph


def test_the_import_check_sees_lazy_and_relative_imports():
    source = ("import os\nfrom . import options as opts\nfrom xpseq.app import demo, plots\n"
              "def f():\n    from .cli import main\n    import xpseq.app.commands\n"
              "from xpseq.tasks import toy_task\n")
    assert app_imports(source) == {"xpseq.app.options", "xpseq.app.demo", "xpseq.app.plots",
                                   "xpseq.app.cli", "xpseq.app.commands"}


def test_the_app_modules_import_each_other_without_a_cycle():
    graph = app_graph()
    assert "xpseq.app.options" in graph["xpseq.app.commands"]
    assert "xpseq.app.options" in graph["xpseq.app.cli"]
    assert "xpseq.app.commands" in graph["xpseq.app.cli"]
    importers_of_cli = sorted(m for m, targets in graph.items() if "xpseq.app.cli" in targets)
    assert importers_of_cli == [], importers_of_cli
    # options knows nothing of what the commands do
    assert graph["xpseq.app.options"] & {"xpseq.app.commands", "xpseq.app.cli",
                                         "xpseq.app.demo"} == set()
    # no cycle at all (depth-first search over the graph)
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            assert state.get(target) != "open", " -> ".join(path + [target])
            if target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])


def test_importing_commands_does_not_import_the_cli():
    code = ("import sys, xpseq.app.commands, xpseq.app.options; "
            "print('xpseq.app.cli' in sys.modules, 'jax' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"], done.stdout


def private_names(source: str) -> list[str]:
    """Every private attribute (``x._y``, not ``self._y``) and private name imported from
    argparse in ``source``, as ``line: name``."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
            bad.append(f"{node.lineno}: .{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module == "argparse":
            bad += [f"{node.lineno}: {a.name}" for a in node.names if a.name.startswith("_")]
    return bad


def test_the_private_name_check_catches_argparse_internals():
    source = ("import argparse\nfrom argparse import _StoreTrueAction\n"
              "flags = {a.dest: a for a in parser._actions}\n"
              "isinstance(a, argparse._StoreTrueAction)\nself._cache = {}\nx.__dict__\n")
    assert sorted(private_names(source)) == ["2: _StoreTrueAction", "3: ._actions",
                                             "4: ._StoreTrueAction"]


def test_the_app_touches_no_private_name_of_another_object():
    """No ``parser._actions``, ``argparse._StoreTrueAction`` ...: only argparse's public
    API (and each class's own ``self._x``)."""
    bad = [f"{path.name}:{b}" for path in sorted(APP.glob("*.py"))
           for b in private_names(path.read_text(encoding="utf-8"))]
    assert not bad, bad


# ------------------------------------------------------ --config and --resume


@pytest.fixture
def recorded(monkeypatch) -> list[argparse.Namespace]:
    """``cli.main`` with a ``train`` that records its arguments instead of training."""
    runs: list[argparse.Namespace] = []
    monkeypatch.setattr(commands.train, "run", lambda args: runs.append(args) or 0)
    return runs


def test_config_file_options_are_defaults_and_the_command_line_wins(tmp_path, recorded):
    config = tmp_path / "run.toml"
    config.write_text('task = "tsv"\ntrain = "a.tsv"\ndev_file = "b.tsv"\nembed = 4\n'
                      'batch-size = 6\nepochs = 3\nattention = "dot"\nquick = true\n'
                      'dtype = "float64"\n', encoding="utf-8")
    out = str(tmp_path / "m.safetensors")
    assert cli.main(["train", "--config", str(config), "--epochs", "1", "--attention",
                     "additive", "--out", out]) == 0
    [args] = recorded
    # Relative data paths are read from the config file's folder.
    assert (args.task, args.train_file, args.dev_file) == (
        "tsv", str(tmp_path / "a.tsv"), str(tmp_path / "b.tsv"))
    assert (args.embed, args.batch_size, args.quick, args.dtype) == (4, 6, True, "float64")
    assert (args.epochs, args.attention, args.out) == (1, "additive", out)   # typed: win
    assert args.hidden is None and args.seed == 0                 # neither given: defaults
    assert args.invocation.argv == ("train", "--config", str(config), "--epochs", "1",
                                    "--attention", "additive", "--out", out)
    assert args.invocation.entry is cli.main


@pytest.mark.parametrize("text, code, says", [
    ("embed = -1\n", 2, "run.toml: embed = -1: expected a positive integer, got -1"),
    ('attention = "bogus"\n', 2, "run.toml: attention = 'bogus': invalid choice: 'bogus'"),
    ("lr = 100\n", 2, "run.toml: lr = 100: expected a number in [1e-12, 10]"),
    ("hiden = 4\n", 1, "'hiden' is not an option of train; known: "),
    ('out = "x.safetensors"\n', 1, "'out' is not an option of train"),
    ("quick = 1\n", 1, "quick is a flag, true or false; got 1"),
    ("embed = [4]\n", 1, "embed must be a number or a string"),
    ("embed = \n", 1, "not valid TOML"),
])
def test_config_file_values_are_checked_as_typed_ones(tmp_path, recorded, capsys, text,
                                                      code, says):
    config = tmp_path / "run.toml"
    config.write_text(text, encoding="utf-8")
    argv = ["train", "--config", str(config), "--out", str(tmp_path / "m.safetensors")]
    if code == 2:
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2
    else:
        assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and says in err, err
    assert recorded == []


def test_a_missing_config_file_is_a_one_line_error(tmp_path, recorded, capsys):
    missing = tmp_path / "absent.toml"
    assert cli.main(["train", "--config", str(missing), "--out", "m.safetensors"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("xpseq: error: ") and str(missing) in err and len(err.splitlines()) == 1


STORED = {"task": "tsv", "train_file": "a.tsv", "dev_file": "b.tsv", "embed": 4, "hidden": 4,
          "epochs": 1, "lr": 0.01, "dtype": "float64", "backend": "numpy", "quick": False,
          "devices": 1, "model": "rnn", "dropout": 0.1, "threads": None}


@pytest.fixture
def resumed(monkeypatch, recorded) -> list[argparse.Namespace]:
    """``train --resume CKPT`` whose checkpoint stored :data:`STORED` (``threads``, of an
    older version, is no run option: left out)."""
    import types

    from xpseq.train import checkpoint

    loaded = types.SimpleNamespace(metadata={"options": STORED}, opt_state={"step": 1})
    monkeypatch.setattr(checkpoint, "load", lambda path: loaded)
    return recorded


def test_resume_brings_the_stored_options_back(resumed):
    assert cli.main(["train", "--resume", "run.safetensors", "--epochs", "3",
                     "--backend", "torch"]) == 0
    [args] = resumed
    assert {k: getattr(args, k) for k in ("embed", "hidden", "lr", "dtype", "train_file")} \
        == {"embed": 4, "hidden": 4, "lr": 0.01, "dtype": "float64", "train_file": "a.tsv"}
    assert (args.epochs, args.backend) == (3, "torch")            # what may change, changed
    assert args.out == "run.safetensors" and args.resume == "run.safetensors"


@pytest.mark.parametrize("typed, refused", [
    (["--hidden", "8"], "--hidden"),
    (["--dtype", "float32"], "--dtype"),          # the parser's default, not the run's
    (["--quick", "--lr", "0.5"], "--lr, --quick"),
    (["--hidden", "4"], None),                    # the stored value: nothing changes
    pytest.param(["--no-progress", "--devices", "2", "--out", "b.safetensors"], None,
                 marks=two_cpus()),
    (["--compile", "--backend", "torch"], None),  # how this process runs, not the run
])
def test_resume_refuses_what_would_change_the_run(resumed, capsys, typed, refused):
    code = cli.main(["train", "--resume", "run.safetensors", *typed])
    err = capsys.readouterr().err
    if refused is None:
        assert code == 0 and len(resumed) == 1, err
        return
    assert code == 1 and resumed == []
    assert f"--resume continues the stored run; it cannot change {refused} (only --epochs, " \
           "--time-limit, --out, --backend, --precision, --compile, --devices, " \
           "--gradients, --no-progress)" in err, err


def test_config_and_resume_together_are_refused(tmp_path, resumed, capsys):
    config = tmp_path / "run.toml"
    config.write_text("embed = 4\n", encoding="utf-8")
    assert cli.main(["train", "--resume", "run.safetensors", "--config", str(config)]) == 1
    assert "give one" in capsys.readouterr().err


# ---------------------------------------------------------------- one source


def config_defaults(cls) -> dict:
    return {f: getattr(cls(src_vocab=5, tgt_vocab=5), f) for f in cls.__dataclass_fields__}


def test_the_model_defaults_are_the_configs_but_for_the_toy_tables():
    rnn, tf = config_defaults(Seq2SeqConfig), config_defaults(TransformerConfig)
    assert train_options.model_defaults("rnn") == {
        **{k: rnn[k] for k in ("attention", "style", "cell", "embed", "hidden", "dropout")},
        **train_options.TOY_MODEL_DEFAULTS["rnn"]}
    assert train_options.model_defaults("transformer") == {
        "d_model": tf["d_model"], "heads": tf["heads"], "layers": tf["encoder_layers"],
        "d_ff": tf["d_ff"], "norm": tf["norm"], "dropout": tf["dropout"],
        "label_smoothing": tf["label_smoothing"], "attention_path": tf["attention"],
        "attention_block": tf["attention_block"],
        **train_options.TOY_MODEL_DEFAULTS["transformer"]}
    assert train_options.TOY_MODEL_DEFAULTS == {"rnn": {"dropout": 0.1},
                                         "transformer": {"dropout": 0.1,
                                                         "label_smoothing": 0.1}}


def test_train_help_states_the_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for kind in ("rnn", "transformer"):
        values = train_options.kind_defaults(kind)
        for name in train_options.MODEL_OPTIONS[kind]:
            flag = "--" + name.replace("_", "-")
            pattern = rf"(?<!\[){flag} \S+ [^()]*\(default: {re.escape(str(values[name]))}\)"
            assert re.search(pattern, text), (flag, values[name], text)
        training = ", ".join(f"{n} {values[n]}" for n in train_options.TRAINING_OPTIONS[kind]
                             if values[n] is not None)
        assert f"{kind}: {training}" in text, (training, text)
    assert "epochs 5, lr 0.003, batch_size 64;" in text
    assert "epochs 8, lr 0.001, batch_size 64, warmup 400;" in text
    assert "--embed EMBED rnn: embedding size (default: 32)" in text


class Captured(Exception):
    """Raised by a stand-in for ``fit`` once it has seen what it was given."""


@pytest.fixture
def fitted(monkeypatch) -> list[dict]:
    """What training is asked to do, up to ``fit``: the model config, the TrainConfig and
    the training batch size, a dict per call of ``train_model`` (which then raises
    :class:`Captured`)."""
    calls: list[dict] = []
    real_batches = experiment.Task.batches

    def batches(self, pairs, batch_size, *args, **kwargs):
        if not calls or "config" in calls[-1]:          # the training batches
            calls.append({"batch_size": batch_size})
        return real_batches(self, pairs, batch_size, *args, **kwargs)

    def fit(config, params, train_batches, backend, *, train, **kwargs):
        calls[-1].update(config=config, train=train)
        raise Captured

    monkeypatch.setattr(experiment.Task, "batches", batches)
    monkeypatch.setattr(experiment, "fit", fit)
    return calls


def training(train) -> tuple:
    """What a TrainConfig trains with (its optimiser by name and hyperparameters)."""
    return (train.epochs, train.optimizer.name, train.optimizer.hyperparams, train.clip_norm,
            train.seed, train.progress)


TASK = toy_task(n_train=40, n_dev=8, n_test_per_bucket=1)


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_the_command_translator_and_train_model_train_alike(kind, tmp_path, monkeypatch,
                                                           fitted):
    """The same model and the same training from ``xpseq train --model KIND``,
    ``Translator.train(model=KIND)`` given the toy task's model options, and
    ``train_model`` with no TrainConfig: the configs' defaults and one table."""
    from xpseq import backends

    monkeypatch.setattr(commands.train, "toy_task_for", lambda spec: TASK)
    monkeypatch.setenv("XPSEQ_DEBUG", "1")                   # let Captured through
    with pytest.raises(Captured):
        cli.main(["train", "--quick", "--model", kind, "--backend", "numpy", "--out",
                  str(tmp_path / "m.safetensors"), "--no-progress"])
    with pytest.raises(Captured):
        translator.Translator.train(TASK, model=kind, backend="numpy", progress=False,
                                    **train_options.TOY_MODEL_DEFAULTS[kind])
    with pytest.raises(Captured):
        experiment.train_model(TASK, backends.get("numpy"), fitted[1]["config"])
    command, python, plain = fitted
    table = TRAINING_DEFAULTS[kind]
    assert command["config"] == python["config"]
    assert command["batch_size"] == python["batch_size"] == plain["batch_size"] \
        == table["batch_size"]
    assert training(command["train"]) == training(python["train"])
    assert training(plain["train"])[:4] == training(python["train"])[:4]
    assert command["train"].epochs == table["epochs"]
    lr = command["train"].optimizer.hyperparams["lr"]
    if table["warmup"]:
        from xpseq.train.schedules import warmup_inverse_sqrt

        assert lr == table["lr"] * warmup_inverse_sqrt(table["warmup"])
    else:
        assert lr == table["lr"]
    defaults = train_options.kind_defaults(kind)
    assert command["config"] == experiment.model_config(
        TASK, kind, **train_options.config_fields(kind, defaults))


def test_gradients_chooses_the_path_refused_where_it_cannot_be(tmp_path, monkeypatch,
                                                              fitted, capsys):
    """``train --gradients``: given to the TrainConfig (the backend's own when not given,
    named on the first line); autodiff on numpy and hand-derived with bfloat16 refused
    in one line before any data is read."""
    monkeypatch.setattr(commands.train, "toy_task_for", lambda spec: TASK)
    monkeypatch.setenv("XPSEQ_DEBUG", "1")                   # let Captured through
    out = str(tmp_path / "m.safetensors")
    for extra, backend, expected in (([], "numpy", None),
                                     (["--gradients", "hand-derived"], "torch", "hand-derived"),
                                     (["--gradients", "autodiff"], "torch", "autodiff")):
        if backend == "torch":
            pytest.importorskip("torch")
        with pytest.raises(Captured):
            cli.main(["train", "--quick", "--backend", backend, "--out", out, "--no-progress",
                      *extra])
        assert fitted[-1]["train"].gradients == expected
        shown = expected or "hand-derived"
        assert f"training on {backend} (float32, {shown} gradients)" in capsys.readouterr().err
    monkeypatch.delenv("XPSEQ_DEBUG")
    for extra in (["--backend", "numpy", "--gradients", "autodiff"],
                  ["--backend", "torch", "--precision", "bf16", "--gradients", "hand-derived"]):
        assert cli.main(["train", "--quick", "--out", out, *extra]) == 1
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"xpseq: error: --gradients {extra[-1]}: "), line


def test_the_demo_at_full_size_trains_the_commands_models(monkeypatch, tmp_path, fitted):
    """The demo's models at full size have the command's defaults (sizes, dropout, label
    smoothing) and the table's step sizes (and its warm-up for the Transformer)."""
    import types

    from xpseq import backends

    monkeypatch.setitem(demo.FULL, "data", {"n_train": 40, "n_dev": 8, "n_test_per_bucket": 1})
    real_fit = experiment.fit

    def fit(*args, **kwargs):                 # capture, and go on to the next model
        with pytest.raises(Captured):
            real_fit(*args, **kwargs)
        if len(fitted) == 3:
            raise Captured
        return types.SimpleNamespace(params={}, history=[])

    monkeypatch.setattr(experiment, "fit", fit)
    with pytest.raises(Captured):
        demo.run_demo(backends.get("numpy"), out=tmp_path, progress=False)
    attention, seq2seq, transformer = fitted
    task = toy_task(**demo.FULL["data"])
    for seen, kind in ((attention, "rnn"), (transformer, "transformer")):
        fields = train_options.config_fields(kind, train_options.kind_defaults(kind))
        assert seen["config"] == experiment.model_config(task, kind, **fields)
        assert seen["train"].optimizer.hyperparams == \
            experiment.training_config(kind).optimizer.hyperparams
    assert seq2seq["config"].attention == "none"


# ------------------------------------------------------------------- JAX x64

X64_CHILD = textwrap.dedent("""
    import json, jax
    from xpseq import backends
    from xpseq.app.commands import common
    seen = []
    real = backends.get
    backends.get = lambda name, *a, **k: seen.append((name, bool(jax.config.jax_enable_x64))) \\
        or real(name, *a, **k)
    before = bool(jax.config.jax_enable_x64)
    common.command_backend("numpy")
    after_numpy = bool(jax.config.jax_enable_x64)
    common.command_backend("jax")
    print(json.dumps({"before": before, "after_numpy": after_numpy, "seen": seen,
                      "after": bool(jax.config.jax_enable_x64)}))
""")


def test_the_command_enables_x64_before_it_creates_a_jax_backend():
    pytest.importorskip("jax")
    import json

    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    done = subprocess.run([sys.executable, "-c", X64_CHILD], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out == {"before": False, "after_numpy": False,
                   "seen": [["numpy", False], ["jax", True]], "after": True}, out


# ------------------------------------------------------------------- evaluate


def test_evaluate_help_gives_the_beam_one_default(capsys):
    """``--beam`` of ``evaluate`` serves BLEU (greedy unless given) and G2P (greedy and beam
    search, K = 5 unless given): its help says its default once, and the description
    states none of its own."""
    from xpseq.app.commands import evaluate

    with pytest.raises(SystemExit):
        cli.main(["evaluate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    description, options = text.split("positional arguments:")
    assert "by default" not in description and "default" not in description
    beam = options[options.index("--beam K"):options.index("--length-penalty {")]
    assert beam.count("default") == 1, beam
    assert f"K = {evaluate.G2P_BEAM})" in beam and "(default: greedy search;" in beam
    parser = cli.build().parser
    assert parser.parse_args(["evaluate", "m.safetensors"]).beam is None


def test_evaluate_shipped_names_the_model_it_scores(capsys):
    """``--shipped`` scores the stress-predicting model (with its digits dropped in two
    more columns, a note says what they are), ``--shipped --no-stress`` the stress-free
    model beside it; the first line names which, and ``--no-stress`` needs ``--shipped``."""
    from xpseq import g2p
    from xpseq.app.commands import evaluate

    manifest = g2p.shipped()
    name, files = evaluate.shipped_model(manifest, stress=False)
    assert files == manifest["no_stress"]["files"] == ["rnn.safetensors"]
    assert name == f"the shipped stress-free model ({manifest['no_stress']['model']})"
    name, files = evaluate.shipped_model(manifest, stress=True)
    assert files == manifest["files"] and name == f"the shipped model ({manifest['model']})"
    alone = {k: v for k, v in manifest.items() if k != "no_stress"}
    assert evaluate.shipped_model(dict(alone, stress=False), stress=False)[1] == alone["files"]
    with pytest.raises(ValueError, match="--shipped --no-stress"):
        evaluate.shipped_model(dict(alone, stress=False), stress=True)

    common = ["--limit", "3", "--beam", "1", "--backend", "numpy"]
    assert cli.main(["evaluate", "--shipped", "--no-stress", *common]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == (f"G2P, the shipped stress-free model ({manifest['no_stress']['model']}), "
                        "CMU dictionary with stress removed: 3 test words, decoded on numpy")
    assert [line.split("|")[1].strip() for line in lines[3:]] == ["greedy"]   # --beam 1
    assert "note" not in err
    assert cli.main(["evaluate", "--shipped", *common]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"G2P, the shipped model ({manifest['model']}), CMU dictionary "
                          "with stress kept: 3 test words")
    assert "xpseq evaluate --shipped --no-stress scores the stress-free model" in err
    with pytest.raises(SystemExit) as info:
        cli.main(["evaluate", "m.safetensors", "--no-stress"])
    assert info.value.code == 2
    assert "--no-stress selects the shipped stress-free G2P model: give it with --shipped" \
        in capsys.readouterr().err
