"""``AuditPort`` over SQL: the invariant queries of ``audit.sql`` and the evidence the audit recomputes."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fencepost.store.records import Finding, FrozenFile, ReceiptRecord
from fencepost.store.sql.executor import Statements
from fencepost.store.sql.queries import Query
from fencepost.store.sql.rehearsal import receipt_from_row

#: Every query of the audit concern whose name starts with this is an invariant: its rows are violations.
INVARIANT_PREFIX = "audit_"


def invariant_names(queries: Mapping[str, Query]) -> list[str]:
    """The invariant queries of a dialect, in file order."""
    return [name for name, q in queries.items() if q.concern == "audit" and name.startswith(INVARIANT_PREFIX)]


class SqlAudit:
    """The ``AuditPort`` of one SQL unit of work.

    Args:
        unit: runs the queries.
        queries: the dialect's queries, where the invariants are found (``invariant_names``).
        settle_events: run before the invariants, so that events this transaction appended carry their
            sequences (ADR 0096; ``SqlEvents.settle``).
    """

    def __init__(self, unit: Statements, queries: Mapping[str, Query],
                 settle_events: Callable[[], None] = lambda: None) -> None:
        self._unit = unit
        self._queries = queries
        self._settle_events = settle_events

    def invariant_findings(self) -> list[Finding]:
        self._settle_events()
        found = []
        for name in invariant_names(self._queries):
            for row in self._unit.run(name, {}).rows:
                found.append(Finding(name.removeprefix(INVARIANT_PREFIX), str(row["subject"]), str(row["detail"])))
        return found

    def sealed_receipts(self) -> list[tuple[ReceiptRecord, str]]:
        return [(receipt_from_row(r), str(r["content_digest"])) for r in self._unit.run("sealed_receipts", {}).rows]

    def frozen_files(self) -> list[FrozenFile]:
        return [FrozenFile(run_id=r["run_id"], path=r["path"], sha256=r["sha256"], content=bytes(r["content"]))
                for r in self._unit.run("frozen_files", {}).rows]

    def schema_checksums(self) -> list[tuple[int, str]]:
        return [(int(r["version"]), str(r["checksum"])) for r in self._unit.run("schema_checksums", {}).rows]
