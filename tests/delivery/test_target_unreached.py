"""A target that cannot be opened was not reached: the delivery and workflow-task adapters say so
(``PermanentFailure(sent=False)``, ADR 0113), so that a recovery's re-send on a machine without the target never
denies what an earlier attempt may have committed there. A first call still fails at once."""

from __future__ import annotations

from pathlib import Path

from fencepost.delivery.action import TargetAdapter
from fencepost.host import AdapterCall, PermanentFailure
from fencepost.store.open import open_store


def test_a_missing_target_is_a_failure_that_reached_nothing(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'control.db'}", create=True)
    try:
        store.migrate()
        adapter = TargetAdapter(store)
        missing = tmp_path / "tenant.db"
        for operation in ("drift_check", "apply", "fingerprint"):
            reply = adapter.execute(AdapterCall(adapter_invocation_id="adi_1", operation=operation,
                                                input={"target": "tenant", "target_url": f"sqlite:///{missing}"}))
            assert isinstance(reply, PermanentFailure), reply
            assert reply.sent is False and "does not exist" in reply.reason, reply
            assert reply.reason.count("nothing was applied") == 1, reply.reason
    finally:
        store.close()
