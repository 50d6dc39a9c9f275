"""The math of xpseq, written once against the Python array API standard.

Nothing here imports NumPy, JAX or PyTorch: every public function finds the namespace of
its array arguments with ``array_api_compat.array_namespace`` and works on NumPy, JAX,
PyTorch and ``array_api_strict`` arrays alike. Shapes are given in each docstring.
"""

from .attention import (
    additive_scores,
    attend,
    dot_scores,
    general_scores,
    multi_head_attention,
    scaled_dot_product_attention,
)
from .masking import log_softmax, logsumexp, masked_softmax, sequence_mask

__all__ = [
    "sequence_mask",
    "masked_softmax",
    "log_softmax",
    "logsumexp",
    "dot_scores",
    "general_scores",
    "additive_scores",
    "attend",
    "scaled_dot_product_attention",
    "multi_head_attention",
]
