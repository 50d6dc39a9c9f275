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

:func:`from_ipa` goes the other way, from one word's IPA to ARPAbet phones with a stress
digit on every vowel:

>>> from xpseq.g2p.ipa import from_ipa
>>> from_ipa("həˈloʊ")
['HH', 'AH0', 'L', 'OW1']
"""

from __future__ import annotations

import unicodedata
from typing import Sequence

__all__ = ["IPA", "UNSTRESSED", "to_ipa", "text_to_ipa", "from_ipa"]

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


# from_ipa: the inverse of IPA and UNSTRESSED (IPA string -> ARPAbet symbol), matched
# longest first, after other spellings of the same sounds are rewritten to the table's.
_ARPABET = {ipa: base for table in (IPA, UNSTRESSED) for base, ipa in table.items()}
_LONGEST = sorted(_ARPABET, key=len, reverse=True)
_SPELLINGS = {
    "ʤ": "dʒ", "ʧ": "tʃ", "g": "ɡ", "r": "ɹ", "ɜ˞": "ɝ", "ə˞": "ɚ", "ɝ˞": "ɝ", "ɚ˞": "ɚ",
}
# Stress marks (the apostrophe as plain-text IPA writes the primary one) and their digits.
_DIGITS = {"ˈ": "1", "'": "1", "ˌ": "2"}
# Tie bars over or under two letters (t͡ʃ), dropped first so that the letters meet.
_TIES = "\u0361\u035c\u2040\u203f"
# Marks with no ARPAbet counterpart, skipped: length, syllable dots (which still keep the
# letters on either side apart: t.ʃ is T SH), and the stray digits some transcriptions carry.
_IGNORED = frozenset("ːˑ.0123456789")


def from_ipa(ipa: str) -> list[str]:
    """The ARPAbet phones of one word's IPA transcription: the inverse of :func:`to_ipa`.

    Each sound is matched against :data:`IPA` and :data:`UNSTRESSED`, longest first (so
    ``aɪ`` is AY, not a then ɪ). Other spellings of the same sounds are read too: ``r``
    for ɹ, ``g`` for ɡ, the ligatures ``ʤ`` and ``ʧ``, ``ɜ˞`` and ``ə˞`` for ɝ and ɚ;
    length marks ``ː``, syllable dots, tie bars and stray digits are skipped. A stress
    mark (``ˈ`` or ``'`` primary, ``ˌ`` secondary) may stand anywhere before its syllable's
    vowel, ahead of the onset or inside it: the first vowel after the mark takes its digit
    (1 or 2), every other vowel 0, whatever its quality (ʌ, ɝ or ɪ unstressed is AH0, ER0
    or IH0; ə or ɚ stressed is AH1 or ER1). A transcription without marks gives 0 on every
    vowel, as :func:`to_ipa` writes no mark for 0.

    Two phone sequences that :func:`to_ipa` writes alike come back as one: AO then IH is
    ɔɪ, read as OY; T then SH, and D then ZH, with no stress mark between them are tʃ and
    dʒ, read as CH and JH.

    Parameters
    ----------
    ipa : str
        One word in IPA (``"həˈloʊ"``, ``"'æbˌstɹækt"``); no spaces.

    Returns
    -------
    list of str
        ARPAbet phones, a stress digit on every vowel (``["HH", "AH0", "L", "OW1"]``);
        empty for an empty string.

    Raises
    ------
    TypeError
        ``ipa`` is not a str.
    ValueError
        ``ipa`` holds a symbol with no ARPAbet equivalent, two stress marks before one
        vowel, or a stress mark with no vowel after it.

    Examples
    --------
    >>> from_ipa("'æbˌstɹækt")
    ['AE1', 'B', 'S', 'T', 'R', 'AE2', 'K', 'T']
    >>> from_ipa("də'zɚt")
    ['D', 'AH0', 'Z', 'ER1', 'T']
    >>> from_ipa("ə'bjuːs")
    ['AH0', 'B', 'Y', 'UW1', 'S']
    >>> from_ipa(to_ipa(["IH2", "N", "F", "ER0", "M", "EY1", "SH", "AH0", "N"]))
    ['IH2', 'N', 'F', 'ER0', 'M', 'EY1', 'SH', 'AH0', 'N']
    >>> from_ipa("ˈbɑx")
    Traceback (most recent call last):
    ...
    ValueError: from_ipa: 'ˈbɑx' holds 'x', which has no ARPAbet equivalent
    """
    if not isinstance(ipa, str):
        raise TypeError(f"from_ipa: ipa must be a str, got {type(ipa).__name__}")
    text = unicodedata.normalize("NFC", ipa)
    for tie in _TIES:
        text = text.replace(tie, "")
    for spelling, standard in _SPELLINGS.items():
        text = text.replace(spelling, standard)
    phones: list[str] = []
    digit = ""                          # the mark's digit, waiting for the next vowel
    i = 0
    while i < len(text):
        char = text[i]
        if char in _IGNORED:
            i += 1
            continue
        if char in _DIGITS:
            if digit:
                raise ValueError(f"from_ipa: {ipa!r} has two stress marks before one vowel")
            digit = _DIGITS[char]
            i += 1
            continue
        sound = next((s for s in _LONGEST if text.startswith(s, i)), None)
        if sound is None:
            raise ValueError(f"from_ipa: {ipa!r} holds {char!r}, which has no ARPAbet "
                             "equivalent")
        base = _ARPABET[sound]
        if base in _VOWELS:
            phones.append(base + (digit or "0"))
            digit = ""
        else:
            phones.append(base)
        i += len(sound)
    if digit:
        raise ValueError(f"from_ipa: {ipa!r} ends with a stress mark and no vowel after it")
    return phones
