"""What a claim finds before it may run anything: the recovery scan of an invocation's step rows (host-spec G).

Pure decisions over the stored rows, in the order of host-spec §G (after the lease is confirmed and the
budget checked by the worker, H3):

1. **Ambiguity scan** (G1, G2): a recorded ``ambiguous`` row settles ``reconciliation_required`` from its stored
   reconciliation checkpoint, before the handler, any gate or adapter, idempotent or not.
2. **Non-idempotent interruption gates** (G5-G8), on a reclaim only: a ``running`` row is an outcome nobody
   recorded ("running step without handoff: outcome unknown", settled as unknown: the row becomes
   ``ambiguous``), a ``succeeded`` row an applied effect that is not continued; no row, or only ``failed``
   rows, prove no provider effect, so ``failed`` is honest. The provider is never called.
3. Otherwise the execution proceeds: for an idempotent action, ``succeeded`` rows are reused, never repeated
   (E7, G13), and ``running`` or ``failed`` rows are sent again under the same ``adapter_invocation_id`` (G14).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fencepost.core.statuses import AdapterStatus, InvocationStatus, ReconciliationKind
from fencepost.store.host_records import AdapterRecord

#: The reason of a non-idempotent step that was running when its execution was interrupted (G7).
UNKNOWN_RUNNING_STEP = "running step without handoff: outcome unknown"


@dataclass(frozen=True)
class Settle:
    """Settle the invocation now, without the handler or any adapter.

    Attributes:
        status: the verdict. error: its text. kind: the reconciliation kind for ``reconciliation_required``.
        unknown: ``running`` rows to settle as unknown (marked ``ambiguous`` with ``UNKNOWN_RUNNING_STEP``, G7).
        applied: rows whose effect is recorded (their external references go in the evidence, G8, X1).
    """

    status: InvocationStatus
    error: str
    kind: ReconciliationKind | None = None
    unknown: tuple[AdapterRecord, ...] = ()
    applied: tuple[AdapterRecord, ...] = ()
    reason_row: AdapterRecord | None = None


@dataclass(frozen=True)
class Proceed:
    """Run the handler and the adapter loop; ``rows`` are the stored checkpoints by step index."""

    rows: dict[int, AdapterRecord] = field(default_factory=dict)


def applied_summary(rows: Sequence[AdapterRecord]) -> str:
    """``charge (ext ch_1), ship`` for the evidence of an applied effect."""
    return ", ".join(f"{r.step_name} (ext {r.external_reference})" if r.external_reference else r.step_name
                     for r in rows)


def applied_evidence(rows: Sequence[AdapterRecord]) -> list[dict[str, Any]]:
    """The ``applied`` list of a verdict's evidence: ``[{"step", "adapter_invocation_id", "external_reference"}]``
    for each earlier step that took effect, so ``failed`` or an unknown outcome is not read as "nothing
    happened" (host-spec X1, G16)."""
    return [{"step": r.step_name, "adapter_invocation_id": r.id, "external_reference": r.external_reference}
            for r in rows]


def scan(rows: Sequence[AdapterRecord], *, idempotent: bool, reclaim: bool) -> Settle | Proceed:
    """Decide what a claim does with the stored step rows (see the module docstring).

    Args:
        rows: the invocation's adapter rows in step order (``HostPort.list_adapter_invocations``).
        idempotent: the action's flag (A1). reclaim: this execution takes over an invocation that was already
            running under an earlier lease (a worker takeover, or a worker taking over a dead inline caller).
    """
    ordered = sorted(rows, key=lambda r: r.step_index)
    for row in ordered:
        if row.status is AdapterStatus.AMBIGUOUS:
            stored = (row.reconciliation or {}).get("reason") or row.error or "adapter outcome ambiguous"
            return Settle(InvocationStatus.RECONCILIATION_REQUIRED, f"step {row.step_name}: {stored}",
                          ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS, reason_row=row)
    if reclaim and not idempotent:
        running = tuple(r for r in ordered if r.status is AdapterStatus.RUNNING)
        succeeded = tuple(r for r in ordered if r.status is AdapterStatus.SUCCEEDED)
        if running:
            error = f"step {running[0].step_name}: {UNKNOWN_RUNNING_STEP}"
            if succeeded:
                error += f"; applied before it: {applied_summary(succeeded)}"
            return Settle(InvocationStatus.RECONCILIATION_REQUIRED, error,
                          ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS, unknown=running, applied=succeeded)
        if succeeded:
            return Settle(InvocationStatus.RECONCILIATION_REQUIRED,
                          f"interrupted after an applied effect, not continued: {applied_summary(succeeded)}",
                          ReconciliationKind.APPLIED_EFFECT, applied=succeeded)
        return Settle(InvocationStatus.FAILED,
                      "interrupted before any provider effect was recorded (non-idempotent action; for review)")
    return Proceed({r.step_index: r for r in ordered})
