"""The near miss named after an unknown command (``fencepost.cli.suggest``), at every level of the command line,
and the command a usage error names."""

from __future__ import annotations

import pytest

from fencepost.cli.suggest import near_misses
from helpers.processes import run_cli

COMMANDS = ["install", "disable", "enable", "publish", "status"]


@pytest.mark.parametrize(("typo", "expected"), [
    ("instal", ["install"]),          # a prefix names the command it starts, not difflib's others ('disable')
    ("INSTALL", ["install"]),         # another case
    ("pub", ["publish"]),
    ("stauts", ["status"]),           # a transposition: difflib
    ("zzz", []),
    ("e", []),                        # one letter starts too much to be a guess (difflib finds nothing close)
])
def test_near_misses(typo: str, expected: list[str]) -> None:
    assert near_misses(typo, COMMANDS) == expected


@pytest.mark.parametrize(("args", "line"), [
    (["demo", "pay"], "fencepost demo: No such command 'pay'. Did you mean 'payments'?"),
    (["HOST", "list"], "fencepost: No such command 'HOST'. Did you mean 'host'?"),
    (["package", "instal"], "fencepost package: No such command 'instal'. Did you mean 'install'?"),
    (["hots"], "fencepost: No such command 'hots'. Did you mean 'host'?"),
    (["host", "zzz"], "fencepost host: No such command 'zzz'. (see `fencepost host --help`)"),
])
def test_an_unknown_command_is_one_line_naming_the_near_miss(args: list[str], line: str) -> None:
    result = run_cli(args)
    assert result.returncode == 2, result.describe()
    assert result.error_line.startswith(line), result.describe()


@pytest.mark.parametrize(("args", "line"), [
    (["host", "list", "--json=1"], "fencepost host list: Option '--json' does not take a value. "
                                   "(see `fencepost host list --help`)"),
    (["migrate", "--json=yes"], "fencepost migrate: Option '--json' does not take a value. "
                                "(see `fencepost migrate --help`)"),
])
def test_a_usage_error_click_raises_without_its_context_names_the_command(args: list[str], line: str) -> None:
    """Click's parser raises "does not take a value" with no context: the line named the root, not the command."""
    result = run_cli(args)
    assert result.returncode == 2, result.describe()
    assert result.error_line == line, result.describe()
