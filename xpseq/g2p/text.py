"""Running text as the words a reader says: numbers spelled out, accents and quotes folded.

:func:`normalize` turns text into tokens: words (lower case ASCII letters, with the
apostrophes, hyphens and abbreviation periods the CMU dictionary writes: ``didn't``,
``well-known``, ``u.s.``) and punctuation marks, in order. What it reads:

* numbers: ``42`` forty-two, ``1,000`` one thousand, ``-5`` minus five, ``3.14`` three
  point one four (digit by digit after the point);
* ordinals: ``21st`` twenty-first, ``3rd`` third;
* years, four digits from 1000 to 2099: ``1999`` nineteen ninety-nine, ``2021`` twenty
  twenty-one;
* percentages: ``50%`` fifty percent, ``2.5 %`` two point five percent;
* currency (``$ € £ ₹``, the library's unit names): ``$250`` two hundred and fifty
  dollars, ``$2.50`` two dollars and fifty cents, ``$3 million`` three million dollars;
* times: ``10:30`` ten thirty, ``3:05`` three oh five, ``3:00`` three o'clock, ``9am``
  nine a.m., ``7:15 pm`` seven fifteen p.m.;
* dates: ``3/4/2021`` (month/day/year) and ``2021-03-04`` march fourth twenty twenty-one;
* accents: ``café`` cafe, ``naïve`` naive.

The numbers' words come from num2words (the ``xpseq[g2p]`` extra), never from tables of
ours; accented letters are decomposed by :mod:`unicodedata` and their marks dropped
(``é`` -> ``e``; ``ß`` -> ``ss`` by case folding); curly apostrophes and quotes become
straight ones. A four-digit number from 1000 to 2099 is read as a year (``1500`` is
"fifteen hundred"), as speech usually does; write ``1,500`` for "one thousand five
hundred". Letters of other scripts are kept (the model leaves out what it cannot read).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

__all__ = ["normalize", "fold", "number_words", "MONTHS"]

#: English month names, for dates (the words are the reader's, not the locale's).
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")

_CURRENCIES = {"$": "USD", "€": "EUR", "£": "GBP", "₹": "INR"}
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
_TOKEN = re.compile(rf"""
      (?P<currency>[$€£₹])\s?(?P<amount>{_NUMBER})
          (?:\s?(?P<scale>thousand|million|billion|trillion)\b)?
    | (?P<iso>\d{{4}})-(?P<iso_month>1[0-2]|0[1-9])-(?P<iso_day>3[01]|[12]\d|0[1-9])(?!\d)
    | (?P<month>1[0-2]|0?[1-9])/(?P<day>3[01]|[12]\d|0?[1-9])/(?P<year>\d{{4}}|\d{{2}})(?!\d)
    | (?P<hour>[01]?\d|2[0-3]):(?P<minute>[0-5]\d)(?!\d)
          (?:\s?(?P<meridiem>[ap])(?:\.m\.|m\b))?
    | (?P<clock>1[0-2]|0?[1-9])\s?(?P<clock_meridiem>[ap])(?:\.m\.|m\b)
    | (?P<percent>(?:(?<!\w)-)?(?:{_NUMBER}))\s?%
    | (?P<ordinal>\d+)(?:st|nd|rd|th)\b
    | (?P<number>(?:(?<!\w)-)?(?:{_NUMBER}))
    | (?P<abbreviation>(?:[^\W\d_]\.){{2,}})
    | (?P<word>[^\W\d_]+(?:['-][^\W\d_]+)*(?<=s)'|[^\W\d_]+(?:['-][^\W\d_]+)*)
    | (?P<punctuation>[^\w\s]+)
""", re.VERBOSE | re.IGNORECASE)


def fold(text: str) -> str:
    """``text`` with compatibility forms unified (NFKC), curly quotes made straight,
    letters stripped of their accents (NFKD, combining marks dropped) and case-folded."""
    text = unicodedata.normalize("NFKC", text)
    text = text.translate({0x2018: "'", 0x2019: "'", 0x02BC: "'", 0x201C: '"',
                           0x201D: '"', 0x2010: "-", 0x2011: "-"})
    text = "".join(c for c in unicodedata.normalize("NFKD", text.casefold())
                   if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", text)



def _num2words(value: Any, **kwargs: Any) -> str:
    try:
        from num2words import num2words
    except ModuleNotFoundError:
        raise ModuleNotFoundError('xpseq.g2p: spelling out numbers needs num2words: pip '
                                  'install "xpseq[g2p]" (or: pip install num2words)') from None
    return str(num2words(value, lang="en", **kwargs))


#: The most digits of a whole number said as a number (999 trillion has 15); a longer one
#: (an account or serial number, a 400-digit string) is said digit by digit, as a reader
#: does, rather than in the -illions that num2words knows (up to 10^306; beyond, it fails).
SPOKEN_DIGITS = 15


def number_words(written: str, *, year: bool = True) -> list[str]:
    """The words of a written number: ``"1,234"`` -> ``['one', 'thousand', 'two', 'hundred',
    'and', 'thirty-four']``, ``"-2.05"`` -> ``['minus', 'two', 'point', 'zero', 'five']``,
    ``"1999"`` -> ``['nineteen', 'ninety-nine']`` (a year, with ``year=True``: four digits,
    1000 to 2099); a whole part of more than :data:`SPOKEN_DIGITS` digits digit by digit
    (``"12345678901234567"`` -> ``['one', 'two', ...]``)."""
    if not re.fullmatch(rf"-?(?:{_NUMBER})", written):
        raise ValueError(f"number_words: written must be a number such as 42, 1,000, -3.5, "
                         f"got {written!r}")
    sign, digits = ("minus ", written[1:]) if written.startswith("-") else ("", written)
    whole, _, fraction = digits.replace(",", "").partition(".")
    if year and not sign and not fraction and "," not in digits and len(whole) == 4 \
            and 1000 <= int(whole) <= 2099:
        text = _num2words(int(whole), to="year")
    elif len(whole) > SPOKEN_DIGITS:
        text = sign + " ".join(_num2words(int(d)) for d in whole)
    else:
        text = sign + _num2words(int(whole or "0"))
    if fraction:                        # (never a year's)
        text += " point " + " ".join(_num2words(int(d)) for d in fraction)
    return text.replace(",", "").split()


def _currency(symbol: str, amount: str, scale: str | None) -> list[str]:
    from num2words import CONVERTER_CLASSES

    forms: Any = CONVERTER_CLASSES["en"].CURRENCY_FORMS[_CURRENCIES[symbol]]
    (unit, units), (cent, cents) = ((str(a), str(b)) for a, b in forms)
    if scale:                           # $1.5 million: one point five million dollars
        return number_words(amount, year=False) + [scale.lower()] + units.split()
    whole, _, fraction = amount.replace(",", "").partition(".")
    words = number_words(whole or "0", year=False) + (unit if whole.lstrip("0") == "1"
                                                      else units).split()
    if fraction:
        hundredths = int((fraction + "0")[:2])
        if hundredths:
            words += ["and"] + number_words(str(hundredths)) + (
                cent if hundredths == 1 else cents).split()
    return words


def _date(year: str, month: str, day: str) -> list[str]:
    return ([MONTHS[int(month) - 1]] + _num2words(int(day), to="ordinal").split()
            + number_words(year))


def _time(hour: str, minute: str, meridiem: str | None) -> list[str]:
    words = number_words(str(int(hour)), year=False)
    if minute == "00":
        words += ["o'clock"] if not meridiem else []
    elif minute.startswith("0"):
        words += ["oh"] + number_words(minute[1])
    else:
        words += number_words(minute)
    return words + ([f"{meridiem.lower()}.m."] if meridiem else [])


def normalize(text: str) -> list[str]:
    """The tokens of running ``text``, in order: its words as they are said (lower case;
    numbers, dates, times, currency and percentages spelled out; accents removed) and its
    punctuation marks (each run of them one token, ``"..."``, ``"?!"``).

    >>> from xpseq.g2p.text import normalize
    >>> normalize("I paid $250 on 3/4/2021, didn't I?")    # doctest: +NORMALIZE_WHITESPACE
    ['i', 'paid', 'two', 'hundred', 'and', 'fifty', 'dollars', 'on', 'march', 'fourth',
     'twenty', 'twenty-one', ',', "didn't", 'i', '?']
    """
    if not isinstance(text, str):
        raise TypeError(f"normalize: text must be a str, got {type(text).__name__}")
    tokens: list[str] = []
    for m in _TOKEN.finditer(fold(text)):
        kind, value = m.lastgroup, m.group(m.lastgroup or 0)
        if m.group("currency"):
            tokens += _currency(m.group("currency"), m.group("amount"), m.group("scale"))
        elif m.group("iso"):
            tokens += _date(m.group("iso"), m.group("iso_month"), m.group("iso_day"))
        elif m.group("month"):
            tokens += _date(m.group("year"), m.group("month"), m.group("day"))
        elif m.group("hour"):
            tokens += _time(m.group("hour"), m.group("minute"), m.group("meridiem"))
        elif m.group("clock"):
            tokens += number_words(m.group("clock")) + [f"{m.group('clock_meridiem')}.m."]
        elif m.group("percent"):
            tokens += number_words(m.group("percent"), year=False) + ["percent"]
        elif kind == "ordinal" and len(value) > SPOKEN_DIGITS:     # as a long number
            tokens += number_words(value, year=False)
        elif kind == "ordinal":
            tokens += _num2words(int(value), to="ordinal").split()
        elif kind == "number":
            tokens += number_words(value)
        else:
            tokens.append(value)
    return tokens
