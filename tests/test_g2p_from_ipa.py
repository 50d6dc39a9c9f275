"""IPA back to ARPAbet (:func:`xpseq.g2p.ipa.from_ipa`): words transcribed by hand, the
spellings and marks of plain-text IPA, round trips through :func:`to_ipa` over the CMU
dictionary, the errors, and the transcriptions of Google's Wikipedia Homograph Data
against the dictionary pronunciations they were paired with."""

from __future__ import annotations

import csv
import doctest
import pathlib

import pytest

from xpseq.g2p import ipa as ipa_module
from xpseq.g2p.ipa import from_ipa, to_ipa

WORDIDS = pathlib.Path("/work/shared/external/wikipedia_homograph/wordids.tsv")


@pytest.mark.parametrize("ipa, expected", [
    ("'hæpi", "HH AE1 P IY0"),                        # happy
    ("həˈloʊ", "HH AH0 L OW1"),                       # hello
    ("əˈbaʊt", "AH0 B AW1 T"),                        # about
    ("ˈkɔɪn", "K OY1 N"),                             # coin
    ("ˈaɪ", "AY1"),                                   # eye
    ("ˈoʊk", "OW1 K"),                                # oak
    ("ˈbeɪbi", "B EY1 B IY0"),                        # baby
    ("ˈbɝd", "B ER1 D"),                              # bird
    ("ˈsɪŋɚ", "S IH1 NG ER0"),                        # singer
    ("ðə", "DH AH0"),                                 # the: no mark, every vowel 0
    ("ˈθɪŋk", "TH IH1 NG K"),                         # think
    ("ˈmɛʒɚ", "M EH1 ZH ER0"),                        # measure
    ("ˈjɛloʊ", "Y EH1 L OW0"),                        # yellow
    ("ˈwʊd", "W UH1 D"),                              # wood
    ("ˈkɑt", "K AA1 T"),                              # cot
    ("ˈkɔt", "K AO1 T"),                              # caught
    ("ˈʃu", "SH UW1"),                                # shoe
    ("ˌɪnfɚˈmeɪʃən", "IH2 N F ER0 M EY1 SH AH0 N"),   # information
    ("ɪkˈstɹim", "IH0 K S T R IY1 M"),                # extreme
    ("ˈtʃɛɹi", "CH EH1 R IY0"),                       # cherry
    ("ˈdʒʌdʒ", "JH AH1 JH"),                          # judge
])
def test_words_transcribed_by_hand(ipa, expected):
    assert from_ipa(ipa) == expected.split()


@pytest.mark.parametrize("ipa, expected", [
    # the data's plain-text spellings: ' for ˈ, length marks, r, g, ligatures
    ("'æbˌstɹækt", "AE1 B S T R AE2 K T"),            # abstract (noun)
    ("ə'bjuːs", "AH0 B Y UW1 S"),                     # abuse (noun)
    ("'lɛd", "L EH1 D"),                              # lead (the metal)
    ("də'zɚt", "D AH0 Z ER1 T"),                      # desert (verb)
    ("'ʧɛri", "CH EH1 R IY0"),                        # ʧ, r
    ("'ʤʌʤ", "JH AH1 JH"),                            # ʤ
    ("'goʊ", "G OW1"),                                # g for ɡ
    ("ˈt͡ʃɛɹi", "CH EH1 R IY0"),                       # a tie bar
    ("ˈbɜ˞d", "B ER1 D"),                             # ɝ written ɜ˞
    ("ˈsɪŋə˞", "S IH1 NG ER0"),                       # ɚ written ə˞
    ("ə.ˈbaʊt", "AH0 B AW1 T"),                       # a syllable dot
    ("ˌɔɹːnə'mɛnt", "AO2 R N AH0 M EH1 N T"),         # a length mark after a consonant
    ("ə'bjuː1səz", "AH0 B Y UW1 S AH0 Z"),            # a stray digit
    # the mark before the onset, inside it, or after the previous coda: the next vowel
    ("ə'ntɹæns", "AH0 N T R AE1 N S"),
    ("pəɡ'mɛnt", "P AH0 G M EH1 N T"),
    ("ˌɛkˌspoʊ'zeɪ", "EH2 K S P OW2 Z EY1"),
    # the digit comes from the marks, not from the vowel's quality
    ("'pɚmət", "P ER1 M AH0 T"),                      # ɚ stressed is ER1
    ("ˈə", "AH1"),                                    # ə stressed is AH1
    ("ʌpˈsɛt", "AH0 P S EH1 T"),                      # ʌ unstressed is AH0
    ("ˈkɔɹtˌʃɪp", "K AO1 R T SH IH2 P"),              # a mark keeps t and ʃ apart
    ("ˈkɔɹt.ʃɪp", "K AO1 R T SH IH0 P"),              # and so does a dot
    ("", ""),
])
def test_plain_text_spellings_and_marks(ipa, expected):
    assert from_ipa(ipa) == expected.split()


def _round_trip_sample() -> list[tuple[str, tuple[str, ...]]]:
    """Every 300th word of the dictionary (about 420 words) with all its pronunciations."""
    from xpseq.g2p.lexicon import Lexicon

    entries = Lexicon().entries(True)
    return [(word, tuple(p)) for word in sorted(entries)[::300] for p in entries[word]]


def _alike(phones: tuple[str, ...]) -> bool:
    """Whether ``phones`` hold a pair that to_ipa writes as one sound (AO IH as ɔɪ, T SH
    as tʃ, D ZH as dʒ); the round trip cannot tell those apart."""
    bases = [p.rstrip("012") for p in phones]
    return any(pair in (("AO", "IH"), ("T", "SH"), ("D", "ZH"))
               for pair in zip(bases, bases[1:]))


def test_round_trips_through_to_ipa_over_the_dictionary():
    sample = _round_trip_sample()
    assert len(sample) > 400
    checked = 0
    for word, phones in sample:
        if _alike(phones):
            continue
        assert from_ipa(to_ipa(phones)) == list(phones), word
        checked += 1
    assert checked > 400


def test_round_trips_without_stress_marks_give_every_vowel_0():
    for word, phones in _round_trip_sample()[:100]:
        if _alike(phones):
            continue
        expected = [p[:-1] + "0" if p[-1] in "12" else p for p in phones]
        # AH and ER lose their reduced forms without stress: ʌ and ɝ, read back as 0
        assert from_ipa(to_ipa(phones, stress=False)) == expected, word


def test_sounds_to_ipa_writes_alike_come_back_as_one():
    assert from_ipa(to_ipa(["D", "R", "AO1", "IH0", "NG"])) == ["D", "R", "OY1", "NG"]
    assert from_ipa(to_ipa(["N", "AY1", "T", "SH", "EY2", "D"])) == \
        ["N", "AY1", "T", "SH", "EY2", "D"]     # nightshade: the mark keeps them apart


@pytest.mark.parametrize("ipa, symbol", [
    ("ˈbɑx", "'x'"),                     # a sound English lacks
    ("ˈbʌɾɚ", "'ɾ'"),                    # a flap: T or D?
    ("ˈbæt ˈmæn", "' '"),                # two words
    ("ˈhɛlo", "'o'"),                    # o alone is no General American vowel
])
def test_a_symbol_with_no_arpabet_equivalent_is_named(ipa, symbol):
    with pytest.raises(ValueError, match=f"from_ipa: .*{symbol}.*no ARPAbet equivalent"):
        from_ipa(ipa)


def test_misplaced_stress_marks_and_wrong_types_are_errors():
    with pytest.raises(ValueError, match="two stress marks"):
        from_ipa("ˈˌhæt")
    with pytest.raises(ValueError, match="no vowel after it"):
        from_ipa("hæt'")
    with pytest.raises(TypeError, match="from_ipa: ipa must be a str"):
        from_ipa(["h", "æ"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="from_ipa: ipa must be a str"):
        from_ipa(b"hat")  # type: ignore[arg-type]


def test_the_module_examples_run():
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = {t.name.rpartition(".")[2]: t for t in finder.find(ipa_module)}
    assert tests["from_ipa"].examples
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests.values():
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0


def _reduced_alike(got: list[str], want: tuple[str, ...]) -> bool:
    """The same phones but for stress digits and for reduced vowels: the data writes ə
    (AH0) for every reduced vowel where the dictionary may write IH0, EH0 or IH2."""
    return len(got) == len(want) and all(
        a.rstrip("012") == b.rstrip("012") or (a == "AH0" and b[-1] in "02")
        for a, b in zip(got, want))


def _primary(phones: list[str] | tuple[str, ...]) -> list[int]:
    vowels = [p for p in phones if p[-1] in "012"]
    return [i for i, p in enumerate(vowels) if p.endswith("1")]


@pytest.mark.skipif(not WORDIDS.is_file(), reason="the Wikipedia Homograph Data is absent")
def test_the_homograph_data_matches_the_dictionary_senses():
    from xpseq.g2p.senses import table

    with open(WORDIDS, encoding="utf-8", newline="") as f:
        ipa = {row["wordid"]: row["pronunciation"] for row in csv.DictReader(f, delimiter="\t")}
    converted = {wordid: from_ipa(text) for wordid, text in ipa.items()}   # all convert
    assert converted["house_nou"] == ["HH", "AW1", "S"]
    assert converted["house_vrb"] == ["HH", "AW1", "Z"]
    assert converted["mouth_vrb"] == ["M", "AW1", "DH"]
    assert converted["entrance_vrb"] == ["AH0", "N", "T", "R", "AE1", "N", "S"]
    from xpseq.g2p.lexicon import Lexicon

    prons = Lexicon().entries(True)          # the senses the dictionary has, not from_ipa's
    rows = [(converted[wordid], phones) for word, senses in table().items()
            for wordid, phones in senses.items() if phones in prons.get(word, [])]
    assert len(rows) > 200
    same = sum(_reduced_alike(got, want) for got, want in rows)
    stressed_alike = sum(_primary(got) == _primary(want) for got, want in rows)
    assert same >= 0.9 * len(rows)
    assert stressed_alike >= 0.95 * len(rows)
