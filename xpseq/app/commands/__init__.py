"""What each ``xpseq`` subcommand does, one module per subcommand (``cmd_<name>(args)``),
and what they share (:mod:`.common`: choosing the backend, loading a checkpoint or an
export as a Decoder, the toy and G2P data). The options and their defaults are
:mod:`xpseq.app.options`'; what ``train`` may write, :mod:`xpseq.app.outputs`; standard
input, :mod:`xpseq.app.stdin`; the parser, the exit codes and the one-line errors
:mod:`xpseq.app.cli`'s (which imports this package, never the other way round); a
:class:`~xpseq.app.errors.CommandError` is such a line.
"""

from .common import JAX_CACHE_BYTES, JAX_CACHE_ENV, TOY_DATA_LIMITS, jax_cache_dir
from .data import cmd_data
from .demo import cmd_demo, cmd_tour
from .evaluate import cmd_evaluate
from .g2p import G2P_NOTES_SHOWN, cmd_g2p
from .train import cmd_train
from .translate import HEATMAP_MAX_WORDS, TRANSLATE_CHUNK, cmd_heatmap, cmd_translate

__all__ = ["cmd_data", "cmd_demo", "cmd_evaluate", "cmd_g2p", "cmd_heatmap", "cmd_tour",
           "cmd_train", "cmd_translate", "G2P_NOTES_SHOWN", "HEATMAP_MAX_WORDS",
           "TRANSLATE_CHUNK", "TOY_DATA_LIMITS", "JAX_CACHE_BYTES", "JAX_CACHE_ENV",
           "jax_cache_dir"]
