"""Issue 11 item 7 (ADR 0064): Receipts are sealed with HMAC-SHA-256 under a key outside the control database.

An edit that recomputes the plain fingerprint used to pass audit and gate; with the seal it fails both. A seal
removed (with the fingerprint recomputed) reads as ``unsealed``, which the gate refuses and the audit reports as
its own finding. Keys rotate by id: old Receipts keep verifying under the key their seal names.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import InvalidInput
from fencepost.core.fingerprint import fingerprint
from fencepost.evidence.receipts import EVIDENCE_DOMAIN, verify_receipt
from fencepost.evidence.sealing import (
    ENV_KEY_FILE,
    ENV_KEYS,
    JUST_CREATED_SECONDS,
    SealKeys,
    load_seal_keys,
    rotate_key_file,
    write_key_file,
)
from fencepost.rehearsal.audit import audit
from fencepost.rehearsal.handler import check_seal_keys
from helpers.processes import CliResult, run_cli, subprocess_env
from integration.rig import Rig, copy_example


def _rewrite(rig: Rig, receipt_id: str, evidence: dict[str, Any]) -> None:
    """What an attacker with write access to the database alone does: new evidence, fingerprint recomputed."""
    rig.sql("UPDATE rehearsal_receipts SET evidence = ?, evidence_fingerprint = ? WHERE id = ?",
            (canonical_json(evidence), fingerprint(EVIDENCE_DOMAIN, evidence), receipt_id))


def _cli(*args: str, env: dict[str, str] | None = None) -> CliResult:
    return run_cli(args, env={**subprocess_env(), **(env or {})})


def test_an_edit_with_a_recomputed_fingerprint_fails_gate_and_audit(rig: Rig) -> None:
    run, attempts = rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=2)
    assert rig.service.gate(run.id).passed
    assert audit(rig.store) == []
    target = rig.receipts(attempts[1].id)[2]
    edited = rig.evidence(target)
    assert edited["seal"]["alg"] == "hmac-sha256"
    edited["result"]["tables"]["items"]["rows"] = 4
    _rewrite(rig, target.id, edited)

    report = rig.service.gate(run.id)
    assert not report.passed
    assert [i.status for i in report.integrity] == ["ok", "ok", "tampered", "ok", "ok", "ok"]
    assert "the evidence seal does not match" in report.integrity[2].reason
    findings = audit(rig.store)
    assert [(f.check, f.subject) for f in findings] == [("evidence_fingerprint", target.id)]
    # and the command line says so too, with its own process loading the same key file
    result = _cli("audit", "--database", f"sqlite:///{rig.db_path}", "--json")
    assert result.returncode == 1, result.stderr
    found = json.loads(result.stdout)["findings"]
    assert [f["check"] for f in found] == ["evidence_fingerprint"] and "seal does not match" in found[0]["detail"]


def test_a_stripped_seal_is_unsealed_blocks_the_gate_and_is_its_own_finding(rig: Rig) -> None:
    run, (attempt,) = rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=1)
    target = rig.receipts(attempt.id)[0]
    stripped = {k: v for k, v in rig.evidence(target).items() if k != "seal"}
    _rewrite(rig, target.id, stripped)  # exactly what a Receipt written before sealing existed looks like

    report = rig.service.gate(run.id)
    assert not report.passed
    integrity = next(c for c in report.checks if c.name == "evidence_integrity")
    assert not integrity.passed and "unsealed" in integrity.reason
    assert [(f.check, f.subject) for f in audit(rig.store)] == [("evidence_unsealed", target.id)]


def test_a_seal_under_a_key_not_held_is_unverifiable(rig: Rig) -> None:
    _, (attempt,) = rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=1)
    stranger = SealKeys.from_text("other=" + "ab" * 32)
    checks = [verify_receipt(r, keys=stranger) for r in rig.receipts(attempt.id)]
    assert {c.status for c in checks} == {"unverifiable"}
    assert "not among the seal keys" in checks[0].reason
    assert {f.check for f in audit(rig.store, keys=stranger)} == {"evidence_seal_key"}
    # and a key with the right id but other bytes: the seal does not match, like an edit
    own = load_seal_keys()
    forged = SealKeys.from_text(f"{own.active}=" + "cd" * 32)
    assert {verify_receipt(r, keys=forged).status for r in rig.receipts(attempt.id)} == {"tampered"}


def test_rotation_keeps_old_receipts_verifying(rig: Rig, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "keys" / "seal-keys.json"
    monkeypatch.setenv(ENV_KEY_FILE, str(key_file))
    monkeypatch.delenv(ENV_KEYS, raising=False)
    package = copy_example(rig.tmp / "inventory")
    run, (first,) = rig.rehearse(package, attempts=1)
    old_id, new_id = rotate_key_file(key_file)
    assert old_id != new_id and load_seal_keys().active == new_id
    second = rig.service.enqueue_attempt(run.id)
    rig.run_worker()
    ids = {a: {rig.evidence(r)["seal"]["key_id"] for r in rig.receipts(a)} for a in (first.id, second.id)}
    assert ids == {first.id: {old_id}, second.id: {new_id}}
    assert rig.service.gate(run.id).passed
    assert audit(rig.store) == []


def test_the_key_file_is_created_0600_on_first_use_and_then_reused(tmp_path: Path) -> None:
    key_file = tmp_path / "config" / "fencepost" / "seal-keys.json"
    env = {ENV_KEY_FILE: str(key_file)}
    first = load_seal_keys(env)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    again = load_seal_keys(env)
    assert again.active == first.active and again.keys == first.keys
    assert len(first.keys[first.active]) == 32
    assert "keys=" not in repr(first) and first.keys[first.active].hex() not in repr(first)


def test_the_default_key_file_is_under_the_config_directory(tmp_path: Path) -> None:
    keys = load_seal_keys({"XDG_CONFIG_HOME": str(tmp_path)})
    assert keys.source == str(tmp_path / "fencepost" / "seal-keys.json")


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "seal-keys.json"
    load_seal_keys({ENV_KEY_FILE: str(key_file)})
    key_file.chmod(0o644)
    with pytest.raises(InvalidInput, match="readable by other users"):
        load_seal_keys({ENV_KEY_FILE: str(key_file)})


@pytest.mark.parametrize("body", [b"\xff\xfe not text", b"[" * 100_000])
def test_a_key_file_that_is_not_text_or_too_deep_is_refused_in_one_line(tmp_path: Path, body: bytes) -> None:
    # a UnicodeDecodeError (and the parser's RecursionError) escaped as a traceback from every command that
    # loads the keys, and from the verification behind audit, gate and every Receipt view
    key_file = tmp_path / "seal-keys.json"
    key_file.write_bytes(body)
    key_file.chmod(0o600)
    with pytest.raises(InvalidInput, match="is not a seal key file"):
        load_seal_keys({ENV_KEY_FILE: str(key_file)})
    shown = _cli("seal-keys", "show", env={ENV_KEY_FILE: str(key_file)})
    assert shown.returncode == 2 and "Traceback" not in shown.stderr, shown.stderr
    assert "is not a seal key file" in shown.error_line


@pytest.mark.parametrize(("text", "message"), [
    ("k1", "has no '='"),
    ("k1=zz", "not hexadecimal"),
    ("k1=abcd", "shorter than 16 bytes"),
    ("k 1=" + "ab" * 16, "a seal key id is"),
    ("k1=" + "ab" * 16 + ",k1=" + "cd" * 16, "appears twice"),
])
def test_malformed_key_variables_are_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        load_seal_keys({ENV_KEYS: text})


def test_keys_from_the_variable_need_no_file(tmp_path: Path) -> None:
    keys = load_seal_keys({ENV_KEYS: "new=" + "11" * 16 + ",old=" + "22" * 16,
                           ENV_KEY_FILE: str(tmp_path / "never.json")})
    assert keys.active == "new" and set(keys.keys) == {"new", "old"}
    assert not (tmp_path / "never.json").exists()


def test_a_worker_without_a_usable_key_refuses_to_start(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    database = f"sqlite:///{tmp_path / 'c.db'}"
    assert _cli("migrate", "--database", database).returncode == 0
    result = _cli("worker", "--database", database, "--work-dir", str(tmp_path / "work"),
                  env={ENV_KEY_FILE: str(blocker / "seal-keys.json")})
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("fencepost:")]
    assert len(lines) == 1 and "seal key file" in lines[0] and "Traceback" not in result.stderr


def test_seal_keys_show_and_rotate_on_the_command_line(tmp_path: Path) -> None:
    key_file = tmp_path / "seal-keys.json"
    env = {ENV_KEY_FILE: str(key_file)}
    load_seal_keys(env)  # what a worker's first use does: creates the file with one key
    shown = _cli("seal-keys", "show", "--json", env=env)
    assert shown.returncode == 0, shown.describe()
    before = json.loads(shown.stdout)
    assert before["source"] == str(key_file) and before["key_ids"] == [before["active"]]
    assert load_seal_keys(env).keys[before["active"]].hex() not in shown.stdout
    rotated = _cli("seal-keys", "rotate", "--json", env=env)
    assert rotated.returncode == 0, rotated.describe()
    after = json.loads(_cli("seal-keys", "show", "--json", env=env).stdout)
    assert after["active"] == json.loads(rotated.stdout)["active"] != before["active"]
    assert set(after["key_ids"]) == {before["active"], after["active"]}
    refused = _cli("seal-keys", "rotate", env={ENV_KEYS: "a=" + "11" * 16})
    assert refused.returncode == 2 and "FENCEPOST_SEAL_KEYS" in refused.stderr


def test_seal_keys_show_reads_only(tmp_path: Path) -> None:
    """``seal-keys show`` on a machine without a key file says so and invents no key (a fresh random key would
    seal this machine's Receipts with a key no other machine has); after ``rotate`` it lists the key."""
    key_file = tmp_path / "keys" / "seal-keys.json"
    env = {ENV_KEY_FILE: str(key_file), ENV_KEYS: ""}
    shown = _cli("seal-keys", "show", "--json", env=env)
    assert shown.returncode == 0, shown.describe()
    assert json.loads(shown.stdout) == {"source": str(key_file), "exists": False, "active": None, "key_ids": []}
    assert not key_file.exists()
    rotated = _cli("seal-keys", "rotate", "--json", env=env)
    assert rotated.returncode == 0, rotated.describe()
    active = json.loads(rotated.stdout)["active"]
    listed = json.loads(_cli("seal-keys", "show", "--json", env=env).stdout)
    assert listed["exists"] is True and listed["active"] == active and active in listed["key_ids"]


def test_a_second_machine_without_the_keys_is_refused_before_it_seals(rig: Rig, tmp_path: Path) -> None:
    """Scale-out (a new-user trial): a worker that finds no key file creates one with a new key; on a control
    database whose Receipts are sealed with another key it is refused (exit 2, naming the key it lacks) and the
    file it made is removed, so its next start does not take that stray key for a configured one."""
    rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=1)
    sealed_with = load_seal_keys().active
    second_machine = tmp_path / "machine-2" / "seal-keys.json"
    result = _cli("worker", "--database", f"sqlite:///{rig.db_path}", "--work-dir", str(tmp_path / "work"),
                  env={ENV_KEY_FILE: str(second_machine)})
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("fencepost:")]
    assert len(lines) == 1 and repr(sealed_with) in lines[0] and "removed" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not second_machine.exists()
    runs = len(rig.service.list_runs())
    rehearsed = _cli("rehearse", str(copy_example(tmp_path / "again")), "--database", f"sqlite:///{rig.db_path}",
                     "--work-dir", str(tmp_path / "work"), env={ENV_KEY_FILE: str(second_machine)})
    assert rehearsed.returncode == 2 and repr(sealed_with) in rehearsed.stderr, rehearsed.stderr
    assert len(rig.service.list_runs()) == runs and not second_machine.exists()  # refused before the Run was made


def test_a_key_file_made_moments_ago_by_a_process_starting_beside_this_one_is_refused_too(
        rig: Rig, tmp_path: Path) -> None:
    """A verification trial: workers started together on a fresh machine; one created the key file and was
    refused, another read that file (so had not created it) and started with a key nobody else has. A key file
    younger than JUST_CREATED_SECONDS is taken as just made, whoever made it; only its creator removes it. An
    older one is configured: a warning, not a refusal."""
    rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=1)
    sibling_made = tmp_path / "sibling" / "seal-keys.json"
    write_key_file(sibling_made, json.dumps({"active": "kother", "keys": {"kother": "ef" * 32}}), replace=False)
    keys = SealKeys.from_file(sibling_made, create=False)
    with pytest.raises(InvalidInput, match="made moments ago, by a process starting beside this one"):
        check_seal_keys(rig.store, keys)
    assert sibling_made.exists()  # not this process's file to remove
    old = time.time() - JUST_CREATED_SECONDS - 5
    os.utime(sibling_made, (old, old))
    check_seal_keys(rig.store, keys)  # configured long ago: only a warning


def test_keys_that_lack_the_latest_seal_key_are_warned_about_not_refused(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """Configured keys (not made by this process) that lack the key of the last sealed Receipt may be a key
    retired on purpose: the check warns and lets the process start; with the key held it says nothing."""
    rig.rehearse(copy_example(rig.tmp / "inventory"), attempts=1)
    check_seal_keys(rig.store)  # the process's own keys sealed it: nothing to say
    assert not [r for r in caplog.records if getattr(r, "event", "") == "seal_key_missing"]
    configured = SealKeys.from_text("other=" + "ab" * 32)
    with caplog.at_level("WARNING", logger="fencepost.rehearsal"):
        check_seal_keys(rig.store, configured)
    [warning] = [r for r in caplog.records if getattr(r, "event", "") == "seal_key_missing"]
    assert warning.key_id == load_seal_keys().active  # type: ignore[attr-defined]
