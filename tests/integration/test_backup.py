"""Issue 11 item 9 (ADR 0066): `fencepost backup DEST` and the restore of docs/operations.md, and a running
`serve` whose database file is deleted fails readiness and refuses writes.

A plain copy of a WAL database misses the commits still in its -wal file; the backup has them, and the file it
writes is restored by copying it into place (every process stopped), then checked with `fencepost audit`.
"""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from fencepost.cli.worker_cmd import build_worker
from fencepost.outbox import WorkerConfig
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import open_store
from fencepost.store.sqlite.backup import backup_sqlite
from helpers.processes import run_cli, start_piped
from integration.rig import copy_example

TOKEN = "backup-test-token-0123456789"


def _runs(path: Path) -> list[str] | None:
    """The rehearsal ids in the database file at ``path``; None when it has no such table (no schema at all)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT id FROM rehearsal_runs ORDER BY id")]
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()


def test_backup_has_the_commits_a_plain_copy_misses_and_restores_sound(tmp_path: Path) -> None:
    db = tmp_path / "control.db"
    url = f"sqlite:///{db}"
    store = open_store(url)
    try:
        store.migrate()
        store.connection().execute("PRAGMA wal_autocheckpoint = 0")  # keep every commit in the -wal file
        service = RehearsalService(store)
        run = service.create_run(copy_example(tmp_path / "inventory"))
        service.enqueue_attempt(run.id)
        build_worker(store, tmp_path / "work", WorkerConfig(poll_interval=0.01, worker_id="w")).run(max_idle_polls=1)
        assert (tmp_path / "control.db-wal").stat().st_size > 0

        plain = tmp_path / "plain-copy.db"
        shutil.copyfile(db, plain)  # what `cp` of the database file alone gives while it runs
        assert _runs(plain) in (None, [])  # the schema and the rehearsal are still in the -wal file

        backup = tmp_path / "backups" / "control-backup.db"
        backup.parent.mkdir()
        done = run_cli(["backup", str(backup), "--database", url, "--json"])  # while the store is open
        assert done.returncode == 0, done.describe()
        report = json.loads(done.stdout)
        assert report["integrity"] == "ok" and report["bytes"] == backup.stat().st_size
        assert _runs(backup) == [run.id]
    finally:
        store.close()

    # the restore of docs/operations.md: every process stopped, the backup copied into place, then audited
    restored = tmp_path / "restored" / "control.db"
    restored.parent.mkdir()
    shutil.copyfile(backup, restored)
    restored_url = f"sqlite:///{restored}"
    audit = run_cli(["audit", "--database", restored_url, "--json"])
    assert audit.returncode == 0, audit.describe()
    assert json.loads(audit.stdout)["sound"] is True  # every Receipt's fingerprint and seal verify there too
    status = run_cli(["rehearsal", "status", run.id, "--database", restored_url, "--json"])
    assert status.returncode == 0, status.describe()
    assert [a["status"] for a in json.loads(status.stdout)["attempts"]] == ["SUCCEEDED"]


def test_backup_refuses_an_existing_file_and_postgresql(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = open_store(url)
    store.migrate()
    store.close()
    existing = tmp_path / "existing.db"
    existing.write_bytes(b"keep me")
    refused = run_cli(["backup", str(existing), "--database", url])
    assert refused.returncode == 2 and "exists already" in refused.error_line
    assert existing.read_bytes() == b"keep me"
    postgres = run_cli(["backup", str(tmp_path / "pg.dump"), "--database", "postgresql://u@127.0.0.1:1/db"])
    assert postgres.returncode == 2 and "pg_dump" in postgres.error_line
    assert not (tmp_path / "pg.dump").exists()


def test_a_database_path_with_uri_characters_is_the_file_backed_up_and_opened(tmp_path: Path) -> None:
    # '#' ends a URI's path (the rest, ?mode= included, is a fragment SQLite ignores) and '?' starts its query:
    # written into a file: URI as is, SQLite opened, and for want of the mode created, another, empty file, and
    # the backup of it was reported as a success of one page.
    folder = tmp_path / "ops#2 ?50%"
    folder.mkdir()
    db = folder / "control.db"
    store = open_store(str(db))  # a bare path: every character is the file's
    try:
        store.migrate()
        run = RehearsalService(store).create_run(copy_example(tmp_path / "inventory"))
    finally:
        store.close()
    backup = tmp_path / "backup.db"
    done = run_cli(["backup", str(backup), "--database", str(db), "--json"])
    assert done.returncode == 0, done.describe()
    assert _runs(backup) == [run.id]
    listed = run_cli(["rehearsal", "status", run.id, "--database", str(db), "--json"])  # opened without create
    assert listed.returncode == 0, listed.describe()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.db", "inventory", "ops#2 ?50%"]  # no stray file


def test_backup_reports_progress_step_by_step(tmp_path: Path) -> None:
    db = tmp_path / "big.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.executemany("INSERT INTO t VALUES (?)", [(b"\x01" * 4000,) for _ in range(600)])
    conn.commit()
    conn.close()
    seen: list[tuple[int, int]] = []
    result = backup_sqlite(str(db), tmp_path / "copy.db", progress=lambda done, total: seen.append((done, total)),
                           pages_per_step=50)
    assert len(seen) > 5 and seen[-1][0] == seen[-1][1] == result.pages
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert not list(tmp_path.glob(".copy.db.partial*")), "no temporary file is left"


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_serve_whose_database_file_is_deleted_fails_readiness_and_refuses_writes(tmp_path: Path) -> None:
    db = tmp_path / "control.db"
    store = open_store(f"sqlite:///{db}")
    store.migrate()
    store.close()
    package = copy_example(tmp_path / "inventory")
    proc = start_piped(["serve", "--database", f"sqlite:///{db}", "--port", "0", "--no-worker",
                        "--api-token", TOKEN], stderr_path=tmp_path / "serve.err")
    try:
        address = proc.next_line(timeout=60)
        base = address.split("serving on ", 1)[1].split(" ", 1)[0].rstrip("/")
        deadline = time.monotonic() + 20
        while True:
            try:
                assert _get(base + "/health/ready")[0] == 200
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert _post(base + "/delivery-rehearsals", {"package_path": str(package)})[0] == 201
        for name in ("control.db", "control.db-wal", "control.db-shm"):
            (tmp_path / name).unlink(missing_ok=True)

        status, body = _get(base + "/health/ready")
        assert status == 503 and body["type"] == "urn:fencepost:problem:unavailable", body
        assert "deleted or replaced" in body["detail"]
        status, body = _post(base + "/delivery-rehearsals", {"package_path": str(package)})
        assert status == 503 and body["type"] == "urn:fencepost:problem:unavailable", body
        assert _get(base + "/delivery-rehearsals")[0] == 503
        assert not db.exists(), "nothing recreated the file behind the operator's back"
        assert proc.stop(signal.SIGTERM, timeout=60) == 0
    finally:
        proc.stop(signal.SIGKILL)
