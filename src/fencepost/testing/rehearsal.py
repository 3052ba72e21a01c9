"""The rehearsal contract (``RehearsalPort``, ``FencedRehearsalPort``): Runs, Attempts and their six Receipts.

Seed: "Release Gate"; ADR 0002 and ADR 0015 (the delivery writes exist only on a fenced unit, under its lease).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from fencepost.core.canonical import canonical_json
from fencepost.core.errors import Conflict, LeaseLost
from fencepost.core.fingerprint import fingerprint, sha256_bytes
from fencepost.core.statuses import AttemptStatus, CommandStatus, ReceiptStatus, RunStatus
from fencepost.store.base import Store
from fencepost.store.ports import FencedUnit, UnitOfWork
from fencepost.store.records import AttemptLock, AttemptRecord, Lease, RunFile
from fencepost.testing.backend import ContractHarness, StoreContract

T = TypeVar("T")
SCENARIOS = ["install", "upgrade", "rollback", "reinstall", "seed", "verify"]
DIGEST = sha256_bytes(b"package")


def run_file(path: str, content: bytes) -> RunFile:
    """A frozen file of ``content`` with its true digest and size."""
    return RunFile(path=path, sha256=sha256_bytes(content), size=len(content), content=content)


def add_run(tx: UnitOfWork, run_id: str = "run1", files: list[RunFile] | None = None) -> None:
    """Insert the READY Run ``run_id`` of ``inventory`` 1.2.0 (two files unless ``files`` says otherwise)."""
    tx.rehearsal.insert_run(run_id=run_id, package_name="inventory", package_version="1.2.0", previous_version="1.1.0",
                            content_digest=DIGEST, manifest={"name": "inventory", "steps": [1, 2]},
                            files=files if files is not None else [run_file("b.sql", b"\x00\xffB"),
                                                                   run_file("a.sql", b"A")])


def add_attempt(tx: UnitOfWork, attempt_id: str = "att1", run_id: str = "run1", seq: int | None = None,
                receipts: list[tuple[str, int, str]] | None = None) -> None:
    """Insert the command ``cmd-<attempt_id>`` and its PENDING Attempt with six Receipts (or ``receipts``)."""
    command_id = f"cmd-{attempt_id}"
    tx.outbox.insert(command_id=command_id, kind="rehearsal", payload={"attempt_id": attempt_id})
    tx.rehearsal.insert_attempt(attempt_id=attempt_id, run_id=run_id,
                                seq=seq if seq is not None else tx.rehearsal.next_attempt_seq(run_id),
                                command_id=command_id,
                                receipts=receipts if receipts is not None else
                                [(f"{attempt_id}-r{i}", i, name) for i, name in enumerate(SCENARIOS, start=1)])


def claim(store: Store) -> Lease:
    """Claim ``cmd-att1`` (the only due command): the next delivery's lease."""
    (claimed,) = store.transact(lambda tx: tx.outbox.claim(owner="w", kinds=["rehearsal"], limit=1,
                                                           lease_seconds=60))
    return claimed.lease


def redeliver(store: Store, lease: Lease) -> Lease:
    """Release ``lease`` and claim again: the next delivery, ``lease`` now stale."""
    store.transact(lambda tx: tx.outbox.release(lease))
    return claim(store)


def under(store: Store, lease: Lease, fn: Callable[[FencedUnit], T]) -> T:
    """Run ``fn`` on a fenced unit under ``lease`` (renewed as the fence)."""
    return store.fenced(lease, fn, name="contract.fenced", lease_seconds=60)[0]


def refused_by_the_write(store: Store, lease: Lease, write: Callable[[FencedUnit], object]) -> None:
    """``write`` under the stale ``lease`` raises ``LeaseLost`` itself: its own lease condition refuses it,
    before the fence that ends the unit would."""
    raised: list[LeaseLost] = []

    def fn(tx: FencedUnit) -> None:
        try:
            write(tx)
        except LeaseLost as error:
            raised.append(error)
            raise

    with pytest.raises(LeaseLost):
        under(store, lease, fn)
    assert raised, "the write touched nothing yet returned: only the fence after it refused the stale lease"


def read_attempt(store: Store, attempt_id: str) -> AttemptRecord:
    """The Attempt ``attempt_id``; fails the test when it does not exist."""
    record = store.read(lambda tx: tx.rehearsal.get_attempt(attempt_id))
    assert record is not None, f"no attempt {attempt_id}"
    return record


def evidence(position: int) -> tuple[str, str]:
    """Canonical evidence text of Receipt ``position`` and its fingerprint."""
    value: dict[str, Any] = {"position": position, "rows": [1, 2], "ok": True}
    return canonical_json(value), fingerprint("receipt-evidence/v1", value)


def count(backend: ContractHarness, store: Store, table: str) -> int:
    """Rows in ``table``, read below the ports."""
    return int(store.read(lambda tx: backend.inspect(tx, f"SELECT count(*) FROM {table}"))[0][0])


class RehearsalContract(StoreContract):
    """Every ``RehearsalPort`` and ``FencedRehearsalPort`` operation on one backend (subclass as ``TestRehearsal``)."""

    @pytest.fixture
    def enqueued(self, store: Store) -> Store:
        """A store holding Run ``run1`` and its PENDING Attempt ``att1`` with six PENDING Receipts."""

        def fn(tx: UnitOfWork) -> None:
            add_run(tx)
            add_attempt(tx)

        store.transact(fn)
        return store

    # ── runs ──

    def test_insert_run_freezes_manifest_and_file_bytes(self, store: Store) -> None:
        store.transact(add_run)
        run = store.read(lambda tx: tx.rehearsal.get_run("run1"))
        assert run is not None
        assert (run.package_name, run.package_version, run.previous_version) == ("inventory", "1.2.0", "1.1.0")
        assert run.content_digest == DIGEST and run.status is RunStatus.READY
        assert run.manifest == {"name": "inventory", "steps": [1, 2]}
        files = store.read(lambda tx: tx.rehearsal.run_files("run1"))
        assert [(f.path, f.content, f.size) for f in files] == [("a.sql", b"A", 1), ("b.sql", b"\x00\xffB", 3)]
        assert all(isinstance(f.content, bytes) and f.sha256 == sha256_bytes(f.content) for f in files)
        assert store.read(lambda tx: tx.rehearsal.get_run("nope")) is None

    def test_list_runs_newest_first_and_retire(self, store: Store, backend: ContractHarness) -> None:
        store.transact(lambda tx: add_run(tx, "old", files=[]))
        backend.advance(0.01)
        store.transact(lambda tx: add_run(tx, "new", files=[]))
        assert [r.id for r in store.read(lambda tx: tx.rehearsal.list_runs())] == ["new", "old"]
        assert [r.id for r in store.read(lambda tx: tx.rehearsal.list_runs(limit=1))] == ["new"]
        assert store.transact(lambda tx: tx.rehearsal.retire_run("old")) is True
        assert store.transact(lambda tx: tx.rehearsal.retire_run("old")) is False
        old = store.read(lambda tx: tx.rehearsal.get_run("old"))
        assert old is not None and old.status is RunStatus.RETIRED

    @pytest.mark.parametrize("bad", ["size", "digest", "duplicate-path", "duplicate-run"])
    def test_an_invalid_run_is_a_conflict_and_leaves_nothing(self, store: Store, backend: ContractHarness,
                                                              bad: str) -> None:
        def fn(tx: UnitOfWork) -> None:
            if bad == "size":
                add_run(tx, files=[RunFile("a.sql", sha256_bytes(b"A"), 2, b"A")])
            elif bad == "digest":
                tx.rehearsal.insert_run(run_id="run1", package_name="p", package_version="1", previous_version=None,
                                        content_digest="sha256:xyz", manifest={}, files=[])
            elif bad == "duplicate-path":
                add_run(tx, files=[run_file("a.sql", b"A"), run_file("a.sql", b"A")])
            else:
                add_run(tx)
                add_run(tx)

        with pytest.raises(Conflict):
            store.transact(fn)
        assert count(backend, store, "rehearsal_runs") == 0 and count(backend, store, "rehearsal_run_files") == 0

    # ── attempts and receipts ──

    def test_insert_attempt_with_six_receipts(self, enqueued: Store) -> None:
        attempt = read_attempt(enqueued, "att1")
        assert attempt is not None
        assert (attempt.run_id, attempt.seq, attempt.command_id) == ("run1", 1, "cmd-att1")
        assert attempt.status is AttemptStatus.PENDING and attempt.delivery == 0
        assert attempt.command_status is CommandStatus.PENDING and attempt.delivery_count == 0
        assert attempt.started_at is None and attempt.finished_at is None and attempt.lease_owner is None
        receipts = enqueued.read(lambda tx: tx.rehearsal.attempt_receipts("att1"))
        assert [(r.position, r.scenario, r.status) for r in receipts] == [
            (i, name, ReceiptStatus.PENDING) for i, name in enumerate(SCENARIOS, start=1)]
        assert all(r.evidence is None and r.delivery is None for r in receipts)
        assert enqueued.read(lambda tx: tx.rehearsal.get_attempt("nope")) is None
        assert enqueued.read(lambda tx: tx.rehearsal.next_attempt_seq("run1")) == 2
        assert enqueued.read(lambda tx: tx.rehearsal.next_attempt_seq("unknown-run")) == 1

    def test_list_attempts_in_seq_order(self, enqueued: Store) -> None:
        enqueued.transact(lambda tx: add_attempt(tx, "att2"))
        attempts = enqueued.read(lambda tx: tx.rehearsal.list_attempts("run1"))
        assert [(a.id, a.seq) for a in attempts] == [("att1", 1), ("att2", 2)]
        assert enqueued.read(lambda tx: tx.rehearsal.list_attempts("nope")) == []

    def test_lock_attempt(self, enqueued: Store) -> None:
        row = enqueued.transact(lambda tx: tx.rehearsal.lock_attempt("att1"))
        assert row == AttemptLock(id="att1", status=AttemptStatus.PENDING, command_id="cmd-att1")
        assert enqueued.transact(lambda tx: tx.rehearsal.lock_attempt("nope")) is None

    @pytest.mark.parametrize("bad", ["seventh-position", "position-zero", "huge-position", "duplicate-scenario",
                                     "duplicate-seq", "unknown-run", "unknown-command", "command-reused"])
    def test_an_invalid_attempt_is_a_conflict_and_rolls_back_the_whole_transaction(
            self, enqueued: Store, backend: ContractHarness, bad: str) -> None:
        before = {t: count(backend, enqueued, t) for t in ("commands", "rehearsal_attempts", "rehearsal_receipts")}

        def fn(tx: UnitOfWork) -> None:
            tx.outbox.insert(command_id="extra", kind="k", payload={})  # must vanish with the rollback
            receipts = [(f"x-r{i}", i, name) for i, name in enumerate(SCENARIOS, start=1)]
            if bad == "seventh-position":
                add_attempt(tx, "att2", receipts=[*receipts, ("x-r7", 7, "extra")])
            elif bad == "position-zero":
                add_attempt(tx, "att2", receipts=[("x-r0", 0, "zero")])
            elif bad == "huge-position":  # a CHECK on SQLite, out of the column's range on PostgreSQL
                add_attempt(tx, "att2", receipts=[("x-r0", 2**40, "huge")])
            elif bad == "duplicate-scenario":
                add_attempt(tx, "att2", receipts=[("x-r1", 1, "same"), ("x-r2", 2, "same")])
            elif bad == "duplicate-seq":
                add_attempt(tx, "att2", seq=1)
            elif bad == "unknown-run":
                add_attempt(tx, "att2", run_id="nope")
            elif bad == "unknown-command":
                tx.rehearsal.insert_attempt(attempt_id="att2", run_id="run1", seq=2, command_id="nope", receipts=[])
            else:
                tx.rehearsal.insert_attempt(attempt_id="att2", run_id="run1", seq=2, command_id="cmd-att1", receipts=[])

        with pytest.raises(Conflict):
            enqueued.transact(fn)
        assert {t: count(backend, enqueued, t) for t in before} == before
        assert enqueued.read(lambda tx: tx.outbox.get("extra")) is None

    def test_start_attempt_then_receipts_then_success(self, enqueued: Store) -> None:
        first = claim(enqueued)
        assert under(enqueued, first, lambda tx: tx.rehearsal.start_attempt("att1")) == "run1"
        attempt = read_attempt(enqueued, "att1")
        assert attempt.status is AttemptStatus.RUNNING and attempt.delivery == 1 and attempt.started_at is not None
        for position in range(1, 7):
            text, fp = evidence(position)

            def step(tx: FencedUnit, p: int = position, t: str = text, f: str = fp) -> bool:
                return tx.rehearsal.receipt_running("att1", p) and tx.rehearsal.receipt_finish(
                    "att1", p, ReceiptStatus.SUCCEEDED, t, f)

            assert under(enqueued, first, step) is True
        receipts = enqueued.read(lambda tx: tx.rehearsal.attempt_receipts("att1"))
        assert all(r.status is ReceiptStatus.SUCCEEDED and r.delivery == 1 for r in receipts)
        # Evidence is kept as the exact canonical text it was fingerprinted over.
        assert [(r.evidence, r.evidence_fingerprint) for r in receipts] == [evidence(p) for p in range(1, 7)]
        assert all(r.started_at is not None and r.finished_at is not None for r in receipts)
        assert under(enqueued, first, lambda tx: tx.rehearsal.finish_attempt("att1", AttemptStatus.SUCCEEDED)) is True
        attempt = read_attempt(enqueued, "att1")
        assert attempt.status is AttemptStatus.SUCCEEDED and attempt.finished_at is not None
        # Terminal Attempts are immutable, even under a newer delivery's lease.
        second = redeliver(enqueued, first)
        assert under(enqueued, second, lambda tx: tx.rehearsal.start_attempt("att1")) is None
        assert under(enqueued, second, lambda tx: tx.rehearsal.finish_attempt("att1", AttemptStatus.FAILED)) is False
        assert enqueued.transact(lambda tx: tx.rehearsal.abort_attempt("att1", "late")) is None
        assert enqueued.read(lambda tx: tx.rehearsal.attempt_receipts("att1")) == receipts

    def test_receipt_transitions_are_conditional(self, enqueued: Store) -> None:
        first = claim(enqueued)
        under(enqueued, first, lambda tx: tx.rehearsal.start_attempt("att1"))
        text, fp = evidence(1)
        assert under(enqueued, first, lambda tx: tx.rehearsal.receipt_finish(
            "att1", 1, ReceiptStatus.SUCCEEDED, text, fp)) is False
        assert under(enqueued, first, lambda tx: tx.rehearsal.receipt_running("att1", 1)) is True
        assert under(enqueued, first, lambda tx: tx.rehearsal.receipt_running("att1", 1)) is False
        assert under(enqueued, first, lambda tx: tx.rehearsal.receipt_finish(
            "att1", 1, ReceiptStatus.FAILED, text, fp)) is True
        assert under(enqueued, first, lambda tx: tx.rehearsal.receipt_running("att1", 9)) is False

    def test_a_receipt_of_another_delivery_does_not_match(self, enqueued: Store) -> None:
        first = claim(enqueued)
        under(enqueued, first,
              lambda tx: tx.rehearsal.start_attempt("att1") and tx.rehearsal.receipt_running("att1", 1))
        second = redeliver(enqueued, first)
        text, fp = evidence(1)
        # Receipt 1 is RUNNING under delivery 1; delivery 2's lease is current but its number differs.
        assert under(enqueued, second, lambda tx: tx.rehearsal.receipt_finish(
            "att1", 1, ReceiptStatus.SUCCEEDED, text, fp)) is False

    @pytest.mark.parametrize("bad", ["not-json", "bad-fingerprint"])
    def test_invalid_evidence_is_a_conflict(self, enqueued: Store, bad: str) -> None:
        first = claim(enqueued)
        under(enqueued, first, lambda tx: tx.rehearsal.start_attempt("att1"))
        under(enqueued, first, lambda tx: tx.rehearsal.receipt_running("att1", 1))
        text, fp = evidence(1)
        if bad == "not-json":
            text = "{not json"
        else:
            fp = "md5:abc"
        with pytest.raises(Conflict):
            under(enqueued, first, lambda tx: tx.rehearsal.receipt_finish("att1", 1, ReceiptStatus.SUCCEEDED, text, fp))
        assert enqueued.read(lambda tx: tx.rehearsal.attempt_receipts("att1"))[0].status is ReceiptStatus.RUNNING

    def test_restart_resets_provisional_receipts(self, enqueued: Store) -> None:
        first = claim(enqueued)
        under(enqueued, first, lambda tx: tx.rehearsal.start_attempt("att1"))
        text, fp = evidence(1)
        under(enqueued, first, lambda tx: tx.rehearsal.receipt_running("att1", 1))
        under(enqueued, first, lambda tx: tx.rehearsal.receipt_finish("att1", 1, ReceiptStatus.SUCCEEDED, text, fp))
        under(enqueued, first, lambda tx: tx.rehearsal.receipt_running("att1", 2))
        second = redeliver(enqueued, first)
        assert under(enqueued, second, lambda tx: tx.rehearsal.start_attempt("att1")) == "run1"
        attempt = read_attempt(enqueued, "att1")
        assert attempt.status is AttemptStatus.RUNNING and attempt.delivery == 2
        receipts = enqueued.read(lambda tx: tx.rehearsal.attempt_receipts("att1"))
        assert all(r.status is ReceiptStatus.PENDING and r.evidence is None and r.evidence_fingerprint is None
                   and r.delivery is None and r.started_at is None and r.finished_at is None for r in receipts)
        assert under(enqueued, second, lambda tx: tx.rehearsal.receipt_running("att1", 1)) is True
        # The stale delivery's writes touch nothing: its lease condition fails (and so would its fence).
        before = enqueued.read(lambda tx: tx.rehearsal.attempt_receipts("att1"))
        refused_by_the_write(enqueued, first, lambda tx: tx.rehearsal.receipt_finish(
            "att1", 1, ReceiptStatus.SUCCEEDED, text, fp))
        refused_by_the_write(enqueued, first, lambda tx: tx.rehearsal.receipt_running("att1", 2))
        assert enqueued.read(lambda tx: tx.rehearsal.attempt_receipts("att1")) == before

    def test_scenario_failure_fails_its_receipt_and_aborts_the_rest(self, enqueued: Store) -> None:
        first = claim(enqueued)
        under(enqueued, first, lambda tx: tx.rehearsal.start_attempt("att1"))
        text, fp = evidence(1)

        def fail(tx: FencedUnit) -> int:
            tx.rehearsal.receipt_running("att1", 1)
            tx.rehearsal.receipt_finish("att1", 1, ReceiptStatus.FAILED, text, fp)
            aborted = tx.rehearsal.abort_open_receipts("att1")
            tx.rehearsal.finish_attempt("att1", AttemptStatus.FAILED, error="scenario install failed")
            return aborted

        assert under(enqueued, first, fail) == 5
        receipts = enqueued.read(lambda tx: tx.rehearsal.attempt_receipts("att1"))
        assert [r.status for r in receipts] == [ReceiptStatus.FAILED] + [ReceiptStatus.ABORTED] * 5
        assert all(r.finished_at is not None for r in receipts)
        attempt = read_attempt(enqueued, "att1")
        assert attempt.status is AttemptStatus.FAILED and attempt.error == "scenario install failed"

    def test_delivery_writes_exist_only_on_a_fenced_unit(self, enqueued: Store) -> None:
        def reach(write: str) -> Callable[[UnitOfWork], object]:
            return lambda tx: getattr(tx.rehearsal, write)

        for write in ("start_attempt", "receipt_running", "receipt_finish", "finish_attempt"):
            with pytest.raises(AttributeError):
                enqueued.read(reach(write))

    def test_abort_attempt(self, enqueued: Store) -> None:
        def abort(tx: UnitOfWork) -> str | None:
            assert tx.rehearsal.lock_attempt("att1") is not None
            command_id = tx.rehearsal.abort_attempt("att1", "operator abort")
            tx.rehearsal.abort_open_receipts("att1")
            if command_id:
                tx.outbox.abort(command_id, error="operator abort")
            return command_id

        assert enqueued.transact(abort) == "cmd-att1"
        attempt = read_attempt(enqueued, "att1")
        assert attempt.status is AttemptStatus.ABORTED and attempt.error == "operator abort"
        assert attempt.finished_at is not None and attempt.command_status is CommandStatus.ABORTED
        receipts = enqueued.read(lambda tx: tx.rehearsal.attempt_receipts("att1"))
        assert {r.status for r in receipts} == {ReceiptStatus.ABORTED}
        assert enqueued.transact(lambda tx: tx.rehearsal.abort_attempt("att1", "again")) is None
        assert enqueued.transact(lambda tx: tx.rehearsal.abort_attempt("nope", "x")) is None

    def test_attempt_view_shows_the_claim_without_its_token(self, enqueued: Store, backend: ContractHarness) -> None:
        claimed = enqueued.transact(lambda tx: tx.outbox.claim(owner="w1", kinds=["rehearsal"], limit=1,
                                                               lease_seconds=backend.long_lease))
        attempt = read_attempt(enqueued, "att1")
        assert attempt.command_status is CommandStatus.PROCESSING and attempt.lease_owner == "w1"
        assert attempt.lease_until == claimed[0].lease.until and attempt.delivery_count == 1
        assert claimed[0].lease.token not in repr(attempt)
