"""Issue 11 items 1 to 6 end to end on a real SQLite control store with in-process workers: own transactions,
host functions from a real installed entry point, pairing by numeric version, every down exercised,
NOT_APPLICABLE in status (text and JSON), and publish requiring a compared pair.

The real histories from ../shared/datasets are in test_datasets.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fencepost.catalog.lifecycle import CatalogService
from fencepost.core.errors import InvalidInput, NotAllowed
from fencepost.core.statuses import AttemptStatus, PublicationGate, ReceiptStatus
from fencepost.rehearsal.host_functions import ENV_VAR
from fencepost.rehearsal.service import release_gate
from helpers.processes import run_cli
from integration.rig import Rig, write_package

MANIFEST = "fencepost-package.toml"
OWN = "PRAGMA foreign_keys=OFF;\nBEGIN;\n{}\nCOMMIT;\nPRAGMA foreign_keys=ON;\n"


def _manifest(version: str = "1.0.0", extra: str = "") -> str:
    return f'[package]\nname = "hist"\nversion = "{version}"\n{extra}'


def _result(rig: Rig, attempt_id: str, position: int) -> dict[str, object]:
    result = rig.evidence(rig.receipts(attempt_id)[position - 1])["result"]
    assert isinstance(result, dict)
    return result


def test_issue_reproduction_a_broken_down_blocks_the_gate(rig: Rig) -> None:
    # migration 0001 without a down, and `DROP TABLE c,,;` as 0003's down: was gate PASS
    package = write_package(rig.tmp / "broken", {
        MANIFEST: _manifest(), "migrations/0001_a.up.sql": "CREATE TABLE a (x);",
        "migrations/0002_b.up.sql": "CREATE TABLE b (x);", "migrations/0002_b.down.sql": "DROP TABLE b;",
        "migrations/0003_c.up.sql": "CREATE TABLE c (x);", "migrations/0003_c.down.sql": "DROP TABLE c,,;"})
    run, [attempt] = rig.rehearse(package, attempts=1)
    assert attempt.status is AttemptStatus.FAILED
    receipt = rig.receipts(attempt.id)[5]
    assert (receipt.scenario, receipt.status) == ("uninstall_to_empty", ReceiptStatus.FAILED)
    evidence = rig.evidence(receipt)
    assert evidence["error"]["message"].startswith("down migration 0003_c failed: near \",\": syntax error")
    assert evidence["result"]["failed_down"] == "0003_c" and evidence["result"]["verified_downs"] == []
    report = rig.service.gate(run.id)
    assert not report.passed
    assert {c.name for c in report.blocking} >= {"latest_attempt_succeeded", "evidence_integrity"}


def test_downs_run_as_far_as_the_chain_goes_and_each_step_is_verified(rig: Rig) -> None:
    package = write_package(rig.tmp / "chain", {
        MANIFEST: _manifest(), "migrations/0001_a.up.sql": "CREATE TABLE a (x);",
        "migrations/0002_b.up.sql": "CREATE TABLE b (x);", "migrations/0002_b.down.sql": "DROP TABLE b;",
        "migrations/0003_c.up.sql": "CREATE TABLE c (x); CREATE INDEX c_x ON c (x);",
        "migrations/0003_c.down.sql": "DROP TABLE c;"})
    run, attempts = rig.rehearse(package)
    assert all(a.status is AttemptStatus.SUCCEEDED for a in attempts)
    result = _result(rig, attempts[0].id, 6)
    assert result["verified_downs"] == ["0003_c", "0002_b"] and result["chain_stops_at"] == "0001_a"
    assert result["reached_empty"] is False and "0001_a has no down file" in str(result["reason"])
    report = rig.service.gate(run.id)
    assert report.passed and "uninstall_to_empty" in report.exercised


def test_a_down_that_does_not_restore_the_schema_fails_naming_what_differs(rig: Rig) -> None:
    package = write_package(rig.tmp / "lossy", {
        MANIFEST: _manifest(), "migrations/0001_a.up.sql": "CREATE TABLE a (x);",
        "migrations/0001_a.down.sql": "DROP TABLE a;",
        "migrations/0002_i.up.sql": "CREATE INDEX a_x ON a (x); ALTER TABLE a ADD COLUMN y INTEGER DEFAULT 7;",
        "migrations/0002_i.down.sql": "DROP INDEX a_x;"})  # forgets the column
    _, [attempt] = rig.rehearse(package, attempts=1)
    evidence = rig.evidence(rig.receipts(attempt.id)[5])
    assert evidence["error"]["message"] == ("down migration 0002_i does not restore the schema from before its up "
                                            "(changed: table a)")
    assert evidence["result"]["schema_differences"] == {"missing": [], "unexpected": [], "changed": ["table a"]}


@pytest.mark.parametrize("uninstall_script", [False, True])
def test_a_down_that_edits_the_schema_through_writable_schema_is_refused(rig: Rig, uninstall_script: bool) -> None:
    # deleting the rows of sqlite_master instead of dropping leaves the schema as before the up, but the
    # table's pages orphaned: it was caught by the integrity check (gate PASS before that), and is now refused
    # outright, since the same edit on a target could remove fencepost's ledger (ADR 0102)
    corrupting = "PRAGMA writable_schema=ON;\nDELETE FROM sqlite_master WHERE name = 'b';\n"
    files = {MANIFEST: _manifest(extra='uninstall = "uninstall.sql"\n' if uninstall_script else ""),
             "migrations/0001_a.up.sql": "CREATE TABLE a (x);", "migrations/0001_a.down.sql": "DROP TABLE a;",
             "migrations/0002_b.up.sql": "CREATE TABLE b (x); INSERT INTO b VALUES (1);"}
    if uninstall_script:
        files["uninstall.sql"] = corrupting + "DROP TABLE a;\n"
    else:
        files["migrations/0002_b.down.sql"] = corrupting
    run, [attempt] = rig.rehearse(write_package(rig.tmp / "corrupting", files), attempts=1)
    receipt = rig.receipts(attempt.id)[5]
    assert (receipt.scenario, receipt.status) == ("uninstall_to_empty", ReceiptStatus.FAILED)
    message = rig.evidence(receipt)["error"]["message"]
    assert message.startswith("uninstall failed: not authorized" if uninstall_script
                              else "down migration 0002_b failed: not authorized"), message
    assert "makes the schema writable" in message
    assert not rig.service.gate(run.id).passed


def test_an_up_that_edits_the_schema_through_writable_schema_is_refused(rig: Rig) -> None:
    # it was caught by the integrity check on the package's own connection; now refused as it runs (ADR 0102)
    package = write_package(rig.tmp / "corrupting-up", {
        MANIFEST: _manifest(), "migrations/0001_a.up.sql": "CREATE TABLE a (x);",
        "migrations/0002_b.up.sql": "CREATE TABLE b (x); INSERT INTO b VALUES (1);\n"
                                    "PRAGMA writable_schema=ON;\nDELETE FROM sqlite_master WHERE name = 'b';\n"})
    run, [attempt] = rig.rehearse(package, attempts=1)
    failed = [r for r in rig.receipts(attempt.id) if r.status is ReceiptStatus.FAILED]
    assert failed, "the package ran to the end"
    assert "not authorized" in rig.evidence(failed[0])["error"]["message"]
    assert not rig.service.gate(run.id).passed


def test_own_transaction_scripts_and_an_odd_name_rehearse_as_written(rig: Rig) -> None:
    package = write_package(rig.tmp / "golang", {
        MANIFEST: _manifest(),
        "migrations/1_init.up.sql": OWN.format("CREATE TABLE a (id INTEGER PRIMARY KEY, parent INTEGER "
                                               "REFERENCES a (id));"),
        "migrations/1_init.down.sql": OWN.format("DROP TABLE a;"),
        # a double dot before up.sql: pairs with 2_rows.down.sql by numeric version
        "migrations/2_rows..up.sql": OWN.format("INSERT INTO a VALUES (1, NULL), (2, 1);"),
        "migrations/2_rows.down.sql": "DELETE FROM a;",
        "migrations/3_trigger.up.sql": "CREATE TRIGGER a_t AFTER INSERT ON a BEGIN SELECT 1; END;",
        "migrations/3_trigger.down.sql": "DROP TRIGGER a_t;"})
    run, attempts = rig.rehearse(package)
    assert [a.status for a in attempts] == [AttemptStatus.SUCCEEDED] * 2, [a.error for a in attempts]
    install = _result(rig, attempts[0].id, 1)
    assert install["transaction_modes"] == {"1_init": "own_transaction", "2_rows.": "own_transaction",
                                            "3_trigger": "wrapped"}
    assert install["pairing"] == {"2_rows.": "version"}
    uninstall = _result(rig, attempts[0].id, 6)
    assert uninstall["verified_downs"] == ["3_trigger", "2_rows.", "1_init"] and uninstall["remaining_objects"] == 0
    assert uninstall["transaction_modes"] == {"3_trigger": "wrapped", "2_rows.": "wrapped",
                                              "1_init": "own_transaction"}
    assert rig.service.gate(run.id).passed


def _entry_point_distribution(site: Path) -> None:
    """A real installed distribution (dist-info with entry_points.txt) providing ``test_nfc``."""
    (site / "fp_test_nfc.py").write_text(
        "import unicodedata\n\n\ndef nfc(value):\n    return None if value is None else "
        "unicodedata.normalize('NFC', str(value))\n", encoding="utf-8")
    info = site / "fp_test_nfc-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fp-test-nfc\nVersion: 1.2.3\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[fencepost.sql_functions]\ntest_nfc = fp_test_nfc:nfc\n",
                                           encoding="utf-8")


def test_host_functions_come_from_a_configured_entry_point(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    site = rig.tmp / "site"
    site.mkdir()
    _entry_point_distribution(site)
    monkeypatch.syspath_prepend(str(site))
    package = write_package(rig.tmp / "nfc", {
        MANIFEST: _manifest(extra='\n[sqlite]\nfunctions = { NFC = "test_nfc" }\n'),
        # 'e' + combining acute: NFC makes it one code point
        "migrations/0001_names.up.sql": "CREATE TABLE names (n TEXT);\n"
                                        "INSERT INTO names VALUES (NFC('e' || char(769)));",
        "migrations/0001_names.down.sql": "DROP TABLE names;"})
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(InvalidInput, match="SQL function NFC needs host function 'test_nfc'"):
        rig.service.create_run(package)  # installed but not configured: never loaded
    monkeypatch.setenv(ENV_VAR, "test_nfc")
    run, attempts = rig.rehearse(package)
    assert [a.status for a in attempts] == [AttemptStatus.SUCCEEDED] * 2, [a.error for a in attempts]
    install = _result(rig, attempts[0].id, 1)
    assert install["host_functions"] == {"NFC": {"implementation": "test_nfc", "module": "fp_test_nfc",
                                                 "distribution": "fp-test-nfc", "version": "1.2.3"}}
    assert rig.service.gate(run.id).passed


def test_rehearsal_create_refuses_a_missing_function_by_name(rig: Rig) -> None:
    package = write_package(rig.tmp / "missing", {
        MANIFEST: _manifest(extra='\n[sqlite]\nfunctions = { UNACCENT = "unaccent" }\n'),
        "migrations/0001_a.up.sql": "SELECT UNACCENT('x');"})
    done = run_cli(["rehearsal", "create", str(package), "--database", f"sqlite:///{rig.db_path}"])
    assert done.returncode == 2, done.describe()
    assert "SQL function UNACCENT needs host function 'unaccent', which is not available" in done.stderr
    assert "Traceback" not in done.stderr


def test_status_shows_not_applicable_with_its_reason(rig: Rig) -> None:
    package = write_package(rig.tmp / "plain", {MANIFEST: _manifest(),
                                                "migrations/0001_a.up.sql": "CREATE TABLE a (x);"})
    run, _ = rig.rehearse(package, attempts=1)
    url = f"sqlite:///{rig.db_path}"
    shown = run_cli(["rehearsal", "status", run.id, "--database", url, "--json"])
    assert shown.returncode == 0, shown.describe()
    receipts = json.loads(shown.stdout)["attempts"][0]["receipts"]
    states = {r["scenario"]: (r["status"], r["state"], r["not_applicable_reason"]) for r in receipts}
    assert states["upgrade_from_previous"] == ("SUCCEEDED", "NOT_APPLICABLE",
                                               "the manifest declares no previous version")
    assert states["uninstall_to_empty"][1] == "NOT_APPLICABLE"
    assert "no down migration can run" in str(states["uninstall_to_empty"][2])
    assert states["integrity_check"] == ("SUCCEEDED", "SUCCEEDED", None)
    text = run_cli(["rehearsal", "status", run.id, "--database", url])
    assert "NOT_APPLICABLE" in text.stdout
    assert "upgrade_from_previous: not applicable: the manifest declares no previous version" in text.stdout
    gate = run_cli(["rehearsal", "gate", run.id, "--database", url])
    assert "scenarios exercised: 4 of 6" in gate.stdout, gate.describe()
    assert "not exercised: upgrade_from_previous (not applicable: the manifest declares no previous" in gate.stdout
    assert "semantics were not compared" in gate.stdout
    # an Attempt's id where a rehearsal's is wanted says which id to give (a new user's trial)
    attempt_id = json.loads(shown.stdout)["attempts"][0]["id"]
    wrong = run_cli(["rehearsal", "status", attempt_id, "--database", url])
    assert wrong.returncode == 2 and "that is an Attempt id; name its rehearsal" in wrong.stderr, wrong.describe()


def test_publish_requires_a_compared_pair_unless_waived(rig: Rig) -> None:
    catalog = CatalogService(rig.store, release_gate=release_gate)
    one = write_package(rig.tmp / "one", {MANIFEST: _manifest("1.0.0"),
                                          "migrations/0001_a.up.sql": "CREATE TABLE a (x);"})
    run, _ = rig.rehearse(one, attempts=1)
    assert rig.service.gate(run.id).passed
    with pytest.raises(NotAllowed, match="passes on a single Attempt: its semantics were not compared") as caught:
        catalog.publish(one)
    assert caught.value.guard == "release_gate"
    waived = catalog.publish(one, allow_single_attempt=True).publication
    assert (waived.gate, waived.gate_run_id) == (PublicationGate.WAIVED, None)
    two = write_package(rig.tmp / "two", {MANIFEST: _manifest("2.0.0"),
                                          "migrations/0001_a.up.sql": "CREATE TABLE a (x);"})
    run_two, _ = rig.rehearse(two, attempts=1)
    url = f"sqlite:///{rig.db_path}"
    refused = run_cli(["package", "publish", str(two), "--database", url])
    assert refused.returncode == 6 and "--allow-single-attempt" in refused.stderr, refused.describe()
    rig.service.enqueue_attempt(run_two.id)
    rig.run_worker()
    published = run_cli(["package", "publish", str(two), "--database", url, "--json"])
    assert published.returncode == 0, published.describe()
    view = json.loads(published.stdout)["publication"]
    assert (view["gate"], view["gate_run_id"]) == ("passed", run_two.id)


def test_a_worker_without_the_function_fails_the_attempt_naming_it(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    site = rig.tmp / "site"
    site.mkdir()
    _entry_point_distribution(site)
    monkeypatch.syspath_prepend(str(site))
    package = write_package(rig.tmp / "nfc", {
        MANIFEST: _manifest(extra='\n[sqlite]\nfunctions = { NFC = "test_nfc" }\n'),
        "migrations/0001_names.up.sql": "CREATE TABLE names (n TEXT);"})
    monkeypatch.setenv(ENV_VAR, "*")
    run = rig.service.create_run(package)
    monkeypatch.delenv(ENV_VAR)  # the worker's environment does not configure it
    attempt = rig.service.enqueue_attempt(run.id)
    rig.run_worker()
    failed = rig.service.attempt(attempt.id)
    assert failed.status is AttemptStatus.FAILED
    assert "SQL function NFC needs host function 'test_nfc'" in str(failed.error)


def test_rehearse_prints_not_applicable_with_its_reason(rig: Rig) -> None:
    package = write_package(rig.tmp / "plain", {MANIFEST: _manifest(),
                                                "migrations/0001_a.up.sql": "CREATE TABLE a (x);"})
    done = run_cli(["rehearse", str(package), "--database", f"sqlite:///{rig.db_path}", "--attempts", "1",
                    "--work-dir", str(rig.tmp / "work")])
    assert done.returncode == 0, done.describe()
    assert "[5/6] upgrade_from_previous  NOT_APPLICABLE" in done.stdout, done.stdout
    assert "not applicable: the manifest declares no previous version" in done.stdout
    assert "scenarios exercised: 4 of 6" in done.stdout and "semantics were not compared" in done.stdout


def test_rehearse_of_a_failing_down_prints_no_bare_log_lines(rig: Rig) -> None:
    # A failed scenario is logged at WARNING by the in-process worker; rehearse configures no logging, so
    # Python's last-resort handler used to print "scenario finished" alone on stderr, once per Attempt.
    package = write_package(rig.tmp / "broken", {MANIFEST: _manifest(),
                                                 "migrations/0001_a.up.sql": "CREATE TABLE a (x);",
                                                 "migrations/0001_a.down.sql": "DROP TABLE a,,;"})
    done = run_cli(["rehearse", str(package), "--database", f"sqlite:///{rig.db_path}", "--attempts", "1",
                    "--work-dir", str(rig.tmp / "work")])
    assert done.returncode == 1, done.describe()
    assert "[6/6] uninstall_to_empty     FAILED" in done.stdout, done.stdout
    assert "down migration 0001_a failed" in done.stdout
    assert "scenario finished" not in done.stderr, done.describe()
    rows = [line for line in done.stdout.splitlines() if line.startswith("  [") and line.endswith(" ms")]
    assert len(rows) == 6 and "NOT_APPLICABLE" in rows[4], done.stdout
    assert len({len(row) for row in rows}) == 1, "\n".join(rows)  # one duration column, NOT_APPLICABLE included


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inventory"


def test_issue_reproduction_a_broken_down_below_a_gap_blocks_the_gate(rig: Rig) -> None:
    # the inventory example with 0002's down removed and `DROP TABLE c,,;` as 0001's down: was gate PASS,
    # "6 of 6 exercised", because the chain stopped at 0002 and 0001's down never ran
    package = rig.tmp / "inventory"
    shutil.copytree(EXAMPLE, package)
    [down_2] = (package / "migrations").glob("0002_*.down.sql")
    down_2.unlink()
    [down_1] = (package / "migrations").glob("0001_*.down.sql")
    down_1.write_text("DROP TABLE c,,;\n", encoding="utf-8")
    run, [attempt] = rig.rehearse(package, attempts=1)
    assert attempt.status is AttemptStatus.FAILED
    receipt = rig.receipts(attempt.id)[5]
    assert (receipt.scenario, receipt.status) == ("uninstall_to_empty", ReceiptStatus.FAILED)
    evidence = rig.evidence(receipt)
    assert evidence["error"]["message"].startswith("down migration 0001_items failed: near \",\": syntax error")
    result = evidence["result"]
    assert result["failed_down"] == "0001_items" and result["failed_segment"] == "0001_items"
    assert result["verified_downs"] == ["0003_stock_movements"] and result["chain_stops_at"] == "0002_suppliers"
    assert result["migrations_without_down"] == ["0002_suppliers"]
    report = rig.service.gate(run.id)
    assert not report.passed and "latest_attempt_succeeded" in {c.name for c in report.blocking}


def test_good_downs_below_gaps_are_verified_in_fresh_databases(rig: Rig) -> None:
    package = write_package(rig.tmp / "gaps", {
        MANIFEST: _manifest(),
        "migrations/0001_a.up.sql": "CREATE TABLE a (id INTEGER PRIMARY KEY);",
        "migrations/0001_a.down.sql": "DROP TABLE a;",
        "migrations/0002_b.up.sql": "CREATE TABLE b (x REFERENCES a (id));",
        "migrations/0002_b.down.sql": "DROP TABLE b;",
        "migrations/0003_c.up.sql": "CREATE TABLE c (x);",
        "migrations/0004_d.up.sql": "ALTER TABLE c ADD COLUMN y INTEGER DEFAULT 1;",
        "migrations/0004_d.down.sql": "ALTER TABLE c DROP COLUMN y;",
        "migrations/0005_e.up.sql": "CREATE TABLE e (x);",
        "migrations/0006_f.up.sql": "CREATE INDEX e_x ON e (x);", "migrations/0006_f.down.sql": "DROP INDEX e_x;"})
    run, attempts = rig.rehearse(package)
    assert all(a.status is AttemptStatus.SUCCEEDED for a in attempts), [a.error for a in attempts]
    result = _result(rig, attempts[0].id, 6)
    assert result["verified_downs"] == ["0006_f"] and result["chain_stops_at"] == "0005_e"
    assert result["reached_empty"] is False
    assert result["migrations_without_down"] == ["0003_c", "0005_e"]
    segments = result["segments_below_gaps"]
    assert isinstance(segments, list)
    assert [(s["top"], s["verified_downs"], s["stops_at"], s["reached_empty"]) for s in segments] == [
        ("0004_d", ["0004_d"], "0003_c", False), ("0002_b", ["0002_b", "0001_a"], None, True)]
    assert "3 down(s) below it verified in 2 run(s)" in str(result["reason"])
    report = rig.service.gate(run.id)
    assert report.passed and "uninstall_to_empty" in report.exercised


def test_a_lossy_down_below_a_gap_fails_naming_what_differs(rig: Rig) -> None:
    # the newest migration has no down: the main chain runs nothing, the run below it still must restore
    package = write_package(rig.tmp / "lossy-below", {
        MANIFEST: _manifest(),
        "migrations/0001_a.up.sql": "CREATE TABLE a (x);", "migrations/0001_a.down.sql": "DROP TABLE a;",
        "migrations/0002_b.up.sql": "CREATE INDEX a_x ON a (x);", "migrations/0002_b.down.sql": "SELECT 1;",
        "migrations/0003_c.up.sql": "CREATE TABLE c (x);"})
    run, [attempt] = rig.rehearse(package, attempts=1)
    evidence = rig.evidence(rig.receipts(attempt.id)[5])
    assert evidence["result"]["failed_down"] == "0002_b" and evidence["result"]["verified_downs"] == []
    assert evidence["result"]["schema_differences"]["unexpected"] == ["index a_x"]
    assert "down migration 0002_b does not restore the schema" in evidence["error"]["message"]
    assert not rig.service.gate(run.id).passed


def test_a_down_below_a_gap_that_edits_the_schema_is_refused(rig: Rig) -> None:
    # it reached the integrity check of the downs below a gap; writable_schema is now refused as it runs (ADR 0102)
    corrupting = "PRAGMA writable_schema=ON;\nDELETE FROM sqlite_master WHERE name = 'b';\n"
    package = write_package(rig.tmp / "corrupting-below", {
        MANIFEST: _manifest(),
        "migrations/0001_a.up.sql": "CREATE TABLE a (x);", "migrations/0001_a.down.sql": "DROP TABLE a;",
        "migrations/0002_b.up.sql": "CREATE TABLE b (x); INSERT INTO b VALUES (1);",
        "migrations/0002_b.down.sql": corrupting, "migrations/0003_c.up.sql": "CREATE TABLE c (x);"})
    run, [attempt] = rig.rehearse(package, attempts=1)
    evidence = rig.evidence(rig.receipts(attempt.id)[5])
    assert "0002_b" in evidence["error"]["message"] and "not authorized" in evidence["error"]["message"], evidence
    assert not rig.service.gate(run.id).passed
