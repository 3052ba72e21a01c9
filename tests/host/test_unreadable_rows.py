"""A stored invocation row whose JSON cannot be read back (written past the port: nesting past the parser's limit)
on every backend (a break-it trial; ADR 0100): reads fail closed naming the row, and a worker ends its command
once instead of redelivering it past every budget."""

from __future__ import annotations

import pytest

from fencepost.core.errors import IntegrityViolation
from fencepost.core.statuses import CommandStatus
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, make_host, run_worker

DEEP = '{"order_id": "o-1", "amount_cents": 1, "pad": ' + "[" * 990 + "]" * 990 + "}"


def test_an_invocation_whose_params_cannot_be_read_fails_closed_and_its_command_ends_once(
        store: Store, backend: StoreBackend, ledger: Ledger) -> None:
    spy = Spy()
    host = make_host(store, charge_action(spy), Scripted(ledger))
    queued = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k1")

    def tamper(tx: UnitOfWork) -> None:
        backend.inspect(tx, f"UPDATE invocations SET params = '{DEEP}' WHERE id = '{queued.id}'")

    store.transact(tamper)
    with pytest.raises(IntegrityViolation, match=f"the stored params of {queued.id} cannot be read back"):
        host.get(queued.id)
    assert run_worker(host, backend) == 1
    command = store.read(lambda tx: tx.outbox.get(queued.id))
    assert command is not None and command.status is CommandStatus.FAILED and command.delivery_count == 1
    assert command.last_error is not None and "cannot be read back" in command.last_error, command.last_error
    assert spy.calls == 0 and ledger.requests == []  # nothing ran, nothing was charged
    assert run_worker(host, backend) == 0  # never claimed again
