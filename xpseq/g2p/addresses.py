"""Street addresses as a reader says them: the tables and rows of the address class.

* a street address, a house number then capitalised names and a street type
  (:data:`STREET_TYPES`): ``1428 Elm St`` fourteen twenty-eight elm street, ``708 N 1st
  Ave`` seven zero eight north first avenue, ``12 Oak hwy`` twelve oak highway; the house
  number said as addresses are (two digits at a time, ``123`` one twenty-three, a five-digit
  number digit by digit); a full stop after the street type is left to end the sentence;
* a US state's two-letter code after a comma, before its ZIP code (said digit by digit) or
  a mark or the end: ``Austin, TX 78701`` austin texas seven eight seven zero one; a code
  that is also a word (:data:`WORD_CODES`: ``IN``, ``OR``, ``ME``) only with its ZIP code.

Its rows join :data:`xpseq.g2p.classes.ROWS` (:data:`ROWS`).
"""

from __future__ import annotations

import re
from typing import Callable

from .numerals import cardinal, digits, ordinal

__all__ = ["STREET_TYPES", "DIRECTIONS", "STATES", "WORD_CODES", "ROWS", "house_number"]

#: Street type abbreviation (lower case) -> its word.
STREET_TYPES = {
    "st": "street", "street": "street", "ave": "avenue", "av": "avenue", "avenue": "avenue",
    "rd": "road", "road": "road", "blvd": "boulevard", "dr": "drive", "ln": "lane",
    "ct": "court", "pl": "place", "sq": "square", "ter": "terrace", "pkwy": "parkway",
    "hwy": "highway", "expy": "expressway", "fwy": "freeway", "cir": "circle",
    "trl": "trail", "way": "way", "aly": "alley", "plz": "plaza", "tpke": "turnpike"}
#: Compass abbreviations before a street's name.
DIRECTIONS = {"n": "north", "s": "south", "e": "east", "w": "west", "ne": "northeast",
              "nw": "northwest", "se": "southeast", "sw": "southwest"}
#: US state and territory codes -> their names.
STATES = {
    "AL": "alabama", "AK": "alaska", "AZ": "arizona", "AR": "arkansas", "CA": "california",
    "CO": "colorado", "CT": "connecticut", "DE": "delaware", "FL": "florida",
    "GA": "georgia", "HI": "hawaii", "ID": "idaho", "IL": "illinois", "IN": "indiana",
    "IA": "iowa", "KS": "kansas", "KY": "kentucky", "LA": "louisiana", "ME": "maine",
    "MD": "maryland", "MA": "massachusetts", "MI": "michigan", "MN": "minnesota",
    "MS": "mississippi", "MO": "missouri", "MT": "montana", "NE": "nebraska",
    "NV": "nevada", "NH": "new hampshire", "NJ": "new jersey", "NM": "new mexico",
    "NY": "new york", "NC": "north carolina", "ND": "north dakota", "OH": "ohio",
    "OK": "oklahoma", "OR": "oregon", "PA": "pennsylvania", "RI": "rhode island",
    "SC": "south carolina", "SD": "south dakota", "TN": "tennessee", "TX": "texas",
    "UT": "utah", "VT": "vermont", "VA": "virginia", "WA": "washington",
    "WV": "west virginia", "WI": "wisconsin", "WY": "wyoming", "DC": "d c",
    "PR": "puerto rico"}


#: State codes that are also English words (IN, OR, ME ...): a state only with its ZIP code.
WORD_CODES = frozenset({"IN", "OR", "ME", "OK", "HI", "OH", "PA", "LA", "MA", "DE", "ID",
                        "CO", "AL", "MD", "MO", "MS", "NE", "SC", "VA", "WA"})


def _alternatives(words: object) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))  # type: ignore


def house_number(written: str) -> list[str]:
    """A house number as said: ``7`` seven, ``42`` forty-two, ``123`` one twenty-three,
    ``708`` seven zero eight, ``2788`` twenty-seven eighty-eight, ``1900`` nineteen
    hundred, longer numbers digit by digit."""
    if len(written) <= 2:
        return cardinal(written)
    if len(written) > 4:
        return digits(written)
    head, tail = written[:-2], written[-2:]
    if tail == "00":
        return cardinal(head) + ["hundred"]
    return cardinal(head) + (digits(tail) if tail[0] == "0" else cardinal(tail))


_NAME = r"(?-i:[A-Z][a-z]+)|\d+(?:st|nd|rd|th)"
_STREET = (rf"(?<![\w.])(?P<ad_number>\d{{1,5}})\s(?:(?P<ad_direction>(?-i:[NSEW]|NE|NW|SE|SW))"
           rf"\s)?(?P<ad_name>(?:{_NAME})(?:\s(?:{_NAME})){{0,2}})\s"
           rf"(?P<ad_type>{_alternatives(STREET_TYPES)})(?![\w])")
_STATE = (rf"(?<=,\s)(?-i:(?P<us_state>{_alternatives(STATES)}))"
          rf"(?:,?\s(?P<zip>\d{{5}})(?:-(?P<zip4>\d{{4}}))?|(?=\s*(?:[,.;)]|$)))(?![\w-])")


def _street(m: re.Match[str]) -> list[str]:
    words = house_number(m.group("ad_number"))
    if m.group("ad_direction"):
        words.append(DIRECTIONS[m.group("ad_direction").lower()])
    for name in m.group("ad_name").split():
        words += ordinal(int(name[:-2])) if name[0].isdigit() else [name.lower()]
    return words + [STREET_TYPES[m.group("ad_type").lower()]]


def _state(m: re.Match[str]) -> list[str] | None:
    if m.group("us_state") in WORD_CODES and not m.group("zip"):
        return None
    words = STATES[m.group("us_state")].split()
    return words + digits(m.group("zip") or "") + digits(m.group("zip4") or "")


#: The address rows, as :data:`xpseq.g2p.classes.ROWS` has them.
ROWS: list[tuple[str, str, Callable[[re.Match[str]], list[str] | None]]] = [
    ("street_address", _STREET, _street),
    ("state_code", _STATE, _state),
]
