"""The CMU Pronouncing Dictionary as the G2P front end reads it: :class:`Lexicon`."""

from __future__ import annotations

from xpseq.data.cmudict import read_cmudict

__all__ = ["Lexicon", "Entries"]

#: Lower-case word -> its pronunciations in the dictionary's order, each a tuple of phones.
Entries = dict[str, list[tuple[str, ...]]]


class Lexicon:
    """The dictionary, read on first use and kept: with the stress digits (``AH0``) or
    without them (``AH``), each read once.

    Examples
    --------
    >>> from xpseq.g2p.lexicon import Lexicon
    >>> words = Lexicon()
    >>> words.entries(stress=False)["read"]
    [('R', 'EH', 'D'), ('R', 'IY', 'D')]
    """

    def __init__(self) -> None:
        self._read: dict[bool, Entries] = {}

    def entries(self, stress: bool) -> Entries:
        """Word -> pronunciations, with the stress digits or without.

        Raises
        ------
        FileNotFoundError
            The dictionary's data file is missing (a broken installation).
        """
        if stress not in self._read:
            self._read[stress] = read_cmudict(stress=stress)
        return self._read[stress]
