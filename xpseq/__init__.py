"""xpseq: sequence-to-sequence learning with attention, written once against the Python
array API standard and run unchanged on NumPy, JAX and PyTorch.

==================  ======================================================================
package             what it holds
==================  ======================================================================
``xpseq.core``      the math: masking, attention, layers, cells, losses, optimisers,
                    search loops, hand-derived backward rules (``vjp``), kernels
``xpseq.backends``  what each library adds to the standard: conversion, gradients, jit,
                    scan, custom_vjp
``xpseq.models``    model kinds behind one protocol, and their registry (``rnn``)
``xpseq.data``      toy task, CMU dictionary, TSV corpora, vocabularies, batches
``xpseq.train``     the training step and loop, schedules, callbacks, checkpoints
``xpseq.search``    greedy and beam search over a model
``xpseq.tasks``     experiments: the toy translator, G2P, metrics
``xpseq.app``       the ``xpseq`` command, the demo, plots
``xpseq.tour``      the autodiff tour
``xpseq.testing``   the parity tolerances and comparison helpers
==================  ======================================================================
"""

from . import backends, core

__all__ = ["backends", "core", "__version__"]
__version__ = "0.1.0.dev0"
