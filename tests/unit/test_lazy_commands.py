"""The root command imports a command's module only when that command is used (``fencepost.cli.lazy``, ADR 0106).

Each check runs in a fresh interpreter, since this test process has long since imported everything.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.processes import subprocess_env

PROBE = """
import sys
from typer.testing import CliRunner
from fencepost.cli.app import app
args = sys.argv[1:]
result = CliRunner().invoke(app, args) if args else None
if result is not None and result.exit_code != 0:
    raise SystemExit(f"exit {result.exit_code}: {result.output}")
print("\\n".join(sorted(name for name in sys.modules if name.startswith("fencepost."))))
"""

#: Modules that only some commands need, each heavy to import.
HEAVY = ("fencepost.cli.demo_cmd", "fencepost.demo.runner", "fencepost.cli.workflow_cmds", "fencepost.api",
         "fencepost.cli.serve", "fencepost.cli.worker_cmd", "fencepost.rehearsal.service", "fencepost.cli.host_cmds",
         "fencepost.cli.package_cmds", "fencepost.workflows.coordinator")


def loaded_after(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=subprocess_env(), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return set(done.stdout.split())


def test_importing_the_command_line_imports_no_command() -> None:
    loaded = loaded_after()
    assert "fencepost.cli.app" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize(("args", "needed"), [
    (("host", "--help"), "fencepost.cli.host_cmds"),
    (("migrate", "--help"), "fencepost.cli.migrate_cmd"),
    (("workers", "--help"), "fencepost.cli.workers_cmd"),
])
def test_a_command_imports_its_own_module_and_not_the_others(args: tuple[str, ...], needed: str) -> None:
    loaded = loaded_after(*args)
    assert needed in loaded
    assert not (loaded & set(HEAVY)) - {needed}, sorted((loaded & set(HEAVY)) - {needed})
