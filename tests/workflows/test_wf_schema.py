"""The schema makes corruption visible (issue 6 "Semantics": foreign keys, CHECKs on statuses, sizes and
digest format, unique indexes on every identity, JSON columns whose mirrored columns must equal their
content), on every backend: each illegal write below is refused by the database itself and changes
nothing. A persistent serialization failure is a bounded, retryable "unavailable", never a loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from wf_support import World, backend_params, opened_backend

from fencepost.core.errors import Conflict, StoreUnavailable
from fencepost.store.base import StoreBusy
from fencepost.store.faults import FaultInjectingStore
from fencepost.workflows.admission import admit
from fencepost.workflows.audit import audit_admissions

DIGEST = "sha256:" + "d" * 64
NOW = "'2026-01-01T00:00:00.000000Z'"

ILLEGAL = {
    # statuses and kinds
    "run-status": "UPDATE workflow_runs SET status = 'paused'",
    "step-status": "UPDATE workflow_step_runs SET status = 'paused'",
    "mutation-kind": "UPDATE workflow_step_mutations SET kind = 'delete'",
    "mutation-to-status": "UPDATE workflow_step_mutations SET to_status = 'paused'",
    "create-mutation-with-run-fence": "UPDATE workflow_step_mutations SET run_fence = 2",
    "event-type": "UPDATE workflow_events SET type = 'workflow.finished'",
    "event-type-vs-step": "UPDATE workflow_events SET type = 'workflow.admitted' WHERE step_run_id IS NOT NULL",
    "publication-status": "UPDATE package_publications SET status = 'gone'",
    "publication-gate": "UPDATE package_publications SET gate = 'passed'",
    "disposition": "INSERT INTO installation_dispositions (installation_id, disposition, updated_at) "
                   f"SELECT id, 'paused', {NOW} FROM package_installations",
    # sizes and counters
    "fence-zero": "UPDATE workflow_runs SET fence = 0",
    "step-count": "UPDATE workflow_admissions SET step_count = 129",
    "head-revision": "UPDATE package_heads SET revision = 0",
    "step-key-empty": "UPDATE workflow_step_runs SET step_key = ''",
    # digest format
    "task-digest-format": "UPDATE workflow_step_runs SET task_digest = 'sha256:XYZ'",
    "plan-digest-format": f"UPDATE workflow_admissions SET plan_digest = '{DIGEST.upper()}'",
    "receipt-digest-format": "UPDATE workflow_admission_receipts SET receipt_digest = 'md5:1'",
    "lock-format": "UPDATE package_installations SET lock_digest = 'sha256:'",
    # JSON columns and their mirrors
    "plan-not-json": "UPDATE workflow_admissions SET plan = 'not json'",
    "plan-mirror-package": "UPDATE workflow_admissions SET package_name = 'other'",
    "plan-mirror-workflow-digest": f"UPDATE workflow_admissions SET workflow_digest = '{DIGEST}'",
    "plan-mirror-lock": f"UPDATE workflow_admissions SET lock_digest = '{DIGEST}'",
    "needs-not-array": "UPDATE workflow_step_runs SET needs = '{}'",
    "payload-run-id": "UPDATE workflow_events SET payload = '{\"run_id\":\"someone-else\"}'",
    "receipt-mirror": "UPDATE workflow_admission_receipts SET id = 'wrc_other'",
    "definition-mirror": "UPDATE package_publications SET version = '9.9.9'",
    # unique identities
    "second-receipt": "INSERT INTO workflow_admission_receipts (id, plan_id, run_id, receipt, receipt_digest) "
                      "SELECT 'x' || id, plan_id, run_id, receipt, receipt_digest FROM workflow_admission_receipts",
    "event-seq-twice": "UPDATE workflow_events SET seq = 1",
    "step-key-twice": "UPDATE workflow_step_runs SET step_key = 'same'",
    "run-plan-twice": "INSERT INTO workflow_runs (id, plan_id, installation_id, publication_id, workflow_id, status, "
                      f"fence, created_at) SELECT 'wfr_twin', plan_id, installation_id, publication_id, workflow_id, "
                      f"status, fence, {NOW} FROM workflow_runs",
    "open-quarantine-twice": "INSERT INTO installation_quarantines (id, installation_id, lock_digest, reason, "
                             f"quarantined_at) SELECT 'qua_' || id, installation_id, lock_digest, 'again', {NOW} "
                             "FROM installation_quarantines",
    "release-without-reason": f"UPDATE installation_quarantines SET released_at = {NOW}",
    # foreign keys
    "orphan-step-run": "UPDATE workflow_step_runs SET run_id = 'wfr_missing'",
    "orphan-admission-step": "UPDATE workflow_admission_steps SET mutation_id = 'wsm_missing'",
    "delete-run": "DELETE FROM workflow_runs",
    "delete-mutation": "DELETE FROM workflow_step_mutations",
    "delete-admission": "DELETE FROM workflow_admissions",
    "delete-publication": "DELETE FROM package_publications",
}


@pytest.fixture(scope="module", params=backend_params(["sqlite-wal", "sqlite-delete", "postgres"]))
def admitted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One store per backend for the whole module: an admitted plan and an open quarantine. Every case
    below fails inside its own transaction, so they can share it."""
    tmp_path = tmp_path_factory.mktemp(str(request.param))
    with opened_backend(str(request.param), tmp_path) as backend:
        world = World(backend, backend.migrated(), tmp_path / "packages")
        world.ready()
        world.admit(world.plan("p1"))
        world.catalog.quarantine("pair", "held")
        yield world


@pytest.mark.parametrize("case", sorted(ILLEGAL))
def test_an_illegal_write_is_refused_by_the_schema(admitted: World, case: str) -> None:
    before = admitted.counts()
    with pytest.raises(Conflict):
        admitted.sql(ILLEGAL[case])
    assert admitted.counts() == before
    assert audit_admissions(admitted.store) == []


def test_a_persistent_serialization_failure_is_a_bounded_unavailable(admitted: World) -> None:
    plan = admitted.plan("busy")
    faulty = FaultInjectingStore(admitted.store, nth=1, query="get_admission", error=StoreBusy, times=10_000)
    faulty.busy_wait_seconds = 0.5
    before = admitted.counts()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        admit(faulty, plan)
    assert time.monotonic() - started < 5.0
    assert faulty.fired >= 2, "a busy failure is retried"
    assert admitted.counts() == before
