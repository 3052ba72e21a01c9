"""The package catalog's lifecycle: publication, the head, installation, disposition and quarantine.

Publication (ADR-0224): an immutable record bound to the package's exact content, task and workflow digests;
the per-package head moves by compare-and-set. A version whose release gate does not pass is refused unless
``allow_ungated`` waives it (the publication says so). The gate is not the catalog's: ``CatalogService`` is
given a ``ReleaseGate`` (the rehearsal layer supplies the real one), so the catalog imports no application.
Guard changes (withdraw, install, disable, enable, quarantine, release) each lock the package first, as
admission does, so every admission is ordered before or after each of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fencepost.catalog.digests import definition_digest, lock_digest, publication_definition
from fencepost.catalog.manifest import PackageSpec, load_package
from fencepost.core.canonical import canonical_json
from fencepost.core.errors import Conflict, InvalidInput, NotAllowed, NotFound
from fencepost.core.ids import new_id
from fencepost.core.statuses import Disposition, PublicationGate, PublicationStatus
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.workflow_records import (
    DispositionRecord,
    HeadRecord,
    InstallationRecord,
    PublicationRecord,
    QuarantineRecord,
)


@dataclass(frozen=True)
class GateVerdict:
    """What a release gate says about one exact package content.

    Attributes:
        passed: every gate check passes.
        run_id: the rehearsal (Run) the verdict is about.
        blocking: ``"<check>: <reason>"`` for each check that does not pass.
        compared: the latest Attempt's semantics were compared with an earlier successful one (a single
            Attempt compared with nothing is not: issue 11 item 6).
    """

    passed: bool
    run_id: str
    blocking: list[str] = field(default_factory=list)
    compared: bool = True


#: ``gate(tx, content_digest)``: the verdict for exactly this content, or None when it was never rehearsed.
ReleaseGate = Callable[[UnitOfWork, str], GateVerdict | None]


def not_allowed(guard: str, detail: str) -> NotAllowed:
    """A false guard, named in the one-line message (``guard <name>: ...``) and in ``.guard``."""
    return NotAllowed(f"not allowed by guard {guard}: {detail}", guard)


@dataclass(frozen=True)
class PublishResult:
    """``outcome`` is ``"created"`` or ``"existing"``; ``gate`` is the verdict consulted (None if none was)."""

    outcome: str
    publication: PublicationRecord
    gate: GateVerdict | None


@dataclass(frozen=True)
class PackageState:
    head: HeadRecord | None
    publications: list[PublicationRecord]
    installation: InstallationRecord | None
    disposition: DispositionRecord | None
    quarantine: QuarantineRecord | None


class CatalogService:
    """Publication and installation lifecycle over one control store.

    Args:
        store: the control store.
        release_gate: consulted by ``publish`` inside its transaction.
    """

    def __init__(self, store: Store, *, release_gate: ReleaseGate) -> None:
        self.store = store
        self.release_gate = release_gate

    # ── publication ──
    def publish(self, package_dir: str | Path, *, allow_ungated: bool = False, allow_single_attempt: bool = False,
                expected_revision: int | None = None) -> PublishResult:
        """Publish the package in ``package_dir`` and move its head to it.

        Args:
            allow_ungated: publish even when no passing release gate exists (recorded as ``waived``).
            allow_single_attempt: publish on a passing gate whose semantics were not compared (one successful
                Attempt, nothing to compare it with), recorded as ``waived`` like ``allow_ungated``.
            expected_revision: compare-and-set the head from this revision (default: the one read now;
                0 means "no head yet").
        Raises:
            InvalidInput: invalid package.  NotAllowed(guard="release_gate"): gate not passing, or passing
                on a single Attempt compared with nothing (without ``allow_single_attempt``).
            Conflict: the version exists with other content, or the head moved (compare-and-set failed).
        """
        return self.publish_spec(load_package(package_dir), allow_ungated=allow_ungated,
                                 allow_single_attempt=allow_single_attempt, expected_revision=expected_revision)

    def publish_spec(self, spec: PackageSpec, *, allow_ungated: bool = False, allow_single_attempt: bool = False,
                     expected_revision: int | None = None) -> PublishResult:
        """``publish`` of an already loaded package (same arguments and errors)."""
        definition = publication_definition(
            package=spec.name, version=spec.version, content_digest=spec.content_digest,
            tasks={t.id: t.digest for t in spec.tasks},
            timeouts={t.id: t.timeout_seconds for t in spec.tasks if t.timeout_seconds is not None},
            workflows={w.id: (w.digest, list(w.steps)) for w in spec.workflows})
        text = canonical_json(definition)
        digest = definition_digest(definition)
        publication_id = new_id("pub")

        def unit(tx: UnitOfWork) -> PublishResult:
            tx.catalog.lock_package(spec.name)
            existing = tx.catalog.get_publication_by_version(spec.name, spec.version)
            if existing is not None:
                if existing.content_digest != spec.content_digest:
                    raise Conflict(f"{spec.name} {spec.version} is already published with other content "
                                   f"({existing.content_digest}); publications are immutable")
                return PublishResult("existing", existing, None)
            gate = self.release_gate(tx, spec.content_digest)
            if (gate is None or not gate.passed) and not allow_ungated:
                # Name the rehearsal checked: an older one of this content may have passed, and a user who
                # made a newer one (``rehearsal create``) cannot otherwise tell why that pass does not count.
                why = ("no rehearsal of this exact content exists" if gate is None else
                       f"rehearsal {gate.run_id} does not pass (the newest rehearsal of this content is the one "
                       f"that counts): {'; '.join(gate.blocking)}")
                raise not_allowed("release_gate", f"release gate does not pass for {spec.name} {spec.version}: "
                                                  f"{why} (rehearse it, or publish with --allow-ungated)")
            if gate is not None and gate.passed and not gate.compared and not (allow_single_attempt or allow_ungated):
                raise not_allowed("release_gate", f"release gate of {spec.name} {spec.version} (rehearsal "
                                                  f"{gate.run_id}) passes on a single Attempt: its semantics were "
                                                  "not compared (run a second Attempt, or publish with "
                                                  "--allow-single-attempt)")
            head = tx.catalog.get_head(spec.name)
            seen = head.revision if head else 0
            if expected_revision is not None and expected_revision != seen:
                raise Conflict(f"the head of {spec.name} is at revision {seen}, not {expected_revision}")
            passed = gate is not None and gate.passed and gate.compared
            published = tx.catalog.insert_publication(
                publication_id=publication_id, package_name=spec.name, version=spec.version,
                content_digest=spec.content_digest, definition=text, definition_digest=digest,
                gate=PublicationGate.PASSED if passed else PublicationGate.WAIVED,
                gate_run_id=gate.run_id if gate is not None and passed else None,
                previous_publication_id=head.publication_id if head else None)
            if not tx.catalog.move_head(spec.name, publication_id, seen or None):
                raise Conflict(f"the head of {spec.name} moved concurrently; publish again")
            return PublishResult("created", published, gate)

        return self.store.transact(unit, name="package.publish")

    def withdraw(self, package: str, version: str) -> PublicationRecord:
        """Withdraw a publication: no new installation or admission may use it.

        Raises:
            NotFound: not published. Conflict: already withdrawn.
        """

        def unit(tx: UnitOfWork) -> PublicationRecord:
            tx.catalog.lock_package(package)
            pub = tx.catalog.get_publication_by_version(package, version)
            if pub is None:
                raise NotFound(f"{package} {version} is not published")
            withdrawn = tx.catalog.withdraw_publication(pub.id)
            if withdrawn is None:
                raise Conflict(f"{package} {version} is already {pub.status}")
            return withdrawn

        return self.store.transact(unit, name="package.withdraw")

    # ── installation lifecycle ──
    def install(self, package: str, version: str | None = None) -> InstallationRecord:
        """Install (or activate another publication of) ``package``: the head's by default.

        Raises:
            NotFound: nothing published / unknown version. NotAllowed(guard="publication_active"): withdrawn.
            Conflict: the installation changed concurrently.
        """

        def unit(tx: UnitOfWork) -> InstallationRecord:
            tx.catalog.lock_package(package)
            if version is None:
                head = tx.catalog.get_head(package)
                if head is None:
                    raise NotFound(f"{package} has no publication to install")
                pub = tx.catalog.get_publication(head.publication_id)
            else:
                pub = tx.catalog.get_publication_by_version(package, version)
            if pub is None:
                raise NotFound(f"{package} {version} is not published")
            if pub.status is not PublicationStatus.ACTIVE:
                raise not_allowed("publication_active", f"publication {pub.id} is {pub.status}")
            lock = lock_digest(pub.id, pub.content_digest, pub.definition_digest)
            current = tx.catalog.get_installation(package)
            if current is None:
                return tx.catalog.insert_installation(installation_id=new_id("ins"), package_name=package,
                                                      publication_id=pub.id, lock_digest=lock)
            installed = tx.catalog.update_installation(installation_id=current.id, publication_id=pub.id,
                                                       lock_digest=lock, expected_generation=current.generation)
            if installed is None:
                raise Conflict(f"the installation of {package} changed concurrently; install again")
            return installed

        return self.store.transact(unit, name="package.install")

    def _installed(self, tx: UnitOfWork, package: str) -> InstallationRecord:
        tx.catalog.lock_package(package)
        installation = tx.catalog.get_installation(package)
        if installation is None:
            raise NotFound(f"{package} is not installed")
        return installation

    def set_disposition(self, package: str, disposition: str, reason: str | None = None) -> DispositionRecord:
        """Disable or enable an installation (``disposition``: active or disabled). Enabling never clears a
        quarantine.

        Raises:
            InvalidInput: another disposition. NotFound: the package is not installed.
        """
        try:
            wanted = Disposition(disposition)
        except ValueError:
            raise InvalidInput("disposition is active or disabled") from None

        def unit(tx: UnitOfWork) -> DispositionRecord:
            installation = self._installed(tx, package)
            return tx.catalog.set_disposition(installation.id, wanted, reason)

        return self.store.transact(unit, name="package.disposition")

    def quarantine(self, package: str, reason: str) -> QuarantineRecord:
        """Quarantine the exact current installation and lock of ``package`` (idempotent while open).

        Raises:
            InvalidInput: an empty reason. NotFound: the package is not installed.
        """
        if not reason.strip():
            raise InvalidInput("a quarantine needs a reason")

        def unit(tx: UnitOfWork) -> QuarantineRecord:
            installation = self._installed(tx, package)
            existing = tx.catalog.open_quarantine(installation.id, installation.lock_digest)
            if existing is not None:
                return existing
            return tx.catalog.insert_quarantine(quarantine_id=new_id("qua"), installation_id=installation.id,
                                                lock_digest=installation.lock_digest, reason=reason.strip()[:1000])

        return self.store.transact(unit, name="package.quarantine")

    def release_quarantine(self, package: str, reason: str) -> None:
        """Release the quarantine of the current installation and lock.

        Raises:
            InvalidInput: an empty reason. NotFound: not installed. Conflict: not quarantined.
        """
        if not reason.strip():
            raise InvalidInput("releasing a quarantine needs a reason")

        def unit(tx: UnitOfWork) -> None:
            installation = self._installed(tx, package)
            if not tx.catalog.release_quarantine(installation.id, installation.lock_digest, reason.strip()[:1000]):
                raise Conflict(f"{package} is not quarantined at its current lock")

        self.store.transact(unit, name="package.release_quarantine")

    def state(self, package: str) -> PackageState:
        """Head, publications, installation, disposition and open quarantine of ``package``.

        Raises:
            NotFound: never published.
        """

        def unit(tx: UnitOfWork) -> PackageState:
            installation = tx.catalog.get_installation(package)
            return PackageState(
                head=tx.catalog.get_head(package), publications=tx.catalog.list_publications(package),
                installation=installation,
                disposition=tx.catalog.get_disposition(installation.id) if installation else None,
                quarantine=(tx.catalog.open_quarantine(installation.id, installation.lock_digest)
                            if installation else None))

        state = self.store.read(unit)
        if state.head is None and not state.publications:
            raise NotFound(f"{package} has never been published")
        return state
