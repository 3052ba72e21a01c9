"""``fencepost host submit|show|list`` and ``fencepost worker --app`` through the real CLI (subprocesses), with a
user's app module in the working directory (issue 12)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fencepost.core.statuses import InvocationStatus
from fencepost.outbox.registry import WorkerRegistration
from fencepost.store import open_store
from fencepost.store.host_records import NewEvent, Subject
from helpers.processes import run_cli, start, subprocess_env
from helpers.waiting import wait_until

APP = textwrap.dedent('''
    from pydantic import BaseModel
    from datetime import timedelta
    from fencepost.host import Accepted, Action, AdapterStep, Ambiguous, Host, PermanentFailure, Succeeded
    from fencepost.store.faults import FaultInjectingStore

    class Params(BaseModel):
        order_id: str

    class Echo:
        type, vendor = "echo", "local"
        def execute(self, call):
            if call.input["order_id"].startswith("slow-"):
                import time
                time.sleep(60)
            if call.input["order_id"].startswith("pause-") and call.operation == "first":
                import pathlib, time
                pathlib.Path(call.input["order_id"] + ".calling").write_text("")  # the call is in flight
                time.sleep(3)
            if call.input["order_id"] == "decline":
                return PermanentFailure("card declined")
            if call.input["order_id"].startswith("payout-"):
                return Accepted("ref-" + call.input["order_id"], {"queued": True})
            if call.input["order_id"] == "lost":
                return Ambiguous("connection reset after the request was sent")
            return Succeeded({"key": call.adapter_invocation_id[:6], "order": call.input["order_id"]})

    ACTION = Action(id="shop.echo", version=1, params=Params, handler=lambda ctx, p: {"order": p.order_id},
                    steps=(AdapterStep(name="echo", adapter="echo", operation="echo"),))

    PAYOUT = Action(id="shop.payout", version=1, params=Params, handler=lambda ctx, p: {"order": p.order_id},
                    steps=(AdapterStep(name="payout", adapter="echo", operation="payout"),),
                    completion_deadline=timedelta(hours=1))

    TWO = Action(id="shop.two", version=1, params=Params, handler=lambda ctx, p: {"order": p.order_id},
                 steps=(AdapterStep(name="first", adapter="echo", operation="first"),
                        AdapterStep(name="second", adapter="echo", operation="second")))

    def make(store):
        return Host(store, actions=[ACTION, PAYOUT, TWO], adapters=[Echo()])

    def unrecordable(store):  # the store refuses the fence of the success verdict once
        return Host(FaultInjectingStore(store, plan={"finish_command": {1}}), actions=[ACTION, PAYOUT],
                    adapters=[Echo()])
''')


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "shopapp.py").write_text(APP, encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'fp.db'}"
    assert run_cli(["migrate", "-d", url], cwd=tmp_path).returncode == 0
    return tmp_path


def test_submit_inline_show_and_list_print_the_verdict(app_dir: Path) -> None:
    url = f"sqlite:///{app_dir / 'fp.db'}"
    ran = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "o-1"}',
                   "--key", "k1", "--inline", "--json", "-d", url], cwd=app_dir)
    assert ran.returncode == 0, ran.describe()
    view = json.loads(ran.stdout)
    assert view["status"] == "succeeded" and view["attempt_count"] == 0
    assert view["result"]["steps"]["echo"]["order"] == "o-1"
    shown = run_cli(["host", "show", view["id"], "--json", "-d", url], cwd=app_dir)
    assert shown.returncode == 0 and json.loads(shown.stdout)["steps"][0]["status"] == "succeeded"
    listed = run_cli(["host", "list", "--json", "-d", url], cwd=app_dir)
    assert [v["id"] for v in json.loads(listed.stdout)["invocations"]] == [view["id"]]
    assert json.loads(listed.stdout)["more"] is False
    text = run_cli(["host", "show", view["id"], "-d", url], cwd=app_dir)
    assert "succeeded" in text.stdout and "step echo" in text.stdout


def test_list_says_when_more_match_than_its_limit_and_filters_by_action(app_dir: Path) -> None:
    """A new-user trial: `host list` stopped at --limit without a word, and had no --action filter."""
    url = f"sqlite:///{app_dir / 'fp.db'}"
    for i in range(3):
        assert run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", f'{{"order_id": "m{i}"}}',
                        "--key", f"m{i}", "--inline", "-d", url], cwd=app_dir).returncode == 0
    assert run_cli(["host", "submit", "shop.payout", "--app", "shopapp:make", "--params", '{"order_id": "p0"}',
                    "--key", "p0", "-d", url], cwd=app_dir).returncode == 0
    cut = run_cli(["host", "list", "--limit", "2", "-d", url], cwd=app_dir)
    assert cut.returncode == 0 and "... more match: these are the newest 2" in cut.stdout, cut.stdout
    as_json = json.loads(run_cli(["host", "list", "--limit", "2", "--json", "-d", url], cwd=app_dir).stdout)
    assert len(as_json["invocations"]) == 2 and as_json["more"] is True
    echoes = json.loads(run_cli(["host", "list", "--action", "shop.echo", "--json", "-d", url], cwd=app_dir).stdout)
    assert {v["action_id"] for v in echoes["invocations"]} == {"shop.echo"} and len(echoes["invocations"]) == 3
    assert echoes["more"] is False
    whole = run_cli(["host", "list", "-d", url], cwd=app_dir)
    assert "more match" not in whole.stdout and whole.stdout.count(" key ") == 4


def test_a_replay_says_it_ran_nothing_again(app_dir: Path) -> None:
    """A new-user trial: a replayed submit printed exactly what a new one prints."""
    url = f"sqlite:///{app_dir / 'fp.db'}"
    args = ["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "r-1"}', "--key", "r1",
            "--inline", "-d", url]
    first = run_cli([*args, "--json"], cwd=app_dir)
    assert first.returncode == 0 and json.loads(first.stdout)["replayed"] is False, first.describe()
    assert "submitted before" not in first.stderr
    again = run_cli([*args, "--json"], cwd=app_dir)
    view = json.loads(again.stdout)
    assert again.returncode == 0 and view["replayed"] is True and view["status"] == "succeeded", again.describe()
    assert f"--key r1 names invocation {view['id']}, submitted before: it is shown as it is and nothing ran again" \
        in again.stderr, again.stderr


def test_a_conflicting_replay_exits_3_naming_the_field(app_dir: Path) -> None:
    url = f"sqlite:///{app_dir / 'fp.db'}"
    base = ["host", "submit", "shop.echo", "--app", "shopapp:make", "--key", "k1", "-d", url]
    assert run_cli([*base, "--params", '{"order_id": "secret-1"}'], cwd=app_dir).returncode == 0
    again = run_cli([*base, "--params", '{"order_id": "other"}'], cwd=app_dir)
    assert again.returncode == 3 and "parameters" in again.stderr and "secret-1" not in again.stderr


def test_worker_app_serves_host_invocations(app_dir: Path) -> None:
    url = f"sqlite:///{app_dir / 'fp.db'}"
    queued = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "o-2"}',
                      "--key", "k2", "--json", "-d", url], cwd=app_dir)
    assert queued.returncode == 0, queued.describe()
    invocation_id = json.loads(queued.stdout)["id"]
    worker = start(["worker", "-d", url, "--app", "shopapp:make", "--work-dir", str(app_dir / "work"),
                    "--poll-interval", "0.05", "--lease-seconds", "5"], name="worker",
                   stdout_path=app_dir / "worker.log", cwd=app_dir, env=subprocess_env())
    store = open_store(url, create=False)
    try:
        def settled() -> bool:
            record = store.read(lambda tx: tx.host.get_invocation(invocation_id))
            return record is not None and record.status is InvocationStatus.SUCCEEDED
        wait_until(settled, 30, "the worker to run the invocation")
        record = store.read(lambda tx: tx.host.get_invocation(invocation_id))
        assert record is not None and record.attempt_count == 1
    finally:
        worker.stop_cleanly()
        store.close()
    # show names who held it and how the lease ended (a new-user trial: only the page had the lease timeline)
    shown = json.loads(run_cli(["host", "show", invocation_id, "--json", "-d", url], cwd=app_dir).stdout)
    [lease] = shown["lease_timeline"]
    assert (lease["delivery"], lease["claim"], lease["ended"]) == (1, "claim", "delivered"), lease
    assert lease["owner"]
    text = run_cli(["host", "show", invocation_id, "-d", url], cwd=app_dir).stdout
    assert f"lease #1 (claim) {lease['owner']}  claimed {lease['claimed_at']}" in text, text
    assert ": delivered at " in text, text


def test_a_bad_app_spec_is_refused_in_one_line(app_dir: Path) -> None:
    url = f"sqlite:///{app_dir / 'fp.db'}"
    bad = run_cli(["host", "submit", "shop.echo", "--app", "nosuchmodule:make", "--key", "k", "-d", url],
                  cwd=app_dir)
    assert bad.returncode == 2 and "cannot import nosuchmodule" in bad.stderr


@pytest.mark.parametrize(("spec", "expected"), [
    ("./shopapp.py:make", "names a module"),          # a file path, not a module
    ("shopapp:ACTION", "neither a Host nor a callable"),  # an Action, not a Host factory
    ("shopapp:Echo", "raised TypeError"),             # a class that does not take the store
    ("broken:make", "does not parse"),                # a syntax error in the user's module
    ("raising:make", "raised RuntimeError: no config (at "),  # the module raises while it is imported ...
    ("raising:make", "raising.py:1 in <module>)"),    # ... and the line says where (a new-user trial)
    ("decoding:make", "decoding.py:2 in <module>)"),  # the user's line, not json's own frames below it
    ("depapp:make", "importing depapp raised ModuleNotFoundError"),  # found; an import inside it failed ...
    ("depapp:make", "depapp.py:1 in <module>)"),      # ... not "cannot import depapp" (a verification trial)
])
def test_every_bad_app_is_one_line_exit_2_never_a_traceback(app_dir: Path, spec: str, expected: str) -> None:
    (app_dir / "broken.py").write_text("def make(store:\n", encoding="utf-8")
    (app_dir / "raising.py").write_text("raise RuntimeError('no config')\n", encoding="utf-8")
    (app_dir / "decoding.py").write_text("import json\nCONFIG = json.loads('{')\n", encoding="utf-8")
    (app_dir / "depapp.py").write_text("import stripe_not_installed_here\n", encoding="utf-8")
    url = f"sqlite:///{app_dir / 'fp.db'}"
    bad = run_cli(["host", "submit", "shop.echo", "--app", spec, "--key", "k", "-d", url], cwd=app_dir)
    assert bad.returncode == 2, bad.stderr
    assert expected in bad.stderr and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_docs_warn_against_secrets_in_params() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "host.md").read_text(encoding="utf-8")
    assert "## Secrets never belong in params" in text  # A20
    assert "you must cap your own retries" in text  # A6
    for status in ("succeeded", "failed", "reconciliation_required", "recovery attempts exhausted (n/max)"):
        assert status in text


def test_show_names_what_was_submitted_the_provider_key_and_the_events(app_dir: Path) -> None:
    url = f"sqlite:///{app_dir / 'fp.db'}"
    ran = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "o-9"}',
                   "--key", "k9", "--authority", "role:cashier", "--inline", "--json", "-d", url], cwd=app_dir)
    view = json.loads(ran.stdout)
    shown = json.loads(run_cli(["host", "show", view["id"], "--json", "-d", url], cwd=app_dir).stdout)
    assert shown["params"] == {"order_id": "o-9"} and shown["authority"] == "role:cashier"
    assert shown["params_digest"].startswith("cp1:")
    assert [e["type"] for e in shown["events"]] == ["ActionInvocationStarted", "AdapterInvocationSucceeded",
                                                    "ActionInvocationSucceeded"]
    text = run_cli(["host", "show", view["id"], "-d", url], cwd=app_dir).stdout
    key = shown["steps"][0]["adapter_invocation_id"]
    assert f"provider key {key}" in text and "role:cashier" in text and "ActionInvocationSucceeded" in text


def test_show_of_a_pending_invocation_says_whether_a_live_worker_serves_it(app_dir: Path) -> None:
    """A new-user trial: with no worker running, a dispatched invocation waited and nothing said why."""
    url = f"sqlite:///{app_dir / 'fp.db'}"
    ran = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "o-w"}',
                   "--key", "kw", "--json", "-d", url], cwd=app_dir)
    view = json.loads(ran.stdout)
    shown = json.loads(run_cli(["host", "show", view["id"], "--json", "-d", url], cwd=app_dir).stdout)
    assert shown["status"] == "pending"
    waiting = shown["waiting"]
    assert (waiting["kind"], waiting["live_workers_serving"]) == ("host.invoke:shop.echo@1", 0)
    assert waiting["pending_seconds"] >= 0
    text = run_cli(["host", "show", view["id"], "-d", url], cwd=app_dir).stdout
    assert "no live worker serves host.invoke:shop.echo@1: nothing runs it until one starts" in text
    # ... and the submit itself said so, on stderr (its --json stdout stays the view alone)
    assert "no live `fencepost worker` serves shop.echo v1" in ran.stderr, ran.stderr
    store = open_store(url)
    try:  # a live registration serving the kind (the registry is what `fencepost workers` reads)
        registration = WorkerRegistration(store, "w-live", ["host.invoke:shop.echo@1"], heartbeat_seconds=10.0)
        assert registration.start()
        text = run_cli(["host", "show", view["id"], "-d", url], cwd=app_dir).stdout
        assert "1 live worker serves it" in text, text
        served = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "o-v"}',
                          "--key", "kv", "-d", url], cwd=app_dir)
        assert served.returncode == 0 and "no live" not in served.stderr, served.stderr
        registration.stop()
    finally:
        store.close()
    done = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "o-x"}',
                    "--key", "kx", "--inline", "--json", "-d", url], cwd=app_dir)
    settled = json.loads(run_cli(["host", "show", json.loads(done.stdout)["id"], "--json", "-d", url],
                                 cwd=app_dir).stdout)
    assert settled["waiting"] is None


def test_show_finds_the_events_of_an_invocation_in_a_space_of_many(app_dir: Path) -> None:
    """A new user's trial: show read the space's first 1,000 events and filtered them, so every invocation after
    the first few hundred of a space showed part of its history or none of it."""
    url = f"sqlite:///{app_dir / 'fp.db'}"

    def submit(key: str) -> dict[str, str]:
        ran = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "o"}',
                       "--key", key, "--inline", "--json", "-d", url], cwd=app_dir)
        assert ran.returncode == 0, ran.describe()
        view: dict[str, str] = json.loads(ran.stdout)
        return view

    first = submit("k-first")
    store = open_store(url)
    try:
        def others(tx: Any) -> None:
            for n in range(1100):
                assert tx.events.append_event(NewEvent(
                    id=f"evt-other-{n}", tenant_id=first["tenant_id"], space_id=first["space_id"],
                    subject=Subject("Other", str(n)), type="Tested", payload={"n": n}))

        store.transact(others)
    finally:
        store.close()
    later = submit("k-later")
    shown = json.loads(run_cli(["host", "show", later["id"], "--json", "-d", url], cwd=app_dir).stdout)
    assert [(e["type"], e["sequence"]) for e in shown["events"]] == [
        ("ActionInvocationStarted", 1104), ("AdapterInvocationSucceeded", 1105), ("ActionInvocationSucceeded", 1106)]


def test_an_inline_run_that_did_not_succeed_exits_1(app_dir: Path) -> None:
    url = f"sqlite:///{app_dir / 'fp.db'}"
    ran = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "decline"}',
                   "--key", "kd", "--inline", "--json", "-d", url], cwd=app_dir)
    assert ran.returncode == 1, ran.describe()
    assert json.loads(ran.stdout)["status"] == "failed"


def test_an_inline_replay_of_an_unfinished_invocation_exits_1_saying_it_ran_nothing(app_dir: Path) -> None:
    """A break-it trial: the key of a dispatched, still pending invocation given to ``submit --inline`` printed
    "pending" and exited 0, which a script reads as a success."""
    url = f"sqlite:///{app_dir / 'fp.db'}"
    base = ["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "o-9"}', "--key",
            "kp", "-d", url]
    assert run_cli(base, cwd=app_dir).returncode == 0  # dispatched: pending, no worker runs here
    replay = run_cli([*base, "--inline", "--json"], cwd=app_dir)
    assert replay.returncode == 1, replay.describe()
    assert json.loads(replay.stdout)["status"] == "pending"
    assert "--inline ran nothing here" in replay.stderr and "a worker serving this action runs it" in replay.stderr


def test_list_never_cuts_an_id_or_a_verdict_in_a_narrow_terminal(app_dir: Path) -> None:
    url = f"sqlite:///{app_dir / 'fp.db'}"
    ran = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "decline"}',
                   "--key", "kn", "--inline", "--json", "-d", url], cwd=app_dir)
    invocation_id = json.loads(ran.stdout)["id"]
    listed = run_cli(["host", "list", "-d", url], cwd=app_dir, env={**subprocess_env(), "COLUMNS": "60"})
    assert invocation_id in listed.stdout and "failed" in listed.stdout, listed.stdout
    # the attempts, the key and the error are not dropped for want of width (a table would drop them)
    assert "key kn" in listed.stdout and "attempts 0" in listed.stdout and "  error: " in listed.stdout, listed.stdout
    # an inline run is its caller's (no worker claim): never a bare "attempts 0" that reads as "never ran"
    assert "attempts 0 (run inline)" in " ".join(listed.stdout.split()), listed.stdout


def test_an_unrecorded_inline_outcome_exits_5_naming_the_invocation(app_dir: Path) -> None:
    """RecoverableFinalization from an inline run: exit 5, one line that names the invocation to look at."""
    url = f"sqlite:///{app_dir / 'fp.db'}"
    ran = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:unrecordable", "--params",
                   '{"order_id": "o1"}', "--key", "k", "--inline", "-d", url], cwd=app_dir)
    assert ran.returncode == 5, ran.stderr
    [line] = ran.stderr.strip().splitlines()
    listed = run_cli(["host", "list", "--json", "-d", url], cwd=app_dir)
    [invocation] = json.loads(listed.stdout)["invocations"]
    assert f"fencepost host show {invocation['id']}" in line and invocation["status"] == "running"


def test_show_lists_reconciliation_records_and_event_payloads(app_dir: Path) -> None:
    url = f"sqlite:///{app_dir / 'fp.db'}"
    ran = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "lost"}',
                   "--key", "k", "--inline", "--json", "-d", url], cwd=app_dir)
    assert ran.returncode == 1, ran.stderr
    invocation_id = json.loads(ran.stdout)["id"]
    shown = run_cli(["host", "show", invocation_id, "--json", "-d", url], cwd=app_dir)
    data = json.loads(shown.stdout)
    [record] = data["reconciliations"]
    assert record["log"] == "governance" and record["kind"] == "adapter_outcome_ambiguous"
    assert record["adapter_invocation_id"] == data["steps"][0]["adapter_invocation_id"]
    [ambiguous] = [e for e in data["events"] if e["type"] == "AdapterInvocationAmbiguous"]
    assert "connection reset" in ambiguous["payload"]["reason"]
    text = run_cli(["host", "show", invocation_id, "-d", url], cwd=app_dir)
    assert "reconciliation record (governance) adapter_outcome_ambiguous" in text.stdout


def test_complete_and_sweep_from_the_command_line(app_dir: Path) -> None:
    """host-spec N through the CLI: a parked payout is settled by ``host complete`` (exit 0), an identical repeat is
    absorbed (exit 0), an unknown reference records nothing (exit 1), and ``host sweep`` finds nothing overdue."""
    url = f"sqlite:///{app_dir / 'fp.db'}"
    ran = run_cli(["host", "submit", "shop.payout", "--app", "shopapp:make", "--params", '{"order_id": "payout-1"}',
                   "--key", "p1", "--inline", "--json", "-d", url], cwd=app_dir)
    assert ran.returncode == 0, ran.stderr
    submitted = json.loads(ran.stdout)
    assert submitted["status"] == "running" and submitted["parked"] is True  # waiting for its completion
    assert submitted["handoff"]["external_reference"] == "ref-payout-1" and submitted["handoff"]["due_at"]
    text = run_cli(["host", "show", submitted["id"], "-d", url], cwd=app_dir)
    assert "handoff: local ref-payout-1 (step payout), parked, waiting for its completion" in text.stdout
    base = ["host", "complete", "local", "ref-payout-1", "--app", "shopapp:make", "--json", "-d", url]
    settled = run_cli([*base, "--result", '{"payout_id": "p-1"}'], cwd=app_dir)
    assert settled.returncode == 0 and json.loads(settled.stdout)["disposition"] == "settled", settled.stderr
    shown = json.loads(run_cli(["host", "show", submitted["id"], "--json", "-d", url], cwd=app_dir).stdout)
    assert shown["parked"] is False and shown["external_completion"]["result"] == {"payout_id": "p-1"}
    assert shown["handoff"]["step"] == "payout" and shown["handoff"]["adapter_invocation_id"]  # not None once taken
    again = run_cli([*base, "--result", '{"payout_id": "p-1"}'], cwd=app_dir)
    assert json.loads(again.stdout)["disposition"] == "absorbed"
    unknown = run_cli(["host", "complete", "local", "ref-nope", "--app", "shopapp:make", "-d", url], cwd=app_dir)
    assert unknown.returncode == 1 and "not_found" in unknown.stdout
    swept = run_cli(["host", "sweep", "--app", "shopapp:make", "--json", "-d", url], cwd=app_dir)
    assert swept.returncode == 0 and json.loads(swept.stdout) == {"settled": 0, "expired_approvals": 0}


def test_host_status_prints_the_counts_and_exits_by_the_store_only(app_dir: Path) -> None:
    """``fencepost host status`` (host-spec W2; ADR 0051): counts never change the exit code; a schema that is
    not current exits 4 with the versions, a store that does not answer exits 5."""
    url = f"sqlite:///{app_dir / 'fp.db'}"
    calm = run_cli(["host", "status", "-d", url], cwd=app_dir)
    assert calm.returncode == 0, calm.describe()
    assert "open reconciliations" in calm.stdout and "nothing needs attention" in calm.stdout
    lost = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "lost"}',
                    "--key", "k", "--inline", "--json", "-d", url], cwd=app_dir)
    assert json.loads(lost.stdout)["status"] == "reconciliation_required"
    busy = run_cli(["host", "status", "--json", "--stuck-after", "60", "-d", url], cwd=app_dir)
    assert busy.returncode == 0, busy.describe()
    data = json.loads(busy.stdout)
    assert data["open_reconciliations"] == 1 and data["attention"] is True and data["stuck_after_seconds"] == 60.0
    assert data["schema_current"] is True and data["dead_letters"] == 0
    assert data["pending_invocations"] == 0 and data["backlog"] == []
    # A dispatched invocation with no worker running: the status says nobody will run it (a new-user trial read
    # "nothing needs attention" while it waited).
    queued = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--params", '{"order_id": "q"}',
                      "--key", "q", "-d", url], cwd=app_dir)
    assert queued.returncode == 0, queued.describe()
    waiting = run_cli(["host", "status", "-d", url], cwd=app_dir)
    assert "host.invoke:shop.echo@1: 1 pending" in waiting.stdout, waiting.stdout
    # "pending" is the command's state; the invocation a stopped worker gave back stays running (host list)
    assert "invocations waiting for a worker, by action" in waiting.stdout, waiting.stdout
    assert "no live worker claims this kind" in waiting.stdout and "start `fencepost worker" in waiting.stdout
    assert "nothing needs attention" not in waiting.stdout
    empty = open_store(f"sqlite:///{app_dir / 'empty.db'}", create=True)  # a database never migrated
    assert empty.schema_version() == 0
    empty.close()
    behind = run_cli(["host", "status", "--json", "-d", f"sqlite:///{app_dir / 'empty.db'}"], cwd=app_dir)
    assert behind.returncode == 4, behind.describe()
    assert json.loads(behind.stdout)["schema_version"] == 0 and json.loads(behind.stdout)["stuck_runs"] is None
    down = run_cli(["host", "status", "-d", "postgresql://postgres@127.0.0.1:9/none?connect_timeout=2"],
                   cwd=app_dir)
    assert down.returncode == 5, down.describe()


def test_an_app_host_keeps_its_circuit_breakers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--app`` rebuilds the user's Host on the command's store: its breakers, telemetry sink and redaction hooks
    come along (ADRs 0050, 0042: a worker started with --app must not store what the app's hooks redact)."""
    (tmp_path / "breakerapp.py").write_text(textwrap.dedent('''
        from fencepost.host import Breakers, Host, HostConfig, Redaction
        from fencepost.host.telemetry import NullTelemetry
        from fencepost.store import open_store
        BREAKERS = Breakers(failure_threshold=2)
        REDACTION = Redaction(redact_action_parameters=lambda action_id, params: params)
        TELEMETRY = NullTelemetry()
        HOST = Host(open_store("sqlite:///''' + str(tmp_path / "app.db") + '''"), breakers=BREAKERS,
                    redaction=REDACTION, telemetry=TELEMETRY,
                    config=HostConfig(params_digest_key=b"cli-test-digest-key-0123"))
    '''), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_host puts the working directory on it
    monkeypatch.delitem(sys.modules, "breakerapp", raising=False)
    from fencepost.cli.host_cmds import load_host

    store = open_store(f"sqlite:///{tmp_path / 'fp.db'}")
    try:
        loaded = load_host("breakerapp:HOST", store)
        import breakerapp  # type: ignore[import-not-found]

        assert loaded.runtime.breakers is breakerapp.BREAKERS and loaded.store is store
        assert loaded.runtime.redaction is breakerapp.REDACTION
        assert loaded.runtime.telemetry is breakerapp.TELEMETRY
    finally:
        store.close()
        sys.modules.pop("breakerapp", None)


def test_a_too_deeply_nested_json_option_is_bad_input_not_a_traceback(app_dir: Path) -> None:
    """JSON nested past the parser's recursion limit is exit 2 in one line (the exit code of bad input), never
    a RecursionError traceback with exit 1 (which ``approve`` and ``submit --inline`` use for a verdict)."""
    url = f"sqlite:///{app_dir / 'fp.db'}"
    deep = '{"a":' * 3000 + "1" + "}" * 3000
    for args in (["host", "resolve", "inv_nope", "--succeeded", "--as", "ops:1", "--note", "x", "--evidence", deep],
                 ["host", "submit", "shop.echo", "--app", "shopapp:make", "--key", "k", "--params", deep]):
        refused = run_cli([*args, "-d", url], cwd=app_dir)
        assert refused.returncode == 2, refused.stderr
        assert "Traceback" not in refused.stderr and "RecursionError" not in refused.stderr
        assert "nested too deeply" in refused.stderr


def test_host_status_of_a_file_that_exists_but_cannot_be_opened_is_store_down_not_never_migrated(
        tmp_path: Path) -> None:
    """ADR 0051's exit codes: a path that exists but SQLite cannot open (here a directory; likewise a database in a
    directory where the WAL's -shm cannot be created) is a store that does not answer (exit 5, SQLite's reason),
    not "no control database exists yet: run fencepost migrate" (exit 4), which would send the operator to
    migrate a database that is there. A missing file is still exit 4."""
    (tmp_path / "a-directory").mkdir()
    unopenable = run_cli(["host", "status", "-d", f"sqlite:///{tmp_path / 'a-directory'}"], cwd=tmp_path)
    assert unopenable.returncode == 5, unopenable.describe()
    assert "migrate" not in unopenable.stderr and "unable to open" in unopenable.stderr
    missing = run_cli(["host", "status", "-d", f"sqlite:///{tmp_path / 'missing.db'}"], cwd=tmp_path)
    assert missing.returncode == 4 and "run `fencepost migrate` first" in missing.stderr, missing.describe()
    # it says how to name another database (a new user's shell lacked FENCEPOST_DATABASE), never the path
    assert "-d or FENCEPOST_DATABASE" in missing.stderr and str(tmp_path) not in missing.stderr
    assert not (tmp_path / "missing.db").exists()


def test_params_that_are_not_json_say_where_the_json_breaks(app_dir: Path) -> None:
    """From a new user's trial: ``--params '{bad'`` only said "must be a JSON object"."""
    url = f"sqlite:///{app_dir / 'fp.db'}"
    refused = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--key", "k", "--params", "{bad",
                       "-d", url], cwd=app_dir)
    assert refused.returncode == 2, refused.stderr
    assert "--params must be a JSON object; it is not valid JSON: Expecting property name enclosed in double " \
           "quotes (line 1 column 2)" in refused.stderr, refused.stderr


def test_params_naming_a_key_twice_are_refused_not_silently_the_last(app_dir: Path) -> None:
    """From a new user's trial: ``{"order_id": "o-91", ..., "order_id": "o-92"}`` was stored as o-92, exit 0."""
    url = f"sqlite:///{app_dir / 'fp.db'}"
    for option, value in (("--params", '{"order_id": "o-91", "amount": 5, "order_id": "o-92"}'),
                          ("--params", '{"outer": {"a": 1, "a": 2}}')):
        refused = run_cli(["host", "submit", "shop.echo", "--app", "shopapp:make", "--key", "k", option, value,
                           "-d", url], cwd=app_dir)
        assert refused.returncode == 2, refused.describe()
        assert f"{option} must be a JSON object: duplicate key" in refused.stderr, refused.stderr
    listed = run_cli(["host", "list", "-d", url, "--json"], cwd=app_dir)
    assert listed.returncode == 0 and json.loads(listed.stdout) == {"invocations": [], "more": False}, listed.describe()


def test_an_interrupted_inline_submit_names_the_invocation_and_who_finishes_it(app_dir: Path) -> None:
    """From a new user's trial: Ctrl-C of ``host submit --inline`` exited 130 without a word, the invocation left
    running under the dead caller's lease."""
    import signal
    import subprocess
    import time

    from fencepost.store import open_store

    url = f"sqlite:///{app_dir / 'fp.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fencepost.cli", "host", "submit", "shop.echo", "--app", "shopapp:make", "--params",
         '{"order_id": "slow-1"}', "--key", "s1", "--inline", "-d", url],
        cwd=app_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(app_dir)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's foreground job
    store = open_store(url)
    try:
        deadline = time.monotonic() + 30
        # The step's row is written running before the provider is called: the run is then in the slow call.
        while not store.read(lambda tx: [a for i in tx.host.list_invocations()
                                         for a in tx.host.list_adapter_invocations(i.id)]):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        [invocation] = store.read(lambda tx: tx.host.list_invocations())
    finally:
        store.close()
    proc.send_signal(signal.SIGINT)  # the first: the call in flight may finish (60 s here), nothing later starts
    time.sleep(1.0)
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)  # the second abandons it
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "finishing the run: a provider call in flight is waited for and recorded" in stderr, stderr
    assert f"invocation {invocation.id} is still running under this process's lease" in stderr, stderr
    assert "takes it over once the lease expires" in stderr and "Traceback" not in stderr, stderr
    assert stderr.count("interrupted") == 1, stderr  # the second Ctrl-C's account, once
    # Held by the dead caller's lease, show says nothing more; once that lease lapses it says that nobody holds it
    # and that no worker will take it over (a break-it trial: show printed only "running").
    held = run_cli(["host", "show", invocation.id, "--json", "-d", url], cwd=app_dir)
    assert json.loads(held.stdout)["waiting"] is None, held.stdout
    import sqlite3

    with sqlite3.connect(app_dir / "fp.db") as db:  # the lease lapses (the store's own clock is not ours to move)
        db.execute("UPDATE commands SET lease_until = '2001-01-01T00:00:00.000000Z' WHERE id = ?", (invocation.id,))
    lapsed = json.loads(run_cli(["host", "show", invocation.id, "--json", "-d", url], cwd=app_dir).stdout)
    assert lapsed["waiting"]["live_workers_serving"] == 0 and lapsed["waiting"]["unheld_seconds"] > 3600, lapsed
    text = run_cli(["host", "show", invocation.id, "-d", url], cwd=app_dir).stdout
    assert "no lease held for" in text and "it stays running until one starts and takes it over" in text, text


def test_a_first_ctrl_c_of_an_inline_run_lets_it_finish_and_record_its_verdict(app_dir: Path) -> None:
    """A new-user trial: Ctrl-C of ``host submit --inline`` abandoned a provider call that would have answered a
    moment later, and a non-idempotent invocation then needed an operator. The first Ctrl-C now lets the run
    finish, as a worker's graceful stop does: the call in flight returns and is recorded, the later step runs,
    and the verdict is printed (the second Ctrl-C abandons it: the test above)."""
    import signal
    import subprocess

    url = f"sqlite:///{app_dir / 'fp.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fencepost.cli", "host", "submit", "shop.two", "--app", "shopapp:make", "--params",
         '{"order_id": "pause-1"}', "--key", "p1", "--inline", "--json", "-d", url],
        cwd=app_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(app_dir)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's foreground job
    wait_until(lambda: (app_dir / "pause-1.calling").exists() or proc.poll() is not None, timeout=30)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "finishing the run: a provider call in flight is waited for and recorded" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    view = json.loads(stdout)
    assert view["status"] == "succeeded" and [s["status"] for s in view["steps"]] == ["succeeded", "succeeded"]


def test_a_closed_stdout_ends_the_command_with_141_not_the_gate_blocked_code(app_dir: Path) -> None:
    """From a new user's trial: ``fencepost ... | head -1`` exited 1 once ``head`` left, and 1 is ``rehearse``'s
    code for a blocked release gate. It exits 141 (128 + SIGPIPE), saying nothing on stderr (a later trial found
    a line there to be noise after every ``| head``)."""
    import subprocess

    for args in (["--help"], ["host", "list", "-d", f"sqlite:///{app_dir / 'fp.db'}"]):
        proc = subprocess.Popen([sys.executable, "-m", "fencepost.cli", *args], cwd=app_dir,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.close()  # the reader is gone before the first line is written
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 141, stderr
        assert stderr == "", stderr  # silent, as a Unix filter is when its reader leaves


def test_a_stdout_that_refuses_writes_is_one_line_and_exit_74(app_dir: Path) -> None:
    """A break-it trial: ``fencepost host list > /dev/full`` ended in an OSError traceback."""
    import subprocess

    if not Path("/dev/full").exists():  # Linux has it; the check needs it
        pytest.fail("/dev/full is missing on this machine")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "fencepost.cli", "--help"], cwd=app_dir, stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 74, proc.stderr
    assert proc.stderr == "fencepost: cannot write to standard output: No space left on device; stopped\n"
