"""``python -m xpseq``: the same as the ``xpseq`` command."""

import sys

from xpseq.cli import main

sys.exit(main())
