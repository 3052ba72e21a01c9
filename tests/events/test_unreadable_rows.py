"""An event or publication row whose stored JSON cannot be read back, on every backend (a break-it trial; ADR
0101): the relay sets it aside alone, dead-lettered unpublished with the reason, and publishes the rest. It
stopped at that row before, for good: the claim raised, and every later event was stuck behind it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fencepost.cli.app import app as cli
from fencepost.core.errors import FencepostError
from fencepost.core.statuses import EventOutboxStatus
from fencepost.events.relay import Relay, RelayConfig, envelope_bytes
from fencepost.events.sinks import CallableSink
from fencepost.store.base import Store
from fencepost.store.host_records import EventOutboxRecord, EventRecord, NewEvent, Subject
from fencepost.store.ports import UnitOfWork
from helpers.store_backends import StoreBackend, schema_url
from helpers.store_reads import update_past_checks

POISON = "ev-0-poison"  # sorts first: it is claimed at the head of every batch
GOOD = [f"ev-{i}" for i in range(1, 5)]

#: How each case corrupts the poison row: (table, column, stored text). None: bytes that are not UTF-8.
CASES: dict[str, tuple[str, str, str | None]] = {
    "payload nested past the parser": ("host_events", "payload", '{"pad": ' + "[" * 990 + "]" * 990 + "}"),
    "payload with a too long integer": ("host_events", "payload", '{"pad": ' + "1" * 5000 + "}"),
    "payload past the envelope's depth": ("host_events", "payload", '{"pad": ' + "[" * 250 + "]" * 250 + "}"),
    "payload with a lone surrogate": ("host_events", "payload", '{"pad": "\\ud800"}'),
    "payload past the envelope's depth under a NUL key": ("host_events", "payload",
                                                          '{"\\u0000": ' + "[" * 250 + "]" * 250 + "}"),
    "payload that is not JSON": ("host_events", "payload", '{"pad": '),
    "actor nested past the parser": ("host_events", "actor", '{"pad": ' + "[" * 990 + "]" * 990 + "}"),
    "headers nested past the parser": ("host_event_outbox", "headers", '{"pad": ' + "[" * 990 + "]" * 990 + "}"),
    "payload that is not UTF-8": ("host_events", "payload", None),
}
#: What each stored column holds once an operator has repaired it.
REPAIRED = {"payload": '{"repaired": true}', "actor": "NULL", "headers": "'{}'"}


def _append(store: Store) -> None:
    def fn(tx: UnitOfWork) -> None:
        for event_id in [POISON, *GOOD]:
            assert tx.events.append_event_with_outbox(NewEvent(
                id=event_id, tenant_id="acme", space_id="shop", subject=Subject("ActionInvocation", event_id),
                type="StateTransitioned", payload={"id": event_id}, actor={"id": "u1"}))

    store.transact(fn)


def _tamper(store: Store, backend: StoreBackend, table: str, column: str, text: str | None) -> None:
    """Write the poison row's ``column`` behind the store's back: past the JSON CHECK when the text is not JSON
    (SQLite ignores CHECKs for the statement, PostgreSQL drops the constraint)."""
    key = "id" if table == "host_events" else "event_id"
    if text is None and backend.is_postgres:
        value = "convert_from('\\x7b22706164223a2280227d'::bytea, 'UTF8')"
    elif text is None:
        value = "CAST(X'7b22706164223a2280227d' AS TEXT)"  # {"pad": "<0x80>"}: valid JSON to SQLite, not UTF-8
    else:
        value = "'" + text.replace("'", "''") + "'"
    update = f"UPDATE {table} SET {column} = {value} WHERE {key} = '{POISON}'"

    store.transact(lambda tx: update_past_checks(backend, tx, update, f"{table}_{column}_check"))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("batch_size", [1, 10])
def test_a_row_that_cannot_be_read_back_is_set_aside_alone_and_the_rest_is_published(
        store: Store, backend: StoreBackend, case: str, batch_size: int) -> None:
    table, column, text = CASES[case]
    _append(store)
    if text is None and backend.is_postgres:  # the server refuses such text: the case cannot arise there
        with pytest.raises(FencepostError, match="invalid byte sequence"):
            _tamper(store, backend, table, column, text)
        return
    _tamper(store, backend, table, column, text)

    sent: list[str] = []

    def publish(event: EventRecord, outbox: EventOutboxRecord) -> None:
        envelope_bytes(event, outbox)  # what a webhook or AMQP sink sends: it must exist for every event
        sent.append(event.id)

    relay = Relay(store, CallableSink(publish), RelayConfig(batch_size=batch_size, idle_seconds=0.01))
    for _ in range(10):
        if not relay.run_once():
            break
    assert sorted(sent) == GOOD  # every other event went out; the poison never reached the sink
    assert (relay.stats.published, relay.stats.dead_lettered, relay.stats.failed) == (4, 1, 0)
    assert relay.run_once() == 0  # and it is never claimed again

    # an operator sees it, with the reason, among the dead letters (the listing does not fail on its headers)
    [row] = store.read(lambda tx: tx.events.list_event_outbox(status=EventOutboxStatus.DEAD_LETTERED))
    assert (row.event_id, row.attempts) == (POISON, 1)  # set aside at once, no budget spent on it
    assert row.last_error is not None and "not published" in row.last_error, row.last_error
    assert f"{column} of event {POISON}" in row.last_error or "envelope" in row.last_error, row.last_error
    if text is not None:  # SQLite's driver cannot read text that is not UTF-8 back for an operator's listing
        url = schema_url(backend.schema) if backend.is_postgres else backend.url
        listed = CliRunner().invoke(cli, ["events", "dead-letters", "--database", url, "--json"])
        assert listed.exit_code == 0, listed.output
        assert [i["event_id"] for i in json.loads(listed.stdout)["items"]] == [POISON]

    # repaired by hand and requeued, it is published like any other event
    key = "id" if table == "host_events" else "event_id"
    fix = REPAIRED[column] if column != "payload" else "'" + REPAIRED[column] + "'"
    store.transact(lambda tx: backend.inspect(tx, f"UPDATE {table} SET {column} = {fix} WHERE {key} = '{POISON}'"))
    store.transact(lambda tx: tx.events.requeue_event(POISON))
    assert relay.run_once() == 1 and sent[-1] == POISON


def test_a_sink_error_holding_a_nul_or_a_lone_surrogate_is_stored_escaped(store: Store,
                                                                          backend: StoreBackend) -> None:
    """The mark of a failed publish stores the sink's message: one holding a NUL (PostgreSQL refused it) or a
    lone surrogate (the driver could not encode it) failed the mark, and with it the relay's loop."""
    _append(store)

    def refuse(event: EventRecord, outbox: EventOutboxRecord) -> None:
        raise RuntimeError("receiver said \x00 about report-\udcff.csv")

    relay = Relay(store, CallableSink(refuse), RelayConfig(batch_size=10, max_attempts=1))
    assert relay.run_once() == 5 and relay.stats.dead_lettered == 5
    rows = store.read(lambda tx: tx.events.list_event_outbox(status=EventOutboxStatus.DEAD_LETTERED))
    assert {r.last_error for r in rows} == {"RuntimeError: receiver said \\0 about report-\\udcff.csv"}
