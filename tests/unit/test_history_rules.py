"""Issue 11 items 2, 3, 5 and 6 on records and packages built directly: pairing by numeric version, host
function resolution, NOT_APPLICABLE as its own state, scenario coverage and an uncompared single Attempt."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fencepost.catalog.manifest import MANIFEST_NAME, load_package, package_from_run
from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import ReceiptStatus
from fencepost.evidence.coverage import coverage
from fencepost.evidence.gate import evaluate_gate
from fencepost.rehearsal.host_functions import ENV_VAR, resolve
from fencepost.rehearsal.views import gate_view, receipt_view
from unit.builders import MINIMAL_MANIFEST, PackageWriter, attempt_record, receipts_for, run_record

UP = "CREATE TABLE t (id INTEGER PRIMARY KEY);\n"
DOWN = "DROP TABLE t;\n"
NOT_APPLICABLE_UPGRADE = {"applicable": False, "reason": "the manifest declares no previous version"}


# ── item 3: pairing ──
def test_an_odd_name_pairs_by_numeric_version_and_says_so(write_package: PackageWriter) -> None:
    root = write_package({MANIFEST_NAME: MINIMAL_MANIFEST, "migrations/0001_a.up.sql": UP,
                          "migrations/0001_a.down.sql": DOWN, "migrations/0003_add..up.sql": UP,
                          "migrations/0003_add.down.sql": DOWN})
    spec = load_package(root)
    assert [(m.id, m.down) for m in spec.migrations] == [("0001_a", "migrations/0001_a.down.sql"),
                                                         ("0003_add.", "migrations/0003_add.down.sql")]
    assert spec.pairing == {"0001_a": "name", "0003_add.": "version"}
    manifest = spec.normalized_manifest()
    assert [m.get("pairing") for m in manifest["migrations"]] == [None, "version"]
    frozen = package_from_run(manifest, spec.run_files())
    assert frozen.pairings == {"0003_add.": "version"} and frozen.content_digest == spec.content_digest


def test_version_prefixes_and_folders_name_their_rule(write_package: PackageWriter) -> None:
    root = write_package({MANIFEST_NAME: MINIMAL_MANIFEST, "migrations/V0002.Two.up.sql": UP,
                          "migrations/V0002_Two.down.sql": DOWN, "migrations/0001_f/up.sql": UP,
                          "migrations/0001_f/down.sql": DOWN})
    assert load_package(root).pairing == {"0001_f": "folder", "V0002.Two": "version"}


def test_an_ambiguous_numeric_version_is_refused(write_package: PackageWriter) -> None:
    root = write_package({MANIFEST_NAME: MINIMAL_MANIFEST, "migrations/0002_a.up.sql": UP,
                          "migrations/0002_b.up.sql": UP, "migrations/0002_c.down.sql": DOWN})
    with pytest.raises(InvalidInput, match=r"'0002_c' has a down file .* no up file with the same name or the "
                                           r"same numeric version"):
        load_package(root)


# ── item 2: host functions ──
def test_built_in_host_functions_record_their_source() -> None:
    resolved = resolve({"BIN2B64": "base64_encode"}, environ={})
    source = resolved["BIN2B64"].source()
    assert (source["implementation"], source["module"], source["distribution"]) == (
        "base64_encode", "fencepost.rehearsal.host_functions", "fencepost")
    assert source["version"] and source["version"] != "unknown"


def test_a_missing_host_function_is_named() -> None:
    with pytest.raises(InvalidInput, match=f"SQL function NFC needs host function 'unicode_nfc'.*{ENV_VAR} is not "
                                           "set"):
        resolve({"NFC": "unicode_nfc"}, environ={})
    with pytest.raises(InvalidInput, match=r"no configured entry point of fencepost\.sql_functions is named "
                                           r"'unicode_nfc'"):
        resolve({"NFC": "unicode_nfc"}, environ={ENV_VAR: "something_else"})


# ── item 5: not applicable ──
def test_a_scenario_that_did_not_apply_is_not_applicable_with_its_reason() -> None:
    receipts = receipts_for("att_1", {5: NOT_APPLICABLE_UPGRADE})
    view = receipt_view(receipts[4])
    assert (view["status"], view["state"]) == ("SUCCEEDED", "NOT_APPLICABLE")
    assert view["not_applicable_reason"] == "the manifest declares no previous version"
    assert receipt_view(receipts[0])["state"] == "SUCCEEDED" and receipt_view(receipts[0])["not_applicable_reason"] \
        is None


def test_the_gate_states_how_many_scenarios_were_exercised() -> None:
    attempts = [attempt_record(1), attempt_record(2)]
    receipts = {a: receipts_for(a, {5: NOT_APPLICABLE_UPGRADE}) for a in ("att_1", "att_2")}
    report = evaluate_gate(run_record(), attempts, receipts)
    assert report.passed
    assert report.exercised == ["deliver_and_install", "integrity_check", "seed_and_verify", "reapply_is_noop",
                                "uninstall_to_empty"]
    assert report.not_exercised == [{"scenario": "upgrade_from_previous",
                                     "reason": "not applicable: the manifest declares no previous version"}]
    view = gate_view(report)
    assert (view["scenarios"]["count"], view["scenarios"]["of"]) == (5, 6)


def test_a_failed_scenario_counts_as_exercised() -> None:
    """A scenario that ran and found a defect was exercised: the gate blocks on its failure, and does not also
    list it among the scenarios it never tried (the new-user trial read "not exercised: ... (FAILED)")."""
    receipts = receipts_for("att_1")
    receipts[5] = replace(receipts[5], status=ReceiptStatus.FAILED)
    exercised, others = coverage(receipts)
    assert "uninstall_to_empty" in exercised and others == []
    pending = [replace(r, status=ReceiptStatus.PENDING) if r.position == 4 else r for r in receipts]
    assert coverage(pending)[1] == [{"scenario": "reapply_is_noop", "reason": "PENDING"}]


# ── item 6: a single Attempt ──
def test_a_single_attempt_passes_but_says_semantics_were_not_compared() -> None:
    report = evaluate_gate(run_record(), [attempt_record(1)], {"att_1": receipts_for("att_1")})
    assert report.passed and not report.semantics_compared
    reason = next(c.reason for c in report.checks if c.name == "semantic_match")
    assert reason.startswith("semantics were not compared: Attempt #1 is the only successful Attempt")
    assert gate_view(report)["semantics_compared"] is False
    two = evaluate_gate(run_record(), [attempt_record(1), attempt_record(2)],
                        {"att_1": receipts_for("att_1"), "att_2": receipts_for("att_2")})
    assert two.semantics_compared and gate_view(two)["semantics_compared"] is True
