"""A fencepost process over the recorder: ``python subject.py ARGS`` runs ``fencepost ARGS`` unchanged,
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

_LOG = Path(os.environ[LOG_ENV])
_original = crashpoints.crashpoint


def _marked(name: str) -> None:
    append_marker(_LOG, name)
    _original(name)


crashpoints.crashpoint = _marked

from fencepost.cli.app import app  # noqa: E402

if __name__ == "__main__":
    app(prog_name="fencepost")
