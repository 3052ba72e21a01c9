"""The release gate of one immutable Run, computed from durable records and never stored.

Seed: plugin-rehearsal-outbox-release-gate-design.md, "Release Gate": five checks on the latest Attempt.
The first successful delivered Attempt establishes the semantic baseline; any newer PENDING, RUNNING,
FAILED, ABORTED, incomplete, tampered or semantically drifting Attempt blocks the gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus, RunStatus
from fencepost.evidence.comparison import Comparison, compare_attempts
from fencepost.evidence.coverage import coverage
from fencepost.evidence.receipts import ReceiptIntegrity, verify_receipt
from fencepost.evidence.sealing import SealKeys
from fencepost.store.records import AttemptRecord, ReceiptRecord, RunRecord

RECEIPTS_PER_ATTEMPT = 6


@dataclass(frozen=True)
class GateCheck:
    name: str
    passed: bool
    reason: str


@dataclass(frozen=True)
class GateReport:
    """The gate verdict: ``passed`` only when all five checks pass."""

    run_id: str
    checks: list[GateCheck]
    latest_attempt_id: str | None
    baseline_attempt_id: str | None
    integrity: list[ReceiptIntegrity] = field(default_factory=list)
    comparison: Comparison | None = None
    #: The latest Attempt's scenarios that ran and applied, and ``{"scenario", "reason"}`` for the others
    #: (issue 11 item 5): a gate states how much of the six it rests on.
    exercised: list[str] = field(default_factory=list)
    not_exercised: list[dict[str, str]] = field(default_factory=list)

    @property
    def semantics_compared(self) -> bool:
        """True when the latest Attempt's semantics were compared with a baseline (issue 11 item 6)."""
        return self.comparison is not None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def blocking(self) -> list[GateCheck]:
        return [c for c in self.checks if not c.passed]


def _integrity(receipts: list[ReceiptRecord], content_digest: str,
               keys: SealKeys | None) -> tuple[bool, str, list[ReceiptIntegrity]]:
    results = [verify_receipt(r, content_digest=content_digest, keys=keys)
               for r in sorted(receipts, key=lambda r: r.position)]
    if len(receipts) != RECEIPTS_PER_ATTEMPT:
        return False, f"expected {RECEIPTS_PER_ATTEMPT} Receipts, found {len(receipts)}", results
    bad = [r for r in results if not r.ok]
    if bad:
        detail = "; ".join(f"receipt {r.position} ({r.scenario}) {r.status}: {r.reason}" for r in bad)
        return False, detail, results
    not_succeeded = [r for r in receipts if r.status is not ReceiptStatus.SUCCEEDED]
    if not_succeeded:
        return False, "; ".join(f"receipt {r.position} ({r.scenario}) is {r.status}" for r in not_succeeded), results
    return True, f"all {RECEIPTS_PER_ATTEMPT} evidence fingerprints and seals verified", results


def evaluate_gate(run: RunRecord, attempts: list[AttemptRecord],
                  receipts: dict[str, list[ReceiptRecord]], keys: SealKeys | None = None) -> GateReport:
    """Evaluate the five checks.

    Args:
        run: the Run.
        attempts: every Attempt of the Run (any order).
        receipts: Receipts by Attempt id; must hold at least the latest Attempt and the previous
            SUCCEEDED one (others may be absent).
        keys: the seal keys (the configured ones when None). A Receipt whose seal does not verify, that has
            none, or whose key is not held fails ``evidence_integrity`` (ADR 0064).
    Returns:
        A ``GateReport``; never raises on bad durable data (tampering is a failed check).
    """
    checks: list[GateCheck] = []
    ordered = sorted(attempts, key=lambda a: a.seq)
    latest = ordered[-1] if ordered else None
    checks.append(GateCheck("run_ready", run.status is RunStatus.READY,
                            "Run is READY" if run.status is RunStatus.READY else f"Run is {run.status}"))
    if latest is None:
        checks.append(GateCheck("latest_attempt_succeeded", False, "no Attempt exists yet"))
        checks.append(GateCheck("outbox_delivered", False, "no Attempt exists yet"))
        checks.append(GateCheck("evidence_integrity", False, "no Attempt exists yet"))
        checks.append(GateCheck("semantic_match", False, "no Attempt exists yet"))
        return GateReport(run.id, checks, None, None)

    label = f"Attempt #{latest.seq}"
    ok = latest.status is AttemptStatus.SUCCEEDED
    checks.append(GateCheck("latest_attempt_succeeded", ok,
                            f"{label} SUCCEEDED" if ok else f"{label} is {latest.status}"))
    ok = latest.command_status is CommandStatus.DELIVERED
    checks.append(GateCheck("outbox_delivered", ok, f"{label} command is {latest.command_status}"))

    latest_receipts = receipts.get(latest.id, [])
    ok, reason, integrity = _integrity(latest_receipts, run.content_digest, keys)
    checks.append(GateCheck("evidence_integrity", ok, f"{label}: {reason}"))

    baseline = next((a for a in reversed(ordered[:-1]) if a.status is AttemptStatus.SUCCEEDED
                     and a.command_status is CommandStatus.DELIVERED), None)
    comparison = None
    if latest.status is not AttemptStatus.SUCCEEDED:
        checks.append(GateCheck("semantic_match", False, f"{label} is not a successful Attempt to compare"))
    elif baseline is None:
        # Passes (nothing contradicts it), but says plainly that nothing was compared: publishing wants a
        # compared pair unless waived (``--allow-single-attempt``, issue 11 item 6).
        checks.append(GateCheck("semantic_match", True,
                                f"semantics were not compared: {label} is the only successful Attempt, so it "
                                "establishes the baseline with nothing to compare it with (run a second Attempt)"))
    else:
        base_receipts = receipts.get(baseline.id, [])
        base_ok, base_reason, _ = _integrity(base_receipts, run.content_digest, keys)
        if not base_ok:
            checks.append(GateCheck("semantic_match", False,
                                    f"baseline Attempt #{baseline.seq} fails integrity: {base_reason}"))
        else:
            comparison = compare_attempts((baseline.id, baseline.seq, base_receipts),
                                          (latest.id, latest.seq, latest_receipts))
            if comparison.equal:
                reason = f"{label} matches baseline Attempt #{baseline.seq} ({comparison.candidate.semantic})"
            else:
                shown = ", ".join(comparison.differing_paths[:10])
                reason = f"{label} drifts from baseline Attempt #{baseline.seq} at: {shown}"
            checks.append(GateCheck("semantic_match", comparison.equal, reason))
    exercised, not_exercised = coverage(latest_receipts)
    return GateReport(run.id, checks, latest.id, baseline.id if baseline else None, integrity, comparison,
                      exercised, not_exercised)
