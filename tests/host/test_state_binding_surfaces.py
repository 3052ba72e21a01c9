"""Where an operator and a user meet the state binding (ADR 0077): ``fencepost host show`` (text and ``--json``)
names the bound entity, its transition and its recorded state, and the example of docs/host.md runs as
written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers.processes import run_cli, subprocess_env

DOCS = Path(__file__).resolve().parents[2] / "docs" / "host.md"

APP = textwrap.dedent('''
    from pydantic import BaseModel
    from fencepost.host import Action, AdapterStep, Host, StateBinding, Succeeded

    class Params(BaseModel):
        order_id: str

    class Echo:
        type, vendor = "echo", "local"
        def execute(self, call):
            return Succeeded({"order": call.input["order_id"]})

    def reserve(ctx, params):
        ctx.set_state("charging")   # the handler's own write, before the provider is called
        return {"order": params.order_id}

    CHARGE = Action(id="shop.charge", version=1, params=Params, handler=reserve,
                    steps=(AdapterStep(name="charge", adapter="echo", operation="charge"),),
                    state=StateBinding("order", "charged", entity_id=lambda p: p.order_id,
                                       guard=lambda before, params: before is None))

    def make(store):
        return Host(store, actions=[CHARGE], adapters=[Echo()])
''')


def test_host_show_names_the_entity_its_transition_and_its_recorded_state(tmp_path: Path) -> None:
    (tmp_path / "shopapp.py").write_text(APP, encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'fp.db'}"
    assert run_cli(["migrate", "-d", url], cwd=tmp_path).returncode == 0
    ran = run_cli(["host", "submit", "shop.charge", "--app", "shopapp:make", "--params", '{"order_id": "o-7"}',
                   "--key", "k7", "--inline", "--json", "-d", url], cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    invocation_id = json.loads(ran.stdout)["id"]
    shown = run_cli(["host", "show", invocation_id, "--json", "-d", url], cwd=tmp_path)
    state = json.loads(shown.stdout)["state"]
    assert state["transition"]["from"] is None and state["transition"]["set_by"] == "host"
    assert (state["recorded"]["state"], state["recorded"]["previous_state"]) == ("charged", None)
    assert "StateTransitioned" in [e["type"] for e in json.loads(shown.stdout)["events"]]
    text = run_cli(["host", "show", invocation_id, "-d", url], cwd=tmp_path).stdout
    assert "state: order o-7 -> charged" in text
    assert "transitioned (no state) -> charged at finalization (set by the host)" in text
    assert "recorded state charged, last changed by this invocation" in text
    assert re.search(r"event +\d+ StateTransitioned", text), text


def test_the_documented_state_binding_example_runs(tmp_path: Path) -> None:
    """docs/host.md's example of a state-bound action, run as written in a fresh directory."""
    section = DOCS.read_text(encoding="utf-8").split("## Binding an entity's state", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "example.py").write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=subprocess_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-3:] == ["succeeded charged", "failed reserved", "charged reserved -> charged"]
