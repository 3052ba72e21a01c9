"""Submission and idempotency keys (host-spec A2, A4, B1-B7; ADRs 0022, 0023), on every backend."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fencepost.core.errors import Conflict, IdempotencyConflict, InvalidInput
from fencepost.core.statuses import CommandStatus, InvocationMode, InvocationStatus
from fencepost.host import Dispatch, Inline, idempotency
from fencepost.store import open_store
from fencepost.store.base import Store
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, make_host, run_worker


def test_submit_dispatch_creates_command_and_inline_runs_now(store: Store, ledger: Ledger) -> None:
    spy = Spy()
    host = make_host(store, charge_action(spy), Scripted(ledger))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k1", mode=Dispatch())
    assert (queued.status, queued.mode, spy.calls) == (InvocationStatus.PENDING, InvocationMode.DISPATCH, 0)
    command = store.read(lambda tx: tx.outbox.get(queued.id))
    assert command is not None and command.status is CommandStatus.PENDING
    assert command.kind == "host.invoke:shop.charge@1"  # one kind per action version (ADR 0022)
    ran = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k2", mode=Inline())
    assert (ran.status, spy.calls, len(ledger.charges)) == (InvocationStatus.SUCCEEDED, 1, 1)
    inline_command = store.read(lambda tx: tx.outbox.get(ran.id))
    assert inline_command is not None and inline_command.status is CommandStatus.DELIVERED  # nothing claimable
    assert ran.result == {"reserved": "o-1", "steps": {"charge": {"charge_id": "ch_1"}}}


def test_inline_does_not_count_attempts(store: Store, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    ran = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert ran.status is InvocationStatus.SUCCEEDED and ran.attempt_count == 0


def test_new_row_stores_full_binding(store: Store, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy(), version=3), Scripted(ledger))
    queued = host.submit("shop.charge", PARAMS, actor="u1", authority="role:cashier", idempotency_key="k")
    record = store.read(lambda tx: tx.host.get_invocation(queued.id))
    assert record is not None
    assert record.action_version == 3 and record.binding_digest.startswith("bd1:")
    assert record.params_digest.startswith("cp1:") and record.params == PARAMS
    identity = store.read(lambda tx: tx.host.store_identity())
    assert queued.id == idempotency.invocation_id(identity, "default", "default", "shop.charge", "k")
    assert queued.id == host.invocation_id("default", "default", "shop.charge", "k")


def test_two_control_databases_never_send_a_provider_the_same_key(store: Store, backend: StoreBackend,
                                                                   tmp_path: Path, ledger: Ledger) -> None:
    """ADR 0108: a second deployment (or a database made anew) that uses the same tenant, space, action and
    idempotency key with the same provider account gets other invocation ids and other provider keys, so the
    provider never answers one deployment's call with the other's cached effect. Within one database a replay
    still finds the first invocation, and the key stays stable for its steps (E2)."""
    other_backend = f"sqlite:///{tmp_path / 'other.db'}"
    other = open_store(other_backend)
    try:
        other.migrate()
        ids = {}
        for name, each in (("first", store), ("second", other)):
            host = make_host(each, charge_action(Spy()), Scripted(ledger))
            ran = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="order-1", mode=Inline())
            assert ran.status is InvocationStatus.SUCCEEDED
            again = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="order-1", mode=Inline())
            assert again.id == ran.id
            ids[name] = ran.id
        assert ids["first"] != ids["second"]
        assert len(ledger.requests) == 2 and len(set(ledger.requests)) == 2, ledger.requests  # two provider keys
        assert len(ledger.charges) == 2  # each deployment's charge is its own
        identities = {each.read(lambda tx: tx.host.store_identity()) for each in (store, other)}
        assert len(identities) == 2 and all(len(i) == 32 and int(i, 16) >= 0 for i in identities)
        store.migrate()  # made once, by migration 0017: migrating again keeps it
        assert store.read(lambda tx: tx.host.store_identity()) in identities
    finally:
        other.close()


def test_same_key_same_binding_returns_existing(store: Store, ledger: Ledger) -> None:
    spy = Spy()
    host = make_host(store, charge_action(spy), Scripted(ledger))
    first = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    again = host.submit("shop.charge", dict(PARAMS), actor="u1", idempotency_key="k", mode=Inline())
    dispatched_again = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Dispatch())
    assert first.id == again.id == dispatched_again.id and spy.calls == 1 and len(ledger.requests) == 1
    assert len(host.list()) == 1


@pytest.mark.parametrize("field, change", [("actor", {"actor": "u2"}), ("authority", {"authority": "role:x"})])
def test_same_key_other_actor_conflicts(store: Store, ledger: Ledger, field: str, change: dict[str, str]) -> None:
    spy = Spy()
    host = make_host(store, charge_action(spy), Scripted(ledger))
    host.submit("shop.charge", PARAMS, actor="u1", authority="role:cashier", idempotency_key="k")
    arguments = {"actor": "u1", "authority": "role:cashier", **change}
    with pytest.raises(IdempotencyConflict) as raised:
        host.submit("shop.charge", PARAMS, idempotency_key="k", mode=Inline(), **arguments)
    assert raised.value.field == field and spy.calls == 0


def test_same_key_other_action_version_conflicts(store: Store, ledger: Ledger) -> None:
    old, new = charge_action(Spy(), version=1), charge_action(Spy(), version=2)
    host = make_host(store, old, Scripted(ledger))
    host.actions.register(new)
    host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", version=1)
    with pytest.raises(IdempotencyConflict) as raised:
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")  # the newest version, 2
    assert raised.value.field == "action_version"


def test_same_key_other_params_conflicts(store: Store, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    host.submit("shop.charge", {"order_id": "o-1", "amount_cents": 4711}, actor="u1", idempotency_key="k")
    with pytest.raises(IdempotencyConflict) as raised:
        host.submit("shop.charge", {"order_id": "o-1", "amount_cents": 200}, actor="u1", idempotency_key="k")
    assert raised.value.field == "parameters" and "4711" not in str(raised.value)


def test_param_key_order_irrelevant(store: Store, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    a = host.submit("shop.charge", {"order_id": "o-1", "amount_cents": 5}, actor="u1", idempotency_key="k")
    b = host.submit("shop.charge", {"amount_cents": 5, "order_id": "o-1"}, actor="u1", idempotency_key="k")
    assert a.id == b.id


def test_digest_version_is_respected(store: Store, ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    first = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    monkeypatch.setitem(idempotency.DIGESTS, "cp2", lambda params: "cp2:" + "f" * 64)
    monkeypatch.setattr(idempotency, "PARAMS_DIGEST_VERSION", "cp2")
    assert host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k").id == first.id  # compared by cp1
    fresh = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k2")
    record = store.read(lambda tx: tx.host.get_invocation(fresh.id))
    assert record is not None and record.params_digest == "cp2:" + "f" * 64


def test_invalid_params_are_refused_before_anything_is_stored(store: Store, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    with pytest.raises(InvalidInput):
        host.submit("shop.charge", {"order_id": "o-1", "amount_cents": -1}, actor="u1", idempotency_key="k")
    with pytest.raises(InvalidInput):
        host.submit("shop.unknown", PARAMS, actor="u1", idempotency_key="k")
    assert host.list() == []


def test_params_json_cannot_hold_are_refused_not_stored_as_null(store: Store, ledger: Ledger) -> None:
    """A break-it trial: NaN and Infinity were stored as null (pydantic's JSON mode), so NaN, Infinity and None
    submitted under one key were one request; a float field holding NaN and a string holding a lone surrogate
    crashed with TypeError and UnicodeEncodeError."""
    from typing import Any

    from pydantic import BaseModel

    from fencepost.host import Action

    class Loose(BaseModel):
        n: int
        data: Any = None
        x: float = 0.0

    host = make_host(store, Action(id="shop.loose", version=1, params=Loose, handler=Spy()), Scripted(ledger))
    for params, why in (({"n": 1, "data": float("nan")}, "params.data: nan is not a finite number"),
                        ({"n": 1, "data": [1, {"deep": float("inf")}]}, "params.data.1.deep: inf is not a finite"),
                        ({"n": 1, "x": float("-inf")}, "params.x: -inf is not a finite number"),
                        ({"n": 1, "data": "\ud800"}, r"a string at \$\.data holds a lone surrogate")):
        with pytest.raises(InvalidInput, match=f"invalid params for shop.loose: {why}"):
            host.submit("shop.loose", params, actor="u1", idempotency_key="k")
    assert host.list() == []
    stored = host.submit("shop.loose", {"n": 1, "data": None}, actor="u1", idempotency_key="k")
    assert stored.params == {"n": 1, "data": None, "x": 0.0}


def test_a_set_in_params_is_stored_in_one_order_so_a_replay_in_any_process_matches(store: Store,
                                                                                   ledger: Ledger) -> None:
    """A break-it trial: a ``set[str]`` field was stored in its iteration order, which string hashing randomizes
    per process, so the same request under its key conflicted with itself in another process."""
    from pydantic import BaseModel

    from fencepost.host import Action

    class Tagged(BaseModel):
        tags: set[str]

    words = ["kiwi", "apple", "fig", "banana", "cherry", "date", "elderberry", "grape"]
    # a set whose iteration order here is not sorted, so that storing it as iterated shows
    tags = next(set(words[:n]) for n in range(3, len(words) + 1) if list(set(words[:n])) != sorted(words[:n]))
    host = make_host(store, Action(id="shop.tagged", version=1, params=Tagged, handler=Spy()), Scripted(ledger))
    first = host.submit("shop.tagged", {"tags": list(tags)}, actor="u1", idempotency_key="t")
    assert first.params == {"tags": sorted(tags)}
    again = host.submit("shop.tagged", {"tags": sorted(tags, reverse=True)}, actor="u1", idempotency_key="t")
    assert again.id == first.id and again.params_digest == first.params_digest


def test_sets_inside_sets_are_stored_in_one_order(store: Store, ledger: Ledger) -> None:
    """Round 3 of the break-it trial: the inner frozensets of a ``set[frozenset[str]]`` kept their per-process
    order."""
    from pydantic import BaseModel

    from fencepost.host import Action

    class Groups(BaseModel):
        groups: set[frozenset[str]]

    words = ["kiwi", "apple", "fig", "banana", "cherry", "date", "elderberry", "grape"]
    inner = next(frozenset(words[:n]) for n in range(3, len(words) + 1)
                 if list(frozenset(words[:n])) != sorted(words[:n]))
    host = make_host(store, Action(id="shop.groups", version=1, params=Groups, handler=Spy()), Scripted(ledger))
    stored = host.submit("shop.groups", {"groups": [list(inner), ["z"]]}, actor="u1", idempotency_key="g")
    assert stored.params == {"groups": [sorted(inner), ["z"]]}


def test_params_nesting_is_refused_at_submit_where_the_step_could_not_record_it(
        store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    """A break-it trial: params nested exactly to canonical JSON's limit were accepted, the provider was called,
    and then the step's event (which wraps its input) could not be written: reconciliation_required."""
    from typing import Any

    from pydantic import BaseModel

    from fencepost.host import Action, AdapterStep
    from fencepost.host.service import PARAMS_MAX_DEPTH

    class Raw(BaseModel):
        raw: Any

    def nested(containers: int) -> Any:
        value: Any = 1
        for _ in range(containers):
            value = [value]
        return value

    host = make_host(store, Action(id="shop.raw", version=1, params=Raw, handler=lambda ctx, params: None,
                                   steps=(AdapterStep(name="charge", adapter="pay", operation="create_charge"),)),
                     Scripted(ledger))
    with pytest.raises(InvalidInput, match=f"params nest deeper than {PARAMS_MAX_DEPTH} levels"):
        host.submit("shop.raw", {"raw": nested(PARAMS_MAX_DEPTH)}, actor="u1", idempotency_key="too-deep")
    queued = host.submit("shop.raw", {"raw": nested(PARAMS_MAX_DEPTH - 1)}, actor="u1", idempotency_key="deep")
    assert run_worker(host, backend) == 1
    assert host.get(queued.id).status is InvocationStatus.SUCCEEDED and len(ledger.charges) == 1


def test_params_without_a_json_form_are_bad_input(store: Store, ledger: Ledger) -> None:
    """A break-it trial: bytes that are not UTF-8 and a lone surrogate in a key crashed submit."""
    from typing import Any

    from pydantic import BaseModel

    from fencepost.host import Action

    class Raw(BaseModel):
        raw: Any = None
        blob: bytes = b""

    host = make_host(store, Action(id="shop.raw", version=1, params=Raw, handler=Spy()), Scripted(ledger))
    for params in ({"blob": b"\xff\xfe"}, {"raw": {"\ud800": 1}}):
        with pytest.raises(InvalidInput, match=r"invalid params for shop\.raw"):
            host.submit("shop.raw", params, actor="u1", idempotency_key="k")
    assert host.list() == []


def test_concurrent_same_key_single_invocation(backend: StoreBackend, ledger: Ledger) -> None:
    backend.migrated()
    hosts = [make_host(backend.migrated(), charge_action(Spy()), Scripted(ledger)) for _ in range(8)]
    barrier = threading.Barrier(8)
    ids: list[str] = []
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait()
            ids.append(hosts[index].submit("shop.charge", PARAMS, actor="u1", idempotency_key="same").id)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(set(ids)) == 1 and len(ids) == 8
    assert len(hosts[0].list()) == 1
    counts = hosts[0].store.read(lambda tx: tx.outbox.count_by_status())
    assert counts == {CommandStatus.PENDING: 1}


def test_execute_of_an_invocation_this_host_does_not_hold_is_refused(store: Store, ledger: Ledger) -> None:
    host = make_host(store, charge_action(Spy()), Scripted(ledger))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    with pytest.raises(Conflict):
        host.execute(queued.id)


def test_a_worker_never_claims_an_action_version_its_host_does_not_define(store: Store, backend: StoreBackend,
                                                                          ledger: Ledger) -> None:
    """A deploy moved to version 2 (or another team's worker shares the database): its workers leave version 1's
    invocations pending instead of failing them as unknown; a worker that defines version 1 then runs them."""
    old = make_host(store, charge_action(Spy(), version=1), Scripted(ledger))
    queued = old.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k")
    newer = make_host(store, charge_action(Spy(), version=2), Scripted(ledger))
    for _ in range(3):
        assert run_worker(newer, backend) == 0
    assert old.get(queued.id).status is InvocationStatus.PENDING and old.get(queued.id).attempt_count == 0
    assert run_worker(old, backend) == 1
    assert old.get(queued.id).status is InvocationStatus.SUCCEEDED and len(ledger.charges) == 1


@pytest.mark.parametrize("payload", [{"s": {1, 2}}, {"file": "report-\udcff.csv"},
                                     {"d": [[[[1]]]]}])
def test_an_event_that_could_not_be_recorded_fails_the_handler_before_any_step(
        store: Store, backend: StoreBackend, ledger: Ledger, payload: dict[str, object],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 3 of the break-it trial: ``ctx.emit`` with a set, a lone surrogate or too deep a payload was refused
    only at finalization, after the step had charged the provider (reconciliation_required)."""
    import fencepost.host.action as action_module

    def handler(ctx: object, params: object) -> None:
        ctx.emit("Odd", payload)  # type: ignore[attr-defined]

    if "d" in payload:
        monkeypatch.setattr(action_module, "WRAPPED_MAX_DEPTH", 3)  # a shallow limit keeps the case small
    host = make_host(store, charge_action(handler), Scripted(ledger))  # type: ignore[arg-type]
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="e")
    assert run_worker(host, backend) == 1
    done = host.get(queued.id)
    assert done.status is InvocationStatus.FAILED and "cannot be recorded" in (done.error or ""), done.error
    assert ledger.charges == {} and ledger.requests == []  # no step ran


def test_an_unknown_action_id_names_the_near_miss_or_what_the_host_registers() -> None:
    """A typo in a submit says what was meant (a new-user trial got a bare "unknown action shop.chrage")."""
    from dataclasses import replace

    from fencepost.core.errors import NotFound
    from fencepost.host.action import ActionRegistry

    charge = charge_action(Spy())
    registry = ActionRegistry([charge, replace(charge, id="shop.refund")])
    with pytest.raises(NotFound, match=r"^unknown action shop\.chrage; did you mean shop\.charge\?$"):
        registry.resolve("shop.chrage")
    with pytest.raises(NotFound, match=r"^unknown action billing\.x \(this host registers: shop\.charge, "
                                       r"shop\.refund\)$"):
        registry.resolve("billing.x")
    with pytest.raises(NotFound, match=r"\(this host registers no action\)$"):
        ActionRegistry().resolve("shop.charge")
