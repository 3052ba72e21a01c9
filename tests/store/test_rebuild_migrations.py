"""Rebuilding migrations (ADR 0017): widening a CHECK list of a table that other tables reference.

The subject is ``workflow_events``: ``workflow_admission_steps.event_id`` references it, and workflow
execution will widen its ``type`` list. Every database is populated through the services first: a
rehearsal Run with an Attempt (commands, receipts, lease history), a published and installed package, and
two admitted plans, whose admission steps reference the events.

- SQLite (WAL and DELETE journals): a test-only ``-- fencepost: foreign-keys-off`` migration runs the
  12-step rebuild. Every row of every table survives unchanged, rowids included. Foreign keys are on
  afterwards and still enforced. The widened value is accepted and an illegal one still refused. The
  same statements through the plain path fail with ``FOREIGN KEY constraint failed``, with or without
  ``defer_foreign_keys``. That failure is why the marker exists. A rebuild that would leave dangling
  references, or that forgets a view, is rolled back with foreign keys on again.
- PostgreSQL: the same widening is an ordinary migration, ``ALTER TABLE ... DROP CONSTRAINT ...,
  ADD CONSTRAINT ...``.
- The shipped 0006 (ADR 0034) needs no rebuild: on every backend, a database populated at version 5 keeps every
  row, its invocations gain six NULL handoff columns, and the new CHECKs hold.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fencepost.catalog.lifecycle import CatalogService
from fencepost.core.errors import Conflict, SchemaNotReady
from fencepost.core.statuses import InvocationStatus
from fencepost.rehearsal.service import RehearsalService, release_gate
from fencepost.store import Store
from fencepost.store.base import MigrationStep
from fencepost.store.migrations import load_migrations
from fencepost.store.sqlite.migrate import FOREIGN_KEYS_OFF, apply_migrations, rebuilds
from fencepost.store.sqlite.store import SQLiteStore
from fencepost.testing import host as host_contract
from fencepost.workflows.service import WorkflowService
from helpers.store_backends import (
    BackendUnreachable,
    StoreBackend,
    selected_backends,
    store_backend,
)
from helpers.store_reads import raw

SHIPPED = len(load_migrations("fencepost.store.sqlite"))
NEXT = SHIPPED + 1
NOW = "'2026-01-01T00:00:00.000000Z'"

# The shipped workflow_events table with 'step.started' added to the type list (and to the step-bound check).
_NEW_EVENTS = """CREATE TABLE new_workflow_events (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    step_run_id TEXT REFERENCES workflow_step_runs (id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    type        TEXT NOT NULL CHECK (type IN ('workflow.admitted', 'step.created', 'step.started')),
    payload     TEXT NOT NULL CHECK (json_valid(payload) AND length(payload) <= 65536),
    created_at  TEXT NOT NULL,
    UNIQUE (run_id, seq),
    CHECK ((type IN ('step.created', 'step.started')) = (step_run_id IS NOT NULL)),
    CHECK (json_extract(payload, '$.run_id') IS run_id)
);
"""
_COLUMNS = "rowid, id, run_id, step_run_id, seq, type, payload, created_at"
_SWAP = """DROP TABLE workflow_events;
ALTER TABLE new_workflow_events RENAME TO workflow_events;
"""
WIDEN_BODY = (f"{_NEW_EVENTS}INSERT INTO new_workflow_events ({_COLUMNS})\n"
              f"    SELECT {_COLUMNS} FROM workflow_events;\n{_SWAP}")
WIDEN = f"{FOREIGN_KEYS_OFF}\n-- test only: widen workflow_events.type by 'step.started'\n{WIDEN_BODY}"
# Copies only the workflow.admitted events: the step.created events the admission steps reference vanish.
DANGLING = (f"{FOREIGN_KEYS_OFF}\n{_NEW_EVENTS}INSERT INTO new_workflow_events ({_COLUMNS})\n"
            f"    SELECT {_COLUMNS} FROM workflow_events WHERE type = 'workflow.admitted';\n{_SWAP}")

# PostgreSQL names the unnamed CHECKs of 0002: the column one <table>_<column>_check, the table ones
# <table>_check, <table>_check1 in order.
WIDEN_POSTGRES = """-- test only: widen workflow_events.type by 'step.started'
ALTER TABLE workflow_events
    DROP CONSTRAINT workflow_events_type_check,
    ADD CONSTRAINT workflow_events_type_check
        CHECK (type IN ('workflow.admitted', 'step.created', 'step.started')),
    DROP CONSTRAINT workflow_events_check,
    ADD CONSTRAINT workflow_events_check CHECK ((type IN ('step.created', 'step.started')) = (step_run_id IS NOT NULL));
"""


def step(sql: str, version: int = NEXT, name: str = "widen_event_types") -> MigrationStep:
    return MigrationStep(version=version, name=name, sql=sql,
                         checksum=hashlib.sha256(sql.encode("utf-8")).hexdigest())


def migrate_with(store: SQLiteStore, *extra: MigrationStep) -> list[MigrationStep]:
    """The runner on the shipped migrations plus ``extra`` (driver errors untranslated)."""
    return apply_migrations(store.connection(), [*store.migrations(), *extra], now=store.clock.now)


# ── a populated database ──
def write_package(root: Path) -> Path:
    """The package ``pair`` 1.0.0: one migration, tasks ``extract`` and ``load``, workflow ``pipeline``."""
    directory = root / "pair-1.0.0"
    (directory / "migrations").mkdir(parents=True)
    (directory / "tasks").mkdir()
    (directory / "migrations" / "0001_t.up.sql").write_text(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, label TEXT NOT NULL);\n", encoding="utf-8")
    (directory / "migrations" / "0001_t.down.sql").write_text("DROP TABLE t;\n", encoding="utf-8")
    (directory / "tasks" / "extract.sql").write_text("SELECT 1;\n", encoding="utf-8")
    (directory / "tasks" / "load.sql").write_text("SELECT 2;\n", encoding="utf-8")
    (directory / "fencepost-package.toml").write_text(
        '[package]\nname = "pair"\nversion = "1.0.0"\n\n'
        '[[tasks]]\nid = "extract"\nsource = "tasks/extract.sql"\n\n'
        '[[tasks]]\nid = "load"\nsource = "tasks/load.sql"\n\n'
        '[[workflows]]\nid = "pipeline"\nsteps = [\n'
        '    { key = "extract", task = "extract" },\n'
        '    { key = "load", task = "load", needs = ["extract"] },\n]\n', encoding="utf-8")
    return directory


def populate(store: Store, root: Path) -> None:
    """Real rows through the services, in the tables that reference workflow_events and many others."""
    package = write_package(root)
    rehearsal = RehearsalService(store)
    run = rehearsal.create_run(package)
    rehearsal.enqueue_attempt(run.id)
    rehearsal.abort(rehearsal.enqueue_attempt(run.id).id)
    catalog = CatalogService(store, release_gate=release_gate)
    catalog.publish(package, allow_ungated=True)
    catalog.install("pair")
    workflows = WorkflowService(store)
    for plan_id in ("p1", "p2"):
        workflows.admit(_plan(store, plan_id))


def _plan(store: Store, plan_id: str) -> dict[str, Any]:
    """The plan ``WorkflowService.plan`` builds, without a target: the stores these tests populate may predate
    delivery targets (schema 9), which the service reads to pick one."""
    publication = store.read(lambda tx: tx.catalog.all_publications())[0]
    installation = store.read(lambda tx: tx.catalog.get_installation("pair"))
    assert installation is not None
    workflow = publication.definition["workflows"]["pipeline"]
    tasks = publication.definition["tasks"]
    return {"format": 1, "plan_id": plan_id, "package": "pair", "publication_id": publication.id,
            "installation_id": installation.id, "lock": installation.lock_digest, "workflow_id": "pipeline",
            "workflow_digest": workflow["digest"], "inputs": {},
            "steps": [{"key": s["key"], "task": s["task"], "task_digest": tasks[s["task"]]["digest"],
                       "needs": s["needs"]} for s in workflow["steps"]]}


def sqlite_tables(store: Store) -> list[str]:
    return [r[0] for r in store.read(lambda tx: raw(
        tx, "SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'fencepost_schema' ORDER BY name"))]


def sqlite_contents(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but the migration ledger, with its rowid."""
    tables = sqlite_tables(store)
    return store.read(lambda tx: {t: raw(tx, f"SELECT rowid, * FROM {t} ORDER BY rowid") for t in tables})


def sqlite_schema(store: Store) -> list[tuple[Any, ...]]:
    return store.read(lambda tx: raw(tx, "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"))


def pragma(store: SQLiteStore, name: str) -> int:
    return int(store.connection().execute(f"PRAGMA {name}").fetchone()[0])


def write(store: Store, sql: str) -> None:
    with store.transaction() as tx:
        raw(tx, sql)


def event_insert(event_id: str, seq: int, event_type: str) -> str:
    """A step-bound event on the first StepRun of plan p1 (run and payload consistent)."""
    return ("INSERT INTO workflow_events (id, run_id, step_run_id, seq, type, payload, created_at) "
            f"SELECT '{event_id}', r.id, s.id, {seq}, '{event_type}', '{{\"run_id\":\"' || r.id || '\"}}', {NOW} "
            "FROM workflow_runs r JOIN workflow_step_runs s ON s.run_id = r.id "
            "WHERE r.plan_id = 'p1' ORDER BY s.step_key LIMIT 1")


def assert_references_enforced(store: Store) -> None:
    """A referenced event cannot be deleted: the admission steps' foreign key resolves and is enforced."""
    with pytest.raises(Conflict, match="FOREIGN KEY"):
        write(store, "DELETE FROM workflow_events WHERE id IN (SELECT event_id FROM workflow_admission_steps)")


# ── SQLite: both journal modes ──
def _sqlite_params() -> list[str]:
    return [name for name in ("sqlite-wal", "sqlite-delete") if name in selected_backends()]


@pytest.fixture(params=_sqlite_params())
def sqlite_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    with store_backend(str(request.param), tmp_path) as backend:
        yield backend


@pytest.fixture
def populated(sqlite_backend: StoreBackend, tmp_path: Path) -> SQLiteStore:
    store = sqlite_backend.migrated()
    assert isinstance(store, SQLiteStore)
    populate(store, tmp_path / "packages")
    contents = sqlite_contents(store)
    for table in ("workflow_events", "workflow_admission_steps", "commands", "lease_events", "rehearsal_receipts"):
        assert contents[table], f"{table} was not populated"
    return store


def test_rebuild_widens_the_check_list_of_a_referenced_table_and_keeps_every_row(populated: SQLiteStore) -> None:
    store = populated
    before, schema_before = sqlite_contents(store), sqlite_schema(store)

    applied = migrate_with(store, step(WIDEN))

    assert [s.version for s in applied] == [NEXT]
    ledger = store.read(lambda tx: raw(tx, f"SELECT name, checksum FROM fencepost_schema WHERE version = {NEXT}"))
    assert ledger == [("widen_event_types", step(WIDEN).checksum)]
    assert store.schema_version() == NEXT
    assert sqlite_contents(store) == before
    changed = {row[1] for row in set(sqlite_schema(store)) ^ set(schema_before)}
    assert changed == {"workflow_events"}
    # the rename stores the name quoted: schema.sql must spell a rebuilt table that way (ADR 0017)
    definition = store.read(lambda tx: raw(tx, "SELECT sql FROM sqlite_master WHERE name = 'workflow_events'"))
    assert str(definition[0][0]).startswith('CREATE TABLE "workflow_events" (')
    assert "'step.started'" in str(definition[0][0])
    assert pragma(store, "foreign_keys") == 1
    assert pragma(store, "legacy_alter_table") == 0
    assert store.read(lambda tx: raw(tx, "PRAGMA foreign_key_check")) == []
    assert store.physical_checks() == []
    # widened, still closed, and still referenced
    write(store, event_insert("evt_started", 100, "step.started"))
    with pytest.raises(Conflict, match="CHECK"):
        write(store, event_insert("evt_finished", 101, "workflow.finished"))
    assert_references_enforced(store)
    # applied once: a second run has nothing to do
    assert migrate_with(store, step(WIDEN)) == []


@pytest.mark.parametrize("defer", [False, True], ids=["plain", "defer_foreign_keys"])
def test_the_same_rebuild_without_the_marker_fails_on_the_foreign_key(populated: SQLiteStore, defer: bool) -> None:
    store = populated
    before, schema_before = sqlite_contents(store), sqlite_schema(store)
    sql = ("PRAGMA defer_foreign_keys = ON;\n" if defer else "") + WIDEN_BODY
    assert not rebuilds(step(sql))

    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
        migrate_with(store, step(sql))

    assert store.schema_version() == SHIPPED
    assert (sqlite_contents(store), sqlite_schema(store)) == (before, schema_before)
    assert not store.connection().in_transaction


def test_a_rebuild_that_would_leave_dangling_references_is_rolled_back(populated: SQLiteStore) -> None:
    store = populated
    before, schema_before = sqlite_contents(store), sqlite_schema(store)

    with pytest.raises(SchemaNotReady) as refused:
        migrate_with(store, step(DANGLING, name="drop_step_events"))

    message = str(refused.value)
    assert f"{NEXT:04d}_drop_step_events" in message
    assert "of workflow_admission_steps reference missing workflow_events rows" in message
    assert "rolled back" in message
    assert store.schema_version() == SHIPPED
    assert (sqlite_contents(store), sqlite_schema(store)) == (before, schema_before)
    assert pragma(store, "foreign_keys") == 1
    assert not store.connection().in_transaction
    assert_references_enforced(store)
    # the connection is fine: the correct rebuild applies next
    assert [s.version for s in migrate_with(store, step(WIDEN))] == [NEXT]


def test_a_view_on_the_rebuilt_table_must_be_dropped_and_recreated(populated: SQLiteStore) -> None:
    store = populated
    view = step("CREATE VIEW event_types AS SELECT DISTINCT type FROM workflow_events;\n", name="event_view")
    assert [s.version for s in migrate_with(store, view)] == [NEXT]
    schema_before = sqlite_schema(store)
    # legacy_alter_table=ON would let the rename leave the view broken; the runner turns it off for the step
    store.connection().execute("PRAGMA legacy_alter_table = ON")

    with pytest.raises(sqlite3.OperationalError, match="error in view event_types"):
        migrate_with(store, view, step(WIDEN, version=NEXT + 1))

    assert store.schema_version() == NEXT
    assert sqlite_schema(store) == schema_before
    assert (pragma(store, "foreign_keys"), pragma(store, "legacy_alter_table")) == (1, 1)
    store.connection().execute("PRAGMA legacy_alter_table = OFF")
    fixed = (f"{FOREIGN_KEYS_OFF}\nDROP VIEW event_types;\n{WIDEN_BODY}"
             "CREATE VIEW event_types AS SELECT DISTINCT type FROM workflow_events;\n")
    assert [s.version for s in migrate_with(store, view, step(fixed, version=NEXT + 1))] == [NEXT + 1]
    assert sorted(r[0] for r in store.read(lambda tx: raw(tx, "SELECT type FROM event_types"))) == [
        "step.created", "workflow.admitted"]


def test_concurrent_runs_apply_the_rebuild_once(sqlite_backend: StoreBackend, populated: SQLiteStore) -> None:
    before = sqlite_contents(populated)
    stores = [sqlite_backend.open() for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    applied: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(store: Store) -> None:
        try:
            assert isinstance(store, SQLiteStore)
            barrier.wait()
            steps = migrate_with(store, step(WIDEN))
            with lock:
                applied.extend(s.version for s in steps)
            assert pragma(store, "foreign_keys") == 1
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert applied == [NEXT]
    assert sqlite_contents(populated) == before


# ── the marker ──
@pytest.mark.parametrize(("sql", "needle"), [
    (f"-- widen\n{FOREIGN_KEYS_OFF}\n{WIDEN_BODY}", "misplaced directive"),
    (f"-- fencepost: fk-off\n{WIDEN_BODY}", "unknown or misplaced directive"),
    (f"{FOREIGN_KEYS_OFF}\nPRAGMA foreign_keys = OFF;\n{WIDEN_BODY}", "sets a pragma the runner sets"),
    (f"{FOREIGN_KEYS_OFF}\nPRAGMA legacy_alter_table = ON;\n{WIDEN_BODY}", "sets a pragma the runner sets"),
    (f"{FOREIGN_KEYS_OFF}\nBEGIN;\n{WIDEN_BODY}COMMIT;\n", "runs BEGIN"),
    ("CREATE TABLE x (id INTEGER);\n-- done\nCOMMIT;\n", "runs COMMIT"),
], ids=["marker-not-first", "unknown-directive", "foreign-keys-pragma", "legacy-pragma", "begin", "commit"])
def test_malformed_migrations_are_refused_before_anything_is_applied(
        populated: SQLiteStore, sql: str, needle: str) -> None:
    store = populated
    schema_before = sqlite_schema(store)
    good = step("CREATE TABLE extra (id INTEGER PRIMARY KEY);\n", name="extra")
    with pytest.raises(ValueError, match=needle):
        migrate_with(store, good, step(sql, version=NEXT + 1, name="bad"))
    assert store.schema_version() == SHIPPED
    assert sqlite_schema(store) == schema_before


def test_the_marker_is_the_exact_first_line_and_only_0004_and_0010_of_the_shipped_migrations_rebuild() -> None:
    assert rebuilds(step(WIDEN))
    assert rebuilds(step("\ufeff" + WIDEN))
    assert not rebuilds(step(WIDEN_BODY))
    # 0004 rebuilds ``commands`` to admit an inline caller's lease at delivery 0 (ADR 0022); 0010 rebuilds the
    # workflow tables to widen their status, type and kind lists (ADR 0072).
    assert {s.version for s in load_migrations("fencepost.store.sqlite") if rebuilds(s)} == {4, 10}


# ── PostgreSQL: an ordinary migration ──
def postgres_contents(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    tables = [r[0] for r in store.read(lambda tx: raw(
        tx, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE' AND table_name <> 'fencepost_schema' ORDER BY 1"))]
    return store.read(lambda tx: {t: raw(tx, f"SELECT * FROM {t} ORDER BY {t}::text") for t in tables})


def test_postgres_widens_the_check_list_with_alter_constraint_in_an_ordinary_migration(
        pg_backend: StoreBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        store = pg_backend.migrated()
    except BackendUnreachable as error:  # pragma: no cover - the fixture fails first
        pytest.fail(str(error))
    populate(store, tmp_path / "packages")
    before = postgres_contents(store)
    assert before["workflow_events"] and before["workflow_admission_steps"]
    shipped = store.migrations()
    widen = step(WIDEN_POSTGRES, version=len(shipped) + 1)
    monkeypatch.setattr(store, "migrations", lambda: [*shipped, widen])

    assert [s.version for s in store.migrate()] == [widen.version]

    assert store.schema_version() == widen.version
    assert postgres_contents(store) == before
    checks = dict(store.read(lambda tx: raw(
        tx, "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = 'workflow_events'::regclass AND contype = 'c'")))
    assert "step.started" in checks["workflow_events_type_check"]
    assert "step.started" in checks["workflow_events_check"]
    write(store, event_insert("evt_started", 100, "step.started").replace(NOW, "now()"))
    with pytest.raises(Conflict, match="check"):
        write(store, event_insert("evt_finished", 101, "workflow.finished").replace(NOW, "now()"))
    with pytest.raises(Conflict, match="foreign key"):
        write(store, "DELETE FROM workflow_events WHERE id IN (SELECT event_id FROM workflow_admission_steps)")
    assert store.migrate() == []


def test_shipped_0004_rebuilds_commands_keeping_every_row_and_admits_delivery_zero_only_for_host_invocations(
        sqlite_backend: StoreBackend, tmp_path: Path) -> None:
    store = sqlite_backend.open()
    assert isinstance(store, SQLiteStore)
    shipped = store.migrations()
    apply_migrations(store.connection(), shipped[:3], now=store.clock.now)
    assert store.schema_version() == 3
    populate(store, tmp_path / "packages")
    before = sqlite_contents(store)
    assert before["commands"] and before["lease_events"]

    assert [s.version for s in apply_migrations(store.connection(), shipped[:4], now=store.clock.now)] == [4]

    after = sqlite_contents(store)
    assert {table: after[table] for table in before} == before
    assert store.read(lambda tx: raw(tx, "PRAGMA foreign_key_check")) == [] and store.physical_checks() == []
    assert pragma(store, "foreign_keys") == 1
    assert_references_enforced(store)
    store.transact(lambda tx: tx.outbox.insert_leased(command_id="inv_1", kind="host.invoke:shop.charge@1", payload={},
                                                      owner="caller", lease_seconds=30))
    with pytest.raises(Conflict, match="CHECK"):
        store.transact(lambda tx: tx.outbox.insert_leased(command_id="c_1", kind="other", payload={},
                                                          owner="caller", lease_seconds=30))


# ── 0006: the handoff columns, added to a populated database without a rebuild (ADR 0034) ──
def test_shipped_0006_adds_the_handoff_columns_to_existing_invocations(
        backend: StoreBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = backend.open()
    shipped = [step for step in store.migrations() if step.version <= 6]  # later migrations are tested on their own
    assert [s.version for s in shipped][-1] == 6 and not rebuilds(shipped[5])
    monkeypatch.setattr(store, "migrations", lambda: shipped[:5])
    store.migrate()
    assert store.schema_version() == 5
    populate(store, tmp_path / "packages")
    # an invocation with an adapter row and a reconciliation entry, both referencing it, written at version 5
    lease = host_contract.running(store, "inv_old", 600)
    assert host_contract.create(store, "inv_old", lease, "ai_old")
    assert host_contract.append(store, host_contract.reconciliation("rc_old", "inv_old",
                                                                    adapter_invocation_id="ai_old"))
    contents = postgres_contents if store.backend == "postgres" else sqlite_contents
    before = contents(store)
    assert before["invocations"] and before["adapter_invocations"] and before["host_reconciliations"]

    monkeypatch.setattr(store, "migrations", lambda: shipped)
    assert [s.version for s in store.migrate()] == [6]

    after = contents(store)
    assert {t: rows for t, rows in after.items() if t != "invocations"} == {
        t: rows for t, rows in before.items() if t != "invocations"}
    # every old invocation row keeps its values, and has no handoff
    assert [row[:-6] for row in after["invocations"]] == before["invocations"]
    assert [row[-6:] for row in after["invocations"]] == [(None,) * 6]
    # The ports read the row once the later migrations are applied too (they read the columns those add).
    monkeypatch.undo()
    assert [s.version for s in store.migrate()] == list(range(7, store.expected_version + 1))
    got = host_contract.invocation(store, "inv_old")
    assert (got.status, got.handoff_provider, got.handoff_reference, got.completion_due_at, got.parked_at,
            got.overdue_at, got.external_completion) == (InvocationStatus.RUNNING, None, None, None, None, None, None)
    # the old row takes a handoff under its lease, and the new CHECKs hold for it
    assert host_contract.hand_off(store, "inv_old", lease, host_contract.handoff("po_old"))
    with pytest.raises(Conflict):
        write(store, "UPDATE invocations SET handoff_provider = NULL WHERE id = 'inv_old'")
    assert store.migrate() == []
