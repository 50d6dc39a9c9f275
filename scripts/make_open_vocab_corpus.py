"""Write an open-vocabulary parallel corpus: sentences of random CMU-dictionary words, the
target each word in pig latin; the test sentences each hold words never seen in training.

Run: ``python -m scripts.make_open_vocab_corpus OUT_FOLDER [--train N] [--seed S]``
(needs the CMU dictionary: ``pip install "xpseq[g2p]"``). It writes ``train.tsv``,
``dev.tsv`` and ``test.tsv`` (source<TAB>target) through :mod:`xpseq.io.files`, and
prints how many test words training never saw. Then compare tokenisations side by side::

    xpseq train --task tsv --train OUT/train.tsv --dev OUT/dev.tsv --tokens word --out w.safetensors
    xpseq train ... --tokens char --out c.safetensors
    xpseq train ... --tokens bpe --vocab-size 500 --out b.safetensors
    xpseq evaluate w.safetensors --test OUT/test.tsv       (and c, b)

The words are the dictionary's plain ones (letters only, 3 to 7 of them), split into a
training pool and a held-out pool (a fifth). A training or dev sentence draws 3 to 6
words from the training pool; a test sentence draws from both pools, at least one word
held out. Pig latin: a word that starts with a vowel gets ``"way"`` at its end; else its
first consonants move to the end, followed by ``"ay"`` (``"string"`` -> ``"ingstray"``).
A word model cannot write a word it never saw; a character or subword model can.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

from xpseq.data.cmudict import read_cmudict
from xpseq.data.tsv import write_parallel_tsv

VOWELS = set("aeiou")


def pig_latin(word: str) -> str:
    """``word`` in pig latin (``"string"`` -> ``"ingstray"``, ``"apple"`` -> ``"appleway"``)."""
    if word[0] in VOWELS:
        return word + "way"
    i = next((i for i, c in enumerate(word) if c in VOWELS or (i and c == "y")), len(word))
    return word[i:] + word[:i] + "ay"


def sentences(rng: np.random.Generator, n: int, pools: list[list[str]],
              must: list[str] | None = None) -> list[tuple[list[str], list[str]]]:
    """``n`` pairs of 3 to 6 words drawn from ``pools`` (one of ``must`` in each)."""
    words = [w for pool in pools for w in pool]
    pairs = []
    for _ in range(n):
        source = [words[j] for j in rng.integers(0, len(words), int(rng.integers(3, 7)))]
        if must:
            source[int(rng.integers(0, len(source)))] = must[int(rng.integers(0, len(must)))]
        pairs.append((source, [pig_latin(w) for w in source]))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path, help="the folder of the three files")
    parser.add_argument("--train", type=int, default=4000, help="training sentences")
    parser.add_argument("--dev", type=int, default=200, help="dev sentences")
    parser.add_argument("--test", type=int, default=300, help="test sentences")
    parser.add_argument("--words", type=int, default=3000, help="distinct words drawn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="replace the files")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    plain = sorted(w for w in read_cmudict() if w.isalpha() and w.isascii() and 3 <= len(w) <= 7)
    chosen = [plain[i] for i in rng.choice(len(plain), size=args.words, replace=False)]
    held = chosen[: args.words // 5]
    seen = chosen[args.words // 5:]
    parts = {"train": sentences(rng, args.train, [seen]),
             "dev": sentences(rng, args.dev, [seen]),
             "test": sentences(rng, args.test, [seen, held], must=held)}
    args.out.mkdir(parents=True, exist_ok=True)
    for name, pairs in parts.items():
        write_parallel_tsv(args.out / f"{name}.tsv", pairs, force=args.force)
    trained = {w for s, _ in parts["train"] for w in s}
    test_words = [w for s, _ in parts["test"] for w in s]
    unseen = sum(w not in trained for w in test_words)
    print(f"{args.out}: {len(parts['train'])} / {len(parts['dev'])} / {len(parts['test'])} "
          f"sentences; {len(trained)} distinct training words; {unseen} of the "
          f"{len(test_words)} test words ({100 * unseen / len(test_words):.0f} %) never "
          "seen in training")
    return 0


if __name__ == "__main__":
    sys.exit(main())
