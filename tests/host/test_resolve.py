"""Operator resolution of a ``reconciliation_required`` invocation (host-spec §1.Y-13, §1.Y-1 (b); ADR 0048), on
every backend: the resolution settles it succeeded or failed, keeps the original verdict and its evidence in
history, writes ``InvocationResolved`` with its outbox row, the audit accepts it and flags each tampering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencepost.core.errors import Conflict, InvalidInput, NotFound
from fencepost.core.statuses import AdapterStatus, InvocationStatus, ReconciliationKind
from fencepost.host import Ambiguous, Host, InvocationView
from fencepost.host.resolution import RESOLVED
from fencepost.store.base import Store
from helpers.processes import run_cli
from helpers.store_backends import StoreBackend, schema_url, store_backend
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, events_of, make_host, run_worker

RECON = "ActionInvocationReconciliationRequired"


def ambiguous(store: Store, backend: StoreBackend, ledger: Ledger, key: str = "k1") -> tuple[Host, InvocationView]:
    """A dispatched charge whose provider reply is ambiguous: the invocation ends reconciliation_required."""
    host = make_host(store, charge_action(Spy()), Scripted(ledger, Ambiguous("reset after the request left")))
    host.submit("shop.charge", {**PARAMS, "order_id": key}, actor="u1", idempotency_key=key)
    run_worker(host, backend)
    done = host.list(status=InvocationStatus.RECONCILIATION_REQUIRED)
    assert len(done) == 1
    return host, host.get(done[0].id)


def findings(store: Store) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in store.read(lambda tx: tx.audit.invariant_findings()):
        found.setdefault(f.check, []).append(f.detail)
    return found


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_resolve_settles_and_keeps_the_original_verdict(store: Store, backend: StoreBackend, ledger: Ledger,
                                                        outcome: str) -> None:
    host, before = ambiguous(store, backend, ledger)
    assert before.status is InvocationStatus.RECONCILIATION_REQUIRED and findings(store) == {}
    charge = ledger.charges[before.steps[0].adapter_invocation_id]["id"]
    after = host.resolve(before.id, outcome, operator="ops:1", note=f"charge {charge} looked up at SimPay",
                         evidence={"charge_id": charge})
    assert after.status == outcome
    # The settled verdict's evidence is untouched: error, reconciliation, the ambiguous step row.
    assert (after.error, after.reconciliation) == (before.error, before.reconciliation)
    assert after.reconciliation is not None
    assert after.reconciliation["kind"] == ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS
    assert after.steps == before.steps and after.steps[0].status is AdapterStatus.AMBIGUOUS
    assert after.resolution is not None
    assert after.resolution["outcome"] == outcome and after.resolution["operator"] == "ops:1"
    assert after.resolution["evidence"] == {"charge_id": charge}
    assert after.resolution["prior"] == {"status": "reconciliation_required", "error": before.error,
                                         "reconciliation": before.reconciliation}
    # Both verdicts are in the log, in order; the resolution has its stable id and an outbox row.
    types = [e.type for e in events_of(store, before.id)]
    assert types.index(RECON) < types.index(RESOLVED) and types.count(RESOLVED) == 1
    event = next(e for e in events_of(store, before.id) if e.type == RESOLVED)
    assert event.payload["outcome"] == outcome and event.payload["prior"]["kind"] == "adapter_outcome_ambiguous"
    assert store.read(lambda tx: tx.events.get_event_outbox(event.id)) is not None
    recon = store.read(lambda tx: tx.host.list_reconciliations(before.id))
    assert recon and all(r.kind is ReconciliationKind.ADAPTER_OUTCOME_AMBIGUOUS for r in recon)
    # The history reads both verdicts; the audit accepts a resolved invocation.
    _, told = host.history(before.id)
    assert [e["type"] for e in told["events"] if e["type"] in (RECON, RESOLVED)] == [RECON, RESOLVED]
    assert told["resolution"]["outcome"] == outcome and told["lease_timeline"][0]["ended"] == "delivered"
    assert findings(store) == {}
    assert host.reconciliation_queue() == []


def test_resolve_is_refused_unless_reconciliation_required(store: Store, backend: StoreBackend,
                                                           ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    pending = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="p")
    with pytest.raises(Conflict, match="is pending: only a reconciliation_required"):
        host.resolve(pending.id, "succeeded", operator="ops:1", note="n")
    run_worker(host, backend)
    with pytest.raises(Conflict, match="is succeeded"):
        host.resolve(pending.id, "failed", operator="ops:1", note="n")
    with pytest.raises(NotFound):
        host.resolve("inv_missing", "failed", operator="ops:1", note="n")
    for outcome, operator, note, evidence in [("reconciliation_required", "o", "n", None), ("ok", "o", "n", None),
                                              ("failed", "", "n", None), ("failed", "o", "  ", None),
                                              ("failed", "o", "n", ["x"]), ("failed", "o", "n" * 2001, None)]:
        with pytest.raises(InvalidInput):
            host.resolve(pending.id, outcome, operator=operator, note=note, evidence=evidence)  # type: ignore[arg-type]
    assert host.get(pending.id).resolution is None and findings(store) == {}


def test_resolving_twice(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host, inv = ambiguous(store, backend, ledger)
    first = host.resolve(inv.id, "succeeded", operator="ops:1", note="found", evidence={"c": 1})
    again = host.resolve(inv.id, "succeeded", operator="ops:1", note="found", evidence={"c": 1})
    assert again == first  # the identical request is idempotent: nothing is written again
    assert [e.type for e in events_of(store, inv.id)].count(RESOLVED) == 1
    for outcome, note in [("failed", "found"), ("succeeded", "another note")]:
        with pytest.raises(Conflict, match="already resolved succeeded by ops:1"):
            host.resolve(inv.id, outcome, operator="ops:1", note=note, evidence={"c": 1})
    assert host.get(inv.id).status is InvocationStatus.SUCCEEDED


def test_a_nul_in_the_operator_or_note_is_invalid_input_on_every_backend(store: Store, backend: StoreBackend,
                                                                      ledger: Ledger) -> None:
    """A NUL byte in the operator or note is the caller's bad input on both backends, refused before the store:
    SQLite would store it and PostgreSQL refuse it as a schema conflict (HTTP 409), so the same request
    answered differently by backend."""
    host, inv = ambiguous(store, backend, ledger)
    for operator, note in [("ops\x00:1", "found"), ("ops:1", "charge\x00found")]:
        with pytest.raises(InvalidInput, match="NUL"):
            host.resolve(inv.id, "succeeded", operator=operator, note=note)
    assert host.get(inv.id).status is InvocationStatus.RECONCILIATION_REQUIRED
    assert RESOLVED not in [e.type for e in events_of(store, inv.id)]


def test_the_queue_is_oldest_first_with_what_to_look_up(store: Store, backend: StoreBackend,
                                                        ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger, Ambiguous("reset"), Ambiguous("reset")))
    first = host.submit("shop.charge", {**PARAMS, "order_id": "a"}, actor="u1", idempotency_key="a")
    run_worker(host, backend)
    backend.advance(0.01)  # the second verdict is later by the store's clock
    second = host.submit("shop.charge", {**PARAMS, "order_id": "b"}, actor="u1", idempotency_key="b")
    run_worker(host, backend)
    queue = host.reconciliation_queue()
    assert [q.invocation["id"] for q in queue] == [first.id, second.id]
    entry = queue[0]
    assert entry.kind == "adapter_outcome_ambiguous" and entry.reason
    step = host.get(first.id).steps[0]
    assert [(lk.vendor, lk.adapter_invocation_id, lk.status) for lk in entry.lookups] == [
        ("simpay-test", step.adapter_invocation_id, "ambiguous")]
    host.resolve(first.id, "failed", operator="ops:2", note="no charge at the provider")
    assert [q.invocation["id"] for q in host.reconciliation_queue()] == [second.id]


def test_the_audit_flags_a_tampered_resolution(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host, inv = ambiguous(store, backend, ledger)
    host.resolve(inv.id, "succeeded", operator="ops:1", note="found")
    assert findings(store) == {}
    # The settled verdict rewritten after the resolution.
    store.transact(lambda tx: backend.inspect(tx, f"UPDATE invocations SET error = 'rewritten' WHERE id = '{inv.id}'"))
    assert any("was rewritten since" in d for d in findings(store)["invocation_resolution"])
    store.transact(lambda tx: backend.inspect(
        tx, f"UPDATE invocations SET error = {_quote(inv.error)} WHERE id = '{inv.id}'"))
    assert findings(store) == {}
    # The status moved away from what the resolution chose.
    store.transact(lambda tx: backend.inspect(tx, f"UPDATE invocations SET status = 'failed' WHERE id = '{inv.id}'"))
    assert any("InvocationResolved of a succeeded resolution" in d
               for d in findings(store)["invocation_verdict_event"])
    store.transact(lambda tx: backend.inspect(
        tx, f"UPDATE invocations SET status = 'succeeded' WHERE id = '{inv.id}'"))
    # The resolution's event removed.
    store.transact(lambda tx: backend.inspect(tx, "DELETE FROM host_event_outbox WHERE event_id IN (SELECT id FROM "
                                                  f"host_events WHERE type = '{RESOLVED}')"))
    store.transact(lambda tx: backend.inspect(tx, f"DELETE FROM host_events WHERE type = '{RESOLVED}'"))
    found = findings(store)
    assert any("has no InvocationResolved event" in d for d in found["invocation_resolution"])
    assert "invocation_verdict_event" in found  # succeeded, but its latest verdict event is the recon one


def test_the_resolution_row_is_append_only(store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    host, inv = ambiguous(store, backend, ledger)
    host.resolve(inv.id, "failed", operator="ops:1", note="none found")
    with pytest.raises(Exception, match="append-only"):
        store.transact(lambda tx: backend.inspect(tx, "UPDATE host_resolutions SET outcome = 'succeeded'"))
    assert host.get(inv.id).resolution["outcome"] == "failed"  # type: ignore[index]


def test_cli_resolve_and_queue(tmp_path: Path, ledger: Ledger) -> None:
    # The CLI is the same code over either backend (the store contract above runs on each): one backend here.
    with store_backend("sqlite-wal", tmp_path) as backend:
        _, inv = ambiguous(backend.migrated(), backend, ledger)
        _cli_flow(backend, inv)


def _cli_flow(backend: StoreBackend, inv: InvocationView) -> None:
    url = schema_url(backend.schema or "") if backend.is_postgres else backend.url
    queue = run_cli(["host", "queue", "-d", url, "--json"])
    assert queue.returncode == 0, queue.stderr
    assert [e["invocation"]["id"] for e in json.loads(queue.stdout)] == [inv.id]
    bad = run_cli(["host", "resolve", inv.id, "--succeeded", "--failed", "--as", "ops:1", "--note", "x", "-d", url])
    assert bad.returncode != 0
    # The note carries a newline and an escape sequence: shown, never acted on (a break-it trial forged a
    # "resolved succeeded by ops:alice" line and recoloured the screen through them).
    note = "charge found\n  resolved failed by ops:mallory \x1b[31mRED"
    done = run_cli(["host", "resolve", inv.id, "--succeeded", "--as", "ops:1", "--note", note,
                    "--evidence", '{"charge_id": "ch_1"}', "-d", url, "--json"])
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["status"] == "succeeded" and shown["resolution"]["evidence"] == {"charge_id": "ch_1"}
    again = run_cli(["host", "resolve", inv.id, "--failed", "--as", "ops:1", "--note", "x", "-d", url])
    assert again.returncode != 0 and "already resolved" in again.stderr
    empty = run_cli(["host", "queue", "-d", url])
    assert empty.returncode == 0 and "no invocation awaits" in empty.stdout
    zero = run_cli(["host", "queue", "--limit", "0", "-d", url])  # worded as host list and events list word it
    assert zero.returncode == 2 and "--limit must be between 1 and 1000" in zero.stderr, zero.describe()
    # a list says it was resolved and by whom, not only "succeeded" beside the ambiguity error it settled
    listed = run_cli(["host", "list", "-d", url, "--json"])
    assert listed.returncode == 0
    assert json.loads(listed.stdout)["invocations"][0]["resolution"]["operator"] == "ops:1"
    text = run_cli(["host", "list", "-d", url])
    assert text.returncode == 0 and "resolved succeeded by ops:1" in text.stdout
    # show labels the settled verdict's error as the original one, not as the error of a succeeded invocation
    show = run_cli(["host", "show", inv.id, "-d", url])
    assert show.returncode == 0 and f"  original error: {inv.error}" in show.stdout, show.stdout
    assert "\x1b" not in show.stdout + text.stdout
    assert not [ln for ln in (show.stdout + text.stdout).splitlines() if ln.lstrip().startswith("resolved failed")]
    assert "charge found\\n  resolved failed by ops:mallory \\x1b[31mRED" in show.stdout, show.stdout
    assert "\n  error: " not in show.stdout and "  original reconciliation: " in show.stdout


def _quote(value: str | None) -> str:
    return "NULL" if value is None else "'" + value.replace("'", "''") + "'"


def test_a_replayed_submit_shows_the_resolution_as_get_does(store: Store, backend: StoreBackend,
                                                            ledger: Ledger) -> None:
    """Submitting the same key again returns the stored invocation as ``get`` shows it: steps, resolution and
    all, whether fencepost opens the unit or the caller's transaction is used (its view once lacked the
    resolution)."""
    host, before = ambiguous(store, backend, ledger)
    host.resolve(before.id, "failed", operator="ops:1", note="no charge at SimPay")
    shown = host.get(before.id)
    assert shown.resolution is not None and shown.steps
    again = host.submit("shop.charge", {**PARAMS, "order_id": "k1"}, actor="u1", idempotency_key="k1")
    assert again == shown and again.replayed and not shown.replayed
    with store.transaction() as tx:
        in_caller_tx = host.submit("shop.charge", {**PARAMS, "order_id": "k1"}, actor="u1", idempotency_key="k1",
                                   tx=tx)
    assert in_caller_tx == shown
