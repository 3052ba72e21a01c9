"""Evidence after the budget verdict: the rows are read and settled only once the verdict is durable (host-spec
H5-H7, H17, H18; ADR 0031).

The budget verdict (``recovery attempts exhausted (n/max)``) is written first, under the exhausted claim's lease,
before the action is resolved or any adapter row is read (H5): a store too broken to read evidence still gets its
verdict. Then, with the lease released, this module adds what the rows show, each write independent and under the
settled-verdict condition (``VerdictHeld``: the parent still has exactly that verdict):

1. every ``running`` row gets unknown-outcome settlement (H6): ``ambiguous`` checkpoint, its
   ``AdapterInvocationAmbiguous`` event, its reconciliation record;
2. last, the parent enrichment (H7, H17): the verdict's error names each unknown or ambiguous step with its stored
   reason and the applied steps, and ``reconciliation.adapter_reconciliation`` lists them. Last because it changes
   the error every earlier write is conditioned on.

A refused write is telemetry (H18); a raised one is collected, and the first is raised as
``RecoverableFinalization(verdict_durable=True)`` after every write was attempted.
"""

from __future__ import annotations

from typing import Any

from fencepost.core.errors import RecoverableFinalization
from fencepost.core.statuses import AdapterStatus
from fencepost.host.finalization import EvidenceWrite, Settlement, Verdict, evidence_of, unknown_outcome, write_evidence
from fencepost.host.recovery import UNKNOWN_RUNNING_STEP, applied_evidence, applied_summary
from fencepost.host.telemetry import Telemetry
from fencepost.store.base import Store
from fencepost.store.host_records import AdapterRecord, InvocationRecord, VerdictHeld
from fencepost.store.ports import UnitOfWork

MAX_ERROR_CHARS = 2000


def _reason(row: AdapterRecord) -> str:
    if row.status is AdapterStatus.RUNNING:
        return UNKNOWN_RUNNING_STEP
    return str((row.reconciliation or {}).get("reason") or row.error or "adapter outcome ambiguous")


def enriched(held: VerdictHeld, invocation: InvocationRecord,
             rows: list[AdapterRecord]) -> tuple[str, dict[str, Any]] | None:
    """The enriched error and reconciliation JSON for the budget verdict ``held``, or None when the rows add
    nothing (then the error stays exactly ``recovery attempts exhausted (n/max)``, H4).

    The error starts with the verdict's own text (H4) and is at most 2,000 characters."""
    open_rows = [r for r in rows if r.status in (AdapterStatus.RUNNING, AdapterStatus.AMBIGUOUS)]
    applied = [r for r in rows if r.status is AdapterStatus.SUCCEEDED]
    if not open_rows and not applied:
        return None
    parts = [f"step {r.step_name}: {_reason(r)}" for r in open_rows]
    if applied:
        parts.append(f"applied: {applied_summary(applied)}")
    error = f"{held.error}; " + "; ".join(parts)
    if len(error) > MAX_ERROR_CHARS:
        error = error[:MAX_ERROR_CHARS - 1] + "…"
    reconciliation = dict(invocation.reconciliation or {})
    reconciliation["adapter_reconciliation"] = [
        {"step": r.step_name, "adapter_invocation_id": r.id, "reason": _reason(r),
         "external_reference": r.external_reference} for r in open_rows]
    if applied:
        reconciliation["applied"] = applied_evidence(applied)
    return error, reconciliation


def budget_evidence(store: Store, invocation_id: str, held: VerdictHeld, sink: Telemetry) -> None:
    """Add the rows' evidence to the durable budget verdict ``held`` (see the module docstring).

    Args:
        store: the control store (unfenced units: the lease is already released). invocation_id: the invocation.
        held: the exact verdict the budget unit wrote. sink: telemetry for refusals and failures.
    Raises:
        RecoverableFinalization: ``verdict_durable=True``; reading the rows or some evidence write failed. The
            verdict stands and the gap is final (K8; ``fencepost audit`` reports it).
    """

    def read(tx: UnitOfWork) -> tuple[InvocationRecord | None, list[AdapterRecord]]:
        return tx.host.get_invocation(invocation_id), tx.host.list_adapter_invocations(invocation_id)

    try:
        invocation, rows = store.read(read)
    except Exception as error:  # H5: the verdict is already durable; only its evidence is lost
        raise RecoverableFinalization(f"the budget verdict is recorded but its evidence could not be read: {error}",
                                      error, invocation_id=invocation_id, verdict_durable=True) from error
    if invocation is None:
        return
    # Written even when another decision changed the verdict since: each write then refuses itself under
    # ``held`` and says so in telemetry (H17, H18), rather than this function deciding silently.
    running = tuple(r for r in rows if r.status is AdapterStatus.RUNNING)
    writes, events, records = unknown_outcome(invocation, running, UNKNOWN_RUNNING_STEP, held)
    items = evidence_of(Settlement(invocation, Verdict(held.status, held.error), writes, events, records), held)
    enrichment = enriched(held, invocation, rows)
    if enrichment is not None:
        error_text, reconciliation = enrichment
        items.append(EvidenceWrite("parent_enrichment", invocation_id, lambda tx: tx.host.update_settled_invocation(
            invocation_id, held, error=error_text, reconciliation=reconciliation)))
    errors = write_evidence(store, invocation_id, items, sink)
    if errors:
        raise RecoverableFinalization(
            f"the budget verdict is recorded but {len(errors)} evidence write(s) failed (the gap is final): "
            f"{errors[0]}", errors[0], invocation_id=invocation_id, verdict_durable=True) from errors[0]
