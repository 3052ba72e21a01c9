"""``fencepost serve`` as a process: refuses an unmigrated database (exit 4), prints its address and a
generated token once, and stops gracefully (workers released) on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import textwrap
import time
import urllib.request
from pathlib import Path

from fencepost.core.statuses import InvocationStatus
from fencepost.store import open_store
from helpers.processes import run_cli, start_piped


def test_serve_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    result = run_cli(["serve", "--database", f"sqlite:///{db}", "--port", "0"], timeout=60)
    assert result.returncode == 4, result.describe()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "fencepost migrate" in lines[0]
    assert str(db) not in result.stderr and result.stdout == ""


def test_serve_refuses_a_short_api_token(tmp_path: Path) -> None:
    result = run_cli(["serve", "--database", f"sqlite:///{tmp_path / 'x.db'}", "--api-token", "short"], timeout=60)
    assert result.returncode == 2 and "at least 16" in result.stderr


def test_serve_prints_address_and_token_then_stops_gracefully(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'control.db'}"
    migrated = run_cli(["migrate", "--database", database])
    assert migrated.returncode == 0, migrated.describe()
    # No --log-format: stderr is a file, so the default (auto) logs JSON, as a log collector expects.
    proc = start_piped(["serve", "--database", database, "--port", "0", "--workers", "2",
                        "--work-dir", str(tmp_path / "work")],
                       stderr_path=tmp_path / "serve.err")
    try:
        address = proc.next_line(timeout=60)
        token_line = proc.next_line(timeout=60)
        assert "serving on http://127.0.0.1:" in address and "2 worker threads" in address
        assert str(tmp_path) not in address
        token = token_line.rsplit(" ", 1)[1].strip()
        assert len(token) >= 24
        url = address.split("serving on ", 1)[1].split(" ", 1)[0].rstrip("/")
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(url + "/health/ready", timeout=2) as response:
                    assert json.load(response)["status"] == "ready"
                    break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        code = proc.stop(signal.SIGTERM, timeout=60)
    finally:
        proc.stop(signal.SIGKILL)
    out, err = proc.rest(), proc.stderr
    assert code == 0, err
    assert token not in out and token not in err, "the token is printed once, never logged"
    logged = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is a JSON object
    assert len([record for record in logged if record.get("event") == "worker_stopped"]) == 2, err
    assert str(tmp_path) not in err


def test_serve_help_names_every_environment_variable() -> None:
    result = run_cli(["serve", "--help"], timeout=60,
                     env={**os.environ, "COLUMNS": "200", "FENCEPOST_API_TOKEN": "secret-value-not-shown-1234"})
    assert result.returncode == 0, result.stderr
    for name in ("DATABASE", "HOST", "PORT", "WORKERS", "WORK_DIR", "LEASE_SECONDS", "API_TOKEN", "LOG_FORMAT"):
        assert f"[env var: FENCEPOST_{name}]" in result.stdout, name
    assert "secret-value-not-shown" not in result.stdout


def test_configuration_doc_lists_every_cli_environment_variable() -> None:
    # docs/configuration.md promises every variable the commands read
    root = Path(__file__).resolve().parents[2]
    source = "\n".join(p.read_text() for p in (root / "src" / "fencepost" / "cli").glob("*.py"))
    declared = set(re.findall(r'envvar="(FENCEPOST_[A-Z_]+)"', source))
    assert {"FENCEPOST_HOST", "FENCEPOST_PORT", "FENCEPOST_WORKERS", "FENCEPOST_API_TOKEN"} <= declared
    documented = set(re.findall(r"^\| `(FENCEPOST_[A-Z_]+)` \|", (root / "docs" / "configuration.md").read_text(),
                                re.MULTILINE))
    assert declared <= documented, declared - documented


SLOW_APP = textwrap.dedent('''
    import time
    from pydantic import BaseModel
    from fencepost.host import Action, AdapterStep, Host, Succeeded

    class Params(BaseModel):
        order_id: str

    class SlowCharge:
        type, vendor = "pay", "slowpay"
        def execute(self, call):
            time.sleep(3.0)  # the provider takes its time; SIGTERM arrives meanwhile
            return Succeeded({"charge": "ch_" + call.input["order_id"]})

    ACTION = Action(id="shop.charge", version=1, params=Params, handler=lambda ctx, p: {"order": p.order_id},
                    steps=(AdapterStep(name="charge", adapter="pay", operation="charge"),))

    def make(store):
        return Host(store, actions=[ACTION], adapters=[SlowCharge()])
''')


def test_sigterm_lets_a_running_host_call_finish_within_the_grace_period(tmp_path: Path) -> None:
    """A routine restart of ``serve`` must not turn a call in flight into operator work: with a grace period the
    in-process worker lets it finish, records ``succeeded`` and exits. It was interrupted at once, and a
    non-idempotent call that had reached its provider ended ``reconciliation_required`` (a new-user trial)."""
    (tmp_path / "slowapp.py").write_text(SLOW_APP, encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'fp.db'}"
    assert run_cli(["migrate", "-d", url], cwd=tmp_path).returncode == 0
    proc = start_piped(["serve", "-d", url, "--port", "0", "--app", "slowapp:make", "--grace-period", "20",
                        "--work-dir", str(tmp_path / "work"), "--log-format", "json"],
                       stderr_path=tmp_path / "serve.err", cwd=tmp_path)
    try:
        proc.next_line(timeout=60)
        submitted = run_cli(["host", "submit", "shop.charge", "--app", "slowapp:make", "--params",
                             '{"order_id": "o-1"}', "--key", "k1", "--json", "-d", url], cwd=tmp_path)
        assert submitted.returncode == 0, submitted.describe()
        invocation_id = json.loads(submitted.stdout)["id"]
        store = open_store(url)
        try:
            deadline = time.monotonic() + 30
            while not store.read(lambda tx: tx.host.list_adapter_invocations(invocation_id)):
                assert time.monotonic() < deadline, "the step never started"
                time.sleep(0.05)
            stopped_at = time.monotonic()
            code = proc.stop(signal.SIGTERM, timeout=30)
            took = time.monotonic() - stopped_at
            view = store.read(lambda tx: tx.host.get_invocation(invocation_id))
        finally:
            store.close()
    finally:
        proc.stop(signal.SIGKILL)
    assert code == 0, proc.stderr
    assert view is not None and view.status is InvocationStatus.SUCCEEDED, (view, proc.stderr)
    assert took < 15, took
    assert "running command(s) get up to 20 s to finish" in proc.stderr
