"""The math of xpseq, written once against the Python array API standard.

Nothing here imports NumPy, JAX or PyTorch: every public function finds the namespace of
its array arguments with ``array_api_compat.array_namespace`` and works on NumPy, JAX,
PyTorch and ``array_api_strict`` arrays alike. Shapes are given in each docstring.

================  ==========================================================================
module            contents
================  ==========================================================================
``masking``       sequence_mask, masked_softmax, log_softmax, logsumexp
``attention``     dot / general / additive scores, attend, scaled dot-product, multi-head
``blockwise``     blockwise_attention: scaled dot-product attention by blocks with an
                  online softmax, in memory linear in the lengths
``layers``        linear, embedding, sigmoid, dropout, layer_norm, gelu, relu,
                  feed_forward, sinusoidal_positions
``recurrent``     lstm_cell, gru_cell, run_sequence (lengths honoured in both directions),
                  hand_derived_recurrence (the time loop with its hand-derived gradient)
``losses``        cross_entropy over real tokens
``optim``         adam, sgd, global_norm, clip_by_global_norm
``precision``     mixed precision: where bfloat16 is computed and float32 kept
``decoding``      greedy_search, beam_search (batched, jit-safe) over a pure step function
``vjp``           the hand-derived backward rules (how NumPy gets gradients)
``rules``         value_and_grad_by_rule: a function's attached rule run as its gradient
``kernels``       the unchecked kernels under the checked functions above (a named internal
                  API for the models: no validation, ``xp`` passed in)
``delegation``    where a library's own kernel replaces the generic code (sigmoid, relu,
                  fused attention), decided by the arrays' namespace alone
``shapes``        the idioms for arrays of unknown sizes (a graph being recorded): reshape
                  targets, positions, rows, heads split without a reshape
``loops``         scan, the Python loop (``lax.scan``'s semantics)
``tree``          flatten / unflatten / map_leaves over nested dicts, lists and tuples
``checks``        the argument checks of the public functions
``values``        the one door for options: integer, real, flag, choice, dtype_name
================  ==========================================================================
"""

from . import (
               attention,
               blockwise,
               decoding,
               delegation,
               kernels,
               layers,
               losses,
               masking,
               optim,
               precision,
               recurrent,
               shapes,
               vjp,
)
from .attention import (
               additive_scores,
               attend,
               dot_scores,
               general_scores,
               multi_head_attention,
               scaled_dot_product_attention,
)
from .blockwise import blockwise_attention
from .decoding import beam_search, greedy_search, tile_beams
from .layers import (
               dropout,
               embedding,
               feed_forward,
               gelu,
               layer_norm,
               linear,
               relu,
               sigmoid,
               sinusoidal_positions,
)
from .loops import scan
from .losses import cross_entropy
from .masking import log_softmax, logsumexp, masked_softmax, sequence_mask
from .recurrent import gru_cell, lstm_cell, run_sequence

__all__ = [
    "sequence_mask", "masked_softmax", "log_softmax", "logsumexp",
    "dot_scores", "general_scores", "additive_scores", "attend",
    "scaled_dot_product_attention", "multi_head_attention", "blockwise_attention",
    "linear", "embedding", "sigmoid", "dropout", "layer_norm", "gelu", "relu", "feed_forward",
    "sinusoidal_positions",
    "lstm_cell", "gru_cell", "run_sequence",
    "cross_entropy", "scan", "greedy_search", "beam_search", "tile_beams",
    "attention", "decoding", "delegation", "kernels", "layers", "losses", "masking", "optim",
    "precision", "recurrent", "shapes", "vjp",
]
