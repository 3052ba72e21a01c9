"""An empty plan id is refused, never replaced by a random one (issue 18, found by breaking it).

The plan id is the idempotency key of a Run: ``fencepost workflow run --plan-id "$KEY"`` with ``KEY`` unset must
not admit a new Run on every retry. An omitted plan id defaults to a random one; an empty one is bad input.
Real parts: the released, installed and delivered package of ``exec_kit``, the ``fencepost`` CLI subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from exec_kit import Steps, install, log_task
from wf_support import backend_params, cli, cli_url, opened_backend

from fencepost.core.errors import InvalidInput
from fencepost.workflows.service import WorkflowService

ONE = Steps(steps={"a": ("ta", ())}, tasks={"ta": log_task("a")})


@pytest.mark.parametrize("backend_name", backend_params(["sqlite-wal"]))
def test_an_empty_plan_id_is_refused_by_the_service_and_the_cli(backend_name: str, tmp_path: Path) -> None:
    with opened_backend(backend_name, tmp_path) as backend:
        store = backend.migrated()
        kit = install(store, tmp_path, ONE)
        with pytest.raises(InvalidInput):
            WorkflowService(store).plan(kit.package, "flow", plan_id="", target=kit.target)
        for _ in range(2):
            result = cli(cli_url(backend), "workflow", "run", kit.package, "flow", "--plan-id", "", "--no-wait")
            assert result.returncode == 2, result.stdout
        runs = store.read(lambda tx: tx.progress.list_runs(limit=10))
        assert not runs, "an empty plan id admitted Runs"
