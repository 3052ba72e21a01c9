"""Real fencepost subprocesses for the tests: their environment, the CLI, long-lived processes, their output.

Every suite that runs ``python -m fencepost.cli`` (or a script of its own that imports fencepost) as a real
process goes through this module, so that environment, bounds and kill semantics are written once:

- ``subprocess_env``: this environment without any ``FENCEPOST_*`` setting leaking in, plus what the test
  names (a crash point: ``FENCEPOST_CRASHPOINT``, see ``fencepost.core.crashpoints``);
- ``run_cli``: one CLI invocation, bounded, its exit code and output in a ``CliResult``;
- ``start``: a long-lived process (worker, server) with stdout and stderr in files, as a ``Process`` that
  waits for its exit with a bound, stops it with SIGTERM, kills it with SIGKILL and parses its JSON log;
- ``start_piped``: a process whose stdout is read line by line (``PipedProcess.next_line``/``expect``, bounded);
- ``kill_all``: teardown, SIGKILL by pid of whatever a test left running.

Nothing here sleeps hoping for a state: waits are bounded and condition-driven (``helpers.waiting``).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.waiting import wait_until

FENCEPOST = [sys.executable, "-m", "fencepost.cli"]
CRASHPOINT_ENV = "FENCEPOST_CRASHPOINT"
KILLED = -signal.SIGKILL        # Popen's returncode for a process that died of SIGKILL
CLI_TIMEOUT = 120.0             # seconds for one CLI invocation
EXIT_TIMEOUT = 30.0             # seconds for a signalled or crashing process to exit
STATE_TIMEOUT = 60.0            # seconds for a process to reach a state: started, at its crash point (two busy cores)


# ── environment ──
def subprocess_env(*, crashpoint: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a fencepost subprocess.

    This process's environment without any ``FENCEPOST_*`` variable (so a developer's settings never leak
    into a test) except the seal key variables, which ``tests/conftest.py`` sets to the suite's own key file
    (a worker subprocess must seal with the key the test verifies with; ADR 0064), plain output
    (``NO_COLOR``, 200 columns), unbuffered, no bytecode files; then ``extra``
    (e.g. ``FENCEPOST_DATABASE=...``) and, when given, ``FENCEPOST_CRASHPOINT=crashpoint``
    (``<transaction>:<before|after>-commit[@n]``: the process SIGKILLs itself there).
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FENCEPOST_") or k in ("FENCEPOST_SEAL_KEY_FILE", "FENCEPOST_SEAL_KEYS")}
    env.update({"NO_COLOR": "1", "COLUMNS": "200", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra)
    if crashpoint is not None:
        env[CRASHPOINT_ENV] = crashpoint
    return env


# ── one CLI invocation ──
@dataclass
class CliResult:
    """What one ``fencepost`` invocation did.

    Attributes:
        args: the arguments after ``fencepost``.
        returncode: the exit code (negative: killed by that signal, ``KILLED`` for SIGKILL).
        crash: the crash point it was started with, if any (shown by ``describe``).
    """

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    crash: str | None = None

    def json(self) -> Any:
        """stdout parsed as JSON (raises ``json.JSONDecodeError`` when it is not)."""
        return json.loads(self.stdout)

    @property
    def stderr_lines(self) -> list[str]:
        """The non-blank lines of stderr."""
        return [line for line in self.stderr.splitlines() if line.strip()]

    @property
    def error_line(self) -> str:
        """The one non-blank stderr line (AssertionError when there are more or none)."""
        lines = self.stderr_lines
        assert len(lines) == 1, self.describe()
        return lines[0]

    def describe(self) -> str:
        """The command, its exit code and both outputs, for assertion messages."""
        armed = f" [{CRASHPOINT_ENV}={self.crash}]" if self.crash else ""
        return (f"fencepost {' '.join(self.args)}{armed} -> exit {self.returncode}\n--- stdout ---\n"
                f"{self.stdout}--- stderr ---\n{self.stderr}")


def run_cli(args: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
            crash: str | None = None, timeout: float = CLI_TIMEOUT, stdin: str | None = None,
            argv_prefix: Sequence[str] = FENCEPOST) -> CliResult:
    """Run ``fencepost ARGS`` to completion and return what it did (asserts nothing about it).

    Args:
        env: the whole environment (default ``subprocess_env()``); ``crash`` is added to it.
        timeout: seconds; ``subprocess.TimeoutExpired`` (the process is killed) beyond it.
        stdin: text fed to its stdin; None leaves stdin inherited.
        argv_prefix: what runs (default ``python -m fencepost.cli``).
    """
    full_env = dict(env if env is not None else subprocess_env())
    if crash is not None:
        full_env[CRASHPOINT_ENV] = crash
    options: dict[str, Any] = {} if stdin is None else {"input": stdin}
    done = subprocess.run([*argv_prefix, *args], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout, check=False, **options)
    return CliResult(list(args), done.returncode, done.stdout, done.stderr, crash)


# ── long-lived processes ──
@dataclass
class Process:
    """A running subprocess whose stdout and stderr go to files (``stderr_path`` None: into stdout's file).

    Attributes:
        name: what the test calls it (in messages).
        args: the arguments after the argv prefix.
        crash: the armed crash point, if any.
        worker_id: the ``--worker-id`` it was given, if any.
        strict_json: every complete log line must be a JSON object (a fencepost worker with
            ``--log-format json``); a line that is not fails the test instead of being skipped.
        started_event: the log event after which the process handles SIGTERM (``worker_started``); ``stop``
            waits for it first, since a process still importing would just die of the signal.
    """

    name: str
    proc: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path | None = None
    args: list[str] = field(default_factory=list)
    crash: str | None = None
    worker_id: str | None = None
    strict_json: bool = False
    started_event: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def log_path(self) -> Path:
        """The file stderr (fencepost's log) goes to."""
        return self.stderr_path or self.stdout_path

    @property
    def stdout(self) -> str:
        return _read(self.stdout_path)

    @property
    def stderr(self) -> str:
        """stderr so far (with stdout too when they share a file)."""
        return _read(self.log_path)

    @property
    def log(self) -> str:
        """The log so far (``stderr``)."""
        return self.stderr

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON object line of the log.

        With ``strict_json`` only complete lines count and one that is not a JSON object raises
        AssertionError; otherwise other lines (a partial last line, text) are skipped.
        """
        text = self.log
        if self.strict_json:
            text = text[: text.rfind("\n") + 1]
        entries = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                if self.strict_json:
                    raise AssertionError(f"process {self.name!r} wrote a non-JSON log line: {line!r}") from None
                continue
            if isinstance(entry, dict):
                entries.append(entry)
            elif self.strict_json:
                raise AssertionError(f"process {self.name!r} wrote a log line that is not an object: {line!r}")
        return entries

    def events(self, event: str) -> list[dict[str, Any]]:
        """The log entries whose ``event`` is ``event``."""
        return [e for e in self.logs() if e.get("event") == event]

    def started_id(self, timeout: float = STATE_TIMEOUT) -> str:
        """The worker id from its ``worker_started`` log line (waits for it)."""
        entry = wait_until(lambda: self.events("worker_started"), timeout, what=f"process {self.name!r} to start")[0]
        return str(entry["worker"])

    def describe(self) -> str:
        """Name, crash point, exit code and the log's tail, for assertion messages."""
        armed = f" [{CRASHPOINT_ENV}={self.crash}]" if self.crash else ""
        return f"process {self.name!r}{armed}, exit {self.proc.poll()}\n--- log (tail) ---\n{self.log[-4000:]}"

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = EXIT_TIMEOUT, what: str = "exit") -> int:
        """Wait for the exit code; after ``timeout`` seconds SIGKILL it, reap it and raise AssertionError."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"process {self.name!r} did not {what} within {timeout:g} s\n"
                                 f"{self.describe()}") from None

    def stop(self, timeout: float = EXIT_TIMEOUT) -> int:
        """SIGTERM (graceful stop; once ``started_event`` is logged, if set) and return the exit code."""
        if self.started_event is not None:
            event = self.started_event
            wait_until(lambda: not self.alive or self.events(event), STATE_TIMEOUT,
                       what=f"process {self.name!r} to finish starting")
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout, what="stop on SIGTERM")

    def stop_cleanly(self, timeout: float = EXIT_TIMEOUT) -> None:
        """``stop``, which must end in exit 0 without a traceback in the log."""
        code = self.stop(timeout)
        assert code == 0, self.describe()
        assert "Traceback" not in self.log, self.describe()

    def wait_killed(self, timeout: float = STATE_TIMEOUT) -> None:
        """The process must die of SIGKILL (its armed crash point) within ``timeout``, without a traceback."""
        code = self.wait_exit(timeout, what=f"die at crash point {self.crash}")
        assert code == KILLED, f"expected death by SIGKILL\n{self.describe()}"
        assert "Traceback" not in self.log, self.describe()

    def kill(self) -> None:
        """SIGKILL (like a power cut of its machine) if still running, and reap it."""
        if self.alive:
            self.proc.kill()
        self.proc.wait(timeout=EXIT_TIMEOUT)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def start(args: Sequence[str], *, name: str, stdout_path: Path, stderr_path: Path | None = None,
          cwd: Path | None = None, env: Mapping[str, str] | None = None, crash: str | None = None,
          argv_prefix: Sequence[str] = FENCEPOST, worker_id: str | None = None, strict_json: bool = False,
          started_event: str | None = None) -> Process:
    """Start ``fencepost ARGS`` (or ``argv_prefix ARGS``) with its output in files; see ``Process``.

    Args:
        env: the whole environment (default ``subprocess_env()``); ``crash`` is added to it.
        stderr_path: None sends stderr into ``stdout_path``.
    """
    full_env = dict(env if env is not None else subprocess_env())
    if crash is not None:
        full_env[CRASHPOINT_ENV] = crash
    argv = [*argv_prefix, *args]
    with open(stdout_path, "wb") as out:
        if stderr_path is None:
            proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=out, stderr=subprocess.STDOUT)
        else:
            with open(stderr_path, "wb") as err:
                proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=out, stderr=err)
    return Process(name, proc, stdout_path, stderr_path, list(args), crash, worker_id, strict_json, started_event)


def worker_args(url: str, work_dir: Path, *, lease_seconds: float, poll_interval: float,
                batch_size: int | None = None, worker_id: str | None = None, log_format: str = "json",
                extra: Iterable[str] = ()) -> list[str]:
    """The arguments of ``fencepost worker`` on database ``url`` (seconds as given; unset options default)."""
    args = ["worker", "-d", url, "--work-dir", str(work_dir), "--lease-seconds", f"{lease_seconds:g}",
            "--poll-interval", f"{poll_interval:g}", "--log-format", log_format]
    if batch_size is not None:
        args += ["--batch-size", str(batch_size)]
    if worker_id is not None:
        args += ["--worker-id", worker_id]
    return [*args, *extra]


def kill_all(processes: Iterable[Process]) -> None:
    """Teardown: SIGKILL (by pid) and reap every process still running; every one is tried, then the first
    failure (a process that would not die) is raised."""
    failures: list[BaseException] = []
    for process in processes:
        try:
            process.kill()
        except Exception as error:  # keep killing the others
            failures.append(error)
    if failures:
        raise failures[0]


# ── a process whose stdout is read line by line ──
@dataclass
class PipedProcess:
    """A subprocess whose stdout lines a reader thread collects, so that a test can wait for one with a bound.

    Attributes:
        stderr_path: the file its stderr goes to.
        seen: every line consumed so far by ``next_line``/``expect``.
    """

    popen: subprocess.Popen[str]
    stderr_path: Path
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)
    _reader: threading.Thread | None = None

    def start_reader(self) -> None:
        def read() -> None:
            assert self.popen.stdout is not None
            for line in self.popen.stdout:
                self.lines.put(line.rstrip("\n"))

        self._reader = threading.Thread(target=read, name="stdout-reader", daemon=True)
        self._reader.start()

    @property
    def stderr(self) -> str:
        return _read(self.stderr_path)

    def next_line(self, timeout: float = 20.0) -> str:
        """The next stdout line; AssertionError if none comes within ``timeout`` seconds (or stdout closes)."""
        line = self._next(time.monotonic() + timeout)
        if line is None:
            raise AssertionError(f"no stdout line within {timeout:g} s; saw {self.seen!r} (exit {self.popen.poll()})")
        return line

    def expect(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """Consume stdout lines until one matches ``pattern``; AssertionError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while (line := self._next(deadline)) is not None:
            if match := regex.search(line):
                return match
        raise AssertionError(f"no line matching {pattern!r}; saw {self.seen!r} (exit {self.popen.poll()})")

    def _next(self, deadline: float) -> str | None:
        """The next line before ``deadline`` (``time.monotonic``), or None once stdout is exhausted."""
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                reading = self._reader is not None and self._reader.is_alive()
                if self.popen.poll() is not None and self.lines.empty() and not reading:
                    return None
                continue
            self.seen.append(line)
            return line
        return None

    def rest(self, timeout: float = EXIT_TIMEOUT) -> str:
        """After the process exited: every stdout line not consumed yet, joined with newlines."""
        if self._reader is not None:
            self._reader.join(timeout)
        remaining = []
        with suppress(queue.Empty):
            while True:
                remaining.append(self.lines.get_nowait())
        return "".join(line + "\n" for line in remaining)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send ``sig`` if still running and wait; SIGKILL after ``timeout`` seconds. Returns the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode


def start_piped(args: Sequence[str], *, stderr_path: Path, cwd: Path | None = None,
                env: Mapping[str, str] | None = None, append: bool = False,
                argv_prefix: Sequence[str] = FENCEPOST) -> PipedProcess:
    """Start ``fencepost ARGS`` with stdout read line by line and stderr into ``stderr_path`` (appended to
    with ``append``); env defaults to ``subprocess_env()``."""
    with open(stderr_path, "ab" if append else "wb") as err:
        popen = subprocess.Popen([*argv_prefix, *args], stdout=subprocess.PIPE, stderr=err, text=True,
                                 env=dict(env if env is not None else subprocess_env()), cwd=cwd)
    piped = PipedProcess(popen, stderr_path)
    piped.start_reader()
    return piped
