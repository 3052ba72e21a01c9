"""``fencepost package install --target ... --wait`` and ``fencepost package deliveries`` through the real CLI code,
with a real ``fencepost worker`` process running the delivery (ADR 0055)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from delivery.kit import THREE, add_target, drain, ledger, release, target_file, write_package
from fencepost.catalog.lifecycle import CatalogService
from fencepost.cli.app import app as cli
from fencepost.rehearsal.service import RehearsalService, release_gate
from fencepost.store import open_store
from fencepost.store.base import Store
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
    alone = runner.invoke(cli, ["package", "install", "shop", "--target", "tenant-a", "--wait", "--wait-timeout", "0.5",
                                "-d", url])
    assert alone.exit_code == 1 and "no live `fencepost worker` serves deliveries" in alone.output, alone.output
    worker = start(worker_args(url, tmp_path / "worker-work", lease_seconds=5, poll_interval=0.05),
                   name="worker", stdout_path=tmp_path / "worker.log", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not store.read(lambda tx: tx.workers.list_workers()) and time.monotonic() < deadline:
            time.sleep(0.05)  # registered: the install below must not warn that no worker serves deliveries
        done = runner.invoke(cli, ["package", "install", "shop", "--targets", "env=prod", "--wait",
                                   "--wait-timeout", "60", "-d", url])
    finally:
        kill_all([worker])
    assert done.exit_code == 0, done.output
    assert "0 deliveries submitted, 1 existing" in done.output  # the one the worker-less --wait submitted
    assert "tenant-a" in done.output and "succeeded  3 migration(s) applied; matches rehearsal" in done.output
    assert "deliveries: 1/1 settled: 1 succeeded" in done.output  # the fleet's summary line
    assert "no live `fencepost worker`" not in done.output
    assert [r[2] for r in ledger(path)] == list(THREE)
    again = runner.invoke(cli, ["package", "install", "shop", "--target", "tenant-a", "-d", url, "--json"])
    assert again.exit_code == 0, again.output
    (delivery,) = json.loads(again.output)["deliveries"]
    assert delivery["status"] == "succeeded"  # the same command returns the existing invocation
    repeated = runner.invoke(cli, ["package", "install", "shop", "--target", "tenant-a", "-d", url])
    assert "0 deliveries submitted, 1 existing (submitted before; nothing runs twice)" in repeated.output
    shown = runner.invoke(cli, ["package", "deliveries", "shop", "-d", url])
    assert shown.exit_code == 0, shown.output
    assert "tenant-a: shop 1.0.0  succeeded" in shown.output
    assert "migrate-001  0001_accounts succeeded applied  ledger 0001_accounts applied" in shown.output
    assert "evidence: matches rehearsal (deliver_and_install, from fresh)" in shown.output
    as_json = json.loads(runner.invoke(cli, ["package", "deliveries", "shop", "-d", url, "--json"]).output)
    assert [d["target"] for d in as_json] == ["tenant-a"] and as_json[0]["evidence"]["matches_rehearsal"] is True
    assert as_json[0]["evidence"]["rehearsal_attempt_id"].startswith("att_")  # what it was held to, for an audit
    assert as_json[0]["evidence"]["rehearsal_run_id"].startswith("run_")


def _published_not_installed(store: Store, package: Path, work_dir: Path) -> None:
    service = RehearsalService(store)
    run = service.create_run(package)
    for _ in range(2):
        service.enqueue_attempt(run.id)
        drain(store, work_dir)
    CatalogService(store, release_gate=release_gate).publish(package)


def test_a_target_typo_is_refused_before_the_installation_moves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = open_store(url, create=True)
    store.migrate()
    release(store, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    newer = write_package(tmp_path, "shop", "1.1.0", {**THREE, "0004_more": "CREATE TABLE more (id INTEGER);\n"},
                          previous=("1.0.0", "0003_audit"))
    _published_not_installed(store, newer, tmp_path / "work")
    add_target(store, tmp_path, "tenant-a", {"env": "prod"})
    installed = store.read(lambda tx: tx.catalog.get_installation("shop"))
    runner = CliRunner()
    for option in (["--target", "tenant-typo"], ["--targets", "env=prdo"], ["--targets", "env"]):
        refused = runner.invoke(cli, ["package", "install", "shop", *option, "-d", url])
        assert refused.exit_code == 2, refused.output
        now = store.read(lambda tx: tx.catalog.get_installation("shop"))
        assert now is not None and installed is not None and now.publication_id == installed.publication_id, option
    moved = runner.invoke(cli, ["package", "install", "shop", "--target", "tenant-a", "-d", url])
    assert moved.exit_code == 0 and "installed shop 1.1.0: 1 delivery submitted" in moved.output, moved.output


def test_deliveries_are_listed_in_target_name_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = open_store(url, create=True)
    store.migrate()
    release(store, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    names = ["tenant-f", "tenant-b", "tenant-e", "tenant-a", "tenant-d", "tenant-c"]
    for name in names:
        add_target(store, tmp_path, name, {"env": "prod"})
    runner = CliRunner()
    submitted = runner.invoke(cli, ["package", "install", "shop", "--targets", "env=prod", "-d", url])
    assert submitted.exit_code == 0, submitted.output
    shown = json.loads(runner.invoke(cli, ["package", "deliveries", "shop", "-d", url, "--json"]).output)
    assert [d["target"] for d in shown] == sorted(names)
    text = runner.invoke(cli, ["package", "deliveries", "shop", "-d", url]).output
    assert [line.split(":")[0] for line in text.splitlines() if line.startswith("tenant-")] == sorted(names)


def test_a_failed_delivery_names_redeliver_and_redeliver_runs_it_anew(tmp_path: Path) -> None:
    """A new-user trial: the README's target file was missing, the delivery failed, and the same command again
    printed the old failure with no word of --redeliver."""
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = open_store(url, create=True)
    store.migrate()
    release(store, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    missing = tmp_path / "tenant-b.db"  # not created: the delivery fails
    runner = CliRunner()
    assert runner.invoke(cli, ["target", "add", "tenant-b", f"sqlite://{missing}", "-d", url]).exit_code == 0
    worker = start(worker_args(url, tmp_path / "worker-work", lease_seconds=5, poll_interval=0.05),
                   name="worker", stdout_path=tmp_path / "worker.log", cwd=tmp_path)
    try:
        failed = runner.invoke(cli, ["package", "install", "shop", "--target", "tenant-b", "--wait",
                                     "--wait-timeout", "60", "-d", url])
        assert failed.exit_code == 1, failed.output
        assert "a failed delivery is not run again by the same command" in failed.output
        assert "(tenant-b), then install again with --redeliver" in failed.output
        again = runner.invoke(cli, ["package", "install", "shop", "--target", "tenant-b", "-d", url])
        assert "0 deliveries submitted, 1 existing" in again.output and "--redeliver" in again.output
        target_file(tmp_path, "tenant-b")
        fixed = runner.invoke(cli, ["package", "install", "shop", "--target", "tenant-b", "--redeliver", "--wait",
                                    "--wait-timeout", "60", "-d", url])
    finally:
        kill_all([worker])
    assert fixed.exit_code == 0, fixed.output
    assert "a failed delivery is not run again" not in fixed.output
    assert [r[2] for r in ledger(missing)] == list(THREE)
    store.close()


def test_install_to_several_named_targets_delivers_to_each_of_them(tmp_path: Path) -> None:
    # `--target a --target b --target c` delivered to c alone and said "1 delivery submitted" (a trial).
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = open_store(url, create=True)
    store.migrate()
    release(store, write_package(tmp_path, "shop", "1.0.0", THREE), tmp_path / "work")
    runner = CliRunner()
    for name in ("c", "a", "b"):
        added = runner.invoke(cli, ["target", "add", name, f"sqlite://{target_file(tmp_path, name)}", "-d", url])
        assert added.exit_code == 0, added.output
    typo = runner.invoke(cli, ["package", "install", "shop", "--target", "a", "--target", "nobody", "-d", url])
    assert typo.exit_code == 2 and "no target nobody" in typo.output, typo.output
    text = runner.invoke(cli, ["package", "install", "shop", "--target", "c", "--target", "a", "--target", "b",
                               "--target", "a", "-d", url])
    assert text.exit_code == 0 and "3 deliveries submitted" in text.output, text.output
    again = runner.invoke(cli, ["package", "install", "shop", "--target", "b", "--target", "c", "--target", "a",
                                "-d", url, "--json"])
    assert again.exit_code == 0, again.output
    assert [d["target"] for d in json.loads(again.output)["deliveries"]] == ["a", "b", "c"]  # the same three
    both = runner.invoke(cli, ["package", "install", "shop", "--target", "a", "--targets", "env=prod", "-d", url])
    assert both.exit_code == 2 and "or a label selector" in both.output, both.output
    store.close()
