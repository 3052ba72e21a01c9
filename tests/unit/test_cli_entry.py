"""``fencepost.cli.entry``: a Ctrl-C while the command line is still being imported (most of a second) is one
line and exit 130, as it is once the command runs, never an import traceback (a break-it trial: SIGINT 1.1 s
after starting ``fencepost rehearse`` printed a KeyboardInterrupt traceback and died of the signal)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

import pytest

from fencepost.cli import entry
from helpers.processes import subprocess_env


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
    previous = signal.getsignal(signal.SIGINT)  # entry.main takes SIGINT over; give it back to this process
    try:
        with pytest.raises(SystemExit) as ended:
            entry.main()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert ended.value.code == 130
    assert capsys.readouterr().err == "fencepost: interrupted\n"


def test_the_console_script_and_python_m_both_start_here() -> None:
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "fencepost"]
    assert script.value == "fencepost.cli.entry:main"
    import fencepost.cli.__main__ as module_main

    assert module_main.main is entry.main


# A Ctrl-C while a command's own module is imported (cli.lazy), as a break-it trial's SIGINT loops found it. Each
# script arms a real SIGINT at the moment the trial caught, then runs the real entry point on ``migrate``.
_WRAPPED = '''
import dataclasses, os, signal, sys
original = dataclasses.Field.__set_name__
armed = [False]
def set_name(self, owner, name):
    if armed[0] and owner.__module__.startswith("fencepost.store"):
        armed[0] = False
        os.kill(os.getpid(), signal.SIGINT)  # delivered inside __set_name__: Python 3.11 wraps it in RuntimeError
        for _ in range(3): pass
    return original(self, owner, name)
dataclasses.Field.__set_name__ = set_name
from fencepost.cli import entry
import fencepost.cli.app
armed[0] = True
sys.argv = ["fencepost", *sys.argv[1:]]
entry.main("fencepost")
'''

_SWALLOWED = '''
import importlib, os, signal, sys, weakref
from fencepost.cli import entry, lazy
import fencepost.cli.app
real = importlib.import_module
class Thing: pass
def import_module(name, *args, **kwargs):
    if name.startswith("fencepost.cli."):
        thing = Thing()
        def callback(ref):  # Python prints "Exception ignored in" for what a weakref callback raises, and goes on
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(3): pass
        ref = weakref.ref(thing, callback)
        del thing
    return real(name, *args, **kwargs)
lazy.importlib.import_module = import_module
sys.argv = ["fencepost", *sys.argv[1:]]
entry.main("fencepost")
'''


@pytest.mark.parametrize("script", [_WRAPPED, _SWALLOWED], ids=["wrapped-in-runtime-error", "swallowed-by-python"])
def test_an_interrupt_while_a_command_is_imported_stops_it_before_it_runs(script: str, tmp_path: Path) -> None:
    database = tmp_path / "control.db"
    done = subprocess.run([sys.executable, "-c", script, "migrate", "-d", f"sqlite:///{database}"],
                          env=subprocess_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 130, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == "fencepost: interrupted", done.stderr
    if script is _WRAPPED:  # (the swallowed one shows Python's own "Exception ignored in" report first)
        assert "Traceback" not in done.stderr, done.stderr
    assert not database.exists(), "the command ran although it was interrupted"


def test_importing_the_package_imports_nothing_else_so_the_entry_point_guards_every_import() -> None:
    """The console script imports ``fencepost`` before ``entry.main`` can answer a Ctrl-C: that import stays
    empty (its re-exports load on first use), so a Ctrl-C there has almost no window (a break-it trial)."""
    probe = ("import sys, fencepost; print(sorted(m for m in sys.modules if m.startswith('fencepost')));"
             "from fencepost import FencepostError, WITHHELD; print(FencepostError.__name__, WITHHELD)")
    done = subprocess.run([sys.executable, "-c", probe], env=subprocess_env(), capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['fencepost']", "FencepostError WITHHELD"], done.stdout


# A Ctrl-C while the command line itself (fencepost.cli.app: typer, click) is imported, in the two forms Python
# can turn it into: a RuntimeError wrapping it (a class body being built), or nothing (dropped in a callback).
_AT_START = '''
import os, signal, sys, weakref
from importlib.abc import MetaPathFinder
MODE = sys.argv.pop(1)
class Named:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGINT)  # delivered here: Python 3.11 raises RuntimeError from it
        for _ in range(3): pass
class Thing: pass
class Finder(MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname == "fencepost.cli.app":
            sys.meta_path.remove(self)
            if MODE == "wrapped":
                type("Probe", (), {"field": Named()})
            else:
                thing = Thing()
                def callback(ref):
                    os.kill(os.getpid(), signal.SIGINT)
                    for _ in range(3): pass
                ref = weakref.ref(thing, callback)
                del thing
        return None
sys.meta_path.insert(0, Finder())
from fencepost.cli import entry
sys.argv = ["fencepost", *sys.argv[1:]]
entry.main("fencepost")
'''


@pytest.mark.parametrize("mode", ["wrapped", "dropped"])
def test_an_interrupt_while_the_command_line_is_imported_stops_it_with_one_line(mode: str, tmp_path: Path) -> None:
    database = tmp_path / "control.db"
    done = subprocess.run([sys.executable, "-c", _AT_START, mode, "migrate", "-d", f"sqlite:///{database}"],
                          env=subprocess_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 130, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == "fencepost: interrupted", done.stderr
    assert not database.exists(), "the command ran although it was interrupted"


def test_a_ctrl_c_after_the_command_succeeded_leaves_its_exit_code_alone(tmp_path: Path) -> None:
    """A trial's Ctrl-C just after `migrate` printed its line killed it by SIGINT (130) though it had succeeded."""
    script = ("import os, signal, sys, time\nfrom fencepost.cli import entry\nsys.argv = ['fencepost', *sys.argv[1:]]\n"
              "try:\n    entry.main('fencepost')\nexcept SystemExit as ended:\n    code = ended.code\n"
              "os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.3)\nsys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", script, "migrate", "-d", f"sqlite:///{tmp_path / 'c.db'}"],
                          env=subprocess_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "schema at version" in done.stdout
