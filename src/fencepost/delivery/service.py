"""Submitting deliveries and reading them back: what ``fencepost package install --target`` and
``fencepost package deliveries`` call (ADRs 0055-0058)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fencepost.catalog.lifecycle import not_allowed
from fencepost.core.errors import InvalidInput, NotFound
from fencepost.core.statuses import AdapterStatus, Disposition, InvocationStatus
from fencepost.delivery.action import ACTION_ID, DELIVER, TargetAdapter
from fencepost.delivery.lock import PublishedLock, published_lock
from fencepost.delivery.targets import matches, target_json
from fencepost.host import Dispatch, Host, HostConfig, InvocationView
from fencepost.store.base import Store
from fencepost.store.delivery_records import TargetRecord
from fencepost.store.ports import UnitOfWork
from fencepost.store.workflow_records import PublicationRecord


def delivery_host(store: Store, config: HostConfig | None = None) -> Host:
    """The built-in host of ``fencepost.deliver``: the action and its target adapter, over ``store``."""
    return Host(store, actions=[DELIVER], adapters=[TargetAdapter(store)], config=config)


def idempotency_key(package: str, version: str, target: TargetRecord) -> str:
    """``deliver:<package>:<version>:<target id>``: a repeated command finds the same invocation."""
    return f"deliver:{package}:{version}:{target.id}"


def _current_key(tx: UnitOfWork, package: str, version: str, target: TargetRecord,
                 redeliver: bool) -> str:
    """The key of the delivery a command means: the first key, or, after a ``failed`` one that was delivered
    again, ``<key>:after:<failed invocation id>`` (a chain; each link is fixed by the one before, so repeating a
    redeliver command returns the same invocation). ``redeliver`` starts a new link after a ``failed`` newest,
    or after one an operator resolved: a delivery resolved ``succeeded`` stopped at the migration it was about,
    and only a new one runs the steps after it (the resolved ``started`` row then counts as applied, ADR 0103;
    a break-it trial found no way to finish such a delivery)."""
    key = idempotency_key(package, version, target)
    while True:
        found = tx.host.find_invocation(tenant_id="default", space_id="default", action_id=ACTION_ID,
                                        idempotency_key=key)
        if found is None:
            return key
        resolved = found.status is InvocationStatus.SUCCEEDED and tx.host.get_resolution(found.id) is not None
        if found.status is not InvocationStatus.FAILED and not resolved:
            return key
        following = f"{idempotency_key(package, version, target)}:after:{found.id}"
        if not redeliver and tx.host.find_invocation(tenant_id="default", space_id="default", action_id=ACTION_ID,
                                                     idempotency_key=following) is None:
            return key
        key = following


def _params(lock: PublishedLock, target: TargetRecord) -> dict[str, Any]:
    pub = lock.publication
    return {"package": pub.package_name, "version": pub.version, "publication_id": pub.id,
            "content_digest": pub.content_digest, "target": target.name, "target_id": target.id,
            "target_url": target.url, "migrations": [m.as_json() for m in lock.migrations],
            "previous_through": lock.previous_through,
            "rehearsal": {"run_id": lock.run_id, **lock.rehearsal}}


#: Submissions in flight at once by default (each is one control-store transaction).
SUBMIT_CONCURRENCY = 8


@dataclass(frozen=True)
class Progress:
    """Where one delivery is now (``DeliveryService.progress``).

    Attributes:
        status: the invocation's status. steps_total: ``check``, one per migration, ``verify``.
        steps_done: steps that succeeded. step: the step being run (None before the first and after the last),
            with its ``attempts`` so far (more than 1: the target was busy and the step is being retried).
    """

    status: InvocationStatus
    steps_total: int
    steps_done: int
    step: str | None
    attempts: int


@dataclass(frozen=True)
class Submitted:
    """The invocations of one ``install --target(s)``: one per target, in target name order."""

    lock: PublishedLock
    deliveries: list[tuple[TargetRecord, InvocationView]]
    #: How many of them existed before this command (a repeated command submits nothing new).
    existing: int = 0


class DeliveryService:
    """Deliveries of installed packages to targets.

    Args:
        store: the control store. host: the host that submits (default ``delivery_host(store)``).
    """

    def __init__(self, store: Store, host: Host | None = None) -> None:
        self.store = store
        self.host = host or delivery_host(store)

    def submit(self, package: str, *, target: str | Sequence[str] | None = None,
               selector: Mapping[str, str] | None = None,
               actor: str = "cli", redeliver: bool = False, concurrency: int = SUBMIT_CONCURRENCY,
               on_submitted: Callable[[TargetRecord, InvocationView], None] | None = None) -> Submitted:
        """Submit one dispatched ``fencepost.deliver`` invocation per target for the installed version.

        Args:
            target: one target by name, or several (each once, in name order); or ``selector``: every live
                target carrying those labels.
            redeliver: deliver again to a target whose newest delivery of this version ``failed`` (after the
                target was fixed), or was resolved by an operator: a new invocation under the next key of the
                chain (``_current_key``).
            concurrency: submissions in flight at once (1..64; each is one ``host.submit`` transaction).
            on_submitted: called (from a submitting thread) with each target and its invocation as it is
                submitted, for a progress display.
        Returns:
            the invocations (existing ones for a repeated command: same key, same params).
        Raises:
            InvalidInput: neither or both of target and selector. NotFound: not installed, no such target, no
                target matches. NotAllowed: a guard is false now (checked again, authoritatively, at each
                delivery's start barrier): ``installation_active``, ``lifecycle_disposition``, ``quarantine``,
                ``rehearsal_evidence``.
        """
        if not 1 <= concurrency <= 64:
            raise InvalidInput(f"submission concurrency is 1 to 64, not {concurrency}")

        def read(tx: UnitOfWork) -> tuple[PublishedLock, list[TargetRecord]]:
            installation = tx.catalog.get_installation(package)
            if installation is None:
                raise NotFound(f"{package} is not installed")
            disposition = tx.catalog.get_disposition(installation.id)
            if disposition is not None and disposition.disposition is not Disposition.ACTIVE:
                raise not_allowed("lifecycle_disposition", f"{package} is {disposition.disposition}")
            quarantine = tx.catalog.open_quarantine(installation.id, installation.lock_digest)
            if quarantine is not None:
                raise not_allowed("quarantine", f"{package} is quarantined: {quarantine.reason}")
            publication = tx.catalog.get_publication(installation.publication_id)
            assert publication is not None
            lock = published_lock(tx, package, publication.version)
            return lock, _choose(tx, target, selector)

        lock, chosen = self.store.read(read)
        version = lock.publication.version
        keys = self.store.read(lambda tx: [_current_key(tx, package, version, t, redeliver) for t in chosen])
        found = self.store.read(lambda tx: {key: f.id for key in keys if (f := tx.host.find_invocation(
            tenant_id="default", space_id="default", action_id=ACTION_ID, idempotency_key=key)) is not None})
        existing = len(found)

        def one(pair: tuple[TargetRecord, str]) -> tuple[TargetRecord, InvocationView]:
            chosen_target, key = pair
            # A delivery already submitted under its key is returned as it is: its params were fixed when it
            # was submitted, and params derived again now may differ (a later rehearsal Attempt of the same
            # content changes the evidence they carry), which the host would refuse as an idempotency conflict.
            view = (self.host.get(found[key]) if key in found else
                    self.host.submit(ACTION_ID, _params(lock, chosen_target), actor=actor, mode=Dispatch(),
                                     idempotency_key=key))
            if on_submitted is not None:
                on_submitted(chosen_target, view)
            return chosen_target, view

        pairs = list(zip(chosen, keys, strict=True))
        if concurrency == 1 or len(pairs) == 1:
            return Submitted(lock, [one(p) for p in pairs], existing)
        with ThreadPoolExecutor(max_workers=min(concurrency, len(pairs)), thread_name_prefix="deliver-submit") as pool:
            return Submitted(lock, list(pool.map(one, pairs)), existing)  # target name order

    def progress(self, invocation_ids: list[str]) -> dict[str, Progress]:
        """Where each delivery is, read in one control-store read (the ``--wait`` display polls this).

        Returns:
            invocation id -> ``Progress``; an id naming no invocation is left out.
        """

        def read(tx: UnitOfWork) -> dict[str, Progress]:
            found: dict[str, Progress] = {}
            for invocation_id in invocation_ids:
                record = tx.host.get_invocation(invocation_id)
                if record is None:
                    continue
                total = len(record.params.get("migrations") or []) + 2
                rows = [] if record.status is InvocationStatus.PENDING else tx.host.list_adapter_invocations(
                    invocation_id)
                done = sum(1 for r in rows if r.status is AdapterStatus.SUCCEEDED)
                current = next((r for r in rows if r.status is AdapterStatus.RUNNING), None)
                found[invocation_id] = Progress(record.status, total, done, current.step_name if current else None,
                                                current.attempts if current else 0)
            return found

        return self.store.read(read)

    def _newest(self, package: str | None = None) -> dict[tuple[str, str], InvocationView]:
        """The newest delivery invocation per (package, target id), of ``package`` only when given (steps
        omitted). A redelivery's key names the failed invocation it follows: that one is never the newest."""
        mine = [v for v in self.host.list(action_id=ACTION_ID, limit=10000)
                if package is None or v.params.get("package") == package]
        followed = {v.idempotency_key.rsplit(":after:", 1)[1] for v in mine if ":after:" in v.idempotency_key}
        newest: dict[tuple[str, str], InvocationView] = {}
        for view in sorted((v for v in mine if v.id not in followed), key=lambda v: (v.created_at, v.id)):
            newest[(str(view.params.get("package")), v_target(view))] = view
        return newest

    def choose_targets(self, *, target: str | Sequence[str] | None = None,
                       selector: Mapping[str, str] | None = None) -> list[TargetRecord]:
        """The live targets ``--target`` (one name, or several) or ``--targets`` names, read before anything is
        changed, so a typo is refused before ``package install`` moves the installation (``submit`` checks them
        again).

        Returns:
            the targets in name order.
        Raises:
            InvalidInput: neither or both of target and selector. NotFound: no such target, no target matches.
        """
        return self.store.read(lambda tx: _choose(tx, target, selector))

    def deliveries(self, package: str) -> list[dict[str, Any]]:
        """Per target (in target name order), the newest delivery of ``package``: version, verdict, steps with
        their ledger rows, the evidence comparison (with the rehearsal Run and Attempt it was held to) and, when
        ``reconciliation_required``, the reconciliation queue entry.

        Returns:
            ``delivery_json`` items by target name (the shape of ``GET /v1/packages/{name}/deliveries``).
        Raises:
            NotFound: ``package`` was never published.
        """
        if not self.store.read(lambda tx: tx.catalog.list_publications(package)):
            raise NotFound(f"{package} has never been published")
        newest = {target: self.host.get(view.id) for (_, target), view in self._newest(package).items()}
        queue = {e.invocation["id"]: e.as_json() for e in self.host.reconciliation_queue(limit=1000)}
        targets = {t.id: t for t in self.store.read(lambda tx: [tx.delivery.get_target(i) for i in {
            str(v.params.get("target_id")) for v in newest.values()}]) if t is not None}
        ordered = sorted(newest.values(), key=lambda v: (str(v.params.get("target")), v_target(v)))
        return [delivery_json(view, targets.get(str(view.params.get("target_id"))), queue.get(view.id))
                for view in ordered]

    def last_by_target(self) -> dict[str, list[dict[str, Any]]]:
        """Per target id, its newest delivery of each package, by package name: ``{"package", "version",
        "status", "invocation_id", "error", "updated_at"}`` (ISO 8601 UTC). The Targets page's last column."""
        found: dict[str, list[dict[str, Any]]] = {}
        for (package, target), view in sorted(self._newest().items()):
            found.setdefault(target, []).append({
                "package": package, "version": view.params.get("version"), "status": str(view.status),
                "invocation_id": view.id, "error": view.error, "updated_at": view.updated_at.isoformat()})
        return found

    def packages(self) -> list[dict[str, Any]]:
        """Every published package by name: ``{"name", "versions"`` (published, oldest first)``,
        "installed_version"`` (None when not installed)``, "targets"`` (how many targets it has a delivery
        to)``}``. The operator page's list that links each package's deliveries."""

        def read(tx: UnitOfWork) -> tuple[list[PublicationRecord], dict[str, str]]:
            publications = tx.catalog.all_publications()
            by_id = {p.id: p.version for p in publications}
            installed = {i.package_name: by_id.get(i.publication_id, "?") for i in tx.catalog.all_installations()}
            return publications, installed

        publications, installed = self.store.read(read)
        versions: dict[str, list[str]] = {}
        for pub in sorted(publications, key=lambda p: (p.package_name, p.published_at, p.id)):
            versions.setdefault(pub.package_name, []).append(pub.version)
        delivered: dict[str, int] = {}
        for package, _ in self._newest():
            delivered[package] = delivered.get(package, 0) + 1
        return [{"name": name, "versions": found, "installed_version": installed.get(name),
                 "targets": delivered.get(name, 0)} for name, found in sorted(versions.items())]


def _choose(tx: UnitOfWork, target: str | Sequence[str] | None,
            selector: Mapping[str, str] | None) -> list[TargetRecord]:
    """The live targets named by ``target`` (one name or several: each once, in name order) or carrying the
    labels of ``selector``.

    Raises:
        InvalidInput: neither or both given, or an empty list of names. NotFound: the first name with no live
            target, or no target carries the labels.
    """
    if (target is None) == (selector is None):
        raise InvalidInput("give target names (--target NAME, repeatable) or a label selector (--targets key=value)")
    if target is not None:
        # Several names are several targets: `--target a --target b` used to keep only the last (a trial).
        names = sorted({target} if isinstance(target, str) else set(target))
        if not names:
            raise InvalidInput("give at least one target name")
        chosen: list[TargetRecord] = []
        for name in names:
            found = tx.delivery.get_live_target(name)
            if found is None:
                raise NotFound(f"no target {name}")
            chosen.append(found)
        return chosen
    chosen = [t for t in tx.delivery.list_live_targets() if matches(t, selector or {})]
    if not chosen:
        shown = ",".join(f"{k}={v}" for k, v in (selector or {}).items())
        raise NotFound(f"no target carries the labels {shown}")
    return chosen


def v_target(view: InvocationView) -> str:
    """The target id a delivery invocation is for."""
    return str(view.params.get("target_id"))


def delivery_json(view: InvocationView, target: TargetRecord | None,
                  queue_entry: dict[str, Any] | None) -> dict[str, Any]:
    """One target's delivery for the operator view (CLI ``--json`` and ``GET /v1/packages/{name}/deliveries``)."""
    migrations = [str(m.get("id")) for m in view.params.get("migrations") or []]
    steps = []
    for step in view.steps:
        output = step.output or {}
        migration = None
        if step.name.startswith("migrate-") and step.name[8:].isdigit() and int(step.name[8:]) <= len(migrations):
            migration = migrations[int(step.name[8:]) - 1]
        steps.append({"step": step.name, "status": str(step.status), "attempts": step.attempts,
                      "adapter_invocation_id": step.adapter_invocation_id, "migration": migration,
                      "applied": output.get("applied"), "ledger": output.get("ledger") if migration else None,
                      "error": step.error})
    result = view.result if isinstance(view.result, dict) else {}
    verify = (result.get("steps") or {}).get("verify") if result else None
    evidence = None
    if isinstance(verify, dict):
        evidence = {k: verify.get(k) for k in ("comparison", "matches_rehearsal", "fingerprint", "rehearsal",
                                               "scenario", "start_state", "rehearsal_attempt_id")}
        rehearsal = view.params.get("rehearsal")
        evidence["rehearsal_run_id"] = rehearsal.get("run_id") if isinstance(rehearsal, dict) else None
    return {"target": view.params.get("target"), "target_id": view.params.get("target_id"),
            "target_removed": target is None or target.removed_at is not None,
            "target_info": target_json(target) if target is not None else None,
            "version": view.params.get("version"), "invocation_id": view.id, "status": str(view.status),
            "error": view.error, "steps": steps, "evidence": evidence,
            "reconciliation": queue_entry if view.status is InvocationStatus.RECONCILIATION_REQUIRED else None,
            "created_at": view.created_at.isoformat(), "updated_at": view.updated_at.isoformat()}
