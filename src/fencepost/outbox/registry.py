"""A worker's own row in the worker registry, and what readers make of the registry (ADR 0019).

A worker registers when it starts, renews its row from its heartbeat thread and deletes it when it stops:

    registration = WorkerRegistration(store, config.worker_id, registry.kinds, concurrency=1,
                                      heartbeat_seconds=heartbeat.interval)
    registration.start()              # when run() starts
    registration.beat(in_flight=n)    # every heartbeat tick, n = commands held now
    registration.stop()               # in run()'s finally

Each call is its own short named transaction and never raises: the registry is advisory (it tells operators
who runs; leases decide who owns a command), so a store that fails a registry write is logged and the next
beat tries again, writing the row anew if it is gone.

Liveness (``fencepost.store.records.LIVENESS_INTERVALS``): a registration is live while its
``last_seen_at`` is less than three of its heartbeat intervals old by the store's clock; the heartbeat runs
every third of the lease, so that is one lease duration. Older rows are "expired": their worker stopped
renewing (killed, hung, cut off from the store). Readers list them apart; each ``start`` deletes those
older than ``retain_expired_seconds``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fencepost import __version__
from fencepost.core.errors import FencepostError, InvalidInput
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.store.records import LIVENESS_INTERVALS, PendingKind, WorkerRecord

log = logging.getLogger("fencepost.registry")

#: Transaction names (crash points ``<name>:before-commit`` / ``<name>:after-commit``).
REGISTER = "workers.register"
BEAT = "workers.beat"
DEREGISTER = "workers.deregister"

#: The longest heartbeat interval (seconds): a third of the longest lease a worker accepts (3600 s).
MAX_HEARTBEAT_SECONDS = 1200.0
#: Expired registrations are kept this long (seconds) for operators, then deleted by the next ``start``.
DEFAULT_RETAIN_EXPIRED_SECONDS = 24 * 3600.0
#: The shortest retention (seconds): the longest live window, so that ``start`` never deletes a live row.
MIN_RETAIN_EXPIRED_SECONDS = LIVENESS_INTERVALS * MAX_HEARTBEAT_SECONDS


class WorkerIdInUse(InvalidInput):
    """Another live process is registered under this worker id (a shared ``--worker-id`` or
    ``FENCEPOST_WORKER_ID``): two workers under one id would show as one that flips between them, and the one that
    stops would remove the other's registration (a new-user trial)."""


def _alive_here(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (a signal 0 reaches it, or it exists under another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkerRegistration:
    """One worker process's row in the registry (ADR 0019).

    Args:
        store: the control store.
        worker_id: the worker id (its lease owner name), 1..200 chars.
        kinds: the command kinds it claims.
        heartbeat_seconds: its heartbeat interval (seconds, > 0 and <= 1200): a third of its lease.
        concurrency: its execution slots (>= 1).
        host: its host name (default ``socket.gethostname()``).
        pid: its process id (default ``os.getpid()``).
        retain_expired_seconds: ``start`` deletes registrations not seen for longer than this (seconds,
            >= ``MIN_RETAIN_EXPIRED_SECONDS``; default one day).
    Raises:
        InvalidInput: an argument out of range (at construction, before any write).

    Thread-safe: ``beat`` runs on the heartbeat thread, ``start`` and ``stop`` on the worker's. After ``stop``
    every call is a no-op, so a beat that races the stop cannot bring the row back.
    """

    def __init__(self, store: Store, worker_id: str, kinds: Sequence[str], *, heartbeat_seconds: float,
                 concurrency: int = 1, host: str | None = None, pid: int | None = None,
                 retain_expired_seconds: float = DEFAULT_RETAIN_EXPIRED_SECONDS) -> None:
        self.store = store
        self.worker_id = worker_id
        self.kinds = sorted(set(kinds))
        self.heartbeat_seconds = float(heartbeat_seconds)
        self.concurrency = concurrency
        self.host = (host if host is not None else socket.gethostname())[:255] or "unknown"
        self.pid = pid if pid is not None else os.getpid()
        self.retain_expired_seconds = float(retain_expired_seconds)
        if not 1 <= len(worker_id) <= 200:
            raise InvalidInput("worker id must be 1 to 200 characters")
        if not 0 < self.heartbeat_seconds <= MAX_HEARTBEAT_SECONDS:
            raise InvalidInput(f"heartbeat interval must be above 0 and at most {MAX_HEARTBEAT_SECONDS:g} seconds")
        if concurrency < 1:
            raise InvalidInput("concurrency must be at least 1")
        if self.pid < 1:
            raise InvalidInput("pid must be at least 1")
        if self.retain_expired_seconds < MIN_RETAIN_EXPIRED_SECONDS:
            raise InvalidInput(f"expired registrations must be kept at least {MIN_RETAIN_EXPIRED_SECONDS:g} seconds")
        self._lock = threading.Lock()
        self._stopped = False
        #: The row as last written, or None before the first successful write and after ``stop``.
        self.record: WorkerRecord | None = None

    def _register(self, tx: UnitOfWork, in_flight: int) -> WorkerRecord:
        return tx.workers.register(worker_id=self.worker_id, host=self.host, pid=self.pid, kinds=self.kinds,
                                   concurrency=self.concurrency, heartbeat_seconds=self.heartbeat_seconds,
                                   version=__version__, in_flight=in_flight)

    def _holder(self, tx: UnitOfWork) -> WorkerRecord | None:
        """The live registration of another process under this worker id, or None. A row left by a process of
        this machine that no longer runs (a worker killed and restarted under its id) is not a holder."""
        now = tx.now()
        for other in tx.workers.list_workers():
            if other.id != self.worker_id or not other.is_live(now):
                continue
            if (other.host, other.pid) == (self.host, self.pid):
                return None
            if other.host == self.host and not _alive_here(other.pid):
                return None
            return other
        return None

    def start(self) -> bool:
        """Register (transaction ``workers.register``), and delete registrations expired for longer than
        ``retain_expired_seconds`` in the same transaction.

        Returns:
            True when the row was written; False when the store failed (logged; the next ``beat`` registers).
        Raises:
            WorkerIdInUse: another live process holds this worker id (nothing written): each worker needs its own.
        """
        def unit(tx: UnitOfWork) -> tuple[WorkerRecord, list[WorkerRecord]]:
            tx.workers.lock_id(self.worker_id)  # the check and the upsert as one step for concurrent starts
            holder = self._holder(tx)
            if holder is not None:
                left = max(0.0, (holder.live_until - tx.now()).total_seconds())
                raise WorkerIdInUse(
                    f"worker id {self.worker_id} is in use by a live worker on host {holder.host}, pid {holder.pid}: "
                    "give each worker its own --worker-id (or leave it unset; the default is host and pid). If that "
                    f"worker is gone, its registration expires within {left:.0f} s.")
            return self._register(tx, 0), tx.workers.expire(self.retain_expired_seconds)

        with self._lock:
            if self._stopped:
                return False
            try:
                record, removed = self.store.transact(unit, name=REGISTER)
            except WorkerIdInUse:
                raise
            except Exception as error:
                _failed("worker registration failed; the next heartbeat retries", "worker_register_failed",
                        self.worker_id, error)
                return False
            self.record = record
        for old in removed:
            log.info("expired worker registration removed",
                     extra={"event": "worker_registration_removed", "worker": self.worker_id, "removed": old.id,
                            "last_seen_at": old.last_seen_at.isoformat()})
        log.info("worker registered", extra={"event": "worker_registered", "worker": self.worker_id,
                                             "kinds": self.kinds, "concurrency": self.concurrency,
                                             "heartbeat_seconds": self.heartbeat_seconds})
        return True

    def beat(self, in_flight: int) -> bool:
        """Renew the row (transaction ``workers.beat``) with ``in_flight``, the commands held now (>= 0).

        A row that is gone (never written, or expired and deleted) is written anew in the same transaction.
        Unlike ``start`` and ``stop`` it makes one attempt, without ``Store.transact``'s busy retry, and it is
        skipped (False) while ``start`` or ``stop`` is writing.

        Returns:
            True when renewed; False when skipped, after ``stop``, or when the store failed (logged, never
            raised: the next beat tries again).
        """
        # The heartbeat thread also renews leases: it never waits for an advisory row. A beat while ``start`` or
        # ``stop`` writes is skipped, and a beat makes one attempt, without busy retries; the next beat retries.
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._stopped:
                return False
            with self.store.transaction(name=BEAT) as tx:
                renewed = tx.workers.beat(self.worker_id, in_flight=in_flight, host=self.host, pid=self.pid)
                reregistered = renewed is None
                holder = self._holder(tx) if renewed is None else None
                if holder is not None:  # another process took the id meanwhile: never overwrite its row
                    log.warning("another live worker uses this worker id; this worker's registration is not written",
                                extra={"event": "worker_id_in_use", "worker": self.worker_id,
                                       "other_host": holder.host, "other_pid": holder.pid})
                    return False
                record = renewed if renewed is not None else self._register(tx, in_flight)
            self.record = record
        except Exception as error:
            _failed("worker heartbeat failed; the next one retries", "worker_beat_failed", self.worker_id, error)
            return False
        finally:
            self._lock.release()
        if reregistered:
            log.warning("worker registration was gone; registered again",
                        extra={"event": "worker_reregistered", "worker": self.worker_id})
        return True

    def stop(self) -> bool:
        """Delete the row (transaction ``workers.deregister``); later calls of any method do nothing.

        Returns:
            True when the delete committed (also when there was no row); False when the store failed
            (logged; the row then expires by age).
        """
        with self._lock:
            if self._stopped:
                return False
            self._stopped = True
            self.record = None
            try:
                self.store.transact(lambda tx: tx.workers.deregister(self.worker_id, host=self.host, pid=self.pid),
                                    name=DEREGISTER)
            except Exception as error:
                _failed("worker deregistration failed; the registration expires by age", "worker_deregister_failed",
                        self.worker_id, error)
                return False
        log.info("worker deregistered", extra={"event": "worker_deregistered", "worker": self.worker_id})
        return True


def _failed(message: str, event: str, worker_id: str, error: Exception) -> None:
    """Log a failed registry write: a store error in one line, anything else with its traceback."""
    log.warning(message, exc_info=not isinstance(error, FencepostError),
                extra={"event": event, "worker": worker_id, "error": str(error) or type(error).__name__})


# ── reading the registry ──
@dataclass(frozen=True)
class WorkerCensus:
    """Every registration as read at one instant of the store's clock.

    Attributes:
        now: the store's clock when it was read (``UnitOfWork.now``).
        workers: every registration, oldest first.
    """

    now: datetime
    workers: tuple[WorkerRecord, ...]

    @property
    def live(self) -> list[WorkerRecord]:
        """Registrations live at ``now`` (``WorkerRecord.is_live``)."""
        return [w for w in self.workers if w.is_live(self.now)]

    @property
    def expired(self) -> list[WorkerRecord]:
        """Registrations that stopped renewing: listed until a ``start`` deletes them by age."""
        return [w for w in self.workers if not w.is_live(self.now)]

    def serving(self, kind: str) -> list[WorkerRecord]:
        """The live registrations that claim ``kind``."""
        return [w for w in self.live if w.serves(kind)]


def read_census(store: Store) -> WorkerCensus:
    """The registry and the store's clock, read in one snapshot."""
    return store.read(lambda tx: WorkerCensus(tx.now(), tuple(tx.workers.list_workers())))


@dataclass(frozen=True)
class KindBacklog:
    """The PENDING commands of one kind against the live workers that claim it (issue 10 item 6).

    Attributes:
        kind: the command kind. pending: how many are PENDING. oldest_seconds: the oldest one's age (seconds,
        store clock). live_workers_serving: live registrations that claim ``kind``; 0 means nothing will run
        them until a worker of that kind starts.
    """

    kind: str
    pending: int
    oldest_seconds: float
    live_workers_serving: int

    def as_json(self) -> dict[str, Any]:
        """``{"kind", "pending", "oldest_seconds", "live_workers_serving"}``."""
        return {"kind": self.kind, "pending": self.pending, "oldest_seconds": round(self.oldest_seconds, 3),
                "live_workers_serving": self.live_workers_serving}


@dataclass(frozen=True)
class Backlog:
    """The registry and the PENDING backlog, read in one snapshot.

    Attributes:
        census: the registry. kinds: at most the read's ``limit`` kinds, oldest first. kinds_total and
        pending_total: how many kinds have PENDING commands, and how many commands, the kinds past the limit
        included (so a display can say what it left out).
    """

    census: WorkerCensus
    kinds: tuple[KindBacklog, ...]
    kinds_total: int
    pending_total: int

    @property
    def omitted(self) -> int:
        """Kinds with PENDING commands that ``kinds`` leaves out."""
        return self.kinds_total - len(self.kinds)

    def as_json(self) -> dict[str, Any]:
        """``{"kinds": [KindBacklog.as_json ...], "kinds_total", "pending_total"}``."""
        return {"kinds": [k.as_json() for k in self.kinds], "kinds_total": self.kinds_total,
                "pending_total": self.pending_total}


def read_backlog(store: Store, *, prefix: str = "", limit: int = 100) -> Backlog:
    """The registry and the PENDING backlog of the kinds starting with ``prefix`` (at most ``limit`` kinds,
    oldest first, with the totals over all of them), read in one snapshot so that a command claimed in between is
    not counted against a worker that already took it."""

    def read(tx: UnitOfWork) -> tuple[WorkerCensus, list[PendingKind]]:
        return (WorkerCensus(tx.now(), tuple(tx.workers.list_workers())),
                tx.outbox.pending_by_kind(prefix=prefix, limit=limit))

    census, pending = store.read(read)
    kinds = tuple(KindBacklog(p.kind, p.pending, max(0.0, (census.now - p.oldest_created_at).total_seconds()),
                              len(census.serving(p.kind))) for p in pending)
    return Backlog(census, kinds, pending[0].kinds_total if pending else 0,
                   pending[0].pending_total if pending else 0)


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def worker_view(worker: WorkerRecord, now: datetime) -> dict[str, Any]:
    """Plain JSON of one registration at ``now`` (store clock); ``last_seen_seconds`` is its age in seconds."""
    return {"id": worker.id, "host": worker.host, "pid": worker.pid, "kinds": list(worker.kinds),
            "concurrency": worker.concurrency, "in_flight": worker.in_flight,
            "heartbeat_seconds": worker.heartbeat_seconds, "version": worker.version,
            "started_at": _iso(worker.started_at), "last_seen_at": _iso(worker.last_seen_at),
            "last_seen_seconds": round(max(0.0, (now - worker.last_seen_at).total_seconds()), 3),
            "live_until": _iso(worker.live_until), "live": worker.is_live(now)}


def census_view(census: WorkerCensus) -> dict[str, Any]:
    """``{"now", "live": [...], "expired": [...]}``: what ``fencepost workers --json`` and ``GET /workers`` show."""
    return {"now": _iso(census.now), "live": [worker_view(w, census.now) for w in census.live],
            "expired": [worker_view(w, census.now) for w in census.expired]}
