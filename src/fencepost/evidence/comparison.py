"""Semantic comparison of two Attempts' evidence.

Seed: "Attempt Comparison". A second, non-persisted semantic fingerprint is computed after recursively
removing volatile transport identity: sandbox and execution identity, external target receipt payloads,
stable step/idempotency keys, and generated Attempt/Receipt/Run ids. Scenario order, codes, status and
all remaining evidence must match.

A scenario's ``result`` is the package's own data, keyed by the package's table names: it is kept verbatim,
so a table that happens to be called ``execution`` or ``sandbox`` cannot hide its drift (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fencepost.core.canonical import parse_json
from fencepost.core.fingerprint import fingerprint
from fencepost.store.records import ReceiptRecord

SEMANTIC_DOMAIN = "attempt-semantics/v1"

# Keys removed at any depth before the semantic fingerprint (seed: "Attempt Comparison").
VOLATILE_KEYS = frozenset({
    "execution",        # worker, delivery number, timings
    "sandbox",          # sandbox identity
    "target_receipt",   # external target receipt payload
    "idempotency_key",  # stable step/idempotency keys
    "step_key",
    "attempt_id",       # generated ids
    "receipt_id",
    "run_id",
    "budget",           # a delivery budget verdict: how many deliveries, by whom, how far (ADR 0021)
    "lease_history",
    "last_progress",
})

# Subtrees that hold the package's data rather than transport identity: never stripped.
DATA_KEYS = frozenset({"result"})


def semantic_view(value: Any) -> Any:
    """``value`` with every ``VOLATILE_KEYS`` entry removed, recursively (lists keep their order).

    The value under a ``DATA_KEYS`` key is kept as it is: its keys are user data (table names).
    """
    if isinstance(value, dict):
        return {k: v if k in DATA_KEYS else semantic_view(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [semantic_view(v) for v in value]
    return value


def attempt_semantics(receipts: list[ReceiptRecord]) -> list[Any]:
    """The semantic view of an Attempt: its Receipts in position order, volatile identity removed."""
    view = []
    for r in sorted(receipts, key=lambda r: r.position):
        evidence = parse_json(r.evidence) if r.evidence is not None else None
        if isinstance(evidence, dict):  # the seal (ADR 0064) is per Attempt and key, like execution identity
            evidence = {k: v for k, v in evidence.items() if k != "seal"}
        view.append({"position": r.position, "scenario": r.scenario, "status": str(r.status),
                     "evidence": semantic_view(evidence)})
    return view


def semantic_fingerprint(receipts: list[ReceiptRecord]) -> str:
    """Fingerprint of ``attempt_semantics(receipts)`` (never persisted)."""
    return fingerprint(SEMANTIC_DOMAIN, attempt_semantics(receipts))


def differences(left: Any, right: Any, path: str = "$", limit: int = 50) -> list[str]:
    """JSON paths where ``left`` and ``right`` differ (at most ``limit``), e.g. ``$[2].evidence.result.x``."""
    found: list[str] = []

    def walk(a: Any, b: Any, p: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                if key not in a or key not in b:
                    found.append(f"{p}.{key}")
                else:
                    walk(a[key], b[key], f"{p}.{key}")
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                found.append(f"{p} (length {len(a)} != {len(b)})")
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                walk(x, y, f"{p}[{i}]")
        elif a != b or type(a) is not type(b):
            found.append(p)

    walk(left, right, path)
    return found


@dataclass(frozen=True)
class AttemptFingerprints:
    attempt_id: str
    seq: int
    raw: list[dict[str, Any]]  # [{"position", "scenario", "evidence_fingerprint"}]
    semantic: str


@dataclass(frozen=True)
class Comparison:
    """Result of comparing a baseline Attempt with a candidate Attempt."""

    baseline: AttemptFingerprints
    candidate: AttemptFingerprints
    equal: bool
    differing_paths: list[str] = field(default_factory=list)


def fingerprints_of(attempt_id: str, seq: int, receipts: list[ReceiptRecord]) -> AttemptFingerprints:
    raw = [{"position": r.position, "scenario": r.scenario, "evidence_fingerprint": r.evidence_fingerprint}
           for r in sorted(receipts, key=lambda r: r.position)]
    return AttemptFingerprints(attempt_id, seq, raw, semantic_fingerprint(receipts))


def compare_attempts(baseline: tuple[str, int, list[ReceiptRecord]],
                     candidate: tuple[str, int, list[ReceiptRecord]]) -> Comparison:
    """Compare two Attempts ``(attempt_id, seq, receipts)`` by semantic fingerprint; list differing paths."""
    base_fp = fingerprints_of(*baseline)
    cand_fp = fingerprints_of(*candidate)
    equal = base_fp.semantic == cand_fp.semantic
    paths = [] if equal else differences(attempt_semantics(baseline[2]), attempt_semantics(candidate[2]))
    return Comparison(baseline=base_fp, candidate=cand_fp, equal=equal, differing_paths=paths)
