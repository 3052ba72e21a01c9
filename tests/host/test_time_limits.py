"""An action invocation's time limit (issue 10 item 3; docs/operations.md, Bounds): checked at the host's safe
points, before each adapter call; a handler that runs through it cannot be stopped, so its real outcome stands and
the worker says it overran (an issue-10 trial found the overrun silent)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fencepost.core.statuses import InvocationStatus
from fencepost.host import Action, AdapterCall, AdapterStep, Dispatch, Host, Succeeded
from fencepost.host.handler import kind_of
from fencepost.outbox import HandlerRegistry, Worker, WorkerConfig
from fencepost.store.open import open_store


class Params(BaseModel):
    i: int


class Recording:
    type = "noop"
    vendor = "test"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def execute(self, call: AdapterCall) -> object:
        self.calls.append(call.adapter_invocation_id)
        return Succeeded({})


def slow_handler(ctx: Any, params: Params) -> dict[str, Any]:
    time.sleep(0.8)  # past the 0.3 s limit, in code no limit can stop
    return {}


@pytest.mark.parametrize("with_step", [False, True])
def test_a_handler_past_the_time_limit_is_never_cut_short_and_the_overrun_is_said(
        tmp_path: Path, with_step: bool, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'control.db'}", create=True)
    try:
        store.migrate()
        adapter = Recording()
        steps = (AdapterStep("charge", "noop", "charge"),) if with_step else ()
        host = Host(store, actions=[Action(id="shop.slow", version=1, params=Params, handler=slow_handler,
                                           steps=steps)], adapters=[adapter])
        submitted = host.submit("shop.slow", {"i": 1}, actor="tester", idempotency_key="k", mode=Dispatch())
        registry = HandlerRegistry()
        host.register(registry)
        worker = Worker(store, registry, WorkerConfig(poll_interval=0.02,
                                                      time_limits={kind_of("shop.slow", 1): 0.3}))
        caplog.set_level(logging.INFO)
        assert worker.run_once() == 1
        done = host.get(submitted.id)
        overruns = [r for r in caplog.records if getattr(r, "event", None) == "time_limit_overrun"]
        if with_step:  # the safe point before the call: nothing sent, a definite failure naming the limit
            assert done.status is InvocationStatus.FAILED and "time limit exceeded (0.3 s)" in (done.error or "")
            assert adapter.calls == [] and overruns == []
        else:  # nothing checked it: the handler's work is done and recorded as it is, and the overrun is said
            assert done.status is InvocationStatus.SUCCEEDED, done.error
            assert len(overruns) == 1 and getattr(overruns[0], "time_limit", None) == 0.3
    finally:
        store.close()
