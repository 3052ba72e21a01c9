"""Shared helpers of the workflow-admission proof suite (issue 6, ADR-0224).

- ``write_package``: a small plugin package in ``tmp_path`` with two tasks and the two-step workflow
  ``pipeline`` (``extract`` -> ``load``), optionally with more steps.
- ``World``: a migrated store of one backend plus the package service, with row counts of every
  workflow table and raw SQL for tampering (plain SQL on the same connection: no constraint disabled).
- ``cli``/``cli_url``: the real ``fencepost`` CLI as a subprocess, on SQLite or on the PostgreSQL test
  schema (``search_path`` passed in the URL's ``options``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from fencepost.catalog.lifecycle import CatalogService
from fencepost.rehearsal.service import release_gate
from fencepost.store import Store
from fencepost.store.ports import UnitOfWork
from fencepost.workflows.admission import AdmissionResult
from fencepost.workflows.service import WorkflowService
from helpers.processes import CliResult, run_cli, subprocess_env
from helpers.store_backends import (
    BackendUnreachable,
    StoreBackend,
    schema_url,
    selected_backends,
    store_backend,
)

REPO = Path(__file__).resolve().parents[2]

PACKAGE = "pair"
WORKFLOW = "pipeline"

# Every table admission writes, in ADR-0224 insert order, and the package tables its guards read.
ADMISSION_TABLES = ("workflow_runs", "workflow_events", "workflow_step_runs", "workflow_step_mutations",
                    "workflow_admissions", "workflow_admission_steps", "workflow_admission_receipts")
PACKAGE_TABLES = ("package_publications", "package_heads", "package_installations", "installation_dispositions",
                  "installation_quarantines")
ALL_TABLES = ADMISSION_TABLES + PACKAGE_TABLES


def expected_admission_counts(steps: int, admissions: int = 1) -> dict[str, int]:
    """Rows ``admissions`` intact admissions of ``steps``-step plans own, by table (ADR-0224 decision 2.5:
    one Run, ``workflow.admitted`` plus one ``step.created`` per step, a StepRun and a mutation per step,
    one ledger row plus one per step, one receipt)."""
    per = {"workflow_runs": 1, "workflow_events": 1 + steps, "workflow_step_runs": steps,
           "workflow_step_mutations": steps, "workflow_admissions": 1, "workflow_admission_steps": steps,
           "workflow_admission_receipts": 1}
    return {table: per[table] * admissions for table in ADMISSION_TABLES}


# ── packages ──
def write_package(root: Path, *, name: str = PACKAGE, version: str = "1.0.0", extract_sql: str = "SELECT 1;",
                  load_sql: str = "SELECT 2;", extra_steps: int = 0, migration_sql: str | None = None) -> Path:
    """A valid package directory ``root/<name>-<version>`` with tasks ``extract`` and ``load`` and the
    workflow ``pipeline``: ``extract`` then ``load`` (needs ``extract``), plus ``extra_steps`` more steps
    ``s000``.. that each need ``load`` (task ``load``)."""
    directory = root / f"{name}-{version}"
    (directory / "migrations").mkdir(parents=True, exist_ok=True)
    (directory / "tasks").mkdir(exist_ok=True)
    (directory / "migrations" / "0001_t.up.sql").write_text(
        migration_sql or "CREATE TABLE t (id INTEGER PRIMARY KEY, label TEXT NOT NULL);\n", encoding="utf-8")
    (directory / "migrations" / "0001_t.down.sql").write_text("DROP TABLE t;\n", encoding="utf-8")
    (directory / "tasks" / "extract.sql").write_text(extract_sql + "\n", encoding="utf-8")
    (directory / "tasks" / "load.sql").write_text(load_sql + "\n", encoding="utf-8")
    steps = ['    { key = "extract", task = "extract" },', '    { key = "load", task = "load", needs = ["extract"] },']
    steps += [f'    {{ key = "s{i:03d}", task = "load", needs = ["load"] }},' for i in range(extra_steps)]
    (directory / "fencepost-package.toml").write_text(
        "[package]\n"
        f'name = "{name}"\nversion = "{version}"\n\n'
        '[[tasks]]\nid = "extract"\nsource = "tasks/extract.sql"\n\n'
        '[[tasks]]\nid = "load"\nsource = "tasks/load.sql"\n\n'
        f'[[workflows]]\nid = "{WORKFLOW}"\nsteps = [\n' + "\n".join(steps) + "\n]\n",
        encoding="utf-8")
    return directory


# ── raw SQL on either backend ──
def raw(tx: UnitOfWork, query: str) -> list[tuple[Any, ...]]:
    """Parameterless SQL through the backend's ``execute_raw`` (test-only; both stores offer it)."""
    return cast(list[tuple[Any, ...]], cast(Any, tx).execute_raw(query))


def table_counts(store: Store, tables: Sequence[str] = ALL_TABLES) -> dict[str, int]:
    def unit(tx: UnitOfWork) -> dict[str, int]:
        return {t: int(raw(tx, f"SELECT count(*) FROM {t}")[0][0]) for t in tables}

    return store.read(unit)


def execute(store: Store, query: str) -> None:
    """Run one plain SQL write (tampering) in its own transaction; nothing is disabled."""
    with store.transaction() as tx:
        raw(tx, query)


# ── one backend, migrated, with the package service ──
@dataclass
class World:
    backend: StoreBackend
    store: Store
    root: Path
    catalog: CatalogService = field(init=False)
    workflows: WorkflowService = field(init=False)

    def __post_init__(self) -> None:
        self.catalog = CatalogService(self.store, release_gate=release_gate)
        self.workflows = WorkflowService(self.store)

    def package(self, version: str = "1.0.0", **kwargs: Any) -> Path:
        return write_package(self.root, version=version, **kwargs)

    def publish(self, version: str = "1.0.0", **kwargs: Any) -> str:
        """Publish (gate waived) ``version`` of the test package; returns the publication id."""
        return self.catalog.publish(self.package(version, **kwargs), allow_ungated=True).publication.id

    def ready(self, version: str = "1.0.0", **kwargs: Any) -> str:
        """Publish and install ``version``; returns the publication id."""
        publication_id = self.publish(version, **kwargs)
        self.catalog.install(PACKAGE)
        return publication_id

    def plan(self, plan_id: str, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.workflows.plan(PACKAGE, WORKFLOW, plan_id=plan_id, inputs=inputs)

    def admit(self, plan: Any) -> AdmissionResult:
        return self.workflows.admit(plan)

    def counts(self, tables: Sequence[str] = ALL_TABLES) -> dict[str, int]:
        return table_counts(self.store, tables)

    def sql(self, query: str) -> None:
        execute(self.store, query)

    @property
    def cli_url(self) -> str:
        return cli_url(self.backend)


def cli_url(backend: StoreBackend) -> str:
    """The URL a CLI subprocess uses to reach ``backend``'s database (its PostgreSQL schema included)."""
    if not backend.is_postgres:
        return backend.url
    assert backend.schema is not None
    return schema_url(backend.schema)


@contextmanager
def opened_backend(name: str, tmp_path: Path) -> Iterator[StoreBackend]:
    """``store_backend`` that FAILS the test (never skips) when PostgreSQL is unreachable."""
    try:
        with store_backend(name, tmp_path) as backend:
            yield backend
    except BackendUnreachable as error:
        pytest.fail(str(error), pytrace=False)


def backend_params(names: Sequence[str], *, soak: Sequence[str] = ()) -> list[Any]:
    """pytest params for ``names`` (default run) plus ``soak`` (marked soak), keeping only the backends
    ``FENCEPOST_TEST_BACKENDS`` selects; postgres params carry the ``postgres`` marker."""
    selected = selected_backends()
    params: list[Any] = []
    for name, is_soak in [(n, False) for n in names] + [(n, True) for n in soak]:
        if name not in selected:
            continue
        marks = [pytest.mark.postgres] if name == "postgres" else []
        if is_soak:
            marks.append(pytest.mark.soak)
        params.append(pytest.param(name, marks=marks, id=f"soak-{name}" if is_soak else name))
    return params


# ── the CLI as a subprocess ──
def cli(url: str, *args: str, cwd: Path | None = None, crashpoint: str | None = None,
        stdin: str | None = None) -> CliResult:
    """Run ``fencepost <args>`` on the database ``url`` (FENCEPOST_DATABASE), optionally armed with a crash
    point and fed ``stdin`` (an empty stdin when None)."""
    return run_cli(args, cwd=cwd, env=subprocess_env(FENCEPOST_DATABASE=url), crash=crashpoint,
                   stdin=stdin if stdin is not None else "")


def assert_refused(result: CliResult, code: int, *needles: str) -> str:
    """Exit ``code``, nothing on stdout, one ``fencepost: ...`` line on stderr naming every needle."""
    assert result.returncode == code, result.describe()
    assert result.stdout.strip() == "", result.describe()
    line = result.error_line
    assert line.startswith("fencepost: "), result.describe()
    assert "Traceback" not in result.stderr, result.describe()
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line
