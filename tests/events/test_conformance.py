"""The event-append conformance checks (host-spec U; ADR 0040), themselves checked.

fencepost's own backends pass on every backend; each deliberately broken store (``broken_stores``) makes at
least one check fail, with an error naming the violation. The broken stores run on SQLite only: the checks'
logic does not depend on the backend, and each run costs real writes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from events import broken_stores as b
from fencepost.events.conformance import (
    DEAD_LETTER_REASON,
    FIRST_SEQUENCE,
    PROBE_SPACE_PREFIX,
    EventAppendSubject,
    event_append_checks,
    make_probe,
    normalize,
    run_event_append_checks,
)
from fencepost.events.fencepost_subject import FencepostEventStore
from fencepost.store import Store, open_store
from fencepost.store.host_records import NewEvent, Subject
from helpers.store_backends import StoreBackend

TENANT = "probe-tenant"
IDS = ["plain-append", "outbox-append", "outbox-after-plain", "tx-append", "tx-outbox-append",
       "tx-outbox-after-plain"]


@pytest.fixture
def sqlite(tmp_path: Path) -> Store:
    store = open_store(f"sqlite:///{tmp_path / 'probe.db'}")
    store.migrate()
    return store


def run(events: Any) -> Any:
    return run_event_append_checks(EventAppendSubject(events, TENANT))


def by_id(result: Any) -> dict[str, Any]:
    return {c.id: c for c in result.checks}


def test_six_checks_exposed_in_order() -> None:
    checks = event_append_checks()
    assert [c.id for c in checks] == IDS
    assert all(callable(c.run) for c in checks)


def test_fencepost_backends_pass(backend: StoreBackend) -> None:
    store = backend.migrated()
    result = run(FencepostEventStore(store))
    assert result.passed, [(c.id, c.error) for c in result.checks if c.error]
    assert [c.status for c in result.checks] == ["passed"] * 6
    # U28: probe spaces hold the published probe rows, and cleanup dead-lettered every control row.
    rows = store.read(lambda tx: tx.execute_raw("SELECT o.status, o.last_error, e.space_id FROM host_event_outbox o "
                                                "JOIN host_events e ON e.id = o.event_id"))  # type: ignore[attr-defined]
    assert rows and all(r[2].startswith(PROBE_SPACE_PREFIX) for r in rows)
    assert sorted({r[0] for r in rows}) == ["dead_lettered", "published"]
    assert {r[1] for r in rows if r[0] == "dead_lettered"} == {DEAD_LETTER_REASON}
    assert sum(1 for r in rows if r[0] == "published") == 2  # outbox-append and tx-outbox-append


def test_a_single_check_runs_alone(sqlite: Store) -> None:
    result = event_append_checks()[1].run(EventAppendSubject(FencepostEventStore(sqlite), TENANT))
    assert (result.id, result.status, result.error) == ("outbox-append", "passed", None)
    assert "state published" in result.evidence


BROKEN: list[tuple[str, Callable[[Store], Any], str, str]] = [
    ("throwing", b.ThrowingOnDuplicate, "plain-append", "raised ValueError"),
    ("replacing", b.Replacing, "plain-append", "earlier-ordered duplicate replaced the first event"),
    ("merging", b.Merging, "plain-append", "merged into the first event"),
    ("keeping-both", b.KeepingBoth, "plain-append", "kept both events"),
    ("earlier-wins", lambda s: b.ChoosingByOrdering(s, "earlier"), "plain-append",
     "earlier-ordered duplicate replaced"),
    ("later-wins", lambda s: b.ChoosingByOrdering(s, "later"), "plain-append", "later-ordered duplicate replaced"),
    ("adding-outbox-row", b.AddingOutboxRow, "outbox-after-plain", "added an outbox row"),
    ("resetting-outbox-row", b.ResettingOutboxRow, "outbox-append", "state leased: the outbox row was reset"),
    ("never-committing", b.NeverCommitting, "tx-append", "silently rolled back"),
    ("buffer-last-write-wins", b.BufferLastWriteWins, "tx-append", "first write must win within a transaction"),
    ("tx-replacing-committed", b.TxReplacingCommitted, "tx-append",
     "committed duplicate in a transaction: the earlier-ordered duplicate was merged into the first event"),
    ("empty-list-outbox", b.EmptyListOutbox, "outbox-after-plain", "expected only the control"),
]


@pytest.mark.parametrize(("name", "make", "check", "names"), BROKEN, ids=[x[0] for x in BROKEN])
def test_each_violation_detected(sqlite: Store, name: str, make: Callable[[Store], Any], check: str,
                                 names: str) -> None:
    result = run(make(sqlite))
    assert not result.passed
    failed = by_id(result)[check]
    assert failed.status == "failed", (name, failed)
    assert names in (failed.error or ""), failed.error


def test_minimal_subject_runs_one_check_and_reports_five_skips(sqlite: Store) -> None:
    result = run(b.Minimal(FencepostEventStore(sqlite)))
    assert result.passed and result.skipped == 5
    assert [c.status for c in result.checks] == ["passed"] + ["skipped"] * 5
    assert all(c.evidence.startswith("skipped: ") for c in result.checks[1:])


def test_outbox_without_claim_fails(sqlite: Store) -> None:
    result = run(b.OutboxWithoutClaim(FencepostEventStore(sqlite)))
    assert not result.passed
    checks = by_id(result)
    assert checks["outbox-append"].status == "failed"
    assert "claim_outbox" in (checks["outbox-append"].error or "")
    assert checks["tx-append"].status == "skipped"


def test_probe_duplicates_cover_orderings_and_every_field() -> None:
    now = datetime.now(UTC)
    probe = make_probe(TENANT, now)
    assert probe.space_id.startswith(PROBE_SPACE_PREFIX) and len(probe.space_id) == len(PROBE_SPACE_PREFIX) + 36
    first = probe.first
    assert first["sequence"] == FIRST_SEQUENCE and "actor" not in first
    # U26: whole seconds, a few seconds in the past.
    for key in ("occurred_at", "recorded_at"):
        assert first[key].microsecond == 0 and now - timedelta(seconds=30) < first[key] < now
    earlier, later = probe.duplicates
    assert earlier.envelope["sequence"] < first["sequence"] < later.envelope["sequence"]
    assert earlier.envelope["occurred_at"] < first["occurred_at"] < later.envelope["occurred_at"] < now
    for dup in (earlier, later):
        same = {k for k in first if first[k] == dup.envelope[k]}
        assert same == {"id", "tenant_id", "space_id"}
        assert dup.outbox["destination"] != probe.first_outbox["destination"]
        assert dup.outbox["headers"] != probe.first_outbox["headers"]


def test_snapshot_normalization() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert normalize({"b": 1, "a": None, "t": at}) == {"b": 1, "t": "2026-01-02T03:04:05.678Z"}
    assert normalize({"t": "2026-01-02T03:04:05.678999+00:00"}) == normalize({"t": at})
    assert normalize({"sequence": "7", "attempt_count": "2", "lease_token": "12", "other": "7"}) == {
        "sequence": 7, "attempt_count": 2, "lease_token": 12, "other": "7"}
    assert list(normalize({"z": 1, "a": 2})) == ["a", "z"]


def _foreign_rows(store: Store) -> list[tuple[Any, ...]]:
    return store.read(lambda tx: tx.execute_raw(  # type: ignore[attr-defined]
        "SELECT o.event_id, o.status, o.available_at, o.last_error, o.published_at FROM host_event_outbox o "
        "JOIN host_events e ON e.id = o.event_id WHERE e.tenant_id = 'other' ORDER BY o.event_id"))


def test_foreign_rows_from_claim(sqlite: Store) -> None:
    for n in range(2):
        sqlite.transact(lambda tx, n=n: tx.events.append_event_with_outbox(NewEvent(
            id=f"foreign-{n}", tenant_id="other", space_id="real", subject=Subject("S", "s"), type="Real")))
    before = _foreign_rows(sqlite)
    broken = b.ClaimIgnoringTenant(sqlite)
    result = run(broken)
    checks = by_id(result)
    assert not result.passed
    violated = checks["outbox-append"]
    assert violated.status == "failed"
    assert "returned rows outside the probe space: foreign-0;" in (violated.error or "")  # limit 1 per tenant
    for later in ("outbox-after-plain", "tx-outbox-append", "tx-outbox-after-plain"):
        assert "skipped because of the earlier filter violation" in (checks[later].error or ""), checks[later]
    # One claim only: the violating one; no further claims in the run (U33, U34).
    assert len(broken.claims) == 1
    assert broken.claims[0]["lease_seconds"] == 30 and broken.claims[0]["limit"] == 1
    assert abs((broken.claims[0]["now"] - datetime.now(UTC)).total_seconds()) < 30
    # U35: the checks never published, failed or dead-lettered a foreign row (the broken claim leased them).
    after = _foreign_rows(sqlite)
    assert [(r[0], r[2], r[3], r[4]) for r in after] == [(r[0], r[2], r[3], r[4]) for r in before]
    assert [r[1] for r in after] == ["processing", "pending"]
    # U34: the probe row the violating claim returned was dead-lettered with its token.
    probe_rows = sqlite.read(lambda tx: tx.execute_raw(  # type: ignore[attr-defined]
        "SELECT o.status FROM host_event_outbox o JOIN host_events e ON e.id = o.event_id "
        "WHERE e.tenant_id = ?", (TENANT,)))
    assert [r[0] for r in probe_rows] == ["dead_lettered"]


def test_standalone_check_stops_claims_for_itself(sqlite: Store) -> None:
    sqlite.transact(lambda tx: tx.events.append_event_with_outbox(NewEvent(
        id="foreign-x", tenant_id="other", space_id="real", subject=Subject("S", "s"), type="Real")))
    broken = b.ClaimIgnoringTenant(sqlite)
    result = event_append_checks()[4].run(EventAppendSubject(broken, TENANT))
    assert result.status == "failed" and "foreign-x" in (result.error or "")
    assert len(broken.claims) == 1


def test_unreleased_lease_message(sqlite: Store) -> None:
    broken = b.KeepingLease(sqlite, 60)
    result = event_append_checks()[1].run(EventAppendSubject(broken, TENANT))
    assert result.status == "failed"
    assert "mark_outbox_failed did not release the lease" in (result.error or "")
    # U15: retry availability in whole seconds, in the past.
    call = broken.failed_calls[0]
    assert call["available_at"].microsecond == 0 and call["available_at"] < call["now"]


@pytest.mark.slow
def test_a_lease_within_the_skew_margin_is_waited_out(sqlite: Store) -> None:
    result = event_append_checks()[1].run(EventAppendSubject(b.KeepingLease(sqlite, 1.5), TENANT))
    assert result.status == "passed", result.error
    assert "clock skew" in result.evidence


def test_result_shape() -> None:
    result = run(b.Minimal(FencepostEventStore(_memory_store())))
    shape = result.as_dict()
    assert set(shape) == {"passed", "checks"}
    assert all(set(c) == {"id", "status", "evidence", "error"} for c in shape["checks"])


def _memory_store() -> Store:
    import tempfile
    store = open_store(f"sqlite:///{tempfile.mkdtemp()}/shape.db")
    store.migrate()
    return store


@pytest.mark.parametrize("make", [b.AttemptsAlwaysZero, b.ExtraAndMissingFields], ids=["attempts-0", "extra-missing"])
def test_tolerated_store_shapes_pass(sqlite: Store, make: Callable[[Store], Any]) -> None:
    result = run(make(sqlite))
    assert result.passed, [(c.id, c.error) for c in result.checks if c.error]


def test_actor_disclosure_not_opted_in_fails(sqlite: Store) -> None:
    checks = by_id(run(b.ActorOnEveryEnvelope(sqlite)))
    assert checks["outbox-append"].status == "failed"
    assert "did not opt in" in (checks["outbox-append"].error or "")


def test_foreign_lease_asks_to_pause_relays(sqlite: Store) -> None:
    result = event_append_checks()[1].run(EventAppendSubject(b.RelayStealingLeases(sqlite), TENANT))
    assert result.status == "failed"
    error = result.error or ""
    assert "leased by another worker (relay-1)" in error and "pause outbox relays" in error


def test_cleanup_writes_only_probe_rows(sqlite: Store) -> None:
    # A real pending row of the probe tenant in another space: cleanup and claims never touch it (U32).
    sqlite.transact(lambda tx: tx.events.append_event_with_outbox(NewEvent(
        id="real-1", tenant_id=TENANT, space_id="orders", subject=Subject("S", "s"), type="Real")))
    before = sqlite.read(lambda tx: tx.execute_raw(  # type: ignore[attr-defined]
        "SELECT * FROM host_event_outbox WHERE event_id = 'real-1'"))
    assert run(FencepostEventStore(sqlite)).passed
    after = sqlite.read(lambda tx: tx.execute_raw(  # type: ignore[attr-defined]
        "SELECT * FROM host_event_outbox WHERE event_id = 'real-1'"))
    assert after == before and after[0][3] == "pending"
