"""The README's Python examples run as printed (the training one at smaller sizes) and
show what their comments say."""

from __future__ import annotations

import ast
import pathlib
import re

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def block(word: str) -> str:
    [found] = [b for b in BLOCKS if word in b]
    return found


def test_the_ten_lines_train_translate_save_and_load(tmp_path, monkeypatch, capsys):
    pytest.importorskip("jax")
    source = block("Translator.train")
    assert len(source.strip().splitlines()) <= 10
    small = source.replace("n_train=2000", "n_train=200").replace("epochs=3", "epochs=1")
    assert "n_train=200)" in small and "epochs=1," in small       # the sizes were found
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(small, "README.md", "exec"), names)
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2].startswith("['") and "'bleu'" in printed[-1]
    assert (tmp_path / "toy.safetensors").is_file()
    assert names["same"].backend.name == "jax"
    sentence = ["the old cat sees the dog near the house"]
    assert names["same"].translate(sentence) == names["model"].translate(sentence)


def test_the_attention_example_gives_the_padded_key_zero_weight():
    pytest.importorskip("torch")
    names: dict = {}
    exec(compile(block("scaled_dot_product_attention"), "README.md", "exec"), names)
    weights = names["be"].to_numpy(names["weights"])[0, 0]
    np.testing.assert_allclose(weights, [0.422319, 0.155362, 0.422319, 0.0], atol=1e-6)
    assert weights[3] == 0.0


def test_the_pronunciation_example_prints_what_its_comment_says():
    source = block("g2p.pronounce")
    call, comment = source.strip().splitlines()[-1].split("#")
    names: dict = {}
    exec(compile(source, "README.md", "exec"), names)
    assert eval(call, names) == ast.literal_eval(comment.strip())
