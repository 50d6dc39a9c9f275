"""Semiotic classes of running text as data: the tables and rows that
:func:`xpseq.g2p.text.normalize` reads money, measures, telephone numbers and written dates
with.

Each class is a row of :data:`ROWS`: a name, a regular expression (its groups named with the
row's name as prefix) and a function from the match to the words said. The rows are tried
before the front end's older alternatives, in order. What they read:

* money (:data:`CURRENCIES`: every currency symbol in the table, a country prefix
  ``US$``): ``$0.25`` twenty-five cents, ``€3.5`` three euros and fifty cents, ``$20.506``
  twenty point five zero six dollars (more than two decimals: a number, not cents),
  ``¥30b`` thirty billion yen, ``$2.3M`` two point three million dollars, ``-$5`` minus five
  dollars, ``$5-$10`` five dollars to ten dollars, ``$20/mo`` twenty dollars per month;
* measures (:data:`UNITS`): ``12kg`` twelve kilograms, ``1 km`` one kilometer, ``3 mL``
  three milliliters, ``20°C`` twenty degrees celsius (``20ºC`` too: the ordinal sign typed
  for a degree sign), ``5 km/h`` five kilometers per hour, ``9 m/s`` nine meters per
  second (``s`` a unit only after a slash), ``4 cc/min`` four c c per minute, ``9.8 m/s²``
  ... per second squared, ``7 kg/m3`` ... per cubic meter,
  ``10 m²`` ten square meters, ``12/kg`` twelve per kilogram, ``2-5 lb`` two to five
  pounds, ``15"`` fifteen inches (not a quotation's closing mark); a unit of one letter,
  or one that is also an English word (``in``, ``s``), only written against its number
  (``5m``, ``6in``);
* telephone numbers, every digit said and zeros kept: ``+1 (212) 555-0100``, ``555.123.4567``,
  ``212-555-0100 x12`` (an extension), ``123-45-6789``; IP addresses ``10.0.0.1`` ten, dot
  ... digit by digit;
* street addresses and US states (:mod:`xpseq.g2p.addresses`);
* dates written with a month's name: ``Nov. 3`` november third, ``July 4, 1776`` july fourth
  seventeen seventy-six, ``3 May 2010`` the third of may twenty ten; numeric dates with the
  year first (``2016/07/03``), or with dots or dashes (``01.10.2010``: month first unless it
  cannot be a month);
* years before their era (``340 AD`` three forty), quarters (``3Q21`` the third quarter of
  twenty-one), a code's section with its letter (``401(k)`` four oh-one).

No grammar of another project is copied: the tables are ordinary English readings.
"""

from __future__ import annotations

import re
from typing import Callable

from . import addresses
from .numerals import (MONTHS, NUMBER, SPOKEN_DIGITS, cardinal, digits, number_words,
                      ordinal, spell)


__all__ = ["CURRENCIES", "COUNTRY_PREFIXES", "SCALES", "UNITS", "PER_UNITS", "SPACED_UNITS",
           "LENGTHS", "PER",
           "MONTH_NAMES", "WORD_MONTHS", "fraction_said", "fraction_words", "ROWS", "START",
           "PATTERN", "COMPILED", "HANDLERS"]

#: Currency symbol -> (one, several, one hundredth, several hundredths).
CURRENCIES = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euro", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "₹": ("rupee", "rupees", "paisa", "paise"),
    "¥": ("yen", "yen", "sen", "sen"),
    "₩": ("won", "won", "jeon", "jeon"),
    "₽": ("ruble", "rubles", "kopek", "kopeks"),
    "₺": ("lira", "lira", "kurus", "kurus"),
    "₦": ("naira", "naira", "kobo", "kobo"),
    "₱": ("peso", "pesos", "centavo", "centavos"),
    "₪": ("shekel", "shekels", "agora", "agorot"),
    "฿": ("baht", "baht", "satang", "satang"),
    "₫": ("dong", "dong", "xu", "xu"),
    "₴": ("hryvnia", "hryvnias", "kopiyka", "kopiyky"),
    "₡": ("colon", "colones", "centimo", "centimos"),
}
#: Country prefixes of a dollar sign (``US$``, ``A$``): said before the currency's name.
COUNTRY_PREFIXES = {"us": "us", "a": "australian", "au": "australian", "c": "canadian",
                    "ca": "canadian", "nz": "new zealand", "hk": "hong kong", "s": "singapore"}
#: Scale words and their short forms after an amount.
SCALES = {"thousand": "thousand", "k": "thousand", "million": "million", "m": "million",
          "mn": "million", "mln": "million", "billion": "billion", "b": "billion",
          "bn": "billion", "trillion": "trillion", "t": "trillion", "tn": "trillion"}
#: What follows "per" after a slash: ``/mo`` per month.
PER = {"mo": "month", "month": "month", "yr": "year", "year": "year", "wk": "week",
       "week": "week", "d": "day", "day": "day", "hr": "hour", "h": "hour", "hour": "hour",
       "min": "minute", "person": "person", "head": "head", "unit": "unit", "kg": "kilogram",
       "lb": "pound", "night": "night"}

#: Unit symbol (lower case, as matched) -> (one, several). Metric prefixes are written out.
UNITS = {
    "mg": ("milligram", "milligrams"), "g": ("gram", "grams"), "kg": ("kilogram", "kilograms"),
    "t": ("tonne", "tonnes"), "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "nm": ("nanometer", "nanometers"), "μm": ("micrometer", "micrometers"),
    "mm": ("millimeter", "millimeters"), "cm": ("centimeter", "centimeters"),
    "m": ("meter", "meters"), "km": ("kilometer", "kilometers"),
    "in": ("inch", "inches"), "ft": ("foot", "feet"), "yd": ("yard", "yards"),
    "mi": ("mile", "miles"),
    "ml": ("milliliter", "milliliters"), "cl": ("centiliter", "centiliters"),
    "dl": ("deciliter", "deciliters"), "l": ("liter", "liters"),
    "gal": ("gallon", "gallons"), "qt": ("quart", "quarts"), "pt": ("pint", "pints"),
    "tsp": ("teaspoon", "teaspoons"), "tbsp": ("tablespoon", "tablespoons"),
    "ns": ("nanosecond", "nanoseconds"), "μs": ("microsecond", "microseconds"),
    "ms": ("millisecond", "milliseconds"),
    "sec": ("second", "seconds"), "secs": ("second", "seconds"),
    "min": ("minute", "minutes"), "mins": ("minute", "minutes"),
    "h": ("hour", "hours"), "hr": ("hour", "hours"), "hrs": ("hour", "hours"),
    "mph": ("mile per hour", "miles per hour"), "kph": ("kilometer per hour",
                                                         "kilometers per hour"),
    "kmh": ("kilometer per hour", "kilometers per hour"),
    "b": ("byte", "bytes"), "kb": ("kilobyte", "kilobytes"), "mb": ("megabyte", "megabytes"),
    "gb": ("gigabyte", "gigabytes"), "tb": ("terabyte", "terabytes"),
    "kbps": ("kilobit per second", "kilobits per second"),
    "mbps": ("megabit per second", "megabits per second"),
    "gbps": ("gigabit per second", "gigabits per second"),
    "hz": ("hertz", "hertz"), "khz": ("kilohertz", "kilohertz"),
    "mhz": ("megahertz", "megahertz"), "ghz": ("gigahertz", "gigahertz"),
    "w": ("watt", "watts"), "kw": ("kilowatt", "kilowatts"), "mw": ("megawatt", "megawatts"),
    "gw": ("gigawatt", "gigawatts"), "kwh": ("kilowatt hour", "kilowatt hours"),
    "v": ("volt", "volts"), "kv": ("kilovolt", "kilovolts"), "mah": ("milliamp hour",
                                                                   "milliamp hours"),
    "ha": ("hectare", "hectares"), "ac": ("acre", "acres"),
    "cal": ("calorie", "calories"), "kcal": ("kilocalorie", "kilocalories"),
    "°c": ("degree celsius", "degrees celsius"), "°f": ("degree fahrenheit",
                                                        "degrees fahrenheit"),
    "ºc": ("degree celsius", "degrees celsius"), "ºf": ("degree fahrenheit",
                                                        "degrees fahrenheit"),
    "°": ("degree", "degrees"), "º": ("degree", "degrees"),
    "psi": ("p s i", "p s i"), "rpm": ("r p m", "r p m"), "cc": ("c c", "c c"),
    '"': ("inch", "inches"),
}
#: Unit symbols read only after a slash, where the symbol can be nothing else: ``m/s``
#: meters per second (alone, ``s`` is a letter, a plural's or a decade's).
PER_UNITS = {**UNITS, "s": ("second", "seconds")}
#: Units that may stand after a space (``5 kg``); the others (one letter, or an English
#: word: ``in``, ``st``) only against their number (``5m``).
SPACED_UNITS = frozenset(u for u in UNITS if len(u.lstrip("°º")) > 1 or u[0] in "°º"
                         ) - {"in", "st", "pt", "ms", "ac", "ha", "cal", "min", "mins",
                              "b", "t", "h", "g", "l", "m", "v", "w"}

MONTH_NAMES = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4,
    "apr": 4, "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8,
    "september": 9, "sept": 9, "sep": 9, "october": 10, "oct": 10, "november": 11,
    "nov": 11, "december": 12, "dec": 12}


def _alternatives(words: object) -> str:
    """A regex alternation of ``words``, longest first, each escaped."""
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))  # type: ignore


# -------------------------------------------------------------- numbers said

def _year(written: str) -> list[str]:
    return number_words(written)


# ------------------------------------------------------------------ money

_NUMBER = NUMBER
_SYMBOLS = "".join(re.escape(c) for c in CURRENCIES)
_SCALE = rf"(?:{_alternatives(SCALES)})(?![^\W\d_])"
_MONEY = (rf"(?P<money_sign>(?<![\w.])-)?(?P<money_country>(?<![^\W\d_])"
          rf"(?:{_alternatives(COUNTRY_PREFIXES)})(?=\$))?(?P<money_symbol>[{_SYMBOLS}])\s?"
          rf"(?P<money_amount>{_NUMBER})(?:\s?(?P<money_scale>{_SCALE}))?"
          rf"(?:\s?[-–]\s?[{_SYMBOLS}]?(?P<money_to>{_NUMBER})"
          rf"(?:\s?(?P<money_to_scale>{_SCALE}))?)?"
          rf"(?:/(?P<money_per>{_alternatives(PER)})(?![^\W_]))?")


def _amount(amount: str, scale: str | None, names: tuple[str, ...], country: str) -> list[str]:
    """One amount of a currency: its whole units and hundredths, or a number of units."""
    one, several, hundredth, hundredths = names

    def unit_of(single: bool) -> list[str]:
        return ([country] if country else []) + (one if single else several).split()

    whole, _, fraction = amount.replace(",", "").partition(".")
    if scale:
        return cardinal(amount) + [SCALES[scale.lower()]] + unit_of(False)
    if len(fraction.rstrip("0")) > 2:                      # $20.506: a number of dollars
        return cardinal(amount) + unit_of(False)
    cents = int((fraction + "00")[:2]) if fraction else 0
    words: list[str] = []
    units = whole.lstrip("0")                  # no int() of a number of thousands of digits
    if units or not cents:
        words = cardinal(whole or "0") + unit_of(units == "1")
    if cents:
        words += (["and"] if words else []) + cardinal(str(cents)) + (
            hundredth if cents == 1 else hundredths).split()
    return words


def _money(m: re.Match[str]) -> list[str]:
    names = CURRENCIES[m.group("money_symbol")]
    country = COUNTRY_PREFIXES.get((m.group("money_country") or "").lower(), "")
    words = ["minus"] if m.group("money_sign") else []
    words += _amount(m.group("money_amount"), m.group("money_scale"), names, country)
    if m.group("money_to"):
        words += ["to"] + _amount(m.group("money_to"), m.group("money_to_scale"), names,
                                  country)
    if m.group("money_per"):
        words += ["per", PER[m.group("money_per").lower()]]
    return words


# ---------------------------------------------------------------- measures

_UNIT = _alternatives(UNITS)
_SPACED = _alternatives(SPACED_UNITS)
_PER_UNIT_SYMBOL = _alternatives(PER_UNITS)
_POWER = r"(?P<{0}_power>[²³]|(?<=[^\W\d_])[23](?!\d))?"
_MEASURE = (rf"(?P<measure_sign>(?<![\w.])-)?(?:(?<![\w./])(?:(?P<measure_whole>\d+)\s)?"
            rf"(?P<measure_num>\d+)/(?P<measure_den>\d+)"
            rf"|(?P<measure_amount>(?<![\w.])(?:{_NUMBER})))"
            rf"(?:\s?[-–]\s?(?P<measure_to>{_NUMBER}))?"
            rf"(?:\s(?P<measure_scale>thousand|million|billion))?"
            rf"(?:(?P<measure_unit>{_UNIT}){_POWER.format('measure')}"
            rf"|\s(?P<measure_spaced>{_SPACED}){_POWER.format('measure_spaced')}"
            rf"|\s(?P<measure_over>{_UNIT})(?=/(?:{_PER_UNIT_SYMBOL})[²³23]?(?![^\W_])))"
            rf"(?:\s?/\s?(?P<measure_per>{_PER_UNIT_SYMBOL})(?P<measure_per_power>[²³]|[23])?)?"
            rf"(?![^\W_])")
_PER_UNIT = (rf"(?P<per_amount>(?<![\w./])(?:{_NUMBER}))/(?P<per_symbol>{_UNIT})(?![^\W_])")
_POWERS = {"2": "square", "²": "square", "3": "cubic", "³": "cubic"}


def _unit(symbol: str, several: bool) -> list[str]:
    return PER_UNITS[symbol.lower()][several].split()


def _measure(m: re.Match[str]) -> list[str] | None:
    if m.group("measure_unit") == '"' and m.string.count('"', 0, m.start()) % 2:
        return None                     # "size 7": a quotation's closing mark, no inches
    amount = m.group("measure_amount") or ""
    said = cardinal(amount) if amount else fraction_said(            # 4 1/2 lbs
        m.group("measure_whole"), m.group("measure_num"), m.group("measure_den"))
    if said is None:
        return None
    words = (["minus"] if m.group("measure_sign") else []) + said
    if m.group("measure_to"):
        words += ["to"] + cardinal(m.group("measure_to"))
    if m.group("measure_scale"):
        words.append(m.group("measure_scale").lower())
    symbol = m.group("measure_unit") or m.group("measure_spaced") or m.group("measure_over")
    power = m.group("measure_power") or m.group("measure_spaced_power")
    one = amount == "1" and not m.group("measure_to") and not m.group("measure_scale")
    words += ([_POWERS[power]] if power else []) + _unit(symbol, not one)
    if m.group("measure_per"):
        words += ["per"] + _power(m.group("measure_per"), m.group("measure_per_power"))
    return words


#: Units of length: a power of one is an area or a volume (``kg/m³`` per cubic meter);
#: of another, the unit squared (``m/s²`` per second squared).
LENGTHS = frozenset({"nm", "μm", "mm", "cm", "m", "km", "in", "ft", "yd", "mi"})


def _power(symbol: str, power: str | None) -> list[str]:
    """One unit after "per", with its power: ``m2`` square meter, ``s2`` second squared."""
    unit = _unit(symbol, False)
    if not power:
        return unit
    if symbol.lower() in LENGTHS:
        return [_POWERS[power]] + unit
    return unit + [{"square": "squared", "cubic": "cubed"}[_POWERS[power]]]


def _per_unit(m: re.Match[str]) -> list[str]:
    return cardinal(m.group("per_amount")) + ["per"] + _unit(m.group("per_symbol"), False)


# --------------------------------------------------------------- telephone

_PHONE = (r"(?<![\w.+-])(?:\+(?P<phone_country>\d{1,3})[\s.-]?)?"
          r"(?:\((?P<phone_area>\d{3})\)[\s-]?|(?P<phone_area_plain>\d{3})(?P<phone_sep>[-.\s]))"
          r"(?P<phone_main>\d{3}(?P=phone_sep)?[-.]?\d{4})"
          r"(?:(?P<phone_ext>\s?(?:x|ext\.?|extension)\s?|-)(?P<phone_extension>\d{1,5}))?"
          r"(?![\w.-]\d)")
_INTERNATIONAL = (r"(?<![\w+])\+(?P<intl_country>\d{1,3})"
                  r"(?P<intl_rest>(?:[\s.-]\d{1,4}){2,5})(?![\w.-]?\d)")
_SSN = r"(?<![\w.-])(?P<ssn>\d{3}-\d{2}-\d{4})(?![\w-])"
_IP = r"(?<![\w.])(?P<ip>\d{1,3}(?:\.\d{1,3}){3})(?![\w.]\w)"


def _phone(m: re.Match[str]) -> list[str]:
    words = (["plus"] + digits(m.group("phone_country"))) if m.group("phone_country") else []
    area = m.group("phone_area") or m.group("phone_area_plain")
    words += digits(area) + digits(m.group("phone_main"))
    if m.group("phone_extension"):
        said = [] if m.group("phone_ext") == "-" else ["extension"]
        words += said + digits(m.group("phone_extension"))
    return words


def _international(m: re.Match[str]) -> list[str]:
    return ["plus"] + digits(m.group("intl_country")) + digits(m.group("intl_rest"))


def _ip(m: re.Match[str]) -> list[str]:
    return [w for i, part in enumerate(m.group("ip").split("."))
            for w in (["dot"] if i else []) + digits(part)]


# ------------------------------------------------------------------- dates

_MONTH = _alternatives(MONTH_NAMES)
_DAY = r"3[01]|[12]\d|0?[1-9]"
_WRITTEN_DATE = (rf"(?<![^\W\d_])(?P<wd_month>{_MONTH})(?:\.|(?![^\W\d_]))[\s-]?\s*"
                 rf"(?P<wd_day>{_DAY})(?:st|nd|rd|th)?(?!\d|[.,:]\d|\s?(?:%|[ap]\.?m\b))"
                 rf"(?:,?[\s-]\s*(?P<wd_year>\d{{4}})(?!\d))?(?P<wd_s>'s\b)?")
_DAY_MONTH = (rf"(?:(?P<dm_the>the)\s)?(?<![\w.])(?P<dm_day>{_DAY})(?:st|nd|rd|th)?\s"
              rf"(?:of\s)?(?P<dm_month>{_MONTH})(?:\.|(?![^\W\d_]))"
              rf"(?:,?\s(?P<dm_year>\d{{4}})(?!\d))?")
_NUMERIC_DATE = (r"(?<![\w./-])(?:(?P<nd_y>\d{4})(?P<nd_s1>[/.-])(?P<nd_ym>1[0-2]|0?[1-9])"
                 r"(?P=nd_s1)(?P<nd_yd>3[01]|[12]\d|0?[1-9])"
                 r"|(?P<nd_a>\d{1,2})(?P<nd_s2>[.-])(?P<nd_b>\d{1,2})(?P=nd_s2)(?P<nd_year>\d{4}))"
                 r"(?![\w/.-]\w)")


def _month_day(month: int, day: int) -> list[str]:
    return [MONTHS[month - 1]] + ordinal(day)


#: Month names that are also everyday words: a date only when capitalised or with a year
#: (``all 3 may come``, ``you may 5 times`` are no dates).
WORD_MONTHS = frozenset({"may", "march"})


def _written_date(m: re.Match[str]) -> list[str] | None:
    if m.group("wd_month") in WORD_MONTHS and not m.group("wd_year"):
        return None
    words = _month_day(MONTH_NAMES[m.group("wd_month").lower()], int(m.group("wd_day")))
    words += _year(m.group("wd_year")) if m.group("wd_year") else []
    return words[:-1] + [words[-1] + "'s"] if m.group("wd_s") else words   # May 3rd's


def _day_month(m: re.Match[str]) -> list[str] | None:
    if m.group("dm_month") in WORD_MONTHS and not m.group("dm_year"):
        return None
    words = ["the"] + ordinal(int(m.group("dm_day"))) + [
        "of", MONTHS[MONTH_NAMES[m.group("dm_month").lower()] - 1]]
    return words + (_year(m.group("dm_year")) if m.group("dm_year") else [])


def _numeric_date(m: re.Match[str]) -> list[str] | None:
    if m.group("nd_y"):
        return _month_day(int(m.group("nd_ym")), int(m.group("nd_yd"))) + _year(m.group("nd_y"))
    a, b = int(m.group("nd_a")), int(m.group("nd_b"))
    month, day = (a, b) if a <= 12 else (b, a)
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    if a > 12:
        return ["the"] + ordinal(day) + ["of"] + _month_day(month, 1)[:1] + _year(
            m.group("nd_year"))
    return _month_day(month, day) + _year(m.group("nd_year"))


# --------------------------------------------------------------- fractions

_FRACTION = (r"(?<![\w/.,-])(?:(?P<fr_whole>\d+)\s)?(?P<fr_num>\d+)/(?P<fr_den>\d+)"
             r"(?P<fr_suffix>st|nd|rd|th)?(?![\w/]|[.,]\d)")


def fraction_words(numerator: str, denominator: str) -> list[str]:
    """``3/4`` three quarters, ``1/2`` one half, ``2/3`` two thirds, ``31/32`` thirty-one
    thirty-seconds, ``5/1`` five over one."""
    n, d = int(numerator), int(denominator)
    one = n == 1
    if d == 1:
        name = ["over", "one"]
    elif d == 2:
        name = ["half" if one else "halves"]
    elif d == 4:
        name = ["quarter" if one else "quarters"]
    else:
        name = [w for w in ordinal(d) if w != "and"]       # six hundred fortieths
        name = name if one else name[:-1] + [name[-1] + "s"]
    return cardinal(numerator) + name


def _fraction(m: re.Match[str]) -> list[str] | None:
    return fraction_said(m.group("fr_whole"), m.group("fr_num"), m.group("fr_den"))


def fraction_said(whole: str | None, num: str, den: str) -> list[str] | None:
    """A fraction (``n/d`` with ``n < d``, or a denominator of 1 to 4: halves, thirds,
    quarters) or a mixed number (``2 1/2`` two and a half); ``None`` for anything else
    (``24/7``). A month and day without a year (``7/16``) is read as a fraction: a date is
    written with its year."""
    if max(len(num), len(den)) > SPOKEN_DIGITS:
        return None
    n, d = int(num), int(den)
    if d == 0 or n == 0 or not (n < d or d <= 4):
        return None
    if not whole:
        return fraction_words(num, den)
    said = fraction_words(num, den)
    if n == 1 and d > 1:
        said = ["a"] + said[1:]
    return cardinal(whole) + ["and"] + said


_DIMENSION = (rf"(?<![\w.])(?P<dim_a>{_NUMBER})\s?[x×]\s?(?P<dim_b>{_NUMBER})"
              rf"(?:\s?(?P<dim_unit>{_UNIT}){_POWER.format('dim')})?(?![^\W_])")


def _dimension(m: re.Match[str]) -> list[str]:
    words = cardinal(m.group("dim_a")) + ["by"] + cardinal(m.group("dim_b"))
    if m.group("dim_unit"):
        power = m.group("dim_power")
        words += ([_POWERS[power]] if power else []) + _unit(m.group("dim_unit"), True)
    return words


# ------------------------------------------------------------- years, quarters

#: Eras after a year: the year then read as a year (``340 AD`` three forty).
_ERA = r"(?-i:A\.?D\b|B\.?C\b|B\.?C\.?E\b|C\.?E\b)"
_ERA_YEAR = rf"(?<![\w.,])(?P<era_year>\d{{1,4}})(?=\s?{_ERA})"
_QUARTER = r"(?<![\w.])(?P<quarter>[1-4])Q(?P<quarter_year>\d{2}|\d{4})(?!\w)"

#: A section of a code with its subsection's letter (``401(k)``, ``501(c)(3)``): its three
#: digits read in pairs, as a name (four oh-one k).
_SECTION = r"(?<![\w.,])(?P<section>[1-9]\d{2})(?=\([a-z]\))"


def _quarter(m: re.Match[str]) -> list[str]:
    """``3Q21`` the third quarter of twenty-one."""
    return ["the"] + ordinal(int(m.group("quarter"))) + ["quarter", "of"] + _year(
        m.group("quarter_year"))


#: The classes, in the order they are tried: (name, pattern, words of a match). A
#: function that returns ``None`` gives the text back to the older alternatives (read as
#: its numbers and marks).
ROWS: list[tuple[str, str, Callable[[re.Match[str]], list[str] | None]]] = [
    ("money", _MONEY, _money),
    *addresses.ROWS,
    ("numeric_date", _NUMERIC_DATE, _numeric_date),
    ("ip_address", _IP, _ip),
    ("phone_number", _PHONE, _phone),
    ("international_number", _INTERNATIONAL, _international),
    ("ssn_number", _SSN, lambda m: digits(m.group("ssn"))),
    ("written_date", _WRITTEN_DATE, _written_date),
    ("dimension", _DIMENSION, _dimension),
    ("era_year", _ERA_YEAR, lambda m: spell(int(m.group("era_year")), to="year").split()),
    ("quarter", _QUARTER, _quarter),
    ("section_code", _SECTION, lambda m: spell(int(m.group("section")), to="year").split()),
    ("number_sign", r"(?<![\w.])no\.(?=\s?\d)", lambda m: ["number"]),
    ("day_month", _DAY_MONTH, _day_month),
    ("measure", _MEASURE, _measure),
    ("fraction", _FRACTION, _fraction),
    ("per_unit", _PER_UNIT, _per_unit),
]
#: Where a row can start: a cheap test that lets every other word pass the rows by. A
#: digit, a sign, a currency symbol, after a comma, or a word of a few letters followed by
#: a number (``Nov. 3``, ``the 3rd``, ``No. 5``, ``US$``).
START = rf"(?=[\d(+.\-{_SYMBOLS}]|(?<=,\s)|[a-z]{{2,9}}\.?[\s-]{{0,3}}\d|[a-z]{{1,2}}\$)"
def _locating(pattern: str) -> str:
    """``pattern`` with its named groups made non-capturing (those a back-reference names
    kept): the big alternation only finds where a row matches, and the row's own compiled
    pattern reads its parts (fewer groups make every other word's match cheaper)."""
    kept = set(re.findall(r"\(\?P=(\w+)\)", pattern))
    return re.sub(r"\(\?P<(\w+)>", lambda g: g.group(0) if g.group(1) in kept else "(?:",
                  pattern)


#: The rows as one alternation, each wrapped in a group of its name, after :data:`START`.
PATTERN = START + "(?:" + "|".join(f"(?P<{name}>{_locating(pattern)})"
                                   for name, pattern, _ in ROWS) + ")"
#: Row name -> its own pattern, compiled (as the front end compiles the alternation).
COMPILED = {name: re.compile(pattern, re.VERBOSE | re.IGNORECASE)
            for name, pattern, _ in ROWS}


def _read(name: str, said: Callable[[re.Match[str]], list[str] | None]) -> Callable[
        [re.Match[str]], list[str] | None]:
    """``said`` on the row's own match at the place the alternation found."""
    def read(found: re.Match[str]) -> list[str] | None:
        m = COMPILED[name].match(found.string, found.start())
        return said(m) if m is not None and m.end() == found.end() else None
    return read


#: Row name -> its function, given the alternation's match.
HANDLERS = {name: _read(name, said) for name, _, said in ROWS}
