"""fencepost: durable, fenced execution of side-effecting work.

Layers (``docs/architecture.md``, ADR 0015). A module imports only from its own layer or a lower one; a test
holds this table, ``LAYERS`` and the architecture document to one another. ``testing`` (the store contract
suite, test infrastructure) is imported by no fencepost module.

=====  ========================================  ===========================================================
level  packages                                  owns
=====  ========================================  ===========================================================
1      core                                      canonical JSON, fingerprints, ids, clocks, vocabularies, errors
2      store                                     the ports, the only SQL, the SQLite and PostgreSQL backends
3      catalog, outbox                           package format, publication lifecycle; fenced command outbox
4      evidence, events, host                    sealed evidence, comparison, gate; the event relay; the action
                                                 host
5      rehearsal, delivery                       the plugin delivery rehearsal; delivery to target databases
6      workflows                                 plans, admission, execution of Runs on delivery targets
7      api, demo, ui, testing                    HTTP API, demos, operator page; the store contract suite
8      cli                                       the command line
=====  ========================================  ===========================================================
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fencepost.core.errors import FencepostError, RecoverableFinalization, RedactionFailed
    from fencepost.core.redaction import WITHHELD, ErrorSource, ErrorTextContext, Redaction

__version__ = "0.1.0"
__all__ = ["LAYERS", "WITHHELD", "ErrorSource", "ErrorTextContext", "FencepostError", "RecoverableFinalization",
           "Redaction", "RedactionFailed", "__version__"]

#: Package -> layer level; imports may only point to the same or a lower level.
LAYERS = {"core": 1, "store": 2, "catalog": 3, "outbox": 3, "evidence": 4, "events": 4, "host": 4,
          "rehearsal": 5, "delivery": 5, "workflows": 6, "api": 7, "demo": 7, "ui": 7, "testing": 7, "cli": 8}

#: The names re-exported here, imported on first use: ``import fencepost`` (which every ``fencepost`` command
#: does before it can answer a Ctrl-C with one line, ``cli.entry``) stays instant.
_EXPORTS = {"FencepostError": "fencepost.core.errors", "RecoverableFinalization": "fencepost.core.errors",
            "RedactionFailed": "fencepost.core.errors", "WITHHELD": "fencepost.core.redaction",
            "ErrorSource": "fencepost.core.redaction", "ErrorTextContext": "fencepost.core.redaction",
            "Redaction": "fencepost.core.redaction"}


def __getattr__(name: str) -> Any:
    """``fencepost.FencepostError`` and the other re-exports (PEP 562).

    Raises:
        AttributeError: a name this package does not export.
    """
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fencepost' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
