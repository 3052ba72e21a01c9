"""Real-world SQL from /work/shared/datasets rehearsed end to end, two Attempts each.

Chinook and Sakila pass their gates. Authelia and ChirpStack do not, for real defects of their down scripts
that every down being verified against the schema from before its up finds (issue 11 item 4): Authelia's
V0011 down leaves ``oauth2_access_token_session.signature`` at VARCHAR(768), ChirpStack's
``2025-12-08-135428-0000_refactor_device_profiles`` down drops three indexes and the column defaults of
``device_profile``. The first ten Authelia migrations, rewritten as a golang-migrate history (each script in
its own ``BEGIN``/``COMMIT``, one file name with a double dot, V0001's down left out, its two host functions
from an operator's entry point), exercise items 1 to 4 at once.

Package directories are built in ``tmp_path`` at test time by copying the dataset files into them (symlinks
leaving a package are refused by design). Nothing is copied into the repository.

The datasets directory is ``<repository>/../shared/datasets``, or ``FENCEPOST_DATASETS`` when set. When it is
missing the tests fail with a message saying so: they never skip.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus
from fencepost.store.records import AttemptRecord, RunRecord
from integration.rig import Rig, write_package

MANIFEST = "fencepost-package.toml"


def _datasets() -> Path:
    configured = os.environ.get("FENCEPOST_DATASETS", "").strip()
    root = Path(configured) if configured else Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"
    root = root.resolve()
    if not root.is_dir():
        pytest.fail(f"datasets directory {root} is missing: put the shared datasets beside the repository "
                    "(../shared/datasets) or set FENCEPOST_DATASETS", pytrace=False)
    return root


def _dataset(name: str) -> Path:
    """The dataset folder ``name``; a missing folder fails the calling test (as a failure, not a setup error)."""
    datasets = _datasets()
    path = datasets / name
    if not path.exists():
        pytest.fail(f"dataset {name!r} is missing from {datasets}", pytrace=False)
    return path


def _rehearse_blocked(rig: Rig, package: Path, failed_down: str) -> tuple[AttemptRecord, dict[str, Any]]:
    """One Attempt that fails only its uninstall scenario, at ``failed_down``; the gate is BLOCKED."""
    run, [attempt] = rig.rehearse(package, attempts=1)
    receipts = rig.receipts(attempt.id)
    assert [r.status for r in receipts] == [ReceiptStatus.SUCCEEDED] * 5 + [ReceiptStatus.FAILED], attempt.error
    evidence = rig.evidence(receipts[5])
    assert evidence["result"]["failed_down"] == failed_down, evidence
    assert not rig.service.gate(run.id).passed
    return attempt, evidence


def _rehearse_twice(rig: Rig, package: Path) -> tuple[RunRecord, list[AttemptRecord]]:
    run, attempts = rig.rehearse(package, attempts=2)
    for attempt in attempts:
        receipts = rig.receipts(attempt.id)
        failures = {r.scenario: (rig.evidence(r).get("error") if r.evidence else None)
                    for r in receipts if r.status is not ReceiptStatus.SUCCEEDED}
        assert attempt.status is AttemptStatus.SUCCEEDED, f"Attempt #{attempt.seq}: {attempt.error}; {failures}"
        assert attempt.command_status is CommandStatus.DELIVERED
    report = rig.service.gate(run.id)
    assert report.passed, [(c.name, c.reason) for c in report.blocking]
    return run, attempts


def _result(rig: Rig, attempt: AttemptRecord, position: int) -> dict[str, object]:
    result = rig.evidence(rig.receipts(attempt.id)[position - 1])["result"]
    assert isinstance(result, dict)
    return result


def test_chinook_single_script_without_down(rig: Rig) -> None:
    source = _dataset("chinook")
    package = write_package(rig.tmp / "chinook", {
        MANIFEST: '[package]\nname = "chinook"\nversion = "1.4.5"\n\n'
                  '[[migrations]]\nid = "0001_chinook"\nup = "sql/Chinook_Sqlite.sql"\n'})
    (package / "sql").mkdir()
    shutil.copyfile(source / "Chinook_Sqlite.sql", package / "sql" / "Chinook_Sqlite.sql")
    run, attempts = _rehearse_twice(rig, package)
    assert len(rig.service.gate(run.id).exercised) == 4
    tables = _result(rig, attempts[0], 3)["tables"]
    assert isinstance(tables, dict)
    assert len(tables) == 11
    assert sum(t["rows"] for t in tables.values()) == 15_607
    assert (tables["Track"]["rows"], tables["PlaylistTrack"]["rows"]) == (3_503, 8_715)
    assert _result(rig, attempts[0], 5)["applicable"] is False
    uninstall = _result(rig, attempts[0], 6)
    assert uninstall["applicable"] is False, "one script with no down: uninstall is not applicable"


def test_chirpstack_diesel_folders_with_downs_and_an_upgrade(rig: Rig) -> None:
    source = _dataset("chirpstack-sqlite-migrations") / "migrations"
    ids = sorted(p.name for p in source.iterdir())
    assert len(ids) == 14
    through = "2025-01-27-100007_add_fuota_support"
    package = write_package(rig.tmp / "chirpstack", {
        # The initial migration inserts a tenant and an admin user stamped datetime('now'): volatile columns.
        MANIFEST: '[package]\nname = "chirpstack"\nversion = "4.14.0"\nprevious_version = "4.11.0"\n'
                  f'previous_through = "{through}"\n\n'
                  '[verify]\nvolatile_columns = ["created_at", "updated_at"]\n'})
    shutil.copytree(source, package / "migrations")
    failed = "2025-12-08-135428-0000_refactor_device_profiles"
    attempt, evidence = _rehearse_blocked(rig, package, failed)
    install = _result(rig, attempt, 1)
    assert install["migrations_applied"] == ids, "Diesel folders apply in id order"
    upgrade = _result(rig, attempt, 5)
    assert upgrade["previous_migrations"] == ids[: ids.index(through) + 1]
    assert upgrade["upgrade_migrations"] == ids[ids.index(through) + 1:]
    assert upgrade["matches_clean_install"] is True
    # A real defect of this history: the down of the device-profile refactor does not restore the schema.
    assert evidence["result"]["verified_downs"] == list(reversed(ids[ids.index(failed) + 1:]))
    assert evidence["result"]["schema_differences"] == {
        "missing": ["index idx_device_profile_name_trgm", "index idx_device_profile_tags",
                    "index idx_device_profile_tenant_id"],
        "unexpected": [], "changed": ["table device_profile"]}


def test_authelia_files_with_host_functions(rig: Rig) -> None:
    source = _dataset("authelia-sqlite-migrations") / "migrations"
    package = write_package(rig.tmp / "authelia", {
        MANIFEST: '[package]\nname = "authelia"\nversion = "4.39.0"\n\n'
                  '[sqlite]\nfunctions = { BIN2B64 = "base64_encode", B642BIN = "base64_decode" }\n'})
    shutil.copytree(source, package / "migrations")
    attempt, evidence = _rehearse_blocked(rig, package, "V0011.JWTProfileAccessToken")
    install = _result(rig, attempt, 1)
    applied = install["migrations_applied"]
    assert isinstance(applied, list) and len(applied) == 26
    assert applied[:2] == ["V0001.Initial_Schema", "V0002.WebAuthn"] and applied[-1].startswith("V0026.")
    schema = install["schema"]
    assert isinstance(schema, dict) and schema["objects"]["table"] == 25
    assert set(install["transaction_modes"].values()) == {"wrapped"}
    # A real defect of this history: V0011's down leaves the signature column at VARCHAR(768).
    assert evidence["result"]["verified_downs"] == list(reversed(applied[applied.index("V0011.JWTProfileAccessToken")
                                                                         + 1:]))
    assert evidence["result"]["schema_differences"]["changed"] == ["table oauth2_access_token_session"]


def _operator_functions(site: Path) -> None:
    """An operator's distribution (really installed on sys.path) providing Authelia's two functions."""
    (site / "authelia_functions.py").write_text(
        "import base64\n\n\ndef bin2b64(value):\n    return None if value is None else "
        "base64.b64encode(value if isinstance(value, bytes) else str(value).encode()).decode()\n\n\n"
        "def b642bin(value):\n    return None if value is None else base64.b64decode(value)\n", encoding="utf-8")
    info = site / "authelia_functions-0.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: authelia-functions\nVersion: 0.3.0\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text("[fencepost.sql_functions]\nauthelia_bin2b64 = authelia_functions:bin2b64\n"
                                           "authelia_b642bin = authelia_functions:b642bin\n", encoding="utf-8")


def test_authelia_as_a_golang_migrate_history(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _dataset("authelia-sqlite-migrations") / "migrations"
    site = rig.tmp / "site"
    site.mkdir()
    _operator_functions(site)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("FENCEPOST_HOST_FUNCTIONS", "authelia_bin2b64,authelia_b642bin")
    package = write_package(rig.tmp / "authelia-gm", {
        MANIFEST: '[package]\nname = "authelia"\nversion = "4.34.0"\n\n'
                  '[sqlite]\nfunctions = { BIN2B64 = "authelia_bin2b64", B642BIN = "authelia_b642bin" }\n'})
    (package / "migrations").mkdir()
    ids = []
    for up in sorted(source.glob("*.up.sql"))[:10]:
        version, name = up.name[1:5], up.name[len("V0001."):-len(".up.sql")]
        stem = f"{version}_{name}"
        odd = stem + "." if version == "0003" else stem  # a double dot before up.sql
        ids.append(odd)
        wrap = "PRAGMA foreign_keys=OFF;\nBEGIN;\n{}\nCOMMIT;\nPRAGMA foreign_keys=ON;\n"
        (package / "migrations" / f"{odd}.up.sql").write_text(wrap.format(up.read_text()), encoding="utf-8")
        if version != "0001":  # V0001's down is left out: the roll-back chain stops there
            down = up.with_name(up.name.replace(".up.sql", ".down.sql"))
            (package / "migrations" / f"{stem}.down.sql").write_text(wrap.format(down.read_text()),
                                                                    encoding="utf-8")
    run, attempts = _rehearse_twice(rig, package)
    install = _result(rig, attempts[0], 1)
    assert install["migrations_applied"] == ids
    assert install["transaction_modes"] == {i: "own_transaction" for i in ids}
    assert install["pairing"] == {"0003_WebAuthnKIDLength.": "version"}
    assert install["host_functions"]["BIN2B64"] == {"implementation": "authelia_bin2b64",
                                                    "module": "authelia_functions",
                                                    "distribution": "authelia-functions", "version": "0.3.0"}
    uninstall = _result(rig, attempts[0], 6)
    assert uninstall["verified_downs"] == list(reversed(ids[1:])) and uninstall["chain_stops_at"] == ids[0]
    assert uninstall["reached_empty"] is False
    assert uninstall["migrations_without_down"] == [ids[0]] and uninstall["segments_below_gaps"] == []
    report = rig.service.gate(run.id)
    assert report.semantics_compared
    assert report.not_exercised == [{"scenario": "upgrade_from_previous",
                                     "reason": "not applicable: the manifest declares no previous version"}]


def test_sakila_schema_seed_and_uninstall_script(rig: Rig) -> None:
    source = _dataset("sakila")
    package = write_package(rig.tmp / "sakila", {
        # Sakila's triggers stamp last_update with the load time: leave it out of content digests.
        MANIFEST: '[package]\nname = "sakila"\nversion = "1.0.0"\n'
                  'seed = ["data/sqlite-sakila-insert-data-optimized.sql"]\n'
                  'uninstall = "sql/sqlite-sakila-drop-objects.sql"\n\n'
                  '[[migrations]]\nid = "0001_schema"\nup = "sql/sqlite-sakila-schema.sql"\n\n'
                  '[verify]\nvolatile_columns = ["last_update"]\n'})
    for folder, name in (("sql", "sqlite-sakila-schema.sql"), ("sql", "sqlite-sakila-drop-objects.sql"),
                         ("data", "sqlite-sakila-insert-data-optimized.sql")):
        (package / folder).mkdir(exist_ok=True)
        shutil.copyfile(source / name, package / folder / name)
    run, attempts = _rehearse_twice(rig, package)
    assert len(rig.service.gate(run.id).exercised) == 5
    seeded = _result(rig, attempts[0], 3)
    tables = seeded["tables"]
    assert isinstance(tables, dict)
    assert sum(t["rows"] for t in tables.values()) == 46_273
    assert all("last_update" not in t["columns"] for t in tables.values())
    assert seeded["checks"] == {"integrity_check": "ok", "foreign_key_violations": 0,
                                "foreign_key_violation_samples": []}
    uninstall = _result(rig, attempts[0], 6)
    assert (uninstall["method"], uninstall["remaining_objects"]) == ("uninstall_script", 0)
