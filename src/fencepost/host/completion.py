"""External completions: a provider's callback for a handoff, decided under the invocation's row lock (host-spec
N1-N11, N19, N20, N30, N33; ADR 0035).

A step that answers ``Accepted(external_reference)`` hands its operation off: the handoff is durable before the
step's marker, the remaining steps run, and finalization **parks** the invocation (``parked_at``, still
``running``, its command finished: no lease, never claimed, outside the recovery budget). The provider later calls
back; ``apply_completion`` matches the callback to its invocation by ``(provider, external_reference)`` (never by
ids in the body), digests it, locks the row and decides, in the order of the spec's table:

1. a completion is already recorded: an identical one is **absorbed**; another is a **contradiction**: the
   invocation becomes ``reconciliation_required``, the first completion stays on record, the second is logged
   (a ``completion`` reconciliation entry) and ``ExternalOperationContradicted`` is emitted;
2. otherwise by state: ``running`` and parked, not swept: **settles**; ``running`` and not parked:
   **still_executing**, nothing written; swept (``overdue_at``) and parked: **settles** (a late callback);
   swept and not parked: **evidence only**, the handoff cleared; any other verdict: **evidence only**.

A settling ``completed`` callback merges its result into the parked result and validates the merge against the
action's result schema before anything is written; an invalid merge is recorded as evidence and settles
``reconciliation_required`` (``completion_result_invalid``). A settling ``failed`` callback settles ``failed``
with its error, or a fixed message when it gave none. No reference matches: ``not_found``, nothing recorded, so
the provider retries (N33: a callback that outruns its handoff is never buffered).

Redaction (N28, N29; ADR 0042): once matched, and before anything is digested or written, a supplied result
passes through ``redact_external_completion_result`` and a supplied error through ``redact_error_text``
(``source="external_completion"``); the record, the digest, the adapter row, the events and the verdict all use
the redacted values. A missing error is Host's ``FIXED_FAILURE``, which no hook sees.

Private result fields (A16; ADR 0070): after redaction, the fields the action's result schema marks private are
stripped from the supplied result, so they are in no digest, record, row, event or merge.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import Conflict, IntegrityViolation, InvalidInput, NotFound
from fencepost.core.statuses import (
    AdapterStatus,
    CompletionDisposition,
    CompletionOutcome,
    InvocationStatus,
    ReconciliationKind,
    ReconciliationLog,
)
from fencepost.host.action import ActionRegistry
from fencepost.host.lifecycle import (
    VERDICT_EVENTS,
    event_id,
    invocation_event,
    invocation_subject,
    reconciliation_id,
    step_event,
)
from fencepost.host.private_fields import strip_private
from fencepost.host.redaction import ErrorSource, Redaction, error_context, redact_completion_result, redact_error
from fencepost.store.host_records import (
    AdapterScope,
    AdapterWrite,
    InvocationRecord,
    NewEvent,
    NewReconciliation,
    ResolutionRecord,
    UnleasedVerdict,
    UpdateAdapterRow,
    VerdictHeld,
)
from fencepost.store.ports import UnitOfWork

COMPLETED_EVENT = "ExternalOperationCompleted"
FAILED_EVENT = "ExternalOperationFailed"
CONTRADICTED_EVENT = "ExternalOperationContradicted"

#: The failure text of a ``failed`` completion that gave no error (N29's fixed message).
FIXED_FAILURE = "the provider reported that the operation failed"

MAX_REFERENCE = 500
MAX_ERROR = 2000
DIGEST_VERSION = "cmp1"


def _storable(text: str) -> bool:
    """Text both backends store as given: encodable UTF-8 without NUL (PostgreSQL text cannot hold NUL)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


@dataclass(frozen=True)
class Completion:
    """One external completion as the provider reported it (host-spec §2.6).

    Attributes:
        provider: the handing-off adapter's ``vendor`` (1..100 chars). external_reference: the reference its
            ``Accepted`` reply carried (1..500 chars). outcome: ``completed`` or ``failed``. result: the
            provider's result (a JSON object or None). error: the provider's error text (at most 2,000 chars).
            evidence: anything else worth keeping (a JSON object or None).
    Raises:
        InvalidInput: any of these out of bounds, or not plain JSON.
    """

    provider: str
    external_reference: str
    outcome: CompletionOutcome
    result: dict[str, Any] | None = None
    error: str | None = None
    evidence: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.provider, str) or not 1 <= len(self.provider) <= 100:
            raise InvalidInput("provider is 1 to 100 characters")
        if not isinstance(self.external_reference, str) or not 1 <= len(self.external_reference) <= MAX_REFERENCE:
            raise InvalidInput(f"external_reference is 1 to {MAX_REFERENCE} characters")
        for what, text in (("provider", self.provider), ("external_reference", self.external_reference),
                           ("error", self.error)):
            if text is not None and not _storable(text):
                raise InvalidInput(f"{what} must be Unicode text without NUL characters")
        if not isinstance(self.outcome, CompletionOutcome):
            raise InvalidInput("outcome is CompletionOutcome.COMPLETED or CompletionOutcome.FAILED")
        if self.error is not None and (not isinstance(self.error, str) or len(self.error) > MAX_ERROR):
            raise InvalidInput(f"error is text of at most {MAX_ERROR} characters")
        for what, value in (("result", self.result), ("evidence", self.evidence)):
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise InvalidInput(f"{what} must be a JSON object")
            try:
                canonical_json(dict(value)).encode("utf-8")
            except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
                raise InvalidInput(f"{what} must be plain JSON of valid Unicode text") from None

    @property
    def digest(self) -> str:
        """The completion's identity (N6): a versioned SHA-256 over reference, outcome, result, error and
        evidence, in canonical JSON. Equal digests are the same completion."""
        body = canonical_json({"reference": self.external_reference, "outcome": str(self.outcome),
                               "result": self.result, "error": self.error, "evidence": self.evidence})
        return f"{DIGEST_VERSION}:{hashlib.sha256(body.encode()).hexdigest()}"


@dataclass(frozen=True)
class CompletionReceipt:
    """What ``Host.complete`` did.

    Attributes:
        disposition: see ``CompletionDisposition``. invocation_id: the matched invocation (None when
            ``not_found``). status: its status afterwards. detail: one sentence for logs and HTTP answers.
        changed: whether this completion changed the invocation's status (its status telemetry, S3).
        kind: the reconciliation kind of a ``reconciliation_required`` status it wrote, else None.
    """

    disposition: CompletionDisposition
    invocation_id: str | None
    status: InvocationStatus | None
    detail: str
    changed: bool = False
    kind: ReconciliationKind | None = None


def decide(invocation: InvocationRecord, digest: str) -> CompletionDisposition:
    """The decision table of host-spec N, in its order (a pure function of the locked row and the digest)."""
    recorded = invocation.external_completion
    if recorded is not None:
        return (CompletionDisposition.ABSORBED if recorded.get("digest") == digest
                else CompletionDisposition.CONTRADICTED)
    parked = invocation.parked_at is not None
    swept = invocation.overdue_at is not None
    if invocation.status is InvocationStatus.RUNNING:
        if not parked:
            return CompletionDisposition.STILL_EXECUTING
        return CompletionDisposition.SETTLED if not swept else CompletionDisposition.EVIDENCE_ONLY
    if invocation.status is InvocationStatus.RECONCILIATION_REQUIRED and swept and parked:
        return CompletionDisposition.SETTLED  # N19: a late callback settles a swept handoff that had parked
    return CompletionDisposition.EVIDENCE_ONLY  # N10, N11, N20


def _record(completion: Completion, invocation: InvocationRecord, disposition: CompletionDisposition,
            received_at: str) -> dict[str, Any]:
    """The ``external_completion`` JSON: what was received, its digest, when, and what it was taken for."""
    return {"digest": completion.digest, "outcome": str(completion.outcome), "result": completion.result,
            "error": completion.error, "evidence": completion.evidence, "received_at": received_at,
            "disposition": str(disposition), "provider": invocation.handoff_provider,
            "external_reference": invocation.handoff_reference}


def _handoff_step(invocation: InvocationRecord) -> tuple[str | None, str | None]:
    details = invocation.pending_completion or {}
    return details.get("adapter_invocation_id"), details.get("step")


def apply_completion(tx: UnitOfWork, actions: ActionRegistry, completion: Completion,
                     redaction: Redaction | None = None) -> CompletionReceipt:
    """Match, lock, redact, decide and record one completion in ``tx`` (see the module docstring).

    Returns:
        The receipt; nothing was written for ``not_found``, ``still_executing`` and ``absorbed``.
    Raises:
        Conflict: two invocations hold this (provider, reference): an operator decides which one it is for.
        RedactionFailed: the completion-result hook failed; nothing is written (the unit rolls back).
    """
    found = tx.host.find_handoffs(provider=completion.provider, external_reference=completion.external_reference)
    if not found:
        return CompletionReceipt(CompletionDisposition.NOT_FOUND, None, None,
                                 "no handoff has this reference (yet); retry later")
    if len(found) > 1:
        raise Conflict(f"{len(found)} invocations hold this provider reference; an operator decides")
    invocation = tx.host.lock_invocation(found[0].id)  # N8: the decision and its writes share this lock
    if invocation is None:  # pragma: no cover - found above in this unit
        raise NotFound("the matched invocation vanished")
    if redaction is not None:
        completion = _redacted(tx, redaction, invocation, completion)
    completion = _without_private(actions, invocation, completion)
    digest = completion.digest
    disposition = decide(invocation, digest)
    if disposition is CompletionDisposition.STILL_EXECUTING:
        return CompletionReceipt(disposition, invocation.id, invocation.status,
                                 "the invocation is still executing; retry after it has parked")
    if disposition is CompletionDisposition.ABSORBED:
        return CompletionReceipt(disposition, invocation.id, invocation.status, "an identical completion is recorded")
    received_at = tx.now().isoformat()
    if disposition is CompletionDisposition.CONTRADICTED:
        return _contradiction(tx, invocation, completion, received_at)
    if disposition is CompletionDisposition.SETTLED:
        return _settle(tx, actions, invocation, completion, received_at)
    return _evidence_only(tx, invocation, completion, received_at)


def _without_private(actions: ActionRegistry, invocation: InvocationRecord, completion: Completion) -> Completion:
    """A16: the supplied result without the action's private result fields, before it is digested, merged,
    validated or recorded anywhere (row, adapter output, event). An action that no longer resolves has no schema
    to name them: its completion settles nothing (``completion_result_invalid``) and is recorded as received."""
    if completion.result is None:
        return completion
    try:
        action = actions.resolve(invocation.action_id, invocation.action_version)
    except NotFound:
        return completion
    return replace(completion, result=strip_private(action.result, completion.result))


def _redacted(tx: UnitOfWork, redaction: Redaction, invocation: InvocationRecord,
              completion: Completion) -> Completion:
    """N28, N29: the completion with its supplied result and error redacted, once, before it is digested."""
    result = redact_completion_result(redaction, invocation.action_id, completion.provider, completion.result)
    error = completion.error
    if error is not None and redaction.redact_error_text is not None:
        adapter_id, _ = _handoff_step(invocation)
        row = tx.host.get_adapter_invocation(adapter_id) if adapter_id is not None else None
        context = error_context(invocation.action_id, ErrorSource.EXTERNAL_COMPLETION,
                                adapter_type=row.adapter_type if row is not None else None,
                                operation=row.operation if row is not None else None,
                                vendor=completion.provider, adapter_invocation_id=adapter_id)
        error = redact_error(redaction, context, error)[:MAX_ERROR]
        if not _storable(error):
            error = error.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\\0")
    return replace(completion, result=result, error=error)


def _write(tx: UnitOfWork, invocation: InvocationRecord, verdict: UnleasedVerdict) -> None:
    if not tx.host.update_unleased_invocation(invocation.id, invocation.status, verdict):
        # Under the row lock only a live lease can refuse: the invocation is executing again.
        raise IntegrityViolation(f"invocation {invocation.id} changed under its row lock")


def _adapter_evidence(tx: UnitOfWork, invocation: InvocationRecord, held: VerdictHeld, record: dict[str, Any],
                      output: dict[str, Any] | None) -> None:
    """The callback on the handoff step's row (N10, N28): its reconciliation JSON, and for a settling completed
    outcome its output. Conditioned on the verdict just written; a row missing or refused is left as it is."""
    adapter_id, _ = _handoff_step(invocation)
    if adapter_id is None:
        return
    row = tx.host.get_adapter_invocation(adapter_id)
    if row is None or row.status is not AdapterStatus.SUCCEEDED:
        return  # the marker never landed: an evidence gap the audit already reports
    tx.host.write_adapter_invocation(AdapterWrite(
        AdapterScope(invocation.tenant_id, invocation.space_id, invocation.id),
        UpdateAdapterRow(adapter_id, AdapterStatus.SUCCEEDED, output=output,
                         reconciliation={**(row.reconciliation or {}), "external_completion": record}),
        held, frozenset({AdapterStatus.SUCCEEDED})))


def _outcome_event(invocation: InvocationRecord, completion: Completion, record: dict[str, Any]) -> NewEvent:
    adapter_id, step = _handoff_step(invocation)
    event_type = COMPLETED_EVENT if completion.outcome is CompletionOutcome.COMPLETED else FAILED_EVENT
    payload = {"step": step, "provider": invocation.handoff_provider,
               "external_reference": invocation.handoff_reference,  # N30: the stored reference
               "outcome": str(completion.outcome), "result": completion.result, "error": completion.error,
               "digest": record["digest"], "disposition": record["disposition"]}
    return step_event(invocation, adapter_id or invocation.id, event_type, payload)


def _settle(tx: UnitOfWork, actions: ActionRegistry, invocation: InvocationRecord, completion: Completion,
            received_at: str) -> CompletionReceipt:
    parked = dict((invocation.pending_completion or {}).get("result") or {})
    if completion.outcome is CompletionOutcome.COMPLETED:
        merged = {**parked, **(completion.result or {})}
        status, error, kind = InvocationStatus.SUCCEEDED, None, None
        try:
            action = actions.resolve(invocation.action_id, invocation.action_version)
            if action.result is not None:  # N9: validated before any write
                merged = strip_private(action.result,
                                       action.result.model_validate(merged).model_dump(mode="json")) or {}
        except NotFound:
            status, kind = InvocationStatus.RECONCILIATION_REQUIRED, ReconciliationKind.COMPLETION_RESULT_INVALID
            error = "the completion settles an action this host no longer defines; an operator decides"
        except ValidationError as invalid:
            status, kind = InvocationStatus.RECONCILIATION_REQUIRED, ReconciliationKind.COMPLETION_RESULT_INVALID
            error = (f"the completed result does not match the action's result schema "
                     f"({invalid.error_count()} error(s)); recorded as evidence, an operator decides")
        result = merged if status is InvocationStatus.SUCCEEDED else invocation.result
    else:
        status, kind, result = InvocationStatus.FAILED, None, None
        error = (completion.error or FIXED_FAILURE)[:MAX_ERROR]
    disposition = CompletionDisposition.SETTLED if kind is None else CompletionDisposition.EVIDENCE_ONLY
    record = _record(completion, invocation, disposition, received_at)
    if kind is None:  # settled: an earlier verdict's reconciliation (a sweep's) is history, not a live kind
        reconciliation = ({"resolved_by": "external completion", "previous": invocation.reconciliation}
                          if invocation.reconciliation else {})
    else:
        reconciliation = {**(invocation.reconciliation or {}), "kind": str(kind),
                          "external_completion_digest": record["digest"]}
    _write(tx, invocation, UnleasedVerdict(status, error, result, reconciliation or None, None, record,
                                           invocation.parked_at, invocation.overdue_at))
    held = VerdictHeld(status, error)
    _adapter_evidence(tx, invocation, held, record,
                      completion.result if status is InvocationStatus.SUCCEEDED else None)
    tx.events.append_event_with_outbox(_outcome_event(invocation, completion, record))
    _verdict_event(tx, invocation, status, error, part="completion")
    if kind is not None:
        tx.host.append_reconciliation(_entry(invocation, kind, ReconciliationLog.GOVERNANCE, record))
    return CompletionReceipt(disposition, invocation.id, status,
                             "settled" if kind is None else error or "recorded as evidence",
                             changed=status is not invocation.status, kind=kind)


def _evidence_only(tx: UnitOfWork, invocation: InvocationRecord, completion: Completion,
                   received_at: str) -> CompletionReceipt:
    """N10, N11, N20: the verdict (or the running status) is kept; the callback is recorded. A swept, unparked
    handoff is cleared: the remaining steps are not claimed to have run."""
    resolution = tx.host.get_resolution(invocation.id) if invocation.status.terminal else None
    reported = InvocationStatus.SUCCEEDED if completion.outcome is CompletionOutcome.COMPLETED else \
        InvocationStatus.FAILED
    if resolution is not None and resolution.outcome is not reported:
        return _contradicts_resolution(tx, invocation, completion, received_at, resolution)
    record = _record(completion, invocation, CompletionDisposition.EVIDENCE_ONLY, received_at)
    swept_unparked = invocation.overdue_at is not None and invocation.parked_at is None
    pending = None if swept_unparked else invocation.pending_completion
    _write(tx, invocation, UnleasedVerdict(invocation.status, invocation.error, invocation.result,
                                           invocation.reconciliation, pending, record, invocation.parked_at,
                                           invocation.overdue_at))
    _adapter_evidence(tx, invocation, VerdictHeld(invocation.status, invocation.error), record, None)
    tx.events.append_event_with_outbox(_outcome_event(invocation, completion, record))
    tx.host.append_reconciliation(_entry(invocation, ReconciliationKind.APPLIED_EFFECT, ReconciliationLog.COMPLETION,
                                         record))
    return CompletionReceipt(CompletionDisposition.EVIDENCE_ONLY, invocation.id, invocation.status,
                             f"recorded as evidence; the invocation stays {invocation.status}")


def _contradiction(tx: UnitOfWork, invocation: InvocationRecord, completion: Completion,
                   received_at: str) -> CompletionReceipt:
    """N7: the first completion stays on record; the second is logged; the invocation needs an operator."""
    first = invocation.external_completion or {}
    second = _record(completion, invocation, CompletionDisposition.CONTRADICTED, received_at)
    status = InvocationStatus.RECONCILIATION_REQUIRED
    differs = [field for field in ("outcome", "result", "error", "evidence") if first.get(field) != second[field]]
    error = (f"a second external completion ({second['outcome']}) contradicts the first ({first.get('outcome')}): "
             f"its {', '.join(differs) or 'digest'} differ(s); the first is kept, an operator decides")
    reconciliation = {**(invocation.reconciliation or {}), "kind": str(ReconciliationKind.COMPLETION_CONTRADICTED),
                      "first_digest": first.get("digest"), "second_digest": second["digest"]}
    _write(tx, invocation, UnleasedVerdict(status, error, invocation.result, reconciliation,
                                           invocation.pending_completion, first, invocation.parked_at,
                                           invocation.overdue_at))
    tx.events.append_event_with_outbox(_contradicted_event(invocation, first, second))
    _verdict_event(tx, invocation, status, error, part="contradiction")
    tx.host.append_reconciliation(_entry(invocation, ReconciliationKind.COMPLETION_CONTRADICTED,
                                         ReconciliationLog.COMPLETION, second))
    tx.host.append_reconciliation(_entry(invocation, ReconciliationKind.COMPLETION_CONTRADICTED,
                                         ReconciliationLog.GOVERNANCE, second))
    return CompletionReceipt(CompletionDisposition.CONTRADICTED, invocation.id, status, error,
                             changed=status is not invocation.status, kind=ReconciliationKind.COMPLETION_CONTRADICTED)


def _contradicts_resolution(tx: UnitOfWork, invocation: InvocationRecord, completion: Completion,
                            received_at: str, resolution: ResolutionRecord) -> CompletionReceipt:
    """A provider's completion that disagrees with an operator's resolution (ADR 0048): the resolution is final
    and stays (one per invocation), but the disagreement is never absorbed silently. The completion is
    recorded, an ``ExternalOperationContradicted`` event names the resolution as the first word and the
    completion as the second, and the reconciliation log gets a ``completion_contradicted`` entry that
    ``host show`` and the audit trail list."""
    second = _record(completion, invocation, CompletionDisposition.CONTRADICTED, received_at)
    first = {"resolution": resolution.id, "outcome": str(resolution.outcome), "operator": resolution.operator}
    _write(tx, invocation, UnleasedVerdict(invocation.status, invocation.error, invocation.result,
                                           invocation.reconciliation, invocation.pending_completion, second,
                                           invocation.parked_at, invocation.overdue_at))
    tx.events.append_event_with_outbox(_contradicted_event(invocation, first, second))
    tx.host.append_reconciliation(_entry(invocation, ReconciliationKind.COMPLETION_CONTRADICTED,
                                         ReconciliationLog.COMPLETION, {**second, "resolution": first}))
    detail = (f"the provider reports {completion.outcome} but {resolution.operator} resolved it "
              f"{resolution.outcome}: the resolution stays, the contradiction is recorded; review it")
    return CompletionReceipt(CompletionDisposition.CONTRADICTED, invocation.id, invocation.status, detail,
                             kind=ReconciliationKind.COMPLETION_CONTRADICTED)


def _contradicted_event(invocation: InvocationRecord, first: dict[str, Any], second: dict[str, Any]) -> NewEvent:
    """One event per distinct contradicting completion (its id carries the second digest)."""
    return NewEvent(id=event_id(invocation.id, CONTRADICTED_EVENT, second["digest"]), tenant_id=invocation.tenant_id,
                    space_id=invocation.space_id, subject=invocation_subject(invocation.id), type=CONTRADICTED_EVENT,
                    payload={"provider": invocation.handoff_provider,
                             "external_reference": invocation.handoff_reference, "first": first, "second": second})


def _verdict_event(tx: UnitOfWork, invocation: InvocationRecord, status: InvocationStatus, error: str | None, *,
                   part: str) -> None:
    """The verdict's own event when the status changes; a status kept (evidence only) writes none."""
    if status is invocation.status:
        return
    payload: dict[str, Any] = {"status": str(status)}
    if error is not None:
        payload["error"] = error
    tx.events.append_event_with_outbox(invocation_event(invocation, VERDICT_EVENTS[status], payload, part=part))


def _entry(invocation: InvocationRecord, kind: ReconciliationKind, log: ReconciliationLog,
           record: dict[str, Any]) -> NewReconciliation:
    adapter_id, step = _handoff_step(invocation)
    return NewReconciliation(id=reconciliation_id(invocation.id, f"completion:{record['digest']}"),
                             tenant_id=invocation.tenant_id, space_id=invocation.space_id,
                             invocation_id=invocation.id, adapter_invocation_id=adapter_id, log=log, kind=kind,
                             payload={"step": step, **record})
