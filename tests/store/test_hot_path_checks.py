"""Migration 0012 (ADR 0091): the payload's JSON check runs only where the payload can change, and the audit
checks the lease history's command references that PostgreSQL no longer keeps as a foreign key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fencepost.core.errors import Conflict
from fencepost.store import Store
from fencepost.store.audit import audit_store
from helpers.store_backends import store_backend


def _raw(store: Store, sql: str) -> list[tuple[Any, ...]]:
    def write(tx: Any) -> list[tuple[Any, ...]]:
        return list(tx.execute_raw(sql))

    return store.transact(write)


def _one_command(store: Store) -> None:
    store.transact(lambda tx: tx.outbox.insert(command_id="c1", kind="k.a", payload={"n": 1}))


def test_a_payload_that_is_not_json_is_refused_on_insert_and_on_update(store: Store) -> None:
    _one_command(store)
    with pytest.raises(Conflict, match=r"commands_payload_check|CHECK constraint failed"):
        _raw(store, "UPDATE commands SET payload = 'not json' WHERE id = 'c1'")
    with pytest.raises(Conflict, match=r"commands_payload_check|CHECK constraint failed"):
        _raw(store, "INSERT INTO commands (id, kind, payload, status, available_at, created_at, updated_at) "
                    "SELECT 'c2', kind, '{broken', status, available_at, created_at, updated_at FROM commands")
    assert store.read(lambda tx: tx.outbox.get("c1")).payload == {"n": 1}  # type: ignore[union-attr]


def test_only_an_update_naming_the_payload_checks_it(pg_backend: Any) -> None:
    """A row whose stored payload the trigger would refuse (written while it was disabled): an UPDATE naming
    the payload is refused, one that does not (as every claim, heartbeat and completion) is not checked."""
    store: Store = pg_backend.migrated()
    _one_command(store)
    _raw(store, "ALTER TABLE commands DISABLE TRIGGER commands_payload_is_json")
    _raw(store, "UPDATE commands SET payload = '[1' WHERE id = 'c1'")  # stored invalid, the check off
    _raw(store, "ALTER TABLE commands ENABLE TRIGGER commands_payload_is_json")
    with pytest.raises(Conflict, match="commands_payload_check"):
        _raw(store, "UPDATE commands SET payload = payload WHERE id = 'c1'")  # naming it runs the check
    changed = _raw(store, "UPDATE commands SET available_at = available_at, status = 'PENDING' "
                          "WHERE id = 'c1' RETURNING id")
    assert changed == [("c1",)]  # an UPDATE that does not name the payload does not run it


def test_the_audit_reports_a_lease_event_of_an_unknown_command(pg_backend: Any) -> None:
    store: Store = pg_backend.migrated()
    _one_command(store)
    assert audit_store(store) == []
    _raw(store, "INSERT INTO lease_events (command_id, event, owner, delivery, at) "
                "VALUES ('nobody', 'claim', 'w1', 1, clock_timestamp())")
    found = [(f.check, f.detail) for f in audit_store(store)]
    assert found == [("lease_events_of_unknown_commands", "claim of unknown command nobody")]


def test_sqlite_still_refuses_a_lease_event_of_an_unknown_command(tmp_path: Path) -> None:
    with store_backend("sqlite-wal", tmp_path) as backend:
        store = backend.migrated()
        with pytest.raises(Conflict):
            _raw(store, "INSERT INTO lease_events (command_id, event, owner, delivery, at) "
                        "VALUES ('nobody', 'claim', 'w1', 1, '2026-01-01T00:00:00.000000Z')")


def test_the_payload_check_does_not_depend_on_the_writers_search_path(pg_backend: Any) -> None:
    """The CHECK it replaced named its function by OID; the trigger must not resolve a name through the
    writer's search_path: a write naming the schema from another search_path is checked the same way
    (an operator's psql, an application's connection), neither refused for an unknown function nor let
    through by a look-alike function of another schema."""
    import psycopg
    from psycopg import sql

    from helpers.store_backends import admin_connect

    store: Store = pg_backend.migrated()
    _one_command(store)
    insert = sql.SQL("INSERT INTO {}.commands (id, kind, payload, status, available_at, created_at, updated_at) "
                     "SELECT %s, kind, %s, status, available_at, created_at, updated_at FROM {}.commands "
                     "WHERE id = 'c1'").format(sql.Identifier(pg_backend.schema), sql.Identifier(pg_backend.schema))
    with admin_connect() as conn:
        conn.execute("SET search_path TO public")
        conn.execute(insert, ("c2", '{"n": 2}'))  # valid JSON is accepted
        with pytest.raises(psycopg.errors.CheckViolation, match="commands_payload_check"):
            conn.execute(insert, ("c3", "not json"))
    assert store.read(lambda tx: tx.outbox.get("c2")).payload == {"n": 2}  # type: ignore[union-attr]


# ── migration 0013 (ADR 0094): a command's payload is a JSON object ──

@pytest.mark.parametrize("value", ["[1]", "3", '"text"', "null"])
def test_a_payload_that_is_json_but_not_an_object_is_refused_on_insert_and_on_update(store: Store, value: str) -> None:
    """Found by a break-it trial: a stored list made every worker that claimed the command fail and exit."""
    _one_command(store)
    with pytest.raises(Conflict, match=r"commands_payload_check|commands_payload_is_an_object"):
        _raw(store, f"UPDATE commands SET payload = '{value}' WHERE id = 'c1'")
    with pytest.raises(Conflict, match=r"commands_payload_check|commands_payload_is_an_object"):
        _raw(store, "INSERT INTO commands (id, kind, payload, status, available_at, created_at, updated_at) "
                    f"SELECT 'c2', kind, '{value}', status, available_at, created_at, updated_at FROM commands")
    _raw(store, "UPDATE commands SET payload = '{\"n\": 2}' WHERE id = 'c1'")  # an object is still accepted
    assert store.read(lambda tx: (tx.outbox.get("c1").payload, tx.outbox.get("c2"))) == (  # type: ignore[union-attr]
        {"n": 2}, None)


def test_the_audit_reports_a_claimable_command_whose_payload_is_not_an_object(store: Store) -> None:
    _one_command(store)
    store.transact(lambda tx: tx.outbox.insert(command_id="c2", kind="k.a", payload={"n": 2}))
    assert audit_store(store) == []
    # Written with the checks off, as a database restored from before migration 0013 may hold it.
    postgres = store.backend == "postgres"
    _raw(store, "ALTER TABLE commands DISABLE TRIGGER commands_payload_is_json" if postgres
         else "DROP TRIGGER commands_payload_is_an_object_on_update")
    _raw(store, "UPDATE commands SET payload = '[1]' WHERE id = 'c1'")
    if postgres:
        _raw(store, "UPDATE commands SET payload = 'not json' WHERE id = 'c2'")
        _raw(store, "ALTER TABLE commands ENABLE TRIGGER commands_payload_is_json")
    found = sorted((f.check, f.subject, f.detail) for f in audit_store(store))
    expected = [("claimable_payload_not_an_object", "c1", "PENDING command payload is not a JSON object")]
    if postgres:
        expected.append(("claimable_payload_not_an_object", "c2", "PENDING command payload is not a JSON object"))
    assert found == expected
