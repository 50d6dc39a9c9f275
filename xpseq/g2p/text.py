"""Running text as the words a reader says: numbers spelled out, accents and quotes folded.

:func:`normalize` turns text into tokens: words (lower case ASCII letters, with the
apostrophes, hyphens and abbreviation periods the CMU dictionary writes: ``didn't``,
``well-known``, ``u.s.``) and punctuation marks, in order. What it reads:

* the semiotic classes of :mod:`xpseq.g2p.classes` first, each a row of a table (money in
  every currency of its table, measures and their units, telephone numbers digit by digit,
  dates with a month's name, fractions, street addresses and US states:
  :mod:`xpseq.g2p.addresses`);
* numbers: ``42`` forty-two, ``1,000`` one thousand, ``-5`` minus five, ``3.14`` three
  point one four (digit by digit after the point), ``.25`` point two five, ``007`` zero zero
  seven (a leading zero: each digit said); a key, three digits or more after a word that
  names one (``PIN 4417``, ``account no. 5512``, a card ``ending in 0923``), digit by digit;
* ordinals: ``21st`` twenty-first, ``3rd`` third (``21th``, a suffix that does not fit:
  twenty-one th);
* years, four digits from 1000 to 2099: ``1999`` nineteen ninety-nine, ``2021`` twenty
  twenty-one;
* percentages: ``50%`` fifty percent, ``2.5 %`` two point five percent;
* currency (:data:`xpseq.g2p.classes.CURRENCIES`): ``$250`` two hundred and fifty
  dollars, ``$2.50`` two dollars and fifty cents, ``$3 million`` three million dollars; a
  currency symbol alone is said as its name (``$`` dollar);
* times: ``10:30`` ten thirty, ``3:05`` three oh five, ``3:00`` three o'clock, ``9am``
  nine a.m., ``7:15 pm`` seven fifteen p.m., ``7.15 p.m.`` too; a dash between two times,
  decades or percentages is said "to" (``2pm-5pm``);
* dates: ``3/4/2021`` (month/day/year) and ``2021-03-04`` march fourth twenty twenty-one;
* times with seconds: ``2:03:45`` two hours three minutes and forty-five seconds; a
  ratio ``3:1`` three to one (one digit after the colon: no time);
* decades: ``1990s`` nineteen nineties, ``'90s`` nineties, ``1970 s`` (split off, as a
  tokenizer leaves it) nineteen seventies (a number that does not end in
  a zero takes an ``s`` as a plural only after an apostrophe: ``7's`` sevens); ranges:
  ``1990-95`` nineteen ninety to ninety-five, ``3-5`` three to five (``1-4=-3`` and
  ``7 - 2 = 5``: minus; a dash down to a smaller number, ``978-0``, no span: nothing said;
  ``3*4`` three times four); fractions (:mod:`xpseq.g2p.classes`): ``1/2`` one half,
  ``3/4`` three quarters, ``5/8`` five eighths, ``2 1/2`` two and a half (``24/7``:
  twenty-four slash seven); phone numbers digit by digit: ``555-1234``, ``(212) 555-1234``;
* a number against letters, a model's or a code's (``A321`` a three twenty-one, ``ab9453``
  a b nine four five three, ``T2000`` t two thousand, ``FY2024`` f y twenty twenty-four);
* a day's short form before a date (``Fri 14 June`` friday ...); a month's short form in
  lower case with no number beside it is a word (``a deep mar.``);
* Roman numerals (I, V, X, L, C; below 400) of two letters or more after a capitalised
  word: ``Henry VIII`` henry the eighth, ``World War II`` world war two (after a word that
  counts: war, part, chapter ...); of one letter after a monarch's or a pope's name
  (``Edward V`` edward the fifth, ``Louis I of France``; ``I`` not before a lower-case word:
  ``then George I said``);
* a sign after a mark is a sign (``?-3``, ``(-3)`` minus three), and a mark after a mark
  is still said (``;&`` and);
* symbols: ``&`` and, ``@`` at, ``§`` section, ``+`` plus, ``=`` equals, ``#1`` number one, ``%``
  percent, ``/`` slash (between ``and`` and ``or``: nothing); e-mail and web addresses part by
  part: ``ann.lee@example.com`` ann dot lee at example dot com, ``www.example.org`` w w w
  dot example dot org, ``https://`` h t t p s colon slash slash, their digits one by one,
  words run together split (``helpdesk@`` help desk at): :mod:`xpseq.g2p.electronic`;
* abbreviations by their context: ``Dr.`` doctor before a name, drive after one; ``St.``
  street after a name, saint otherwise (a street or a drive before a capitalised word ends
  the sentence: its full stop is kept); ``No. 5`` number five; ``Mr.``, ``Mrs.``,
  ``Prof.``, ``Jr.``, ``Sr.``, ``Jan.`` to ``Dec.``, ``approx.``, ``etc.``, ``vs.`` as their
  words; their period is no pause unless the text ends there;
* accents: ``café`` cafe, ``naïve`` naive; except ``résumé`` (``resumé``), which keeps
  them as the cue for the noun (the verb is ``resume``);
* invisible format characters (Unicode category Cf: the soft hyphen, the zero-width space
  and joiners, the word joiner, the byte-order mark) are dropped without a note before the
  words are split (:func:`drop_format`): ``pro\\u00adnounce`` is ``pronounce``;
* a line end written CRLF is a line end (:func:`unix_newlines`), without a note.

The numbers' words come from num2words (a dependency of xpseq), never from tables of
ours; accented letters are decomposed by :mod:`unicodedata` and their marks dropped
(``é`` -> ``e``; ``ß`` -> ``ss`` by case folding); curly apostrophes and quotes become
straight ones. A four-digit number from 1000 to 2099 is read as a year (``1500`` is
"fifteen hundred"), as speech usually does; write ``1,500`` for "one thousand five
hundred". Letters of other scripts are kept (the model leaves out what it cannot read).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any

from xpseq.io import reading

from . import classes, electronic
from .numerals import MONTHS, NUMBER, SPOKEN_DIGITS, number_words
from .numerals import digits as _digits
from .numerals import spell as _num2words
from .electronic import round_number
from .notes import emit

__all__ = ["normalize", "normalize_noting", "fold", "drop_format", "unix_newlines",
           "number_words", "MONTHS", "ControlCharacterWarning"]


class ControlCharacterWarning(UserWarning):
    """Characters that are not text (C0 and C1 controls, ESC sequences, bidirectional
    overrides, NUL) were dropped from a text; ``characters`` lists them as found."""

    def __init__(self, message: str, *, characters: list[str] | None = None):
        super().__init__(message)
        self.characters = list(characters or [])

#: English month names, for dates (the words are the reader's, not the locale's).

_CURRENCIES = {"$": "USD", "€": "EUR", "£": "GBP", "₹": "INR"}
#: Abbreviations said as words wherever they stand (the titles and ``st.`` by their
#: context: :func:`_short`); their period is no pause unless the text ends there.
_SHORT_WORDS = {"mr": ["mister"], "mrs": ["missus"], "prof": ["professor"],
                "jr": ["junior"], "sr": ["senior"], "approx": ["approximately"],
                "etc": ["et", "cetera"], "vs": ["versus"], "jan": ["january"],
                "feb": ["february"], "mar": ["march"], "apr": ["april"], "jun": ["june"],
                "jul": ["july"], "aug": ["august"], "sep": ["september"],
                "sept": ["september"], "oct": ["october"], "nov": ["november"],
                "dec": ["december"]}
_SHORT = ("dr", "st", *sorted(_SHORT_WORDS, key=len, reverse=True))
#: Symbols said as words; ``/`` between ``and`` and ``or`` is said as nothing.
_SYMBOLS = {"&": ["and"], "@": ["at"], "+": ["plus"], "=": ["equals"], "#": ["number"],
            "§": ["section"],
            "/": ["slash"], "%": ["percent"],
            **{c: names[0].split()[:1] for c, names in classes.CURRENCIES.items()}}
_NUMBER = NUMBER
_TLD = r"com|org|net|edu|gov|io|info|co|uk|us|de|fr|ca|au|ai|dev"
# The address parts are bounded as the standards bound them (a local part of 64
# characters, a label of 63, a path here of 200): each alternative then looks at most a
# few hundred characters ahead of where it starts, and the tokenizer stays linear in the
# text's length (unbounded, a 32 kB run of "1-1-1-..." or "www.www...." took 25 to 80 s).
_LABEL = r"[a-z0-9-]{1,63}"
_ALTERNATIVES = rf"""
      (?P<email>[a-z0-9][a-z0-9._+&-]{{0,63}}@{_LABEL}(?:\.{_LABEL}){{1,8}}(?![a-z0-9-])
          (?:/[^\s]{{0,200}})?)
    | (?P<web>file:///?[^\s]{{1,200}}(?<![.,;:!?)])
          |(?:(?:https?|ftp)://)?(?:www\.)?{_LABEL}(?:\.{_LABEL}){{0,8}}\.(?:{_TLD})\b
          (?:\.[a-z]{{2}}\b)?
          (?:/[^\s]{{0,200}}(?<![.,;:!?)]))?
          |(?-i:[a-z][a-z0-9-]{{1,62}}(?:\.[a-z][a-z0-9-]{{1,62}}){{1,8}})(?![\w.-]|\.\w))
    | (?P<currency>[$€£₹])\s?(?P<amount>{_NUMBER})
          (?:\s?(?P<scale>thousand|million|billion|trillion)\b)?
    | (?P<iso>\d{{4}})-(?P<iso_month>1[0-2]|0[1-9])-(?P<iso_day>3[01]|[12]\d|0[1-9])(?!\d)
    | (?P<month>1[0-2]|0?[1-9])/(?P<day>3[01]|[12]\d|0?[1-9])/(?P<year>\d{{4}}|\d{{2}})(?!\d)
    | (?P<ratio>(?<![\w:.])\d+):(?P<ratio_to>\d)(?![\w:]|[.,]\d)
    | (?P<second_hour>[01]?\d|2[0-3]):(?P<second_minute>[0-5]\d):(?P<seconds>[0-5]\d)(?!\d)
    | (?P<hour>[01]?\d|2[0-3])(?::|\.(?=[0-5]\d\s?[ap]\.?m(?:\.|\b)))(?P<minute>[0-5]\d)(?![\d:])
          (?:\s?(?P<meridiem>[ap])(?:\.m\.?|m\b))?
    | (?P<clock>1[0-2]|0?[1-9])\s?(?P<clock_meridiem>[ap])(?:\.m\.?|m\b)
    | (?P<phone>(?<![\d-])(?:\(\d{{3}}\)\s?|\d{{3}}[-.])?\d{{3}}-\d{{4}}(?![\d-]))
    | (?P<decade>'\d{{2}}|(?<!\d)\d{{1,4}}(?='s\b)|(?<!\d)\d{{1,3}}0)'?s\b
    | (?P<split_decade>(?<![\d,.])(?:1[5-9]|20)[1-9]0)\ss\b(?!['.]?\w)
    | (?P<range_from>(?<![\w.-])\d+)[-–](?P<range_to>\d+)(?![\d/:-]|[.,]\d)
    | (?P<numerator>(?<![\w/])\d+)/(?P<denominator>\d+)(?![\d/])
    | (?P<percent>(?:(?<![\w%])-)?(?:{_NUMBER}))\s?%
    | (?P<ordinal>\d{{1,3}}(?:,\d{{3}})+|\d+)(?P<ordinal_suffix>st|nd|rd|th)\b(?P<ordinal_s>'s\b)?
    | (?P<number>(?:(?<![\w%])-)?(?:{_NUMBER}))
    | (?P<abbreviation>(?:[^\W\d_]\.){{2,}}(?:[^\W\d_](?![\w.]))?)
    | (?P<short>\b(?:{"|".join(_SHORT)})\.)
    | (?P<roman>\b[IVXLC]{{2,}}\b)
    | (?P<word>[^\W\d_]+(?:['-][^\W\d_]+)*(?<=s)'|[^\W\d_]+(?:['-][^\W\d_]+)*)
    | (?P<symbol>[&@+=#/%§{"".join(classes.CURRENCIES)}])
    | (?P<punctuation>(?:(?![&@+=#%§{"".join(classes.CURRENCIES)}]|(?<=[^\w\s%-])-\d)[^\w\s])+)
"""
#: The older alternatives alone: what a class row that declines its match reads it with.
_PLAIN = re.compile(_ALTERNATIVES, re.VERBOSE | re.IGNORECASE)
#: The classes' rows (:mod:`xpseq.g2p.classes`) first, then the older alternatives.
_TOKEN = re.compile(classes.PATTERN + "|" + _ALTERNATIVES, re.VERBOSE | re.IGNORECASE)


def fold(text: str) -> str:
    """``text`` with its format characters dropped (:func:`drop_format`), compatibility
    forms unified (NFKC), curly quotes made straight, letters stripped of their accents
    (NFKD, combining marks dropped) and case-folded."""
    return _plain(text.casefold())


def _plain(text: str) -> str:
    """:func:`fold` but the case kept (the reader of running text needs it: ``Dr. Smith``,
    ``Henry VIII``)."""
    text = unicodedata.normalize("NFKC", _ORDINAL_SIGN.sub("°", drop_format(text)))
    text = text.translate({0x2018: "'", 0x2019: "'", 0x02BC: "'", 0x201C: '"',
                           0x201D: '"', 0x2010: "-", 0x2011: "-", 0x2013: "-"})
    text = "".join(c for c in unicodedata.normalize("NFKD", text)
                   if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", text)


#: The ordinal indicator ``º`` after a number, typed for a degree sign (``45ºC``): made
#: one before NFKC folds it to the letter ``o``.
_ORDINAL_SIGN = re.compile(r"(?<=\d)º|(?<=\d )º(?=\s?[CF]\b)")


def drop_format(text: str) -> str:
    """``text`` without its invisible format characters (Unicode category Cf: the soft
    hyphen U+00AD, the zero-width space U+200B, the zero-width non-joiner and joiner
    U+200C and U+200D, the word joiner U+2060, the byte-order mark U+FEFF, ...).

    They are dropped without a note and before the text is split into words, so the
    pieces they stood between become one word: ``"pro\\u00adnounce"`` is ``"pronounce"``,
    and a zero-width space joins its neighbours too (it is not read as a space). A
    text of only format characters becomes empty. The bidirectional controls (U+061C,
    U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069), which reorder what a terminal
    shows, are left in: :func:`xpseq.io.reading.clean_text` drops them with a note
    (a :class:`ControlCharacterWarning` from :func:`normalize`; a word given to
    :func:`xpseq.g2p.pronounce` names them as characters the model does not know).

    >>> drop_format("pro\\u00adnoun\\u200dce\\ufeff")
    'pronounce'
    """
    return text if text.isascii() else _NON_ASCII.sub(_visible, text)


#: A run of characters outside ASCII, the only place a format character can be.
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _visible(run: re.Match[str]) -> str:
    return "".join(c for c in run.group(0) if not _format(c))


@functools.lru_cache(maxsize=4096)
def _format(c: str) -> bool:
    """Whether ``c`` is a format character that :func:`drop_format` drops."""
    return unicodedata.category(c) == "Cf" and not reading.clean_text(c)[1]


def unix_newlines(text: str) -> str:
    """``text`` with its CRLF line ends written LF: a ``\\r`` before a ``\\n`` or at the
    very end is removed, without a note (a text read from a Windows file, or a line of
    one with its ``\\n`` taken off). A ``\\r`` anywhere else is a control character, which
    :func:`xpseq.io.reading.clean_text` drops with a note.

    >>> unix_newlines("one\\r\\ntwo\\r")
    'one\\ntwo'
    """
    return text.replace("\r\n", "\n").removesuffix("\r")


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
    """Month, ordinal day, year (a two-digit year ``05``: oh five)."""
    said = (["oh"] + number_words(year[1]) if len(year) == 2 and year[0] == "0"
            else number_words(year))
    return [MONTHS[int(month) - 1]] + _num2words(int(day), to="ordinal").split() + said


def _hours_minutes_seconds(*parts: str) -> list[str]:
    """A time written to the second, read as its hours, minutes and seconds, each named
    (``0:05:30`` zero hours five minutes and thirty seconds)."""
    words: list[str] = []
    for at, (part, unit) in enumerate(zip(parts, ("hour", "minute", "second"))):
        words += (["and"] if at == 2 else []) + number_words(str(int(part)), year=False) + [
            unit if int(part) == 1 else unit + "s"]
    return words


def _time(hour: str, minute: str, meridiem: str | None) -> list[str]:
    words = number_words(str(int(hour)), year=False)
    if minute == "00":
        words += ["o'clock"] if not meridiem else []
    elif minute.startswith("0"):
        words += ["oh"] + number_words(minute[1])
    else:
        words += number_words(minute)
    return words + ([f"{meridiem.lower()}.m."] if meridiem else [])


#: Spellings whose accents tell a homograph apart (résumé, the noun; resume, the verb);
#: normalize gives them as ``résumé`` (:data:`xpseq.g2p.homographs.ACCENT_CUES`).
_ACCENTED_CUE = re.compile(r"\br(?:ésum[eé]|esumé)(?!\w)", re.IGNORECASE)

#: Unicode categories of characters that have no glyph to show or say (private use,
#: unassigned, format, surrogates): never a punctuation token.
_UNSEEN = ("Co", "Cn", "Cf", "Cs")


def _said(item: re.Match[str] | None) -> str:
    """The text of an item of :func:`normalize`'s stream (``None``: the cue résumé)."""
    return "résumé" if item is None else item.group(0)


def _plural(words: list[str]) -> list[str]:
    """A decade's words, or a number's plural (``6's`` sixes): the last made plural
    (``ninety`` -> ``nineties``)."""
    last = words[-1]
    return words[:-1] + [last[:-1] + "ies" if last.endswith("y") else
                         last + "es" if last.endswith("x") else last + "s"]


def _attached(word: re.Match[str] | None, number: re.Match[str]) -> bool:
    """Whether ``number`` is written against the letters of ``word`` (``A321``)."""
    return word is not None and word.lastgroup == "word" and word.end() == number.start()


def _code_number(written: str) -> list[str]:
    """The number of a model or code after its letters: three digits in pairs, as a
    year (``A321`` a three twenty-one, ``F150`` one fifty), more digits one by one
    (``ab9453``) unless round (``T2000`` two thousand) or a year of the last two centuries
    (``FY2024`` twenty twenty-four)."""
    if len(written) == 3:
        return _num2words(int(written), to="year").split()
    if len(written) == 4 and written[:2] in ("19", "20"):
        return number_words(written)
    return number_words(written, year=False) if round_number(written) else _digits(written)


#: Words that a slash between them joins without a word (``and/or``); between others it
#: is said (``upgrade/update`` upgrade slash update).
_JOINED = frozenset({"and", "or", "nor"})

#: Words after which a Roman numeral counts (World War II, Part IV) rather than ranks a
#: name (Henry VIII: the eighth).
_COUNTED = {"war", "part", "chapter", "volume", "vol", "act", "scene", "phase", "type",
            "class", "grade", "stage", "level", "bowl", "book", "section", "appendix",
            "episode", "season", "article", "title", "schedule", "psalm", "canto"}

#: Roman numerals read after a name (``Henry VIII``), two letters or more: one letter
#: (``Malcolm X``, ``I``) is too often not a numeral.
_ROMAN = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100}


#: Names that monarchs and popes reign under: a one-letter Roman numeral after one ranks
#: it (``Henry V`` henry the fifth, ``Pius X``, ``Francis I``), which after another name
#: is too often a letter or the pronoun (``Malcolm X``, ``then Sam I said``).
_REGNAL = frozenset("""
    alexander alfonso amenhotep anne antiochus artaxerxes benedict boniface carlos casimir
    catherine charles christian clement constantine cyrus darius david edmund edward
    elizabeth felipe ferdinand francis frederick george gregory gustav gustavus haakon
    harald henry innocent isabella ivan james john joseph juan justinian ladislaus leo
    leopold louis manuel mary maximilian mehmed murad napoleon nicholas olaf otto paul
    pedro peter philip pius ptolemy ramesses richard robert rudolf selim sigismund sixtus
    stephen suleiman thutmose umberto urban victor victoria wilhelm william xerxes""".split())


def _regnal(before: str, numeral: str, after: str) -> bool:
    """Whether the one-letter numeral ``numeral`` ranks the name ``before``
    (:data:`_REGNAL`); ``I`` only when no lower-case word but ``of`` or ``and`` follows
    (``Louis I of France``; not ``then George I said``)."""
    if not (before[:1].isupper() and before.lower() in _REGNAL):
        return False
    return numeral != "I" or not after[:1].islower() or after in ("of", "and")


def _roman(numeral: str) -> int | None:
    """The value (below 400) of an upper-case Roman numeral of I, V, X, L and C, or
    ``None`` if it is not one written the usual way."""
    total = 0
    for here, after in zip(numeral, numeral[1:] + " "):
        value = _ROMAN[here]
        total += -value if _ROMAN.get(after, 0) > value else value
    return total if 0 < total < 400 and _to_roman(total) == numeral else None


def _to_roman(value: int) -> str:
    out = ""
    for symbol, amount in (("C", 100), ("XC", 90), ("L", 50), ("XL", 40), ("X", 10),
                           ("IX", 9), ("V", 5), ("IV", 4), ("I", 1)):
        while value >= amount:
            out, value = out + symbol, value - amount
    return out


def _plain_word(written: str, before: str, after: str) -> bool:
    """Whether a month's short form is a word of its own: written in lower case with no
    number beside it (``the mar.``; ``Mar.``, ``mar. 5`` and ``5 mar.`` are March)."""
    return (written.lower() in classes.MONTH_NAMES and written[:1].islower()
            and not before[-1:].isdigit() and not after[:1].isdigit())


def _short(name: str, before: str, after: str) -> list[str]:
    """An abbreviation of :data:`_SHORT` by its context: ``dr.`` doctor before a name,
    drive after one; ``st.`` saint before a name, street after one."""
    capital_after = after[:1].isupper()
    capital_before = before[:1].isupper()
    if name == "dr":
        return ["drive"] if capital_before and not capital_after else ["doctor"]
    if name == "st":                    # Elm St. It was ...: a street, then a full stop
        return ["street"] if capital_before else ["saint"]
    return list(_SHORT_WORDS[name])


def normalize(text: str) -> list[str]:
    """The tokens of running ``text``, in order: its words as they are said (lower case;
    numbers, amounts, measures, dates, times and telephone numbers spelled out by their
    class, :mod:`xpseq.g2p.classes`; accents removed) and its punctuation marks (each run
    of them one token, ``"..."``, ``"?!"``). These words are what
    :func:`xpseq.g2p.phonemize` pronounces.

    Parameters
    ----------
    text : str
        Running text, any length.

    Returns
    -------
    list of str
        The words and punctuation marks (a token with a letter is a word).

    Raises
    ------
    TypeError
        ``text`` is not a str.

    Warns
    -----
    ControlCharacterWarning
        Control characters were dropped from the text.

    Examples
    --------
    >>> from xpseq.g2p import normalize
    >>> normalize("I paid $250 on 3/4/2021, didn't I?")    # doctest: +NORMALIZE_WHITESPACE
    ['i', 'paid', 'two', 'hundred', 'and', 'fifty', 'dollars', 'on', 'march', 'fourth',
     'twenty', 'twenty-one', ',', "didn't", 'i', '?']
    >>> " ".join(normalize("Nov. 3: 12kg for $2.3M."))
    'november third : twelve kilograms for two point three million dollars .'
    >>> " ".join(normalize("Call +1 212-555-0100."))
    'call plus one two one two five five five zero one zero zero .'
    """
    tokens, notes = normalize_noting(text)
    emit(notes)
    return tokens


def normalize_noting(text: str) -> tuple[list[str], list[Warning]]:
    """:func:`normalize`'s tokens and its notes (a :class:`ControlCharacterWarning` when
    control characters were dropped), returned for the caller to raise. CRLF line ends
    (:func:`unix_newlines`) and format characters (:func:`drop_format`) go without a
    note, before the words are split."""
    if not isinstance(text, str):
        raise TypeError(f"normalize: text must be a str, got {type(text).__name__}")
    text, dropped = reading.clean_text(unix_newlines(text))
    text = drop_format(text)
    notes: list[Warning] = []
    if dropped:
        notes.append(ControlCharacterWarning(
            f"{len(dropped)} control character(s) dropped from the text "
            f"({', '.join(dict.fromkeys(reading.shown(c) for c in dropped))})",
            characters=dropped))
    tokens: list[str] = []
    # résumé keeps its accents, the cue that tells the noun from the verb resume: found
    # before the accents go, and carried as its own item of the stream (None), never as a
    # character in the text, which a user could type too.
    text = unicodedata.normalize("NFC", text)
    matches: list[re.Match[str] | None] = []
    start = 0
    for cue in _ACCENTED_CUE.finditer(text):
        matches += _tokens(_plain(text[start:cue.start()]))
        matches.append(None)
        start = cue.end()
    matches += _tokens(_plain(text[start:]))
    matches, said_by_class = _classes(matches)
    for at, m in enumerate(matches):
        if m is None:
            tokens.append("résumé")
            continue
        kind, value = m.lastgroup, m.group(m.lastgroup or 0)
        if at in said_by_class:
            tokens += said_by_class[at]
            continue
        before = _said(matches[at - 1]) if at else ""
        after = _said(matches[at + 1]) if at + 1 < len(matches) else ""
        if m.group("email") or m.group("web"):
            tokens += electronic.parts(value)
        elif m.group("currency"):
            tokens += _currency(m.group("currency"), m.group("amount"), m.group("scale"))
        elif m.group("iso"):
            tokens += _date(m.group("iso"), m.group("iso_month"), m.group("iso_day"))
        elif m.group("month"):
            tokens += _date(m.group("year"), m.group("month"), m.group("day"))
        elif m.group("ratio"):              # 3:1 three to one (a time has two digits)
            tokens += number_words(m.group("ratio")) + ["to"] + number_words(m.group("ratio_to"))
        elif m.group("second_hour"):        # 1:02:03 one hour two minutes and three seconds
            tokens += _hours_minutes_seconds(m.group("second_hour"), m.group("second_minute"),
                                             m.group("seconds"))
        elif m.group("hour"):
            tokens += _time(m.group("hour"), m.group("minute"), m.group("meridiem"))
        elif m.group("clock"):
            tokens += number_words(m.group("clock")) + [
                f"{m.group('clock_meridiem').lower()}.m."]
        elif m.group("phone"):
            tokens += _digits(value)
        elif m.group("decade") or m.group("split_decade"):   # 1990s; 1990 s, split off
            digits = (m.group("decade") or m.group("split_decade")).lstrip("'")
            tokens += _plural(number_words(digits, year=len(digits) == 4))
        elif m.group("range_from"):         # 3-5 three to five; 1-4=3 one minus four
            low, high = m.group("range_from"), m.group("range_to")
            dash = ["minus"] if after == "=" else ["to"] if _rising(low, high) else []
            tokens += number_words(low) + dash + number_words(high, year=len(high) == 4)
        elif m.group("numerator"):      # 24/7 (a fraction is a class row): the numbers, a slash
            tokens += (number_words(m.group("numerator")) + ["slash"]
                       + number_words(m.group("denominator")))
        elif m.group("percent"):
            tokens += number_words(m.group("percent"), year=False) + ["percent"]
        elif m.group("ordinal"):            # 21st, 1,000th; not 21th (a number, then th)
            tokens += _ordinal(m.group("ordinal"), m.group("ordinal_suffix").lower())
            if m.group("ordinal_s"):        # the 5th's: the twenty-fifth's
                tokens[-1] += "'s"
        elif kind == "number" and (re.fullmatch(r"0\d+", value) or _keyed(matches, at)):
            tokens += _digits(value)          # 007, a card ending in 4821: each digit
        elif kind == "number" and at and _attached(matches[at - 1], m) and value.isdigit() \
                and len(value) > 2:
            tokens += _code_number(value)
        elif kind == "number":
            tokens += number_words(value)
        elif kind == "short" and _plain_word(value[:-1], before, after):
            tokens.append(value[:-1].lower())    # on the mar.: a word, not March
        elif kind == "short":
            tokens += _short(value[:-1].lower(), before, after)
        elif kind == "roman" and value.isupper() and _roman(value) and before[:1].isupper() \
                and before.isalpha():
            number = _roman(value)
            tokens += (number_words(str(number)) if before.lower() in _COUNTED else
                       ["the"] + _num2words(number, to="ordinal").split())
        elif kind == "word" and value in _ROMAN and _regnal(before, value, after):
            tokens += ["the"] + _num2words(_ROMAN[value], to="ordinal").split()
        elif kind == "symbol":
            previous, following = matches[at - 1] if at else None, (
                matches[at + 1] if at + 1 < len(matches) else None)
            if value == "/" and {before.lower(), after.lower()} <= _JOINED \
                    and previous is not None and following is not None \
                    and m.start() == previous.end() and m.end() == following.start():
                continue                              # and/or: said as nothing
            tokens += _SYMBOLS[value] if value != "#" or after[:1].isdigit() else ["hash"]
        elif kind == "abbreviation":        # u.s.a. (e.s.t: its last full stop added)
            tokens.append(value.casefold() + ("" if value.endswith(".") else "."))
        elif kind == "punctuation" and value == "-" and _sum(matches, at):
            tokens.append("minus")          # 7 - 2 = 5: a difference
        elif kind == "punctuation" and value == "*" and _between_numbers(matches, at):
            tokens.append("times")          # 3*4: a product
        elif kind == "punctuation" and value in ("-", "--") and _span(matches, at):
            tokens.append("to")             # 2pm-5pm, the 1960s-80s: a span of time
        elif kind == "word" and value.lower() in _DAYS and _dated(value, matches, at):
            tokens.append(_DAYS[value.lower()])       # Fri 3/8: friday
        elif kind == "punctuation":         # marks a reader shows; none that cannot be seen
            shown = "".join(c for c in value if unicodedata.category(c) not in _UNSEEN)
            if shown:
                tokens.append(shown)
        else:
            tokens.append(value.casefold())
        time = m.group("hour") or m.group("clock")
        place = kind == "short" and tokens[-1] in ("street", "drive")
        if m.group(0).endswith(".") and (kind in ("short", "abbreviation") or time) and (
                at + 1 == len(matches) or ((time or place) and _new_sentence(after))):
            tokens.append(".")        # its full stop ends the sentence too: a pause kept
    return tokens, notes


#: What every class row needs somewhere in the text: a digit, or a state's code after a
#: comma. A text without one is read by the older alternatives alone (the same tokens,
#: sooner: the rows are not tried at each word).
_CLASS_HINT = re.compile(r"\d|,\s[A-Z]{2}\b")


def _tokens(text: str) -> Any:
    """The matches of ``text``: with the class rows where it could hold a class."""
    return (_TOKEN if _CLASS_HINT.search(text) else _PLAIN).finditer(text)


def _classes(matches: list[re.Match[str] | None]) -> tuple[
        list[re.Match[str] | None], dict[int, list[str]]]:
    """The stream with each match of a class row (:data:`xpseq.g2p.classes.ROWS`) said by
    its row: the words by the match's place; a row that declines (``None``) has its text
    read again by the older alternatives alone."""
    out: list[re.Match[str] | None] = []
    said: dict[int, list[str]] = {}
    for m in matches:
        row = classes.HANDLERS.get(m.lastgroup or "") if m is not None else None
        words = row(m) if row is not None and m is not None else None
        if words is not None:
            said[len(out)] = words
            out.append(m)
        elif row is not None and m is not None:
            out += _PLAIN.finditer(m.group(0))
        else:
            out.append(m)
    return out, said


def _ordinal(written: str, suffix: str) -> list[str]:
    """An ordinal's words (``21st`` twenty-first); a long one, or one whose suffix does not
    fit (``21th``), as its number (then the suffix said)."""
    if len(written) > SPOKEN_DIGITS:
        return number_words(written, year=False)
    if _suffix(written) != suffix:
        return number_words(written, year=False) + [suffix]
    return _num2words(int(written.replace(",", "")), to="ordinal").replace(",", "").split()


def _suffix(written: str) -> str:
    """The suffix an ordinal of ``written`` takes: ``st`` (21), ``nd``, ``rd``, ``th``."""
    n = int(written.replace(",", ""))
    if n % 100 in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


#: Words after which a number of three digits or more is a key, said digit by digit (PIN
#: 9035, account number 55120873, zip code 10027); the words of :data:`_KEY_GAP` may stand
#: between (``account no. 5512``, ``PIN: 9035``). A number that may be a year (1000 to
#: 2099) is a key only where one of :data:`_KEYS` is named a few words before (``card
#: ending in 2019``; not ``the code 2019 edition``).
_KEYS = frozenset({"card", "account", "acct", "pin", "zip", "postcode", "passcode",
                   "password", "routing", "iban"})
_KEY_WORDS = _KEYS | {"policy", "confirmation", "reference", "tracking", "serial", "code",
                      "id"}
_KEY_GAP = frozenset({"number", "no", "no.", "#", ":", "is", "num", "nr"})
#: Words that end a key's description: a number after them is its last digits (a card
#: ending in 4821).
_KEY_ENDS = frozenset({("ending", "in"), ("ending", "with"), ("ends", "in"),
                       ("ends", "with")})


def _keyed(matches: list[re.Match[str] | None], at: int) -> bool:
    """Whether the plain number at ``at`` (digits only, three or more) is a key: after a
    word of :data:`_KEY_WORDS`, or after one of :data:`_KEY_ENDS`, not an amount."""
    m = matches[at]
    written = "" if m is None else m.group(0)
    if not written.isdigit() or len(written) < 3:
        return False
    words = [_said(w).lower() for w in matches[max(0, at - 8):at]]
    if len(written) == 4 and 1000 <= int(written) <= 2099 and not _KEYS & set(words):
        return False                                    # the season ending in 2019
    while words and words[-1] in _KEY_GAP and words[-1] not in _KEY_WORDS:
        words.pop()
    return bool(words) and (words[-1] in _KEY_WORDS or tuple(words[-2:]) in _KEY_ENDS)


def _span(matches: list[re.Match[str] | None], at: int) -> bool:
    """Whether the dash at ``at`` stands between two times, decades or percentages."""
    def timed(m: re.Match[str] | None) -> bool:
        return m is not None and bool(m.group("hour") or m.group("clock") or m.group("decade")
                                      or m.group("percent"))

    return 0 < at < len(matches) - 1 and timed(matches[at - 1]) and timed(matches[at + 1])


def _between_numbers(matches: list[re.Match[str] | None], at: int) -> bool:
    """Whether the mark at ``at`` stands between two plain numbers."""
    def number(m: re.Match[str] | None) -> bool:
        return m is not None and m.lastgroup == "number"

    return 0 < at < len(matches) - 1 and number(matches[at - 1]) and number(matches[at + 1])


def _sum(matches: list[re.Match[str] | None], at: int) -> bool:
    """Whether the dash at ``at`` stands between two numbers that an ``=`` follows."""
    return (_between_numbers(matches, at) and at + 2 < len(matches)
            and _said(matches[at + 2]) == "=")


#: The days' short forms, read as the day before a date (``Thu 4/9``, ``Sat (12/3)``).
_DAYS = {short: day for day, forms in (
    ("monday", "mon"), ("tuesday", "tu tue tues"), ("wednesday", "wed"),
    ("thursday", "thu thur thurs"), ("friday", "fri"), ("saturday", "sat"),
    ("sunday", "sun")) for short in forms.split()}


def _dated(word: str, matches: list[re.Match[str] | None], at: int) -> bool:
    """Whether the capitalised ``word`` stands before a number (a bracket or a comma
    between), not after ``the`` (``the Sun 24``: a name)."""
    if at and _said(matches[at - 1]).lower() == "the":
        return False
    following = [_said(m) for m in matches[at + 1:at + 3]]
    if following[:1] in (["("], [","]):
        following = following[1:]
    return word[:1].isupper() and bool(following) and following[0][:1].isdigit()


def _rising(low: str, high: str) -> bool:
    """Whether ``low-high`` is a span: the second number above the first, or above the
    first's last digits when it is written short (``1990-95``). A dash to a smaller number
    (``978-0``, a code's parts) is read as nothing."""
    if len(high) < len(low):
        low = low[-len(high):]
    low, high = low.lstrip("0"), high.lstrip("0")        # compared without int(): any length
    return (len(high), high) > (len(low), low)


def _new_sentence(word: str) -> bool:
    """Whether ``word``, after "a.m." or "p.m.", starts a sentence: capitalised, and not a
    day or a month ("at 9 a.m. Monday")."""
    return word[:1].isupper() and word.lower() not in _CALENDAR


_CALENDAR = frozenset(MONTHS) | {"monday", "tuesday", "wednesday", "thursday", "friday",
                                 "saturday", "sunday"}
