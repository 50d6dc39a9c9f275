"""The ``xpseq`` subcommands, one module each, and what they share.

Each module owns its subcommand whole, through one protocol:

- ``add_parser(sub) -> parser`` builds its parser and options (from the shared ones of
  :mod:`xpseq.app.options`) and sets ``func=run``, ``parser=`` the parser and, where there
  is one, ``check=check`` as its defaults (``more=`` names the positional that words
  after an option join);
- ``defaults(args, argv) -> dict | None`` (optional) reads defaults of the options from a
  file or a stored run (``train --config``, ``--resume``): the command applies them with
  the parser's ``set_defaults`` and parses ``argv`` again, so that typed options win. It
  raises :class:`~xpseq.app.errors.CommandError` or ``ValueError`` (exit code 1) or
  ``argparse.ArgumentError`` (a value its option refuses: exit code 2);
- ``check(args)`` (optional) refuses options that do not go together;
- ``run(args) -> exit code`` does the work; ``args.invocation`` is the call's
  :class:`~.common.Invocation` (the command line and the entry point, for a run that
  starts itself again in other processes).

:mod:`xpseq.app.cli` only puts the parsers together (:data:`COMMANDS`, in the order of
``xpseq --help``), parses, dispatches and turns failures into one-line errors; it imports
this package, never the other way round, and names no subcommand.

============================  ==============================================================
module                        subcommand
============================  ==============================================================
:mod:`.demo`                  ``demo``: the attention experiment on the toy task
:mod:`.train`                 ``train`` (its options: :mod:`.train_options`; ``--config``
                              and ``--resume``: :mod:`.train_config`; what a Ctrl-C
                              leaves: :mod:`.train_watch`)
:mod:`.translate`             ``translate``: sentences of the arguments or of standard input
:mod:`.g2p`                   ``g2p``: pronunciations of words or running text
:mod:`.evaluate`              ``evaluate``: BLEU and exact match; PER and WER for G2P
:mod:`.data`                  ``data``: a task's data as TSV
:mod:`.export`                ``export``: a checkpoint as ONNX graphs
:mod:`.heatmap`               ``heatmap``: one translation's attention
:mod:`.tour`                  ``tour``: the autodiff tour
:mod:`.common`                what several share: the backend, a checkpoint or an export as
                              a Decoder, search options, notes, the toy and G2P data
============================  ==============================================================
"""

from . import data, demo, evaluate, export, g2p, heatmap, tour, train, translate
from .common import JAX_CACHE_BYTES, JAX_CACHE_ENV, TOY_DATA_LIMITS, Invocation, jax_cache_dir
from .g2p import G2P_NOTES_SHOWN
from .heatmap import HEATMAP_MAX_WORDS
from .translate import TRANSLATE_CHUNK

__all__ = ["COMMANDS", "Invocation", "G2P_NOTES_SHOWN", "HEATMAP_MAX_WORDS",
           "TRANSLATE_CHUNK", "TOY_DATA_LIMITS", "JAX_CACHE_BYTES", "JAX_CACHE_ENV", "jax_cache_dir"]

#: The subcommands' modules, in the order ``xpseq --help`` lists them.
COMMANDS = (demo, train, translate, g2p, evaluate, data, export, heatmap, tour)
