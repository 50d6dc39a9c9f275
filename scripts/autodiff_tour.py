"""The autodiff tour: numpy (xpseq's hand-derived gradients), jax and torch side by side.

Run: ``python -m scripts.autodiff_tour`` (all lessons, well under a minute),
``--lesson N`` for one lesson, ``--list`` for the list. Also ``xpseq tour``.
"""

from xpseq.tour import main

raise SystemExit(main())
