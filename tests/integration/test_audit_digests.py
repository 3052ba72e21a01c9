"""The audit recomputes what admission trusts: publication and workflow digests, installation locks, and
the checksums of applied migrations."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from fencepost.catalog.lifecycle import CatalogService
from fencepost.rehearsal.service import release_gate
from fencepost.store import Store, open_store
from fencepost.store.audit import audit_store
from fencepost.workflows.audit import audit_admissions

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inventory"


@pytest.fixture
def installed(tmp_path: Path) -> tuple[Store, Path]:
    db = tmp_path / "c.db"
    store = open_store(f"sqlite:///{db}")
    store.migrate()
    package = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, package)
    catalog = CatalogService(store, release_gate=release_gate)
    catalog.publish(package, allow_ungated=True)
    catalog.install("inventory")
    return store, db


def _sql(db: Path, statement: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(statement)


def test_sound_database_has_no_findings(installed: tuple[Store, Path]) -> None:
    store, _ = installed
    assert audit_store(store) == [] and audit_admissions(store) == []


def test_tampered_publication_definition_is_found(installed: tuple[Store, Path]) -> None:
    store, db = installed
    _sql(db, "UPDATE package_publications SET definition = "
             "json_set(definition, '$.tasks.reorder.digest', 'sha256:' || lower(hex(zeroblob(32))))")
    findings = audit_admissions(store)
    assert [(f.check, f.detail) for f in findings] == [("publication", "stored definition does not match its digest")]


def test_tampered_installation_lock_is_found(installed: tuple[Store, Path]) -> None:
    store, db = installed
    _sql(db, "UPDATE package_installations SET lock_digest = 'sha256:' || lower(hex(zeroblob(32)))")
    assert [f.check for f in audit_admissions(store)] == ["installation"]


def test_edited_migration_checksum_is_found(installed: tuple[Store, Path]) -> None:
    store, db = installed
    _sql(db, "UPDATE fencepost_schema SET checksum = 'x' WHERE version = 1")
    findings = audit_store(store)
    assert [(f.check, f.subject) for f in findings] == [("migration_checksum", "migration 0001")]
