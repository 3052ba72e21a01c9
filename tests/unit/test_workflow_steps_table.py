"""The live steps table of ``workflow run`` / ``status``: a step past its start barrier whose task no worker has
claimed yet is shown as queued, not as executing (a new user read ``running`` while no worker was live)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from fencepost.cli.workflow_follow import steps_table


def rendered(*steps: dict[str, Any]) -> list[str]:
    console = Console(width=120, record=True, color_system=None)
    console.print(steps_table({"steps": list(steps)}))
    return console.export_text().splitlines()


def step(key: str, status: str, invocation_status: str | None) -> dict[str, Any]:
    return {"key": key, "task": "t", "needs": [], "status": status, "attempts": 1, "reason": None,
            "invocation_status": invocation_status}


def test_a_running_step_whose_task_is_unclaimed_reads_queued_and_a_claimed_one_does_not() -> None:
    lines = rendered(step("waits", "running", "pending"), step("runs", "running", "running"),
                     step("done", "succeeded", "succeeded"))
    by_key = {line.split()[0]: line for line in lines[1:]}
    assert "running (queued)" in by_key["waits"], lines
    assert "queued" not in by_key["runs"] and "running" in by_key["runs"], lines
    assert "queued" not in by_key["done"] and "succeeded" in by_key["done"], lines
