"""The ``fencepost`` console script and ``python -m fencepost.cli``: ``fencepost.cli.app`` takes most of a second
to import, and a Ctrl-C in that second is answered as one after it is (``fencepost: interrupted``, exit 130),
never with an import traceback (a break-it trial)."""

from __future__ import annotations

import sys


def main(prog_name: str | None = None) -> None:
    """Import the command line and run it (``fencepost.cli.app.main``).

    Raises:
        SystemExit: always; 130 when interrupted during the import.
    """
    try:
        from fencepost.cli.app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("fencepost: interrupted\n")
        raise SystemExit(130) from None
    run(prog_name)
