"""The scores of :meth:`xpseq.Translator.evaluate` (``xpseq.load(...).evaluate``): a
perfect evaluation is exactly 100 BLEU and exact match 1.0, not sacrebleu's
``100.00000000000004`` (its geometric mean taken as ``exp(mean(log(100 * c / t)))``).
"""

from __future__ import annotations

import pathlib
import warnings

import pytest

import xpseq

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "rnn_format1.safetensors"


@pytest.fixture(scope="module")
def perfect() -> dict:
    """A loaded model evaluated on its own translations: every sentence exactly right."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                    # (a format-1 fixture)
        model = xpseq.load(FIXTURE, backend="numpy")
    sources = ["the old cat sees the dog", "a dog sees the cat near the house"]
    return model.evaluate(list(zip(sources, model.translate(sources))))


def test_a_perfect_evaluation_is_an_exact_match_of_exactly_one(perfect):
    assert perfect["test"]["exact"] == 1.0 and perfect["test"]["sentences"] == 2


def test_a_perfect_evaluation_scores_exactly_100_bleu(perfect):
    assert perfect["test"]["bleu"] == 100.0
