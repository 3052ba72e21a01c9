"""The ``host.invoke`` command handler: a worker runs invocations with it (host-spec C, H; ADR 0022, ADR 0024).

``handle(ctx)`` runs one ``Execution`` under the claimed lease. The worker's per-kind delivery budget is the
recovery budget (``max_deliveries = recovery_max_attempts``): the claim after the last allowed one does not run
``handle`` at all but ``on_budget_exhausted``, whose verdict is written under that claim's lease, first and
before any evidence is read (H3-H5); once it committed, ``after_failure`` reports the status and adds the rows'
evidence under the settled-verdict condition (H6, H7, H17; ``fencepost.host.enrichment``).
"""

from __future__ import annotations

import weakref

from fencepost.core.errors import RecoverableFinalization
from fencepost.core.statuses import AdapterStatus, InvocationStatus, ReconciliationKind
from fencepost.host import telemetry
from fencepost.host.enrichment import budget_evidence
from fencepost.host.execution import Execution, Runtime
from fencepost.host.finalization import unknown_outcome
from fencepost.host.lifecycle import VERDICT_EVENTS, invocation_event
from fencepost.host.recovery import UNKNOWN_RUNNING_STEP, applied_summary
from fencepost.host.redaction import ErrorSource, error_context, redact_error
from fencepost.outbox.context import CommandContext
from fencepost.outbox.handlers import DeliveryBudget
from fencepost.store.host_records import InvocationVerdict, LeaseHeld, VerdictHeld
from fencepost.store.ports import FencedUnit

#: Every action invocation's outbox command kind starts so (ADR 0022): ``host.invoke:<action id>@<version>``.
KIND_PREFIX = "host.invoke:"


def kind_of(action_id: str, version: int) -> str:
    """The outbox command kind of invocations of ``action_id`` at ``version`` (ADR 0022).

    One kind per action version, so a worker claims only invocations it can run: a worker whose host does not
    define an action (another team's app, a deploy that moved to version 2) never claims them, and they stay
    ``pending`` for a worker that does, as a task queue routes by type. At most 100 characters (the
    ``commands.kind`` bound), which the action id and version limits keep.
    """
    return f"{KIND_PREFIX}{action_id}@{version}"
_OPEN = frozenset({InvocationStatus.PENDING, InvocationStatus.RUNNING})


def budget_error(budget: DeliveryBudget) -> str:
    """``recovery attempts exhausted (n/max)``: ``n`` counts the claims the budget counts, this one included
    (host-spec H4; every claim when none was given back by a graceful release, ADR 0024)."""
    return f"recovery attempts exhausted ({budget.deliveries + 1}/{budget.max_deliveries})"


class HostHandler:
    """``Handler`` and ``BudgetAware`` for ``host.invoke:*`` commands (``fencepost.outbox.handlers``)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        # The verdict each context's failure unit wrote, for its telemetry and the evidence after it (H17, S3).
        self._verdicts: weakref.WeakKeyDictionary[CommandContext, VerdictHeld] = weakref.WeakKeyDictionary()
        self._kinds: weakref.WeakKeyDictionary[CommandContext, ReconciliationKind] = weakref.WeakKeyDictionary()

    def handle(self, ctx: CommandContext) -> None:
        """Run the invocation to its verdict (``Execution.run``); the verdict unit finishes the command.

        Raises:
            RecoverableFinalization: nothing more was recorded; the worker leaves the lease to expire (C11).
        """
        Execution(self.runtime, ctx).run()

    def on_budget_exhausted(self, tx: FencedUnit, ctx: CommandContext, budget: DeliveryBudget) -> None:
        """The budget verdict (H4, H5): ``reconciliation_required`` with ``recovery attempts exhausted (n/max)``,
        written before the action is resolved or any adapter row is read, in the unit that fails the command.
        Enrichment from the rows (H6, H7) follows the commit: ``after_failure``.

        Raises:
            RecoverableFinalization: the verdict could not be written (H11); the unit rolls back.
        """
        invocation = tx.host.lock_invocation(ctx.command.id)
        if invocation is None or invocation.status.terminal:
            return
        error = budget_error(budget)
        tx.events.append_event_with_outbox(invocation_event(invocation, VERDICT_EVENTS[
            InvocationStatus.RECONCILIATION_REQUIRED], {"status": "reconciliation_required", "error": error}))
        if not tx.host.update_leased_invocation(invocation.id, tx.lease, InvocationVerdict(
                InvocationStatus.RECONCILIATION_REQUIRED, error=error,
                reconciliation={"kind": str(ReconciliationKind.RECOVERY_BUDGET_EXHAUSTED),
                                "attempts": budget.deliveries + 1, "max": budget.max_deliveries},
                expected=_OPEN)):
            raise RecoverableFinalization("the budget verdict could not be written", invocation_id=invocation.id)
        self._verdicts[ctx] = VerdictHeld(InvocationStatus.RECONCILIATION_REQUIRED, error)
        self._kinds[ctx] = ReconciliationKind.RECOVERY_BUDGET_EXHAUSTED

    def after_failure(self, ctx: CommandContext, budget: DeliveryBudget | None) -> None:
        """After the worker's failure unit committed: report the status it wrote (S3); after a budget verdict,
        settle ``running`` rows as unknown and enrich the verdict, each write conditioned on that exact verdict
        (H6, H7, H17, H18).

        Raises:
            RecoverableFinalization: ``verdict_durable=True``; some evidence could not be read or written.
        """
        held = self._verdicts.pop(ctx, None)
        kind = self._kinds.pop(ctx, None)
        if held is None:
            return
        attributes = {} if kind is None else {"kind": str(kind)}  # S5: reconciliations by kind
        telemetry.emit(self.runtime.telemetry, telemetry.STATUS, invocation_id=ctx.command.id,
                       status=str(held.status), **attributes)
        if budget is not None:
            budget_evidence(ctx.store, ctx.command.id, held, self.runtime.telemetry)

    def on_failure(self, tx: FencedUnit, ctx: CommandContext, error: str) -> None:
        """The worker fails the command (a time limit, an error the execution did not expect): the invocation's
        verdict must not claim more than is known. With any step row that may have reached the provider
        (``running``, ``succeeded``, ``ambiguous``) it is ``reconciliation_required``; with none, ``failed``. Its
        ``running`` rows get unknown-outcome settlement in the same unit (K1 order; no row is left ``running``
        under a verdict)."""
        invocation = tx.host.lock_invocation(ctx.command.id)
        if invocation is None or invocation.status.terminal:
            return
        error = redact_error(self.runtime.redaction, error_context(invocation.action_id, ErrorSource.EXECUTION), error)
        rows = tx.host.list_adapter_invocations(invocation.id)
        touched = [r for r in rows if r.status is not AdapterStatus.FAILED]
        if touched:
            status, kind = InvocationStatus.RECONCILIATION_REQUIRED, ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS
            text = f"{error}; steps that may have reached their provider: {applied_summary(touched)}"
        else:
            status, kind, text = InvocationStatus.FAILED, None, error
        text = text[:2000]
        running = tuple(r for r in rows if r.status is AdapterStatus.RUNNING)
        writes, events, records = unknown_outcome(invocation, running, UNKNOWN_RUNNING_STEP, LeaseHeld(tx.lease))
        for write in writes:
            if not tx.host.write_adapter_invocation(write):
                raise RecoverableFinalization("the failure verdict's checkpoint was refused",
                                              invocation_id=invocation.id)
        for event in events:
            tx.events.append_event_with_outbox(event)
        for record in records:
            tx.host.append_reconciliation(record)
        tx.events.append_event_with_outbox(invocation_event(invocation, VERDICT_EVENTS[status],
                                                            {"status": str(status), "error": text}))
        if not tx.host.update_leased_invocation(invocation.id, tx.lease, InvocationVerdict(
                status, error=text, reconciliation=None if kind is None else {"kind": str(kind)}, expected=_OPEN)):
            raise RecoverableFinalization("the failure verdict could not be written", invocation_id=invocation.id)
        self._verdicts[ctx] = VerdictHeld(status, text)
        if kind is not None:
            self._kinds[ctx] = kind
