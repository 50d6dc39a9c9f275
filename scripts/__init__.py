"""The checkout's scripts: benchmarks, the benchmarks page, reports and tools.

A package of the source tree, not of the wheel (``pyproject.toml`` installs ``xpseq*``
only). Its modules import one another relatively (``from . import _common as common``,
``from .benchmarks.shared import Row``) and run from the checkout's root as modules::

    python -m scripts.bench --only train
    python -m scripts.bench_page --check

Nothing here touches ``sys.path``. Importing this package imports nothing else: a script
that sets thread variables before NumPy loads (``compare_backends``) still can.
"""
