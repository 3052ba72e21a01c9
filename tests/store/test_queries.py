"""SQL written once: common files per concern, per-dialect overrides only where declared, and every name a port
runs exists in every dialect."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

from fencepost.store.sql import admission, audit, catalog, events, host, lease, outbox, rehearsal
from fencepost.store.sql.queries import CONCERNS, load_dialect, parse_blocks, to_pyformat

DIALECTS = ("fencepost.store.sqlite", "fencepost.store.postgres")
SRC = Path(__file__).resolve().parents[2] / "src" / "fencepost" / "store"


def _sql(text: str) -> str:
    """The statement without its comment lines."""
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("--"))


def test_both_dialects_load_the_same_query_names() -> None:
    sqlite, postgres = (set(load_dialect(p)) for p in DIALECTS)
    assert len(sqlite) > 80
    assert sqlite == postgres


def test_only_declared_blocks_differ_between_dialects() -> None:
    sqlite, postgres = (load_dialect(p) for p in DIALECTS)
    differing = {name for name in sqlite if sqlite[name].sql != postgres[name].sql}
    declared = {name for name, q in sqlite.items() if q.per_dialect}
    # A shared query differs only through a per-dialect fragment it embeds (the lease condition, the host's
    # row lock and JSON array reader).
    blocks = [b for concern in CONCERNS
              for b in parse_blocks((SRC / "sql" / f"{concern}.sql").read_text(encoding="utf-8"), concern)]
    per_dialect_fragments = {b.name for b in blocks if b.kind == "fragment" and b.per_dialect}
    fragment_users = {b.name for b in blocks if b.kind == "name"
                      and set(re.findall(r"\{\{([a-z_0-9]+)\}\}", b.body)) & per_dialect_fragments}
    fragment_users |= {name for name, q in sqlite.items() if "lease.lease_token" in q.sql}
    assert differing - fragment_users == declared
    # 12: the event relay's claim (ADR 0038) needs SKIP LOCKED and a server-side random token, as the commands' do.
    # 14: the event append in one statement where data-modifying CTEs exist (ADR 0079).
    # 15: the audit of claimable payloads, since the two engines name their JSON type function differently.
    # 16: settling the event sequences a PostgreSQL transaction takes at COMMIT, before it reads the log (ADR 0096).
    # 17: one worker id's registrations serialized (an advisory lock on PostgreSQL; SQLite's write lock already).
    assert len(declared) <= 17, sorted(declared)


def test_dialect_files_hold_only_per_dialect_blocks() -> None:
    for backend in ("sqlite", "postgres"):
        text = (SRC / backend / "dialect.sql").read_text(encoding="utf-8")
        names = {b.name for b in parse_blocks(text, backend)}
        common = {b.name: b for concern in CONCERNS
                  for b in parse_blocks((SRC / "sql" / f"{concern}.sql").read_text(encoding="utf-8"), concern)}
        assert names == {n for n, b in common.items() if b.per_dialect}


@pytest.mark.parametrize("package", DIALECTS)
def test_every_query_the_ports_run_exists(package: str) -> None:
    used: set[str] = set()
    for module in (outbox, rehearsal, catalog, admission, audit, lease, host, events):
        used |= set(re.findall(r"""(?:run|_write)\(\s*["']([a-z_0-9]+)["']""", inspect.getsource(module)))
    used |= set(re.findall(r'"(insert_[a-z_]+)"', inspect.getsource(admission)))
    assert {"claim_commands", "renew_lease", "insert_run", "receipt_finish", "insert_admission"} <= used
    assert used - set(load_dialect(package)) == set()


@pytest.mark.parametrize("package", DIALECTS)
def test_no_query_is_empty_or_keeps_a_fragment_placeholder(package: str) -> None:
    for name, query in load_dialect(package).items():
        assert _sql(query.sql).strip(), f"query {name} of {package} has no SQL"
        assert "{{" not in query.sql, name


def test_postgres_queries_never_take_the_worker_clock_for_lease_deadlines() -> None:
    # The server computes deadlines; the :lease_until parameter (a client-side sum) is the SQLite dialect's.
    queries = load_dialect("fencepost.store.postgres")
    for name in ("claim_commands", "renew_lease"):
        assert ":lease_until" not in _sql(queries[name].sql), name
        assert "make_interval(secs => :lease_seconds" in _sql(queries[name].sql), name
    assert "clock_timestamp()" in _sql(queries["store_now"].sql)


def test_postgres_claim_skips_locked_rows() -> None:
    claim = _sql(load_dialect("fencepost.store.postgres")["claim_commands"].sql)
    assert claim.count("FOR UPDATE SKIP LOCKED") == 2


def test_postgres_lease_condition_holds_the_command_row() -> None:
    held = load_dialect("fencepost.store.postgres")["receipt_finish"].sql
    assert "FOR SHARE" in held and "lease.lease_token = :lease_token" in held


def test_to_pyformat_keeps_casts_and_escapes_percent() -> None:
    assert to_pyformat("SELECT :a::integer, '5%' || :b") == "SELECT %(a)s::integer, '5%%' || %(b)s"


# ── what loading refuses ──

COMMON = {concern: (SRC / "sql" / f"{concern}.sql").read_text(encoding="utf-8") for concern in CONCERNS}


def _dialect_package(tmp_path: Path, name: str, dialect: str) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "dialect.sql").write_text(dialect)
    sys.path.insert(0, str(tmp_path))
    return name


def _real_dialect(backend: str = "sqlite") -> str:
    return (SRC / backend / "dialect.sql").read_text(encoding="utf-8")


def test_loading_a_complete_dialect_works(tmp_path: Path) -> None:
    package = _dialect_package(tmp_path, "fp_dialect_ok", _real_dialect())
    try:
        assert set(load_dialect(package)) == set(load_dialect("fencepost.store.sqlite"))
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize(("extra", "message"), [
    ("-- name: get_command\nSELECT 1;\n", "not declared per-dialect"),
    ("-- name: no_such_query\nSELECT 1;\n", "not declared per-dialect"),
    ("-- name: lock_package\nSELECT 2;\n", "duplicate"),
])
def test_loading_refuses_an_override_of_an_undeclared_name(tmp_path: Path, extra: str, message: str) -> None:
    package = _dialect_package(tmp_path, f"fp_dialect_{abs(hash(extra))}", _real_dialect() + "\n" + extra)
    try:
        with pytest.raises(ValueError, match=message):
            load_dialect(package)
    finally:
        sys.path.remove(str(tmp_path))


def test_loading_refuses_a_dialect_that_lacks_a_declared_block(tmp_path: Path) -> None:
    text = _real_dialect()
    without = re.sub(r"-- name: lock_package\n.*?(?=\n-- (name|fragment):)", "", text, flags=re.S)
    assert without != text
    package = _dialect_package(tmp_path, "fp_dialect_missing", without)
    try:
        with pytest.raises(ValueError, match="lacks the per-dialect query 'lock_package'"):
            load_dialect(package)
    finally:
        sys.path.remove(str(tmp_path))


def test_loading_refuses_instants_declared_by_a_dialect(tmp_path: Path) -> None:
    text = _real_dialect().replace("-- name: lock_package\n", "-- name: lock_package\n-- instants: locked\n")
    package = _dialect_package(tmp_path, "fp_dialect_instants", text)
    try:
        with pytest.raises(ValueError, match="common declaration is the contract"):
            load_dialect(package)
    finally:
        sys.path.remove(str(tmp_path))
