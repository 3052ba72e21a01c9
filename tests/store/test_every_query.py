"""Every query of every port runs on every dialect, and returns its declared instants as aware datetimes.

One scenario drives all ports through the real services (rehearse, publish, install, quarantine, admit,
replay, audit) plus the outbox paths no service takes alone; a recording executor keeps each statement's
name and rows. Afterwards: every loaded query ran, and on each row the instant columns are exactly the
declared ones (PostgreSQL's own column types are the check of each ``-- instants:`` declaration).
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fencepost.catalog.lifecycle import CatalogService
from fencepost.cli.worker_cmd import build_worker
from fencepost.core.statuses import AdapterStatus, CommandStatus, GovernanceRecordKind, InvocationStatus
from fencepost.events.conformance import EventAppendSubject, run_event_append_checks
from fencepost.events.fencepost_subject import FencepostAdapterRows, FencepostEventStore
from fencepost.events.isolation import TenantIsolationSubject, run_tenant_isolation_checks
from fencepost.outbox.handlers import HandlerRegistry
from fencepost.outbox.worker import Worker, WorkerConfig
from fencepost.rehearsal.audit import audit
from fencepost.rehearsal.handler import KIND, AttemptHandler
from fencepost.rehearsal.service import RehearsalService, release_gate
from fencepost.store.base import Store
from fencepost.store.delivery_records import DeliveryStartRecord
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.host_records import (
    EntityBinding,
    EntityKey,
    InvocationVerdict,
    NewGovernanceRecord,
    NewResolution,
    VerdictHeld,
)
from fencepost.store.sql.executor import Executor, Result
from fencepost.store.sql.queries import Query
from fencepost.store.sql.unit import SqlUnitOfWork
from fencepost.testing import host as host_contract
from fencepost.workflows.audit import audit_admissions
from fencepost.workflows.cancel import request_cancel
from fencepost.workflows.progress import advance
from fencepost.workflows.service import WorkflowService
from fencepost.workflows.task import workflow_host
from helpers.store_backends import StoreBackend

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inventory"
_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class _Recorder:
    def __init__(self, inner: Executor, seen: list[tuple[Query, Result]]) -> None:
        self._inner, self._seen, self.backend = inner, seen, inner.backend

    def run(self, query: Query, params: Mapping[str, Any]) -> Result:
        result = self._inner.run(query, params)
        self._seen.append((query, result))
        return result

    def now(self) -> datetime:
        return self._inner.now()

    @property
    def single_statement(self) -> bool:
        return self._inner.single_statement

    def begin_block(self) -> None:
        self._inner.begin_block()

    def execute_raw(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._inner.execute_raw(sql, params)


class RecordingStore(FaultInjectingStore):
    """Delegates to ``inner`` (never failing) and records every statement with its result."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.disarm()
        self.seen: list[tuple[Query, Result]] = []

    @contextmanager
    def transaction(self, *, write: bool = True, name: str | None = None) -> Iterator[SqlUnitOfWork]:
        with self.inner.transaction(write=write, name=name) as unit:
            assert isinstance(unit, SqlUnitOfWork)
            unit.executor = _Recorder(unit.executor, self.seen)
            yield unit


def _worker(store: Store, work_dir: Path) -> Worker:
    registry = HandlerRegistry()
    registry.register(KIND, AttemptHandler(work_dir))
    registry.register("plain", _Plain())
    return Worker(store, registry, WorkerConfig(poll_interval=0.01, batch_size=5, concurrency=5, lease_seconds=30,
                                                worker_id="recorder"))


class _Plain:
    """A handler with no parent records: the worker finishes it in its batched completion."""

    def handle(self, ctx: Any) -> None:
        ctx.heartbeat()

    def on_failure(self, tx: Any, ctx: Any, error: str) -> None:
        return None


def drive(store: RecordingStore, backend: StoreBackend, tmp: Path) -> None:
    package = tmp / "inventory"
    shutil.copytree(EXAMPLE, package)
    rehearsals = RehearsalService(store)
    run = rehearsals.create_run(package)
    for _ in range(2):
        rehearsals.enqueue_attempt(run.id)
    store.transact(lambda tx: tx.outbox.insert(command_id="plain-1", kind="plain", payload={}))
    _worker(store, tmp / "work").run(max_idle_polls=1)
    rehearsals.compare(run.id)
    rehearsals.gate(run.id)
    rehearsals.get_run(run.id)
    store.read(lambda tx: tx.rehearsal.list_runs())
    catalog = CatalogService(store, release_gate=release_gate)
    catalog.publish(package)  # the gate of the two Attempts passes
    # An operator abort, a reconcile of an expired lease, a release, a failure and a lease check.
    aborted = rehearsals.enqueue_attempt(run.id)
    rehearsals.abort(aborted.id)
    reconciled = rehearsals.enqueue_attempt(run.id)
    store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=[KIND], limit=1, lease_seconds=backend.short_lease))
    backend.expire()
    rehearsals.reconcile(reconciled.id)
    for command_id in ("plain-2", "plain-3"):
        store.transact(lambda tx, c=command_id: tx.outbox.insert(command_id=c, kind="plain", payload={}))
    two = store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=["plain"], limit=2, lease_seconds=30))
    store.fenced(two[0].lease, lambda f: f.require_lease(), name="test.check", lease_seconds=30)
    store.transact(lambda tx: tx.outbox.release(two[0].lease))
    store.transact(lambda tx: tx.outbox.finish(two[1].lease, CommandStatus.FAILED, "planned"))
    again = store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=["plain"], limit=1, lease_seconds=30,
                                                      command_ids=[two[0].id]))
    store.transact(lambda tx: tx.outbox.finish(again[0].lease, CommandStatus.DELIVERED))
    # A completion riding on the next claim (ADR 0093).
    store.transact(lambda tx: tx.outbox.insert(command_id="plain-4", kind="plain", payload={}))
    (fourth,) = store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=["plain"], limit=1, lease_seconds=30))
    store.transact(lambda tx: tx.outbox.insert(command_id="plain-5", kind="plain", payload={}))
    done, (fifth,) = store.transact(lambda tx: tx.outbox.finish_and_claim(
        [fourth.lease], owner="w", kinds=["plain"], limit=1, lease_seconds=30), name="outbox.deliver")
    assert done == [True] and fifth.id == "plain-5"
    store.transact(lambda tx: tx.outbox.finish(fifth.lease, CommandStatus.DELIVERED))
    # PostgreSQL's claim and batched finish write their history rows themselves (ADR 0018), so no port runs
    # insert_lease_events there; run it directly so that its SQL stays checked.
    event = '[{"command_id": "plain-2", "event": "release", "owner": "w", "delivery": 1, "lease_until": null}]'
    store.transact(lambda tx: tx.run("insert_lease_events", {"events": event, "at": tx.now()}))  # type: ignore[attr-defined]
    store.read(lambda tx: (tx.outbox.get("plain-1"), tx.outbox.lease_events("plain-1"), tx.outbox.count_by_status(),
                             tx.outbox.pending_by_kind()))
    store.transact(lambda tx: tx.rehearsal.retire_run(run.id))
    # The catalog and admission.
    catalog.install("inventory")
    newer = tmp / "inventory-next"
    shutil.copytree(package, newer)
    manifest = newer / "fencepost-package.toml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace('version = "1.2.0"', 'version = "1.3.0"', 1),
                        encoding="utf-8")
    catalog.publish(newer, allow_ungated=True)  # moves the head
    catalog.install("inventory")  # and the installation to it
    catalog.set_disposition("inventory", "active")
    catalog.quarantine("inventory", "looking")
    catalog.release_quarantine("inventory", "done")
    catalog.state("inventory")
    workflows = WorkflowService(store)
    workflow = next(iter(store.read(lambda tx: tx.catalog.all_publications())[0].definition["workflows"]))
    plan = workflows.plan("inventory", workflow, plan_id="plan-every-query")
    admitted = workflows.admit(plan)
    assert workflows.admit(plan).outcome == "existing"
    workflows.show(admitted.run_id)
    audit(store)
    audit_admissions(store)
    publication = store.read(lambda tx: tx.catalog.all_publications())[0]
    catalog.withdraw("inventory", publication.version)
    assert {p.version for p in store.read(lambda tx: tx.catalog.all_publications())} == {"1.2.0", "1.3.0"}
    # The worker registry: a registration's whole life, and one removed by age.
    for worker_id in ("every-query-1", "every-query-2"):
        store.transact(lambda tx, w=worker_id: tx.workers.register(
            worker_id=w, host="h", pid=1, kinds=[KIND], concurrency=1, heartbeat_seconds=10, version="0"))
    store.transact(lambda tx: tx.workers.beat("every-query-1", in_flight=1))
    store.read(lambda tx: tx.workers.list_workers())
    store.transact(lambda tx: tx.workers.deregister("every-query-1"))
    backend.advance(0.05)
    assert [w.id for w in store.transact(lambda tx: tx.workers.expire(0))] == ["every-query-2"]
    # The action host and its event log (ADR 0022): a dispatched and an inline invocation, adapter rows, events.
    lease = host_contract.running(store, "inv-every-query", 30)
    store.transact(lambda tx: tx.outbox.insert_leased(command_id="inv-inline", kind=host_contract.KIND, payload={},
                                                      owner="caller", lease_seconds=30))
    assert host_contract.create(store, "inv-every-query", lease, "ai-every-query")
    assert host_contract.update(store, "inv-every-query", lease, "ai-every-query", AdapterStatus.SUCCEEDED,
                                expected=frozenset({AdapterStatus.RUNNING}))
    # The recorded state of a bound entity (migration 0011, ADR 0077): a bound invocation, and a state set, set
    # again unchanged, locked and read.
    host_contract.dispatched(store, "inv-bound", state_binding=EntityBinding("order", "o-every-query", "charged"))
    entity = EntityKey(host_contract.TENANT, host_contract.SPACE, "order", "o-every-query")
    for _ in range(2):
        assert store.transact(lambda tx: tx.host.set_entity_state(entity, "charged", invocation_id="inv-every-query",
                                                                  lease=lease)) is not None
    assert store.transact(lambda tx: tx.host.lock_entity_state(entity)) == store.read(
        lambda tx: tx.host.get_entity_state(entity))
    store.transact(lambda tx: (tx.host.lock_invocation("inv-every-query"), tx.host.get_invocation("inv-inline"),
                               tx.host.get_adapter_invocation("ai-every-query"),
                           tx.host.list_adapter_invocations("inv-every-query"), tx.host.list_invocations(),
                           tx.host.find_invocation(tenant_id=host_contract.TENANT, space_id=host_contract.SPACE,
                                                   action_id="shop.charge", idempotency_key="inv-every-query")))
    assert store.transact(lambda tx: tx.events.append_event_with_outbox(host_contract.event("ev-every-query")))
    # a read of the log in the appending transaction settles its sequences first (ADR 0096)
    store.transact(lambda tx: (tx.events.append_event(host_contract.event("ev-every-query-settled")),
                               tx.events.get_event("ev-every-query-settled")))
    store.read(lambda tx: (tx.events.get_event("ev-every-query"), tx.events.get_event_outbox("ev-every-query"),
                           tx.events.list_events(tenant_id=host_contract.TENANT, space_id=host_contract.SPACE),
                           tx.events.list_event_spaces()))
    # The event relay (ADR 0038): claim, renew, publish, fail, dead-letter, requeue, release, list, summarize.
    for n in range(3):
        assert store.transact(lambda tx, n=n: tx.events.append_event_with_outbox(host_contract.event(f"ev-relay-{n}")))
    claimed = store.transact(lambda tx: tx.events.claim_event_outbox(owner="relay", limit=10, lease_seconds=30))
    relay_leases = {c.lease.event_id: c.lease for c in claimed if c.lease.event_id.startswith("ev-relay-")}
    assert store.transact(lambda tx: tx.events.renew_event_lease(relay_leases["ev-relay-0"], lease_seconds=30))
    assert store.transact(lambda tx: tx.events.mark_event_published(relay_leases["ev-relay-0"]))
    assert store.transact(lambda tx: tx.events.mark_event_failed(relay_leases["ev-relay-1"], error="e",
                                                                  retry_in_seconds=0))
    assert store.transact(lambda tx: tx.events.dead_letter_event(relay_leases["ev-relay-2"], error="e"))
    assert store.transact(lambda tx: tx.events.requeue_event("ev-relay-2"))
    for again in store.transact(lambda tx: tx.events.claim_event_outbox(owner="relay", limit=10, lease_seconds=30)):
        assert store.transact(lambda tx, lease=again.lease: tx.events.release_event(lease))
    store.read(lambda tx: (tx.events.list_event_outbox(), tx.events.summarize_event_outbox()))
    # The reconciliation logs and the settled-parent enrichment (ADR 0032; host-spec L13, H17).
    assert host_contract.append(store, host_contract.reconciliation("rc-every-query", "inv-every-query",
                                                                    adapter_invocation_id="ai-every-query"))
    assert [r.id for r in host_contract.reconciliations(store, "inv-every-query")] == ["rc-every-query"]
    assert store.transact(lambda tx: tx.host.update_leased_invocation("inv-every-query", lease, InvocationVerdict(
        InvocationStatus.RECONCILIATION_REQUIRED, error="budget exhausted")))
    assert host_contract.enrich(store, "inv-every-query", VerdictHeld(InvocationStatus.RECONCILIATION_REQUIRED,
                                                                      "budget exhausted"), "enriched", {"n": 1})
    # External completion handoffs (ADR 0034; host-spec N): a handoff parked, found, listed as due and settled
    # unleased (its command already DELIVERED), and a pending invocation ended unleased (its command finished).
    handoff_lease = host_contract.running(store, "inv-handoff", 30)
    assert host_contract.hand_off(store, "inv-handoff", handoff_lease, host_contract.handoff(
        "po-every-query", due_at=host_contract.store_now(store)))
    assert host_contract.park(store, "inv-handoff", handoff_lease)
    assert [r.id for r in store.read(lambda tx: tx.host.find_handoffs(
        provider="simpay", external_reference="po-every-query"))] == ["inv-handoff"]
    assert host_contract.overdue(store) == ["inv-handoff"]
    assert store.read(lambda tx: tx.host.host_health(stuck_after=timedelta(0), window=timedelta(hours=1))
                      ).overdue_handoffs == 1  # the host's health counts (ADR 0051)
    parked = host_contract.invocation(store, "inv-handoff")
    assert host_contract.unleased(store, "inv-handoff", InvocationStatus.RUNNING, host_contract.verdict_of(
        parked, status=InvocationStatus.SUCCEEDED, external_completion={"outcome": "completed"}))
    # Governance records and the approval resume (ADRs 0043, 0044; host-spec D5, P3): an invocation that awaits
    # approval with its command finished, its request recorded and listed, then resumed under a temporary lease.
    approval_lease = host_contract.running(store, "inv-approval", 30)

    def await_approval(tx: Any) -> None:
        tx.host.lock_invocation("inv-approval")
        assert tx.host.update_leased_invocation("inv-approval", approval_lease, InvocationVerdict(
            InvocationStatus.AWAITING_APPROVAL, expected=frozenset({InvocationStatus.RUNNING})))
        tx.outbox.finish(approval_lease, CommandStatus.DELIVERED)

    store.transact(await_approval)
    assert store.transact(lambda tx: tx.host.append_governance_record(NewGovernanceRecord(
        id="gov-every-query", kind=GovernanceRecordKind.APPROVAL_REQUEST, tenant_id=host_contract.TENANT,
        space_id=host_contract.SPACE, invocation_id="inv-approval", name="four-eyes", payload={"authority": "ops"})))
    assert [r.id for r in store.read(lambda tx: tx.host.list_governance_records("inv-approval"))] == [
        "gov-every-query"]
    assert store.transact(lambda tx: tx.host.resume_approved_invocation(
        "inv-approval", owner="approver", lease_seconds=30)) is not None
    host_contract.dispatched(store, "inv-unleased")
    assert host_contract.unleased(store, "inv-unleased", InvocationStatus.PENDING, host_contract.verdict_of(
        host_contract.invocation(store, "inv-unleased"), status=InvocationStatus.FAILED, error="withdrawn"))
    # Operator resolutions and the operator's reads (ADRs 0048, 0049): one reconciliation_required invocation
    # ended unleased, queued, paged and resolved.
    host_contract.dispatched(store, "inv-resolved")
    assert host_contract.unleased(store, "inv-resolved", InvocationStatus.PENDING, host_contract.verdict_of(
        host_contract.invocation(store, "inv-resolved"), status=InvocationStatus.RECONCILIATION_REQUIRED,
        error="unknown outcome", reconciliation={"kind": "adapter_outcome_ambiguous"}))
    assert [r.id for r in store.read(lambda tx: tx.host.reconciliation_queue())] == ["inv-every-query",
                                                                                     "inv-resolved"]
    assert store.read(lambda tx: tx.host.page_invocations(after_id="inv-resolved", limit=1000)) is not None
    assert store.transact(lambda tx: tx.host.record_resolution(NewResolution(
        id="res-every-query", tenant_id=host_contract.TENANT, space_id=host_contract.SPACE,
        invocation_id="inv-resolved", outcome=InvocationStatus.FAILED, operator="ops", note="none found",
        evidence={"looked_up": True}, request_digest="sha256:every-query")))
    resolved = store.read(lambda tx: tx.host.get_resolution("inv-resolved"))
    assert resolved is not None and resolved.prior_error == "unknown outcome"
    # SQLite's clock is the store's Clock, so nothing else runs its clock statement; run it once here.
    # The store conformance checks' event outbox leases (ADR 0040): one full run drives each of them.
    assert run_event_append_checks(EventAppendSubject(FencepostEventStore(store), "probe-tenant")).passed
    isolation_rows = FencepostAdapterRows(store)
    assert run_tenant_isolation_checks(TenantIsolationSubject(isolation_rows, "probe-tenant")).passed
    isolation_rows.retire()
    # Delivery targets and starts (migration 0009, ADRs 0055, 0056).
    added = store.transact(lambda tx: tx.delivery.insert_target(target_id="tgt-every-query", name="eq",
                                                                url="sqlite:///tmp/eq.db", labels={"env": "x"}))
    assert added is not None and store.transact(lambda tx: tx.delivery.insert_target(
        target_id="tgt-dup", name="eq", url="sqlite:///tmp/eq.db", labels={})) is None
    assert store.read(lambda tx: tx.delivery.get_live_target("eq")) == added
    assert [t.id for t in store.read(lambda tx: tx.delivery.list_live_targets())] == ["tgt-every-query"]
    assert [t.id for t in store.read(lambda tx: tx.delivery.list_targets())] == ["tgt-every-query"]
    start = DeliveryStartRecord(invocation_id="inv-every-query-delivery", package_name="inventory", version="1",
                                publication_id="pub-x", installation_id="ins-x", lock_digest="sha256:x",
                                target_id="tgt-every-query", started_at=datetime.now(UTC))
    assert store.transact(lambda tx: tx.delivery.insert_delivery_start(start))
    assert not store.transact(lambda tx: tx.delivery.insert_delivery_start(start))
    stored_start = store.read(lambda tx: tx.delivery.get_delivery_start(start.invocation_id))
    assert stored_start is not None and stored_start.target_id == "tgt-every-query"
    assert len(store.read(lambda tx: tx.delivery.list_delivery_starts("inventory"))) == 1
    removed = store.transact(lambda tx: tx.delivery.remove_target("eq"))
    assert removed is not None and removed.removed_at is not None
    assert store.read(lambda tx: tx.delivery.get_target("tgt-every-query")) == removed
    assert store.read(lambda tx: tx.delivery.list_targets()) == [removed]  # removed, still listed
    _drive_progress(store, tmp)
    store.read(lambda tx: tx.run("store_now", {"now": tx.now()}))  # type: ignore[attr-defined]


def _drive_progress(store: RecordingStore, tmp: Path) -> None:
    """Workflow progress (migration 0010, ADR 0072): a Run on a live target, its first advance (the start
    barrier and the task submissions), a cancel intent, the task refusing to start, the Run settled cancelled."""
    target_file = tmp / "wf-target.db"
    sqlite3.connect(target_file).close()
    store.transact(lambda tx: tx.delivery.insert_target(target_id="tgt-wf", name="wf", url=f"sqlite://{target_file}",
                                                        labels={}))
    workflows = WorkflowService(store)
    workflow = next(iter(store.read(lambda tx: tx.catalog.all_publications())[0].definition["workflows"]))
    # The target holds no delivery (the plan service would refuse to name it): the plan names it by hand, and the
    # cancel below stops the tasks before they would find that out.
    plan = workflows.plan("inventory", workflow, plan_id="plan-progress")
    plan.pop("digest", None)
    run_id = workflows.admit({**plan, "target_id": "tgt-wf"}).run_id
    host = workflow_host(store)
    first = advance(store, host, run_id)
    assert first.started, first
    request_cancel(store, run_id, reason="every query", actor="test")
    build_worker(store, tmp / "work-wf", WorkerConfig(poll_interval=0.02, listen=False)).run(max_idle_polls=2)
    for page in ("verdicts", "ready", "cancelling"):
        store.read(lambda tx, p=page: tx.progress.candidates(p, after="", limit=64))
    advance(store, host, run_id)
    run = store.read(lambda tx: tx.progress.get_run(run_id))
    assert run is not None and str(run.status) == "cancelled", run
    starts = store.read(lambda tx: tx.progress.starts(run_id))
    assert store.read(lambda tx: tx.progress.start_of_invocation(starts[0].invocation_id)) == starts[0]
    assert [t.invocation_id for t in store.read(lambda tx: tx.progress.task_statuses(run_id))] == [
        s.invocation_id for s in sorted(starts, key=lambda s: (s.step_run_id, s.attempt))]
    store.read(lambda tx: (tx.progress.task_outcomes(run_id), tx.progress.mutations(run_id),
                           tx.progress.run_mutations(run_id), tx.progress.list_runs(limit=5)))


def test_every_query_runs_and_returns_its_declared_instants(backend: StoreBackend, tmp_path: Path) -> None:
    store = RecordingStore(backend.migrated())
    drive(store, backend, tmp_path)
    inner = store.inner
    assert isinstance(inner, Store)
    loaded: Mapping[str, Query] = inner.queries  # type: ignore[attr-defined]
    ran = {query.name for query, _ in store.seen}
    # A dialect whose append_event_fused writes the whole event in one statement (PostgreSQL) never runs the
    # three statements it replaces; SQLite's returns no row and runs them (ADR 0079).
    replaced = {"next_event_sequence", "insert_event", "insert_event_outbox"} if backend.is_postgres else set()
    assert set(loaded) - ran == replaced, "queries no scenario ran"
    checked = 0
    for query, result in store.seen:
        for row in result.rows:
            instants = {k for k, v in row.items() if isinstance(v, datetime)}
            undeclared_text = {k for k, v in row.items() if isinstance(v, str) and _ISO.match(v)}
            assert instants <= query.instants, f"{query.name}: undeclared instants {instants - query.instants}"
            assert undeclared_text == set(), f"{query.name}: instants left as text {undeclared_text}"
            for column in query.instants:
                assert column in row, f"{query.name}: declares {column}, which it does not return"
                value = row[column]
                assert value is None or (isinstance(value, datetime) and value.tzinfo == UTC), (query.name, column)
                checked += 1
    assert checked > 100
