"""Rehearsals end to end: enqueue, a real worker, real sandboxes, evidence and the release gate."""

from __future__ import annotations

import json
from pathlib import Path

from fencepost.catalog.manifest import load_package
from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus
from fencepost.evidence.gate import GateReport
from fencepost.evidence.receipts import verify_receipt
from fencepost.rehearsal.scenarios import SCENARIO_CODES
from integration.rig import Rig, copy_example, write_package

MANIFEST = "fencepost-package.toml"


def _checks(report: GateReport) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.passed, c.reason) for c in report.checks}


def test_example_package_end_to_end(rig: Rig) -> None:
    run, attempts = rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=2)
    assert run.package_name == "inventory" and run.previous_version == "1.1.0"
    for attempt in attempts:
        assert attempt.status is AttemptStatus.SUCCEEDED
        assert attempt.command_status is CommandStatus.DELIVERED
        assert attempt.delivery_count == 1 and attempt.delivery == 1
        assert attempt.lease_owner is None and attempt.lease_until is None
        receipts = rig.receipts(attempt.id)
        assert [(r.position, r.scenario, r.status) for r in receipts] == [
            (p, code, ReceiptStatus.SUCCEEDED) for p, code in enumerate(SCENARIO_CODES, start=1)]
        assert all(r.delivery == 1 and verify_receipt(r).ok for r in receipts)
    # What the scenarios saw, for this package: three migrations, seeded rows, an upgrade from 0002.
    receipts = rig.receipts(attempts[0].id)
    install = rig.evidence(receipts[0])
    assert install["result"]["migrations_applied"] == ["0001_items", "0002_suppliers", "0003_stock_movements"]
    assert install["package"]["content_digest"] == run.content_digest
    seeded = rig.evidence(receipts[2])["result"]["tables"]
    assert {t: seeded[t]["rows"] for t in ("items", "suppliers", "stock_movements")} == {
        "items": 3, "suppliers": 2, "stock_movements": 5}
    upgrade = rig.evidence(receipts[4])["result"]
    assert upgrade["previous_migrations"] == ["0001_items", "0002_suppliers"]
    assert upgrade["upgrade_migrations"] == ["0003_stock_movements"] and upgrade["matches_clean_install"]
    assert rig.evidence(receipts[5])["result"]["method"] == "down_migrations"

    comparison = rig.service.compare(run.id).comparison
    assert comparison is not None and comparison.equal
    report = rig.service.gate(run.id)
    assert report.passed, report.blocking
    assert report.latest_attempt_id == attempts[1].id and report.baseline_attempt_id == attempts[0].id
    # Raw evidence differs between Attempts (sandbox, ids, target receipt); semantics do not.
    first = [r.evidence_fingerprint for r in rig.receipts(attempts[0].id)]
    second = [r.evidence_fingerprint for r in rig.receipts(attempts[1].id)]
    assert all(a != b for a, b in zip(first, second, strict=True))
    # Sandboxes are removed after each delivery.
    assert not any((rig.work_dir / "sandboxes").rglob("*.db"))


def test_target_receipt_is_in_the_evidence_of_scenario_one(rig: Rig) -> None:
    _, (attempt,) = rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=1)
    evidence = rig.evidence(rig.receipts(attempt.id)[0])
    receipt = evidence["target_receipt"]
    assert receipt["target"] == "local-file" and receipt["receipt_id"].startswith("tr_")
    assert receipt["replayed"] is False
    assert evidence["idempotency_key"] == f"{attempt.id}:deliver_and_install"
    delivered = list((rig.work_dir / "target").glob("*.json"))
    assert len(delivered) == 1
    # The evidence of the other scenarios carries no target receipt.
    assert all("target_receipt" not in rig.evidence(r) for r in rig.receipts(attempt.id)[1:])


def test_migration_sql_error_fails_the_attempt_and_blocks_the_gate(rig: Rig) -> None:
    package = write_package(rig.tmp / "broken", {
        MANIFEST: '[package]\nname = "broken"\nversion = "1.0.0"\n',
        "migrations/0001_ok.up.sql": "CREATE TABLE ok (id INTEGER PRIMARY KEY);\n",
        "migrations/0002_bad.up.sql": "CREATE TABLE half (id INTEGER);\nINSERT INTO no_such_table VALUES (1);\n",
    })
    run, (attempt,) = rig.rehearse(package, attempts=1)
    assert attempt.status is AttemptStatus.FAILED
    assert attempt.command_status is CommandStatus.FAILED
    assert attempt.error is not None and "no such table: no_such_table" in attempt.error
    receipts = rig.receipts(attempt.id)
    assert [r.status for r in receipts] == [ReceiptStatus.FAILED] + [ReceiptStatus.ABORTED] * 5
    failed = rig.evidence(receipts[0])
    assert failed["status"] == "FAILED"
    assert "migration 0002_bad failed" in failed["error"]["message"]
    assert "no such table: no_such_table" in failed["error"]["message"]
    assert failed["result"] == {"failed_migration": "0002_bad", "applied": ["0001_ok"]}
    assert verify_receipt(receipts[0]).ok
    assert all(r.evidence is None for r in receipts[1:])
    command = rig.store.read(lambda tx: tx.outbox.get(attempt.command_id))
    assert command is not None and command.last_error is not None and "no_such_table" in command.last_error
    assert [e.event for e in rig.lease_events(attempt.command_id)][-1] == "fail"
    report = rig.service.gate(run.id)
    assert not report.passed
    checks = _checks(report)
    assert checks["latest_attempt_succeeded"] == (False, "Attempt #1 is FAILED")
    assert checks["outbox_delivered"][0] is False


def test_semantically_drifting_package_succeeds_but_fails_the_gate(rig: Rig) -> None:
    package = write_package(rig.tmp / "drift", {
        MANIFEST: '[package]\nname = "drift"\nversion = "1.0.0"\n',
        "migrations/0001_stable.up.sql": "CREATE TABLE stable (id INTEGER PRIMARY KEY);\n",
        "migrations/0001_stable.down.sql": "DROP TABLE stable;\n",
        "migrations/0002_random.up.sql": "CREATE TABLE t AS SELECT random() AS r;\n",
        "migrations/0002_random.down.sql": "DROP TABLE t;\n",
    })
    run, attempts = rig.rehearse(package, attempts=2)
    assert [a.status for a in attempts] == [AttemptStatus.SUCCEEDED, AttemptStatus.SUCCEEDED]
    report = rig.service.gate(run.id)
    checks = _checks(report)
    assert {name for name, (ok, _) in checks.items() if not ok} == {"semantic_match"}
    reason = checks["semantic_match"][1]
    assert "drifts from baseline Attempt #1" in reason
    assert "$[2].evidence.result.tables.t.content_sha256" in reason
    assert report.comparison is not None
    assert report.comparison.differing_paths == ["$[2].evidence.result.tables.t.content_sha256"]
    assert "stable" not in reason


def test_drift_in_a_table_named_like_volatile_evidence_is_still_caught(rig: Rig) -> None:
    # "execution" and "sandbox" are volatile keys of the evidence envelope, but here they are table names.
    package = write_package(rig.tmp / "names", {
        MANIFEST: '[package]\nname = "names"\nversion = "1.0.0"\n',
        "migrations/0001_tables.up.sql": "CREATE TABLE execution AS SELECT random() AS r;\n"
                                         "CREATE TABLE sandbox (id INTEGER PRIMARY KEY);\n",
    })
    run, attempts = rig.rehearse(package, attempts=2)
    assert [a.status for a in attempts] == [AttemptStatus.SUCCEEDED, AttemptStatus.SUCCEEDED]
    report = rig.service.gate(run.id)
    assert not report.passed
    assert report.comparison is not None
    assert report.comparison.differing_paths == ["$[2].evidence.result.tables.execution.content_sha256"]


def test_evidence_edited_with_plain_sqlite_fails_integrity(rig: Rig) -> None:
    run, attempts = rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=2)
    assert rig.service.gate(run.id).passed
    target = rig.receipts(attempts[1].id)[2]
    rig.sql("UPDATE rehearsal_receipts SET evidence = json_set(evidence, '$.result.tables.items.rows', 4) "
            "WHERE id = ?", (target.id,))
    report = rig.service.gate(run.id)
    checks = _checks(report)
    assert checks["evidence_integrity"][0] is False
    assert ("receipt 3 (seed_and_verify) tampered: evidence fingerprint does not match the stored evidence"
            in checks["evidence_integrity"][1])
    assert [i.status for i in report.integrity] == ["ok", "ok", "tampered", "ok", "ok", "ok"]


def test_evidence_reformatted_with_plain_sqlite_fails_integrity(rig: Rig) -> None:
    run, (attempt,) = rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=1)
    target = rig.receipts(attempt.id)[0]
    # The same data pretty-printed, fingerprint untouched: equal values, but not the sealed canonical text.
    pretty = json.dumps(rig.evidence(target), indent=2, ensure_ascii=False)
    rig.sql("UPDATE rehearsal_receipts SET evidence = ? WHERE id = ?", (pretty, target.id))
    checks = _checks(rig.service.gate(run.id))
    assert checks["evidence_integrity"][0] is False
    assert "not in canonical form" in checks["evidence_integrity"][1]


def test_frozen_package_ignores_edits_on_disk_after_create_run(rig: Rig) -> None:
    package = copy_example(rig.tmp / "inventory")
    run = rig.service.create_run(package)
    # Edit the package on disk after freezing: a new table in a migration and a broken seed.
    with (package / "migrations" / "0001_items.up.sql").open("a", encoding="utf-8") as fh:
        fh.write("\nCREATE TABLE sneaked_in (x);\n")
    (package / "seed" / "demo.sql").write_text("INSERT INTO nowhere VALUES (1);\n", encoding="utf-8")
    assert load_package(package).content_digest != run.content_digest

    attempts = []
    for _ in range(2):
        attempts.append(rig.service.enqueue_attempt(run.id))
        rig.run_worker()
    for attempt in attempts:
        assert rig.service.attempt(attempt.id).status is AttemptStatus.SUCCEEDED
        receipts = rig.receipts(attempt.id)
        install = rig.evidence(receipts[0])
        assert install["package"]["content_digest"] == run.content_digest
        assert install["result"]["schema"]["objects"] == {"index": 2, "table": 3, "view": 1}
        assert "sneaked_in" not in rig.evidence(receipts[2])["result"]["tables"]
    assert rig.service.gate(run.id).passed
    stored = {f.path: f.content for f in rig.store.read(lambda tx: tx.rehearsal.run_files(run.id))}
    assert stored["seed/demo.sql"] == (Path(__file__).resolve().parents[2] / "examples" / "inventory" / "seed"
                                       / "demo.sql").read_bytes()


def test_gate_blocks_a_newer_pending_attempt_and_a_retired_run(rig: Rig) -> None:
    run, _ = rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=1)
    assert rig.service.gate(run.id).passed
    rig.service.enqueue_attempt(run.id)
    checks = _checks(rig.service.gate(run.id))
    assert checks["latest_attempt_succeeded"] == (False, "Attempt #2 is PENDING")
    rig.run_worker()
    assert rig.service.gate(run.id).passed
    assert rig.store.transact(lambda tx: tx.rehearsal.retire_run(run.id))
    assert _checks(rig.service.gate(run.id))["run_ready"] == (False, "Run is RETIRED")
