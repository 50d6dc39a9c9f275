"""The ``xpseq`` command's entry point: the console script ``xpseq`` and ``python -m xpseq``.

Its first act is to take Ctrl-C over (:func:`xpseq.app.errors.handle_interrupts`), before it
imports the command (:mod:`xpseq.app.cli`, which imports the backends, the models, the
subcommands ...): a Ctrl-C at any moment after that ends the command with one line,
``xpseq: interrupted``, and exit code 130; one while it takes it over, too. The rest is
:func:`xpseq.app.cli.main`'s.
"""

import os
import sys


def main() -> int:
    """Run the ``xpseq`` command on ``sys.argv``; returns its exit code."""
    try:
        from xpseq.app import errors

        errors.handle_interrupts()
    except KeyboardInterrupt:                  # before the handler was in place
        try:
            os.write(2, b"xpseq: interrupted\n")
        finally:
            os._exit(130)
    try:
        from xpseq.app import cli

        code = cli.main()
    except SystemExit as exit:                 # argparse: --help, --version, a usage error
        code = errors.exit_status(exit.code)
    except KeyboardInterrupt:                  # one between two steps of cli.main
        code = errors.interrupted()
    return errors.end(code)


if __name__ == "__main__":
    sys.exit(main())
