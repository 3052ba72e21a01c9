"""Which scenarios an Attempt exercised, from its sealed evidence (issue 11 item 5, ADR 0062).

A scenario that SUCCEEDED with ``result.applicable`` false (no previous version to upgrade from, nothing
to roll back) tested nothing: it is NOT_APPLICABLE, with its reason, never a plain success. A roll-back
chain that stopped before an empty database exercised the downs it ran: it counts as exercised, and its
reason says where the chain stops.
"""

from __future__ import annotations

from typing import Any

from fencepost.core.canonical import parse_json
from fencepost.core.statuses import ReceiptStatus
from fencepost.store.records import ReceiptRecord

NOT_APPLICABLE = "NOT_APPLICABLE"


def _result(receipt: ReceiptRecord) -> dict[str, Any]:
    if receipt.evidence is None:
        return {}
    try:
        evidence = parse_json(receipt.evidence)
    except ValueError:
        return {}
    result = evidence.get("result") if isinstance(evidence, dict) else None
    return result if isinstance(result, dict) else {}


def not_applicable_reason(receipt: ReceiptRecord) -> str | None:
    """The reason a SUCCEEDED Receipt's scenario was not applicable, or None when it was exercised."""
    if receipt.status is not ReceiptStatus.SUCCEEDED:
        return None
    result = _result(receipt)
    if result.get("applicable") is False:
        return str(result.get("reason") or "not applicable")
    return None


def partial_note(receipt: ReceiptRecord) -> str | None:
    """What an exercised scenario did not reach (a roll-back chain that stops early), or None."""
    result = _result(receipt)
    if receipt.status is ReceiptStatus.SUCCEEDED and result.get("applicable") is True \
            and result.get("reached_empty") is False:
        return str(result.get("reason") or "partially exercised")
    return None


def coverage(receipts: list[ReceiptRecord]) -> tuple[list[str], list[dict[str, str]]]:
    """The scenarios an Attempt exercised, and the others.

    Returns:
        ``(exercised, not_exercised)``: scenario codes that ran to a verdict (SUCCEEDED and applied, or FAILED:
        a failure is what the scenario found, so it was exercised), in position order, and
        ``{"scenario", "reason"}`` for every other scenario (not applicable, or never finished).
    """
    exercised: list[str] = []
    others: list[dict[str, str]] = []
    for r in sorted(receipts, key=lambda r: r.position):
        reason = not_applicable_reason(r)
        if reason is not None:
            others.append({"scenario": r.scenario, "reason": f"not applicable: {reason}"})
        elif r.status in (ReceiptStatus.SUCCEEDED, ReceiptStatus.FAILED):
            exercised.append(r.scenario)
        else:
            others.append({"scenario": r.scenario, "reason": f"{r.status}"})
    return exercised, others
