"""Scoring translations: corpus BLEU (sacrebleu), exact match, and tables by length bucket.

BLEU comes from sacrebleu with ``tokenize='none'``: the tokens are already words, so
sacrebleu only joins and splits them on spaces. Every score comes with sacrebleu's signature
(settings and version), to print beside it so a reader can reproduce it.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

__all__ = ["Bleu", "corpus_bleu", "exact_match", "format_table"]

Tokens = Sequence[str]


class Bleu(NamedTuple):
    """A corpus BLEU score (0-100) and sacrebleu's signature of how it was computed."""

    score: float
    signature: str


def corpus_bleu(hypotheses: Sequence[Tokens], references: Sequence[Tokens]) -> Bleu:
    """Corpus BLEU of token lists against one reference each (sacrebleu, ``tokenize='none'``).

    Raises
    ------
    ValueError
        Different numbers of hypotheses and references, or no sentences.
    """
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"corpus_bleu: {len(hypotheses)} hypotheses but {len(references)} "
                         "references")
    if not hypotheses:
        raise ValueError("corpus_bleu: no sentences to score")
    metric = BLEU(tokenize="none")
    score = metric.corpus_score([" ".join(h) for h in hypotheses],
                                [[" ".join(r) for r in references]])
    return Bleu(float(score.score), str(metric.get_signature()))


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
