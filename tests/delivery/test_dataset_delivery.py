"""A real migration history (ChirpStack's SQLite migrations, /work/shared/datasets) rehearsed, published and
delivered: to a fresh target, and to a target at the previous version that is then upgraded. Both end with the
schema fingerprint the rehearsal recorded (ADR 0058), and the upgrade applies only the pending migrations.

The dataset is read from ``<repository>/../shared/datasets`` (or ``FENCEPOST_DATASETS``) and copied into
``tmp_path`` at test time; a missing dataset fails the test, it never skips.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from delivery.kit import add_target, deliver, ledger, release
from fencepost.core.statuses import InvocationStatus
from fencepost.delivery.lock import published_lock
from fencepost.delivery.target_db import connect, fingerprint
from fencepost.store.base import Store

THROUGH = "2025-01-27-100007_add_fuota_support"


def _migrations() -> Path:
    configured = os.environ.get("FENCEPOST_DATASETS", "").strip()
    root = Path(configured) if configured else Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"
    source = (root / "chirpstack-sqlite-migrations" / "migrations").resolve()
    if not source.is_dir():
        pytest.fail(f"dataset folder {source} is missing (../shared/datasets or FENCEPOST_DATASETS)", pytrace=False)
    return source


def _package(root: Path, version: str, ids: list[str], previous: str | None) -> Path:
    package = root / f"chirpstack-{version}"
    (package / "migrations").mkdir(parents=True)
    head = f'[package]\nname = "chirpstack"\nversion = "{version}"\n'
    if previous is not None:
        head += f'previous_version = "{previous}"\nprevious_through = "{THROUGH}"\n'
    head += '\n[verify]\nvolatile_columns = ["created_at", "updated_at"]\n'
    (package / "fencepost-package.toml").write_text(head, encoding="utf-8")
    for mid in ids:  # up files only: delivery applies ups, and this history's downs have real defects that the
        (package / "migrations" / mid).mkdir()  # rehearsal's uninstall scenario reports (tests/integration)
        shutil.copyfile(_migrations() / mid / "up.sql", package / "migrations" / mid / "up.sql")
    return package


def _print(path: Path) -> str:
    with connect("probe", str(path)) as conn:
        return str(fingerprint(conn)["fingerprint"])


def test_chirpstack_fresh_and_upgrade_deliveries_match_the_rehearsal(sqlite_store: Store, tmp_path: Path) -> None:
    store, work = sqlite_store, tmp_path / "work"
    ids = sorted(p.name for p in _migrations().iterdir())
    assert len(ids) == 14
    old_ids = ids[: ids.index(THROUGH) + 1]
    release(store, _package(tmp_path, "4.11.0", old_ids, None), work)
    _, upgraded = add_target(store, tmp_path, "tenant-upgraded")
    first = deliver(store, "chirpstack", "tenant-upgraded", work)
    assert first.status is InvocationStatus.SUCCEEDED, first.error
    assert [r[2] for r in ledger(upgraded)] == old_ids

    release(store, _package(tmp_path, "4.14.0", ids, "4.11.0"), work)
    lock = store.read(lambda tx: published_lock(tx, "chirpstack", "4.14.0"))
    assert lock.rehearsal["fresh"] is not None and lock.rehearsal["upgrade"] is not None
    _, fresh = add_target(store, tmp_path, "tenant-fresh")
    new = deliver(store, "chirpstack", "tenant-fresh", work)
    upgrade = deliver(store, "chirpstack", "tenant-upgraded", work)
    assert new.status is InvocationStatus.SUCCEEDED, new.error
    assert upgrade.status is InvocationStatus.SUCCEEDED, upgrade.error

    fresh_verify, upgrade_verify = new.result["steps"]["verify"], upgrade.result["steps"]["verify"]
    assert (fresh_verify["scenario"], fresh_verify["comparison"]) == ("deliver_and_install", "matches rehearsal")
    assert (upgrade_verify["scenario"], upgrade_verify["comparison"]) == ("upgrade_from_previous",
                                                                          "matches rehearsal")
    assert upgrade.result["steps"]["check"]["start_state"] == "previous_version"
    # measured on the files themselves, with the rehearsal's own fingerprint function
    assert _print(fresh) == lock.rehearsal["fresh"] == _print(upgraded) == lock.rehearsal["upgrade"]
    applied = [upgrade.result["steps"][f"migrate-{i:03d}"]["applied"] for i in range(1, 15)]
    assert applied == [False] * len(old_ids) + [True] * (14 - len(old_ids)), "only the pending ones are applied"
    rows = ledger(upgraded)
    assert [r[2] for r in rows] == ids
    assert {r[1] for r in rows[: len(old_ids)]} == {"4.11.0"} and {r[1] for r in rows[len(old_ids):]} == {"4.14.0"}
