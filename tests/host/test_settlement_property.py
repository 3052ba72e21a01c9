"""Settlement under store failure (issue 13): a property test over sequences of injected faults (host-spec K, L1-L3,
M; ADR 0031).

Each example submits one inline invocation on a fresh, migrated SQLite file through a ``FaultInjectingStore``
whose plan fails chosen occurrences of the writes (and the locks and reads) the claim, the steps and the
settlement run; the provider answers each step with a drawn reply; the action is idempotent or not, has one or
two steps, and the lease may be taken away during one provider call, by an operator's abort (``fence_out``) or by
a takeover (the lease expires and another worker claims the command); and another writer may change the verdict
between the fallback's verdict and its evidence. Whatever the draw:

1. after the run the invocation is ``running`` (recoverable) or has a verdict, and a verdict only if the run
   returned one or raised ``RecoverableFinalization(verdict_durable=True)``;
2. a ``succeeded`` verdict has its evidence: every step row succeeded with its ``AdapterInvocationSucceeded``
   event, and ``fencepost audit`` finds nothing about the invocation;
3. once the lease was taken away, this execution wrote nothing more: no verdict, no checkpoint, no event, no
   reconciliation record (the store equals what it held right after the lease was taken); once the verdict was
   changed under the fallback, no evidence write landed (``VerdictHeld``); a ``running`` invocation holds nothing
   of a settlement (K9: no unfenced write);
4. ``RecoverableFinalization(verdict_durable=True)`` leaves ``reconciliation_required`` marked ``settled_by``
   the fallback; ``verdict_durable=False`` leaves the invocation not terminal; only ``reconciliation_required``
   is ever settled by the fallback, and a ``failed`` verdict has all its evidence (ADR 0031);
5. the provider is only ever asked under the id of a durable step row, each step under one key, and a
   non-idempotent step is asked at most once, recovery included;
6. recovery converges: with the faults disarmed and the lease expired, a worker ends the invocation terminal;
   any audit finding about it is an evidence gap, and one exists only after a durable-verdict
   ``RecoverableFinalization``, a lost lease or a changed verdict; recovery never changes a verdict (K8). (An
   aborted command is an operator's decision: no worker claims it, and the invocation stays as the abort left it.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from fencepost.core.errors import RecoverableFinalization, StoreUnavailable
from fencepost.core.statuses import AdapterStatus, CommandStatus, InvocationStatus
from fencepost.host import Ambiguous, Inline, PermanentFailure, Succeeded
from fencepost.host.adapter import AdapterCall
from fencepost.host.finalization import SETTLED_BY_FALLBACK
from fencepost.host.handler import kind_of
from fencepost.store.audit import audit_store
from fencepost.store.base import Store
from fencepost.store.faults import FaultInjectingStore
from fencepost.store.host_records import InvocationRecord, VerdictHeld
from helpers.store_backends import StoreBackend, store_backend
from host.kit import PARAMS, Ledger, Spy, charge_action, events_of, make_host, run_worker
from host.test_degraded_settlement import fence_out

#: The queries of the claim, the steps and the settlement the faults may hit (writes, the parent lock, the row read).
QUERIES = ("update_adapter_invocation", "insert_adapter_invocation", "insert_event", "insert_reconciliation",
           "update_leased_invocation", "finish_command", "lock_invocation", "list_adapter_invocations")
REPLIES = ("succeeded", "ambiguous", "timeout-after-charge", "permanent")
#: How the lease is taken away during a provider call; "none" twice so half the examples explore the faults alone.
STEALS = ("none", "none", "abort", "takeover")
GAP_CHECK = "invocation_evidence_gaps"

#: Which occurrences of one query fail: any few of 1..6, or a run of consecutive ones (the atomic unit, its
#: retry and the fallback each run the same query once, so consecutive failures are what reach the fallback).
RUNS = st.builds(lambda first, length: frozenset(range(first, first + length)), st.integers(1, 3),
                 st.integers(2, 5))
OCCURRENCES = st.one_of(st.frozensets(st.integers(1, 6), min_size=1, max_size=4), RUNS, RUNS)
PLANS = st.dictionaries(st.sampled_from(QUERIES), OCCURRENCES, max_size=3)


class Provider:
    """The ``pay`` adapter: answers each step with its drawn reply, charging the ledger under the call's
    ``adapter_invocation_id`` for every reply but a permanent failure (which did nothing at the provider).
    The step is read from the row the call names, which must be durable before the call (E5); ``before`` runs
    first on each call, with the step's name (where the lease is taken away). The host classifies whatever the
    adapter raises as the provider's reply, so a broken expectation of the test is kept in ``violations`` (checked
    after the run) instead of raised here."""

    def __init__(self, ledger: Ledger, store: Store, replies: dict[str, str],
                 before: Callable[[str], None]) -> None:
        self.type, self.vendor = "pay", "simpay-test"
        self.ledger, self.store, self.replies, self.before = ledger, store, replies, before
        self.calls: list[AdapterCall] = []
        self.violations: list[str] = []

    def execute(self, call: AdapterCall) -> object:
        self.calls.append(call)
        row = self.store.read(lambda tx: tx.host.get_adapter_invocation(call.adapter_invocation_id))
        if row is None or row.status is not AdapterStatus.RUNNING:  # E5: durable `running` before the call
            self.violations.append(f"called {call.adapter_invocation_id} with its row {row}")
            return PermanentFailure("test violation")
        try:
            self.before(row.step_name)
        except Exception as error:
            self.violations.append(f"taking the lease away failed: {error!r}")
        reply = self.replies[row.step_name]
        if reply == "permanent":
            return PermanentFailure("card_declined")
        charge_id = self.ledger.charge(call.adapter_invocation_id, int(call.input.get("amount_cents", 1)))
        if reply == "ambiguous":
            return Ambiguous("connection reset after send")
        if reply == "timeout-after-charge":
            raise TimeoutError("read timed out after the request was sent")
        return Succeeded({"charge_id": charge_id})


@dataclass
class Snapshot:
    """What the store holds about the invocation: verdict columns, step rows, events, reconciliation records."""

    verdict: tuple[Any, ...]
    rows: list[Any]
    events: list[str]
    records: list[str]


def snapshot(store: Store, invocation_id: str) -> Snapshot:
    """What ``store`` holds about the invocation now (read outside the faults)."""
    invocation = store.read(lambda tx: tx.host.get_invocation(invocation_id))
    assert invocation is not None
    rows = store.read(lambda tx: tx.host.list_adapter_invocations(invocation_id))
    records = store.read(lambda tx: tx.host.list_reconciliations(invocation_id))
    return Snapshot(verdict_of(invocation), rows, [e.id for e in events_of(store, invocation_id)],
                    sorted(r.id for r in records))


def verdict_of(invocation: InvocationRecord) -> tuple[Any, ...]:
    """The invocation's own columns a verdict writes (not its command's lease columns)."""
    return (invocation.status, invocation.error, invocation.result, invocation.reconciliation,
            invocation.updated_at)


@dataclass
class Steal:
    """Takes the lease away from the running execution once, during the provider call of ``step``."""

    how: str
    step: str
    backend: StoreBackend
    store: Store
    after: Snapshot | None = None

    def __call__(self, step: str) -> None:
        if self.how == "none" or self.after is not None or step != self.step:
            return
        [invocation] = self.store.read(lambda tx: tx.host.list_invocations())
        if self.how == "abort":
            fence_out(self.store)
        else:  # the caller's lease runs out and another worker claims the command (it never runs it)
            self.backend.expire()
            claimed = self.store.transact(lambda tx: tx.outbox.claim(
                owner="thief", kinds=[kind_of("shop.charge", 1)], limit=1, lease_seconds=self.backend.short_lease))
            assert [c.id for c in claimed] == [invocation.id]
        self.after = snapshot(self.store, invocation.id)


class Meddling(FaultInjectingStore):
    """The fault-injecting store, plus another writer that changes the verdict once, right after the fallback's
    verdict committed and before its first evidence unit opens (what an operator's note or a budget enrichment
    does): from then on ``VerdictHeld`` must refuse every evidence write of the fallback (K5, H18)."""

    def __init__(self, inner: Store, plan: dict[str, frozenset[int]], *, meddle: bool) -> None:
        super().__init__(inner, plan=plan)
        self.meddle = meddle
        self.after: Snapshot | None = None

    @contextmanager
    def transaction(self, *, write: bool = True, name: str | None = None) -> Iterator[Any]:
        if self.meddle and self.after is None and name is not None and name.endswith(".evidence.1"):
            self._change_the_verdict()
        with super().transaction(write=write, name=name) as tx:
            yield tx

    def _change_the_verdict(self) -> None:
        [invocation] = self.inner.read(lambda tx: tx.host.list_invocations())
        assert invocation.status.terminal, "evidence before a durable verdict"
        held = VerdictHeld(invocation.status, invocation.error)
        assert self.inner.transact(lambda tx: tx.host.update_settled_invocation(
            invocation.id, held, error=f"{invocation.error} (noted by an operator)",
            reconciliation=invocation.reconciliation))
        self.after = snapshot(self.inner, invocation.id)


@contextmanager
def sqlite_backend(factory: pytest.TempPathFactory) -> Iterator[StoreBackend]:
    """A fresh sqlite-wal database with its ManualClock, per example (the ``backend`` fixture is per test)."""
    with store_backend("sqlite-wal", factory.mktemp("settle")) as backend:
        yield backend


def findings_about(store: Store, invocation_id: str) -> list[tuple[str, str]]:
    """``fencepost audit``'s findings about the invocation, as (check, detail)."""
    return [(f.check, f.detail) for f in audit_store(store) if f.subject == invocation_id]


def check_succeeded_has_evidence(store: Store, invocation_id: str, steps: tuple[str, ...]) -> None:
    """Property 2: a ``succeeded`` verdict has every step row succeeded with its success event, audit clean."""
    rows = store.read(lambda tx: tx.host.list_adapter_invocations(invocation_id))
    assert [r.step_name for r in rows] == list(steps)
    assert all(r.status is AdapterStatus.SUCCEEDED for r in rows), rows
    succeeded = {e.subject.subject_id for e in events_of(store, invocation_id)
                 if e.type == "AdapterInvocationSucceeded"}
    assert {r.id for r in rows} <= succeeded
    assert findings_about(store, invocation_id) == []


def check_verdict_kind(store: Store, invocation_id: str) -> None:
    """ADR 0031: only a ``reconciliation_required`` verdict is ever written by the verdict-first fallback (a
    success gets one attempt, a failure raises rather than claim "nothing happened" without its evidence), and a
    ``failed`` verdict has all of its evidence."""
    invocation = store.read(lambda tx: tx.host.get_invocation(invocation_id))
    assert invocation is not None
    if (invocation.reconciliation or {}).get("settled_by") == SETTLED_BY_FALLBACK:
        assert invocation.status is InvocationStatus.RECONCILIATION_REQUIRED, invocation
    if invocation.status is InvocationStatus.FAILED:
        assert findings_about(store, invocation_id) == []


#: The events a ``running`` invocation may have: its start and the success markers of its steps.
OPEN_EVENTS = {"ActionInvocationStarted", "AdapterInvocationSucceeded"}


def check_nothing_settled_while_running(store: Store, invocation_id: str) -> None:
    """K9, K5: a ``running`` invocation holds what a crash could leave, nothing of a settlement: only
    ``running`` or ``succeeded`` rows, its start and step-success events, no reconciliation record (each of those
    is written with its verdict, or after a durable one under ``VerdictHeld``)."""
    rows = store.read(lambda tx: tx.host.list_adapter_invocations(invocation_id))
    assert {r.status for r in rows} <= {AdapterStatus.RUNNING, AdapterStatus.SUCCEEDED}, rows
    types = [e.type for e in events_of(store, invocation_id)]
    assert set(types) <= OPEN_EVENTS, f"settlement events of a running invocation: {types}"
    assert store.read(lambda tx: tx.host.list_reconciliations(invocation_id)) == []


def check_provider(ledger: Ledger, provider: Provider, store: Store, invocation_id: str, idempotent: bool) -> None:
    """Property 5: every request names a durable step row, one key per step, a non-idempotent step once."""
    rows = {r.id: r for r in store.read(lambda tx: tx.host.list_adapter_invocations(invocation_id))}
    calls = Counter(c.adapter_invocation_id for c in provider.calls)
    assert set(calls) <= set(rows), "the provider was called under the id of a step row that is not stored (E5)"
    assert set(ledger.charges) <= set(rows)
    assert all(k in rows for k in ledger.requests)
    if not idempotent:
        assert all(n == 1 for n in calls.values()), f"a non-idempotent step was called again: {calls}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=PLANS, replies=st.lists(st.sampled_from(REPLIES), min_size=1, max_size=2),
       idempotent=st.booleans(), steal=st.sampled_from(STEALS), steal_at=st.integers(0, 1), meddle=st.booleans())
@example(plan={"update_adapter_invocation": frozenset({1, 2, 3})}, replies=["ambiguous"], idempotent=False,
         steal="none", steal_at=0, meddle=False)
@example(plan={"insert_event": frozenset({2, 3, 5})}, replies=["timeout-after-charge"], idempotent=True,
         steal="none", steal_at=0, meddle=False)
@example(plan={"finish_command": frozenset({1, 2})}, replies=["permanent"], idempotent=False, steal="none",
         steal_at=0, meddle=False)
@example(plan={"finish_command": frozenset({1, 2})}, replies=["succeeded"], idempotent=True, steal="none",
         steal_at=0, meddle=False)
@example(plan={"update_leased_invocation": frozenset({1, 2, 3, 4})}, replies=["timeout-after-charge"],
         idempotent=True, steal="none", steal_at=0, meddle=False)
@example(plan={"finish_command": frozenset({1, 2})}, replies=["ambiguous"], idempotent=True, steal="none",
         steal_at=0, meddle=True)
@example(plan={"finish_command": frozenset({1, 2})}, replies=["ambiguous"], idempotent=False, steal="takeover",
         steal_at=0, meddle=False)
@example(plan={"update_adapter_invocation": frozenset({1, 2, 3, 4, 5})}, replies=["succeeded", "succeeded"],
         idempotent=False, steal="none", steal_at=0, meddle=False)
def test_settlement_under_any_fault_sequence_is_truthful_and_recovers(
        tmp_path_factory: pytest.TempPathFactory, plan: dict[str, frozenset[int]], replies: list[str],
        idempotent: bool, steal: str, steal_at: int, meddle: bool) -> None:
    steps = ("charge", "ship")[:len(replies)]
    with sqlite_backend(tmp_path_factory) as backend:
        inner = backend.migrated()
        faulty = Meddling(inner, plan, meddle=meddle)
        ledger = Ledger()
        thief = Steal(steal, steps[min(steal_at, len(steps) - 1)], backend, inner)
        provider = Provider(ledger, inner, dict(zip(steps, replies, strict=True)), thief)
        action = charge_action(Spy(), steps=steps, idempotent=idempotent)
        host = make_host(faulty, action, provider, lease=backend.short_lease)
        raised: RecoverableFinalization | None = None
        try:
            host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
        except RecoverableFinalization as error:
            raised = error
        except StoreUnavailable:
            # Only the submission's own unit (nothing is stored) or the read of the view after the run may fail
            # outside the execution; the execution itself turns every store error into RecoverableFinalization.
            stored = inner.read(lambda tx: tx.host.list_invocations())
            assert stored == [] or faulty.executed[-1] in ("get_invocation", "list_adapter_invocations")
            if not stored:
                assert provider.calls == [] and ledger.requests == []
                event("the submission itself failed")
                return
        [invocation] = inner.read(lambda tx: tx.host.list_invocations())
        invocation_id = invocation.id
        assert provider.violations == []
        stolen = thief.after is not None
        event(f"after the run: {invocation.status}, "
              f"{'no RF' if raised is None else 'durable RF' if raised.verdict_durable else 'RF'}"
              f"{', lease taken' if stolen else ''}{', verdict changed' if faulty.after else ''}")

        # 1: recoverable or a verdict, and a verdict only if the run said so.
        assert invocation.status in (InvocationStatus.RUNNING, *(s for s in InvocationStatus if s.terminal))
        if raised is None:
            assert invocation.status.terminal, "the run returned without a verdict"
        if invocation.status is InvocationStatus.RUNNING:
            check_nothing_settled_while_running(inner, invocation_id)
        # 2
        if invocation.status is InvocationStatus.SUCCEEDED:
            check_succeeded_has_evidence(inner, invocation_id, steps)
        # 2b (ADR 0031): only reconciliation_required takes the fallback; a failed verdict has all its evidence.
        check_verdict_kind(inner, invocation_id)
        # 3: nothing written after the lease was taken away.
        if stolen:
            assert raised is not None and not raised.verdict_durable, "a lost lease must raise, never settle"
            assert snapshot(inner, invocation_id) == thief.after, "the execution wrote after losing its lease"
        # 3b: once the verdict changed under the fallback, every evidence write was refused (VerdictHeld).
        if faulty.after is not None:
            assert snapshot(inner, invocation_id) == faulty.after, "evidence written under a verdict no longer held"
        # 4
        if raised is not None:
            assert raised.invocation_id == invocation_id
            if raised.verdict_durable:
                assert invocation.status is InvocationStatus.RECONCILIATION_REQUIRED
                assert (invocation.reconciliation or {}).get("settled_by") == SETTLED_BY_FALLBACK
            else:
                assert not invocation.status.terminal, f"{invocation.status} after a non-durable RF"
        # 5
        check_provider(ledger, provider, inner, invocation_id, idempotent)

        # 6: recovery converges (the lease is taken away during this execution only, not during recovery).
        faulty.disarm()
        thief.how = "none"
        for _ in range(2):
            current = inner.read(lambda tx: tx.host.get_invocation(invocation_id))
            assert current is not None
            if current.status.terminal or current.command_status is CommandStatus.ABORTED:
                break
            backend.expire()
            run_worker(host, backend, inner)
        final = inner.read(lambda tx: tx.host.get_invocation(invocation_id))
        assert final is not None
        findings = findings_about(inner, invocation_id)
        if steal == "abort" and stolen:
            assert final.status is InvocationStatus.RUNNING and final.command_status is CommandStatus.ABORTED
            assert snapshot(inner, invocation_id) == thief.after, "a worker wrote to an aborted invocation"
        else:
            assert final.status.terminal, f"recovery did not converge: {final.status}"
            assert all(check == GAP_CHECK for check, _ in findings), findings
            if findings:
                assert (raised is not None and raised.verdict_durable) or stolen or faulty.after, findings
            if final.status is InvocationStatus.SUCCEEDED:
                check_succeeded_has_evidence(inner, invocation_id, steps)
            check_verdict_kind(inner, invocation_id)
            if invocation.status.terminal:
                assert verdict_of(final) == verdict_of(invocation), "recovery changed a verdict (K8: final)"
        check_provider(ledger, provider, inner, invocation_id, idempotent)
        assert provider.violations == []

