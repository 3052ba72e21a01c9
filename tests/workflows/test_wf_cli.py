"""The CLI verbs of issue 6 as an operator runs them: ``fencepost package ...`` and ``fencepost workflow
plan|admit|show``, text and ``--json``, with the exit codes 2 (invalid plan), 3 (conflict), 5 (corrupt
evidence; see test_wf_tamper.py) and 6 (not allowed, the guard named in the one-line message).

Real subprocesses on a SQLite WAL database (the PostgreSQL CLI path is exercised by the tamper, gate and
crash tests).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wf_support import PACKAGE, WORKFLOW, CliResult, World, assert_refused, cli, opened_backend


@pytest.fixture
def sq(tmp_path: Path) -> Iterator[World]:
    with opened_backend("sqlite-wal", tmp_path) as backend:
        yield World(backend, backend.migrated(), tmp_path / "packages")


def ok(result: CliResult) -> CliResult:
    assert result.returncode == 0, result.describe()
    return result


class Operator:
    def __init__(self, world: World, tmp_path: Path) -> None:
        self.url = world.cli_url
        self.tmp = tmp_path

    def run(self, *args: str) -> CliResult:
        return cli(self.url, *args)

    def json(self, *args: str) -> Any:
        return ok(self.run(*args, "--json")).json()

    def plan(self, plan_id: str, *extra: str) -> Path:
        path = self.tmp / f"{plan_id}.json"
        ok(self.run("workflow", "plan", PACKAGE, WORKFLOW, "--plan-id", plan_id, "-o", str(path), *extra))
        return path


@pytest.mark.slow
def test_package_and_workflow_verbs_end_to_end(sq: World, tmp_path: Path) -> None:
    op = Operator(sq, tmp_path)
    published = op.json("package", "publish", str(sq.package()), "--allow-ungated")
    assert published["outcome"] == "created" and published["publication"]["gate"] == "waived"
    assert published["publication"]["workflows"] == [WORKFLOW]
    assert published["publication"]["tasks"] == ["extract", "load"]
    installed = op.json("package", "install", PACKAGE)
    assert (installed["status"], installed["publication_id"]) == ("active", published["publication"]["id"])
    shown = op.json("package", "show", PACKAGE)
    assert shown["head"] == {"publication_id": published["publication"]["id"], "revision": 1}
    assert (shown["disposition"], shown["quarantine"]) == ("active", None)

    # plan: to stdout or a file; the same plan id and inputs give the same normalized plan and digest
    planned = ok(op.run("workflow", "plan", PACKAGE, WORKFLOW, "--plan-id", "c1"))
    to_stdout = json.loads(planned.stdout)
    # delivered to no target: planned and admitted as ADR-0224 allows, but the user is told it can never start
    assert "target_id" not in to_stdout and "warning: the plan names no target" in planned.stderr, planned.stderr
    c1 = op.plan("c1")
    assert json.loads(c1.read_text()) == to_stdout
    assert [s["ready"] for s in to_stdout["steps"]] == [True, False]

    admitted = ok(op.run("workflow", "admit", str(c1), "--json"))
    created = admitted.json()
    assert created["outcome"] == "created" and "warning: the plan names no target" in admitted.stderr
    existing = op.json("workflow", "admit", str(c1))
    assert existing == {**created, "outcome": "existing"}
    text = ok(op.run("workflow", "admit", str(c1))).stdout
    assert text.startswith(f"existing: run {created['run_id']} (2 steps")

    by_plan = op.json("workflow", "show", "c1")
    assert by_plan == op.json("workflow", "show", created["run_id"])
    assert [s["step_key"] for s in by_plan["workflow_step_runs"]] == ["extract", "load"]
    assert by_plan["run_id"] == created["run_id"] and len(by_plan["workflow_events"]) == 3
    shown_text = ok(op.run("workflow", "show", "c1")).stdout
    assert "extract" in shown_text and "waiting" in shown_text and "needs extract" in shown_text
    assert_refused(op.run("workflow", "show", "nope"), 2, "nope")

    # disable / enable
    assert op.json("package", "disable", PACKAGE, "--reason", "maintenance") == {"disposition": "disabled"}
    c2 = op.plan("c2")
    assert_refused(op.run("workflow", "admit", str(c2)), 6, "lifecycle_disposition")
    assert op.json("package", "enable", PACKAGE) == {"disposition": "active"}
    assert op.json("workflow", "admit", str(c2))["outcome"] == "created"

    # quarantine: enable does not clear it, release-quarantine does
    quarantined = op.json("package", "quarantine", PACKAGE, "--reason", "CVE-1")
    assert (quarantined["reason"], quarantined["lock"]) == ("CVE-1", installed["lock"])
    c3 = op.plan("c3")
    assert_refused(op.run("workflow", "admit", str(c3)), 6, "quarantine", "CVE-1")
    ok(op.run("package", "enable", PACKAGE))
    assert_refused(op.run("workflow", "admit", str(c3)), 6, "quarantine")
    assert op.json("package", "show", PACKAGE)["quarantine"]["reason"] == "CVE-1"
    assert "QUARANTINED" in ok(op.run("package", "show", PACKAGE)).stdout
    assert op.json("workflow", "admit", str(c1))["outcome"] == "existing"       # replay still answers
    assert op.json("package", "release-quarantine", PACKAGE, "--reason", "patched") == {"released": True}
    assert_refused(op.run("package", "release-quarantine", PACKAGE, "--reason", "again"), 3, "not quarantined")
    assert op.json("workflow", "admit", str(c3))["outcome"] == "created"

    # withdraw: new admissions refused, replays answer
    c4 = op.plan("c4")
    withdrawn = op.json("package", "withdraw", PACKAGE, "1.0.0")
    assert withdrawn["status"] == "withdrawn" and withdrawn["withdrawn_at"]
    assert_refused(op.run("workflow", "admit", str(c4)), 6, "publication_active")
    assert op.json("workflow", "admit", str(c1))["receipt"] == created["receipt"]
    assert_refused(op.run("package", "install", PACKAGE), 6, "publication_active")

    sound = op.json("audit")
    assert sound["sound"] is True


@pytest.mark.slow
def test_publication_head_and_lock_guards_are_named(sq: World, tmp_path: Path) -> None:
    op = Operator(sq, tmp_path)
    ok(op.run("package", "publish", str(sq.package("1.0.0")), "--allow-ungated"))
    ok(op.run("package", "publish", str(sq.package("2.0.0")), "--allow-ungated", "--expect-revision", "1"))
    ok(op.run("package", "install", PACKAGE))
    p1 = op.plan("p1")
    ok(op.run("package", "install", PACKAGE, "--version", "1.0.0"))
    assert_refused(op.run("workflow", "admit", str(p1)), 6, "installation_lock")
    ok(op.run("package", "install", PACKAGE, "--version", "2.0.0"))
    ok(op.run("package", "publish", str(sq.package("3.0.0")), "--allow-ungated"))
    assert_refused(op.run("workflow", "admit", str(p1)), 6, "publication_head")
    # compare-and-set and immutability conflicts exit 3
    assert_refused(op.run("package", "publish", str(sq.package("4.0.0")), "--allow-ungated",
                          "--expect-revision", "1"), 3, "revision 3, not 1")
    assert_refused(op.run("package", "publish", str(sq.package("3.0.0", load_sql="SELECT 9;")), "--allow-ungated"),
                   3, "immutable")
    assert_refused(op.run("package", "publish", str(sq.package("5.0.0"))), 6, "release_gate")


@pytest.mark.slow
def test_invalid_plans_exit_2_and_conflicts_exit_3(sq: World, tmp_path: Path) -> None:
    op = Operator(sq, tmp_path)
    sq.ready()
    p1 = op.plan("p1")
    ok(op.run("workflow", "admit", str(p1)))
    plan = json.loads(p1.read_text())

    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({**plan, "inputs": {"edited": True}}))
    assert_refused(op.run("workflow", "admit", str(stale)), 2, "digest")
    cyclic = tmp_path / "cyclic.json"
    steps = [{**s, "needs": ["load"]} if s["key"] == "extract" else s for s in plan["steps"]]
    cyclic.write_text(json.dumps({**{k: v for k, v in plan.items() if k != "digest"}, "plan_id": "cyc",
                                  "steps": [{k: v for k, v in s.items() if k != "ready"} for s in steps]}))
    assert_refused(op.run("workflow", "admit", str(cyclic)), 2, "cycle")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    assert_refused(op.run("workflow", "admit", str(garbage)), 2, "not valid JSON")
    assert_refused(op.run("workflow", "admit", str(tmp_path / "missing.json")), 2, "cannot read")
    oversize = tmp_path / "oversize.json"
    oversize.write_text(json.dumps({**{k: v for k, v in plan.items() if k != "digest"}, "plan_id": "big",
                                    "inputs": {"blob": "x" * (256 * 1024)}}))
    assert_refused(op.run("workflow", "admit", str(oversize)), 2, "bytes")
    assert_refused(op.run("workflow", "plan", PACKAGE, WORKFLOW, "--inputs", "[1]"), 2, "JSON object")
    assert_refused(op.run("workflow", "plan", PACKAGE, "weekly"), 2, "weekly")

    rebound = tmp_path / "rebound.json"
    rebound.write_text(json.dumps({**{k: v for k, v in plan.items() if k != "digest"}, "inputs": {"other": 1}}))
    assert_refused(op.run("workflow", "admit", str(rebound)), 3, "already bound")
    drifted = tmp_path / "drifted.json"
    drifted.write_text(json.dumps({**{k: v for k, v in plan.items() if k != "digest"}, "plan_id": "drift",
                                   "workflow_digest": "sha256:" + "0" * 64}))
    assert_refused(op.run("workflow", "admit", str(drifted)), 3, "drifted")
    assert sq.counts(("workflow_admissions",)) == {"workflow_admissions": 1}

    from_stdin = cli(op.url, "workflow", "admit", "-", "--json", stdin=p1.read_text())
    assert ok(from_stdin).json()["outcome"] == "existing"


@pytest.mark.slow
def test_a_plan_holding_a_lone_surrogate_is_refused_as_an_invalid_plan(sq: World, tmp_path: Path) -> None:
    """The JSON escape ``\\ud800`` parses to a string with no UTF-8 form: ``workflow admit`` (a plan file) and
    ``workflow plan`` (``--inputs``) refuse it with exit 2 and one line naming where, no traceback (found by
    breaking it; the UnicodeEncodeError escaped as a traceback, exit 1)."""
    op = Operator(sq, tmp_path)
    sq.ready()
    plan = json.loads(op.plan("p1").read_text())
    edited = tmp_path / "surrogate.json"
    edited.write_text(json.dumps({**{k: v for k, v in plan.items() if k != "digest"}, "inputs": {"day": "\ud800"}}))
    assert "\\ud800" in edited.read_text()  # ASCII JSON text: the file itself is valid UTF-8
    assert_refused(op.run("workflow", "admit", str(edited)), 2, "not plain JSON", "$.inputs.day")
    assert_refused(op.run("workflow", "plan", PACKAGE, WORKFLOW, "--plan-id", "p2", "--inputs", '{"day": "\\ud800"}'),
                   2, "not plain JSON", "$.inputs.day")
    assert sq.counts(("workflow_admissions",)) == {"workflow_admissions": 0}
