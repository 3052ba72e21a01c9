"""The catalog contract (``CatalogPort``): publications, the head, installations, dispositions, quarantines.

ADR-0224 and ADR 0015: the head and an installation move only by compare-and-set (on ``revision`` and on
``generation``); a disposition is one row per installation, replaced; at most one quarantine is open per
installation and lock, and only an explicit release closes it; ``lock_package`` serializes every guard
change of one package until its unit ends.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import Conflict
from fencepost.core.fingerprint import sha256_bytes
from fencepost.core.statuses import Disposition, InstallationStatus, PublicationGate, PublicationStatus
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.workflow_records import (
    DispositionRecord,
    HeadRecord,
    InstallationRecord,
    PublicationRecord,
    QuarantineRecord,
)
from fencepost.testing.backend import ContractHarness, StoreContract
from fencepost.testing.concurrency import THREADS, run_threads

PACKAGE = "inventory"
LOCK_1 = sha256_bytes(b"lock 1")
LOCK_2 = sha256_bytes(b"lock 2")


def content_digest(package: str, version: str) -> str:
    """The (made-up) content digest of ``package`` at ``version``."""
    return sha256_bytes(f"{package} {version}".encode())


def definition_text(package: str, version: str) -> str:
    """A publication's canonical definition: it names its package, version and content digest."""
    return canonical_json({"package": package, "version": version,
                           "content_digest": content_digest(package, version), "tasks": [], "workflows": {}})


def publish(tx: UnitOfWork, publication_id: str, version: str, *, package: str = PACKAGE,
            gate: PublicationGate = PublicationGate.WAIVED, gate_run_id: str | None = None,
            previous: str | None = None) -> PublicationRecord:
    """Insert the active publication ``publication_id`` of ``package`` at ``version``."""
    text = definition_text(package, version)
    return tx.catalog.insert_publication(
        publication_id=publication_id, package_name=package, version=version,
        content_digest=content_digest(package, version), definition=text,
        definition_digest=sha256_bytes(text.encode()), gate=gate, gate_run_id=gate_run_id,
        previous_publication_id=previous)


def add_run(tx: UnitOfWork, run_id: str, version: str) -> None:
    """A READY rehearsal Run of exactly the content of ``PACKAGE`` at ``version`` (what a passed gate names)."""
    tx.rehearsal.insert_run(run_id=run_id, package_name=PACKAGE, package_version=version, previous_version=None,
                            content_digest=content_digest(PACKAGE, version), manifest={}, files=[])


def refused(store: Store, fn: Callable[[UnitOfWork], object], case: str) -> None:
    """``fn`` in one unit is refused with ``Conflict``; ``case`` names it when the store accepts it."""
    try:
        store.transact(fn)
    except Conflict:
        return
    pytest.fail(f"{case}: the store accepted what it must refuse as a Conflict")


def head(store: Store, package: str = PACKAGE) -> HeadRecord | None:
    """The package's head, or None."""
    return store.read(lambda tx: tx.catalog.get_head(package))


class CatalogContract(StoreContract):
    """Every ``CatalogPort`` operation on one backend (subclass as ``TestCatalog``)."""

    @pytest.fixture
    def published(self, store: Store) -> Store:
        """A store holding ``PACKAGE`` 1.0.0 (``pub1``) and 2.0.0 (``pub2``), neither head nor installed."""

        def fn(tx: UnitOfWork) -> None:
            publish(tx, "pub1", "1.0.0")
            publish(tx, "pub2", "2.0.0", previous="pub1")

        store.transact(fn)
        return store

    @pytest.fixture
    def installed(self, published: Store) -> Store:
        """``published`` with installation ``inst1`` of ``pub1`` at ``LOCK_1``."""
        published.transact(lambda tx: tx.catalog.insert_installation(
            installation_id="inst1", package_name=PACKAGE, publication_id="pub1", lock_digest=LOCK_1))
        return published

    # ── publications ──

    def test_insert_publication_returns_it_as_stored(self, store: Store) -> None:
        def fn(tx: UnitOfWork) -> tuple[datetime, PublicationRecord]:
            return tx.now(), publish(tx, "pub1", "1.0.0")

        now, inserted = store.transact(fn)
        text = definition_text(PACKAGE, "1.0.0")
        assert (inserted.id, inserted.package_name, inserted.version) == ("pub1", PACKAGE, "1.0.0")
        assert inserted.content_digest == content_digest(PACKAGE, "1.0.0")
        # The definition is kept as the exact text its digest was taken over, and parsed.
        assert inserted.definition_text == text and inserted.definition_digest == sha256_bytes(text.encode())
        assert inserted.definition == {"package": PACKAGE, "version": "1.0.0", "tasks": [], "workflows": {},
                                       "content_digest": content_digest(PACKAGE, "1.0.0")}
        assert inserted.status is PublicationStatus.ACTIVE and inserted.gate is PublicationGate.WAIVED
        assert inserted.gate_run_id is None and inserted.previous_publication_id is None
        assert inserted.published_at == now and inserted.published_at.utcoffset() == timedelta(0)
        assert inserted.withdrawn_at is None
        assert store.read(lambda tx: tx.catalog.get_publication("pub1")) == inserted
        assert store.read(lambda tx: tx.catalog.get_publication_by_version(PACKAGE, "1.0.0")) == inserted

    def test_a_gated_publication_names_its_rehearsal_and_its_predecessor(self, store: Store) -> None:
        def fn(tx: UnitOfWork) -> PublicationRecord:
            publish(tx, "pub1", "1.0.0")
            add_run(tx, "run2", "2.0.0")
            return publish(tx, "pub2", "2.0.0", gate=PublicationGate.PASSED, gate_run_id="run2", previous="pub1")

        gated = store.transact(fn)
        assert gated.gate is PublicationGate.PASSED and gated.gate_run_id == "run2"
        assert gated.previous_publication_id == "pub1"
        assert store.read(lambda tx: tx.catalog.get_publication("pub2")) == gated

    def test_unknown_publications_are_none(self, published: Store) -> None:
        assert published.read(lambda tx: tx.catalog.get_publication("nope")) is None
        assert published.read(lambda tx: tx.catalog.get_publication_by_version(PACKAGE, "9.9.9")) is None
        assert published.read(lambda tx: tx.catalog.get_publication_by_version("other", "1.0.0")) is None
        assert published.read(lambda tx: tx.catalog.list_publications("other")) == []

    def test_publications_are_listed_in_publication_order(self, store: Store, backend: ContractHarness) -> None:
        assert store.read(lambda tx: tx.catalog.all_publications()) == []
        store.transact(lambda tx: publish(tx, "p-old", "1.0.0"))
        backend.advance(0.01)
        store.transact(lambda tx: publish(tx, "o-1", "1.0.0", package="other"))
        backend.advance(0.01)

        def same_instant(tx: UnitOfWork) -> None:  # one unit, one instant: the id breaks the tie
            publish(tx, "p-z", "3.0.0")
            publish(tx, "p-y", "2.0.0")

        store.transact(same_instant)
        listed = store.read(lambda tx: tx.catalog.list_publications(PACKAGE))
        assert [p.id for p in listed] == ["p-old", "p-y", "p-z"]
        assert [p.id for p in store.read(lambda tx: tx.catalog.all_publications())] == ["p-old", "o-1", "p-y", "p-z"]
        assert [p.id for p in store.read(lambda tx: tx.catalog.list_publications("other"))] == ["o-1"]

    def test_an_invalid_publication_is_a_conflict_and_rolls_back_the_whole_unit(self, store: Store) -> None:
        store.transact(lambda tx: add_run(tx, "run1", "1.0.0"))

        def case(bad: str) -> Callable[[UnitOfWork], None]:
            def fn(tx: UnitOfWork) -> None:
                publish(tx, "first", "0.9.0")  # must vanish with the rollback
                if bad == "duplicate-version":
                    publish(tx, "again", "0.9.0")
                elif bad == "duplicate-id":
                    publish(tx, "first", "1.0.0")
                elif bad == "passed-without-run":
                    publish(tx, "p", "1.0.0", gate=PublicationGate.PASSED)
                elif bad == "waived-with-run":
                    publish(tx, "p", "1.0.0", gate=PublicationGate.WAIVED, gate_run_id="run1")
                elif bad == "unknown-gate-run":
                    publish(tx, "p", "1.0.0", gate=PublicationGate.PASSED, gate_run_id="nope")
                elif bad == "unknown-previous":
                    publish(tx, "p", "1.0.0", previous="nope")
                elif bad == "malformed-digest":
                    text = definition_text(PACKAGE, "1.0.0")
                    tx.catalog.insert_publication(
                        publication_id="p", package_name=PACKAGE, version="1.0.0",
                        content_digest=content_digest(PACKAGE, "1.0.0"), definition=text,
                        definition_digest="md5:abc", gate=PublicationGate.WAIVED, gate_run_id=None,
                        previous_publication_id=None)
                else:
                    tx.catalog.insert_publication(
                        publication_id="p", package_name="other", version="1.0.0",
                        content_digest=content_digest(PACKAGE, "1.0.0"),
                        definition=definition_text(PACKAGE, "1.0.0"), definition_digest=sha256_bytes(b"d"),
                        gate=PublicationGate.WAIVED, gate_run_id=None, previous_publication_id=None)

            return fn

        for bad in ("duplicate-version", "duplicate-id", "passed-without-run", "waived-with-run", "unknown-gate-run",
                    "unknown-previous", "malformed-digest", "definition-of-another-package"):
            refused(store, case(bad), bad)
            assert store.read(lambda tx: tx.catalog.all_publications()) == [], bad

    def test_withdraw_a_publication_once(self, published: Store, backend: ContractHarness) -> None:
        before = published.read(lambda tx: tx.catalog.get_publication("pub1"))
        assert before is not None
        backend.advance(0.01)

        def fn(tx: UnitOfWork) -> tuple[datetime, PublicationRecord | None]:
            return tx.now(), tx.catalog.withdraw_publication("pub1")

        now, withdrawn = published.transact(fn)
        assert withdrawn is not None
        assert withdrawn.status is PublicationStatus.WITHDRAWN and withdrawn.withdrawn_at == now
        assert withdrawn.published_at == before.published_at and withdrawn.definition_text == before.definition_text
        assert published.read(lambda tx: tx.catalog.get_publication("pub1")) == withdrawn
        assert published.transact(lambda tx: tx.catalog.withdraw_publication("pub1")) is None
        assert published.transact(lambda tx: tx.catalog.withdraw_publication("nope")) is None
        other = published.read(lambda tx: tx.catalog.get_publication("pub2"))
        assert other is not None and other.status is PublicationStatus.ACTIVE

    # ── the head: compare-and-set on revision ──

    def test_the_head_moves_only_from_the_revision_its_mover_saw(
            self, published: Store, backend: ContractHarness) -> None:
        assert head(published) is None

        def move(publication_id: str, expected: int | None) -> tuple[datetime, bool]:
            return published.transact(lambda tx: (tx.now(), tx.catalog.move_head(PACKAGE, publication_id, expected)))

        created_at, created = move("pub1", None)
        assert created is True
        assert head(published) == HeadRecord(PACKAGE, "pub1", 1, created_at)
        assert move("pub2", None)[1] is False, "a head exists: creating it again must fail"
        assert head(published) == HeadRecord(PACKAGE, "pub1", 1, created_at)
        backend.advance(0.01)
        moved_at, moved = move("pub2", 1)
        assert moved is True
        assert head(published) == HeadRecord(PACKAGE, "pub2", 2, moved_at)
        assert move("pub1", 1)[1] is False, "a stale revision must not move the head"
        assert move("pub1", 3)[1] is False, "a future revision must not move the head"
        assert head(published) == HeadRecord(PACKAGE, "pub2", 2, moved_at)
        assert published.transact(lambda tx: tx.catalog.move_head("other", "pub1", 1)) is False
        assert head(published, "other") is None

    def test_a_head_names_a_publication(self, published: Store) -> None:
        with pytest.raises(Conflict):
            published.transact(lambda tx: tx.catalog.move_head(PACKAGE, "nope", None))
        assert head(published) is None

    def test_lock_package_serializes_read_then_compare_and_set(
            self, published: Store, backend: ContractHarness) -> None:
        published.transact(lambda tx: tx.catalog.move_head(PACKAGE, "pub1", None))
        stores = [backend.open() for _ in range(THREADS)]
        rounds = 15

        def mover(index: int) -> list[bool]:
            def fn(tx: UnitOfWork) -> bool:
                tx.catalog.lock_package(PACKAGE)
                seen = tx.catalog.get_head(PACKAGE)
                assert seen is not None
                return tx.catalog.move_head(PACKAGE, "pub2" if seen.publication_id == "pub1" else "pub1",
                                            seen.revision)

            return [stores[index].transact(fn) for _ in range(rounds)]

        outcomes = [moved for chunk in run_threads(mover) for moved in chunk]
        # Under the lock no other guard change commits between a unit's read and its compare-and-set.
        assert outcomes == [True] * (THREADS * rounds)
        final = head(published)
        assert final is not None and final.revision == 1 + THREADS * rounds

    # ── installations: compare-and-set on generation ──

    def test_insert_installation_is_active_at_generation_one(self, published: Store) -> None:
        def fn(tx: UnitOfWork) -> tuple[datetime, InstallationRecord]:
            return tx.now(), tx.catalog.insert_installation(installation_id="inst1", package_name=PACKAGE,
                                                            publication_id="pub1", lock_digest=LOCK_1)

        now, inserted = published.transact(fn)
        installation = published.read(lambda tx: tx.catalog.get_installation(PACKAGE))
        assert installation == inserted and installation is not None
        assert (installation.id, installation.package_name, installation.publication_id, installation.lock_digest) == (
            "inst1", PACKAGE, "pub1", LOCK_1)
        assert installation.status is InstallationStatus.ACTIVE and installation.generation == 1
        assert installation.installed_at == installation.updated_at == now
        assert installation.installed_at.utcoffset() == timedelta(0)
        assert published.read(lambda tx: tx.catalog.get_installation("other")) is None

    def test_an_invalid_installation_is_a_conflict(self, installed: Store) -> None:
        def case(bad: str) -> Callable[[UnitOfWork], None]:
            def fn(tx: UnitOfWork) -> None:
                if bad == "second-of-the-package":
                    tx.catalog.insert_installation(installation_id="inst2", package_name=PACKAGE,
                                                   publication_id="pub2", lock_digest=LOCK_2)
                elif bad == "duplicate-id":
                    publish(tx, "o-1", "1.0.0", package="other")  # must vanish with the rollback
                    tx.catalog.insert_installation(installation_id="inst1", package_name="other",
                                                   publication_id="o-1", lock_digest=LOCK_2)
                elif bad == "unknown-publication":
                    tx.catalog.insert_installation(installation_id="inst2", package_name="other",
                                                   publication_id="nope", lock_digest=LOCK_2)
                else:
                    tx.catalog.insert_installation(installation_id="inst2", package_name="other",
                                                   publication_id="pub2", lock_digest="sha256:xyz")

            return fn

        before = installed.read(lambda tx: tx.catalog.all_installations())
        for bad in ("second-of-the-package", "duplicate-id", "unknown-publication", "malformed-lock"):
            refused(installed, case(bad), bad)
            assert installed.read(lambda tx: tx.catalog.all_installations()) == before, bad
            assert installed.read(lambda tx: tx.catalog.get_publication("o-1")) is None, bad

    def test_update_installation_moves_only_from_the_generation_its_mover_saw(
            self, installed: Store, backend: ContractHarness) -> None:
        first = installed.read(lambda tx: tx.catalog.get_installation(PACKAGE))
        assert first is not None
        backend.advance(0.01)

        def update(expected: int) -> tuple[datetime, InstallationRecord | None]:
            return installed.transact(lambda tx: (tx.now(), tx.catalog.update_installation(
                installation_id="inst1", publication_id="pub2", lock_digest=LOCK_2, expected_generation=expected)))

        now, updated = update(1)
        assert updated is not None and updated == installed.read(lambda tx: tx.catalog.get_installation(PACKAGE))
        assert (updated.publication_id, updated.lock_digest, updated.generation) == ("pub2", LOCK_2, 2)
        assert updated.status is InstallationStatus.ACTIVE
        assert updated.installed_at == first.installed_at and updated.updated_at == now
        assert update(1)[1] is None, "a stale generation must not move the installation"
        assert update(3)[1] is None, "a future generation must not move the installation"
        assert installed.read(lambda tx: tx.catalog.get_installation(PACKAGE)) == updated
        assert installed.transact(lambda tx: tx.catalog.update_installation(
            installation_id="nope", publication_id="pub2", lock_digest=LOCK_2, expected_generation=1)) is None

    def test_all_installations_by_package_name(self, installed: Store) -> None:
        def fn(tx: UnitOfWork) -> None:
            publish(tx, "a-1", "1.0.0", package="alpha")
            tx.catalog.insert_installation(installation_id="inst-a", package_name="alpha", publication_id="a-1",
                                           lock_digest=LOCK_2)

        installed.transact(fn)
        assert [(i.id, i.package_name) for i in installed.read(lambda tx: tx.catalog.all_installations())] == [
            ("inst-a", "alpha"), ("inst1", PACKAGE)]

    # ── dispositions: one row per installation, replaced ──

    def test_set_disposition_inserts_then_replaces(
            self, installed: Store, backend: ContractHarness) -> None:
        assert installed.read(lambda tx: tx.catalog.get_disposition("inst1")) is None

        def set_to(disposition: Disposition, reason: str | None) -> tuple[datetime, DispositionRecord]:
            return installed.transact(lambda tx: (tx.now(), tx.catalog.set_disposition("inst1", disposition, reason)))

        disabled_at, disabled = set_to(Disposition.DISABLED, "maintenance")
        assert disabled == installed.read(lambda tx: tx.catalog.get_disposition("inst1"))
        assert disabled.disposition is Disposition.DISABLED and disabled.reason == "maintenance"
        assert disabled.installation_id == "inst1" and disabled.updated_at == disabled_at
        backend.advance(0.01)
        enabled_at, enabled = set_to(Disposition.ACTIVE, None)
        assert enabled == installed.read(lambda tx: tx.catalog.get_disposition("inst1"))
        assert enabled.disposition is Disposition.ACTIVE and enabled.reason is None
        assert enabled.updated_at == enabled_at != disabled_at
        rows = installed.read(lambda tx: backend.inspect(tx, "SELECT count(*) FROM installation_dispositions"))
        assert int(rows[0][0]) == 1

    def test_a_disposition_names_an_installation(self, installed: Store) -> None:
        with pytest.raises(Conflict):
            installed.transact(lambda tx: tx.catalog.set_disposition("nope", Disposition.DISABLED, "x"))
        assert installed.read(lambda tx: tx.catalog.get_disposition("nope")) is None

    # ── quarantines: one open per installation and lock, closed only by a release ──

    def test_a_quarantine_stays_open_until_released(self, installed: Store, backend: ContractHarness) -> None:
        assert installed.read(lambda tx: tx.catalog.open_quarantine("inst1", LOCK_1)) is None

        def fn(tx: UnitOfWork) -> tuple[datetime, QuarantineRecord]:
            return tx.now(), tx.catalog.insert_quarantine(quarantine_id="q1", installation_id="inst1",
                                                          lock_digest=LOCK_1, reason="looks wrong")

        now, opened = installed.transact(fn)
        assert opened == installed.read(lambda tx: tx.catalog.open_quarantine("inst1", LOCK_1))
        assert (opened.id, opened.installation_id, opened.lock_digest, opened.reason) == (
            "q1", "inst1", LOCK_1, "looks wrong")
        assert opened.quarantined_at == now
        assert installed.read(lambda tx: tx.catalog.open_quarantine("inst1", LOCK_2)) is None
        with pytest.raises(Conflict):  # a second open quarantine of the same installation and lock
            installed.transact(lambda tx: tx.catalog.insert_quarantine(
                quarantine_id="q-twin", installation_id="inst1", lock_digest=LOCK_1, reason="again"))
        assert installed.transact(lambda tx: tx.catalog.release_quarantine("inst1", LOCK_2, "other lock")) is False
        assert installed.read(lambda tx: tx.catalog.open_quarantine("inst1", LOCK_1)) == opened
        assert installed.transact(lambda tx: tx.catalog.release_quarantine("inst1", LOCK_1, "fixed")) is True
        assert installed.read(lambda tx: tx.catalog.open_quarantine("inst1", LOCK_1)) is None
        assert installed.transact(lambda tx: tx.catalog.release_quarantine("inst1", LOCK_1, "fixed")) is False
        released = installed.read(lambda tx: backend.inspect(
            tx, "SELECT release_reason, released_at IS NOT NULL FROM installation_quarantines WHERE id = 'q1'"))
        assert [(reason, bool(done)) for reason, done in released] == [("fixed", True)]
        # Released, the installation at that lock can be quarantined again.
        again = installed.transact(lambda tx: tx.catalog.insert_quarantine(
            quarantine_id="q2", installation_id="inst1", lock_digest=LOCK_1, reason="back again"))
        assert installed.read(lambda tx: tx.catalog.open_quarantine("inst1", LOCK_1)) == again

    def test_an_invalid_quarantine_is_a_conflict(self, installed: Store) -> None:
        installed.transact(lambda tx: tx.catalog.insert_quarantine(
            quarantine_id="q1", installation_id="inst1", lock_digest=LOCK_1, reason="first"))

        def quarantine(quarantine_id: str, installation_id: str, lock: str,
                       reason: str) -> Callable[[UnitOfWork], QuarantineRecord]:
            return lambda tx: tx.catalog.insert_quarantine(quarantine_id=quarantine_id, installation_id=installation_id,
                                                           lock_digest=lock, reason=reason)

        def still_open(installation_id: str, lock: str) -> QuarantineRecord | None:
            return installed.read(lambda tx: tx.catalog.open_quarantine(installation_id, lock))

        cases = {"unknown-installation": ("q2", "nope", LOCK_2, "x"), "empty-reason": ("q2", "inst1", LOCK_2, ""),
                 "malformed-lock": ("q2", "inst1", "sha256:xyz", "x"), "duplicate-id": ("q1", "inst1", LOCK_2, "x")}
        for bad, (quarantine_id, installation_id, lock, reason) in cases.items():
            refused(installed, quarantine(quarantine_id, installation_id, lock, reason), bad)
            assert still_open("inst1", LOCK_2) is None and still_open(installation_id, lock) is None, bad
