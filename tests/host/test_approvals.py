"""Approvals (human in the loop): request, approve under a temporary lease, reject, expire, the authority check
and the attempt-count rules (host-spec P1-P4, H14; ADR 0044), with real workers on every backend."""

from __future__ import annotations

import dataclasses
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from fencepost.core.errors import Conflict, InvalidInput, NotAllowed
from fencepost.core.statuses import GovernanceRecordKind, InvocationStatus
from fencepost.host import ApprovalExpired, Host, HostConfig, Inline, PolicyContext, RequireApproval
from fencepost.store import open_store
from fencepost.store.base import Store
from helpers.processes import run_cli, subprocess_env
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Crash, Ledger, Scripted, Spy, charge_action, events_of, run_worker


class FourEyes:
    """Every payout needs the ``payments-ops`` authority's approval; counts its evaluations."""

    name = "four-eyes"

    def __init__(self, expires_in: timedelta = timedelta(hours=1)) -> None:
        self.expires_in = expires_in
        self.calls = 0

    def evaluate(self, ctx: PolicyContext) -> RequireApproval:
        self.calls += 1
        return RequireApproval("payments-ops", expires_in=self.expires_in, reason="payouts need a second person")


def approval_host(store: Store, ledger: Ledger, policy: FourEyes | None = None, recovery: int = 5,
                  lease: float = 30.0) -> tuple[Host, Spy, Scripted]:
    spy = Spy()
    adapter = Scripted(ledger)
    action = dataclasses.replace(charge_action(spy, idempotent=True), policies=(policy or FourEyes(),))
    host = Host(store, actions=[action], adapters=[adapter], config=HostConfig(recovery_max_attempts=recovery,
                                                                                   lease_seconds=lease))
    return host, spy, adapter


def waiting(host: Host, backend: StoreBackend) -> str:
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    run_worker(host, backend)
    return queued.id


def audit(store: Store) -> set[str]:
    return {f"{f.check}: {f.detail}" for f in store.read(lambda tx: tx.audit.invariant_findings())}


def types(store: Store, invocation_id: str) -> list[str]:
    return [e.type for e in events_of(store, invocation_id)]


def test_approval_requested_then_approved(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    policy = FourEyes()
    host, spy, adapter = approval_host(store, ledger, policy)
    invocation_id = waiting(host, backend)
    parked = host.get(invocation_id)
    assert parked.status is InvocationStatus.AWAITING_APPROVAL and parked.attempt_count == 1
    assert parked.lease_owner is None and (spy.calls, len(adapter.calls)) == (0, 0)
    (request,) = host.approvals()
    assert (request.invocation_id, request.policy, request.authority) == (invocation_id, "four-eyes", "payments-ops")
    assert request.expires_at - request.requested_at == timedelta(hours=1)
    backend.expire()
    assert run_worker(host, backend) == 0  # no worker claims (or spins on) an invocation that waits
    assert audit(store) == set()
    done = host.approve(invocation_id, approver="alice", authority="payments-ops", note="checked the payee")
    assert done.status is InvocationStatus.SUCCEEDED and done.attempt_count == 1  # P3: the resume counts none
    assert (spy.calls, len(ledger.charges)) == (1, 1) and policy.calls == 2
    assert host.approvals() == []
    found = store.read(lambda tx: tx.host.list_governance_records(invocation_id))
    kinds = [r.kind for r in found if r.kind is not GovernanceRecordKind.POLICY_RECORD]
    assert kinds == [GovernanceRecordKind.APPROVAL_REQUEST, GovernanceRecordKind.APPROVAL_DECISION]  # P1: reused
    decision = next(r for r in found if r.kind is GovernanceRecordKind.APPROVAL_DECISION).payload
    assert (decision["approver"], decision["note"], decision["decision"]) == ("alice", "checked the payee", "approved")
    assert [t for t in types(store, invocation_id) if "Approval" in t] == ["ApprovalRequested", "ApprovalGranted"]
    assert audit(store) == set()


def test_reject_fails_with_reason(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host, spy, _ = approval_host(store, ledger)
    invocation_id = waiting(host, backend)
    done = host.reject(invocation_id, approver="bob", authority="payments-ops", note="payee unknown")
    assert done.status is InvocationStatus.FAILED and spy.calls == 0 and ledger.charges == {}
    assert done.error == "approval rejected by bob (authority payments-ops): payee unknown"
    assert types(store, invocation_id)[-2:] == ["ApprovalRejected", "ActionInvocationFailed"]
    with pytest.raises(Conflict, match="not awaiting approval"):
        host.approve(invocation_id, approver="alice", authority="payments-ops")
    assert audit(store) == set()


def test_a_nul_in_a_decision_is_invalid_input_on_every_backend(store: Store, backend: StoreBackend,
                                                             ledger: Ledger) -> None:
    """A NUL byte in the approver, authority or note is refused as bad input before the store on both backends
    (SQLite would record it, PostgreSQL refuse it as a conflict), and nothing is decided."""
    host, _, _ = approval_host(store, ledger)
    invocation_id = waiting(host, backend)
    for approver, authority, note in [("al\x00ice", "payments-ops", ""), ("alice", "payments-ops\x00", ""),
                                      ("alice", "payments-ops", "ok\x00")]:
        for decide in (host.approve, host.reject):
            with pytest.raises(InvalidInput, match="NUL"):
                decide(invocation_id, approver=approver, authority=authority, note=note)
    assert host.get(invocation_id).status is InvocationStatus.AWAITING_APPROVAL
    assert audit(store) == set()


def test_approving_from_a_host_without_the_action_decides_nothing(store: Store, backend: StoreBackend,
                                                                  ledger: Ledger) -> None:
    """``approve`` runs the resume in the approving process, so a host that does not define the invocation's
    action (the wrong ``--app``, an old deploy) would record the decision and then settle the invocation
    ``failed`` with "unknown action": an approval turned into a refusal no one made. It is refused first, with
    nothing recorded, and the right host can still approve."""
    host, spy, _ = approval_host(store, ledger)
    invocation_id = waiting(host, backend)
    with pytest.raises(InvalidInput, match=r"does not define action shop\.charge version 1"):
        Host(store).approve(invocation_id, approver="alice", authority="payments-ops", note="ok")
    assert host.get(invocation_id).status is InvocationStatus.AWAITING_APPROVAL
    assert "ApprovalGranted" not in types(store, invocation_id) and audit(store) == set()
    done = host.approve(invocation_id, approver="alice", authority="payments-ops", note="ok")
    assert done.status is InvocationStatus.SUCCEEDED and spy.calls == 1


def test_wrong_authority_refused(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host, spy, _ = approval_host(store, ledger)
    invocation_id = waiting(host, backend)
    before = store.read(lambda tx: tx.host.list_governance_records(invocation_id))
    for decide in (host.approve, host.reject):
        with pytest.raises(NotAllowed, match="requires authority 'payments-ops', not 'interns'"):
            decide(invocation_id, approver="mallory", authority="interns", note="")
    assert host.get(invocation_id).status is InvocationStatus.AWAITING_APPROVAL and spy.calls == 0
    assert store.read(lambda tx: tx.host.list_governance_records(invocation_id)) == before  # nothing recorded


def test_expired_approval_refused_then_swept(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host, spy, _ = approval_host(store, ledger, FourEyes(expires_in=timedelta(seconds=1)))
    invocation_id = waiting(host, backend)
    assert host.expire_approvals() == 0  # not yet due
    backend.advance(1.5)
    with pytest.raises(ApprovalExpired, match="expired at"):
        host.approve(invocation_id, approver="alice", authority="payments-ops")
    assert host.get(invocation_id).status is InvocationStatus.AWAITING_APPROVAL  # refused, nothing written
    sweep = next(s for s in host.sweeps() if s.name == "host.approval-expiry")
    assert sweep.run(store, 1.0) == 1  # the worker's sweep
    done = host.get(invocation_id)
    assert done.status is InvocationStatus.FAILED and "expired" in (done.error or "") and spy.calls == 0
    assert types(store, invocation_id)[-2:] == ["ApprovalExpired", "ActionInvocationFailed"]
    assert host.expire_approvals() == 0 and audit(store) == set()


def test_approval_acceptance_sets_count_at_least_one(store: Store, ledger: Ledger) -> None:
    host, spy, _ = approval_host(store, ledger)
    inline = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert inline.status is InvocationStatus.AWAITING_APPROVAL and inline.attempt_count == 0  # A4: inline counts 0
    done = host.approve(inline.id, approver="alice", authority="payments-ops")
    assert done.status is InvocationStatus.SUCCEEDED and done.attempt_count == 1 and spy.calls == 1  # P3


@pytest.mark.parametrize("count, expected", [(0, 1), (5, 5), (6, 6)])
def test_approval_and_budget(store: Store, backend: StoreBackend, ledger: Ledger, count: int,
                             expected: int) -> None:
    """H14: the resume uses the existing count (0 becomes 1); equal to the budget is admitted; above it settles
    before the handler. The earlier claims are simulated by setting the command's delivery count."""
    host, spy, adapter = approval_host(store, ledger, recovery=5)
    invocation_id = waiting(host, backend)
    store.transact(lambda tx: backend.inspect(
        tx, f"UPDATE commands SET delivery_count = {count} WHERE id = '{invocation_id}'"))
    done = host.approve(invocation_id, approver="alice", authority="payments-ops")
    assert done.attempt_count == expected  # never incremented, never reset
    if count <= 5:
        assert done.status is InvocationStatus.SUCCEEDED and spy.calls == 1
    else:
        assert done.status is InvocationStatus.RECONCILIATION_REQUIRED and (spy.calls, len(adapter.calls)) == (0, 0)
        assert done.error == "recovery attempts exhausted (6/5)"
        assert done.reconciliation is not None and done.reconciliation["kind"] == "recovery_budget_exhausted"


def test_a_dead_approval_resume_is_recovered_by_a_worker(store: Store, backend: StoreBackend,
                                                          ledger: Ledger) -> None:
    """The temporary lease proves no recovery worker: when the approving process dies mid-resume its lease
    expires and a worker's claim (which counts) takes over, reusing the approval."""
    host, spy, _ = approval_host(store, ledger, lease=backend.short_lease)
    invocation_id = waiting(host, backend)
    spy.raises = Crash()
    with pytest.raises(Crash):
        host.approve(invocation_id, approver="alice", authority="payments-ops")
    assert host.get(invocation_id).status is InvocationStatus.RUNNING
    spy.raises = None
    backend.expire()
    run_worker(host, backend)
    done = host.get(invocation_id)
    assert done.status is InvocationStatus.SUCCEEDED and done.attempt_count == 2


CLI_APP = textwrap.dedent('''
    from pydantic import BaseModel
    from fencepost.host import Action, AdapterStep, Host, RequireApproval, Succeeded

    class Params(BaseModel):
        order_id: str

    class Echo:
        type, vendor = "echo", "local"
        def execute(self, call):
            return Succeeded({"order": call.input["order_id"]})

    class FourEyes:
        name = "four-eyes"
        def evaluate(self, ctx):
            return RequireApproval("payments-ops", reason="payouts need a second person")

    ACTION = Action(id="shop.payout", version=1, params=Params, handler=lambda ctx, p: {"order": p.order_id},
                    steps=(AdapterStep(name="echo", adapter="echo", operation="echo"),), policies=(FourEyes(),))

    def make(store):
        return Host(store, actions=[ACTION], adapters=[Echo()])
''')


def test_cli_lists_approves_and_rejects(tmp_path: Path) -> None:
    (tmp_path / "payapp.py").write_text(CLI_APP, encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'fp.db'}"
    assert run_cli(["migrate", "-d", url], cwd=tmp_path).returncode == 0
    ids = []
    for key in ("a", "b"):
        submitted = run_cli(["host", "submit", "shop.payout", "--app", "payapp:make", "--params",
                             '{"order_id": "o-1"}', "--key", key, "--inline", "--json", "-d", url], cwd=tmp_path)
        assert submitted.returncode == 0, submitted.describe()
        assert submitted.json()["status"] == "awaiting_approval"
        ids.append(submitted.json()["id"])
    listed = run_cli(["host", "approvals", "--json", "-d", url], cwd=tmp_path)
    assert sorted(a["invocation_id"] for a in listed.json()["approvals"]) == sorted(ids)
    assert {a["authority"] for a in listed.json()["approvals"]} == {"payments-ops"}
    narrow = run_cli(["host", "approvals", "-d", url], cwd=tmp_path, env={**subprocess_env(), "COLUMNS": "80"})
    expiry = listed.json()["approvals"][0]["expires_at"][:19].replace("T", " ")
    assert all(i in narrow.stdout for i in ids) and "authority payments-ops" in narrow.stdout, narrow.stdout
    assert f"expires {expiry} UTC" in narrow.stdout, narrow.stdout  # in one piece, not folded into a column
    decide = ["--as", "alice", "--note", "payee checked", "-d", url]
    wrong = run_cli(["host", "approve", ids[0], "--app", "payapp:make", "--authority", "interns", *decide],
                    cwd=tmp_path)
    assert wrong.returncode == 6 and "requires authority 'payments-ops'" in wrong.stderr, wrong.describe()
    approved = run_cli(["host", "approve", ids[0], "--app", "payapp:make", "--authority", "payments-ops", "--json",
                        *decide], cwd=tmp_path)
    assert approved.returncode == 0, approved.describe()
    assert (approved.json()["status"], approved.json()["attempt_count"]) == ("succeeded", 1)
    rejected = run_cli(["host", "reject", ids[1], "--authority", "payments-ops", "--json", *decide], cwd=tmp_path)
    assert rejected.returncode == 0 and rejected.json()["status"] == "failed", rejected.describe()
    again = run_cli(["host", "reject", ids[1], "--authority", "payments-ops", *decide], cwd=tmp_path)
    assert again.returncode == 3, again.describe()  # no longer awaiting approval
    for invocation_id, decision in ((ids[0], "ApprovalGranted"), (ids[1], "ApprovalRejected")):
        shown = run_cli(["host", "show", invocation_id, "-d", url], cwd=tmp_path).stdout
        [line] = [line for line in shown.splitlines() if decision in line]
        assert "approver alice, authority payments-ops, note payee checked" in line, shown  # who decided, and why
    store = open_store(url)
    try:
        assert audit(store) == set()
    finally:
        store.close()
