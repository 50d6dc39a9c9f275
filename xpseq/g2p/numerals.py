"""Numbers said as words: the floor that the text front end (:mod:`xpseq.g2p.text`), its
classes (:mod:`xpseq.g2p.classes`) and addresses (:mod:`xpseq.g2p.addresses`) stand on.

>>> number_words("1,234")
['one', 'thousand', 'two', 'hundred', 'and', 'thirty-four']
>>> ordinal(21), digits("007")
(['twenty-first'], ['zero', 'zero', 'seven'])
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SPOKEN_DIGITS", "GROUPED_DIGITS", "MONTHS", "NUMBER", "spell", "number_words",
           "cardinal", "ordinal", "digits"]

#: The months, lower case, January first.
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")

#: A written number: ``1,234.5``, ``42``, ``.25`` (no sign).
NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"


def spell(value: Any, **kwargs: Any) -> str:
    """``num2words(value, lang="en", **kwargs)``, with a clear error where it is missing."""
    try:
        from num2words import num2words
    except ModuleNotFoundError:
        raise ModuleNotFoundError("xpseq.g2p: spelling out numbers needs num2words, a "
                                  "dependency of xpseq: pip install num2words") from None
    return str(num2words(value, lang="en", **kwargs))


#: The most digits of a whole number said as a number (999 trillion has 15); a longer one
#: (an account or serial number, a 400-digit string) is said digit by digit, as a reader
#: does, rather than in the -illions that num2words knows (up to 10^306; beyond, it fails).
SPOKEN_DIGITS = 15
#: The most digits of a number written in groups of three (``124,444,234,854,823,834,553``)
#: said as a number: its commas say it is one, up to the quintillions.
GROUPED_DIGITS = 21


def number_words(written: str, *, year: bool = True) -> list[str]:
    """The words of a written number: ``"1,234"`` -> ``['one', 'thousand', 'two', 'hundred',
    'and', 'thirty-four']``, ``"-2.05"`` -> ``['minus', 'two', 'point', 'zero', 'five']``,
    ``"1999"`` -> ``['nineteen', 'ninety-nine']`` (a year, with ``year=True``: four digits,
    1000 to 2099); a whole part of more than :data:`SPOKEN_DIGITS` digits digit by digit
    (``"12345678901234567"`` -> ``['one', 'two', ...]``), unless it is written in groups of
    three, up to :data:`GROUPED_DIGITS` digits."""
    if not re.fullmatch(rf"-?(?:{NUMBER})", written):
        raise ValueError(f"number_words: written must be a number such as 42, 1,000, -3.5, "
                         f"got {written!r}")
    sign, digits = ("minus ", written[1:]) if written.startswith("-") else ("", written)
    whole, _, fraction = digits.replace(",", "").partition(".")
    if year and not sign and not fraction and "," not in digits and len(whole) == 4 \
            and 1000 <= int(whole) <= 2099:
        text = spell(int(whole), to="year")
    elif len(whole) > (GROUPED_DIGITS if "," in digits else SPOKEN_DIGITS):
        text = sign + " ".join(spell(int(d)) for d in whole)
    elif whole:
        text = sign + spell(int(whole))
    else:                               # .25: point two five
        text = sign.rstrip()
    if fraction:                        # (never a year's)
        text += " point " + " ".join(spell(int(d)) for d in fraction)
    return text.replace(",", "").split()




def cardinal(written: str) -> list[str]:
    """A written number's words, never as a year (``1,500`` / ``2.5`` / ``-3``)."""
    return number_words(written, year=False)


def ordinal(value: int) -> list[str]:
    """``3`` -> ``['third']``, ``21`` -> ``['twenty-first']`` (num2words' words)."""
    return spell(value, to="ordinal").replace(",", "").split()


def digits(text: str) -> list[str]:
    """Each digit of ``text`` as a word, zeros as ``zero``."""
    names = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    return [names[int(c)] for c in text if c.isdigit()]
