"""Cancelling a Run: the intent is stored first, then the frontier finalizes (ADRs 0072, 0073; ADR-0228 rules).

``request_cancel`` writes, in one transaction (``workflow.cancel``), the cancel intent on the Run (its instant
and reason), the run-level ledger's ``cancel_request`` row and the ``workflow.cancel_requested`` event, on the
next Run fence. Nothing is signalled and nothing is finalized here. From then on the frontier cancels the Run's
``waiting`` and ``ready`` steps and starts none; a step's task that has not reached its target refuses to start
(its own start check sees the intent) and its step ends ``cancelled``; a task already running finishes, and a
``lost`` step waits for its operator. The Run is settled last, by the frontier's aggregation, once every step
is terminal.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from fencepost.core.canonical import canonical_json, require_storable_text
from fencepost.core.errors import InvalidInput, NotFound
from fencepost.core.ids import derived_id
from fencepost.core.statuses import RunMutationKind, WorkflowEventType, WorkflowRunStatus
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.workflow_records import RunMutation, WorkflowEventRow


@dataclass(frozen=True)
class CancelResult:
    """``outcome``: ``requested`` (the intent was stored now), ``existing`` (it was stored before) or ``settled``
    (the Run was terminal; nothing written). ``run_status``: the Run's status as read."""

    run_id: str
    outcome: str
    run_status: WorkflowRunStatus
    reason: str | None


#: The bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): they reorder how a
#: terminal shows the rest of the line, so a reason could display as other text than it is (a re-check trial).
_BIDI_CONTROLS = frozenset(chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))


def _line_break_or_control(text: str) -> int | None:
    """The position of the first C0 or C1 control character (an escape, a newline, a tab, DEL), line or
    paragraph separator, or bidirectional override in ``text``, or None. A reason printed as given redrew an
    operator's terminal and forged a line of ``workflow status`` (a trial), so such text is refused at input
    (ADR 0111)."""
    for i, ch in enumerate(text):
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in _BIDI_CONTROLS:
            return i
    return None


def request_cancel(store: Store, run_id: str, *, reason: str, actor: str) -> CancelResult:
    """Store the cancel intent of ``run_id`` (module docstring).

    Args:
        reason: 1..1000 characters, kept on the Run and in the ledger. actor: 1..200 characters. Each is one
            line of text: no lone surrogate, no control character (NUL, escape, newline, tab, DEL, C1), no
            line or paragraph separator and no bidirectional override (ADR 0111).
    Raises:
        InvalidInput: a bad reason or actor. NotFound: no such Run.
    """
    if not reason.strip() or len(reason) > 1000:
        raise InvalidInput("a cancel reason is 1 to 1000 characters")
    if not actor or len(actor) > 200:
        raise InvalidInput("an actor is 1 to 200 characters")
    # SQLite kept a NUL in a reason and PostgreSQL answered a schema conflict (409); a lone surrogate failed in
    # the driver (a trial): both are bad input on every backend, refused before anything is written.
    require_storable_text(reason=reason, actor=actor)
    for name, text in (("a cancel reason", reason), ("an actor", actor)):
        if (at := _line_break_or_control(text)) is not None:
            raise InvalidInput(f"{name} is one line of plain text: {text[at]!r} at position {at} is a control "
                               "character, line break or direction override (terminal escape codes, newlines, tabs "
                               "and bidirectional overrides are refused)")

    def unit(tx: UnitOfWork) -> CancelResult:
        tx.progress.lock_run(run_id)
        run = tx.progress.get_run(run_id)
        if run is None:
            raise NotFound(f"no workflow run {run_id}")
        if run.status.terminal:
            return CancelResult(run_id, "settled", run.status, run.cancel_reason)
        if run.cancel_requested_at is not None:
            return CancelResult(run_id, "existing", run.status, run.cancel_reason)
        fence = run.fence + 1
        now = tx.now()
        seq = tx.progress.next_event_seq(run_id)
        event_id = derived_id("wev", "workflow-event/v1", {"run_id": run_id, "seq": seq})
        if not tx.progress.set_cancel_intent(run_id=run_id, from_fence=run.fence, to_fence=fence, reason=reason):
            raise NotFound(f"workflow run {run_id} moved under its lock")  # pragma: no cover - locked above
        tx.progress.insert_event(WorkflowEventRow(
            id=event_id, run_id=run_id, step_run_id=None, seq=seq, type=WorkflowEventType.CANCEL_REQUESTED,
            payload=canonical_json({"run_id": run_id, "reason": reason, "actor": actor, "run_fence": fence}),
            created_at=now))
        tx.progress.insert_run_mutation(RunMutation(
            id=derived_id("wrm", "workflow-run-mutation/v1", {"run_id": run_id, "fence": fence}), run_id=run_id,
            fence=fence, kind=RunMutationKind.CANCEL_REQUEST, from_status=WorkflowRunStatus.RUNNING,
            to_status=WorkflowRunStatus.RUNNING, reason=reason, actor=actor, event_id=event_id, created_at=now))
        return CancelResult(run_id, "requested", run.status, reason)

    return store.transact(unit, name="workflow.cancel")
