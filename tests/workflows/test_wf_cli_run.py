"""``fencepost workflow run | status | list | cancel`` as an operator runs them (issue 18; ADR 0072): real CLI
subprocesses against a real ``fencepost worker`` process on the same control database.

What is about the process is checked on the process: the exit code by the Run's verdict (0 succeeded,
1 failed, 7 timed_out, 9 still running at --timeout, 2 bad input), the one-line no-worker notice, SIGINT while
following (exit 130 within 2 s, the Run goes on and still settles), cancel finalizing the not-started steps at
once while the running one ends at its deadline. Three packages are installed once per module on one SQLite
WAL file (and delivered to one target); one test runs ``workflow run`` on PostgreSQL.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from exec_kit import ENDLESS, Steps, install, log_task
from typer.testing import CliRunner
from wf_support import cli, cli_url, opened_backend

from fencepost.cli.app import app as fencepost_app
from fencepost.store import Store, open_store
from fencepost.workflows.views import run_view
from helpers.processes import CliResult, Process, kill_all, start, start_piped, subprocess_env, worker_args
from helpers.waiting import wait_until

OK = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",))}, tasks={"ta": log_task("a"), "tb": log_task("b")})
BAD = Steps(steps={"a": ("ta", ()), "b": ("tb", ("a",))},
            tasks={"ta": "INSERT INTO nowhere VALUES (1);\n", "tb": log_task("b")})
#: ``slow`` never ends by itself: its 5 s deadline stops it (time enough, on a busy machine, to see it running and
#: act before it ends); ``b`` and ``c`` wait on it.
SLOW = Steps(steps={"slow": ("endless", ()), "b": ("tb", ("slow",)), "c": ("tc", ("slow",))},
             tasks={"endless": ENDLESS, "tb": log_task("b"), "tc": log_task("c")}, timeouts={"endless": 5})


@dataclass
class Site:
    url: str
    store: Store
    root: Path

    def cli(self, *args: str) -> CliResult:
        return cli(self.url, *args)

    def json(self, *args: str, code: int = 0) -> Any:
        result = self.cli(*args, "--json")
        assert result.returncode == code, result.describe()
        return result.json()

    def inline(self, *args: str, code: int = 0) -> str:
        """The CLI in this process (for what is not about the process: output, JSON shapes): its stdout."""
        result = CliRunner().invoke(fencepost_app, [*args, "-d", self.url])
        assert result.exit_code == code, (args, result.exit_code, result.output, result.exception)
        return result.stdout

    def inline_json(self, *args: str, code: int = 0) -> Any:
        return json.loads(self.inline(*args, "--json", code=code))

    def statuses(self, run_id: str) -> dict[str, str]:
        view = self.store.read(lambda tx: run_view(tx, run_id))
        return {s["key"]: s["status"] for s in view["steps"]}


def start_worker(url: str, root: Path, name: str = "worker") -> Process:
    return start(worker_args(url, root / f"{name}-work", lease_seconds=10, poll_interval=0.05,
                             extra=["--concurrency", "4"]),
                 name=name, stdout_path=root / f"{name}.log", cwd=root)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("wfcli")
    url = f"sqlite:///{root / 'control.db'}"
    store = open_store(url, create=True)
    store.migrate()
    for name, shape in (("ok", OK), ("bad", BAD), ("slow", SLOW)):
        install(store, root, shape, name=name, target="t1" if name == "ok" else f"t-{name}")
    try:
        yield Site(url, store, root)
    finally:
        store.close()


@pytest.fixture(scope="module")
def worker(site: Site) -> Iterator[Process]:
    process = start_worker(site.url, site.root)
    try:
        wait_until(lambda: bool(site.store.read(lambda tx: tx.workers.list_workers())), timeout=60,
                   what="the worker registered")
        yield process
    finally:
        kill_all([process])


def test_without_a_worker_run_says_so_exits_9_at_its_timeout_and_the_run_goes_on(tmp_path: Path) -> None:
    # A control database of its own: the module's worker must not serve it yet.
    url = f"sqlite:///{tmp_path / 'control.db'}"
    store = open_store(url, create=True)
    store.migrate()
    install(store, tmp_path, OK, name="ok")
    lonely = Site(url, store, tmp_path)
    early = lonely.cli("workflow", "run", "ok", "flow", "--plan-id", "early", "--timeout", "1")
    assert early.returncode == 9, early.describe()
    assert "no live `fencepost worker` serves workflow tasks" in early.stdout, early.describe()
    assert "still running after 1 s" in early.stderr and "workflow status" in early.stderr, early.describe()
    run_id = lonely.inline_json("workflow", "show", "early")["run_id"]
    assert lonely.statuses(run_id) == {"a": "ready", "b": "waiting"}
    process = start_worker(url, tmp_path)
    try:
        wait_until(lambda: bool(store.read(lambda tx: tx.workers.list_workers())), timeout=60,
                   what="the worker registered")
        settled = lonely.inline("workflow", "status", run_id, "--watch", "--timeout", "30")
    finally:
        kill_all([process])
        store.close()
    assert "no live `fencepost worker`" not in settled, settled
    assert settled.splitlines()[-1].endswith("succeeded: 2 succeeded"), settled


def test_run_to_succeeded_exits_0_and_status_list_json_shapes(site: Site, worker: Process) -> None:
    done = site.cli("workflow", "run", "ok", "flow", "--target", "t1", "--plan-id", "ok-1")
    assert done.returncode == 0, done.describe()
    lines = done.stdout.splitlines()
    assert lines[0].startswith("created: run wfr_") and "(2 steps) of ok/flow on t1" in lines[0], done.describe()
    assert any(line.split()[:2] == ["b", "succeeded"] for line in lines), done.describe()  # a line per transition
    assert lines[-1].endswith("succeeded: 2 succeeded"), done.describe()
    assert "no live `fencepost worker`" not in done.stdout, done.describe()
    # the same plan id again: the existing Run, already settled; --json shape
    again = site.inline_json("workflow", "run", "ok", "flow", "--target", "t1", "--plan-id", "ok-1")
    assert (again["outcome"], again["followed"], again["run"]["status"]) == ("existing", "settled", "succeeded")
    run_id = again["run_id"]
    assert again["run"]["run_id"] == run_id and [s["key"] for s in again["run"]["steps"]] == ["a", "b"]
    assert all(s["status"] == "succeeded" and s["attempts"] == 1 for s in again["run"]["steps"])
    assert site.inline_json("workflow", "status", run_id) == again["run"]
    assert site.inline_json("workflow", "status", run_id, "--watch") == again["run"]
    listed = site.inline_json("workflow", "list", "--status", "succeeded")
    assert run_id in [r["run_id"] for r in listed["items"]]
    assert all(r["status"] == "succeeded" for r in listed["items"])
    assert site.inline_json("workflow", "list", "--limit", "1")["items"][0]["run_id"] == run_id  # newest first
    # the plan file form
    plan = site.root / "ok-2.json"
    site.inline("workflow", "plan", "ok", "flow", "--plan-id", "ok-2", "-o", str(plan))
    from_file = site.inline_json("workflow", "run", "--plan", str(plan))
    assert (from_file["outcome"], from_file["run"]["status"], from_file["run"]["plan_id"]) == (
        "created", "succeeded", "ok-2")
    text = site.inline("workflow", "status", run_id)
    assert run_id in text and "ok/flow on t1" in text and "succeeded" in text


def test_bad_input_is_refused_with_exit_2(site: Site) -> None:
    for args, needle in ((["status", "wfr_nope"], "no workflow run or plan id wfr_nope"),
                         (["cancel", "wfr_nope", "--reason", "x"], "no workflow run or plan id wfr_nope"),
                         (["run", "ok", "flow", "--inputs", "[1"], "--inputs is not valid JSON"),
                         (["run", "ok", "flow", "--inputs", "[1]"], "--inputs must be a JSON object"),
                         (["run", "ok", "flow", "--target", "nobody"], "no live delivery target nobody"),
                         (["run", "ok", "nope"], "no workflow 'nope'"),
                         (["run", "nopkg", "flow"], "nopkg is not installed"),
                         (["run", "ok"], "name the PACKAGE and WORKFLOW"),
                         (["run", "ok", "flow", "--plan", "x.json"], "not both"),
                         (["run", "--plan", "missing.json"], "cannot read the plan missing.json"),
                         (["status", "wfr_nope", "--timeout", "1"], "--timeout bounds --watch"),
                         (["plan", "ok", "flow", "-o", "/nonexistent/dir/x.json"],
                          "cannot write the plan to /nonexistent/dir/x.json")):
        result = CliRunner().invoke(fencepost_app, ["workflow", *args, "-d", site.url])
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.output and "Traceback" not in result.output, (args, result.output)
    helped = site.inline("workflow", "run", "--help")
    flat = " ".join(helped.split())
    for code in ("3 the --plan-id was admitted before", "4 the database needs", "5 the store is unavailable",
                 "6 a start guard refuses", "7 it timed out"):
        assert code in flat, (code, helped)
    listed = site.inline("workflow", "list", "--help")
    assert "``" not in listed and '{"items": [...]}' in " ".join(listed.split()), listed
    # a process-level check of one: one line on stderr, nothing on stdout
    unknown = site.cli("workflow", "status", "wfr_nope")
    assert (unknown.returncode, unknown.stdout, unknown.error_line) == (
        2, "", "fencepost: no workflow run or plan id wfr_nope"), unknown.describe()


#: A reason a trial gave: it cleared the operator's screen and forged a line of ``workflow status``.
FORGED = "\x1b[2J\x1b[Hrun x succeeded\nall good"


def test_a_cancel_reason_with_escape_codes_is_refused_and_stored_text_is_shown_never_acted_on(site: Site) -> None:
    run_id = site.inline_json("workflow", "run", "slow", "flow", "--plan-id", "slow-forged", "--no-wait")["run_id"]
    refused = CliRunner().invoke(fencepost_app, ["workflow", "cancel", run_id, "--reason", FORGED, "-d", site.url])
    assert refused.exit_code == 2, refused.output
    assert "a cancel reason is one line of plain text: '\\x1b' at position 0" in refused.output, refused.output
    assert "\x1b" not in refused.output
    # a right-to-left override shows the rest of the line reversed: refused too (a re-check trial)
    reversed_ = CliRunner().invoke(fencepost_app, ["workflow", "cancel", run_id, "--reason",
                                                   "stop \u202edeggol ton", "-d", site.url])
    assert reversed_.exit_code == 2 and "'\\u202e' at position 5" in reversed_.output, reversed_.output
    assert site.inline_json("workflow", "status", run_id)["cancel"] is None  # nothing was stored
    site.inline("workflow", "cancel", run_id, "--reason", "operator stop")
    # Text stored before ADR 0111 (or by an older fencepost) is still shown escaped: the cancel reason and a
    # step's reason (a task's error can quote anything).
    with sqlite3.connect(site.root / "control.db") as conn:
        conn.execute("UPDATE workflow_runs SET cancel_reason = ? WHERE id = ?", (FORGED, run_id))
        conn.execute("UPDATE workflow_step_mutations SET reason = ? WHERE run_id = ? AND kind = 'cancel'",
                     (FORGED, run_id))
    conn.close()
    shown = site.inline("workflow", "status", run_id)
    assert "\x1b" not in shown and "\nall good" not in shown, shown
    assert "cancel requested" in shown and "\\x1b[2J\\x1b[Hrun x succeeded\\nall good" in shown, shown
    assert "\\x1b[2J\\x1b[Hrun x succeeded all good" in shown, shown  # the steps' reason column: one line


def test_a_file_that_is_no_plan_is_told_so_before_any_word_on_its_fields(site: Site) -> None:
    # `{"bad": 1}` was told "the plan names no target (no target_id)" (a trial).
    bad = site.root / "not-a-plan.json"
    bad.write_text('{"bad": 1}', encoding="utf-8")
    for args in (["run", "--plan", str(bad)], ["admit", str(bad)]):
        result = CliRunner().invoke(fencepost_app, ["workflow", *args, "-d", site.url])
        assert result.exit_code == 2, (args, result.output)
        assert 'this is not a workflow plan: its "format" field is missing' in result.output, (args, result.output)
        assert '"format": 1' in result.output and "names no target" not in result.output, (args, result.output)


def test_a_failing_task_exits_1_naming_the_step_and_its_reason(site: Site, worker: Process) -> None:
    failed = site.cli("workflow", "run", "bad", "flow", "--plan-id", "bad-1")
    assert failed.returncode == 1, failed.describe()
    assert "failed: 1 failed, 1 skipped" in failed.stdout, failed.describe()
    assert "failed step a (task ta): " in failed.stdout and "no such table: nowhere" in failed.stdout, failed.describe()
    assert "skipped step b (task tb): dependency_not_succeeded: a failed" in failed.stdout, failed.describe()
    data = site.inline_json("workflow", "run", "bad", "flow", "--plan-id", "bad-1", code=1)
    assert {s["key"]: s["status"] for s in data["run"]["steps"]} == {"a": "failed", "b": "skipped"}
    assert {s["key"]: s["blocked_by"] for s in data["run"]["steps"]} == {
        "a": [], "b": [{"key": "a", "status": "failed"}]}


def test_cancel_finalizes_the_waiting_steps_at_once_and_the_run_settles_after_the_running_one(
        site: Site, worker: Process) -> None:
    admitted = site.inline_json("workflow", "run", "slow", "flow", "--plan-id", "slow-cancel", "--no-wait")
    run_id = admitted["run_id"]
    assert admitted["followed"] == "no" and admitted["run"]["status"] == "running"
    wait_until(lambda: site.statuses(run_id)["slow"] == "running", timeout=20, what="the slow step started")
    cancelled = site.inline_json("workflow", "cancel", run_id, "--reason", "operator stop")
    assert cancelled["outcome"] == "requested"
    assert cancelled["cancelled_now"] == ["b", "c"] and cancelled["still_running"] == ["slow"]
    assert cancelled["run"]["status"] == "running" and cancelled["run"]["cancel"]["reason"] == "operator stop"
    again = site.inline("workflow", "cancel", run_id, "--reason", "twice")
    assert "cancel was already requested" in again and "still running: slow" in again, again
    assert "(operator stop)" in again and "this one was not recorded" in again, again
    same = site.inline("workflow", "cancel", run_id, "--reason", "operator stop")
    assert "cancel was already requested" in same and "not recorded" not in same, same
    settled = site.cli("workflow", "status", run_id, "--watch", "--timeout", "30")
    assert settled.returncode == 7, settled.describe()  # the running step ended at its deadline: timed_out
    assert "timed_out step slow" in settled.stdout, settled.describe()
    assert site.statuses(run_id) == {"slow": "timed_out", "b": "cancelled", "c": "cancelled"}
    after = site.inline("workflow", "cancel", run_id, "--reason", "late")
    assert "already settled" in after, after


def test_sigint_stops_following_exits_130_and_the_run_goes_on(site: Site, worker: Process) -> None:
    follower = start_piped(["workflow", "run", "slow", "flow", "--plan-id", "slow-sigint"],
                           stderr_path=site.root / "sigint.err", env=subprocess_env(FENCEPOST_DATABASE=site.url))
    try:
        run_id = follower.expect(r"^created: run (wfr_\S+)").group(1)
        follower.expect(r"^\s+slow\s+(ready|running)")  # following (the first poll): SIGINT is ours now
        sent = time.monotonic()
        follower.popen.send_signal(signal.SIGINT)
        code = follower.popen.wait(10)
        took = time.monotonic() - sent
    finally:
        follower.stop(signal.SIGKILL)
    assert code == 130 and took < 2.0, (code, took, follower.stderr)
    assert f"fencepost workflow status {run_id} --watch" in follower.stderr and "Traceback" not in follower.stderr
    view = site.store.read(lambda tx: run_view(tx, run_id))
    assert view["status"] == "running" and view["cancel"] is None  # following stopped; the Run did not
    # slow reaches its deadline; b and c are skipped, so the Run fails (ADR-0226's aggregation order)
    settled = site.inline_json("workflow", "status", run_id, "--watch", "--timeout", "30", code=1)
    assert {s["key"]: s["status"] for s in settled["steps"]} == {"slow": "timed_out", "b": "skipped",
                                                                   "c": "skipped"}


@pytest.mark.postgres
def test_run_to_succeeded_on_postgresql(tmp_path: Path) -> None:
    with opened_backend("postgres", tmp_path) as backend:
        store = backend.migrated()
        install(store, tmp_path, OK, name="ok")
        url = cli_url(backend)
        process = start_worker(url, tmp_path)
        try:
            done = cli(url, "workflow", "run", "ok", "flow", "--plan-id", "pg-1", "--json")
        finally:
            kill_all([process])
        assert done.returncode == 0, done.describe()
        data = json.loads(done.stdout)
        assert (data["outcome"], data["run"]["status"]) == ("created", "succeeded")
        assert [s["status"] for s in data["run"]["steps"]] == ["succeeded", "succeeded"]
