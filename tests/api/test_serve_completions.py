"""``fencepost serve --app --completion-secret`` as a process on loopback (ADR 0036): the secret comes from the
named environment variable, the app module's ``COMPLETION_PARSERS`` maps a vendor's webhook, a signed callback
settles a payout parked by ``fencepost host submit --inline``, and a refused one leaves a log line only."""

from __future__ import annotations

import json
import signal
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from fencepost.api.signatures import sign
from fencepost.core.statuses import InvocationStatus
from fencepost.store import open_store
from helpers.processes import run_cli, start_piped, subprocess_env

SECRET = "whsec_serve_test_0123456789"
APP = textwrap.dedent('''
    import json
    from datetime import timedelta
    from pydantic import BaseModel
    from fencepost.host import Accepted, Action, AdapterStep, Host
    from fencepost.host.webhooks import CompletionFields

    class Params(BaseModel):
        order_id: str

    class Payouts:
        type, vendor = "pay", "simpay"
        def execute(self, call):
            return Accepted("po_" + call.input["order_id"], {"status": "pending"})

    class SimpayParser:
        def parse(self, body, headers):
            event = json.loads(body)
            return CompletionFields(event["payout"], {"paid": "completed", "bounced": "failed"}[event["state"]])

    ACTION = Action(id="shop.payout", version=1, params=Params, handler=lambda ctx, p: {"order": p.order_id},
                    completion_deadline=timedelta(hours=1),
                    steps=(AdapterStep(name="payout", adapter="pay", operation="payout"),))

    def make(store):
        return Host(store, actions=[ACTION], adapters=[Payouts()])

    COMPLETION_PARSERS = {"simpay": SimpayParser()}
''')


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def _app_dir(tmp_path: Path) -> str:
    (tmp_path / "payapp.py").write_text(APP, encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'fp.db'}"
    assert run_cli(["migrate", "-d", url], cwd=tmp_path).returncode == 0
    return url


def test_serve_settles_a_signed_vendor_webhook_and_refuses_an_unsigned_one(tmp_path: Path) -> None:
    url = _app_dir(tmp_path)
    submitted = run_cli(["host", "submit", "shop.payout", "--app", "payapp:make", "--params", '{"order_id": "o-1"}',
                         "--key", "k1", "--inline", "--json", "-d", url], cwd=tmp_path)
    assert submitted.returncode == 0, submitted.describe()
    invocation_id = json.loads(submitted.stdout)["id"]
    env = subprocess_env(PAY_SECRET=SECRET)
    proc = start_piped(["serve", "-d", url, "--port", "0", "--no-worker", "--app", "payapp:make",
                        "--completion-secret", "simpay=PAY_SECRET", "--log-format", "json"],
                       stderr_path=tmp_path / "serve.err", cwd=tmp_path, env=env)
    try:
        address = proc.next_line(timeout=60)
        base = address.split("serving on ", 1)[1].split(" ", 1)[0].rstrip("/")
        endpoint = base + "/v1/host/completions/simpay"
        body = b'{"payout": "po_o-1", "state": "paid"}'
        deadline = time.monotonic() + 20
        while True:
            try:
                code, answer = _post(endpoint, body, {"Content-Type": "application/json"})
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert code == 401 and answer["type"] == "urn:fencepost:problem:invalid-signature", answer
        header = {"Fencepost-Signature": sign(SECRET, int(time.time()), body)}
        code, answer = _post(endpoint, b'{"payout": "po_o-9", "state": "paid"}',
                             {"Fencepost-Signature": sign(SECRET, int(time.time()),
                                                          b'{"payout": "po_o-9", "state": "paid"}')})
        assert code == 404 and answer["type"] == "urn:fencepost:problem:unknown-reference", answer
        code, answer = _post(endpoint, body, header)
        assert code == 200 and answer["disposition"] == "settled" and answer["invocation_id"] == invocation_id
        assert proc.stop(signal.SIGTERM, timeout=60) == 0
    finally:
        proc.stop(signal.SIGKILL)
    store = open_store(url)
    try:
        assert store.read(lambda tx: tx.host.get_invocation(invocation_id)).status is InvocationStatus.SUCCEEDED
    finally:
        store.close()
    err = proc.stderr
    refused = [json.loads(line) for line in err.splitlines() if '"completion_refused"' in line]
    assert len(refused) == 1 and refused[0]["reason"] == "missing", err
    assert SECRET not in err and SECRET not in proc.rest()


def test_serve_reads_the_secret_from_the_environment_only(tmp_path: Path) -> None:
    url = _app_dir(tmp_path)
    unset = run_cli(["serve", "-d", url, "--port", "0", "--no-worker", "--app", "payapp:make",
                     "--completion-secret", "simpay=PAY_SECRET"], cwd=tmp_path, timeout=60)
    assert unset.returncode == 2 and "PAY_SECRET is not set" in unset.stderr, unset.describe()
    short = run_cli(["serve", "-d", url, "--port", "0", "--no-worker", "--app", "payapp:make",
                     "--completion-secret", "simpay=PAY_SECRET"], cwd=tmp_path, timeout=60,
                    env=subprocess_env(PAY_SECRET="tooshort"))
    assert short.returncode == 2 and "shorter than 16" in short.stderr and "tooshort" not in short.stderr
    no_app = run_cli(["serve", "-d", url, "--port", "0", "--no-worker", "--completion-secret", "simpay=PAY_SECRET"],
                     cwd=tmp_path, timeout=60, env=subprocess_env(PAY_SECRET=SECRET))
    assert no_app.returncode == 2 and "needs --app" in no_app.stderr
    other = run_cli(["serve", "-d", url, "--port", "0", "--no-worker", "--app", "payapp:make",
                     "--completion-secret", "other=PAY_SECRET"], cwd=tmp_path, timeout=60,
                    env=subprocess_env(PAY_SECRET=SECRET))
    assert other.returncode == 2 and "'simpay', which has no --completion-secret" in other.stderr, other.describe()
    typo = run_cli(["serve", "-d", url, "--port", "0", "--no-worker", "--app", "payapp:make",
                    "--completion-secret", "simpay=PAY_SECRET", "--completion-secret", "simapy=PAY_SECRET"],
                   cwd=tmp_path, timeout=60, env=subprocess_env(PAY_SECRET=SECRET))
    assert typo.returncode == 2 and "simapy, which is no adapter's vendor" in typo.stderr, typo.describe()
    blank = run_cli(["serve", "-d", url, "--port", "0", "--no-worker", "--app", "payapp:make",
                     "--completion-secret", "simpay=PAY_SECRET"], cwd=tmp_path, timeout=60,
                    env=subprocess_env(PAY_SECRET=" " * 20))
    assert blank.returncode == 2 and "not counting blanks" in blank.stderr, blank.describe()
    slashed = run_cli(["serve", "-d", url, "--port", "0", "--no-worker", "--app", "payapp:make",
                       "--completion-secret", "sim/pay=PAY_SECRET"], cwd=tmp_path, timeout=60,
                      env=subprocess_env(PAY_SECRET=SECRET))
    assert slashed.returncode == 2 and "a provider is letters" in slashed.stderr, slashed.describe()
    malformed = run_cli(["serve", "-d", url, "--no-worker", "--completion-secret", "simpay"], cwd=tmp_path,
                        timeout=60)
    assert malformed.returncode == 2 and "PROVIDER=ENV_VAR" in malformed.stderr


def test_serve_help_explains_the_completion_options() -> None:
    result = run_cli(["serve", "--help"], timeout=60, env=subprocess_env(COLUMNS="200"))
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.replace("│", " ").split())  # rich draws the options in a box
    for expected in ("--completion-secret", "PROVIDER=ENV_VAR", "never given here", "COMPLETION_PARSERS",
                     "[env var: FENCEPOST_SIGNATURE_WINDOW]", "[env var: FENCEPOST_APP]"):
        assert expected in text, expected
