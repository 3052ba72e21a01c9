"""The drift check as a pure function (``fencepost.delivery.drift``): each kind of difference is named, and the
start state says where a delivery begins (ADR 0056)."""

from __future__ import annotations

from fencepost.delivery.drift import StartedBy, check_drift
from fencepost.delivery.lock import LockedMigration
from fencepost.delivery.target_db import LedgerRow

LOCK = [LockedMigration("0001_a", "sha256:a", True), LockedMigration("0002_b", "sha256:b", True),
        LockedMigration("0003_c", "sha256:c", False)]


def row(migration: str, checksum: str, *, state: str = "applied", by: str = "ai_1", version: str = "1.0") -> LedgerRow:
    return LedgerRow("shop", version, migration, checksum, by, state, "2026-01-01T00:00:00.000000Z")


def test_start_states() -> None:
    assert check_drift(LOCK, [], [], previous_through=2).start_state == "fresh"
    upgrade = check_drift(LOCK, [row("0001_a", "sha256:a"), row("0002_b", "sha256:b")], ["table a", "table b"],
                          previous_through=2)
    assert (upgrade.drifted, upgrade.start_state, upgrade.applied) == (False, "previous_version", ["0001_a", "0002_b"])
    partial = check_drift(LOCK, [row("0001_a", "sha256:a")], ["table a"], previous_through=2)
    assert (partial.drifted, partial.start_state) == (False, "partial")
    complete = check_drift(LOCK, [row(m.id, m.checksum) for m in LOCK], ["table a"], previous_through=None)
    assert complete.start_state == "complete"


def test_each_difference_is_named() -> None:
    result = check_drift(LOCK, [row("0001_a", "sha256:other"), row("0003_c", "sha256:c"), row("0009_z", "sha256:z")],
                         ["table a"], previous_through=None)
    text = "; ".join(result.differences)
    assert "migration 0001_a: the target's ledger has checksum sha256:other (version 1.0), the package has sha256:a" \
           in text
    assert "migration 0009_z (version 1.0) that this package does not have" in text
    assert "migration 0001_a is missing on the target while later ones are applied (0003_c)" in text
    objects = check_drift(LOCK, [], ["table a", "index a_i"], previous_through=None)
    assert objects.differences == ["tables present without ledger rows: table a, index a_i (the target was migrated "
                                   "outside fencepost or holds another schema)"]


def test_an_unfinished_unfenced_migration_is_drift_unless_it_is_this_deliverys() -> None:
    ledger = [row("0001_a", "sha256:a"), row("0002_b", "sha256:b"), row("0003_c", "sha256:c", state="started",
                                                                        by="ai_other")]
    other = check_drift(LOCK, ledger, ["table a"], previous_through=None)
    assert other.differences == ["migration 0003_c was started unfenced by adapter invocation ai_other and never "
                                 "marked applied: reconcile that delivery"]
    known = check_drift(LOCK, ledger, ["table a"], previous_through=None,
                        started_by={"ai_other": StartedBy("inv_other")})
    assert known.differences == ["migration 0003_c was started unfenced by adapter invocation ai_other and never "
                                 "marked applied: resolve its delivery inv_other (`fencepost host queue` says what "
                                 "to look at) and deliver again"]
    # An operator's resolution settles the row (ADR 0103): succeeded counts it applied, failed as never started.
    applied = check_drift(LOCK, ledger, ["table a"], previous_through=None,
                          started_by={"ai_other": StartedBy("inv_other", "succeeded")})
    assert (applied.differences, applied.start_state) == ([], "complete")
    undone = check_drift(LOCK, ledger, ["table a"], previous_through=None,
                         started_by={"ai_other": StartedBy("inv_other", "failed")})
    assert (undone.differences, undone.start_state, undone.applied) == ([], "partial", ["0001_a", "0002_b"])
    own = check_drift(LOCK, ledger, ["table a"], previous_through=None, own_ids=frozenset({"ai_other"}))
    assert own.differences == [] and own.start_state == "complete"
