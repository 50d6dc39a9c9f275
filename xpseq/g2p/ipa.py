"""ARPAbet phones in the International Phonetic Alphabet (General American).

===========  =====  =============  ===========  =====  =============
ARPAbet      IPA    as in          ARPAbet      IPA    as in
===========  =====  =============  ===========  =====  =============
AA           ɑ      odd            B            b      be
AE           æ      at             CH           tʃ     cheese
AH (1, 2)    ʌ      hut            D            d      dee
AH0          ə      about          DH           ð      thee
AO           ɔ      ought          F            f      fee
AW           aʊ     cow            G            ɡ      green
AY           aɪ     hide           HH           h      he
EH           ɛ      Ed             JH           dʒ     gee
ER (1, 2)    ɝ      hurt           K            k      key
ER0          ɚ      butter         L            l      lee
EY           eɪ     ate            M            m      me
IH           ɪ      it             N            n      knee
IY           i      eat            NG           ŋ      ping
OW           oʊ     oat            P            p      pee
OY           ɔɪ     toy            R            ɹ      read
UH           ʊ      hood           S            s      sea
UW           u      two            SH           ʃ      she
                                   T            t      tea
                                   TH           θ      theta
                                   V            v      vee
                                   W            w      we
                                   Y            j      yield
                                   Z            z      zee
                                   ZH           ʒ      seizure
===========  =====  =============  ===========  =====  =============

Stress: a vowel with the digit 1 gets the primary stress mark ``ˈ``, with 2 the secondary
mark ``ˌ``, placed where IPA places it, at the start of the vowel's syllable: before the
longest run of the consonants ahead of the vowel that can begin an English word (the
maximal onset: ``AH0 B AW1 T`` is ``əˈbaʊt``, ``EH1 K S T R AH0`` is ``ˈɛkstɹə``).
Without stress digits (a model trained without them, or ``stress=False``) no mark is
written, and AH and ER are written ʌ and ɝ.

>>> from xpseq.g2p.ipa import to_ipa
>>> to_ipa(["HH", "AH0", "L", "OW1"])
'həˈloʊ'
>>> to_ipa(["IH0", "K", "S", "T", "R", "IY1", "M"])
'ɪkˈstɹim'
>>> to_ipa(["HH", "AH0", "L", "OW1"], stress=False)
'həloʊ'
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["IPA", "UNSTRESSED", "to_ipa", "text_to_ipa"]

#: Each ARPAbet phone (stress digit removed) in IPA; AH and ER unstressed (digit 0) are
#: ə and ɚ (:data:`UNSTRESSED`).
IPA = {
    "AA": "ɑ", "AE": "æ", "AH": "ʌ", "AO": "ɔ", "AW": "aʊ", "AY": "aɪ", "EH": "ɛ", "ER": "ɝ",
    "EY": "eɪ", "IH": "ɪ", "IY": "i", "OW": "oʊ", "OY": "ɔɪ", "UH": "ʊ", "UW": "u",
    "B": "b", "CH": "tʃ", "D": "d", "DH": "ð", "F": "f", "G": "ɡ", "HH": "h", "JH": "dʒ",
    "K": "k", "L": "l", "M": "m", "N": "n", "NG": "ŋ", "P": "p", "R": "ɹ", "S": "s",
    "SH": "ʃ", "T": "t", "TH": "θ", "V": "v", "W": "w", "Y": "j", "Z": "z", "ZH": "ʒ",
}
#: The reduced vowels: AH0 and ER0.
UNSTRESSED = {"AH": "ə", "ER": "ɚ"}
_VOWELS = frozenset(p for p in IPA if p[0] in "AEIOU")
_MARKS = {"1": "ˈ", "2": "ˌ"}
# The consonant clusters that begin English words (beyond any single consonant but NG):
# the onsets the stress mark may not split.
_ONSETS = frozenset(tuple(o.split()) for o in (
    "P R", "P L", "B R", "B L", "T R", "D R", "K R", "K L", "G R", "G L", "F R", "F L",
    "TH R", "SH R", "P Y", "B Y", "K Y", "G Y", "F Y", "V Y", "M Y", "HH Y", "T W", "D W",
    "K W", "G W", "TH W", "S W", "S P", "S T", "S K", "S M", "S N", "S L", "S F",
    "S P R", "S P L", "S T R", "S K R", "S K W", "S K Y", "S P Y", "S K L"))


def _split(phone: str) -> tuple[str, str]:
    """``phone`` as (its ARPAbet symbol, its stress digit or "")."""
    if not isinstance(phone, str):
        raise TypeError(f"to_ipa: each phone must be a str, got {type(phone).__name__}")
    base, digit = (phone[:-1], phone[-1]) if phone[-1:] in "012" and phone else (phone, "")
    if base not in IPA or (digit and base not in _VOWELS):
        raise ValueError(f"to_ipa: {phone!r} is not an ARPAbet phone (one of "
                         f"{', '.join(sorted(IPA))}, a vowel with a stress digit 0, 1 or 2)")
    return base, digit


def _onset(consonants: Sequence[str]) -> int:
    """How many of ``consonants`` (between two vowels) begin the second one's syllable."""
    for start in range(len(consonants)):
        run = tuple(consonants[start:])
        if (len(run) == 1 and run[0] != "NG") or run in _ONSETS:
            return len(run)
    return 0


def to_ipa(phones: Sequence[str], *, stress: bool = True) -> str:
    """The IPA transcription of one word's ARPAbet ``phones``.

    Parameters
    ----------
    phones : sequence of str
        ARPAbet phones, with or without stress digits (``["HH", "AH0", "L", "OW1"]``).
    stress : bool
        Write the stress marks ``ˈ`` and ``ˌ`` (False: none; the vowels keep the quality
        their digits give, ə for AH0).

    Returns
    -------
    str
        The transcription, one string (``"həˈloʊ"``); empty for no phones.

    Raises
    ------
    TypeError
        ``phones`` is one str or holds something that is not a str.
    ValueError
        A phone is not ARPAbet.
    """
    if isinstance(phones, str):
        raise TypeError("to_ipa: phones must be a sequence of phones (['HH', 'AH0', ...]), "
                        "not one str")
    parsed = [_split(p) for p in phones]
    marks: dict[int, str] = {}          # a stress mark before the phone at this position
    since = 0                           # where the consonants before this vowel start
    for i, (base, digit) in enumerate(parsed):
        if base not in _VOWELS:
            continue
        mark = _MARKS.get(digit, "") if stress else ""
        if mark:        # the word's first syllable takes all of its consonants
            cluster = [b for b, _ in parsed[since:i]]
            marks[i - (_onset(cluster) if since else len(cluster))] = mark
        since = i + 1
    return "".join(marks.get(i, "") + (UNSTRESSED[base] if digit == "0" and base in UNSTRESSED
                                       else IPA[base])
                   for i, (base, digit) in enumerate(parsed))


def text_to_ipa(tokens: Sequence[str], *, stress: bool = True) -> list[str]:
    """The tokens of :func:`xpseq.g2p.phonemize` (phones, ``" "`` between words,
    punctuation marks) with each word's phones made one IPA string (:func:`to_ipa`); the
    spaces and the punctuation kept.

    >>> text_to_ipa(["HH", "AH0", "L", "OW1", " ", ",", " ", "Y", "UW1"])
    ['həˈloʊ', ' ', ',', ' ', 'ˈju']
    """
    out: list[str] = []
    word: list[str] = []
    for token in [*tokens, " "]:
        if token.rstrip("012") in IPA:
            word.append(token)
            continue
        if word:
            out.append(to_ipa(word, stress=stress))
            word = []
        out.append(token)
    return out[:-1]
