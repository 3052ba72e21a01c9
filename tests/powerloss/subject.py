"""A fencepost process over the recorder: ``python subject.py ARGS`` runs ``fencepost ARGS`` unchanged
(``subject.py --script PATH ARGS`` runs that script instead),
except that every crash point it passes is also written as a marker into the recorder's log.

``fencepost.core.crashpoints.crashpoint`` is wrapped before any other fencepost module imports it, so the
markers sit exactly where ``FENCEPOST_CRASHPOINT`` would kill the process (an armed crash point still kills the
process: the wrapper writes the marker, then calls the original).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recorder import LOG_ENV, append_marker

import fencepost.core.crashpoints as crashpoints

# The modules that bind ``crashpoint`` by name must not be loaded yet, or they would keep the unwrapped one.
assert "fencepost.store.sqlite.store" not in sys.modules

_LOG = Path(os.environ[LOG_ENV]) if os.environ.get(LOG_ENV) else None   # None: not recording (a recovery)
_original = crashpoints.crashpoint


def _marked(name: str) -> None:
    if _LOG is not None:
        append_marker(_LOG, name)
    _original(name)


crashpoints.crashpoint = _marked

if __name__ == "__main__":
    if sys.argv[1:2] == ["--script"]:
        # ``subject.py --script PATH ARGS``: a test process of its own (``tests/crash/host_subject.py``).
        import runpy

        sys.argv = sys.argv[2:]
        sys.path.insert(0, str(Path(sys.argv[0]).resolve().parent))
        runpy.run_path(sys.argv[0], run_name="__main__")
    else:
        from fencepost.cli.app import app

        app(prog_name="fencepost")
