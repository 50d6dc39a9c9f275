"""G2P scoring: edit distance against an independent definition and its metric axioms; phone
and word error rates on hand-computed cases; argument errors."""

from __future__ import annotations

import functools
import itertools
import random

import pytest

from xpseq.tasks.metrics import G2PScores, edit_distance, g2p_scores


def reference_distance(a, b) -> int:
    """Levenshtein distance by its recursive definition (memoised), written independently
    of the two-row programme: recursion on suffixes, not on prefixes."""
    a, b = tuple(a), tuple(b)

    @functools.lru_cache(maxsize=None)
    def d(i: int, j: int) -> int:
        if i == len(a):
            return len(b) - j
        if j == len(b):
            return len(a) - i
        if a[i] == b[j]:
            return d(i + 1, j + 1)
        return 1 + min(d(i + 1, j), d(i, j + 1), d(i + 1, j + 1))

    return d(0, 0)


def random_lists(rng: random.Random, n: int, alphabet: str = "abc", max_len: int = 7):
    return [[rng.choice(alphabet) for _ in range(rng.randint(0, max_len))] for _ in range(n)]


# ---------------------------------------------------------------------------- edit_distance

@pytest.mark.parametrize("a, b, expected", [
    ([], [], 0),
    (["K", "AE", "T"], ["K", "AE", "T"], 0),
    (["K", "AE", "T"], ["K", "AA", "T"], 1),                # one substitution
    (["K", "AE", "T"], ["K", "AE", "T", "S"], 1),           # one insertion
    (["K", "AE", "T", "S"], ["K", "AE", "T"], 1),           # one deletion
    ([], ["K", "AE", "T"], 3),                              # all insertions
    (["K", "AE", "T"], [], 3),                              # all deletions
    (["K", "AE", "T"], ["T", "AE", "K"], 2),                # two substitutions
    (["A", "B"], ["B", "A"], 2),                            # no transpositions in Levenshtein
    (list("kitten"), list("sitting"), 3),                   # the textbook example
    (list("flaw"), list("lawn"), 2),                        # delete f, insert n
    (["AH", "B"], ("AH", "B"), 0),                          # any sequence type
])
def test_edit_distance_hand_computed(a, b, expected):
    assert edit_distance(a, b) == expected


def test_edit_distance_matches_recursive_definition_on_random_lists():
    rng = random.Random(1234)
    pairs = list(zip(random_lists(rng, 300), random_lists(rng, 300)))
    pairs += list(zip(random_lists(rng, 100, "ab", 10), random_lists(rng, 100, "ab", 10)))
    for a, b in pairs:
        assert edit_distance(a, b) == reference_distance(a, b), (a, b)


def test_edit_distance_exhaustive_short_binary_strings():
    words = [list(w) for n in range(5) for w in itertools.product("ab", repeat=n)]
    for a in words:
        for b in words:
            assert edit_distance(a, b) == reference_distance(a, b)


def test_edit_distance_metric_axioms():
    rng = random.Random(7)
    lists = random_lists(rng, 40, "abcd", 6)
    for a in lists:
        assert edit_distance(a, a) == 0
        for b in lists:
            d = edit_distance(a, b)
            assert d == edit_distance(b, a)
            assert abs(len(a) - len(b)) <= d <= max(len(a), len(b))
            assert (d == 0) == (a == b)
    for a, b, c in itertools.combinations(lists[:20], 3):
        assert edit_distance(a, c) <= edit_distance(a, b) + edit_distance(b, c)


def test_edit_distance_leaves_its_inputs_alone():
    a, b = ["K", "AE", "T"], ["B", "AE", "T", "S"]
    edit_distance(a, b)
    assert a == ["K", "AE", "T"] and b == ["B", "AE", "T", "S"]


@pytest.mark.parametrize("a, b, name", [
    ("K AE T", ["K", "AE", "T"], "a"),
    (["K"], "K", "b"),
    (3, ["K"], "a"),
    (["K"], {"K"}, "b"),
])
def test_edit_distance_refuses_strings_and_non_sequences(a, b, name):
    with pytest.raises(TypeError, match=rf"edit_distance: {name}\b"):
        edit_distance(a, b)


# ------------------------------------------------------------------------------ g2p_scores

def test_scores_single_reference_substitution_insertion_deletion_empty():
    predictions = [["K", "AE", "T"],              # exact
                   ["K", "AA", "T"],              # 1 substitution
                   ["D", "AO", "G", "Z"],         # 1 insertion
                   ["F", "IH"],                   # 1 deletion (of SH)
                   []]                            # empty: 2 deletions
    references = [[["K", "AE", "T"]], [["K", "AE", "T"]], [["D", "AO", "G"]],
                  [["F", "IH", "SH"]], [["AY", "Z"]]]
    s = g2p_scores(predictions, references)
    assert isinstance(s, G2PScores)
    assert s.words == 5
    assert s.phone_errors == 0 + 1 + 1 + 1 + 2
    assert s.reference_phones == 3 + 3 + 3 + 3 + 2
    assert s.per == pytest.approx(100 * 5 / 14)
    assert s.wer == pytest.approx(100 * 4 / 5)


def test_scores_pick_the_closest_reference_not_the_first():
    # Distances: to ["T", "AH", "M", "EY", "T", "OW"] 2, to ["T", "AH", "M", "AA", "T", "OW"] 0.
    s = g2p_scores([["T", "AH", "M", "AA", "T", "OW"]],
                   [[["T", "AH", "M", "EY", "T", "OW"], ["T", "AH", "M", "AA", "T", "OW"]]])
    assert (s.phone_errors, s.reference_phones, s.per, s.wer) == (0, 6, 0.0, 0.0)

    # Second reference closer but not equal: ["EH", "K", "S"] vs ["IH", "K", "S", "IY"] is 2,
    # vs ["EH", "K", "S", "T"] is 1 -> errors 1 out of 4, and the word is wrong.
    s = g2p_scores([["EH", "K", "S"]], [[["IH", "K", "S", "IY"], ["EH", "K", "S", "T"]]])
    assert (s.phone_errors, s.reference_phones) == (1, 4)
    assert s.per == pytest.approx(25.0) and s.wer == 100.0


def test_scores_tie_takes_the_first_reference():
    # ["A"] is at distance 1 from both ["B"] (length 1) and ["A", "B"] (length 2).
    s = g2p_scores([["A"]], [[["B"], ["A", "B"]]])
    assert (s.phone_errors, s.reference_phones, s.per) == (1, 1, 100.0)
    s = g2p_scores([["A"]], [[["A", "B"], ["B"]]])
    assert (s.phone_errors, s.reference_phones, s.per) == (1, 2, 50.0)
    # Empty prediction: distance = length, so the shortest reference, first among equals.
    s = g2p_scores([[]], [[["A", "B", "C"], ["D", "E"], ["F", "G"]]])
    assert (s.phone_errors, s.reference_phones, s.per, s.wer) == (2, 2, 100.0, 100.0)


def test_wer_counts_a_match_with_any_reference():
    predictions = [["R", "IY", "D"], ["R", "EH", "D"], ["R", "AY", "D"]]
    refs = [["R", "IY", "D"], ["R", "EH", "D"]]                  # "read": two pronunciations
    s = g2p_scores(predictions, [refs, refs, refs])
    assert s.wer == pytest.approx(100 / 3)
    assert (s.phone_errors, s.reference_phones) == (1, 9)


def test_per_can_exceed_100_percent():
    s = g2p_scores([["A", "B", "C", "D"]], [[["X"]]])
    assert (s.phone_errors, s.reference_phones, s.per) == (4, 1, 400.0)


def test_scores_against_brute_force_on_random_data():
    rng = random.Random(99)
    predictions, references = [], []
    for _ in range(60):
        predictions.append(random_lists(rng, 1, "abc", 5)[0])
        references.append([r or ["a"] for r in random_lists(rng, rng.randint(1, 3), "abc", 5)])
    errors = lengths = wrong = 0
    for p, refs in zip(predictions, references):
        scored = [(reference_distance(p, r), j, len(r)) for j, r in enumerate(refs)]
        d, _, n = min(scored)                      # smallest distance, then smallest index
        errors, lengths = errors + d, lengths + n
        wrong += all(p != r for r in refs)
    s = g2p_scores(predictions, references)
    assert (s.words, s.phone_errors, s.reference_phones) == (60, errors, lengths)
    assert s.per == pytest.approx(100 * errors / lengths)
    assert s.wer == pytest.approx(100 * wrong / 60)


def test_scores_accept_tuples():
    s = g2p_scores((("K", "AE", "T"),), ((("K", "AE", "T"),),))
    assert s == G2PScores(0.0, 0.0, 1, 0, 3)


@pytest.mark.parametrize("predictions, references, error, pattern", [
    ([["A"]], [[["A"]], [["B"]]], ValueError, r"1 predictions but 2 references"),
    ([], [], ValueError, r"no words"),
    ([["A"], ["B"]], [[["A"]], []], ValueError, r"references\[1\] is empty"),
    ([["A"]], [[["A"], []]], ValueError, r"references\[0\]\[1\] is an empty"),
    ("A B", [[["A", "B"]]], TypeError, r"predictions must be a list"),
    ([["A"]], {0: [["A"]]}, TypeError, r"references must be a list"),
    (iter([["A"]]), [[["A"]]], TypeError, r"predictions must be a list"),
    (["A B"], [[["A", "B"]]], TypeError, r"predictions\[0\] is a string"),
    ([["A"]], ["A"], TypeError, r"references\[0\] must be a list"),
    ([["A"]], [["A B"]], TypeError, r"references\[0\]\[0\] is a string"),
    ([["A"]], [[None]], TypeError, r"references\[0\]\[0\] is NoneType"),
])
def test_scores_errors_name_the_argument(predictions, references, error, pattern):
    with pytest.raises(error, match=pattern):
        g2p_scores(predictions, references)
