"""``python -m xpseq``: the same as the ``xpseq`` command."""

import sys

from xpseq.app.cli import main

sys.exit(main())
