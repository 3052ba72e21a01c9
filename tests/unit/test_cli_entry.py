"""``fencepost.cli.entry``: a Ctrl-C while the command line is still being imported (most of a second) is one
line and exit 130, as it is once the command runs, never an import traceback (a break-it trial: SIGINT 1.1 s
after starting ``fencepost rehearse`` printed a KeyboardInterrupt traceback and died of the signal)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

import pytest

from fencepost.cli import entry


class _InterruptedImport(MetaPathFinder):
    """Raises KeyboardInterrupt when ``fencepost.cli.app`` is imported: the signal arriving mid-import."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname == "fencepost.cli.app":
            raise KeyboardInterrupt
        return None


def test_an_interrupt_during_the_import_is_one_line_and_exit_130(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delitem(sys.modules, "fencepost.cli.app", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport(), *sys.meta_path])
    with pytest.raises(SystemExit) as ended:
        entry.main()
    assert ended.value.code == 130
    assert capsys.readouterr().err == "fencepost: interrupted\n"


def test_the_console_script_and_python_m_both_start_here() -> None:
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "fencepost"]
    assert script.value == "fencepost.cli.entry:main"
    import fencepost.cli.__main__ as module_main

    assert module_main.main is entry.main
