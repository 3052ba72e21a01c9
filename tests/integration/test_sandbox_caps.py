"""Sandbox disk and memory caps with SQLite's own limits (issue 10, ADR 0021): a write or a value past a cap
is the package's outcome, with the cap named; a full disk or a heap exhausted by others is the machine's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fencepost.rehearsal import sandbox as sandbox_module
from fencepost.rehearsal.sandbox import (
    MIB,
    Sandbox,
    SandboxEnvironmentError,
    SandboxError,
    SandboxLimitExceeded,
    SandboxLimits,
    run_script,
)

# Four MiB of blobs: past a 1 MiB disk cap, far below the 2 MiB value limit of a 16 MiB memory cap.
BIG_ROWS = ("CREATE TABLE big (b BLOB);"
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 64) "
            "INSERT INTO big SELECT randomblob(65536) FROM n;")


def _sandbox(tmp_path: Path, *, max_bytes: int = MIB, max_memory: int = 16 * MIB) -> Sandbox:
    return Sandbox(tmp_path / "sbx", {}, lambda: False, SandboxLimits(max_bytes=max_bytes, max_memory=max_memory))


def test_a_write_past_the_disk_cap_fails_with_the_cap_and_leaves_nothing(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path)
    conn = sandbox.connect("main")
    with pytest.raises(SandboxLimitExceeded) as raised:
        run_script(conn, BIG_ROWS, ledger_add="m1")
    assert raised.value.limit == {"disk_bytes": MIB}
    assert "sandbox disk cap exceeded (1048576 bytes)" in str(raised.value)
    assert "database or disk is full" in str(raised.value)
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'big'").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM _fencepost_ledger").fetchone()[0] == 0
    sandbox.destroy()


def test_the_same_write_fits_under_a_larger_cap(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path, max_bytes=16 * MIB)
    conn = sandbox.connect("main")
    run_script(conn, BIG_ROWS, ledger_add="m1")
    assert conn.execute("SELECT count(*) FROM big").fetchone()[0] == 64
    sandbox.destroy()


def test_temporary_tables_have_the_disk_cap_too(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path)
    conn = sandbox.connect("main")
    with pytest.raises(SandboxLimitExceeded) as raised:
        run_script(conn, BIG_ROWS.replace("CREATE TABLE big", "CREATE TEMP TABLE big"))
    assert raised.value.limit == {"disk_bytes": MIB}
    sandbox.destroy()


def test_a_value_longer_than_the_memory_cap_allows_fails_with_the_cap(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path, max_bytes=64 * MIB, max_memory=16 * MIB)
    conn = sandbox.connect("main")
    with pytest.raises(SandboxLimitExceeded) as raised:
        run_script(conn, "CREATE TABLE t (b BLOB); INSERT INTO t VALUES (zeroblob(3 * 1024 * 1024));")
    assert raised.value.limit == {"memory_bytes": 16 * MIB, "value_bytes": 2 * MIB}
    assert "sandbox memory cap exceeded (16777216 bytes)" in str(raised.value)
    run_script(conn, "CREATE TABLE t (b BLOB); INSERT INTO t VALUES (zeroblob(1024 * 1024));")  # under it: fine
    sandbox.destroy()


@pytest.mark.parametrize("sql", [
    "PRAGMA max_page_count = 1000000000;",
    "PRAGMA main.max_page_count = 1000000000;",
    "PRAGMA temp.max_page_count = 1000000000;",
    "PRAGMA page_size = 65536;",
    "PRAGMA cache_size = -10000000;",
    "PRAGMA temp_store = MEMORY;",
    "PRAGMA journal_mode = MEMORY;",
    "PRAGMA hard_heap_limit = 1;",
    "PRAGMA soft_heap_limit = 1;",
])
def test_package_sql_cannot_lift_a_cap(tmp_path: Path, sql: str) -> None:
    sandbox = _sandbox(tmp_path)
    conn = sandbox.connect("main")
    with pytest.raises(SandboxError, match=r"not authorized|authorization denied"):
        run_script(conn, sql)
    assert conn.execute("PRAGMA max_page_count").fetchone()[0] == MIB // 4096
    assert conn.execute("PRAGMA temp_store").fetchone()[0] == 1  # FILE
    sandbox.destroy()


def test_package_sql_may_still_read_the_caps(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path)
    conn = sandbox.connect("main")
    run_script(conn, "PRAGMA max_page_count; PRAGMA page_size; PRAGMA cache_size; PRAGMA journal_mode;")
    sandbox.destroy()


def test_a_full_disk_is_the_machines_failure_not_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = _sandbox(tmp_path)
    conn = sandbox.connect("main")
    monkeypatch.setattr(sandbox_module, "_free_bytes", lambda path: 4096)  # the disk, not the cap, ran out
    with pytest.raises(SandboxEnvironmentError, match="sandbox storage failed: database or disk is full"):
        run_script(conn, BIG_ROWS)
    sandbox.destroy()


def test_caps_out_of_range_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="disk cap"):
        SandboxLimits(max_bytes=1000).validate()
    with pytest.raises(ValueError, match="memory cap"):
        SandboxLimits(max_memory=MIB).validate()
    with pytest.raises(ValueError, match="memory cap"):
        Sandbox(tmp_path / "x", {}, lambda: False, SandboxLimits(max_memory=MIB))
    assert not (tmp_path / "x").exists()


# SQLite's heap limits are process-wide: provoked in a process of its own, never in the test runner.
_NOMEM = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from fencepost.rehearsal.sandbox import (MIB, Sandbox, SandboxLimits, SandboxLimitExceeded,
                                             SandboxEnvironmentError, install_heap_limit, run_script)
    root = Path(sys.argv[1])
    limits = SandboxLimits(max_bytes=64 * MIB, max_memory=16 * MIB)
    if sys.argv[2] == "limit":
        hard = install_heap_limit(1, limits)
    else:
        hard = 0
    # Many values each under the 2 MiB value limit, held at once: only the heap limit stops them.
    wide = "SELECT " + ", ".join(f"randomblob({2 * MIB - 64})" for _ in range(200)) + ";"
    out = {"hard": hard}

    def attempt(name, sandbox):
        try:
            run_script(sandbox.connect("main"), wide)
            out[name] = ["ok"]
        except SandboxLimitExceeded as error:
            out[name] = ["limit", error.limit, str(error)]
        except SandboxEnvironmentError as error:
            out[name] = ["environment", None, str(error)]

    alone = Sandbox(root / "a", {}, lambda: False, limits)
    if sys.argv[2] == "limit":
        attempt("alone", alone)
        other = Sandbox(root / "b", {}, lambda: False, limits)
        attempt("shared", alone)
        other.destroy()
        attempt("alone_again", alone)
        # The control store's connections share the heap: after the sandbox's statement failed, they work.
        import sqlite3
        control = sqlite3.connect(root / "control.db")
        control.execute("CREATE TABLE t (x)")
        control.execute("INSERT INTO t VALUES (1)")
        control.commit()
        out["control_after"] = control.execute("SELECT count(*) FROM t").fetchone()[0]
    else:
        out["no_limit_memory_error"] = str(alone.judge(MemoryError()))
        out["no_limit_is_environment"] = isinstance(alone.judge(MemoryError()), SandboxEnvironmentError)
    alone.destroy()
    print(json.dumps(out))
""")


def _nomem(tmp_path: Path, mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _NOMEM, str(tmp_path), mode], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_out_of_memory_under_the_heap_limit_is_the_lone_sandboxs_cap_and_nobody_elses(tmp_path: Path) -> None:
    out = _nomem(tmp_path, "limit")
    assert out["hard"] == sandbox_module.HEAP_RESERVE_BYTES + 16 * MIB + sandbox_module.HEAP_RESERVE_PER_SLOT_BYTES
    assert out["alone"] == ["limit", {"memory_bytes": 16 * MIB},
                            "sandbox memory cap exceeded (16777216 bytes): out of memory under the worker's heap "
                            "limit"]
    # With another sandbox open, whose allocation exhausted the shared heap is unknown: the machine's.
    assert out["shared"] == ["environment", None, "sandbox ran out of memory while 1 other sandbox(es) ran"]
    assert out["alone_again"] == out["alone"]
    assert out["control_after"] == 1


def test_out_of_memory_without_a_heap_limit_is_the_machines(tmp_path: Path) -> None:
    out = _nomem(tmp_path, "none")
    assert out["hard"] == 0
    assert out["no_limit_is_environment"] is True
    assert out["no_limit_memory_error"] == "sandbox ran out of memory"
