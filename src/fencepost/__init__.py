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

from fencepost.core.errors import FencepostError, RecoverableFinalization, RedactionFailed
from fencepost.core.redaction import WITHHELD, ErrorSource, ErrorTextContext, Redaction

__version__ = "0.1.0"
__all__ = ["LAYERS", "WITHHELD", "ErrorSource", "ErrorTextContext", "FencepostError", "RecoverableFinalization",
           "Redaction", "RedactionFailed", "__version__"]

#: Package -> layer level; imports may only point to the same or a lower level.
LAYERS = {"core": 1, "store": 2, "catalog": 3, "outbox": 3, "evidence": 4, "events": 4, "host": 4,
          "rehearsal": 5, "delivery": 5, "workflows": 6, "api": 7, "demo": 7, "ui": 7, "testing": 7, "cli": 8}
