"""Every vocabulary column's CHECK list equals its StrEnum, on every backend; and no vocabulary column lacks one.

The column CHECK lists are read from the live schema of a migrated database (SQLite's ``sqlite_master``,
PostgreSQL's ``pg_constraint``), so a migration that widens a list without the enum, or the enum without a
migration, fails here.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from fencepost.core.statuses import (
    AdapterStatus,
    AttemptStatus,
    CommandStatus,
    Disposition,
    EventOutboxStatus,
    GovernanceRecordKind,
    InstallationStatus,
    InvocationMode,
    InvocationStatus,
    LeaseEventKind,
    PublicationGate,
    PublicationStatus,
    ReceiptStatus,
    ReconciliationKind,
    ReconciliationLog,
    RunMutationKind,
    RunStatus,
    StepMutationKind,
    StepRunStatus,
    WorkflowEventType,
    WorkflowRunStatus,
)
from fencepost.store import Store
from helpers.store_reads import raw

VOCABULARIES: dict[tuple[str, str], type[StrEnum]] = {
    ("commands", "status"): CommandStatus,
    ("lease_events", "event"): LeaseEventKind,
    ("rehearsal_runs", "status"): RunStatus,
    ("rehearsal_attempts", "status"): AttemptStatus,
    ("rehearsal_receipts", "status"): ReceiptStatus,
    ("package_publications", "status"): PublicationStatus,
    ("package_publications", "gate"): PublicationGate,
    ("package_installations", "status"): InstallationStatus,
    ("installation_dispositions", "disposition"): Disposition,
    ("workflow_runs", "status"): WorkflowRunStatus,
    ("workflow_step_runs", "status"): StepRunStatus,
    ("workflow_events", "type"): WorkflowEventType,
    ("workflow_step_mutations", "kind"): StepMutationKind,
    ("workflow_step_mutations", "to_status"): StepRunStatus,
    ("workflow_run_mutations", "kind"): RunMutationKind,
    ("workflow_run_mutations", "to_status"): WorkflowRunStatus,
    ("invocations", "status"): InvocationStatus,
    ("invocations", "mode"): InvocationMode,
    ("adapter_invocations", "status"): AdapterStatus,
    ("host_event_outbox", "status"): EventOutboxStatus,
    ("host_reconciliations", "log"): ReconciliationLog,
    ("host_reconciliations", "kind"): ReconciliationKind,
    ("host_governance_records", "kind"): GovernanceRecordKind,
}
# A mutation leaves only a non-terminal status (terminal ones never change), and a Run only running.
NARROWER = {("workflow_step_mutations", "from_status"): (StepRunStatus, {"waiting", "ready", "running", "lost"}),
            ("workflow_run_mutations", "from_status"): (WorkflowRunStatus, {"running"}),
            # an operator resolves to one of the two definite verdicts only (ADR 0048)
            ("host_resolutions", "outcome"): (InvocationStatus, {"succeeded", "failed"}),
            ("host_resolutions", "prior_status"): (InvocationStatus, {"reconciliation_required"})}

_SQLITE_COLUMN = re.compile(r"^\s*(\w+)\s+TEXT\b[^\n]*?CHECK \((\w+) IN \(([^)]*)\)\)", re.M)
_PG_LIST = re.compile(r"^CHECK \(\((\w+) = ANY \(ARRAY\[(.*)\]\)\)\)$")
_PG_ONE = re.compile(r"^CHECK \(\((\w+) = ('[^']*')::text\)\)$")  # PostgreSQL folds IN ('x') to = 'x'


def _quoted(text: str) -> set[str]:
    return set(re.findall(r"'([^']*)'", text))


def column_lists(store: Store) -> dict[tuple[str, str], set[str]]:
    """``(table, column) -> values`` of every single-column ``IN`` CHECK list in the live schema."""
    found: dict[tuple[str, str], set[str]] = {}
    if store.backend == "sqlite":
        for table, sql in store.read(lambda tx: raw(tx, "SELECT name, sql FROM sqlite_master WHERE type = 'table'")):
            for column, checked, values in _SQLITE_COLUMN.findall(sql or ""):
                if column == checked:
                    found[(table, column)] = _quoted(values)
        return found
    query = ("SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k "
             "JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
             "WHERE k.contype = 'c' AND n.nspname = current_schema()")
    rows: list[Any] = store.read(lambda tx: raw(tx, query))
    for table, name, definition in rows:
        match = _PG_LIST.match(definition) or _PG_ONE.match(definition)
        if match and name == f"{table}_{match.group(1)}_check":
            found[(table, match.group(1))] = _quoted(match.group(2))
    return found


def test_each_vocabulary_equals_its_check_list(store: Store) -> None:
    lists = column_lists(store)
    assert len(lists) >= len(VOCABULARIES), lists
    for (table, column), enum in VOCABULARIES.items():
        assert lists.get((table, column)) == {str(v) for v in enum}, f"{store.backend}: {table}.{column}"
    for (table, column), (enum, allowed) in NARROWER.items():
        assert lists.get((table, column)) == allowed and allowed <= {str(v) for v in enum}


def test_every_vocabulary_column_has_an_enum(store: Store) -> None:
    unmapped = set(column_lists(store)) - set(VOCABULARIES) - set(NARROWER)
    assert unmapped == set(), f"{store.backend}: vocabulary columns without a StrEnum: {sorted(unmapped)}"
