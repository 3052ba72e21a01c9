"""Submitting deliveries and reading them back: what ``fencepost package install --target`` and
``fencepost package deliveries`` call (ADRs 0055-0058)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fencepost.catalog.lifecycle import not_allowed
from fencepost.core.errors import InvalidInput, NotFound
from fencepost.core.statuses import Disposition, InvocationStatus
from fencepost.delivery.action import ACTION_ID, DELIVER, TargetAdapter
from fencepost.delivery.lock import PublishedLock, published_lock
from fencepost.delivery.targets import matches, target_json
from fencepost.host import Dispatch, Host, HostConfig, InvocationView
from fencepost.store.base import Store
from fencepost.store.delivery_records import TargetRecord
from fencepost.store.ports import UnitOfWork


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
    redeliver command returns the same invocation). ``redeliver`` starts a new link after a ``failed`` newest."""
    key = idempotency_key(package, version, target)
    while True:
        found = tx.host.find_invocation(tenant_id="default", space_id="default", action_id=ACTION_ID,
                                        idempotency_key=key)
        if found is None or found.status is not InvocationStatus.FAILED:
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

    def submit(self, package: str, *, target: str | None = None, selector: Mapping[str, str] | None = None,
               actor: str = "cli", redeliver: bool = False) -> Submitted:
        """Submit one dispatched ``fencepost.deliver`` invocation per target for the installed version.

        Args:
            target: one target by name; or ``selector``: every live target carrying those labels.
            redeliver: deliver again to a target whose newest delivery of this version ``failed`` (after the
                target was fixed): a new invocation under the next key of the chain (``_current_key``).
        Returns:
            the invocations (existing ones for a repeated command: same key, same params).
        Raises:
            InvalidInput: neither or both of target and selector. NotFound: not installed, no such target, no
                target matches. NotAllowed: a guard is false now (checked again, authoritatively, at each
                delivery's start barrier): ``installation_active``, ``lifecycle_disposition``, ``quarantine``,
                ``rehearsal_evidence``.
        """
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
        existing = self.store.read(lambda tx: sum(1 for key in keys if tx.host.find_invocation(
            tenant_id="default", space_id="default", action_id=ACTION_ID, idempotency_key=key) is not None))
        views = [(t, self.host.submit(ACTION_ID, _params(lock, t), actor=actor, mode=Dispatch(), idempotency_key=key))
                 for t, key in zip(chosen, keys, strict=True)]
        return Submitted(lock, views, existing)

    def choose_targets(self, *, target: str | None = None,
                       selector: Mapping[str, str] | None = None) -> list[TargetRecord]:
        """The live targets a ``--target`` / ``--targets`` option names, read before anything is changed, so a
        typo is refused before ``package install`` moves the installation (``submit`` checks them again).

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

        Raises:
            NotFound: ``package`` was never published.
        """
        if not self.store.read(lambda tx: tx.catalog.list_publications(package)):
            raise NotFound(f"{package} has never been published")
        records = self.host.list(limit=10000)
        mine = [v for v in records if v.action_id == ACTION_ID and v.params.get("package") == package]
        # A redelivery's key names the failed invocation it follows: that one is never the newest.
        followed = {v.idempotency_key.rsplit(":after:", 1)[1] for v in mine if ":after:" in v.idempotency_key}
        newest: dict[str, InvocationView] = {}
        for view in sorted((v for v in mine if v.id not in followed), key=lambda v: (v.created_at, v.id)):
            newest[v_target(view)] = view
        newest = {key: self.host.get(view.id) for key, view in newest.items()}  # with their steps
        queue = {e.invocation["id"]: e.as_json() for e in self.host.reconciliation_queue(limit=1000)}
        targets = {t.id: t for t in self.store.read(lambda tx: [tx.delivery.get_target(i) for i in {
            str(v.params.get("target_id")) for v in newest.values()}]) if t is not None}
        in_name_order = sorted(newest.values(), key=lambda v: (str(v.params.get("target")), v_target(v)))
        return [delivery_json(view, targets.get(str(view.params.get("target_id"))), queue.get(view.id))
                for view in in_name_order]


def _choose(tx: UnitOfWork, target: str | None, selector: Mapping[str, str] | None) -> list[TargetRecord]:
    if (target is None) == (selector is None):
        raise InvalidInput("give one target (--target NAME) or a label selector (--targets key=value)")
    if target is not None:
        found = tx.delivery.get_live_target(target)
        if found is None:
            raise NotFound(f"no target {target}")
        return [found]
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
