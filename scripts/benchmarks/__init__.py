"""The sections of ``scripts/bench.py``, one module each, and what the measuring scripts
share.

================  ==========================================================================
module            contents
================  ==========================================================================
``context``       Context: the settings and the shared artefacts (task, batches, initial
                  and trained parameters, backends, the Transformer's set-up, the
                  ``train`` timings), each built on first use and kept
``shared``        Row and the results table, the environment, the implementations' labels,
                  batches on a backend, the timed loops, the matmul rate
``compile``       the jitted JAX step's compile time and retraces
``train``         training throughput against native PyTorch (and the timings ``flops``
                  and ``profile`` reuse)
``flops``         the training steps' GFLOP/s against a matmul's
``beam``          batched beam search against a per-sentence loop
``sdpa``          scaled dot-product attention against the libraries' own
``profile``       where the time goes (torch.profiler, JAX's gradient against its forward,
                  XLA's trace of the RNN step against Keras's)
``transformer``   the Transformer's training, GFLOP/s and searches
``parallel``      2 devices against 1 (a JAX mesh, a torch gloo group)
``g2p``           the shipped G2P model's decoding speed
``threads``       what ``xpseq --threads 2`` is worth against 1
``peers``         both model kinds against Keras 3 and Flax on JAX and native PyTorch under
                  ``torch.compile`` (``native_keras``, ``native_flax``, ``native_torch``)
``precision``     mixed bfloat16 training against float32, and the matmul rates
``scaling``       training throughput and peak memory against length, batch and width,
                  greedy decoding against batch, the length exponents, plots
``devices``       ``--device`` as each library spells it, the backend on it, waiting for its
                  results, a cold compile cache (``compare_backends.py``)
``comparison``    ``compare_backends.py``'s report: differences, speed-ups, the
                  environment, the table and the plots
================  ==========================================================================

Each section module (those of :data:`SECTIONS` and :data:`EXTRA_SECTIONS`) has
``run(context) -> list[Row]``; its docstring says what it measures and its targets. The package imports neither xpseq nor a framework when loaded: the entry
script sets the threads and ``XLA_FLAGS`` first. It is the subpackage
``scripts.benchmarks``, beside ``scripts._common`` and the peers ``native_torch``,
``native_keras`` and ``native_flax`` (which its modules import as ``from .. import``).
``page`` is not a section: it makes ``bench.py``'s part of the benchmarks page from the
recorded runs (``scripts.bench_page`` assembles the page).
"""

from __future__ import annotations

import importlib
import types

#: The sections ``bench.py`` runs by default, in the order they run.
SECTIONS = ("compile", "train", "flops", "beam", "sdpa")
#: Sections run only when ``--only`` names them (after the default ones, in this order).
EXTRA_SECTIONS = ("profile", "transformer", "parallel", "g2p", "threads", "peers", "precision",
                  "scaling")
#: The sections whose details go into ``bench.json``, in the order they are written.
DETAILS = ("train", "beam", "flops", "profile", "transformer", "parallel", "g2p", "threads",
           "peers", "precision", "scaling")


def section(name: str) -> types.ModuleType:
    """The module of section ``name`` (one of ``SECTIONS + EXTRA_SECTIONS``)."""
    if name not in SECTIONS + EXTRA_SECTIONS:
        raise ValueError(f"unknown section {name!r}; choose from "
                         f"{list(SECTIONS + EXTRA_SECTIONS)}")
    return importlib.import_module(f"{__name__}.{name}")
