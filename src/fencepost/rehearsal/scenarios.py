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
6. ``uninstall_to_empty``: the uninstall script leaves no object behind; without one, every down script that
   exists runs, newest first, as far as the chain goes, each verified against the schema from before its up,
   then each run of downs below a migration without one, in a fresh database holding the ups up to that
   run's top (not applicable only when no down exists; ADR 0062 and its amendment); either way the file must
   still pass ``PRAGMA integrity_check`` (a script that edited ``sqlite_master`` under ``writable_schema``
   orphaned pages; that pragma is now refused outright, ADR 0102, and the check stays as a second line).

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
    judged,
    run_script,
    schema_shape,
    schema_summary,
    shape_differences,
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


def install(conn: sqlite3.Connection, package: PackageSpec, upto: int | None = None,
            modes: dict[str, str] | None = None, schemas: dict[str, Any] | None = None) -> list[str]:
    """Apply the package's pending up migrations (first ``upto`` only, if given) in order; return ids applied.

    Args:
        modes: filled with each applied migration's transaction mode (``sandbox.WRAPPED`` or
            ``sandbox.OWN_TRANSACTION``), when given.
        schemas: filled with each applied migration's ``schema_shape`` taken right before its up ran (what
            its down must restore), when given.
    """
    done = set(applied(conn))
    ran: list[str] = []
    for migration in package.migrations[:upto]:
        if migration.id in done:
            continue
        if schemas is not None:
            schemas[migration.id] = schema_shape(conn)
        try:
            mode = run_script(conn, package.sql(migration.up), ledger_add=migration.id)
        except SandboxError as error:
            raise ScenarioFailed(f"migration {migration.id} failed: {error}", {"failed_migration": migration.id,
                                                                              "applied": ran},
                                 _limit(error)) from None
        if modes is not None:
            modes[migration.id] = mode
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
    modes: dict[str, str] = {}
    env.state["schema_before_up"] = {}
    ran = install(env.main, pkg, modes=modes, schemas=env.state["schema_before_up"])
    schema = schema_summary(env.main)
    env.state["clean_schema"] = schema
    result: dict[str, Any] = {"delivered": {"payload_files": len(bundle["files"])}, "migrations_applied": ran,
                              "transaction_modes": modes, "schema": schema}
    if pkg.pairings:
        result["pairing"] = dict(pkg.pairings)
    if env.sandbox.function_sources:
        result["host_functions"] = env.sandbox.function_sources
    return result


def _checked_afresh(env: ScenarioEnv, after: str) -> dict[str, Any]:
    """``check_integrity`` of the sandbox's main database read on a new connection.

    The package's connection still holds the schema it read before a script edited ``sqlite_master`` under
    ``PRAGMA writable_schema``, and checks against that one (every page still looks in use); a new connection
    reads the file as it is.

    Raises:
        ScenarioFailed: the file cannot even be read (SQLite's error, e.g. a malformed schema).
    """
    try:
        return check_integrity(env.sandbox.connect("main"))
    except (sqlite3.Error, MemoryError) as error:
        verdict = judged(env.main, error)
        if not isinstance(verdict, SandboxError):
            raise verdict from None
        raise ScenarioFailed(f"the database cannot be checked after {after}: {verdict}",
                             {"integrity_check": [str(verdict)]}) from None


def integrity_check(env: ScenarioEnv) -> dict[str, Any]:
    result = _checked_afresh(env, "install")
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
    checks = _checked_afresh(env, "seeding")
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


def _leftover(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT type || ' ' || name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND tbl_name != ? "
        "ORDER BY 1 LIMIT 20", (LEDGER,))]


def uninstall_to_empty(env: ScenarioEnv) -> dict[str, Any]:
    """Uninstall (the package's script, or its downs as far as they go), then check the database file is sound.

    A script may empty ``sqlite_master`` under ``PRAGMA writable_schema`` instead of dropping: the schema
    then looks as before the up, but the pages of what it "removed" are orphaned and the file is corrupt, so
    ``PRAGMA integrity_check`` must still answer ``ok`` after the uninstall.
    """
    result = _uninstall(env)
    integrity = _checked_afresh(env, "the uninstall")["integrity_check"]
    if integrity != "ok":
        first = next((line for line in integrity if not line.startswith("***")), integrity[0])
        raise ScenarioFailed(f"after the uninstall the database fails SQLite's integrity check: {first}",
                             {**result, "integrity_check": integrity[:10]})
    return result


def _uninstall(env: ScenarioEnv) -> dict[str, Any]:
    pkg = env.package
    if pkg.uninstall is not None:
        try:
            mode = run_script(env.main, pkg.sql(pkg.uninstall))
            env.main.execute(f'DELETE FROM "{LEDGER}"')
        except SandboxError as error:
            raise ScenarioFailed(f"uninstall failed: {error}", {"applicable": True, "method": "uninstall_script"},
                                 _limit(error)) from None
        remaining = user_object_count(env.main)
        result = {"applicable": True, "method": "uninstall_script", "transaction_mode": mode,
                  "remaining_objects": remaining, "leftover": _leftover(env.main)}
        if remaining:
            raise ScenarioFailed(f"uninstall left {remaining} object(s) behind", result)
        return result
    return _roll_back(env)


def _roll_back(env: ScenarioEnv) -> dict[str, Any]:
    """Run every down script that exists, newest first, as far as the chain goes, then each run of downs below
    a gap in a fresh database of the sandbox (issue 11 item 4, ADR 0062 and its amendment).

    Each down must bring the schema back to what it was right before its up ran; the first migration
    without a down file ends the main chain (older downs cannot run on a schema that still holds it). Below
    it, each further run of consecutive downs is exercised in its own database (``_run_below_gap``), so a
    broken down under a gap still fails the scenario. ``verified_downs``, ``chain_stops_at`` and
    ``reached_empty`` describe the main chain; ``segments_below_gaps`` the runs below it and
    ``migrations_without_down`` every migration that has no down file.
    """
    pkg = env.package
    before_up: dict[str, Any] = env.state.get("schema_before_up", {})
    verified: list[str] = []
    modes: dict[str, str] = {}
    stops_at: str | None = None
    stop_index = -1
    without_down = [m.id for m in pkg.migrations if m.down is None]
    for index in range(len(pkg.migrations) - 1, -1, -1):
        migration = pkg.migrations[index]
        if migration.down is None:
            stops_at, stop_index = migration.id, index
            break
        progress = {"applicable": True, "method": "down_migrations", "verified_downs": list(verified),
                    "failed_down": migration.id}
        _roll_back_one(env, env.main, index, before_up, progress, modes)
        verified.append(migration.id)
    segments: list[dict[str, Any]] = []
    if stops_at is not None:
        base = {"applicable": True, "method": "down_migrations", "verified_downs": verified,
                "chain_stops_at": stops_at, "migrations_without_down": without_down}
        segments = _segments_below(env, stop_index, base)
    below = sum(len(seg["verified_downs"]) for seg in segments)
    if not verified and not segments:
        return {"applicable": False, "method": "down_migrations", "verified_downs": [], "chain_stops_at": stops_at,
                "segments_below_gaps": [], "migrations_without_down": without_down,
                "reason": f"the package has no uninstall script and migration {stops_at} (the newest) has no "
                          "down file, nor has any older one: no down migration can run"}
    remaining = user_object_count(env.main)
    result: dict[str, Any] = {"applicable": True, "method": "down_migrations", "verified_downs": verified,
                              "transaction_modes": modes, "chain_stops_at": stops_at,
                              "reached_empty": stops_at is None, "remaining_objects": remaining,
                              "leftover": _leftover(env.main), "segments_below_gaps": segments,
                              "migrations_without_down": without_down}
    if stops_at is not None:
        reason = (f"rolled back {len(verified)} of {len(pkg.migrations)} migrations; migration "
                  f"{stops_at} has no down file, so the chain stops there and an empty database is not reached")
        if segments:
            reason += (f"; {below} down(s) below it verified in {len(segments)} run(s) from fresh databases "
                       f"(no down: {', '.join(without_down)})")
        result["reason"] = reason
        return result
    if remaining:
        raise ScenarioFailed(f"uninstall left {remaining} object(s) behind", result)
    return result


def _roll_back_one(env: ScenarioEnv, conn: sqlite3.Connection, index: int, before_up: dict[str, Any],
                   progress: dict[str, Any], modes: dict[str, str]) -> None:
    """Run migration ``index``'s down on ``conn`` and verify the schema against the one from before its up.

    Raises:
        ScenarioFailed: interrupted, the down failed (``progress`` as the result, with the cap if one was hit),
            or the schema differs (``progress`` gains ``schema_differences``).
    """
    migration = env.package.migrations[index]
    if migration.down is None:
        raise ScenarioFailed(f"migration {migration.id} has no down file to run", progress)
    if env.sandbox.should_interrupt():
        raise ScenarioFailed("interrupted: the lease was lost")
    try:
        modes[migration.id] = run_script(conn, env.package.sql(migration.down), ledger_remove=migration.id)
    except SandboxError as error:
        raise ScenarioFailed(f"down migration {migration.id} failed: {error}", progress, _limit(error)) from None
    expected = before_up.get(migration.id)
    if expected is None:
        raise ScenarioFailed(f"no schema was recorded before migration {migration.id}'s up", progress)
    diff = shape_differences(expected, schema_shape(conn))
    if any(diff.values()):
        progress["schema_differences"] = diff
        shown = "; ".join(f"{k}: {', '.join(v)}" for k, v in diff.items() if v)
        raise ScenarioFailed(f"down migration {migration.id} does not restore the schema from before its up "
                             f"({shown})", progress)


def _segments_below(env: ScenarioEnv, stop_index: int, base: dict[str, Any]) -> list[dict[str, Any]]:
    """Exercise each run of consecutive downs below the migration at ``stop_index`` (which has none).

    A run's top is the newest migration of the run; for each, a fresh database of the same sandbox (same caps,
    confinement and host functions) gets the ups up to that top (the ups of migrations without a down too),
    then the run rolls back newest first, each down verified as in the main chain, and the file must pass
    ``PRAGMA integrity_check``.

    Returns:
        ``[{"top", "verified_downs", "stops_at", "reached_empty", "transaction_modes"}]``, newest run first.
    Raises:
        ScenarioFailed: a down of a run failed or did not restore the schema; the result is ``base`` with the
            runs so far in ``segments_below_gaps`` and ``failed_down``, ``failed_segment`` (the run's top).
    """
    migrations = env.package.migrations
    segments: list[dict[str, Any]] = []
    top = stop_index - 1
    while top >= 0:
        if migrations[top].down is None:
            top -= 1
            continue
        low = top
        while low - 1 >= 0 and migrations[low - 1].down is not None:
            low -= 1
        segments.append(_run_below_gap(env, top, low, base, segments))
        top = low - 1
    return segments


def _run_below_gap(env: ScenarioEnv, top: int, low: int, base: dict[str, Any],
                   done: list[dict[str, Any]]) -> dict[str, Any]:
    pkg = env.package
    name = f"below_gap_{top}"
    conn = env.sandbox.connect(name)
    before_up: dict[str, Any] = {}
    install(conn, pkg, upto=top + 1, schemas=before_up)
    segment: dict[str, Any] = {"top": pkg.migrations[top].id, "verified_downs": [],
                               "stops_at": pkg.migrations[low - 1].id if low > 0 else None,
                               "reached_empty": low == 0, "transaction_modes": {}}
    for index in range(top, low - 1, -1):
        progress = {**base, "segments_below_gaps": [*done, segment], "failed_down": pkg.migrations[index].id,
                    "failed_segment": segment["top"]}
        _roll_back_one(env, conn, index, before_up, progress, segment["transaction_modes"])
        segment["verified_downs"].append(pkg.migrations[index].id)
    conn.close()
    checker: sqlite3.Connection | None = None
    try:
        checker = env.sandbox.connect(name)
        integrity = check_integrity(checker)["integrity_check"]
    except (sqlite3.Error, MemoryError) as error:
        verdict = judged(conn, error)
        if not isinstance(verdict, SandboxError):
            raise verdict from None
        integrity = [str(verdict)]
    finally:
        if checker is not None:
            checker.close()
    if integrity != "ok":
        first = next((line for line in integrity if not line.startswith("***")), integrity[0])
        raise ScenarioFailed(f"after rolling back the downs from {segment['top']} in a fresh database, it fails "
                             f"SQLite's integrity check: {first}",
                             {**base, "segments_below_gaps": [*done, segment], "failed_segment": segment["top"],
                              "integrity_check": integrity[:10]})
    # A verified run's database is done with: it no longer takes disk beside the next run's (a failed one
    # stays, for the sandbox's own clean-up).
    for leftover in (env.sandbox.root / f"{name}.db", env.sandbox.root / f"{name}.db-journal"):
        leftover.unlink(missing_ok=True)
    return segment


SCENARIOS: tuple[tuple[str, Callable[[ScenarioEnv], dict[str, Any]]], ...] = (
    ("deliver_and_install", deliver_and_install),
    ("integrity_check", integrity_check),
    ("seed_and_verify", seed_and_verify),
    ("reapply_is_noop", reapply_is_noop),
    ("upgrade_from_previous", upgrade_from_previous),
    ("uninstall_to_empty", uninstall_to_empty),
)
SCENARIO_CODES = tuple(code for code, _ in SCENARIOS)
