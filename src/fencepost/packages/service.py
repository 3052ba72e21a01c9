"""What the CLI (and later the API) call for packages and workflows.

Publication (issue 6): an immutable record bound to the package's exact content, task and workflow
digests; the per-package head moves by compare-and-set. By default a version whose rehearsal release
gate does not pass is refused (``allow_ungated`` waives it, and the publication says so).
Guard changes (withdraw, install, disable, enable, quarantine, release) each lock the package first, like
admission does, so every admission is ordered before or after each of them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import Conflict, InvalidInput, NotFound
from fencepost.core.ids import new_id
from fencepost.evidence.gate import GateReport, evaluate_gate
from fencepost.rehearsal.package import PackageSpec, load_package
from fencepost.store.base import Store, Transaction
from fencepost.store.workflow_records import (
    DispositionRecord,
    HeadRecord,
    InstallationRecord,
    PublicationRecord,
    QuarantineRecord,
)
from fencepost.workflows.admission import AdmissionResult, admit, not_allowed
from fencepost.workflows.plan import PLAN_FORMAT, normalize_plan
from fencepost.workflows.publication import definition_digest, lock_digest, publication_definition


@dataclass(frozen=True)
class PublishResult:
    outcome: str  # "created" | "existing"
    publication: PublicationRecord
    gate: GateReport | None


@dataclass(frozen=True)
class PackageState:
    head: HeadRecord | None
    publications: list[PublicationRecord]
    installation: InstallationRecord | None
    disposition: DispositionRecord | None
    quarantine: QuarantineRecord | None


def _gate_for(tx: Transaction, content_digest: str) -> GateReport | None:
    """The gate of the newest READY rehearsal of exactly this content (None when never rehearsed)."""
    runs = tx.runs_by_digest(content_digest)
    if not runs:
        return None
    run = runs[0]
    attempts = tx.list_attempts(run.id)
    receipts = {}
    if attempts:
        receipts[attempts[-1].id] = tx.attempt_receipts(attempts[-1].id)
        previous = [a for a in attempts[:-1] if str(a.status) == "SUCCEEDED"]
        if previous:
            receipts[previous[-1].id] = tx.attempt_receipts(previous[-1].id)
    return evaluate_gate(run, attempts, receipts)


class PackageService:
    """Publication, installation lifecycle, planning and admission over one control store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ── publication ──
    def publish(self, package_dir: str | Path, *, allow_ungated: bool = False,
                expected_revision: int | None = None) -> PublishResult:
        """Publish the package in ``package_dir`` and move its head to it.

        Args:
            allow_ungated: publish even when no passing rehearsal gate exists (recorded as ``waived``).
            expected_revision: compare-and-set the head from this revision (default: the one read now;
                0 means "no head yet").
        Raises:
            InvalidInput: invalid package.  NotAllowed(guard="release_gate"): gate not passing.
            Conflict: the version exists with other content, or the head moved (compare-and-set failed).
        """
        spec = load_package(package_dir)
        return self.publish_spec(spec, allow_ungated=allow_ungated, expected_revision=expected_revision)

    def publish_spec(self, spec: PackageSpec, *, allow_ungated: bool = False,
                     expected_revision: int | None = None) -> PublishResult:
        definition = publication_definition(
            package=spec.name, version=spec.version, content_digest=spec.content_digest,
            tasks={t.id: t.digest for t in spec.tasks},
            workflows={w.id: (w.digest, list(w.steps)) for w in spec.workflows})
        text = canonical_json(definition)
        digest = definition_digest(definition)
        publication_id = new_id("pub")

        def unit(tx: Transaction) -> PublishResult:
            tx.lock_package(spec.name)
            existing = tx.get_publication_by_version(spec.name, spec.version)
            if existing is not None:
                if existing.content_digest != spec.content_digest:
                    raise Conflict(f"{spec.name} {spec.version} is already published with other content "
                                   f"({existing.content_digest}); publications are immutable")
                return PublishResult("existing", existing, None)
            gate = _gate_for(tx, spec.content_digest)
            if (gate is None or not gate.passed) and not allow_ungated:
                why = ("no rehearsal of this exact content exists" if gate is None else
                       "; ".join(f"{c.name}: {c.reason}" for c in gate.blocking))
                raise not_allowed("release_gate", f"release gate does not pass for {spec.name} {spec.version}: "
                                                  f"{why} (rehearse it, or publish with --allow-ungated)")
            head = tx.get_head(spec.name)
            seen = head.revision if head else 0
            if expected_revision is not None and expected_revision != seen:
                raise Conflict(f"the head of {spec.name} is at revision {seen}, not {expected_revision}")
            tx.insert_publication(
                publication_id=publication_id, package_name=spec.name, version=spec.version,
                content_digest=spec.content_digest, definition=text, definition_digest=digest,
                gate="passed" if gate is not None and gate.passed else "waived",
                gate_run_id=gate.run_id if gate is not None and gate.passed else None,
                previous_publication_id=head.publication_id if head else None)
            if not tx.move_head(spec.name, publication_id, seen or None):
                raise Conflict(f"the head of {spec.name} moved concurrently; publish again")
            published = tx.get_publication(publication_id)
            assert published is not None
            return PublishResult("created", published, gate)

        return self.store.transact(unit, name="package.publish")

    def withdraw(self, package: str, version: str) -> PublicationRecord:
        def unit(tx: Transaction) -> PublicationRecord:
            tx.lock_package(package)
            pub = tx.get_publication_by_version(package, version)
            if pub is None:
                raise NotFound(f"{package} {version} is not published")
            if not tx.withdraw_publication(pub.id):
                raise Conflict(f"{package} {version} is already {pub.status}")
            withdrawn = tx.get_publication(pub.id)
            assert withdrawn is not None
            return withdrawn

        return self.store.transact(unit, name="package.withdraw")

    # ── installation lifecycle ──
    def install(self, package: str, version: str | None = None) -> InstallationRecord:
        """Install (or activate another publication of) ``package``: the head's by default.

        Raises NotFound (nothing published / unknown version), NotAllowed(guard="publication_active").
        """

        def unit(tx: Transaction) -> InstallationRecord:
            tx.lock_package(package)
            if version is None:
                head = tx.get_head(package)
                if head is None:
                    raise NotFound(f"{package} has no publication to install")
                pub = tx.get_publication(head.publication_id)
            else:
                pub = tx.get_publication_by_version(package, version)
            if pub is None:
                raise NotFound(f"{package} {version} is not published")
            if pub.status != "active":
                raise not_allowed("publication_active", f"publication {pub.id} is {pub.status}")
            lock = lock_digest(pub.id, pub.content_digest, pub.definition_digest)
            current = tx.get_installation(package)
            if current is None:
                tx.insert_installation(installation_id=new_id("ins"), package_name=package, publication_id=pub.id,
                                       lock_digest=lock)
            elif not tx.update_installation(installation_id=current.id, publication_id=pub.id, lock_digest=lock,
                                            expected_generation=current.generation):
                raise Conflict(f"the installation of {package} changed concurrently; install again")
            installed = tx.get_installation(package)
            assert installed is not None
            return installed

        return self.store.transact(unit, name="package.install")

    def _installed(self, tx: Transaction, package: str) -> InstallationRecord:
        tx.lock_package(package)
        installation = tx.get_installation(package)
        if installation is None:
            raise NotFound(f"{package} is not installed")
        return installation

    def set_disposition(self, package: str, disposition: str, reason: str | None = None) -> DispositionRecord:
        """Disable or enable an installation. Enabling never clears a quarantine."""
        if disposition not in ("active", "disabled"):
            raise InvalidInput("disposition is active or disabled")

        def unit(tx: Transaction) -> DispositionRecord:
            installation = self._installed(tx, package)
            tx.set_disposition(installation.id, disposition, reason)
            record = tx.get_disposition(installation.id)
            assert record is not None
            return record

        return self.store.transact(unit, name="package.disposition")

    def quarantine(self, package: str, reason: str) -> QuarantineRecord:
        """Quarantine the exact current installation and lock of ``package``."""
        if not reason.strip():
            raise InvalidInput("a quarantine needs a reason")

        def unit(tx: Transaction) -> QuarantineRecord:
            installation = self._installed(tx, package)
            existing = tx.open_quarantine(installation.id, installation.lock_digest)
            if existing is not None:
                return existing
            tx.insert_quarantine(quarantine_id=new_id("qua"), installation_id=installation.id,
                                 lock_digest=installation.lock_digest, reason=reason.strip()[:1000])
            record = tx.open_quarantine(installation.id, installation.lock_digest)
            assert record is not None
            return record

        return self.store.transact(unit, name="package.quarantine")

    def release_quarantine(self, package: str, reason: str) -> None:
        if not reason.strip():
            raise InvalidInput("releasing a quarantine needs a reason")

        def unit(tx: Transaction) -> None:
            installation = self._installed(tx, package)
            if not tx.release_quarantine(installation.id, installation.lock_digest, reason.strip()[:1000]):
                raise Conflict(f"{package} is not quarantined at its current lock")

        self.store.transact(unit, name="package.release_quarantine")

    def state(self, package: str) -> PackageState:
        def unit(tx: Transaction) -> PackageState:
            installation = tx.get_installation(package)
            return PackageState(
                head=tx.get_head(package), publications=tx.list_publications(package), installation=installation,
                disposition=tx.get_disposition(installation.id) if installation else None,
                quarantine=tx.open_quarantine(installation.id, installation.lock_digest) if installation else None)

        state = self.store.read(unit)
        if state.head is None and not state.publications:
            raise NotFound(f"{package} has never been published")
        return state

    # ── workflows ──
    def plan(self, package: str, workflow_id: str, *, plan_id: str | None = None,
             inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        """Build a normalized plan for one run of ``workflow_id`` against the current installation.

        Returns:
            The normalized plan (with its digest), ready for ``admit``.
        Raises:
            NotFound: package not installed or workflow unknown.
        """

        def unit(tx: Transaction) -> dict[str, Any]:
            installation = tx.get_installation(package)
            if installation is None:
                raise NotFound(f"{package} is not installed")
            pub = tx.get_publication(installation.publication_id)
            assert pub is not None
            workflow = pub.definition.get("workflows", {}).get(workflow_id)
            if workflow is None:
                known = ", ".join(sorted(pub.definition.get("workflows", {}))) or "none"
                raise NotFound(f"{package} {pub.version} has no workflow {workflow_id!r} (known: {known})")
            tasks = pub.definition.get("tasks", {})
            return {
                "format": PLAN_FORMAT, "plan_id": plan_id or f"plan_{secrets.token_hex(12)}", "package": package,
                "publication_id": pub.id, "installation_id": installation.id, "lock": installation.lock_digest,
                "workflow_id": workflow_id, "workflow_digest": workflow["digest"], "inputs": inputs or {},
                "steps": [{"key": s["key"], "task": s["task"], "task_digest": tasks[s["task"]]["digest"],
                           "needs": s["needs"]} for s in workflow["steps"]],
            }

        return normalize_plan(self.store.read(unit)).data

    def admit(self, plan: Any) -> AdmissionResult:
        """Admit a plan atomically (``fencepost.workflows.admission.admit``)."""
        return admit(self.store, plan)

    def show(self, ident: str) -> dict[str, Any]:
        """An admission by plan id or run id: the admission, its Run, StepRuns, events and receipt."""

        def unit(tx: Transaction) -> dict[str, Any]:
            admission = tx.get_admission(ident) or tx.get_admission_by_run(ident)
            if admission is None:
                raise NotFound(f"no workflow admission or run {ident}")
            rows = tx.admission_rows(admission.plan_id, admission.run_id)
            return {"admission": admission, "rows": rows}

        return self.store.read(unit)
