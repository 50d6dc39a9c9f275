"""Decoding a trained model: greedy and beam search over its step function, on any backend.

The search loops themselves are core math (:mod:`xpseq.core.decoding`); this package runs
them over a model: :func:`search` decodes a batch of sources, :func:`to_lists` trims the
result per sentence; :func:`translate` decodes token lists with a :class:`Decoder`. A
:class:`Decoder` is a trained model ready to decode
(:class:`CheckpointDecoder`: parameters on a backend; an ONNX export on onnxruntime is the
other kind, :class:`xpseq.export.runtime.OnnxModel`).
"""

from .decode import MAX_BEAM, Ensemble, SearchOptions, options_for, run, search, to_lists
from .decoder import CheckpointDecoder, Decoder, LongSourceWarning, translate

__all__ = ["LongSourceWarning", "SearchOptions", "Ensemble", "search", "run", "to_lists",
           "options_for", "MAX_BEAM",
           "Decoder", "CheckpointDecoder", "translate"]
