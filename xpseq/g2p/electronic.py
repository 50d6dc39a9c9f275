"""E-mail and web addresses as they are read out: :func:`parts`.

* part by part: ``dot``, ``at``, ``slash``, ``dash`` between its words, a scheme by its
  letters (``https://`` h t t p s colon slash slash);
* its digits one by one (a round number as a number: ``rtx-6000`` six thousand);
* ``www`` and a part without a vowel letter letter by letter;
* a part that runs letters without a vowel into words, split into them, the letters
  said one by one (:func:`segment`: ``hrportal`` h r portal, ``rtxsupport`` r t x
  support); a part of words alone is kept whole, as it is written (``helpdesk``,
  ``nvidia``): its words are said as one;
* the marks of a mailbox's name (``&`` ampersand) and a final slash too.

The words come from the CMU dictionary (:class:`xpseq.g2p.lexicon.Lexicon`), read on
the first address that needs it.
"""

from __future__ import annotations

import functools
import re

from .numerals import digits, number_words

__all__ = ["parts", "segment", "round_number"]

_SCHEME = re.compile(r"(https?|ftp|file)://", re.IGNORECASE)
_PIECE = re.compile(r"[a-z]+|\d+|[.@/_+&-]")
_VOWEL = re.compile(r"[aeiouy]")
#: The marks of an address, said by their names.
_MARKS = {".": "dot", "@": "at", "/": "slash", "-": "dash", "_": "underscore",
          "+": "plus", "&": "ampersand"}
#: Words of two letters that a run of words may hold (the dictionary's other two-letter
#: entries are mostly letters and short forms: ``ai``, ``eq``).
_SHORT_WORDS = frozenset({"my", "me", "we", "us", "go", "in", "on", "to", "of", "it", "up",
                          "no", "do", "at", "by", "is", "or", "an", "so"})
#: The longest run of letters without a vowel said letter by letter inside a part
#: (``rtx`` in ``rtxsupport``).
_SPELLED = 4


def parts(address: str) -> list[str]:
    """The words of an e-mail or web address, as the module's docstring says.

    >>> " ".join(parts("help-desk@mail.example.org"))
    'help dash desk at mail dot example dot org'
    """
    scheme = _SCHEME.match(address)
    name = scheme.group(1).lower() if scheme else ""
    out: list[str] = ([name] if name == "file" else list(name)) + (
        ["colon", "slash", "slash"] if scheme else [])
    address = address[scheme.end():] if scheme else address
    for piece in _PIECE.findall(address.lower()):
        if piece in _MARKS:
            out.append(_MARKS[piece])
        elif piece.isdigit():
            out += number_words(piece, year=False) if round_number(piece) else digits(piece)
        elif piece == "www" or not _VOWEL.search(piece):
            out += list(piece)
        else:
            split = segment(piece)              # rtxsupport: r t x support
            out += list(split) if any(len(word) == 1 for word in split) else [piece]
    return out


def round_number(written: str) -> bool:
    """Whether the digits ``written`` make a round number (``6000``, ``300``): said as a
    number in a code or an address, where other digits are said one by one."""
    return len(written) >= 3 and written[0] != "0" and written.endswith("00")


@functools.lru_cache(maxsize=1)
def _words() -> frozenset[str]:
    """The dictionary's words of letters only (none where its file is missing: then no
    part is split)."""
    from .lexicon import Lexicon

    try:
        return frozenset(w for w in Lexicon().entries(False) if w.isalpha())
    except FileNotFoundError:
        return frozenset()


@functools.lru_cache(maxsize=4096)
def segment(piece: str) -> tuple[str, ...]:
    """A part of an address (lower-case letters) as its words: itself where it is a word of
    the dictionary or shorter than six letters, else the fewest words of the dictionary (of
    three letters or more, or of :data:`_SHORT_WORDS`) that spell it, a run of up to four
    letters without a vowel among them said letter by letter (of two splits as short, the
    one with the longer words first: ``salesteam`` sales team); itself where no split
    exists or the split has more parts than a third of its letters.

    >>> segment("customerservice"), segment("rtxsupport"), segment("zqpexuvor")
    (('customer', 'service'), ('r', 't', 'x', 'support'), ('zqpexuvor',))
    """
    if len(piece) < 6 or piece in _words():
        return (piece,)
    words = _words()
    # best[i]: (cost, split) of piece[:i]; a word costs 2, a spelled run 3
    best: list[tuple[int, list[str]] | None] = [(0, [])] + [None] * len(piece)
    for end in range(1, len(piece) + 1):
        for start in range(max(0, end - 24), end):
            before = best[start]
            if before is None:
                continue
            chunk = piece[start:end]
            if chunk in _SHORT_WORDS or (len(chunk) >= 3 and chunk in words):
                cost = 2
            elif len(chunk) <= _SPELLED and not _VOWEL.search(chunk):
                cost = 3
            else:
                continue
            cost_before, split = before
            now = best[end]
            if now is None or cost_before + cost <= now[0]:    # ties: longer words first
                best[end] = (cost_before + cost, split + [chunk])
    found = best[-1]
    if found is None or len(found[1]) > len(piece) // 3:
        return (piece,)
    return tuple(letter for chunk in found[1] for letter in (
        [chunk] if _VOWEL.search(chunk) else list(chunk)))
