"""The six delivery scenarios, run in order against one delivery's sandbox.

Chosen so that a release engineer can trust a passing Attempt:

1. ``deliver_and_install``: deliver the frozen package to the external target (with an idempotency
   key, recording the target receipt), then apply every up migration to a new database;
2. ``integrity_check``: ``PRAGMA integrity_check`` is ok and ``foreign_key_check`` is clean;
3. ``seed_and_verify``: apply the seed data, re-check integrity and foreign keys, record per-table row
   counts and content digests;
4. ``reapply_is_noop``: running the installer again applies nothing and changes neither schema nor data;
5. ``upgrade_from_previous``: a database at the previous version upgraded to this one has exactly the
   clean install's schema (not applicable without a previous version);
6. ``uninstall_to_empty``: the down migrations (or the uninstall script) leave no object behind (not
   applicable when the package cannot be uninstalled).

Each scenario returns its semantic result, or raises ``ScenarioFailed`` with the database error text.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fencepost.catalog.manifest import PackageSpec
from fencepost.rehearsal.sandbox import (
    LEDGER,
    Sandbox,
    SandboxError,
    SandboxLimitExceeded,
    applied,
    check_integrity,
    run_script,
    schema_summary,
    table_digests,
    user_object_count,
)
from fencepost.rehearsal.target import LocalFileTarget, TargetRefused


class ScenarioFailed(Exception):
    """A scenario's check failed; ``message`` keeps the database error text, ``result`` what was seen, and
    ``limit`` the sandbox cap its SQL went past, if that is why (``SandboxLimitExceeded.limit``)."""

    def __init__(self, message: str, result: dict[str, Any] | None = None,
                 limit: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.result = result or {}
        self.limit = limit


def _limit(error: SandboxError) -> dict[str, int] | None:
    return error.limit if isinstance(error, SandboxLimitExceeded) else None


@dataclass
class ScenarioEnv:
    """What scenarios share within one delivery."""

    package: PackageSpec
    sandbox: Sandbox
    target: LocalFileTarget
    attempt_id: str
    state: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)  # volatile evidence of the current scenario

    @property
    def main(self) -> sqlite3.Connection:
        conn: sqlite3.Connection = self.state["main"]
        return conn


def install(conn: sqlite3.Connection, package: PackageSpec, upto: int | None = None) -> list[str]:
    """Apply the package's pending up migrations (first ``upto`` only, if given) in order; return ids applied."""
    done = set(applied(conn))
    ran: list[str] = []
    for migration in package.migrations[:upto]:
        if migration.id in done:
            continue
        try:
            run_script(conn, package.sql(migration.up), ledger_add=migration.id)
        except SandboxError as error:
            raise ScenarioFailed(f"migration {migration.id} failed: {error}", {"failed_migration": migration.id,
                                                                              "applied": ran},
                                 _limit(error)) from None
        ran.append(migration.id)
    return ran


def deliver_and_install(env: ScenarioEnv) -> dict[str, Any]:
    pkg = env.package
    key = f"{env.attempt_id}:deliver_and_install"
    bundle = {"package": pkg.name, "version": pkg.version, "content_digest": pkg.content_digest,
              "files": [{"path": f.path, "sha256": f.sha256} for f in pkg.run_files()]}
    try:
        env.extras["target_receipt"] = env.target.deliver(key, bundle)
    except TargetRefused as error:
        raise ScenarioFailed(f"delivery to target refused: {error}") from None
    env.extras["idempotency_key"] = key
    env.state["main"] = env.sandbox.connect("main")
    ran = install(env.main, pkg)
    schema = schema_summary(env.main)
    env.state["clean_schema"] = schema
    return {"delivered": {"payload_files": len(bundle["files"])}, "migrations_applied": ran, "schema": schema}


def integrity_check(env: ScenarioEnv) -> dict[str, Any]:
    result = check_integrity(env.main)
    if result["integrity_check"] != "ok" or result["foreign_key_violations"]:
        raise ScenarioFailed("integrity or foreign-key check failed after install", result)
    return result


def seed_and_verify(env: ScenarioEnv) -> dict[str, Any]:
    for path in env.package.seed:
        if env.sandbox.should_interrupt():
            raise ScenarioFailed("interrupted: the lease was lost")
        try:
            run_script(env.main, env.package.sql(path))
        except SandboxError as error:
            raise ScenarioFailed(f"seed {path} failed: {error}", {"failed_seed": path}, _limit(error)) from None
    checks = check_integrity(env.main)
    tables = table_digests(env.main, env.package.volatile_columns, env.sandbox.should_interrupt)
    result = {"seed_files": list(env.package.seed), "checks": checks, "tables": tables}
    if checks["integrity_check"] != "ok" or checks["foreign_key_violations"]:
        raise ScenarioFailed("integrity or foreign-key check failed after seeding", result)
    env.state["seeded_tables"] = tables
    env.state["seeded_schema"] = schema_summary(env.main)
    return result


def reapply_is_noop(env: ScenarioEnv) -> dict[str, Any]:
    ran = install(env.main, env.package)
    schema = schema_summary(env.main)
    tables = table_digests(env.main, env.package.volatile_columns, env.sandbox.should_interrupt)
    result = {"migrations_applied": ran, "schema_unchanged": schema == env.state["seeded_schema"],
              "data_unchanged": tables == env.state["seeded_tables"]}
    if ran or not result["schema_unchanged"] or not result["data_unchanged"]:
        raise ScenarioFailed("re-applying the package changed the installed database", result)
    return result


def upgrade_from_previous(env: ScenarioEnv) -> dict[str, Any]:
    pkg = env.package
    through = pkg.through_index()
    if through is None:
        return {"applicable": False, "reason": "the manifest declares no previous version"}
    conn = env.sandbox.connect("upgrade")
    before = install(conn, pkg, upto=through)
    after = install(conn, pkg)
    schema = schema_summary(conn)
    result = {"applicable": True, "from_version": pkg.previous_version, "previous_migrations": before,
              "upgrade_migrations": after,
              "matches_clean_install": schema["fingerprint"] == env.state["clean_schema"]["fingerprint"],
              "schema": schema}
    if not result["matches_clean_install"]:
        raise ScenarioFailed("upgrading from the previous version does not reach the clean-install schema", result)
    return result


def uninstall_to_empty(env: ScenarioEnv) -> dict[str, Any]:
    pkg = env.package
    method = pkg.uninstall_method
    if method is None:
        return {"applicable": False, "reason": "the package has no uninstall script and not every migration "
                                               "has a down file"}
    try:
        if method == "uninstall_script":
            assert pkg.uninstall is not None
            run_script(env.main, pkg.sql(pkg.uninstall))
            env.main.execute(f'DELETE FROM "{LEDGER}"')
        else:
            for migration in reversed(pkg.migrations):
                assert migration.down is not None
                run_script(env.main, pkg.sql(migration.down), ledger_remove=migration.id)
    except SandboxError as error:
        raise ScenarioFailed(f"uninstall failed: {error}", {"applicable": True, "method": method},
                             _limit(error)) from None
    remaining = user_object_count(env.main)
    leftover = [r[0] for r in env.main.execute(
        "SELECT type || ' ' || name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND tbl_name != ? "
        "ORDER BY 1 LIMIT 20", (LEDGER,))]
    result = {"applicable": True, "method": method, "remaining_objects": remaining, "leftover": leftover}
    if remaining:
        raise ScenarioFailed(f"uninstall left {remaining} object(s) behind", result)
    return result


SCENARIOS: tuple[tuple[str, Callable[[ScenarioEnv], dict[str, Any]]], ...] = (
    ("deliver_and_install", deliver_and_install),
    ("integrity_check", integrity_check),
    ("seed_and_verify", seed_and_verify),
    ("reapply_is_noop", reapply_is_noop),
    ("upgrade_from_previous", upgrade_from_previous),
    ("uninstall_to_empty", uninstall_to_empty),
)
SCENARIO_CODES = tuple(code for code, _ in SCENARIOS)
