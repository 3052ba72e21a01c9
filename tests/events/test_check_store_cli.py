"""``fencepost check-store events|tenant-isolation`` (host-spec U23, U25; ADR 0040), run as a user would."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from fencepost.cli.check_store_cmd import ISOLATION_WARNING
from fencepost.events.conformance import RELAY_WARNING
from fencepost.store import open_store
from helpers.processes import run_cli


def _database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'probe.db'}"
    open_store(url).migrate()
    return url


def test_events_prints_the_relay_warning_first_and_passes(tmp_path: Path) -> None:
    done = run_cli(["check-store", "events", "--database", _database(tmp_path), "--tenant", "probe"])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"WARNING: {RELAY_WARNING}"
    assert lines[-1] == "events: passed: 6 passed, 0 failed, 0 skipped"


def test_a_failing_check_exits_1_and_json_keeps_stdout_one_document(tmp_path: Path) -> None:
    url = _database(tmp_path)
    # A store that refuses the outbox row of every control event: an append error fails the check (U24).
    with sqlite3.connect(tmp_path / "probe.db") as conn:
        conn.execute("CREATE TRIGGER refuse_controls BEFORE INSERT ON host_event_outbox "
                     "WHEN NEW.event_id LIKE '%:control-%' BEGIN SELECT RAISE(ABORT, 'no controls'); END")
    done = run_cli(["check-store", "events", "--database", url, "--tenant", "probe", "--json"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith(f"WARNING: {RELAY_WARNING}")
    data = json.loads(done.stdout)
    assert data["passed"] is False and data["suite"] == "events"
    failed = {c["id"]: c["error"] for c in data["checks"] if c["status"] == "failed"}
    assert set(failed) == {"outbox-after-plain", "tx-outbox-after-plain"}
    assert all("no controls" in error for error in failed.values())


def test_tenant_isolation_passes_on_fencepost(tmp_path: Path) -> None:
    done = run_cli(["check-store", "tenant-isolation", "--database", _database(tmp_path), "--tenant", "probe"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == f"WARNING: {ISOLATION_WARNING}"  # its own writes, not the relay's
    assert "tenant-isolation: passed: 2 passed, 0 failed, 0 skipped" in done.stdout


def test_audit_is_sound_after_either_suite(tmp_path: Path) -> None:
    # A new-user trial: audit exited 1 after tenant-isolation, on the probe parents' missing verdict events and
    # a probe row left running. A probe is a well-formed history; audit must not mislead an auditor about it.
    url = _database(tmp_path)
    for suite in ("tenant-isolation", "events"):
        done = run_cli(["check-store", suite, "--database", url, "--tenant", "probe"])
        assert done.returncode == 0, done.stdout + done.stderr
        audited = run_cli(["audit", "--database", url])
        assert audited.returncode == 0, f"after {suite}: " + audited.stdout + audited.stderr
        assert audited.stdout.startswith("audit: sound")


def test_help_explains_the_probe_tenant_and_relays() -> None:
    done = run_cli(["check-store", "--help"])
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "pause outbox relays" in text and "Exit 1 on any failed check" in text
