"""Operator resolution of a ``reconciliation_required`` invocation (host-spec §1.Y-13, §1.Y-1 (b); ADR 0048).

An operator who has looked the effect up at the provider settles the invocation ``succeeded`` or ``failed`` with
a note, their identity and optional evidence. One unit of work (``host.resolve``):

1. locks the invocation (first in the host's lock order) and checks it is ``reconciliation_required``;
2. inserts the resolution row, which keeps a copy of the settled verdict (error and reconciliation), and moves
   the status (``HostPort.record_resolution``); the invocation's error, result, reconciliation, adapter rows,
   reconciliation log entries and earlier events are left exactly as they were;
3. appends ``InvocationResolved`` under its stable id, with its outbox row.

Resolving again: the identical request (same outcome, operator, note and evidence) returns the invocation as
it is and writes nothing (a retried HTTP call or CLI run is safe); any other request is refused with
``Conflict``: a resolution is final.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fencepost.core.canonical import canonical_json, require_storable_text, text_problem
from fencepost.core.errors import Conflict, InvalidInput, NotFound
from fencepost.core.fingerprint import fingerprint
from fencepost.core.ids import derived_id
from fencepost.core.statuses import InvocationStatus
from fencepost.host.lifecycle import invocation_event
from fencepost.store.host_records import NewResolution
from fencepost.store.ports import UnitOfWork

RESOLVED = "InvocationResolved"
#: The outcomes an operator may choose.
OUTCOMES = (InvocationStatus.SUCCEEDED, InvocationStatus.FAILED)
MAX_NOTE = 2000
MAX_EVIDENCE_BYTES = 65536


@dataclass(frozen=True)
class ResolutionRequest:
    """A validated resolution request (see ``parse_request``)."""

    invocation_id: str
    outcome: InvocationStatus
    operator: str
    note: str
    evidence: dict[str, Any] | None

    @property
    def digest(self) -> str:
        """``sha256:...`` of the request's canonical JSON: equal exactly for an identical repeat."""
        return fingerprint("host.resolution-request/v1", {
            "invocation": self.invocation_id, "outcome": str(self.outcome), "operator": self.operator,
            "note": self.note, "evidence": self.evidence})


def resolution_id(invocation_id: str) -> str:
    """The stable id of an invocation's one resolution."""
    return derived_id("res", "host.resolution/v1", {"invocation": invocation_id})


def parse_request(invocation_id: str, outcome: str, operator: str, note: str,
                  evidence: dict[str, Any] | None) -> ResolutionRequest:
    """Validate a resolution request.

    Args:
        outcome: ``succeeded`` or ``failed``. operator: who decides, 1..200 chars. note: why, 1..2000 chars
            (after trimming); neither may hold a NUL character or a lone surrogate. evidence: a JSON object of
            at most 64 KiB canonical JSON, or None.
    Raises:
        InvalidInput: any argument outside these bounds. NotFound: an invocation id holding a NUL character or
            a lone surrogate, which no invocation has.
    """
    try:
        status = InvocationStatus(outcome)
    except ValueError:
        raise InvalidInput("outcome is 'succeeded' or 'failed'") from None
    if status not in OUTCOMES:
        raise InvalidInput("outcome is 'succeeded' or 'failed'")
    if not isinstance(operator, str) or not operator.strip() or len(operator) > 200:
        raise InvalidInput("operator is 1 to 200 characters")
    if not isinstance(note, str) or not note.strip() or len(note) > MAX_NOTE:
        raise InvalidInput(f"note is 1 to {MAX_NOTE} characters: say what was found at the provider")
    # SQLite would keep a NUL and PostgreSQL refuse it; a lone surrogate failed in the request's digest, a
    # TypeError out of Host.resolve (a break-it trial): both are bad input on every backend, naming the field.
    require_storable_text(operator=operator, note=note)
    if text_problem(invocation_id) is not None:
        # No invocation id holds either (ids are ASCII): it names none, as a read of a NUL id finds none on every
        # backend, instead of the driver's UnicodeEncodeError for a surrogate.
        raise NotFound(f"no invocation {invocation_id!r}")
    if evidence is not None:
        if not isinstance(evidence, dict):
            raise InvalidInput("evidence is a JSON object")
        try:
            size = len(canonical_json(evidence).encode())
        except (TypeError, ValueError) as error:
            raise InvalidInput(f"evidence is not plain JSON: {error}") from None
        if size > MAX_EVIDENCE_BYTES:
            raise InvalidInput(f"evidence is at most {MAX_EVIDENCE_BYTES} bytes of JSON")
    return ResolutionRequest(invocation_id, status, operator.strip(), note.strip(), evidence)


def apply_resolution(tx: UnitOfWork, request: ResolutionRequest) -> bool:
    """The ``host.resolve`` unit (see the module docstring).

    Returns:
        True when resolved now; False for an identical repeat of the stored resolution (nothing written).
    Raises:
        NotFound: no such invocation. Conflict: it is not ``reconciliation_required`` (with its status), it was
            resolved differently before (with the stored outcome and operator), or a live lease holds it.
    """
    row = tx.host.lock_invocation(request.invocation_id)
    if row is None:
        raise NotFound(f"no invocation {request.invocation_id}")
    existing = tx.host.get_resolution(row.id)
    if existing is not None:
        if existing.request_digest == request.digest:
            return False
        raise Conflict(f"invocation {row.id} was already resolved {existing.outcome} by {existing.operator} "
                       f"at {existing.created_at.isoformat()}; a resolution is final")
    if row.status is not InvocationStatus.RECONCILIATION_REQUIRED:
        raise Conflict(f"invocation {row.id} is {row.status}: only a reconciliation_required invocation can be "
                       "resolved")
    new = NewResolution(id=resolution_id(row.id), tenant_id=row.tenant_id, space_id=row.space_id,
                        invocation_id=row.id, outcome=request.outcome, operator=request.operator,
                        note=request.note, evidence=request.evidence, request_digest=request.digest)
    if not tx.host.record_resolution(new):
        raise Conflict(f"invocation {row.id} is held by a live lease; resolve it once its execution ends")
    reconciliation = row.reconciliation or {}
    tx.events.append_event_with_outbox(invocation_event(row, RESOLVED, {
        "resolution_id": new.id, "outcome": str(request.outcome), "operator": request.operator,
        "note": request.note, "evidence": request.evidence,
        "prior": {"status": str(row.status), "error": row.error, "kind": reconciliation.get("kind")}}))
    return True
