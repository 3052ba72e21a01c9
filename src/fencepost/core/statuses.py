"""Every status of every durable record, as ``StrEnum``s mirrored by CHECK constraints in the schema.

Seed: plugin-rehearsal-outbox-release-gate-design.md, "Durable Command" (command statuses) and
"Release Gate" (Run READY; Attempt PENDING/RUNNING/SUCCEEDED/FAILED/ABORTED).
"""

from __future__ import annotations

from enum import StrEnum


class CommandStatus(StrEnum):
    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"

    @property
    def terminal(self) -> bool:
        return self in (CommandStatus.DELIVERED, CommandStatus.FAILED, CommandStatus.ABORTED)


class LeaseEventKind(StrEnum):
    """One row of heartbeat history per lease transition (kept forever, seed: recovery signal)."""

    CLAIM = "claim"
    TAKEOVER = "takeover"
    HEARTBEAT = "heartbeat"
    RELEASE = "release"
    RECONCILE = "reconcile"
    ABORT = "abort"
    DELIVER = "deliver"
    FAIL = "fail"


class RunStatus(StrEnum):
    READY = "READY"
    RETIRED = "RETIRED"


class AttemptStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"

    @property
    def terminal(self) -> bool:
        return self in (AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.ABORTED)


class ReceiptStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"

    @property
    def terminal(self) -> bool:
        return self in (ReceiptStatus.SUCCEEDED, ReceiptStatus.FAILED, ReceiptStatus.ABORTED)


# ── the package catalog (ADR-0224; lower case, the convention of every table since 0002, ADR 0015) ──


class PublicationStatus(StrEnum):
    ACTIVE = "active"
    WITHDRAWN = "withdrawn"


class PublicationGate(StrEnum):
    """How a publication passed the release gate: a passing rehearsal, or an explicit waiver."""

    PASSED = "passed"
    WAIVED = "waived"


class InstallationStatus(StrEnum):
    ACTIVE = "active"
    UNINSTALLED = "uninstalled"


class Disposition(StrEnum):
    """The lifecycle disposition of an installation: a disabled one admits no new workflow Run."""

    ACTIVE = "active"
    DISABLED = "disabled"


# ── workflows (ADR-0224) ──


class WorkflowRunStatus(StrEnum):
    """A workflow Run: ``running`` from admission until the frontier aggregates its steps (ADR 0072)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def terminal(self) -> bool:
        return self is not WorkflowRunStatus.RUNNING


class StepRunStatus(StrEnum):
    """A StepRun (ADR-0156 family, ADR 0072): ``waiting`` on its needs, ``ready`` (a projection, not a claim),
    ``running`` once past its start barrier, ``lost`` when the host could not tell what its task did (an operator
    resolves it), and the terminal states. Terminal states never change."""

    WAITING = "waiting"
    READY = "ready"
    RUNNING = "running"
    LOST = "lost"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def terminal(self) -> bool:
        return self in _STEP_TERMINAL


_STEP_TERMINAL = frozenset({StepRunStatus.SUCCEEDED, StepRunStatus.FAILED, StepRunStatus.SKIPPED,
                            StepRunStatus.CANCELLED, StepRunStatus.TIMED_OUT})


class WorkflowEventType(StrEnum):
    """Run events: ``workflow.*`` for the Run, ``step.*`` for one StepRun (``step.<status>`` after admission)."""

    ADMITTED = "workflow.admitted"
    STEP_CREATED = "step.created"
    CANCEL_REQUESTED = "workflow.cancel_requested"
    RUN_SUCCEEDED = "workflow.succeeded"
    RUN_FAILED = "workflow.failed"
    RUN_CANCELLED = "workflow.cancelled"
    RUN_TIMED_OUT = "workflow.timed_out"
    STEP_READY = "step.ready"
    STEP_RUNNING = "step.running"
    STEP_LOST = "step.lost"
    STEP_SUCCEEDED = "step.succeeded"
    STEP_FAILED = "step.failed"
    STEP_SKIPPED = "step.skipped"
    STEP_CANCELLED = "step.cancelled"
    STEP_TIMED_OUT = "step.timed_out"

    @classmethod
    def of_step(cls, status: StepRunStatus) -> WorkflowEventType:
        """The event of a StepRun entering ``status`` (``step.<status>``)."""
        return cls(f"step.{status}")

    @classmethod
    def of_run(cls, status: WorkflowRunStatus) -> WorkflowEventType:
        """The event of a Run settling at the terminal ``status`` (``workflow.<status>``)."""
        return cls(f"workflow.{status}")


class StepMutationKind(StrEnum):
    """Why a StepRun changed: admission, a frontier pass, its start barrier, its task's verdict, a cancel."""

    CREATE = "create"
    ADVANCE = "advance"      # waiting -> ready | skipped (the frontier)
    START = "start"          # ready -> running (the start barrier)
    SETTLE = "settle"        # running | lost -> a verdict of its task's invocation
    CANCEL = "cancel"        # waiting | ready -> cancelled (the Run's cancel intent)
    REFUSE = "refuse"        # ready -> failed: a start guard is false (quarantine, disable, target removed)


class RunMutationKind(StrEnum):
    """Why a Run changed other than through a StepRun mutation (the run-level ledger, ADR 0072)."""

    CANCEL_REQUEST = "cancel_request"
    SETTLE = "settle"


# ── the action host (seed: platform-host-8.1-readme-excerpt.md; ../shared/host-spec.md §0.4, §1.Y-1) ──


class InvocationStatus(StrEnum):
    """An action invocation's status. Terminal verdicts are immutable except for a late callback settling a
    swept parked handoff, an operator resolution, and a contradictory completion (host-spec §1.Y-1)."""

    PENDING = "pending"                                   # dispatched, not yet claimed
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"                                   # leased, inline, or parked with a pending completion
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RECONCILIATION_REQUIRED = "reconciliation_required"

    @property
    def terminal(self) -> bool:
        return self in (InvocationStatus.SUCCEEDED, InvocationStatus.FAILED,
                        InvocationStatus.RECONCILIATION_REQUIRED)


class AdapterStatus(StrEnum):
    """An adapter invocation row (one per adapter step). ``succeeded`` and ``ambiguous`` never regress to
    ``running`` or ``failed`` (host-spec I7)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"


class Outcome(StrEnum):
    """The five outcomes an adapter reply may report, case-sensitive (host-spec F15). A handoff is not one of
    them: it is ``Accepted`` (discriminator ``"accepted"``)."""

    SUCCESS = "success"
    PERMANENT_FAILURE = "permanent_failure"
    TRANSIENT_FAILURE = "transient_failure"
    AMBIGUOUS = "ambiguous"
    TIMEOUT = "timeout"


class ReconciliationKind(StrEnum):
    """Why an invocation needs an operator's decision (host-spec F17, §1.Y-4)."""

    ADAPTER_OUTCOME_AMBIGUOUS = "adapter_outcome_ambiguous"
    HANDLER_DECISION_REQUIRED = "handler_decision_required"
    APPLIED_EFFECT = "applied_effect"                     # an effect is recorded, the invocation not continued (G6, G8)
    RECOVERY_BUDGET_EXHAUSTED = "recovery_budget_exhausted"  # H4
    COMPLETION_OVERDUE = "completion_overdue"                 # N12: the sweep found a handoff past its deadline
    COMPLETION_CONTRADICTED = "completion_contradicted"       # N7: a second callback contradicts the first
    COMPLETION_RESULT_INVALID = "completion_result_invalid"   # N9: a settling result fails the result schema


class ReconciliationLog(StrEnum):
    """The two reconciliation logs of host-spec L13: the governance log (``ExternalReconciliation`` evidence of
    an ambiguous or applied effect, K1) and the outer completion log (``record_completion_reconciliation``).
    Both entries of one fact share a stable id, so a repeated attempt deduplicates in each log."""

    GOVERNANCE = "governance"
    COMPLETION = "completion"


class GovernanceRecordKind(StrEnum):
    """What a governance evidence record is (host-spec D5, D6, O, P; ADRs 0043-0045): one append-only table holds
    them all, each under an id derived from the invocation and what it is about (never the attempt, §1.Y-6)."""

    POLICY_RECORD = "policy_record"              # one policy's decision for the invocation (D6)
    MUTATION_FOOTPRINT = "mutation_footprint"    # the persisted mutation-governance decision (D5)
    APPROVAL_REQUEST = "approval_request"        # the HITL checkpoint: who may approve, until when (P1, §1.Y-5)
    APPROVAL_DECISION = "approval_decision"      # the HITL decision: approved or rejected, by whom (P1)
    OBLIGATION = "obligation"                    # an obligation a policy attached (O, §1.Y-6)
    OBLIGATION_SATISFIED = "obligation_satisfied"  # an obligation's satisfaction (O3: one per obligation)
    ATTESTATION = "attestation"                  # an execution attestation of one adapter step (G17-G22)


class InvocationMode(StrEnum):
    """How an invocation was submitted (host-spec A2, ADR 0022): to workers, or run now by its caller under a
    caller lease. Either way its lease is the outbox command with the invocation's id."""

    DISPATCH = "dispatch"
    INLINE = "inline"


class EventOutboxStatus(StrEnum):
    """A host event's publication row (host-spec T8): the outbox lease protocol, reused by the relay."""

    PENDING = "pending"
    PROCESSING = "processing"
    PUBLISHED = "published"
    RETRY_PENDING = "retry_pending"
    DEAD_LETTERED = "dead_lettered"


class CompletionOutcome(StrEnum):
    """What an external completion reports (host-spec N, §2.6)."""

    COMPLETED = "completed"
    FAILED = "failed"


class CompletionDisposition(StrEnum):
    """What the host did with an external completion (host-spec N decision table, N33)."""

    SETTLED = "settled"                  # it settled the invocation (parked, or parked and swept)
    STILL_EXECUTING = "still_executing"  # refused: the invocation has not parked yet (N4); nothing written
    ABSORBED = "absorbed"                # an identical repeat of the recorded completion (N6)
    CONTRADICTED = "contradicted"        # differs from the recorded completion: reconciliation_required (N7)
    EVIDENCE_ONLY = "evidence_only"      # recorded as evidence; the verdict is kept (N10, N11, N20)
    NOT_FOUND = "not_found"              # no handoff has this reference (yet): the provider retries (N33)
