"""Request and response models of the HTTP API (published in its OpenAPI document).

They mirror ``fencepost.rehearsal.views`` exactly; a response is built by validating the view's plain
JSON, so a view that drifts from its model fails loudly in tests rather than on a client.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "ABORTED"]
OutboxStatus = Literal["PENDING", "PROCESSING", "DELIVERED", "FAILED", "ABORTED"]
State = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "ABORTED", "INTERRUPTED"]
ReceiptState = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "ABORTED", "INTERRUPTED", "NOT_APPLICABLE"]
_STATE = ("What to show: the status, except INTERRUPTED for a RUNNING one whose command is PENDING (its lease was "
          "released or reconciled): nothing runs it now, and the next delivery replays every scenario.")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ── requests ──
class CreateRehearsal(_Model):
    """Create a rehearsal from a package directory on the server."""

    package_path: str = Field(min_length=1, max_length=4096,
                              description="Path of the package directory on the server (holds fencepost-package.toml).")


class AbortRequest(_Model):
    reason: str = Field(default="aborted by operator", min_length=1, max_length=500)


# ── responses ──
class Problem(BaseModel):
    """RFC 9457 problem details. ``type`` is stable per error kind (``urn:fencepost:problem:<kind>``)."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    lease_until: str | None = Field(default=None, description="lease-active only: when the lease expires (UTC).")
    guard: str | None = Field(default=None, description="not-allowed only: the start guard that is false.")
    field: str | None = Field(default=None, description="idempotency-conflict only: what differs (action_version, "
                                                        "actor, authority or parameters).")


class PackageInfo(_Model):
    name: str
    version: str
    previous_version: str | None


class Rehearsal(_Model):
    id: str
    package: PackageInfo
    content_digest: str
    status: Literal["READY", "RETIRED"]
    created_at: str
    migrations: list[str]


class LatestAttempt(_Model):
    id: str
    seq: int
    status: Status
    state: State = Field(description=_STATE)


class RehearsalSummary(Rehearsal):
    """A rehearsal as the list shows it: with how many Attempts it has, the latest one and the gate's verdict."""

    attempt_count: int
    latest_attempt: LatestAttempt | None
    gate_passed: bool = Field(description="The release gate's verdict, computed now from durable records.")


class RehearsalList(_Model):
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")
    items: list[RehearsalSummary]


class Outbox(_Model):
    command_id: str
    status: OutboxStatus
    lease_owner: str | None
    lease_until: str | None = Field(description="Lease deadline (UTC); the lease token itself is never exposed.")
    last_heartbeat_at: str | None
    delivery_count: int
    available_at: str
    lease_expired: bool = Field(description="PROCESSING and its deadline has passed by the store's clock: "
                                            "reconcile is possible.")
    kind: str = Field(description="The command kind (which workers serve it).")
    pending_seconds: float | None = Field(description="PENDING and due: seconds it has waited since it became due "
                                                      "(available_at), by the store's clock; null otherwise.")
    live_workers: int = Field(description="Live registered workers that serve this kind (GET /workers).")
    no_live_worker: bool = Field(description="It waits for a worker now (PENDING and due, or an expired lease) "
                                             "and no live worker serves its kind: nothing will run it until "
                                             "one starts.")


class Integrity(_Model):
    status: Literal["ok", "tampered", "missing", "unsealed", "unverifiable"]
    reason: str


class Receipt(_Model):
    id: str
    position: int
    scenario: str
    status: Status
    state: ReceiptState = Field(description=_STATE + " A scenario that SUCCEEDED without applying (no previous "
                                "version, nothing to roll back) is NOT_APPLICABLE, never a plain success.")
    delivery: int | None
    started_at: str | None
    finished_at: str | None
    evidence_fingerprint: str | None
    integrity: Integrity
    not_applicable_reason: str | None = Field(description="NOT_APPLICABLE only: why the scenario did not apply.")
    partial: str | None = Field(description="What an exercised scenario did not reach (a roll-back chain that stops "
                                            "at a migration without a down file), or null.")
    evidence: Any = Field(default=None, description="The sealed evidence (only with ?evidence=true).")


class Attempt(_Model):
    id: str
    run_id: str
    seq: int
    status: Status
    state: State = Field(description=_STATE)
    error: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    outbox: Outbox
    receipts: list[Receipt]


class LeaseDelivery(_Model):
    """One delivery of an Attempt's command (``outbox.history.lease_history``)."""

    delivery: int
    owner: str | None
    claim: str = Field(description="claim, or takeover (claimed after the previous lease expired).")
    claimed_at: str | None
    heartbeats: int
    last_heartbeat_at: str | None
    lease_until: str | None
    ended: str = Field(description="expired, released, reconciled, delivered, failed, aborted or running.")
    ended_at: str | None


class ListedAttempt(Attempt):
    lease_history: list[LeaseDelivery] = Field(description="One entry per delivery of its command, oldest first.")


class AttemptList(_Model):
    now: str = Field(description="The store's clock (the lease authority) when this list was read, UTC.")
    total: int = Field(description="How many Attempts the rehearsal has (all pages).")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")
    items: list[ListedAttempt]


class RawFingerprint(_Model):
    position: int
    scenario: str
    evidence_fingerprint: str | None


class Fingerprints(_Model):
    attempt_id: str
    seq: int
    semantic_fingerprint: str
    raw: list[RawFingerprint]


class Comparison(_Model):
    comparable: bool
    reason: str
    equal: bool | None = None
    baseline: Fingerprints | None = None
    candidate: Fingerprints | None = None
    differing_paths: list[str] | None = None


class GateCheck(_Model):
    name: str
    passed: bool
    reason: str


class TamperedReceipt(_Model):
    position: int
    scenario: str
    reason: str


class NotExercised(_Model):
    scenario: str
    reason: str


class GateScenarios(_Model):
    """How many of the six scenarios the latest Attempt exercised, and why the others were not."""

    exercised: list[str]
    not_exercised: list[NotExercised]
    count: int
    of: int


class Gate(_Model):
    run_id: str
    passed: bool
    latest_attempt_id: str | None
    baseline_attempt_id: str | None
    checks: list[GateCheck]
    tampered_receipts: list[TamperedReceipt]
    semantics_compared: bool = Field(description="The latest Attempt was compared with an earlier successful one; "
                                                 "false for a single Attempt compared with nothing.")
    scenarios: GateScenarios


class Worker(_Model):
    """One worker registration (ADR 0019): a worker process as it last reported itself."""

    id: str = Field(description="The worker id, also the lease owner name of what it claims.")
    host: str
    pid: int
    kinds: list[str] = Field(description="The command kinds it claims.")
    concurrency: int = Field(description="Its execution slots.")
    in_flight: int = Field(description="Commands it held at its last heartbeat.")
    heartbeat_seconds: float = Field(description="Its heartbeat interval (a third of its lease), seconds.")
    version: str = Field(description="The fencepost version it runs.")
    started_at: str
    last_seen_at: str = Field(description="Its last heartbeat, by the store's clock (UTC).")
    last_seen_seconds: float = Field(description="Seconds since last_seen_at, by the store's clock.")
    live_until: str = Field(description="last_seen_at plus three heartbeat intervals: live before this instant.")
    live: bool


class WorkerList(_Model):
    now: str = Field(description="The store's clock when the registry was read, UTC.")
    live: list[Worker] = Field(description="Workers that renewed their registration within three heartbeat "
                                           "intervals, oldest first.")
    expired: list[Worker] = Field(description="Registrations that stopped renewing (the worker was killed, hung or "
                                              "lost the store) and are not deleted yet.")


class Live(_Model):
    status: Literal["live"]


class KindBacklog(_Model):
    """The pending commands of one kind against the live workers that claim it."""

    kind: str
    pending: int
    oldest_seconds: float = Field(description="How long the oldest has waited, by the store's clock (seconds).")
    live_workers_serving: int = Field(description="Live workers that claim this kind; 0: nothing will run them.")


class HostHealth(_Model):
    """The action host's health counts (host-spec W2; ADR 0051): work for an operator, never unreadiness."""

    schema_version: int
    expected_schema_version: int
    schema_current: bool
    stuck_after_seconds: float = Field(description="How long a running invocation must be unleased and unchanged "
                                                   "to count in stuck_runs.")
    attention: bool = Field(description="Whether any count but probe_dead_letters is above zero, or pending "
                                        "invocations wait for a kind no live worker claims.")
    open_reconciliations: int | None = Field(description="Invocations reconciliation_required.")
    overdue_handoffs: int | None = Field(description="Handoffs past their completion deadline, not yet swept.")
    stuck_runs: int | None = Field(description="Running invocations neither parked nor leased for stuck_after "
                                               "seconds (a dead inline caller or worker no worker took over).")
    budget_exhaustions: int | None = Field(description="Open recovery_budget_exhausted verdicts of the last hour.")
    dead_letters: int | None = Field(description="Dead-lettered event outbox rows outside probe spaces.")
    probe_dead_letters: int | None = Field(description="Dead-lettered rows of conformance probe spaces (expected).")
    pending_invocations: int = Field(0, description="Dispatched invocations still pending (the backlog's total).")
    backlog: list[KindBacklog] = Field(default_factory=list, description="Pending invocations per action kind, "
                                       "oldest first, with the live workers that claim each kind.")
    backlog_kinds_total: int = Field(0, description="Action kinds with pending invocations, also those the "
                                                     "backlog list leaves out (it lists at most 1,000).")


class Ready(_Model):
    status: Literal["ready"]
    backend: str
    schema_version: int
    host: HostHealth | None = Field(default=None, description="The action host's health counts (ADR 0051).")


# ── external completions ──
class CompletionAnswer(_Model):
    """What the host did with a provider's completion (200: taken; the provider stops re-sending)."""

    disposition: Literal["settled", "absorbed", "evidence_only", "contradicted"] = Field(
        description="settled: it settled the invocation; absorbed: an identical completion was already recorded; "
                    "evidence_only: recorded, the invocation's verdict kept; contradicted: it differs from the "
                    "recorded completion, the invocation now needs an operator (the first one is kept).")
    invocation_id: str
    status: Literal["pending", "awaiting_approval", "running", "succeeded", "failed", "reconciliation_required"]
    detail: str


# ── the event relay (issue 15): its publication rows and backlog ──
EventOutboxStatus = Literal["pending", "processing", "retry_pending", "published", "dead_lettered"]


class EventOutboxCounts(_Model):
    """Publication rows per status (0 when none)."""

    pending: int
    processing: int
    published: int
    retry_pending: int
    dead_lettered: int


class EventOutboxSummary(_Model):
    """The relay's backlog, by the store's clock (``fencepost events list`` prints the same)."""

    now: str = Field(description="The store's clock when the rows were counted, UTC.")
    counts: EventOutboxCounts
    backlog: int = Field(description="Rows not yet published nor dead-lettered: pending + retry_pending + "
                                     "processing.")
    oldest_unpublished_at: str | None = Field(description="When the oldest backlog row was recorded (UTC); null "
                                                          "when the backlog is empty.")
    oldest_unpublished_age_seconds: float | None = Field(
        description="Seconds from oldest_unpublished_at to now, by the store's clock; null when the backlog is empty.")


class EventOutboxRow(_Model):
    """One event's publication row (the lease token is never exposed)."""

    event_id: str
    tenant_id: str | None
    space_id: str | None
    type: str | None = Field(description="The event's type.")
    destination: str
    headers: dict[str, Any]
    status: EventOutboxStatus
    attempts: int = Field(description="Publish attempts made (a requeue starts a fresh budget at 0).")
    lease_owner: str | None = Field(description="The relay that holds it (processing only).")
    lease_until: str | None
    available_at: str = Field(description="When it is due (again), UTC.")
    published_at: str | None
    last_error: str | None = Field(description="The last failed attempt's error (kept when dead-lettered).")
    created_at: str
    updated_at: str | None = Field(description="Its last change; for a dead letter, when it was dead-lettered.")


class EventSubject(_Model):
    subject_type: str = Field(description="What kind of thing the event is about, e.g. ActionInvocation.")
    subject_id: str


class Event(_Model):
    """One event of the log as stored (host-spec T7): first write wins, ``sequence`` per (tenant, space)."""

    id: str
    tenant_id: str
    space_id: str
    sequence: int = Field(description="Its place in its space's log (commit order).")
    subject: EventSubject
    type: str = Field(description="e.g. ActionInvocationStarted, AdapterInvocationSucceeded.")
    occurred_at: str
    recorded_at: str
    payload: dict[str, Any]
    actor: dict[str, Any] | None = Field(description="The actor disclosed with the event, when it was.")


class EventLog(_Model):
    tenant_id: str
    space_id: str
    items: list[Event] = Field(description="In sequence order.")
    next_after: int | None = Field(description="A full page's last sequence: pass it as `after` for the next "
                                               "page; null when the page was not full.")


class EventSpace(_Model):
    tenant_id: str
    space_id: str
    last_sequence: int = Field(description="The last sequence given in this space.")


class EventSpaceList(_Model):
    items: list[EventSpace] = Field(description="By tenant, then space.")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")


class EventOutboxList(_Model):
    now: str = Field(description="The store's clock when the rows were read, UTC.")
    items: list[EventOutboxRow] = Field(description="Oldest first (by creation, then event id).")
