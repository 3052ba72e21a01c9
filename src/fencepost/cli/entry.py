"""The ``fencepost`` console script and ``python -m fencepost.cli``: importing the command line and then the one
command asked for (``cli.lazy``) takes a moment, and a Ctrl-C in it is answered as one after it is (``fencepost:
interrupted``, exit 130), never with an import traceback (a break-it trial)."""

from __future__ import annotations

import os
import sys


def main(prog_name: str | None = None) -> None:
    """Import the command line and run it (``fencepost.cli.app.main``).

    Raises:
        SystemExit: always; 130 when interrupted during the import.
    """
    # Started with a standard stream closed (`fencepost worker >&-`): Python then has None there, and the first
    # print would fail. What the command says to a closed stream goes nowhere; the command still runs.
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - the process's own stream
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    from fencepost.cli import stdio  # small: the standard library only

    stdio.interrupts.install()  # from here a Ctrl-C is remembered even where Python drops it (an import callback)
    try:
        from fencepost.cli.app import main as run
    except BaseException as error:
        if not stdio.caused_by_interrupt(error):
            raise
        interrupted = True
    else:
        interrupted = stdio.interrupts.interrupted
    if interrupted:
        sys.stderr.write("fencepost: interrupted\n")
        raise SystemExit(130) from None
    run(prog_name)
