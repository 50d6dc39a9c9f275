"""Data: token ids to padded, length-bucketed NumPy batches.

The toy translation language, the CMU dictionary and TSV corpora arrive with issues #4 and
#7; :mod:`xpseq.data.batching` is what training needs now.
"""

from .batching import BOS_ID, EOS_ID, PAD_ID, UNK_ID, make_batches

__all__ = ["make_batches", "PAD_ID", "BOS_ID", "EOS_ID", "UNK_ID"]
