"""The API's invocation view carries a state-bound invocation's binding, its ``StateTransitioned`` fact and the
entity's recorded state (ADR 0077; host-spec A19), validated against the published models, in a page and in
one invocation (whose events include the fact)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fastapi.testclient import TestClient

from api.conftest import AUTH, TOKEN
from fencepost.api import create_app
from fencepost.host import Host, Inline, StateBinding
from fencepost.store import open_store
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action


def test_the_invocation_view_shows_the_transition_and_the_recorded_state(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'fp.db'}")
    store.migrate()
    action = dataclasses.replace(charge_action(Spy()), state=StateBinding("order", "charged",
                                                                          entity_id=lambda p: p.order_id))
    host = Host(store, actions=[action, dataclasses.replace(charge_action(Spy()), id="shop.plain")],
                adapters=[Scripted(Ledger())])
    done = host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    plain = host.submit("shop.plain", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    app = create_app(store, api_token=TOKEN, on_work=lambda: None, host=host)
    with TestClient(app, raise_server_exceptions=False) as client:
        shown = client.get(f"/v1/host/invocations/{done.id}", headers=AUTH)
        assert shown.status_code == 200, shown.text
        state = shown.json()["state"]
        assert (state["subject"], state["entity_id"], state["target"]) == ("order", "o-1", "charged")
        transition = state["transition"]
        assert (transition["from"], transition["to"], transition["set_by"], transition["at"]) == (
            None, "charged", "host", "finalization")
        assert (state["recorded"]["state"], state["recorded"]["updated_by_invocation"]) == ("charged", done.id)
        assert transition["event_id"] in [e["id"] for e in shown.json()["events"]
                                          if e["type"] == "StateTransitioned"]
        page = client.get("/v1/host/invocations", headers=AUTH)
        assert page.status_code == 200, page.text
        by_id = {item["id"]: item["state"] for item in page.json()["items"]}
        assert by_id[done.id] == state and by_id[plain.id] is None
    store.close()
