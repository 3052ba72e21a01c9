"""Execution attestations and the obligations they satisfy (host-spec G17-G22, O1-O3; §1.Y-6; ADR 0045).

After the adapter loop and before finalization, for each succeeded step that has stored output, in step order:

- its attestation is looked up by its stable id (the invocation and the adapter invocation). When present it is
  reused and its ``satisfies_obligations`` are applied again, without calling the extractor (G17, O3);
- when absent, the action's ``extract_execution_attestation(input=, output=, started_at=, completed_at=)`` is
  called with the row's *stored* input and output (the redacted values, G22) and the checkpoint's
  ``created_at`` and ``updated_at`` (G18). The attestation, its fingerprint and the satisfactions commit in one
  unit (``host.attestation``). The extractor may run again after an interrupted append, so it must be
  deterministic (G19): an append that finds a record already stored under the id compares fingerprints, and a
  difference fails closed with ``IntegrityViolation``;
- a handoff step with no output (or withheld output) is skipped (G20).

Every step attested here has a durable success, so an extractor error or a store error raises
``RecoverableFinalization``: recovery within the budget may call the extractor again (G21, G22, G15).
Satisfactions are first-write-wins records, one per obligation, so repeated recoveries leave one satisfied state
(O3). An obligation still unsatisfied then ends the invocation ``failed`` (O1, the applied steps named, as G16
does) or, once a handoff exists, ``reconciliation_required`` as an applied effect (O2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fencepost.core.errors import IntegrityViolation, LeaseLost, RecoverableFinalization, StoreUnavailable
from fencepost.core.fingerprint import fingerprint
from fencepost.core.statuses import AdapterStatus, GovernanceRecordKind, InvocationStatus, ReconciliationKind
from fencepost.host.finalization import SettlementRefused, Verdict, lock_running
from fencepost.host.governance import Governed, record
from fencepost.store.host_records import AdapterRecord, GovernanceRecord, InvocationRecord
from fencepost.store.ports import FencedUnit

if TYPE_CHECKING:
    from fencepost.host.action import Action
    from fencepost.host.execution import Execution

#: The fingerprint domain of an attestation's deterministic part (G19).
ATTESTATION_DOMAIN = "host.execution-attestation/v1"
ATTESTATION_UNIT = "host.attestation"


@dataclass(frozen=True)
class Attestation:
    """What an extractor returns about one step's execution.

    Attributes:
        claims: a plain JSON object (what the step proves: an amount, a counterparty, a receipt id).
        satisfies_obligations: names of the obligations this execution satisfies.
    """

    claims: dict[str, Any]
    satisfies_obligations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "claims", dict(self.claims))
        object.__setattr__(self, "satisfies_obligations", tuple(self.satisfies_obligations))


AttestationExtractor = Callable[..., Attestation]


def attestation_fingerprint(attestation: Attestation) -> str:
    """``sha256:`` fingerprint of the attestation's claims and satisfied obligations (G19).

    Raises:
        TypeError: the claims are not plain JSON.
    """
    return fingerprint(ATTESTATION_DOMAIN, {"claims": attestation.claims,
                                            "satisfies_obligations": list(attestation.satisfies_obligations)})


def _by_kind(records: list[GovernanceRecord], kind: GovernanceRecordKind) -> dict[str, GovernanceRecord]:
    return {r.name: r for r in records if r.kind is kind}


class Attesting:
    """The attestation step of one execution (see the module docstring)."""

    def __init__(self, execution: Execution) -> None:
        self.execution = execution

    def run(self, invocation: InvocationRecord, action: Action, succeeded: list[AdapterRecord],
            governed: Governed) -> InvocationStatus | None:
        """Attest the succeeded steps and check the obligations.

        Returns:
            None to finalize; otherwise the verdict it settled (O1, O2).
        Raises:
            RecoverableFinalization: an extractor or store error after the durable successes (G21, G22).
            IntegrityViolation: a rerun extractor disagrees with the stored attestation (G19).
        """
        extractor = action.extract_execution_attestation
        if extractor is None and not governed.obligations:
            return None
        ex = self.execution
        try:
            records = ex.ctx.store.read(lambda tx: tx.host.list_governance_records(invocation.id))
            satisfied = set(governed.satisfied) | set(_by_kind(records, GovernanceRecordKind.OBLIGATION_SATISFIED))
            if extractor is not None:
                stored = _by_kind(records, GovernanceRecordKind.ATTESTATION)
                for row in sorted(succeeded, key=lambda r: r.step_index):
                    if row.status is not AdapterStatus.SUCCEEDED or not row.output:
                        continue  # G20: no output, or withheld output, skips extraction
                    satisfied |= self._attest(invocation, row, stored.get(row.id), extractor)
        except (StoreUnavailable, SettlementRefused) as error:
            raise RecoverableFinalization(f"the attestations could not be recorded after the durable step "
                                          f"successes: {error}", error, invocation_id=invocation.id) from error
        open_names = [n for n in governed.obligations if n not in satisfied]
        if not open_names:
            return None
        text = f"unsatisfied obligations: {', '.join(open_names)}"
        handoff = ex.handoff or (invocation.pending_completion if invocation.handoff_reference else None)
        if handoff is not None:  # O2: an effect exists, handed off to the provider
            return ex._settle(invocation, Verdict(
                InvocationStatus.RECONCILIATION_REQUIRED,
                ex._governance_text(f"{text} after the handoff ({handoff.get('external_reference')}); an operator "
                               "decides", source="execution"),
                kind=ReconciliationKind.APPLIED_EFFECT,
                evidence={"unsatisfied_obligations": open_names,
                          "external_reference": handoff.get("external_reference")}))
        return ex._fail(invocation, ex._governance_text(text, source="execution"), succeeded)

    def _attest(self, invocation: InvocationRecord, row: AdapterRecord, existing: GovernanceRecord | None,
                extractor: AttestationExtractor) -> set[str]:
        """Reuse or extract ``row``'s attestation and apply its satisfactions; returns the names satisfied."""
        ex = self.execution
        if existing is not None:  # G17: reused, its updates applied again, no extractor call
            names = tuple(str(n) for n in existing.payload.get("satisfies_obligations", ()))
            ex.ctx.fenced(self._unit(invocation, row, None, None, names), name=ATTESTATION_UNIT)
            return set(names)
        try:
            made = extractor(input=dict(row.input), output=dict(row.output or {}),
                             started_at=row.created_at, completed_at=row.updated_at)
            if isinstance(made, Mapping):
                made = Attestation(claims=dict(made.get("claims", {})),
                                   satisfies_obligations=tuple(made.get("satisfies_obligations", ())))
            if not isinstance(made, Attestation):
                raise TypeError(f"the extractor returned {type(made).__name__}, not an Attestation")
            print_ = attestation_fingerprint(made)
        except (StoreUnavailable, LeaseLost, RecoverableFinalization):
            raise
        except Exception as error:  # G22: the success is durable; recovery may call the extractor again
            raise RecoverableFinalization(
                f"step {row.step_name}: extract_execution_attestation failed after its durable success: "
                f"{type(error).__name__}: {error}", error, invocation_id=invocation.id) from error
        ex.ctx.fenced(self._unit(invocation, row, made, print_, made.satisfies_obligations), name=ATTESTATION_UNIT)
        return set(made.satisfies_obligations)

    @staticmethod
    def _unit(invocation: InvocationRecord, row: AdapterRecord, made: Attestation | None, print_: str | None,
              names: tuple[str, ...]) -> Callable[[FencedUnit], None]:
        def unit(tx: FencedUnit) -> None:
            lock_running(tx, invocation.id)
            if made is not None:
                payload = {"step": row.step_name, "adapter_invocation_id": row.id, "claims": made.claims,
                           "satisfies_obligations": list(made.satisfies_obligations),
                           "started_at": _iso(row.created_at), "completed_at": _iso(row.updated_at)}
                item = record(invocation, GovernanceRecordKind.ATTESTATION, row.id, payload, print_)
                if not tx.host.append_governance_record(item):
                    first = next((r for r in tx.host.list_governance_records(invocation.id) if r.id == item.id),
                                 None)
                    if first is not None and first.fingerprint != print_:
                        raise IntegrityViolation(
                            f"step {row.step_name}: the attestation extractor is not deterministic: the stored "
                            f"fingerprint {first.fingerprint} differs from this run's {print_}")
            for name in names:
                tx.host.append_governance_record(record(invocation, GovernanceRecordKind.OBLIGATION_SATISFIED, name, {
                    "obligation": name, "by": "attestation", "adapter_invocation_id": row.id}))
        return unit


def _iso(value: datetime) -> str:
    return value.isoformat()


__all__ = ["ATTESTATION_UNIT", "Attestation", "AttestationExtractor", "Attesting"]
