"""Issue 11 item 8, on the command line and on disk: bad input gets a clear answer.

A non-UTF-8 id is one line and exit 2; a directory or a read-only file given as the database says what is wrong
with the path (not "run `fencepost migrate`"); `fencepost audit` on a damaged file reports it as a finding (exit
1, not a crash with exit 5); a worker whose work directory is unusable refuses to start; the sandbox a
SIGKILLed worker left behind is removed once its Attempt is aborted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencepost.cli.worker_cmd import build_worker
from fencepost.outbox import WorkerConfig
from fencepost.rehearsal.service import RehearsalService
from fencepost.store import open_store
from helpers.processes import CliResult, run_cli
from integration.rig import copy_example


def _cli(*args: str) -> CliResult:
    return run_cli(list(args))


def _migrated(tmp_path: Path, name: str = "c.db") -> str:
    url = f"sqlite:///{tmp_path / name}"
    store = open_store(url)
    try:
        store.migrate()
    finally:
        store.close()
    return url


def test_a_non_utf8_id_is_one_line_and_exit_2(tmp_path: Path) -> None:
    url = _migrated(tmp_path)
    raw = os.fsdecode(b"run_\xff\xfe")  # what the shell passes for bytes that are not UTF-8
    for args in (["rehearsal", "status", raw, "--database", url], ["rehearsal", "abort", raw, "--database", url]):
        result = _cli(*args)
        assert result.returncode == 2, result.describe()
        assert result.stderr.strip().splitlines() == ["fencepost: argument 3 is not valid UTF-8"], result.describe()


def test_a_directory_given_as_the_database_says_so(tmp_path: Path) -> None:
    (tmp_path / "db-dir").mkdir()
    for args in (["rehearsal", "list"], ["migrate"], ["audit"]):
        result = _cli(*args, "--database", f"sqlite:///{tmp_path / 'db-dir'}")
        assert result.returncode == 5, result.describe()
        line = result.error_line
        assert "is a directory, not a database file" in line and "fencepost migrate" not in line


def test_a_database_in_a_missing_directory_says_so(tmp_path: Path) -> None:
    result = _cli("migrate", "--database", f"sqlite:///{tmp_path / 'absent' / 'c.db'}")
    assert result.returncode == 5 and "directory of the SQLite control database does not exist" in result.stderr


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """``path`` read-only even for root (who ignores mode bits): the immutable attribute, else mode 0444."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)


def test_a_read_only_database_file_says_so(tmp_path: Path) -> None:
    url = _migrated(tmp_path)
    package = copy_example(tmp_path / "inventory")
    with _read_only(tmp_path / "c.db"):
        result = _cli("rehearsal", "create", str(package), "--database", url)
    assert result.returncode == 5, result.describe()
    line = result.error_line
    assert "database file is read-only for this user" in line and "fencepost migrate" not in line
    assert str(tmp_path) not in line


def _damage(path: Path, offset: int, length: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(bytes((i * 37 + 11) % 256 for i in range(length)))


@pytest.mark.parametrize("damage", ["header", "pages", "not a database"])
def test_audit_reports_a_damaged_file_as_a_finding(tmp_path: Path, damage: str) -> None:
    url = _migrated(tmp_path)
    db = tmp_path / "c.db"
    if damage == "header":
        _damage(db, 100, 4000)  # the schema table's first page
    elif damage == "pages":
        _damage(db, 8192, db.stat().st_size - 8192)
    else:
        db.write_bytes(b"this is not a database file at all" * 200)
    result = _cli("audit", "--database", url, "--json")
    assert result.returncode == 1, result.describe()
    body = json.loads(result.stdout)
    assert body["sound"] is False
    assert any(f["check"] == "integrity" for f in body["findings"]), body
    assert "Traceback" not in result.stderr
    if damage == "header":
        text = _cli("audit", "--database", url)
        assert text.returncode == 1 and "FINDING integrity: database file" in text.stdout, text.describe()


def test_a_worker_with_an_unusable_work_directory_refuses_to_start(tmp_path: Path) -> None:
    url = _migrated(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    service = RehearsalService(open_store(url))
    run = service.create_run(copy_example(tmp_path / "inventory"))
    attempt = service.enqueue_attempt(run.id)
    result = _cli("worker", "--database", url, "--work-dir", str(blocker / "work"))
    assert result.returncode == 2, result.describe()
    assert "the work directory" in result.error_line and "is not usable" in result.error_line
    # and the innocent package's Attempt was never touched
    assert str(service.attempt(attempt.id).status) == "PENDING"
    service.store.close()


def test_the_sandbox_of_a_killed_worker_is_removed_once_its_attempt_is_aborted(tmp_path: Path) -> None:
    url = _migrated(tmp_path)
    work = tmp_path / "work"
    store = open_store(url)
    try:
        service = RehearsalService(store)
        run = service.create_run(copy_example(tmp_path / "inventory"))
        attempt = service.enqueue_attempt(run.id)
        killed = run_cli(["worker", "--database", url, "--work-dir", str(work), "--lease-seconds", "30"],
                         crash="rehearsal.receipt:after-commit")
        assert killed.returncode == -9, killed.describe()  # SIGKILLed mid-Attempt, after its first Receipt
        left = work / "sandboxes" / attempt.id
        assert left.is_dir() and any(left.iterdir()), "the killed worker left its sandbox behind"
        service.abort(attempt.id, "the worker died")
        other = store.read(lambda tx: tx.rehearsal.get_attempt(attempt.id))
        assert other is not None and str(other.status) == "ABORTED"
        keep = work / "sandboxes" / "att_of_another_database"  # unknown to this store: left alone
        keep.mkdir()
        build_worker(store, work, WorkerConfig(poll_interval=0.01, worker_id="sweeper")).run(max_idle_polls=1)
        assert not left.exists()
        assert keep.is_dir()
    finally:
        store.close()
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize(("args", "expected"), [
    (["worker", "--lease-seconds", "abc"],
     "fencepost worker: Invalid value for '--lease-seconds' (env var: 'FENCEPOST_LEASE_SECONDS'): Input should be"),
    (["host", "resolve", "inv_x", "--as", "ops:me", "--succeeded"],
     "fencepost host resolve: Missing option '--note'. (see `fencepost host resolve --help`)"),
    (["nosuch"], "fencepost: No such command 'nosuch'. (see `fencepost --help`)"),
    (["worker", "--no-such-flag"], "fencepost worker: No such option: --no-such-flag"),
])
def test_a_usage_error_is_one_line_naming_the_command(args: list[str], expected: str) -> None:
    """From a new user's trial: Click's usage errors came as a usage block and a framed box of 4-5 lines."""
    result = _cli(*args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(expected), result.stderr
    assert "╭" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["--concurrency", "0"], "fencepost: concurrency must be between 1 and 1000"),
    (["--time-limit", "x"], "fencepost: --time-limit takes KIND=SECONDS"),
    (["--sandbox-max-bytes", "1"], "fencepost: the sandbox disk cap must be"),
])
def test_a_worker_setting_out_of_range_is_refused_before_a_database_is_looked_for(
        args: list[str], expected: str) -> None:
    """It came after "no control database exists yet" (exit 4) when the database was missing too."""
    result = _cli("worker", *args, "-d", "sqlite:///no-such-dir/never.db")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(expected), result.stderr
