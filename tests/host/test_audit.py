"""``fencepost audit`` learns the host's invariants (issue 12): a sound run has no finding; each damage is found."""

from __future__ import annotations

from fencepost.store.base import Store
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, make_host, run_worker


def findings(store: Store) -> set[str]:
    return {f.check for f in store.read(lambda tx: tx.audit.invariant_findings())}


def test_host_runs_leave_no_finding_and_damage_is_found(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    done = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="done")
    run_worker(host, backend)
    assert host.get(done.id).status == "succeeded" and findings(store) == set()
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="queued-2")
    store.transact(lambda tx: backend.inspect(
        tx, f"UPDATE invocations SET status = 'succeeded' WHERE id = '{queued.id}'"))
    assert {"invocation_command_status", "invocation_verdict_event"} <= findings(store)
    store.transact(lambda tx: backend.inspect(tx, f"UPDATE invocations SET status = 'pending' WHERE id = '{done.id}'"))
    assert "invocation_steps" in findings(store)
