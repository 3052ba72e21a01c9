"""``fencepost package install --target ... --wait`` and ``fencepost package deliveries`` through the real CLI code,
with a real ``fencepost worker`` process running the delivery (ADR 0055)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from delivery.kit import THREE, ledger, release, target_file, write_package
from fencepost.cli.app import app as cli
from fencepost.store import open_store
from helpers.processes import kill_all, start, worker_args


def test_install_to_a_target_waits_for_the_verdict_and_deliveries_show_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = open_store(url, create=True)
    store.migrate()
    release(store, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    path = target_file(tmp_path, "tenant-a")
    runner = CliRunner()
    assert runner.invoke(cli, ["target", "add", "tenant-a", f"sqlite://{path}", "--label", "env=prod",
                               "-d", url]).exit_code == 0
    missing = runner.invoke(cli, ["package", "install", "shop", "--target", "nobody", "-d", url])
    assert missing.exit_code == 2 and "no target nobody" in missing.output
    worker = start(worker_args(url, tmp_path / "worker-work", lease_seconds=5, poll_interval=0.05),
                   name="worker", stdout_path=tmp_path / "worker.log", cwd=tmp_path)
    try:
        done = runner.invoke(cli, ["package", "install", "shop", "--targets", "env=prod", "--wait",
                                   "--wait-timeout", "60", "-d", url])
    finally:
        kill_all([worker])
    assert done.exit_code == 0, done.output
    assert "1 delivery submitted" in done.output
    assert "tenant-a" in done.output and "succeeded  3 migration(s) applied; matches rehearsal" in done.output
    assert [r[2] for r in ledger(path)] == list(THREE)
    again = runner.invoke(cli, ["package", "install", "shop", "--target", "tenant-a", "-d", url, "--json"])
    assert again.exit_code == 0, again.output
    (delivery,) = json.loads(again.output)["deliveries"]
    assert delivery["status"] == "succeeded"  # the same command returns the existing invocation
    shown = runner.invoke(cli, ["package", "deliveries", "shop", "-d", url])
    assert shown.exit_code == 0, shown.output
    assert "tenant-a: shop 1.0.0  succeeded" in shown.output
    assert "migrate-001  0001_accounts succeeded applied  ledger 0001_accounts applied" in shown.output
    assert "evidence: matches rehearsal (deliver_and_install, from fresh)" in shown.output
    as_json = json.loads(runner.invoke(cli, ["package", "deliveries", "shop", "-d", url, "--json"]).output)
    assert [d["target"] for d in as_json] == ["tenant-a"] and as_json[0]["evidence"]["matches_rehearsal"] is True
