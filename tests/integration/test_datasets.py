"""Real-world SQL from /work/shared/datasets rehearsed end to end: two Attempts each, all SUCCEEDED, gate passes.

Package directories are built in ``tmp_path`` at test time by copying the dataset files into them (symlinks
leaving a package are refused by design). Nothing is copied into the repository.

The datasets directory is ``<repository>/../shared/datasets``, or ``FENCEPOST_DATASETS`` when set. When it is
missing the tests fail with a message saying so: they never skip.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus
from fencepost.store.records import AttemptRecord, RunRecord
from integration.rig import Rig, write_package

MANIFEST = "fencepost-package.toml"


def _datasets() -> Path:
    configured = os.environ.get("FENCEPOST_DATASETS", "").strip()
    root = Path(configured) if configured else Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"
    root = root.resolve()
    if not root.is_dir():
        pytest.fail(f"datasets directory {root} is missing: put the shared datasets beside the repository "
                    "(../shared/datasets) or set FENCEPOST_DATASETS", pytrace=False)
    return root


def _dataset(name: str) -> Path:
    """The dataset folder ``name``; a missing folder fails the calling test (as a failure, not a setup error)."""
    datasets = _datasets()
    path = datasets / name
    if not path.exists():
        pytest.fail(f"dataset {name!r} is missing from {datasets}", pytrace=False)
    return path


def _rehearse_twice(rig: Rig, package: Path) -> tuple[RunRecord, list[AttemptRecord]]:
    run, attempts = rig.rehearse(package, attempts=2)
    for attempt in attempts:
        receipts = rig.receipts(attempt.id)
        failures = {r.scenario: (rig.evidence(r).get("error") if r.evidence else None)
                    for r in receipts if r.status is not ReceiptStatus.SUCCEEDED}
        assert attempt.status is AttemptStatus.SUCCEEDED, f"Attempt #{attempt.seq}: {attempt.error}; {failures}"
        assert attempt.command_status is CommandStatus.DELIVERED
    report = rig.service.gate(run.id)
    assert report.passed, [(c.name, c.reason) for c in report.blocking]
    return run, attempts


def _result(rig: Rig, attempt: AttemptRecord, position: int) -> dict[str, object]:
    result = rig.evidence(rig.receipts(attempt.id)[position - 1])["result"]
    assert isinstance(result, dict)
    return result


def test_chinook_single_script_without_down(rig: Rig) -> None:
    source = _dataset("chinook")
    package = write_package(rig.tmp / "chinook", {
        MANIFEST: '[package]\nname = "chinook"\nversion = "1.4.5"\n\n'
                  '[[migrations]]\nid = "0001_chinook"\nup = "sql/Chinook_Sqlite.sql"\n'})
    (package / "sql").mkdir()
    shutil.copyfile(source / "Chinook_Sqlite.sql", package / "sql" / "Chinook_Sqlite.sql")
    _, attempts = _rehearse_twice(rig, package)
    tables = _result(rig, attempts[0], 3)["tables"]
    assert isinstance(tables, dict)
    assert len(tables) == 11
    assert sum(t["rows"] for t in tables.values()) == 15_607
    assert (tables["Track"]["rows"], tables["PlaylistTrack"]["rows"]) == (3_503, 8_715)
    assert _result(rig, attempts[0], 5)["applicable"] is False
    uninstall = _result(rig, attempts[0], 6)
    assert uninstall["applicable"] is False, "one script with no down: uninstall is not applicable"


def test_chirpstack_diesel_folders_with_downs_and_an_upgrade(rig: Rig) -> None:
    source = _dataset("chirpstack-sqlite-migrations") / "migrations"
    ids = sorted(p.name for p in source.iterdir())
    assert len(ids) == 14
    through = "2025-01-27-100007_add_fuota_support"
    package = write_package(rig.tmp / "chirpstack", {
        # The initial migration inserts a tenant and an admin user stamped datetime('now'): volatile columns.
        MANIFEST: '[package]\nname = "chirpstack"\nversion = "4.14.0"\nprevious_version = "4.11.0"\n'
                  f'previous_through = "{through}"\n\n'
                  '[verify]\nvolatile_columns = ["created_at", "updated_at"]\n'})
    shutil.copytree(source, package / "migrations")
    _, attempts = _rehearse_twice(rig, package)
    install = _result(rig, attempts[0], 1)
    assert install["migrations_applied"] == ids, "Diesel folders apply in id order"
    upgrade = _result(rig, attempts[0], 5)
    assert upgrade["previous_migrations"] == ids[: ids.index(through) + 1]
    assert upgrade["upgrade_migrations"] == ids[ids.index(through) + 1:]
    assert upgrade["matches_clean_install"] is True
    uninstall = _result(rig, attempts[0], 6)
    assert (uninstall["method"], uninstall["remaining_objects"]) == ("down_migrations", 0)


def test_authelia_files_with_host_functions(rig: Rig) -> None:
    source = _dataset("authelia-sqlite-migrations") / "migrations"
    package = write_package(rig.tmp / "authelia", {
        MANIFEST: '[package]\nname = "authelia"\nversion = "4.39.0"\n\n'
                  '[sqlite]\nfunctions = { BIN2B64 = "base64_encode", B642BIN = "base64_decode" }\n'})
    shutil.copytree(source, package / "migrations")
    _, attempts = _rehearse_twice(rig, package)
    install = _result(rig, attempts[0], 1)
    applied = install["migrations_applied"]
    assert isinstance(applied, list) and len(applied) == 26
    assert applied[:2] == ["V0001.Initial_Schema", "V0002.WebAuthn"] and applied[-1].startswith("V0026.")
    schema = install["schema"]
    assert isinstance(schema, dict) and schema["objects"]["table"] == 25
    uninstall = _result(rig, attempts[0], 6)
    assert (uninstall["method"], uninstall["remaining_objects"]) == ("down_migrations", 0)


def test_sakila_schema_seed_and_uninstall_script(rig: Rig) -> None:
    source = _dataset("sakila")
    package = write_package(rig.tmp / "sakila", {
        # Sakila's triggers stamp last_update with the load time: leave it out of content digests.
        MANIFEST: '[package]\nname = "sakila"\nversion = "1.0.0"\n'
                  'seed = ["data/sqlite-sakila-insert-data-optimized.sql"]\n'
                  'uninstall = "sql/sqlite-sakila-drop-objects.sql"\n\n'
                  '[[migrations]]\nid = "0001_schema"\nup = "sql/sqlite-sakila-schema.sql"\n\n'
                  '[verify]\nvolatile_columns = ["last_update"]\n'})
    for folder, name in (("sql", "sqlite-sakila-schema.sql"), ("sql", "sqlite-sakila-drop-objects.sql"),
                         ("data", "sqlite-sakila-insert-data-optimized.sql")):
        (package / folder).mkdir(exist_ok=True)
        shutil.copyfile(source / name, package / folder / name)
    _, attempts = _rehearse_twice(rig, package)
    seeded = _result(rig, attempts[0], 3)
    tables = seeded["tables"]
    assert isinstance(tables, dict)
    assert sum(t["rows"] for t in tables.values()) == 46_273
    assert all("last_update" not in t["columns"] for t in tables.values())
    assert seeded["checks"] == {"integrity_check": "ok", "foreign_key_violations": 0,
                                "foreign_key_violation_samples": []}
    uninstall = _result(rig, attempts[0], 6)
    assert (uninstall["method"], uninstall["remaining_objects"]) == ("uninstall_script", 0)
