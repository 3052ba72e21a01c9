"""What a published version says a target should hold: its migrations with checksums, the frozen SQL, and the
rehearsal's fingerprints of the installed state (ADRs 0055, 0058).

A publication records the content digest of exactly what was rehearsed. The migrations and their bytes are the
rehearsal Run's frozen files of that content (the gate's Run when the gate passed, else the newest Run of the
same content); a delivery never reads the package directory again. A migration's checksum is ``sha256:`` of
its up file's bytes; it is what a target's ledger row must carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fencepost.catalog.manifest import PackageSpec, package_from_run
from fencepost.catalog.script_control import manages_own_transaction
from fencepost.core.canonical import parse_json
from fencepost.core.errors import NotAllowed, NotFound
from fencepost.core.fingerprint import sha256_bytes
from fencepost.core.statuses import AttemptStatus, ReceiptStatus
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import RunRecord
from fencepost.store.workflow_records import PublicationRecord

FRESH_SCENARIO = "deliver_and_install"
UPGRADE_SCENARIO = "upgrade_from_previous"


@dataclass(frozen=True)
class LockedMigration:
    """One migration of a published version: ``fenced`` False when its script manages its own transaction."""

    id: str
    checksum: str
    fenced: bool

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "checksum": self.checksum, "fenced": self.fenced}


@dataclass(frozen=True)
class PublishedLock:
    """A published version as a delivery needs it.

    Attributes:
        publication: the publication record. run_id: the rehearsal Run whose frozen files are delivered.
        migrations: in order. previous_through: how many of them the previous version shipped (None: no
            previous version). rehearsal: ``{"fresh": fingerprint, "upgrade": fingerprint | None,
            "attempt_id": ...}`` from the Run's newest successful Attempt (fingerprints None when it has none).
    """

    publication: PublicationRecord
    run_id: str
    migrations: tuple[LockedMigration, ...]
    previous_through: int | None
    rehearsal: dict[str, Any]


def checksum_of(sql: bytes) -> str:
    """The ledger checksum of a migration's up file: ``sha256:<hex>`` of its bytes."""
    return sha256_bytes(sql)


def rehearsal_run_of(tx: UnitOfWork, publication: PublicationRecord) -> RunRecord:
    """The rehearsal Run whose frozen files are what ``publication`` published: the gate's Run when the gate passed
    on this content, else the newest Run of the same content.

    Raises:
        NotAllowed(guard="rehearsal_evidence"): no rehearsal of the published content exists.
    """
    if publication.gate_run_id is not None:
        run = tx.rehearsal.get_run(publication.gate_run_id)
        if run is not None and run.content_digest == publication.content_digest:
            return run
    runs = tx.rehearsal.runs_by_digest(publication.content_digest)
    if not runs:
        raise NotAllowed(f"not allowed by guard rehearsal_evidence: {publication.package_name} "
                         f"{publication.version} has no rehearsal of its content, so there are no frozen "
                         "migrations or evidence to deliver (rehearse it first)", "rehearsal_evidence")
    return runs[0]


def package_of(tx: UnitOfWork, run_id: str) -> PackageSpec:
    """The frozen package of the rehearsal Run ``run_id``."""
    run = tx.rehearsal.get_run(run_id)
    if run is None:
        raise NotFound(f"no rehearsal {run_id}")
    return package_from_run(run.manifest, tx.rehearsal.run_files(run_id))


def _fingerprints(tx: UnitOfWork, run_id: str) -> dict[str, Any]:
    """The rehearsal's fingerprints a delivery is compared with (ADR 0058): from the newest SUCCEEDED Attempt,
    else (a publication whose gate was waived) from the newest Attempt whose fresh-install scenario itself
    SUCCEEDED: that Receipt is evidence of the installed schema even when a later scenario (a broken down
    script, say) failed the Attempt. ``attempt_id`` names the Attempt used; all None when no Attempt qualifies."""
    found: dict[str, Any] = {"attempt_id": None, "fresh": None, "upgrade": None}
    attempts = list(reversed(tx.rehearsal.list_attempts(run_id)))   # newest first
    ordered = ([a for a in attempts if a.status is AttemptStatus.SUCCEEDED]
               + [a for a in attempts if a.status is not AttemptStatus.SUCCEEDED])
    for attempt in ordered:
        receipts = {r.scenario: r for r in tx.rehearsal.attempt_receipts(attempt.id)
                    if r.status is ReceiptStatus.SUCCEEDED and r.evidence is not None}
        if FRESH_SCENARIO not in receipts:
            continue
        found["attempt_id"] = attempt.id
        for scenario, key in ((FRESH_SCENARIO, "fresh"), (UPGRADE_SCENARIO, "upgrade")):
            receipt = receipts.get(scenario)
            evidence = parse_json(receipt.evidence) if receipt is not None and receipt.evidence else {}
            result = evidence.get("result") if isinstance(evidence, dict) else None
            result = result if isinstance(result, dict) else {}
            schema = result.get("schema")
            fingerprint = schema.get("fingerprint") if isinstance(schema, dict) else None
            if scenario == FRESH_SCENARIO or result.get("applicable"):
                found[key] = fingerprint
        return found
    return found


def published_lock(tx: UnitOfWork, package: str, version: str | None = None) -> PublishedLock:
    """The lock of ``package`` at ``version`` (default: its head publication).

    Raises:
        NotFound: never published / no such version. NotAllowed(guard="rehearsal_evidence"): no rehearsal of
            the published content exists (an ungated publication that was never rehearsed).
    """
    if version is None:
        head = tx.catalog.get_head(package)
        if head is None:
            raise NotFound(f"{package} has no publication")
        publication = tx.catalog.get_publication(head.publication_id)
    else:
        publication = tx.catalog.get_publication_by_version(package, version)
    if publication is None:
        raise NotFound(f"{package} {version} is not published")
    run = rehearsal_run_of(tx, publication)
    spec = package_from_run(run.manifest, tx.rehearsal.run_files(run.id))
    migrations = tuple(LockedMigration(m.id, checksum_of(spec.files[m.up]),
                                       not manages_own_transaction(spec.sql(m.up))) for m in spec.migrations)
    return PublishedLock(publication=publication, run_id=run.id, migrations=migrations,
                         previous_through=spec.through_index(), rehearsal=_fingerprints(tx, run.id))
