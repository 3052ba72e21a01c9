"""Issue 17's fleet proof: 50 labelled SQLite targets delivered by 4 real ``fencepost worker`` processes while one
target is held by another process's ``BEGIN EXCLUSIVE`` for 10 s and another target's file is gone: 48 succeed
at once, the locked one once it is free, the deleted one fails naming it, nothing is delivered twice, the audit
is clean (``delivery.fleet``). SQLite control store in the default run; PostgreSQL and a larger fleet: soak."""

from __future__ import annotations

from pathlib import Path

import pytest

from delivery.fleet import check_fleet, run_fleet
from helpers.store_backends import create_schema, drop_schema, new_schema_name, schema_url


def test_a_fleet_of_50_with_a_locked_and_a_deleted_target(tmp_path: Path) -> None:
    check_fleet(run_fleet(f"sqlite:///{tmp_path / 'control.db'}", tmp_path))


@pytest.mark.soak
@pytest.mark.parametrize("targets", [50, 150])
def test_a_fleet_on_a_postgresql_control_store(tmp_path: Path, targets: int) -> None:
    schema = new_schema_name("fleet")
    create_schema(schema)
    try:
        check_fleet(run_fleet(schema_url(schema), tmp_path, targets=targets, timeout=300.0))
    finally:
        drop_schema(schema)


@pytest.mark.soak
def test_a_fleet_of_150_on_sqlite(tmp_path: Path) -> None:
    check_fleet(run_fleet(f"sqlite:///{tmp_path / 'control.db'}", tmp_path, targets=150, timeout=300.0))
