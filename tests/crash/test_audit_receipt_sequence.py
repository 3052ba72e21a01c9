"""``fencepost audit`` finds a half-applied Receipt transition (``audit_receipt_sequence``).

The crash windows check that no crash leaves one; this checks that the audit would say so if one existed:
states that no sequence of whole transactions produces are edited in behind fencepost's back.
"""

from __future__ import annotations

import pytest
from crash_flows import EXAMPLE_PACKAGE
from crash_harness import check_structure

from fencepost.rehearsal.audit import audit
from fencepost.rehearsal.handler import KIND
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import Store
from fencepost.store.ports import FencedUnit, UnitOfWork
from helpers.store_reads import raw

# (SQL edits of a RUNNING Attempt at delivery 1 whose Receipt 1 is RUNNING, what the finding names)
BROKEN = {
    "two running": (["UPDATE rehearsal_receipts SET status = 'RUNNING', delivery = 1 WHERE position = 3"],
                    "receipt 3 is RUNNING"),
    "pending before running": (["UPDATE rehearsal_receipts SET status = 'PENDING', delivery = NULL, "
                                "started_at = NULL WHERE position = 1",
                                "UPDATE rehearsal_receipts SET status = 'RUNNING', delivery = 1 WHERE position = 2"],
                               "receipt 2 is RUNNING"),
    "stale delivery": (["UPDATE rehearsal_attempts SET delivery = 2",
                        "UPDATE commands SET delivery_count = 2"], "receipt 1 is RUNNING"),
    "aborted in a running attempt": (["UPDATE rehearsal_receipts SET status = 'ABORTED' WHERE position = 6"],
                                     "receipt 6 is ABORTED"),
    "running attempt without a running receipt": (["UPDATE rehearsal_receipts SET status = 'PENDING', "
                                                   "delivery = NULL, started_at = NULL WHERE position = 1"],
                                                  "receipt 1 is PENDING"),
    "succeeded receipt without a next running one": ([
        "UPDATE rehearsal_receipts SET status = 'SUCCEEDED', evidence = '{}', "
        f"evidence_fingerprint = 'sha256:{'0' * 64}' WHERE position = 1"], "receipt 2 is PENDING"),
    "pending attempt with a started receipt": (["UPDATE rehearsal_attempts SET status = 'PENDING'"],
                                               "receipt 1 is RUNNING"),
}


def _running_attempt(store: Store) -> str:
    service = RehearsalService(store)
    attempt = service.enqueue_attempt(service.create_run(EXAMPLE_PACKAGE).id)

    (claimed,) = store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=[KIND], limit=1, lease_seconds=600))

    def start(tx: FencedUnit) -> None:
        assert tx.rehearsal.start_attempt(attempt.id) is not None
        assert tx.rehearsal.receipt_running(attempt.id, 1)

    store.fenced(claimed.lease, start, name="test.start", lease_seconds=600)
    return attempt.id


def test_a_whole_transition_state_is_sound(store: Store) -> None:
    _running_attempt(store)
    assert audit(store) == [] and check_structure(store) == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_half_applied_transition_is_a_finding(store: Store, case: str) -> None:
    attempt_id = _running_attempt(store)
    edits, needle = BROKEN[case]

    def tamper(tx: UnitOfWork) -> None:
        for statement in edits:
            raw(tx, statement)

    store.transact(tamper)
    found = [f for f in audit(store) if f.check == "receipt_sequence"]
    assert found, audit(store)
    assert any(needle in f.detail and attempt_id in f.detail for f in found), found
    assert check_structure(store), "the harness's own structural check disagrees with the audit"
