"""Acceptance: the ``fencepost`` command line as an operator uses it (issue 2, part 1).

Every command runs as a real subprocess (``python -m fencepost.cli``) against a SQLite control database
in a temporary directory; workers are real ``fencepost worker`` processes.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from acceptance_support import (
    EXAMPLE_PACKAGE,
    SCENARIOS,
    CliResult,
    Env,
    assert_one_line_error,
    parse_instant,
    slow_package,
    small_package,
    wait_until,
)

from fencepost.core.errors import LeaseLost
from fencepost.rehearsal.handler import KIND

ISO_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")


def _normalized(text: str) -> str:
    """Help text without rich's box drawing and line wrapping."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _keys(v)
    elif isinstance(value, list):
        for v in value:
            yield from _keys(v)


def _assert_no_token_field(data: Any) -> None:
    assert not [k for k in _keys(data) if "token" in k.lower()], f"a token field is exposed: {data}"


# ── help ──
HELP = {
    (): ["migrate", "worker", "rehearse", "rehearsal", "fenced leases"],
    ("migrate",): ["schema", "--database", "--json"],
    ("audit",): ["integrity", "fingerprint", "Exit 0"],
    ("worker",): ["claim commands", "heartbeat", "SIGTERM", "--lease-seconds", "--work-dir", "--log-format",
                  "fencepost[otel]"],
    ("rehearse",): ["PACKAGE_DIR", "release gate", "--attempts", "--json"],
    ("rehearsal",): ["create", "list", "attempt", "status", "compare", "gate", "reconcile", "abort"],
    ("rehearsal", "create"): ["PACKAGE_DIR", "READY"],
    ("rehearsal", "list"): ["List rehearsals"],
    ("rehearsal", "attempt"): ["RUN_ID", "Enqueue an Attempt"],
    ("rehearsal", "status"): ["RUN_ID", "Receipts", "--evidence", "EXPIRED", "no live worker"],
    ("workers",): ["live", "three heartbeat intervals", "stopped renewing", "expired", "--json"],
    ("rehearsal", "compare"): ["RUN_ID", "semantic fingerprint"],
    ("rehearsal", "gate"): ["RUN_ID", "release gate", "exit 1"],
    ("rehearsal", "reconcile"): ["ATTEMPT_ID", "EXPIRED"],
    ("rehearsal", "abort"): ["ATTEMPT_ID", "PENDING or RUNNING"],
}


def _command_paths() -> list[tuple[str, ...]]:
    """Every command path of the CLI (root included), read from the typer app itself."""
    import click

    from fencepost.cli.app import command_tree

    paths: list[tuple[str, ...]] = []

    def walk(command: click.Command, prefix: tuple[str, ...]) -> None:
        paths.append(prefix)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, (*prefix, name))

    walk(command_tree(), ())
    return paths


COMMAND_PATHS = _command_paths()


def test_help_cases_name_real_commands() -> None:
    """The commands this suite knows in detail still exist (a rename must update the checks below)."""
    assert set(HELP) <= set(COMMAND_PATHS)


def _help_in_process(command: tuple[str, ...]) -> tuple[int, str, str]:
    """``fencepost COMMAND --help`` through click's test runner, in this process, as a 200-column terminal
    without colour (what ``run_cli`` gives a subprocess): ``(exit code, stdout, stderr)``."""
    from typer.testing import CliRunner

    from fencepost.cli.app import app

    runner = CliRunner()
    result = runner.invoke(app, [*command, "--help"], prog_name="fencepost",
                           env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("command", COMMAND_PATHS, ids=lambda c: " ".join(c) or "root")
def test_help_exits_zero_and_explains(env: Env, command: tuple[str, ...]) -> None:
    """Every command's ``--help`` exits 0, names the command and says what it does. The commands this suite
    knows in detail (``HELP``) run as real subprocesses; the other 70-odd run in process, the same typer app
    through click's runner, since each subprocess costs a second of CPU to start and says nothing more."""
    from fencepost.cli.app import command_tree

    click_command = command_tree()
    for name in command:
        click_command = click_command.commands[name]  # type: ignore[attr-defined]
    summary = (click_command.help or "").strip()
    assert summary, f"`fencepost {' '.join(command)}` has no help text"
    if command in HELP:
        result = env.cli(*command, "--help", db=False)
        code, stdout, stderr = result.returncode, result.stdout, result.stderr
        assert code == 0, result.describe()
    else:
        code, stdout, stderr = _help_in_process(command)
        assert code == 0, stdout + stderr
    assert stderr == "", stderr
    text = _normalized(stdout)
    assert " ".join(("Usage: fencepost", *command)) in text
    first_words = " ".join(summary.split()[:5])
    assert _normalized(first_words).lower() in text.lower(), f"{first_words!r} not in help:\n{stdout}"
    for needle in HELP.get(command, []):
        assert needle.lower() in text.lower(), f"{needle!r} missing from help of {command}:\n{stdout}"


def test_help_paragraphs_leave_line_breaks_to_the_terminal() -> None:
    """No command's help keeps the source's line breaks inside a paragraph: typer prints them as they are, so an
    80-column terminal showed every 120-column source line as a long line and a short one."""
    from fencepost.cli.app import command_tree

    root = command_tree()
    broken = []
    for command in COMMAND_PATHS:
        click_command = root
        for name in command:
            click_command = click_command.commands[name]  # type: ignore[attr-defined]
        for paragraph in (click_command.help or "").split("\n\n"):
            if "\n" in paragraph and not paragraph.startswith("\b"):
                broken.append(f"fencepost {' '.join(command)}: {paragraph[:60]!r}")
    assert not broken, broken


def test_version(env: Env) -> None:
    from fencepost import __version__

    result = env.cli("--version", db=False)
    assert result.returncode == 0 and result.stdout.strip() == f"fencepost {__version__}", result.describe()


# ── schema ──
UNMIGRATED_COMMANDS = {
    "rehearsal list": ("rehearsal", "list"),
    "rehearse": ("rehearse", str(EXAMPLE_PACKAGE), "--work-dir", "work"),
    "rehearsal gate": ("rehearsal", "gate", "run_missing"),
    "worker": ("worker", "--work-dir", "work", "--log-format", "json"),
}


@pytest.mark.parametrize("database", ["missing-file", "empty-database"])
@pytest.mark.parametrize("name", sorted(UNMIGRATED_COMMANDS))
def test_unmigrated_database_is_refused_with_one_line(env: Env, name: str, database: str) -> None:
    if database == "empty-database":
        conn = sqlite3.connect(env.db_path)
        conn.execute("CREATE TABLE unrelated (x INTEGER)")
        conn.close()
    result = env.cli(*UNMIGRATED_COMMANDS[name])
    assert_one_line_error(result, 4, "`fencepost migrate`")
    if database == "missing-file":
        assert not env.db_path.exists(), "a refused command must not create the control database"
    else:
        tables = {r["name"] for r in env.db.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {"unrelated"}, "a refused command must not create any table"
    env.assert_no_secrets()


def test_migrate_is_idempotent(env: Env) -> None:
    first = env.cli("migrate", "--json")
    assert first.returncode == 0, first.describe()
    data = first.json()
    assert data["backend"] == "sqlite" and data["schema_version"] >= 1
    assert data["applied"] and all(re.fullmatch(r"\d{4}_\w+", name) for name in data["applied"])

    second = env.cli("migrate")
    assert second.returncode == 0, second.describe()
    assert "already current" in second.stdout
    assert f"schema at version {data['schema_version']}" in second.stdout

    third = env.cli("migrate", "--json")
    assert third.returncode == 0, third.describe()
    assert third.json() == {"backend": "sqlite", "schema_version": data["schema_version"], "applied": []}
    assert env.db.scalar("SELECT count(*) FROM fencepost_schema") == len(data["applied"])

    listed = env.cli("rehearsal", "list", "--json")
    assert listed.returncode == 0 and listed.json() == [], listed.describe()
    env.assert_no_secrets()


# ── bad input: one line, exit 2, nothing written ──
BAD_MANIFESTS = {
    "not-toml": '[package\nname = "x"\n',
    "missing-version": '[package]\nname = "broken"\n',
    "unknown-key": '[package]\nname = "broken"\nversion = "1.0.0"\ncolour = "red"\n',
    "bad-name": '[package]\nname = "Not A Name"\nversion = "1.0.0"\n',
    "missing-seed-file": '[package]\nname = "broken"\nversion = "1.0.0"\nseed = ["seed/absent.sql"]\n',
    "path-escape": '[package]\nname = "broken"\nversion = "1.0.0"\nseed = ["../outside.sql"]\n',
    "previous-through-unknown": '[package]\nname = "broken"\nversion = "1.1.0"\nprevious_version = "1.0.0"\n'
                                'previous_through = "0009_nope"\n',
}


@pytest.fixture(scope="module")
def bad_input_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One migrated database shared by the bad-input cases: none of them may write a single row."""
    env = Env(tmp_path_factory.mktemp("bad-input"))
    env.migrate()
    yield env
    env.close()


def _assert_nothing_written(env: Env) -> None:
    counts = env.db.counts()
    assert all(n == 0 for n in counts.values()), f"bad input left rows behind: {counts}"


@pytest.mark.parametrize("command", ["create", "rehearse"])
@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_malformed_manifest(bad_input_env: Env, tmp_path: Path, case: str, command: str) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "migrations").mkdir(parents=True)
    (pkg / "migrations" / "0001_a.up.sql").write_text("CREATE TABLE a (id INTEGER PRIMARY KEY);\n")
    (tmp_path / "outside.sql").write_text("SELECT 1;\n")
    (pkg / "fencepost-package.toml").write_text(BAD_MANIFESTS[case])
    args = (("rehearsal", "create", str(pkg)) if command == "create"
            else ("rehearse", str(pkg), "--work-dir", str(tmp_path / "work")))
    assert_one_line_error(bad_input_env.cli(*args), 2)
    _assert_nothing_written(bad_input_env)
    bad_input_env.assert_no_secrets()


@pytest.mark.parametrize("command", ["create", "rehearse"])
def test_missing_package_dir(bad_input_env: Env, tmp_path: Path, command: str) -> None:
    missing = tmp_path / "no-such-package"
    args = (("rehearsal", "create", str(missing)) if command == "create"
            else ("rehearse", str(missing), "--work-dir", str(tmp_path / "work")))
    assert_one_line_error(bad_input_env.cli(*args), 2, "does not exist")
    _assert_nothing_written(bad_input_env)


@pytest.mark.parametrize("command", ["attempt", "status", "compare", "gate"])
def test_unknown_rehearsal_id(bad_input_env: Env, command: str) -> None:
    assert_one_line_error(bad_input_env.cli("rehearsal", command, "run_doesnotexist"), 2, "run_doesnotexist")
    _assert_nothing_written(bad_input_env)


@pytest.mark.parametrize("command", ["reconcile", "abort"])
def test_unknown_attempt_id(bad_input_env: Env, command: str) -> None:
    assert_one_line_error(bad_input_env.cli("rehearsal", command, "att_doesnotexist"), 2, "att_doesnotexist")
    _assert_nothing_written(bad_input_env)


@pytest.mark.parametrize("value", ["0", "0.05", "3601", "-1"])
@pytest.mark.parametrize("command", ["worker", "rehearse"])
def test_bad_lease_seconds(bad_input_env: Env, tmp_path: Path, command: str, value: str) -> None:
    work = str(tmp_path / "work")
    args = (("worker", "--work-dir", work, "--lease-seconds", value) if command == "worker"
            else ("rehearse", str(EXAMPLE_PACKAGE), "--work-dir", work, "--lease-seconds", value))
    assert_one_line_error(bad_input_env.cli(*args), 2, "lease duration")
    _assert_nothing_written(bad_input_env)
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("option", [("--poll-interval", "0"), ("--poll-interval", "61"), ("--batch-size", "0"),
                                    ("--batch-size", "1001"), ("--worker-id", "x" * 201)],
                         ids=lambda o: f"{o[0]}={o[1][:8]}")
def test_bad_worker_options(bad_input_env: Env, tmp_path: Path, option: tuple[str, str]) -> None:
    result = bad_input_env.cli("worker", "--work-dir", str(tmp_path / "work"), *option)
    assert_one_line_error(result, 2)
    _assert_nothing_written(bad_input_env)


@pytest.mark.parametrize("command", [("worker", "--work-dir", "work"), ("serve", "--work-dir", "work"),
                                     ("relay", "--sink", "webhook:http://127.0.0.1:9/x")], ids=lambda c: c[0])
def test_bad_log_format_is_a_usage_error_naming_the_choices(bad_input_env: Env, tmp_path: Path,
                                                            command: tuple[str, ...]) -> None:
    """--log-format is one option shared by the three long-running commands: any other value than its
    choices is refused before the command runs, in one line that names them."""
    args = [str(tmp_path / a) if a == "work" else a for a in command]
    result = bad_input_env.cli(*args, "--log-format", "xml")
    assert result.returncode == 2, result.describe()
    assert result.stdout.strip() == "", result.describe()
    [line] = result.stderr_lines
    assert line.startswith(f"fencepost {command[0]}: "), line
    assert "--log-format" in line and "'xml'" in line and "'auto', 'json', 'text'" in line, line
    _assert_nothing_written(bad_input_env)


@pytest.mark.parametrize(("url", "code", "needle"), [
    ("mysql://db/x", 2, "unsupported database URL scheme"),
    ("sqlite:///:memory:", 2, "in-memory"),
    ("sqlite:///{root}/c.db?journal_mode=bogus", 2, "journal_mode"),
    ("sqlite:///{root}/no/such/dir/c.db", 5, "unable to open"),
], ids=["scheme", "memory", "option", "unwritable"])
def test_bad_database_url(env: Env, url: str, code: int, needle: str) -> None:
    result = env.cli("migrate", "-d", url.format(root=env.root), db=False)
    line = assert_one_line_error(result, code, needle)
    assert str(env.root) not in line, "an error message must not carry the database path"


# ── reconcile and abort ──
@pytest.mark.slow
def test_reconcile_refuses_an_active_lease_and_returns_an_expired_one(migrated: Env, tmp_path: Path) -> None:
    run = migrated.cli("rehearsal", "create", str(small_package(tmp_path / "pkg")), "--json").json()
    held = migrated.cli("rehearsal", "attempt", run["id"], "--json").json()
    expiring = migrated.cli("rehearsal", "attempt", run["id"], "--json").json()
    store = migrated.service.store

    # The test process holds the first command's lease like a live worker would (10 minutes).
    long_lease = store.transact(lambda tx: tx.outbox.claim(owner="holder", kinds=[KIND], limit=1,
                                                           lease_seconds=600))[0].lease
    assert long_lease.command_id == held["outbox"]["command_id"]
    result = migrated.cli("rehearsal", "reconcile", held["id"])
    line = assert_one_line_error(result, 3, "active")
    shown = ISO_RE.search(line)
    assert shown, f"no expiry time in {line!r}"
    row = migrated.db.attempt(held["id"])
    assert parse_instant(shown.group(0)) == parse_instant(row["lease_until"])
    assert row["command_status"] == "PROCESSING" and row["lease_owner"] == "holder" and row["delivery_count"] == 1
    assert "reconcile" not in [e["event"] for e in migrated.db.lease_events(long_lease.command_id)]

    # The second one gets a short lease that we let expire; reconcile then returns it to PENDING.
    short = store.transact(lambda tx: tx.outbox.claim(owner="vanished", kinds=[KIND], limit=1,
                                                      lease_seconds=0.2))[0].lease
    assert short.command_id == expiring["outbox"]["command_id"]
    wait_until(lambda: datetime.now(UTC) > short.until, what="the short lease to expire")
    result = migrated.cli("rehearsal", "reconcile", expiring["id"], "--json")
    assert result.returncode == 0, result.describe()
    view = result.json()
    _assert_no_token_field(view)
    assert view["outbox"]["status"] == "PENDING" and view["outbox"]["lease_owner"] is None
    assert [e["event"] for e in migrated.db.lease_events(short.command_id)] == ["claim", "reconcile"]

    # Abort the held one: its token is cleared, so the holder is fenced out.
    aborted = migrated.cli("rehearsal", "abort", held["id"], "--json", "--reason", "operator test")
    assert aborted.returncode == 0, aborted.describe()
    assert aborted.json()["status"] == "ABORTED" and aborted.json()["outbox"]["status"] == "ABORTED"
    with pytest.raises(LeaseLost):
        store.transact(lambda tx: tx.outbox.renew(long_lease, lease_seconds=600))
    again = migrated.cli("rehearsal", "abort", held["id"])
    assert_one_line_error(again, 3, "ABORTED")

    # A real worker takes the reconciled command: second delivery, gate passes on the latest Attempt.
    worker = migrated.start_worker("w", lease_seconds=5)
    final = migrated.wait_attempt(expiring["id"])
    assert final["status"] == "SUCCEEDED" and final["command_status"] == "DELIVERED"
    assert final["delivery_count"] == 2
    gate = migrated.cli("rehearsal", "gate", run["id"])
    assert gate.returncode == 0, gate.describe()
    assert worker.stop() == 0
    migrated.assert_no_secrets([long_lease.token, short.token])


# ── the main job ──
@pytest.mark.slow
def test_rehearse_example_prints_every_scenario_and_pass(migrated: Env) -> None:
    watch = migrated.watch_tokens()
    result = migrated.cli("rehearse", str(EXAMPLE_PACKAGE), "--work-dir", str(migrated.work_dir))
    assert result.returncode == 0, result.describe()
    for position, scenario in enumerate(SCENARIOS, start=1):
        lines = [line for line in result.stdout.splitlines() if f"[{position}/6] {scenario}" in line]
        assert len(lines) == 2, f"scenario {scenario} should be shown once per Attempt:\n{result.stdout}"
        assert all("SUCCEEDED" in line for line in lines)
    assert re.search(r"release gate for run_\w+: PASS", result.stdout), result.stdout
    assert "semantics match" in result.stdout
    assert result.stderr == ""
    migrated.assert_no_secrets(watch.stop())


@pytest.mark.slow
def test_rehearse_json_parses_and_passes(migrated: Env) -> None:
    result = migrated.cli("rehearse", str(EXAMPLE_PACKAGE), "--work-dir", str(migrated.work_dir), "--json")
    assert result.returncode == 0, result.describe()
    assert result.stderr == ""
    data = result.json()
    _assert_no_token_field(data)
    assert data["gate"]["passed"] is True
    assert all(check["passed"] for check in data["gate"]["checks"])
    assert data["rehearsal"]["package"] == {"name": "inventory", "version": "1.2.0", "previous_version": "1.1.0"}
    assert [a["status"] for a in data["attempts"]] == ["SUCCEEDED", "SUCCEEDED"]
    for attempt in data["attempts"]:
        assert [r["scenario"] for r in attempt["receipts"]] == list(SCENARIOS)
        assert {r["status"] for r in attempt["receipts"]} == {"SUCCEEDED"}
        assert {r["integrity"]["status"] for r in attempt["receipts"]} == {"ok"}
    assert data["comparison"]["comparable"] is True and data["comparison"]["equal"] is True
    assert data["gate"]["latest_attempt_id"] == data["attempts"][1]["id"]
    assert data["gate"]["baseline_attempt_id"] == data["attempts"][0]["id"]
    migrated.assert_no_secrets()


@pytest.mark.slow
def test_rehearse_that_times_out_exits_1_and_leaves_the_attempt_queued(migrated: Env, tmp_path: Path) -> None:
    result = migrated.cli("rehearse", str(slow_package(tmp_path / "slow")), "--work-dir", str(migrated.work_dir),
                          "--attempts", "1", "--timeout", "0.2")
    line = assert_one_line_error(CliResult(result.args, result.returncode, "", result.stderr), 1, "did not finish")
    assert "fencepost worker" in line
    (run,) = migrated.service.list_runs()
    (attempt,) = migrated.service.attempts(run.id)
    row = migrated.db.attempt(attempt.id)
    assert row["command_status"] == "PENDING" and row["lease_token"] is None, row  # released or never claimed
    assert migrated.cli("rehearsal", "gate", run.id).returncode == 1

    worker = migrated.start_worker("w", lease_seconds=5)
    final = migrated.wait_attempt(attempt.id)
    assert final["status"] == "SUCCEEDED" and final["command_status"] == "DELIVERED", final
    assert migrated.cli("rehearsal", "gate", run.id).returncode == 0
    assert worker.stop() == 0
    migrated.assert_no_secrets()


@pytest.mark.slow
def test_step_by_step_with_a_separate_worker(migrated: Env, tmp_path: Path) -> None:
    watch = migrated.watch_tokens()
    pkg = slow_package(tmp_path / "slow")
    created = migrated.cli("rehearsal", "create", str(pkg), "--json")
    assert created.returncode == 0, created.describe()
    run = created.json()
    assert run["status"] == "READY" and run["package"]["name"] == "bulkload"
    listed = migrated.cli("rehearsal", "list", "--json").json()
    assert [r["id"] for r in listed] == [run["id"]]

    # Gate before any Attempt: blocked.
    assert migrated.cli("rehearsal", "gate", run["id"]).returncode == 1

    first = migrated.cli("rehearsal", "attempt", run["id"], "--json").json()
    assert first["status"] == "PENDING" and first["outbox"]["status"] == "PENDING"
    assert first["outbox"]["delivery_count"] == 0

    # The latest Attempt is PENDING (no worker yet): the gate is blocked and says why.
    gate = migrated.cli("rehearsal", "gate", run["id"], "--json")
    assert gate.returncode == 1, gate.describe()
    checks = {c["name"]: c for c in gate.json()["checks"]}
    assert gate.json()["passed"] is False
    assert checks["latest_attempt_succeeded"]["passed"] is False
    assert "PENDING" in checks["latest_attempt_succeeded"]["reason"]
    text_gate = migrated.cli("rehearsal", "gate", run["id"])
    assert text_gate.returncode == 1 and "BLOCKED" in text_gate.stdout

    worker = migrated.start_worker("w", lease_seconds=2)  # default worker id: host:pid:random
    worker_id = worker.started_id()

    # While it runs, status shows the lease owner and deadline, never the token, and the gate is blocked.
    # The worker is held (SIGSTOP) so the Attempt cannot finish under the two reads; no other worker
    # exists, so its token stays current and it simply continues after SIGCONT.
    migrated.wait_receipt(first["id"], 3, "RUNNING")
    worker.send(signal.SIGSTOP)
    try:
        status = migrated.cli("rehearsal", "status", run["id"], "--json")
        running_gate = migrated.cli("rehearsal", "gate", run["id"])
    finally:
        worker.send(signal.SIGCONT)
    assert status.returncode == 0, status.describe()
    _assert_no_token_field(status.json())
    (running,) = status.json()["attempts"]
    assert running["status"] == "RUNNING" and running["outbox"]["status"] == "PROCESSING"
    assert running["outbox"]["lease_owner"] == worker_id and running["outbox"]["lease_until"]
    assert running_gate.returncode == 1, "the gate passed while the latest Attempt was still running"

    migrated.wait_attempt(first["id"])
    status = migrated.cli("rehearsal", "status", run["id"], "--json", "--evidence").json()
    _assert_no_token_field(status)
    (attempt,) = status["attempts"]
    assert attempt["status"] == "SUCCEEDED" and attempt["outbox"]["status"] == "DELIVERED"
    assert attempt["outbox"]["delivery_count"] == 1 and attempt["outbox"]["lease_owner"] is None
    assert [r["scenario"] for r in attempt["receipts"]] == list(SCENARIOS)
    for receipt in attempt["receipts"]:
        assert receipt["status"] == "SUCCEEDED" and receipt["delivery"] == 1
        assert receipt["integrity"]["status"] == "ok"
        assert receipt["evidence"]["execution"]["worker"] == worker_id
    seeded = attempt["receipts"][2]["evidence"]["result"]["tables"]["tally"]
    assert seeded["rows"] == 1

    # One successful Attempt: nothing to compare yet; it is the gate's baseline and the gate passes.
    compare = migrated.cli("rehearsal", "compare", run["id"], "--json")
    assert compare.returncode == 0 and compare.json()["comparable"] is False, compare.describe()
    assert migrated.cli("rehearsal", "gate", run["id"]).returncode == 0

    second = migrated.cli("rehearsal", "attempt", run["id"], "--json").json()
    assert second["seq"] == 2
    migrated.wait_attempt(second["id"])
    compare = migrated.cli("rehearsal", "compare", run["id"], "--json")
    assert compare.returncode == 0, compare.describe()
    comparison = compare.json()
    assert comparison["comparable"] is True and comparison["equal"] is True, comparison
    assert comparison["baseline"]["attempt_id"] == first["id"]
    assert comparison["candidate"]["attempt_id"] == second["id"]
    assert comparison["baseline"]["semantic_fingerprint"] == comparison["candidate"]["semantic_fingerprint"]
    text_compare = migrated.cli("rehearsal", "compare", run["id"])
    assert "semantics match" in text_compare.stdout

    gate = migrated.cli("rehearsal", "gate", run["id"], "--json")
    assert gate.returncode == 0, gate.describe()
    assert gate.json()["passed"] is True and gate.json()["latest_attempt_id"] == second["id"]
    text_gate = migrated.cli("rehearsal", "gate", run["id"])
    assert text_gate.returncode == 0 and "PASS" in text_gate.stdout

    worker.send(signal.SIGTERM)
    assert worker.wait_exit() == 0
    stopped = worker.events("worker_stopped")
    assert len(stopped) == 1 and stopped[0]["msg"] == "worker stopped" and stopped[0]["delivered"] == 2
    assert {e["command_id"] for e in worker.events("claimed")} == {first["outbox"]["command_id"],
                                                                   second["outbox"]["command_id"]}

    tokens = watch.stop()
    assert tokens, "no lease token was ever seen while PROCESSING: the leak check would be vacuous"
    migrated.assert_no_secrets(tokens)
    for result in migrated.results:
        if result.stdout.lstrip().startswith(("{", "[")):
            _assert_no_token_field(json.loads(result.stdout))


@pytest.mark.slow
def test_rehearse_serves_only_its_own_attempts(migrated: Env) -> None:
    """Issue 10 item 5: work queued by others (here: three Attempts of another rehearsal, queued before) is not
    rehearse's to run; it stays PENDING for ``fencepost worker`` and rehearse's own Attempts run at once."""
    created = migrated.cli("rehearsal", "create", str(EXAMPLE_PACKAGE), "--json")
    assert created.returncode == 0, created.describe()
    foreign_run = created.json()["id"]
    for _ in range(3):
        queued = migrated.cli("rehearsal", "attempt", foreign_run, "--json")
        assert queued.returncode == 0, queued.describe()
    result = migrated.cli("rehearse", str(EXAMPLE_PACKAGE), "--work-dir", str(migrated.work_dir), "--json")
    assert result.returncode == 0, result.describe()
    assert [a["status"] for a in result.json()["attempts"]] == ["SUCCEEDED", "SUCCEEDED"]
    foreign = migrated.db.rows("SELECT a.status AS attempt, c.status AS command, c.delivery_count AS claims "
                               "FROM rehearsal_attempts a JOIN commands c ON c.id = a.command_id "
                               f"WHERE a.run_id = '{foreign_run}'")
    assert foreign == [{"attempt": "PENDING", "command": "PENDING", "claims": 0}] * 3, foreign
