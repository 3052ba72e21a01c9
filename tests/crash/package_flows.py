"""Crash windows of the package catalog: the six ``package.*`` transactions of ``fencepost.catalog.lifecycle``.

Each transaction is reached through its real CLI command (``fencepost package publish|withdraw|install|
disable|quarantine|release-quarantine``), started with ``FENCEPOST_CRASHPOINT`` armed on one side of its
COMMIT. ``run_package_flow`` then checks:

1. the command died of SIGKILL and printed no answer (``crash_harness.cli``);
2. right after the crash, ``fencepost audit``'s checks (the admissions' audit recomputes every publication
   digest and installation lock) are clean, and the durable state is exactly the predicted one: before
   COMMIT every row of every catalog table is as it was (nothing persisted); after COMMIT the catalog is
   exactly the crash-free reference's (everything persisted);
3. the operator runs the same command again. Before COMMIT it now succeeds as a first run would. After COMMIT
   the durable winner answers: ``publish`` says ``existing``, ``disable`` and ``quarantine`` answer with the
   state already there, ``withdraw`` and ``release-quarantine`` are refused as conflicts (exit 3) because
   the state they ask for is already there; in each case no catalog row changes (``install`` excepted: every
   install is an activation request and bumps the installation's generation, the same publication and lock
   kept; like ``rehearsal attempt``, the operator looks first with ``package show``);
4. afterwards ``fencepost audit`` (the CLI) exits 0 and the catalog equals the crash-free reference (the
   publication exists once, the head at the expected revision, installation, disposition and quarantine as
   in the reference run).

Every flow starts from one prepared control database (migrated, versions 1.0.0 and 2.0.0 of the ``shelf``
package rehearsed with passing release gates): on SQLite it is prepared once per module and copied for each
test; on PostgreSQL (soak) each test prepares its own schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from crash_harness import CrashDB, assert_cli_audit_clean, assert_sound, cli, crash_db

from fencepost.catalog.lifecycle import CatalogService
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.rehearsal.handler import KIND, AttemptHandler
from fencepost.rehearsal.service import release_gate
from fencepost.store.ports import UnitOfWork
from helpers.store_backends import BackendUnreachable

PACKAGE = "shelf"
VERSIONS = ("1.0.0", "2.0.0")
QUARANTINE_REASON = "lock under investigation"
PACKAGE_TABLES = ("package_publications", "package_heads", "package_installations", "installation_dispositions",
                  "installation_quarantines")
# Tables no package transaction writes: their row counts must not move either.
OTHER_TABLES = ("rehearsal_runs", "rehearsal_attempts", "rehearsal_receipts", "commands", "lease_events",
                "workflow_runs", "workflow_admissions")


@dataclass(frozen=True)
class PackageFlow:
    """One ``package.*`` transaction, the state it starts from and what each answer must say.

    Attributes:
        transaction: the transaction name (crash points ``<transaction>:<before|after>-commit``).
        setup: in-process steps before the subject, in order: ``publish 1.0.0``, ``install``,
            ``publish 2.0.0``, ``quarantine``.
        argv: the subject command (``{v2}`` stands for version 2.0.0's package directory).
        answer: keys the JSON answer of a first successful run must have, with these values (``a.b``: key
            ``b`` of the object at ``a``).
        retry_code: exit code of the same command run again after a crash after COMMIT (0 or 3, conflict).
        retry_answer: keys its JSON answer must have when it exits 0; with exit 3, ``error`` is what its one
            stderr line must contain.
        retry_rewrites: catalog columns that run again legitimately rewrites (``table.column``); every other
            catalog value must stay as the crash left it.
        retry_generation: how much running it again moves the installation's generation.
    """

    transaction: str
    setup: tuple[str, ...]
    argv: tuple[str, ...]
    answer: dict[str, Any]
    retry_code: int
    retry_answer: dict[str, Any] = field(default_factory=dict)
    retry_rewrites: frozenset[str] = frozenset()
    retry_generation: int = 0


FLOWS: dict[str, PackageFlow] = {flow.transaction: flow for flow in (
    # Publish 2.0.0 over 1.0.0: the publication, with its gate, and the head moved to revision 2 together.
    PackageFlow("package.publish", ("publish 1.0.0", "install"), ("package", "publish", "{v2}", "--json"),
                {"outcome": "created", "publication.version": "2.0.0", "publication.gate": "passed"}, 0,
                {"outcome": "existing", "publication.version": "2.0.0", "publication.gate": "passed"}),
    # Withdraw the installed 1.0.0 (the head is at 2.0.0).
    PackageFlow("package.withdraw", ("publish 1.0.0", "install", "publish 2.0.0"),
                ("package", "withdraw", PACKAGE, "1.0.0", "--json"), {"status": "withdrawn", "version": "1.0.0"}, 3,
                {"error": "is already withdrawn"}),
    # Install the head (2.0.0) over the installation of 1.0.0: compare-and-set on the generation.
    PackageFlow("package.install", ("publish 1.0.0", "install", "publish 2.0.0"),
                ("package", "install", PACKAGE, "--json"), {"generation": 2, "status": "active"}, 0,
                {"generation": 3, "status": "active"},
                frozenset({"package_installations.generation", "package_installations.updated_at"}), 1),
    # Disable the installation (lifecycle disposition): an upsert, so running it again rewrites its instant.
    PackageFlow("package.disposition", ("publish 1.0.0", "install"),
                ("package", "disable", PACKAGE, "--reason", "maintenance window", "--json"),
                {"disposition": "disabled"}, 0, {"disposition": "disabled"},
                frozenset({"installation_dispositions.updated_at"})),
    # Quarantine the exact installation and lock: running it again finds the open quarantine.
    PackageFlow("package.quarantine", ("publish 1.0.0", "install"),
                ("package", "quarantine", PACKAGE, "--reason", QUARANTINE_REASON, "--json"),
                {"reason": QUARANTINE_REASON}, 0, {"reason": QUARANTINE_REASON}),
    # Release that quarantine: running it again finds none open at the current lock (conflict).
    PackageFlow("package.release_quarantine", ("publish 1.0.0", "install", "quarantine"),
                ("package", "release-quarantine", PACKAGE, "--reason", "lock verified", "--json"),
                {"released": True}, 3, {"error": "is not quarantined at its current lock"}),
)}

WINDOWS: tuple[str, ...] = tuple(f"{transaction}:{side}-commit" for transaction in FLOWS
                                 for side in ("before", "after"))


def shelf_package(root: Path, version: str) -> Path:
    """Version ``version`` of ``shelf``: one migration (with its down file), a seed, a task and a workflow;
    each version seeds other rows, so each has its own content digest."""
    directory = root / f"{PACKAGE}-{version}"
    for folder in ("migrations", "seed", "tasks"):
        (directory / folder).mkdir(parents=True, exist_ok=True)
    (directory / "migrations" / "0001_shelf.up.sql").write_text(
        "CREATE TABLE shelf (id INTEGER PRIMARY KEY, label TEXT NOT NULL, n INTEGER NOT NULL);\n", encoding="utf-8")
    (directory / "migrations" / "0001_shelf.down.sql").write_text("DROP TABLE shelf;\n", encoding="utf-8")
    (directory / "seed" / "seed.sql").write_text(
        f"INSERT INTO shelf (label, n) VALUES ('bolts {version}', 10), ('nuts {version}', 20);\n", encoding="utf-8")
    (directory / "tasks" / "restock.sql").write_text("UPDATE shelf SET n = n + 1;\n", encoding="utf-8")
    (directory / "fencepost-package.toml").write_text(
        f'[package]\nname = "{PACKAGE}"\nversion = "{version}"\nmigrations_dir = "migrations"\n'
        'seed = ["seed/seed.sql"]\n\n[[tasks]]\nid = "restock"\nsource = "tasks/restock.sql"\n\n'
        '[[workflows]]\nid = "nightly"\nsteps = [{ key = "restock", task = "restock" }]\n', encoding="utf-8")
    return directory


# ── reading the catalog ──
def _raw(tx: UnitOfWork, query: str) -> list[tuple[Any, ...]]:
    """Parameterless SQL through the backend's test-only ``execute_raw``."""
    return cast(list[tuple[Any, ...]], cast(Any, tx).execute_raw(query))


def catalog_rows(db: CrashDB) -> dict[str, Any]:
    """Every row of every catalog table, as ``{table: [{column: value}]}``, plus the row counts of the tables
    no package transaction writes: the exact durable state, to compare within one database."""
    def unit(tx: UnitOfWork) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for table in PACKAGE_TABLES:
            if db.name == "postgres":
                columns = [str(r[0]) for r in _raw(tx, "SELECT column_name FROM information_schema.columns WHERE "
                                                       f"table_schema = current_schema() AND table_name = '{table}' "
                                                       "ORDER BY ordinal_position")]
            else:
                columns = [str(r[0]) for r in _raw(tx, f"SELECT name FROM pragma_table_info('{table}') ORDER BY cid")]
            assert columns, f"no columns found for {table}"
            rows = _raw(tx, f"SELECT {', '.join(columns)} FROM {table} ORDER BY 1")
            found[table] = [dict(zip(columns, row, strict=True)) for row in rows]
        found["counts"] = {t: int(_raw(tx, f"SELECT count(*) FROM {t}")[0][0]) for t in OTHER_TABLES}
        return found

    return db.store.read(unit)


def without(rows: dict[str, Any], columns: frozenset[str]) -> dict[str, Any]:
    """``catalog_rows`` without the ``table.column`` values named in ``columns``."""
    return {table: value if table == "counts" else
            [{c: v for c, v in row.items() if f"{table}.{c}" not in columns} for row in value]
            for table, value in rows.items()}


def catalog_state(db: CrashDB) -> dict[str, Any]:
    """The catalog as an operator sees it, comparable across databases: publications by version, the head,
    the installation, disposition and quarantines (no ids, no instants), and the row count of every table."""
    def unit(tx: UnitOfWork) -> dict[str, Any]:
        publications = tx.catalog.list_publications(PACKAGE)
        version = {p.id: p.version for p in publications}
        head = tx.catalog.get_head(PACKAGE)
        installation = tx.catalog.get_installation(PACKAGE)
        disposition = tx.catalog.get_disposition(installation.id) if installation is not None else None
        return {
            "publications": sorted((p.version, p.status, p.gate, p.gate_run_id is not None, p.content_digest,
                                    p.definition_digest, version.get(p.previous_publication_id or ""),
                                    p.withdrawn_at is not None) for p in publications),
            "head": (version[head.publication_id], head.revision) if head is not None else None,
            "installation": (version[installation.publication_id], installation.status, installation.generation)
            if installation is not None else None,
            "lock": installation.lock_digest if installation is not None else None,
            "disposition": (disposition.disposition, disposition.reason) if disposition is not None else None,
            "quarantines": sorted((str(reason), release_reason, released_at is None, lock)
                                  for reason, release_reason, released_at, lock in _raw(
                                      tx, "SELECT reason, release_reason, released_at, lock_digest "
                                          "FROM installation_quarantines")),
        }

    state = db.store.read(unit)
    lock = state.pop("lock")
    # the quarantine's lock is compared by whether it is the installation's current one (locks hold ids)
    state["quarantines"] = [(reason, release, is_open, held == lock) for reason, release, is_open, held
                            in state["quarantines"]]
    rows = catalog_rows(db)
    state["rows"] = {table: len(rows[table]) for table in PACKAGE_TABLES} | rows["counts"]
    return state


# ── prepared databases ──
class Catalog:
    """The prepared starting point of every flow and the crash-free reference of each flow, per backend.

    On SQLite the prepared database is built once (per backend) in a directory of the session and copied
    for each test; on PostgreSQL each test's fresh schema is prepared again.
    """

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        packages = factory.mktemp("shelf-packages")
        self.packages = {version: shelf_package(packages, version) for version in VERSIONS}
        self.templates: dict[str, Path] = {}
        self.references: dict[tuple[str, str], dict[str, Any]] = {}

    @contextmanager
    def database(self, backend: str, root: Path) -> Iterator[CrashDB]:
        """A control database of ``backend`` under ``root`` in the prepared state."""
        if backend == "postgres":
            with crash_db(backend, root) as db:
                self._prepare(db)
                yield db
            return
        if backend not in self.templates:
            template = self.factory.mktemp(f"catalog-template-{backend}")
            with crash_db(backend, template) as db:
                self._prepare(db)
            self.templates[backend] = template
        with crash_db(backend, root, template=self.templates[backend]) as db:
            yield db

    def _prepare(self, db: CrashDB) -> None:
        """Rehearse both versions of ``shelf`` (two Attempts each, run by an in-process worker, so each gate passes
        with its semantics compared, as publishing needs)."""
        registry = HandlerRegistry()
        registry.register(KIND, AttemptHandler(db.root / "prepare-work"))
        for version in VERSIONS:
            run = db.service.create_run(self.packages[version])
            db.service.enqueue_attempt(run.id)
            db.service.enqueue_attempt(run.id)
            Worker(db.store, registry, WorkerConfig(poll_interval=0.01, batch_size=1, lease_seconds=30.0,
                                                    worker_id=f"prepare-{version}", listen=False)).run(max_idle_polls=1)
            gate = db.service.gate(run.id)
            assert gate.passed, f"the rehearsal of {PACKAGE} {version} does not pass its gate: {gate.blocking}"
            assert gate.semantics_compared, f"the rehearsal of {PACKAGE} {version} was not compared"

    def reference(self, backend: str, transaction: str) -> dict[str, Any]:
        """The catalog after a crash-free run of the flow (computed once per backend and flow)."""
        key = (backend, transaction)
        if key not in self.references:
            root = self.factory.mktemp(f"reference-{backend}-{transaction}")
            try:
                with self.database(backend, root) as db:
                    self.references[key] = run_package_flow(db, self, FLOWS[transaction], None, None,
                                                            cli_audit=False)
            except BackendUnreachable as error:
                pytest.fail(str(error), pytrace=False)
        return self.references[key]


# ── the flow runner ──
SETUP: dict[str, Callable[[CatalogService, Catalog], object]] = {
    "publish 1.0.0": lambda service, catalog: service.publish(catalog.packages["1.0.0"]),
    "install": lambda service, catalog: service.install(PACKAGE),
    "publish 2.0.0": lambda service, catalog: service.publish(catalog.packages["2.0.0"]),
    "quarantine": lambda service, catalog: service.quarantine(PACKAGE, "setup: quarantined before the flow"),
}


def run_package_flow(db: CrashDB, catalog: Catalog, flow: PackageFlow, side: str | None,
                     reference: dict[str, Any] | None, *, cli_audit: bool = True) -> dict[str, Any]:
    """Run ``flow`` on the prepared ``db``, crashing on ``side`` (``before``/``after``) of its COMMIT or not at
    all (None); return the converged ``catalog_state``. ``reference`` is the crash-free outcome (needed for
    an after-commit crash, whose durable state must be exactly it). ``cli_audit=False`` leaves out the final
    ``fencepost audit`` process (the same checks run in-process anyway): the crash-free reference runs."""
    service = CatalogService(db.store, release_gate=release_gate)
    for step in flow.setup:
        SETUP[step](service, catalog)
    argv = [catalog.packages["2.0.0"].as_posix() if a == "{v2}" else a for a in flow.argv]
    before = catalog_rows(db)

    if side is None:
        _first_answer(flow, cli(db, *argv))
    else:
        point = f"{flow.transaction}:{side}-commit"
        cli(db, *argv, crash=point)
        assert_sound(db, f"after the crash at {point}")
        crashed = catalog_rows(db)
        if side == "before":
            assert crashed == before, f"a crash before COMMIT persisted something:\n{_diff(before, crashed)}"
            _first_answer(flow, cli(db, *argv))
        else:
            assert crashed != before, "a crash after COMMIT lost the transaction"
            assert reference is not None
            assert catalog_state(db) == reference, "a crash after COMMIT did not persist the whole transaction"
            again = cli(db, *argv)
            assert again.returncode == flow.retry_code, again.describe()
            if flow.retry_code == 0:
                _has(again.json(), flow.retry_answer, again.describe())
            else:
                assert again.stdout == "", again.describe()
                assert flow.retry_answer["error"] in again.error_line, again.describe()
            retried = catalog_rows(db)
            assert without(retried, flow.retry_rewrites) == without(crashed, flow.retry_rewrites), (
                f"running {flow.transaction} again after its COMMIT changed the catalog:\n{_diff(crashed, retried)}")

    assert_sound(db, "after convergence")
    if cli_audit:
        assert_cli_audit_clean(db)
    return catalog_state(db)


def expected_outcome(flow: PackageFlow, side: str, reference: dict[str, Any]) -> dict[str, Any]:
    """What a flow crashed on ``side`` converges to: the reference, with the generation a second install
    request adds after an after-commit crash."""
    if side != "after" or not flow.retry_generation:
        return reference
    version, status, generation = reference["installation"]
    return {**reference, "installation": (version, status, generation + flow.retry_generation)}


def _first_answer(flow: PackageFlow, result: Any) -> None:
    assert result.returncode == 0, result.describe()
    _has(result.json(), flow.answer, result.describe())


def _has(answer: Any, expected: dict[str, Any], where: str) -> None:
    """``answer`` has each ``expected`` key (``a.b``: key ``b`` of the object at ``a``) with its value."""
    def pick(key: str) -> Any:
        value = answer
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    seen = {key: pick(key) for key in expected}
    assert seen == expected, f"answer has {seen}, expected {expected}\n{where}"


def _diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    return "\n".join(f"{table}:\n  was {json.dumps(old[table], default=str)}\n"
                     f"  now {json.dumps(new[table], default=str)}" for table in old if old[table] != new.get(table))
