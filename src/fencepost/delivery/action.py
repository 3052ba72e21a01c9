"""The built-in delivery action ``fencepost.deliver`` and its adapter, the target database (ADRs 0055-0058).

One invocation delivers one published version to one target. Its steps, planned from its params (one per
migration of the lock, so recovery matches rows by index and name):

1. the **handler** is the start barrier (ADR 0056): in the control-store transaction that records the delivery
   start it re-checks the publication head, the installation lock, the disposition, the quarantine and that
   the target is live, as workflow admission does. A run that finds its start row already there (a recovery)
   is past the barrier: a quarantine opened since does not stop it;
2. ``check``: the drift check against the target's ledger and schema (``fencepost.delivery.drift``); a
   difference fails the invocation with the difference named, before anything is applied;
3. ``migrate-NNN``: one step per migration, each one target transaction with its ledger row
   (``fencepost.delivery.target_db``); a migration the ledger has already is not applied again;
4. ``verify``: the target's schema fingerprint compared with the rehearsal's evidence of the same content
   (the upgrade scenario's when the target started at the previous version; ADR 0058).

The action is idempotent for the host (recovery sends a step again under the same ``adapter_invocation_id``)
because the target's ledger makes each fenced migration exactly-once. An unfenced migration (its script
manages its own transaction) is declared non-idempotent in its step input; the target's ``started`` row makes
a second run impossible: it answers ``Ambiguous`` with what the target's schema and ledger show, which the
host settles ``reconciliation_required``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fencepost.catalog.lifecycle import not_allowed
from fencepost.catalog.manifest import PackageSpec
from fencepost.catalog.sql_guard import deny_escapes
from fencepost.core.errors import InvalidInput
from fencepost.core.statuses import Disposition, InstallationStatus, PublicationStatus
from fencepost.delivery import target_db
from fencepost.delivery.drift import DriftCheck, StartedBy, check_drift
from fencepost.delivery.lock import LockedMigration, package_of
from fencepost.delivery.target_db import Applied, MigrationFailed, NotApplied, TargetBusy, TargetMissing
from fencepost.delivery.urls import target_path
from fencepost.host.action import Action, AdapterStep, HandlerContext, RetryPolicy, StepInputContext
from fencepost.host.adapter import AdapterCall, Ambiguous, PermanentFailure, Succeeded, TransientFailure
from fencepost.host.lifecycle import adapter_invocation_id
from fencepost.rehearsal.host_functions import resolve
from fencepost.rehearsal.sandbox import register_host_functions
from fencepost.store.base import Store
from fencepost.store.delivery_records import DeliveryStartRecord
from fencepost.store.ports import UnitOfWork

ACTION_ID = "fencepost.deliver"
ACTION_VERSION = 1
ADAPTER_TYPE = "fencepost.target"
#: A locked target is retried within the step: about a minute of waiting in all before the step fails.
TARGET_RETRY = RetryPolicy(max_attempts=12, initial=timedelta(seconds=0.25), factor=1.5)


class MigrationParam(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=200)
    checksum: str = Field(min_length=8, max_length=100)
    fenced: bool


class RehearsalPrint(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str
    attempt_id: str | None = None
    fresh: str | None = None
    upgrade: str | None = None


class DeliverParams(BaseModel):
    """What one delivery is asked to do; every field derives from the package, version and target (so a
    repeated command submits the same params under the same idempotency key)."""

    model_config = ConfigDict(extra="forbid")
    package: str = Field(min_length=1, max_length=100)
    version: str = Field(min_length=1, max_length=64)
    publication_id: str
    content_digest: str
    target: str = Field(min_length=1, max_length=100)
    target_id: str
    target_url: str
    migrations: list[MigrationParam] = Field(min_length=1, max_length=62)
    previous_through: int | None = None
    rehearsal: RehearsalPrint


def migration_step(index: int) -> str:
    """The step name of the ``index``-th migration (from 1): ``migrate-001``."""
    return f"migrate-{index:03d}"


# ── the start barrier (the handler) ──
def start_barrier(ctx: HandlerContext, params: DeliverParams) -> dict[str, Any]:
    """Re-check the guards and record the delivery start in the handler's control-store transaction (ADR 0056).

    Raises:
        NotAllowed: a guard is false (``publication_head``, ``publication_active``, ``installation_active``,
            ``installation_lock``, ``lifecycle_disposition``, ``quarantine``, ``target_live``); the invocation
            fails with the guard named and nothing applied.
    """
    tx = ctx.tx
    earlier = tx.delivery.get_delivery_start(ctx.invocation_id)
    if earlier is not None:
        return {"start": {"barrier": "passed earlier", "installation_id": earlier.installation_id,
                          "lock_digest": earlier.lock_digest, "started_at": earlier.started_at.isoformat()}}
    tx.catalog.lock_package(params.package)
    head = tx.catalog.get_head(params.package)
    if head is None or head.publication_id != params.publication_id:
        raise not_allowed("publication_head", f"the head of {params.package} is no longer {params.version} "
                                              f"({params.publication_id})")
    publication = tx.catalog.get_publication(params.publication_id)
    if publication is None or publication.status is not PublicationStatus.ACTIVE:
        raise not_allowed("publication_active", f"publication {params.publication_id} is not active")
    installation = tx.catalog.get_installation(params.package)
    if installation is None or installation.status is not InstallationStatus.ACTIVE:
        raise not_allowed("installation_active", f"{params.package} is not installed")
    if installation.publication_id != params.publication_id:
        raise not_allowed("installation_lock", f"the installation of {params.package} is locked to "
                                               f"{installation.publication_id}, not {params.publication_id}")
    disposition = tx.catalog.get_disposition(installation.id)
    if disposition is not None and disposition.disposition is not Disposition.ACTIVE:
        raise not_allowed("lifecycle_disposition", f"{params.package} is {disposition.disposition}")
    quarantine = tx.catalog.open_quarantine(installation.id, installation.lock_digest)
    if quarantine is not None:
        raise not_allowed("quarantine", f"{params.package} is quarantined: {quarantine.reason}")
    target = tx.delivery.get_target(params.target_id)
    if target is None or target.removed_at is not None:
        raise not_allowed("target_live", f"target {params.target} was removed")
    tx.delivery.insert_delivery_start(DeliveryStartRecord(
        invocation_id=ctx.invocation_id, package_name=params.package, version=params.version,
        publication_id=params.publication_id, installation_id=installation.id,
        lock_digest=installation.lock_digest, target_id=params.target_id, started_at=tx.now()))
    return {"start": {"barrier": "passed", "installation_id": installation.id,
                      "lock_digest": installation.lock_digest}}


# ── the planned steps ──
def _base(params: DeliverParams) -> dict[str, Any]:
    return {"target": params.target, "target_url": params.target_url, "package": params.package,
            "version": params.version, "run_id": params.rehearsal.run_id}


def _check_input(ctx: StepInputContext, params: DeliverParams) -> dict[str, Any]:
    return {**_base(params), "migrations": [m.model_dump() for m in params.migrations],
            "previous_through": params.previous_through, "invocation_id": ctx.invocation_id}


def _migration_input(index: int) -> Any:
    def build(ctx: StepInputContext, params: DeliverParams) -> dict[str, Any]:
        migration = params.migrations[index - 1]
        return {**_base(params), "migration": migration.id, "checksum": migration.checksum,
                "fenced": migration.fenced, "idempotent": migration.fenced, "index": index,
                "migrations": [m.model_dump() for m in params.migrations],
                "previous_through": params.previous_through, "invocation_id": ctx.invocation_id}
    return build


def _verify_input(ctx: StepInputContext, params: DeliverParams) -> dict[str, Any]:
    state = str(ctx.outputs.get("check", {}).get("start_state", "fresh"))
    upgrade = state == "previous_version"
    return {**_base(params), "start_state": state, "scenario": "upgrade_from_previous" if upgrade
            else "deliver_and_install", "expected": params.rehearsal.upgrade if upgrade else params.rehearsal.fresh,
            "rehearsal_attempt_id": params.rehearsal.attempt_id}


def plan_steps(params: DeliverParams) -> tuple[AdapterStep, ...]:
    """``check``, one ``migrate-NNN`` per migration, ``verify`` (deterministic in the params alone)."""
    steps = [AdapterStep("check", ADAPTER_TYPE, "drift_check", input=_check_input, retry=TARGET_RETRY)]
    steps += [AdapterStep(migration_step(i), ADAPTER_TYPE, "apply", input=_migration_input(i), retry=TARGET_RETRY)
              for i in range(1, len(params.migrations) + 1)]
    steps.append(AdapterStep("verify", ADAPTER_TYPE, "fingerprint", input=_verify_input, retry=TARGET_RETRY))
    return tuple(steps)


DELIVER = Action(id=ACTION_ID, version=ACTION_VERSION, params=DeliverParams, handler=start_barrier,
                 idempotent=True, plan_steps=plan_steps)


# ── the adapter ──
def _evidence(conn: sqlite3.Connection, package: str) -> dict[str, Any]:
    """What the target shows now: its ledger rows of ``package``, its objects and its fingerprint."""
    return {"ledger": [r.as_json() for r in target_db.ledger_rows(conn, package)],
            "objects": target_db.user_objects(conn), "fingerprint": target_db.fingerprint(conn)["fingerprint"]}


def _own_ids(data: dict[str, Any]) -> frozenset[str]:
    """The adapter invocation ids of this delivery's migration steps (step input ``data``)."""
    return frozenset(adapter_invocation_id(str(data["invocation_id"]), i, migration_step(i))
                     for i in range(1, len(data["migrations"]) + 1))


def _drift(conn: sqlite3.Connection, data: dict[str, Any], ledger: list[target_db.LedgerRow],
           started_by: Mapping[str, StartedBy]) -> DriftCheck:
    """The drift check of the step input ``data`` (its ``migrations``, ``previous_through``, ``invocation_id``)."""
    migrations = [LockedMigration(m["id"], m["checksum"], m["fenced"]) for m in data["migrations"]]
    return check_drift(migrations, ledger, target_db.user_objects(conn),
                       previous_through=data.get("previous_through"), own_ids=_own_ids(data),
                       started_by=started_by)


def started_by(tx: UnitOfWork, adapter_ids: Iterable[str]) -> dict[str, StartedBy]:
    """For each adapter invocation id that left a ``started`` ledger row: its delivery invocation and the
    operator's resolution of it (ADR 0103), read from the control store in the caller's unit."""
    found: dict[str, StartedBy] = {}
    for adapter_id in adapter_ids:
        row = tx.host.get_adapter_invocation(adapter_id)
        if row is None:
            found[adapter_id] = StartedBy(None)
            continue
        resolution = tx.host.get_resolution(row.invocation_id)
        found[adapter_id] = StartedBy(row.invocation_id, None if resolution is None else str(resolution.outcome))
    return found


def _ledger_guard(data: dict[str, Any], started: Mapping[str, StartedBy] | None = None) -> target_db.Guard:
    """The ledger guard of the migration step ``data``, run in the migration's own target transaction (ADR 0056).

    The ``check`` step ran in an earlier transaction; the target may have been changed or replaced by another
    file since (a recovery can come hours after a crash). Before the ``index``-th migration is applied, the
    target must still pass the drift check and hold exactly the migrations before it. Returns the difference in
    one sentence, or None. ``started``: ``started_by`` of other deliveries' started rows (ADR 0103; none: unresolved).
    """
    index, package = int(data["index"]), str(data["package"])
    expected = [str(m["id"]) for m in data["migrations"][:index - 1]]

    def guard(conn: sqlite3.Connection) -> str | None:
        result = _drift(conn, data, target_db.ledger_rows(conn, package), started or {})
        if result.drifted:
            return "; ".join(result.differences)
        if result.applied != expected:
            held = ", ".join(result.applied) or "none"
            wanted = ", ".join(expected) or "none"
            return (f"its ledger holds migrations {held} of {package}, the step expects {wanted} "
                    "(the target was changed or replaced after the drift check)")
        return None

    return guard


class TargetAdapter:
    """The adapter of ``fencepost.deliver``: a SQLite target database (``type`` ``fencepost.target``).

    Args:
        store: the control store, to read the frozen migration SQL of the rehearsal Run.
        busy_timeout: seconds a target connection waits for another writer before the step is retried.
    """

    type = ADAPTER_TYPE
    vendor = "sqlite"

    def __init__(self, store: Store, *, busy_timeout: float = target_db.DEFAULT_BUSY_TIMEOUT) -> None:
        self.store = store
        self.busy_timeout = busy_timeout
        self._packages: dict[str, PackageSpec] = {}
        self._lock = threading.Lock()

    def _package(self, run_id: str) -> PackageSpec:
        with self._lock:
            found = self._packages.get(run_id)
        if found is None:
            found = self.store.read(lambda tx: package_of(tx, run_id))
            with self._lock:
                self._packages[run_id] = found
        return found

    def execute(self, call: AdapterCall) -> object:
        """Run one step against the target (see the module docstring); never raises for a target's answer."""
        data = call.input
        name = str(data["target"])
        try:
            path = target_path(str(data["target_url"]))
        except InvalidInput as error:  # a URL stored before a rule was added: nothing was tried
            return PermanentFailure(f"target {name}: {error}; nothing was applied")
        try:
            with target_db.connect(name, path, busy_timeout=self.busy_timeout) as conn:
                if call.operation == "drift_check":
                    return self._check(conn, data)
                if call.operation == "apply":
                    return self._apply(conn, call)
                if call.operation == "fingerprint":
                    return self._verify(conn, data)
                return PermanentFailure(f"unknown delivery operation {call.operation!r}")
        except TargetMissing as error:  # the target was not reached: nothing sent now (ADR 0113)
            return PermanentFailure(str(error), sent=False)
        except NotApplied as error:
            return PermanentFailure(str(error))
        except TargetBusy as error:
            return TransientFailure(str(error), retry_after=None)
        except sqlite3.Error as error:
            if target_db._busy(error) and call.operation != "apply":
                return TransientFailure(f"target {name} is locked: {error}")
            if call.operation == "apply" and not data.get("fenced", True):
                return Ambiguous(f"target {name}: unfenced migration {data.get('migration')} ended with an "
                                 f"unexpected database error: {error}")
            return PermanentFailure(f"target {name}: {error}")

    def _started_by(self, conn: sqlite3.Connection, data: dict[str, Any]) -> dict[str, StartedBy]:
        """``started_by`` of the other deliveries' ``started`` rows of this package on the target (ADR 0103)."""
        own = _own_ids(data)
        others = [r.adapter_invocation_id for r in target_db.ledger_rows(conn, str(data["package"]))
                  if r.state == "started" and r.adapter_invocation_id not in own]
        return self.store.read(lambda tx: started_by(tx, others)) if others else {}

    def _check(self, conn: sqlite3.Connection, data: dict[str, Any]) -> object:
        ledger = target_db.ledger_rows(conn, str(data["package"]))
        result = _drift(conn, data, ledger, self._started_by(conn, data))
        if result.drifted:
            return PermanentFailure(f"target {data['target']} has drifted from {data['package']} {data['version']}, "
                                    f"nothing was applied: {'; '.join(result.differences)}")
        return Succeeded({**result.as_json(), "ledger": [r.as_json() for r in ledger]})

    def _apply(self, conn: sqlite3.Connection, call: AdapterCall) -> object:
        data = call.input
        name, migration, checksum = str(data["target"]), str(data["migration"]), str(data["checksum"])
        fenced = bool(data["fenced"])
        package = self._package(str(data["run_id"]))
        entry = next((m for m in package.migrations if m.id == migration), None)
        if entry is None:
            return PermanentFailure(f"migration {migration} is not in the rehearsed package")
        apply = target_db.apply_fenced if fenced else target_db.apply_unfenced
        started = self._started_by(conn, data) if "migrations" in data else {}
        guard = _ledger_guard(data, started) if "migrations" in data else None
        register_host_functions(conn, resolve(package.functions))
        deny_escapes(conn)
        # An earlier delivery's started row that an operator resolved (ADR 0103): succeeded marks it applied,
        # failed lets this step replace it and run the script.
        current = target_db.find_row(conn, str(data["package"]), migration)
        replaces = None
        if current is not None and current.state == "started" and current.adapter_invocation_id in started:
            by = started[current.adapter_invocation_id]
            if by.resolved == "succeeded" and current.checksum == checksum:
                # The guard judges the ledger as it is before this step: this migration's own row, the one being
                # settled, is left out of it (as a row resolved failed is), the earlier ones must all be there.
                before = _ledger_guard(data, {**started, current.adapter_invocation_id: StartedBy(by.invocation_id,
                                                                                                  "failed")})
                settled = target_db.settle_started(conn, name, package=str(data["package"]), migration=migration,
                                                   adapter_invocation_id=current.adapter_invocation_id, guard=before)
                if settled is not None:
                    return Succeeded({"applied": False, "fenced": fenced, "ledger": settled.as_json(),
                                      "reason": f"started by adapter invocation {current.adapter_invocation_id}; "
                                                f"marked applied as the operator's resolution of {by.invocation_id} "
                                                "says"})
            elif by.resolved == "failed":
                replaces = current.adapter_invocation_id
        try:
            done: Applied = apply(conn, name, package=str(data["package"]), version=str(data["version"]),
                                  migration=migration, checksum=checksum,
                                  adapter_invocation_id=call.adapter_invocation_id, sql=package.sql(entry.up),
                                  guard=guard, replaces=replaces)
        except MigrationFailed as error:
            if fenced:
                return PermanentFailure(str(error))
            return Ambiguous(f"{error}; the target shows: {_evidence(conn, str(data['package']))}")
        row = done.row
        if row.checksum != checksum:
            return PermanentFailure(f"target {name}: migration {migration} is in the target's ledger with checksum "
                                    f"{row.checksum}, the package has {checksum}; nothing was applied")
        if row.state == "started":
            return Ambiguous(f"target {name}: unfenced migration {migration} was started by an earlier run "
                             f"(adapter invocation {row.adapter_invocation_id}, {row.applied_at}) and never marked "
                             "applied; it manages its own transaction, so it is not run again. The target shows: "
                             f"{_evidence(conn, str(data['package']))}")
        return Succeeded({"applied": done.applied, "fenced": fenced, "ledger": row.as_json(),
                          **({} if done.applied else {"reason": "already in the target's ledger"})})

    def _verify(self, conn: sqlite3.Connection, data: dict[str, Any]) -> object:
        summary = target_db.fingerprint(conn)
        expected = data.get("expected")
        scenario = str(data["scenario"])
        if expected is None:
            comparison, matches = f"no rehearsal evidence of scenario {scenario} to compare with", False
        elif summary["fingerprint"] == expected:
            comparison, matches = "matches rehearsal", True
        else:
            comparison, matches = (f"differs from the rehearsal's {scenario}: the target's schema fingerprint is "
                                   f"{summary['fingerprint']}, the rehearsal's {expected} (objects on the target: "
                                   f"{summary['objects']})"), False
        return Succeeded({"fingerprint": summary["fingerprint"], "objects": summary["objects"],
                          "scenario": scenario, "start_state": data["start_state"], "rehearsal": expected,
                          "rehearsal_attempt_id": data.get("rehearsal_attempt_id"),
                          "matches_rehearsal": matches, "comparison": comparison,
                          "ledger": [r.as_json() for r in target_db.ledger_rows(conn, str(data["package"]))]})
