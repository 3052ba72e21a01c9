"""What a store must provide: one port per concern, reached from a unit of work as an attribute.

A ``Store`` (``fencepost.store.base``) opens units of work; each is a ``UnitOfWork`` whose attributes are
the ports below (``tx.outbox.claim(...)``, ``tx.catalog.get_head(...)``). Every port returns typed rows
(frozen dataclasses of ``fencepost.store.records`` and ``fencepost.store.workflow_records``) with instants as
aware UTC datetimes, and raises only ``fencepost.core.errors`` types. Later capabilities add their own
port (the action host, the event log, workflow progress) rather than methods on an existing one.

The fence is a type (ADR 0002, ADR 0015). Writes that the lease protects but do not name the token
themselves (an Attempt's start, its Receipts, its verdict) exist only on ``FencedUnit``, the unit that
``Store.fenced`` hands its function and ends with the lease's renewal or finish. Statements that do name the
token (``OutboxPort.renew``/``finish``/``finish_many``/``release``) fence themselves and may run anywhere.

A SQL backend gets every port from ``fencepost.store.sql`` by supplying an ``Executor`` and its dialect's
overrides; any other store implements these protocols directly and proves it with ``fencepost.testing``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Protocol

from fencepost.core.statuses import (
    AttemptStatus,
    CommandStatus,
    Disposition,
    EventOutboxStatus,
    InvocationStatus,
    ReceiptStatus,
    StepRunStatus,
    WorkflowRunStatus,
)
from fencepost.store.delivery_records import DeliveryStartRecord, TargetRecord
from fencepost.store.host_records import (
    AdapterRecord,
    AdapterScope,
    AdapterWrite,
    ClaimedEvent,
    EntityKey,
    EntityStateRecord,
    EventLease,
    EventOutboxRecord,
    EventOutboxSummary,
    EventRecord,
    EventSpace,
    GovernanceRecord,
    Handoff,
    HostHealthCounts,
    InvocationRecord,
    InvocationVerdict,
    NewEvent,
    NewGovernanceRecord,
    NewInvocation,
    NewReconciliation,
    NewResolution,
    ReconciliationRecord,
    ResolutionRecord,
    Subject,
    UnleasedVerdict,
    VerdictHeld,
)
from fencepost.store.records import (
    AttemptLock,
    AttemptRecord,
    ClaimedCommand,
    CommandRecord,
    Finding,
    FrozenFile,
    Lease,
    LeaseEvent,
    PendingKind,
    ReceiptRecord,
    RunFile,
    RunRecord,
    WorkerRecord,
)
from fencepost.store.workflow_records import (
    AdmissionRecord,
    AdmissionRow,
    DispositionRecord,
    HeadRecord,
    InstallationRecord,
    ProgressMutation,
    PublicationRecord,
    QuarantineRecord,
    RunMutation,
    RunState,
    StepRunRow,
    StepStart,
    StoredAdmission,
    TaskOutcome,
    WorkflowEventRow,
)


class OutboxPort(Protocol):
    """The durable command outbox (seed: "Durable Command", "Heartbeat And Takeover")."""

    def insert(self, *, command_id: str, kind: str, payload: dict[str, Any],
               available_at: datetime | None = None) -> None:
        """Insert a PENDING command; the caller writes its parent rows in the same unit.

        Args:
            command_id: unique id (``fencepost.core.ids``). kind: handler name, 1..100 chars.
            payload: a plain JSON object. available_at: earliest delivery (default: the store's now).
        Raises:
            Conflict: the id exists or a value breaks the schema.
        """
        ...

    def insert_leased(self, *, command_id: str, kind: str, payload: dict[str, Any], owner: str,
                      lease_seconds: float) -> Lease:
        """Insert a command already PROCESSING under a lease its producer holds, at delivery 0 (ADR 0022).

        An inline host invocation is written this way: its caller runs it now under this lease and heartbeats
        it (``renew``); ``delivery_count`` stays 0, so worker claims alone count (host-spec A4), and a worker
        takes it over only after the lease expires, at delivery 1 (A8). Records a ``claim`` lease event at
        delivery 0. Only the ``host.invoke`` kind may be held at delivery 0 (the schema refuses others).

        Args:
            command_id: unique id. kind: handler name. payload: a plain JSON object. owner: the lease owner
            (1..200 chars). lease_seconds: the lease duration (seconds, > 0).
        Returns:
            The producer's lease (``delivery`` 0).
        Raises:
            Conflict: the id exists, or the kind may not be held at delivery 0.
        """
        ...

    def claim(self, *, owner: str, kinds: list[str], limit: int, lease_seconds: float,
              command_ids: list[str] | None = None) -> list[ClaimedCommand]:
        """Claim up to ``limit`` due commands of ``kinds``, each under a fresh token and ``delivery_count + 1``.

        Due: PENDING after ``available_at``, or PROCESSING after ``lease_until`` (takeover). Records a
        ``claim`` or ``takeover`` lease event per command. ``lease_seconds`` is the lease duration (seconds).
        Fair across kinds (issue 10 item 4): each kind with due work gets an equal share of ``limit``
        (rounded up) before any kind gets more, and the kind served first rotates from claim to claim, so
        no kind waits behind another's backlog. With ``command_ids``, only those commands can be claimed
        (an empty list claims nothing): a caller serves its own work first (a rehearsal's worker).
        """
        ...

    def renew(self, lease: Lease, *, lease_seconds: float, record: bool = True) -> Lease:
        """Heartbeat and fence: extend ``lease`` by ``lease_seconds`` from the store's now.

        Args:
            record: also append a ``heartbeat`` lease event.
        Returns:
            The renewed lease (same token, new ``until``).
        Raises:
            LeaseLost: the token is no longer current.
        """
        ...

    def hold(self, lease: Lease) -> None:
        """Fence without renewal: check that ``lease`` is its command's current lease, and keep it so until this
        unit commits (PostgreSQL share-locks the command row, so a takeover's claim skips it and a reconcile or
        abort waits; SQLite's write transaction already excludes them). Writes nothing: no new ``until``, no
        heartbeat history; renewal is the heartbeat's job (ADR 0079).

        Raises:
            LeaseLost: the token is no longer current (taken over, reconciled, aborted, finished).
        """
        ...

    def finish(self, lease: Lease, status: CommandStatus, error: str | None = None) -> None:
        """Terminal outcome (DELIVERED or FAILED) under ``lease``; clears the token.

        Raises:
            ValueError: another status. LeaseLost: the token is no longer current.
        """
        ...

    def finish_many(self, leases: list[Lease]) -> list[bool]:
        """Mark several commands DELIVERED in one statement; a lost lease does not undo the others (ADR 0008).

        Returns:
            Per lease, whether it was current (and its command is now DELIVERED).
        A lease listed twice is delivered once; of several leases of one command only the current one is.
        """
        ...

    def finish_and_claim(self, leases: list[Lease], *, owner: str, kinds: list[str], limit: int,
                         lease_seconds: float, command_ids: list[str] | None = None,
                         ) -> tuple[list[bool], list[ClaimedCommand]]:
        """``finish_many(leases)`` and then ``claim(...)`` in one transaction, so that one COMMIT makes both
        durable: the SQLite worker's completion of one batch riding on its next claim (ADR 0093).

        Returns:
            ``(finish_many's list, claim's list)``. The completion runs first, so a listed command whose lease
            is still current (even if expired) is delivered, never taken over by the claim.
        """
        ...

    def release(self, lease: Lease) -> None:
        """Give a claimed command back as PENDING, due now (graceful stop).

        Raises:
            LeaseLost: the token is no longer current.
        """
        ...

    def reconcile(self, command_id: str) -> CommandRecord:
        """Return an expired PROCESSING command to PENDING (seed: only an expired lease).

        Raises:
            NotFound: no such command. LeaseActive: the lease has not expired (carries ``lease_until``).
            Conflict: the command is not PROCESSING.
        """
        ...

    def abort(self, command_id: str, error: str | None = None) -> bool:
        """Mark a PENDING or PROCESSING command ABORTED and clear its token (fences its worker).

        Returns:
            True when aborted now, False when already terminal or absent.
        """
        ...

    def get(self, command_id: str) -> CommandRecord | None:
        """The public view of one command (never its token)."""
        ...

    def lease_events(self, command_id: str) -> list[LeaseEvent]:
        """The command's heartbeat history, oldest first."""
        ...

    def count_by_status(self) -> dict[CommandStatus, int]:
        """How many commands are in each status (absent statuses are omitted)."""
        ...

    def pending_by_kind(self, *, prefix: str = "", limit: int = 100) -> list[PendingKind]:
        """The PENDING backlog per kind whose name starts with ``prefix`` (issue 10 item 6): at most ``limit``
        kinds, the one whose oldest PENDING command is oldest first (ties by kind); each entry also carries the
        totals over every such kind, the ones past ``limit`` included. Kinds with nothing pending are absent."""
        ...


class RehearsalPort(Protocol):
    """Rehearsal Runs, Attempts and Receipts outside a delivery (seed: "Release Gate")."""

    def insert_run(self, *, run_id: str, package_name: str, package_version: str, previous_version: str | None,
                   content_digest: str, manifest: dict[str, Any], files: list[RunFile]) -> None:
        """Freeze a package version as a READY Run with every file's bytes."""
        ...

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(self, limit: int = 100) -> list[RunRecord]:
        """The newest ``limit`` Runs, newest first."""
        ...

    def run_files(self, run_id: str) -> list[RunFile]:
        """A Run's frozen files, by path."""
        ...

    def runs_by_digest(self, content_digest: str) -> list[RunRecord]:
        """Runs of exactly this package content, newest first."""
        ...

    def retire_run(self, run_id: str) -> bool:
        """READY -> RETIRED; False when it was not READY."""
        ...

    def next_attempt_seq(self, run_id: str) -> int:
        """The next Attempt number of the Run (1 for the first); serialized per Run."""
        ...

    def insert_attempt(self, *, attempt_id: str, run_id: str, seq: int, command_id: str,
                       receipts: list[tuple[str, int, str]]) -> None:
        """Insert a PENDING Attempt and its Receipts ``(receipt_id, position, scenario)``; its command first."""
        ...

    def get_attempt(self, attempt_id: str) -> AttemptRecord | None: ...

    def lock_attempt(self, attempt_id: str) -> AttemptLock | None:
        """Take the Attempt's row lock, first in Attempt-then-Outbox order; None when absent."""
        ...

    def list_attempts(self, run_id: str) -> list[AttemptRecord]:
        """A Run's Attempts in sequence order."""
        ...

    def attempt_receipts(self, attempt_id: str) -> list[ReceiptRecord]:
        """An Attempt's Receipts by position."""
        ...

    def latest_seal_key_id(self) -> str | None:
        """The seal key id named by the evidence of the Receipt that finished last; None when no Receipt has
        evidence, or it has no readable seal (ADR 0064)."""
        ...

    def abort_attempt(self, attempt_id: str, reason: str) -> str | None:
        """PENDING/RUNNING -> ABORTED; returns its command id, or None when not abortable."""
        ...

    def abort_open_receipts(self, attempt_id: str) -> int:
        """PENDING/RUNNING Receipts -> ABORTED; returns how many."""
        ...


class FencedRehearsalPort(RehearsalPort, Protocol):
    """The writes of one delivery of an Attempt: only inside a fenced unit, under its lease.

    Each statement also carries the lease condition, so a stale delivery's write touches nothing; the
    delivery number written is the fenced lease's.
    """

    def start_attempt(self, attempt_id: str) -> str | None:
        """(Re)start a non-terminal Attempt for this delivery and reset its provisional Receipts.

        Returns:
            The Run id, or None when the Attempt is terminal or the lease is gone (nothing changed).
        """
        ...

    def receipt_running(self, attempt_id: str, position: int) -> bool:
        """PENDING -> RUNNING for this delivery; False when it was not PENDING or the lease is gone."""
        ...

    def receipt_finish(self, attempt_id: str, position: int, status: ReceiptStatus, evidence: str,
                       evidence_fingerprint: str) -> bool:
        """Record a RUNNING Receipt's outcome of this delivery with its canonical evidence and fingerprint."""
        ...

    def finish_attempt(self, attempt_id: str, status: AttemptStatus, error: str | None = None) -> bool:
        """The Attempt's verdict, in the unit that finishes its command."""
        ...


class CatalogPort(Protocol):
    """The package catalog: publications, the head, installations, dispositions, quarantines (ADR-0224)."""

    def lock_package(self, package_name: str) -> None:
        """Serialize with every guard change or admission of ``package_name`` until the unit ends."""
        ...

    def insert_publication(self, *, publication_id: str, package_name: str, version: str, content_digest: str,
                           definition: str, definition_digest: str, gate: str, gate_run_id: str | None,
                           previous_publication_id: str | None) -> PublicationRecord:
        """Insert an active publication; returns it as stored."""
        ...

    def get_publication(self, publication_id: str) -> PublicationRecord | None: ...

    def get_publication_by_version(self, package_name: str, version: str) -> PublicationRecord | None: ...

    def list_publications(self, package_name: str) -> list[PublicationRecord]: ...

    def all_publications(self) -> list[PublicationRecord]: ...

    def withdraw_publication(self, publication_id: str) -> PublicationRecord | None:
        """active -> withdrawn; returns it as stored, or None when it was not active."""
        ...

    def get_head(self, package_name: str) -> HeadRecord | None: ...

    def move_head(self, package_name: str, publication_id: str, expected_revision: int | None) -> bool:
        """Compare-and-set the head from ``expected_revision`` (None: no head yet); False when it moved."""
        ...

    def get_installation(self, package_name: str) -> InstallationRecord | None: ...

    def all_installations(self) -> list[InstallationRecord]: ...

    def insert_installation(self, *, installation_id: str, package_name: str, publication_id: str,
                            lock_digest: str) -> InstallationRecord:
        """Insert an active installation (generation 1); returns it as stored."""
        ...

    def update_installation(self, *, installation_id: str, publication_id: str, lock_digest: str,
                            expected_generation: int) -> InstallationRecord | None:
        """Compare-and-set by generation; returns it as stored, or None when another change came first."""
        ...

    def get_disposition(self, installation_id: str) -> DispositionRecord | None: ...

    def set_disposition(self, installation_id: str, disposition: Disposition,
                        reason: str | None) -> DispositionRecord:
        """Insert or replace the installation's disposition; returns it as stored."""
        ...

    def open_quarantine(self, installation_id: str, lock_digest: str) -> QuarantineRecord | None: ...

    def insert_quarantine(self, *, quarantine_id: str, installation_id: str, lock_digest: str,
                          reason: str) -> QuarantineRecord:
        """Open a quarantine of the installation at this lock; returns it as stored."""
        ...

    def release_quarantine(self, installation_id: str, lock_digest: str, reason: str) -> bool:
        """Release the open quarantine; False when none is open."""
        ...


class AdmissionPort(Protocol):
    """Atomic workflow admission's ledger (ADR-0224 decision 2)."""

    def get(self, plan_id: str) -> AdmissionRow | None: ...

    def get_by_run(self, run_id: str) -> AdmissionRow | None: ...

    def plan_ids(self) -> list[str]:
        """Every admitted plan id, oldest first."""
        ...

    def insert(self, record: AdmissionRecord) -> None:
        """Write one row of an admission bundle (the record's type names its table)."""
        ...

    def stored(self, plan_id: str, run_id: str) -> StoredAdmission:
        """Every row the admission of ``plan_id`` (Run ``run_id``) wrote, as stored, for replay verification.

        Raises:
            IntegrityViolation: a stored value is outside its vocabulary (a row edited behind our back).
        """
        ...


class WorkersPort(Protocol):
    """The worker registry: one row per running worker process, written by the worker itself (ADR 0019).

    A row says who is running and what it serves, never who owns a command (leases do that). Every instant
    is the store's clock; liveness is ``WorkerRecord.is_live(tx.now())`` (``LIVENESS_INTERVALS`` heartbeat
    intervals since ``last_seen_at``).
    """

    def register(self, *, worker_id: str, host: str, pid: int, kinds: list[str], concurrency: int,
                 heartbeat_seconds: float, version: str, in_flight: int = 0) -> WorkerRecord:
        """Insert the registration, or start it over when ``worker_id`` already has a row (upsert).

        Args:
            worker_id: 1..200 chars. host: 1..255 chars. pid: >= 1. kinds: the kinds it claims (stored
            sorted, without duplicates). concurrency: execution slots, >= 1. heartbeat_seconds: its heartbeat
            interval (seconds), > 0. version: the fencepost version, 1..64 chars. in_flight: commands held, >= 0.
        Returns:
            The row as stored: ``started_at`` and ``last_seen_at`` are now.
        Raises:
            Conflict: a value breaks the schema.
        """
        ...

    def lock_id(self, worker_id: str) -> None:
        """Hold ``worker_id`` until this unit ends: a concurrent unit that locks the same id waits (PostgreSQL: a
        transaction-scoped advisory lock; SQLite: its one write lock already does it). Registration takes it
        before it looks for a live holder, so two starts under one id cannot both register."""
        ...

    def beat(self, worker_id: str, *, in_flight: int, host: str | None = None,
             pid: int | None = None) -> WorkerRecord | None:
        """Renew ``last_seen_at`` to now and record ``in_flight`` (commands held now, >= 0); with ``host`` and
        ``pid``, only when the row is that process's.

        Returns:
            The renewed row, or None when the worker has no row (stopped, or expired and removed) or, with
            ``host`` and ``pid``, when the row is another process's.
        """
        ...

    def deregister(self, worker_id: str, *, host: str | None = None, pid: int | None = None) -> bool:
        """Delete the registration (graceful stop), with ``host`` and ``pid`` only that process's; False when
        there was none."""
        ...

    def list_workers(self) -> list[WorkerRecord]:
        """Every registration, live or not, oldest ``started_at`` first."""
        ...

    def expire(self, older_than_seconds: float) -> list[WorkerRecord]:
        """Delete every registration whose ``last_seen_at`` is more than ``older_than_seconds`` (seconds, >= 0)
        before now, and return them."""
        ...


class AuditPort(Protocol):
    """What ``fencepost audit`` reads: invariant violations and the sealed evidence to recompute."""

    def invariant_findings(self) -> list[Finding]:
        """Every violated invariant of every concern (empty when the data keeps them)."""
        ...

    def sealed_receipts(self) -> list[tuple[ReceiptRecord, str]]:
        """Every Receipt with evidence, with its Run's content digest."""
        ...

    def frozen_files(self) -> list[FrozenFile]:
        """Every frozen package file with its recorded digest."""
        ...

    def schema_checksums(self) -> list[tuple[int, str]]:
        """Applied migrations as recorded: ``(version, checksum)``."""
        ...


class HostPort(Protocol):
    """The action host's invocations, adapter rows and the recorded state of bound entities (host-spec sections A,
    B, C, E, I, N; ADRs 0022, 0034, 0077).

    Reads are plain. The writes an execution makes under its lease take that lease as an argument (the
    credentials captured before the invocation was loaded, host-spec C3) and carry its condition themselves,
    in the host's lock order: invocation row, adapter row, command (the lease check last, ADR 0002). They are
    therefore offered on every unit of work: an inline caller and a worker write the same way.
    """

    def insert_invocation(self, invocation: NewInvocation) -> bool:
        """Insert a new invocation (host-spec B1), with its state binding when it has one (ADR 0077); the caller
        writes its command in the same unit.

        Returns:
            True when inserted; False when its id or its ``(tenant, space, action, key)`` already exists (the
            caller reads the winner and compares bindings, B2-B4, B7).
        Raises:
            Conflict: a value breaks the schema (a NULL binding, a digest without its version).
        """
        ...

    def get_invocation(self, invocation_id: str) -> InvocationRecord | None:
        """One invocation with its command's public lease columns (``attempt_count`` = ``delivery_count``)."""
        ...

    def lock_invocation(self, invocation_id: str) -> InvocationRecord | None:
        """``get_invocation`` that also takes the invocation's row lock until the unit ends: first in the host's
        lock order (PostgreSQL ``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` already serializes writers)."""
        ...

    def store_identity(self) -> str:
        """The control database's identity: 32 lowercase hex characters, random, made once by migration 0017 and
        never changed (a restored backup keeps it). New invocation ids are derived from it (ADR 0108).

        Raises:
            IntegrityViolation: the row is missing (deleted by hand).
        """
        ...

    def find_invocation(self, *, tenant_id: str, space_id: str, action_id: str,
                        idempotency_key: str) -> InvocationRecord | None:
        """The invocation of an idempotency key in its scope (unique per tenant, space, action, key; B10)."""
        ...

    def list_invocations(self, *, tenant_id: str | None = None, space_id: str | None = None,
                         status: InvocationStatus | None = None, action_id: str | None = None,
                         limit: int = 100) -> list[InvocationRecord]:
        """Invocations newest first, filtered by whatever is given (``limit`` 1..10000)."""
        ...

    def update_leased_invocation(self, invocation_id: str, lease: Lease, verdict: InvocationVerdict) -> bool:
        """Write ``verdict`` while the row is in ``verdict.expected`` and ``lease`` is its command's current lease.

        Returns:
            False, changing nothing, when the status or the lease condition fails (host-spec C4: the caller
            raises ``RecoverableFinalization``; C10: "Invocation is no longer running").
        """
        ...

    def update_settled_invocation(self, invocation_id: str, held: VerdictHeld, *, error: str | None,
                                  reconciliation: dict[str, Any] | None) -> bool:
        """Enrich a settled parent (host-spec H17): replace its ``error`` and ``reconciliation`` (None stores
        NULL) while it still holds exactly ``held.status`` and ``held.error`` (NULL-safe: an absent error
        matches only an absent one; ``""`` is an error, I3). It takes the invocation row lock, first in the
        host's lock order, and needs no lease: the verdict it compares is its credential.

        Returns:
            True when changed; False, changing nothing, when the row is missing or holds another status or
            error (H18: a refused enrichment, not an error).
        Raises:
            NotImplementedError: a non-None ``held.completion_digest`` (the I4 guard comes with issue 13).
            ValueError: ``held.status`` is not terminal (a running row is written under its lease).
        """
        ...

    # ── external completion handoffs (host-spec N; ADR 0034) ──
    def record_handoff(self, invocation_id: str, lease: Lease, handoff: Handoff) -> bool:
        """Record a step's external completion handoff (host-spec N1, E6, L5), durable before its marker.

        Sets ``handoff_provider``, ``handoff_reference``, ``pending_completion = handoff.details`` and
        ``completion_due_at = handoff.due_at`` while the invocation is ``running``, holds no handoff yet and
        ``lease`` is its command's current lease (the ``lease_held`` condition of ``update_leased_invocation``).

        Returns:
            True when recorded; False, changing nothing, otherwise: not running, a handoff already recorded (a
            second handoff in one invocation is refused), a stale lease or another invocation's lease.
        Raises:
            Conflict: a value breaks the schema (a provider outside 1..100 chars, a reference outside 1..500).
            ValueError: a naive ``due_at`` (SQLite; PostgreSQL reads it as server-local time: pass aware UTC).
        """
        ...

    def park_invocation(self, invocation_id: str, lease: Lease, pending_completion: dict[str, Any]) -> bool:
        """Park a handed-off invocation after its remaining steps and finalization (host-spec N2).

        Sets ``parked_at`` to this unit's ``now()`` and replaces ``pending_completion`` (a plain JSON object:
        the handler result kept for the callback) while the invocation is ``running``, has a handoff, is not
        parked yet and ``lease`` is its command's current lease. The invocation stays ``running``; the caller
        finishes the command DELIVERED in the same fenced unit, so it is no longer leased nor claimable.

        Returns:
            True when parked; False, changing nothing, otherwise (no handoff, already parked, not running, a
            stale lease).
        """
        ...

    def find_handoffs(self, *, provider: str, external_reference: str) -> list[InvocationRecord]:
        """Every invocation whose handoff is exactly ``(provider, external_reference)``, in any status, oldest
        first (host-spec N30: a callback is matched by these only, never by ids in its body; N33: an empty
        list is the caller's ``NotFound``). Exact, case-sensitive match: a prefix or another provider is
        not a match."""
        ...

    def list_overdue_handoffs(self, *, limit: int = 100) -> list[InvocationRecord]:
        """The deadline sweep's candidates (host-spec N12): ``running`` invocations with a handoff whose
        ``completion_due_at`` <= this unit's ``now()``, ``overdue_at`` still None, and whose command holds no
        live lease (not PROCESSING, or its ``lease_until`` <= now), oldest due first. A plain read: the sweep
        re-checks each candidate under ``lock_invocation`` before it writes (N14).

        Raises:
            ValueError: ``limit`` outside 1..1000.
        """
        ...

    def host_health(self, *, stuck_after: timedelta, window: timedelta) -> HostHealthCounts:
        """The host's health counts in this unit's snapshot (host-spec W2, §1.Y-15; ADR 0051; see
        ``HostHealthCounts`` for each count). A plain read over the status indexes.

        Args:
            stuck_after: how long a running invocation must be unleased and unchanged to count as stuck.
            window: how far back budget exhaustions count (the host status uses one hour).
        Raises:
            ValueError: a negative ``stuck_after`` or a ``window`` that is not positive.
        """
        ...

    def update_unleased_invocation(self, invocation_id: str, expected: InvocationStatus,
                                   verdict: UnleasedVerdict) -> bool:
        """Write every field of ``verdict`` (and ``updated_at``) on an invocation no lease holds (host-spec N8,
        N12, N14): a callback's settlement or evidence, the sweep's ``reconciliation_required`` verdict.

        Callers lock the row first (``lock_invocation``) in the same unit, decide from what they read there
        and pass the full values they decided, including those they keep. The write happens only while the
        row's status is ``expected`` and its command holds no live lease (PROCESSING with ``lease_until`` >
        now). In the same unit a command still PENDING, or PROCESSING under an expired lease, is finished
        DELIVERED with its lease cleared (a ``deliver`` lease event without owner), so that no worker claims
        the invocation again; a command already finished is left as it is.

        Returns:
            True when written; False, changing nothing, when the row is missing, its status is not
            ``expected``, or a live lease holds its command.
        Raises:
            Conflict: a value breaks the schema (``parked_at`` or ``overdue_at`` on a row without a handoff, a
                JSON field that is not an object).
        """
        ...

    def append_reconciliation(self, record: NewReconciliation) -> bool:
        """Append an entry to ``record.log`` (host-spec K1 step 3, L13; ADR 0032): the first write of
        ``(id, log)`` wins, so the same id in the two logs is two entries and a repeated append is a no-op.

        Returns:
            True when stored now; False when ``(id, log)`` was already stored (the first payload stays), or when
            no invocation ``record.invocation_id`` exists in ``record.tenant_id``/``record.space_id`` (host-spec
            V: an entry never crosses its parent's scope).
        Raises:
            Conflict: a value breaks the schema (a payload that is not a JSON object).
        """
        ...

    def list_reconciliations(self, invocation_id: str) -> list[ReconciliationRecord]:
        """An invocation's entries of both logs, oldest first (by ``created_at``, then id, then log)."""
        ...

    # ── governance evidence (ADRs 0043-0045; host-spec D5, D6, O, P) ──
    def append_governance_record(self, record: NewGovernanceRecord) -> bool:
        """Append a governance record (a policy record, the mutation footprint, an approval request or decision,
        an obligation, its satisfaction, an attestation): the first write of ``record.id`` wins.

        Returns:
            True when stored now; False when the id was already stored (the first record stays), or when no
            invocation ``record.invocation_id`` exists in the record's tenant and space (host-spec V).
        Raises:
            Conflict: a value breaks the schema (a payload that is not a JSON object, a name outside 1..200).
        """
        ...

    def list_governance_records(self, invocation_id: str) -> list[GovernanceRecord]:
        """An invocation's governance records, oldest first (by ``created_at``, then id)."""
        ...

    def resume_approved_invocation(self, invocation_id: str, *, owner: str, lease_seconds: float) -> Lease | None:
        """The approval resume (host-spec P3, P4; ADR 0044): an ``awaiting_approval`` invocation whose command is
        finished goes back to ``running`` and its command is leased to ``owner`` for ``lease_seconds`` (seconds)
        under a fresh token, its ``delivery_count`` (the ``attempt_count``) raised to at least 1 and never
        incremented. Records a ``claim`` lease event.

        Returns:
            The temporary lease; None, changing nothing, when the invocation does not await approval or its
            command is not finished.
        Raises:
            ValueError: an empty owner, or ``lease_seconds`` outside (0, 3600].
        """
        ...

    def write_adapter_invocation(self, write: AdapterWrite) -> bool:
        """The conditional adapter-row write (host-spec §I, I1-I7, I17, I19).

        In order: the parent in ``write.scope`` is locked and checked (``LeaseHeld``: ``running`` under this
        invocation's lease; ``VerdictHeld``: exact status and NULL-safe error); then the mutation (a create in
        the scope that refuses a duplicate id; an update in the scope from ``expected_statuses`` that never
        moves ``succeeded``/``ambiguous`` to ``running``/``failed``, which a trigger also refuses); then, for
        ``LeaseHeld``, the lease check on the command, last.

        Returns:
            True when the mutation was made; False, changing nothing, when a check failed.
        Raises:
            LeaseLost: ``LeaseHeld`` and the lease was no longer current at the fence (after the mutation):
                the caller's unit must roll back (``Store.transact`` does, as the error leaves ``fn``).
            NotImplementedError: a ``VerdictHeld`` completion-digest guard (issue 13).
        """
        ...

    def get_adapter_invocation(self, adapter_invocation_id: str) -> AdapterRecord | None: ...

    def list_adapter_invocations(self, invocation_id: str) -> list[AdapterRecord]:
        """An invocation's adapter rows in step order (host-spec G5: the recovery scan)."""
        ...

    # ADR 0040: the tenant isolation checks' scoped read (a separate block).
    def get_adapter_invocation_in_scope(self, adapter_invocation_id: str, scope: AdapterScope) -> AdapterRecord | None:
        """The adapter row only when it lives in ``scope`` (host-spec V2): None for any other tenant, space or
        invocation."""
        ...

    # ADR 0077: the recorded state of the entities actions are bound to (host-spec A13, A17, A19; migration 0011).
    def lock_entity_state(self, key: EntityKey) -> EntityStateRecord | None:
        """The entity's recorded state, with the entity's lock taken until the unit ends, whether or not it has a
        state yet (PostgreSQL: a transaction-scoped advisory lock on the key; SQLite: ``BEGIN IMMEDIATE``), so a
        guard that reads it and the write that depends on it see one state. In the host's lock order: after the
        invocation row and its adapter rows, before the command.

        Returns:
            The record, or None when the entity has no recorded state.
        """
        ...

    def get_entity_state(self, key: EntityKey) -> EntityStateRecord | None:
        """The entity's recorded state (a plain read), or None when it has none."""
        ...

    def set_entity_state(self, key: EntityKey, state: str, *, invocation_id: str,
                         lease: Lease) -> EntityStateRecord | None:
        """Record ``state`` for the entity, as changed by ``invocation_id`` under its ``lease`` (a handler's own
        write through ``HandlerContext.set_state``, or the host's ``StateTransitioned`` fact; ADR 0077).

        In order: the invocation row in ``key``'s tenant and space is locked and must be ``running`` with
        ``lease`` its own command's (``lease.command_id == invocation_id``); the entity's lock; the write; the
        lease check on the command, last. ``previous_state`` becomes the state the entity had before this
        invocation first changed it (a second change by the same invocation keeps it). A ``state`` equal to the
        current one changes nothing: the record, its ``updated_by_invocation`` and its ``updated_at`` are kept.

        Returns:
            The record as it is now; None, changing nothing, when the invocation is missing, in another scope, not
            ``running``, or ``lease`` is another command's.
        Raises:
            LeaseLost: ``lease`` was no longer its command's current lease at the fence (after the write): the
                caller's unit must roll back (``Store.transact`` does, as the error leaves ``fn``).
            Conflict: a value breaks the schema (a state outside 1..100 characters, an entity id outside 1..200).
        """
        ...

    # ADR 0048/0049: operator resolutions and the operator's reads (a separate block; migration 0007).
    def record_resolution(self, resolution: NewResolution) -> bool:
        """Resolve a ``reconciliation_required`` invocation (host-spec §1.Y-13): insert the resolution row with
        a copy of the invocation's current error and reconciliation, then move the invocation's status to
        ``resolution.outcome``. Nothing else of the invocation, its adapter rows, reconciliation log or events
        changes. Callers lock the invocation first (``lock_invocation``) and append ``InvocationResolved`` in
        the same unit.

        Returns:
            True when resolved now; False, changing nothing, when the invocation is missing, in another scope,
            not ``reconciliation_required``, already resolved, or its command holds a live lease.
        Raises:
            Conflict: a value breaks the schema (an outcome other than succeeded/failed, an empty note).
        """
        ...

    def get_resolution(self, invocation_id: str) -> ResolutionRecord | None:
        """The invocation's resolution, or None when no operator resolved it."""
        ...

    def page_invocations(self, *, tenant_id: str | None = None, space_id: str | None = None,
                         status: InvocationStatus | None = None, action_id: str | None = None,
                         after_id: str | None = None, limit: int = 50) -> list[InvocationRecord]:
        """``list_invocations`` with a keyset cursor: the invocations newest first (created_at, then id)
        strictly after the invocation ``after_id`` (None: from the newest). An ``after_id`` naming no invocation
        yields []. ``limit`` 1..1000 (ValueError otherwise)."""
        ...

    def reconciliation_queue(self, *, tenant_id: str | None = None, space_id: str | None = None,
                             limit: int = 100) -> list[InvocationRecord]:
        """The ``reconciliation_required`` invocations, oldest verdict first (updated_at, then id); ``limit``
        1..1000 (ValueError otherwise)."""
        ...


class EventsPort(Protocol):
    """The host's event log (host-spec T1-T8): first-write-wins by a store-wide event id, with its outbox."""

    def append_event(self, event: NewEvent) -> bool:
        """Append ``event`` with the next sequence of its (tenant, space), assigned in this unit's transaction
        (T7): by the append itself, or as the transaction commits (PostgreSQL, ADR 0096). Sequence order is commit
        order either way (ADR 0041), and a read of the log in this transaction sees the event with its sequence.

        Returns:
            True when stored now; False when the id was already stored, in any tenant or space (T1, T4): a
            silent no-op that keeps the first event, its sequence and timestamps (T2).
        """
        ...

    def append_event_with_outbox(self, event: NewEvent, *, destination: str = "host",
                                 headers: dict[str, Any] | None = None) -> bool:
        """``append_event`` plus a ``pending`` publication row, only when the event was stored now (T3).

        Args:
            destination: where the relay publishes it (1..200 chars). headers: a JSON object for the relay.
        """
        ...

    def get_event(self, event_id: str) -> EventRecord | None: ...

    def list_events(self, *, tenant_id: str, space_id: str, subject: Subject | None = None, after: int = 0,
                    limit: int = 1000) -> list[EventRecord]:
        """A space's events with ``sequence > after`` in sequence order, optionally about one subject."""
        ...

    def list_event_spaces(self, *, limit: int = 1000, after: tuple[str, str] | None = None) -> list[EventSpace]:
        """The spaces that hold events, ordered by tenant then space, at most ``limit`` (1..10000), each with the
        last sequence given in it; with ``after=(tenant_id, space_id)`` only the spaces that follow that one (the
        last of the previous page). Raises ValueError for a ``limit`` out of range."""
        ...

    def get_event_outbox(self, event_id: str) -> EventOutboxRecord | None:
        """An event's publication row (with its event's tenant, space and type), or None when it has none."""
        ...

    # ── the relay (issue 15, ADR 0038; host-spec T8, §1.Y-20): the outbox lease protocol on these rows ──
    def claim_event_outbox(self, *, owner: str, limit: int, lease_seconds: float) -> list[ClaimedEvent]:
        """Claim due publication rows under fresh leases (host-spec T8 "pending -> claimed").

        Due: ``pending``/``retry_pending`` with ``available_at <= now`` (the store's clock), or ``processing``
        whose lease expired; never a probe space's row (U30). Each claimed row becomes ``processing`` with
        ``owner``, a fresh random token, ``lease_until = now + lease_seconds`` and one more attempt. On
        PostgreSQL rows another claimer holds are skipped (``SKIP LOCKED``), so concurrent relays never
        claim one row twice nor wait on each other.

        Args:
            owner: the relay's name (1..200 chars). limit: 1..1000. lease_seconds: 0.01..3600.
        Returns:
            The claimed rows, oldest availability first, each with its event as stored. A row whose stored JSON
            (payload, actor, headers) cannot be read back is claimed like the others, with
            ``ClaimedEvent.unreadable`` saying why: it never fails the claim (ADR 0101).
        Raises:
            ValueError: an argument out of range.
        """
        ...

    def renew_event_lease(self, lease: EventLease, *, lease_seconds: float) -> EventLease | None:
        """Move ``lease``'s deadline to ``now + lease_seconds``; None (writing nothing) when it is no longer
        the row's current lease (re-claimed after expiry, or already marked)."""
        ...

    def mark_event_published(self, lease: EventLease) -> bool:
        """``processing -> published`` (``published_at = now``, lease cleared), fenced by the token.

        Returns:
            True when written; False, writing nothing, when ``lease`` is stale (another relay re-claimed the
            row after it expired, or it was already marked).
        """
        ...

    def mark_event_failed(self, lease: EventLease, *, error: str, retry_in_seconds: float) -> bool:
        """``processing -> retry_pending`` with ``last_error = error`` and ``available_at = now +
        retry_in_seconds`` (>= 0, by the store's clock), lease released; fenced by the token.

        Returns:
            True when written; False, writing nothing, when ``lease`` is stale.
        """
        ...

    def dead_letter_event(self, lease: EventLease, *, error: str) -> bool:
        """``processing -> dead_lettered`` with ``last_error = error`` (the budget is spent); fenced by the token.

        Returns:
            True when written; False, writing nothing, when ``lease`` is stale.
        """
        ...

    def release_event(self, lease: EventLease) -> bool:
        """Give a claimed, unpublished row back at once (a graceful stop, a sink that is unavailable): its attempt
        returned and its availability kept, so it keeps its place in the queue (ADR 0109).

        Returns:
            True when written; False, writing nothing, when ``lease`` is stale.
        """
        ...

    def requeue_event(self, event_id: str) -> EventOutboxRecord:
        """Operator requeue (host-spec T8): a dead letter back to ``pending`` now with a fresh attempt budget.

        Returns:
            The row as it is now.
        Raises:
            NotFound: no publication row for ``event_id``.
            Conflict: the event is in a probe space (``event-append-probe-...``, U30: never published; the
                message says "probe space"), or the row is not ``dead_lettered``.
        """
        ...

    def list_event_outbox(self, *, status: EventOutboxStatus | None = None,
                          limit: int = 100) -> list[EventOutboxRecord]:
        """Publication rows, optionally of one status, oldest first (``created_at``, then id); limit 1..10000.
        Headers that cannot be read back read as empty, with ``EventOutboxRecord.unreadable`` saying why."""
        ...

    def summarize_event_outbox(self) -> EventOutboxSummary:
        """Rows per status and the oldest creation per status, by the store's clock (the relay's backlog)."""
        ...


class DeliveryPort(Protocol):
    """Delivery targets and the start barrier rows of delivery invocations (migration 0009; ADRs 0055, 0056)."""

    def insert_target(self, *, target_id: str, name: str, url: str, labels: dict[str, str]) -> TargetRecord | None:
        """Add a live target; None when a live target has ``name`` already (nothing written)."""
        ...

    def get_live_target(self, name: str) -> TargetRecord | None: ...

    def get_target(self, target_id: str) -> TargetRecord | None:
        """By id, removed or not (a past delivery still names its target)."""
        ...

    def list_live_targets(self) -> list[TargetRecord]:
        """Live targets by name."""
        ...

    def list_targets(self) -> list[TargetRecord]:
        """Every target, removed ones too: by name, a live one before the removed ones of its name, those newest
        removed first (the operator page's Targets view)."""
        ...

    def remove_target(self, name: str) -> TargetRecord | None:
        """Mark the live target ``name`` removed (the row stays); None when there is none."""
        ...

    def insert_delivery_start(self, start: DeliveryStartRecord) -> bool:
        """Record a delivery's start barrier (``started_at`` is the store's now); False when it exists already."""
        ...

    def get_delivery_start(self, invocation_id: str) -> DeliveryStartRecord | None: ...

    def list_delivery_starts(self, package_name: str) -> list[DeliveryStartRecord]:
        """The starts of ``package_name``'s deliveries, oldest first."""
        ...


class ProgressPort(Protocol):
    """Workflow progress after admission (migration 0010, ADR 0072): the Run's state, its StepRuns' mutations,
    the run-level ledger, the start barrier rows and the coordinator's candidate pages.

    Every write is a compare-and-set on the exact status and fence read in the same unit, which first called
    ``lock_run`` (a no-op on SQLite, whose BEGIN IMMEDIATE serializes writers; the Run row FOR UPDATE on
    PostgreSQL)."""

    def lock_run(self, run_id: str) -> None:
        """Serialize with every other progress unit of ``run_id`` until this unit ends."""
        ...

    def get_run(self, run_id: str) -> RunState | None: ...

    def list_runs(self, *, status: WorkflowRunStatus | None = None, limit: int = 100) -> list[RunState]:
        """Runs newest first (``created_at``, then id), optionally of one status; limit 1..10000."""
        ...

    def step_runs(self, run_id: str) -> list[StepRunRow]:
        """The Run's StepRuns in step-key order."""
        ...

    def next_event_seq(self, run_id: str) -> int:
        """One above the Run's highest event sequence (the Run's event counter)."""
        ...

    def insert_event(self, event: WorkflowEventRow) -> None: ...

    def cas_step_run(self, *, step_run_id: str, run_id: str, from_status: StepRunStatus, from_fence: int,
                     to_status: StepRunStatus, to_fence: int) -> bool:
        """Move a StepRun from exactly ``from_status``/``from_fence``; False when it is elsewhere (nothing written)."""
        ...

    def cas_run(self, *, run_id: str, from_fence: int, to_fence: int, to_status: WorkflowRunStatus,
                settled_at: datetime | None) -> bool:
        """Move a running Run from exactly ``from_fence``; False when it moved or settled (nothing written)."""
        ...

    def set_cancel_intent(self, *, run_id: str, from_fence: int, to_fence: int, reason: str) -> bool:
        """Store the cancel intent (the store's now) on a running Run at ``from_fence`` that has none."""
        ...

    def insert_mutation(self, mutation: ProgressMutation) -> None: ...

    def insert_run_mutation(self, mutation: RunMutation) -> None: ...

    def insert_start(self, start: StepStart) -> None: ...

    def starts(self, run_id: str) -> list[StepStart]:
        """The Run's start barrier rows by StepRun, then attempt."""
        ...

    def start_of_invocation(self, invocation_id: str) -> StepStart | None: ...

    def task_outcomes(self, run_id: str) -> list[TaskOutcome]:
        """The newest attempt's invocation of each running or lost StepRun of the Run."""
        ...

    def task_statuses(self, run_id: str) -> list[TaskOutcome]:
        """The task invocation of every start of the Run, by StepRun then attempt (one read for a whole page)."""
        ...

    def mutations(self, run_id: str) -> list[ProgressMutation]:
        """The Run's StepRun mutations after admission, by Run fence."""
        ...

    def run_mutations(self, run_id: str) -> list[RunMutation]:
        """The Run's run-level ledger, by fence."""
        ...

    def candidates(self, page: str, *, after: str, limit: int) -> list[str]:
        """Run ids after ``after`` in id order, at most ``limit``: ``verdicts`` (a running step's task has a
        verdict, or a lost step's was resolved), ``ready`` (a step to start), ``cancelling`` (a cancel intent
        and a step not executing yet)."""
        ...


class _Ports(Protocol):
    """What every unit of work offers, fenced or not."""

    @property
    def backend(self) -> str:
        """``"sqlite"``, ``"postgres"`` or another backend's name."""
        ...

    @property
    def outbox(self) -> OutboxPort: ...

    @property
    def catalog(self) -> CatalogPort: ...

    @property
    def admission(self) -> AdmissionPort: ...

    @property
    def audit(self) -> AuditPort: ...

    @property
    def workers(self) -> WorkersPort: ...

    @property
    def host(self) -> HostPort: ...

    @property
    def events(self) -> EventsPort: ...

    @property
    def event_leases(self) -> EventLeasesPort: ...

    @property
    def delivery(self) -> DeliveryPort: ...

    @property
    def progress(self) -> ProgressPort: ...

    def now(self) -> datetime:
        """The store's clock, read once per unit (SQLite: the store's Clock; PostgreSQL: the server)."""
        ...


class UnitOfWork(_Ports, Protocol):
    """One open transaction. Valid only inside ``Store.transaction()``/``transact``/``read``."""

    @property
    def rehearsal(self) -> RehearsalPort: ...

    def _fence(self, lease: Lease) -> FencedUnit:
        """The fenced view of this unit under ``lease``: for ``Store.fenced`` only (tests hold it to that)."""
        ...

    def savepoint(self) -> AbstractContextManager[None]:
        """A nested unit of this transaction: rolled back alone when its block raises (the error goes on),
        part of the transaction otherwise. Used by group commit (``fencepost.store.group_commit``).

        Raises:
            TransactionAborted: the nested unit failed and could not be rolled back alone.
        """
        ...


class FencedUnit(_Ports, Protocol):
    """A unit of work that ``Store.fenced`` ends with the lease fence (renewal or finish), last.

    Everything written through it commits only if the fence holds; the fenced writes also carry the
    lease condition themselves (``require_lease`` as a statement).
    """

    @property
    def lease(self) -> Lease:
        """The lease this unit is fenced by."""
        ...

    @property
    def rehearsal(self) -> FencedRehearsalPort: ...

    def require_lease(self) -> None:
        """Check the lease condition now (and, on PostgreSQL, hold it until the unit ends).

        Raises:
            LeaseLost: the lease is no longer the command's current one.
        """
        ...


# --- Event outbox leases for the store conformance checks (ADR 0040). A separate block: the relay of issue 15
# --- may grow its own claim port in EventsPort; the two are merged by the lead.
class EventLeasesPort(Protocol):
    """Leases on event outbox rows (host-spec U10-U15, U29-U35): list, claim, publish, fail, dead-letter.

    Every write names the caller's owner and token and returns False, changing nothing, when the row is not
    leased by them.
    """

    def list_rows(self, *, tenant_id: str, space_id: str) -> list[Any]:
        """Every outbox row (``EventOutboxRow``) of one (tenant, space), any status."""
        ...

    def claim(self, *, owner: str, tenant_id: str, space_id: str | None, limit: int, lease_seconds: float,
              now: datetime) -> list[Any]:
        """Lease up to ``limit`` due rows of the tenant (and space), each under a fresh token."""
        ...

    def publish(self, event_id: str, *, owner: str, token: str, at: datetime) -> bool: ...

    def fail(self, event_id: str, *, owner: str, token: str, error: str, available_at: datetime) -> bool: ...

    def dead_letter(self, event_id: str, *, owner: str, token: str, reason: str, now: datetime) -> bool: ...

