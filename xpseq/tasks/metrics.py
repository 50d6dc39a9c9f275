"""Scoring translations: corpus BLEU (sacrebleu), exact match, and tables by length bucket;
scoring grapheme-to-phoneme output: edit distance, phone and word error rates.

BLEU comes from sacrebleu. Where the task is made of tokens (the toy task, G2P, token
lists from Python) it is scored with ``tokenize='none'``: the tokens are already words, so
sacrebleu only joins and splits them on spaces. Where a model translates text (a TSV
corpus: ``text`` the target's tokenisation, ``"word"``, ``"char"``, ``"bpe"`` or
``"unigram"``), the hypotheses and references are joined back into plain text
(:func:`xpseq.data.tokens.join`: subword pieces detokenised) and scored as
sacreBLEU scores text, with its standard tokenizer ``13a``: the score a reader compares
with published numbers. Char mode keeps word boundaries, so its joined text has its
spaces; only a char model of an older checkpoint (``"char-nospace"``, trained without
them) is scored with sacreBLEU's ``char`` tokenizer, as before (13a would read its whole
sentence as one word). Every score comes with sacrebleu's signature (settings
and version), to print beside it so a reader can reproduce it.

G2P (:func:`g2p_scores`) is scored as Sequitur and the G2P papers score it, against every
reference pronunciation of a word: a word is right if it equals any of them (WER), and its
phone errors are the edit distance to the closest one (PER).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

__all__ = ["Bleu", "corpus_bleu", "TEXT_TOKENIZERS", "exact_match", "format_table", "edit_distance",
           "G2PScores", "g2p_scores"]

Tokens = Sequence[str]


class Bleu(NamedTuple):
    """A corpus BLEU score (0-100) and sacrebleu's signature of how it was computed."""

    score: float
    signature: str


#: sacreBLEU's tokenizer for the joined text of each target tokenisation.
TEXT_TOKENIZERS = {"word": "13a", "char": "13a", "bpe": "13a", "unigram": "13a",
                   "char-nospace": "char"}


def corpus_bleu(hypotheses: Sequence[Tokens], references: Sequence[Tokens], *,
                text: str | None = None) -> Bleu:
    """Corpus BLEU of token lists against one reference each.

    Parameters
    ----------
    hypotheses, references : sequences of token lists, as long as each other
    text : ``None`` or the target's mode (a key of :data:`TEXT_TOKENIZERS`)
        ``None``: the tokens are scored as they are (sacrebleu, ``tokenize='none'``).
        Else the target's tokenisation: each list is joined into its plain text
        (:func:`xpseq.data.tokens.join`; a subword side is a
        :class:`xpseq.data.tokens.Side` that carries its tokenizer) and scored with
        sacreBLEU's tokenizer for it (:data:`TEXT_TOKENIZERS`: ``13a``; ``char`` for
        ``"char-nospace"``).

    Raises
    ------
    ValueError
        Different numbers of hypotheses and references, no sentences, or a bad ``text``.
    """
    from sacrebleu.metrics import BLEU

    from xpseq.data import tokens

    if text is not None and text not in TEXT_TOKENIZERS:
        raise ValueError(f"corpus_bleu: text must be None, 'word' or 'char' (or 'bpe', "
                         f"'unigram'), got {text!r}")

    if len(hypotheses) != len(references):
        raise ValueError(f"corpus_bleu: {len(hypotheses)} hypotheses but {len(references)} "
                         "references")
    if not hypotheses:
        raise ValueError("corpus_bleu: no sentences to score")
    mode = text or "word"
    metric = BLEU(tokenize="none" if text is None else TEXT_TOKENIZERS[text])
    score = metric.corpus_score([tokens.join(h, mode) for h in hypotheses],
                                [[tokens.join(r, mode) for r in references]])
    value = float(score.score)
    # Every n-gram matched and no brevity penalty: exactly 100 (sacreBLEU's geometric mean,
    # exp(mean(log(100 c / t))), rounds it to 100.00000000000004).
    if score.bp == 1.0 and all(t > 0 and c == t for c, t in zip(score.counts, score.totals)):
        value = 100.0
    return Bleu(value, str(metric.get_signature()))


def exact_match(hypotheses: Sequence[Tokens], references: Sequence[Tokens]) -> float:
    """The share (0-1) of hypotheses equal to their reference, token for token."""
    if len(hypotheses) != len(references):
        raise ValueError(f"exact_match: {len(hypotheses)} hypotheses but {len(references)} "
                         "references")
    if not hypotheses:
        raise ValueError("exact_match: no sentences to score")
    return sum(list(h) == list(r) for h, r in zip(hypotheses, references)) / len(hypotheses)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table (also valid Markdown): numbers right-aligned, floats to 2 places."""
    def cell(x: object) -> str:
        return f"{x:.2f}" if isinstance(x, float) else str(x)

    cells = [[cell(x) for x in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(str(h).ljust(w) for h, w in zip(headers, widths)) + " |"
    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    body = ["| " + " | ".join(c.rjust(w) if c[:1].isdigit() or c[:1] == "-" else c.ljust(w)
                              for c, w in zip(r, widths)) + " |" for r in cells]
    return "\n".join([line, rule, *body])


def _token_list(x: object, where: str) -> list:
    """``x`` as a list of tokens; a string or a non-sequence is a TypeError naming ``where``."""
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{where} is a string; expected a list of tokens (e.g. phones)")
    if not isinstance(x, Sequence):
        raise TypeError(f"{where} is {type(x).__name__}; expected a list of tokens")
    return list(x)


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two token sequences: the fewest insertions, deletions
    and substitutions (each costing 1) that turn ``a`` into ``b``.

    Parameters
    ----------
    a, b : sequence of str (lengths m, n)
        Tokens compared with ``==``, e.g. phones ``["K", "AE", "T"]``. A plain string is
        refused, so that ``"K AE T"`` is not scored character by character.

    Returns
    -------
    int in ``[|m - n|, max(m, n)]``; 0 iff the sequences are equal. Symmetric. Time
    O(m n), memory O(n) (two rows of the dynamic programme).

    Raises
    ------
    TypeError
        ``a`` or ``b`` is a string or not a sequence.
    """
    a = _token_list(a, "edit_distance: a")
    b = _token_list(b, "edit_distance: b")
    previous = list(range(len(b) + 1))              # distances from a[:0] to b[:j]
    for i, x in enumerate(a, start=1):
        current = [i]                               # a[:i] to b[:0]: i deletions
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1,             # delete x
                               current[j - 1] + 1,          # insert y
                               previous[j - 1] + (x != y)))  # substitute (or match)
        previous = current
    return previous[-1]


class G2PScores(NamedTuple):
    """Grapheme-to-phoneme scores (see :func:`g2p_scores`).

    Attributes
    ----------
    per : float
        Phone error rate in percent: ``100 * phone_errors / reference_phones`` (can exceed
        100 when predictions insert many phones).
    wer : float
        Word error rate in percent: the share of words whose prediction equals none of
        their references.
    words : int
        The number of words scored.
    phone_errors : int
        The summed edit distance of each prediction to its closest reference.
    reference_phones : int
        The summed length of those closest references.
    """

    per: float
    wer: float
    words: int
    phone_errors: int
    reference_phones: int


def g2p_scores(predictions: Sequence[Sequence[str]],
               references: Sequence[Sequence[Sequence[str]]]) -> G2PScores:
    """Phone and word error rates of predicted pronunciations against all references.

    For each word the closest reference is the one at the smallest :func:`edit_distance`
    from the prediction; on a tie, the one that comes first in the word's reference list
    (this decides the PER denominator when tied references differ in length). Then

    * ``wer = 100 * (words whose prediction equals none of their references) / words``
    * ``per = 100 * sum(distance to the closest reference) / sum(len(closest reference))``

    as Sequitur (Bisani & Ney 2008) and the G2P papers score it: a word with several
    correct pronunciations is not penalised for producing any one of them.

    Parameters
    ----------
    predictions : sequence of sequence of str, length W
        One predicted phone list per word (may be empty: then every reference phone of
        the closest (shortest) reference is an error).
    references : sequence of sequence of sequence of str, length W
        For each word, a non-empty list of reference pronunciations, each a non-empty list
        of phones (e.g. :meth:`xpseq.data.cmudict.G2PSplit.references`).

    Returns
    -------
    :class:`G2PScores`.

    Raises
    ------
    TypeError
        ``predictions`` or ``references`` (or an entry of them) is a string or not a
        sequence.
    ValueError
        Different numbers of predictions and references, no words, a word without
        references, or an empty reference pronunciation. Messages name the argument and
        index, e.g. ``references[3]``.
    """
    for name, arg in (("predictions", predictions), ("references", references)):
        if isinstance(arg, (str, bytes)) or not isinstance(arg, Sequence):
            raise TypeError(f"g2p_scores: {name} must be a list (one entry per word), got "
                            f"{type(arg).__name__}")
    if len(predictions) != len(references):
        raise ValueError(f"g2p_scores: {len(predictions)} predictions but {len(references)} "
                         "references (one entry per word in each)")
    if not predictions:
        raise ValueError("g2p_scores: no words to score (predictions and references are "
                         "empty)")
    word_errors = phone_errors = reference_phones = 0
    for i, (prediction, refs) in enumerate(zip(predictions, references)):
        prediction = _token_list(prediction, f"g2p_scores: predictions[{i}]")
        if isinstance(refs, (str, bytes)) or not isinstance(refs, Sequence):
            raise TypeError(f"g2p_scores: references[{i}] must be a list of reference "
                            f"pronunciations, got {type(refs).__name__}")
        if not refs:
            raise ValueError(f"g2p_scores: references[{i}] is empty; every word needs at "
                             "least one reference pronunciation")
        best = None                                 # (distance, length) of the closest
        exact = False
        for j, ref in enumerate(refs):
            ref = _token_list(ref, f"g2p_scores: references[{i}][{j}]")
            if not ref:
                raise ValueError(f"g2p_scores: references[{i}][{j}] is an empty "
                                 "pronunciation")
            distance = edit_distance(prediction, ref)
            exact = exact or distance == 0
            if best is None or distance < best[0]:  # strict: a tie keeps the earlier one
                best = (distance, len(ref))
        assert best is not None                     # refs is not empty
        word_errors += not exact
        phone_errors += best[0]
        reference_phones += best[1]
    words = len(predictions)
    return G2PScores(per=100.0 * phone_errors / reference_phones,
                     wer=100.0 * word_errors / words, words=words,
                     phone_errors=phone_errors, reference_phones=reference_phones)
