"""The front door in Python: ``xpseq.toy_task`` → ``xpseq.Translator.train`` →
``translate`` / ``evaluate`` / ``save`` → ``xpseq.load``, against the functions underneath
(``xpseq.tasks.translate``, ``score``) and the command line (a saved model translates the
same through ``xpseq translate``)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import xpseq
from xpseq.tasks import score, translate

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trained():
    task = xpseq.toy_task(n_train=300, n_dev=20, n_test_per_bucket=4)
    model = xpseq.Translator.train(task, backend="numpy", epochs=2, embed=8, hidden=8,
                                   batch_size=32, progress=False)
    return task, model


def test_train_translate_and_evaluate(trained):
    task, model = trained
    assert [h["epoch"] for h in model.history] == [1, 2]
    assert model.backend.name == "numpy" and model.config.hidden == 8
    sources = [s for s, _ in task.test[2]]
    got = model.translate([" ".join(s) for s in sources])
    expected = translate(model.decoder, sources)
    assert got == [" ".join(r["tokens"]) for r in expected]
    five = model.translate([" ".join(s) for s in sources], beam=3, n_best=2)
    assert all(len(h) == 2 for h in five)
    table = model.evaluate()
    assert sorted(table) == [0, 1, 2, 3, 4] and table[2]["sentences"] == 4
    assert table[2]["bleu"] == pytest.approx(score([g.split() for g in got],
                                                   task.test[2])["bleu"])
    own = model.evaluate([(" ".join(s), " ".join(t)) for s, t in task.test[2]])
    assert own["test"]["bleu"] == pytest.approx(table[2]["bleu"])


def test_save_load_and_the_command_read_the_same_model(trained, tmp_path):
    task, model = trained
    path = model.save(tmp_path / "toy.safetensors")
    again = xpseq.load(path, backend="numpy")
    for name, value in model.params.items():
        np.testing.assert_array_equal(again.params[name], value)
    assert [h["epoch"] for h in again.history] == [1, 2]
    sentence = " ".join(task.test[1][0][0])
    done = subprocess.run([sys.executable, "-m", "xpseq", "translate", str(path), sentence,
                           "--backend", "numpy"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == again.translate([sentence])[0] == model.translate(
        [sentence])[0]


def test_front_door_errors(trained):
    task, model = trained
    with pytest.raises(ValueError, match=r"model must be one of \['rnn', 'transformer'\], got 'lstm'"):
        xpseq.Translator.train(task, model="lstm")
    with pytest.raises(TypeError, match="not one str"):
        model.translate("the cat")
    with pytest.raises(ValueError, match="n_best \\(3\\) must be at most beam \\(2\\)"):
        model.translate(["the cat"], beam=2, n_best=3)
    with pytest.raises(AttributeError, match="no attribute 'trainn'"):
        xpseq.trainn


def test_a_mistyped_model_option_names_the_closest():
    import xpseq

    task = xpseq.toy_task(n_train=20, n_dev=5, n_test_per_bucket=2)
    with pytest.raises(TypeError, match=r"Seq2SeqConfig has no option 'hiden'; did you mean "
                                        r"'hidden'\?"):
        xpseq.Translator.train(task, backend="numpy", progress=False, hiden=8)
    with pytest.raises(TypeError, match=r"TransformerConfig has no option 'zzz' \(its "
                                        r"options: d_model, heads"):
        xpseq.Translator.train(task, model="transformer", backend="numpy", progress=False,
                               zzz=1)


def test_the_package_presents_its_public_api_and_subpackages_lazily():
    """``dir(xpseq)`` lists the public API only (no ``Any``, ``TYPE_CHECKING``), and every
    subpackage is an attribute after ``import xpseq``, imported when first used."""
    import subprocess
    import sys

    import xpseq

    names = dir(xpseq)
    assert {"Translator", "load", "load_decoder", "toy_task", "task_from_pairs", "g2p",
            "backends", "core", "__version__"} <= set(names)
    assert not [n for n in names if n in ("Any", "TYPE_CHECKING") or
                (n.startswith("_") and n != "__version__")]
    code = ("import sys, xpseq; light = 'xpseq.g2p' not in sys.modules; "
            "print(light, xpseq.g2p.pronounce(['cat'], backend='numpy'), "
            "xpseq.tasks.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split("\n")[0] == "True [['K', 'AE1', 'T']] xpseq.tasks", done.stderr
    with pytest.raises(AttributeError, match="module 'xpseq' has no attribute 'nothing'"):
        xpseq.nothing


def test_task_from_pairs_checks_its_pairs():
    import xpseq

    with pytest.raises(ValueError, match="task_from_pairs: train is empty"):
        xpseq.task_from_pairs([], [], {})
    with pytest.raises(TypeError, match=r"task_from_pairs: train\[1\] must be a \(source, "
                       r"target\) pair of token lists"):
        xpseq.task_from_pairs([(["a"], ["b"]), ("a", "b")], [], {})
    with pytest.raises(TypeError, match=r"test must be a dict"):
        xpseq.task_from_pairs([(["a"], ["b"])], [], [(["a"], ["b"])])
    task = xpseq.task_from_pairs([(["a", "b"], ["x"])], [], {"test": [(["a"], ["x"])]})
    assert task.src_vocab.to_list()[-2:] == ["a", "b"]
