"""The autodiff tour: numpy (xpseq's hand-derived gradients), jax and torch side by side.

Run: ``python scripts/autodiff_tour.py`` (all lessons, well under a minute),
``--lesson N`` for one lesson, ``--list`` for the list. Also ``xpseq tour``.
"""

from xpseq.tour import main

raise SystemExit(main())
