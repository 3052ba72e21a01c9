"""The recording layer's Python half: build the LD_PRELOAD shim, read its log, and replay it into images.

``recorder.c`` (compiled here with the system ``cc`` once per test session) logs every write, sync, truncate,
create, unlink and rename a process makes under one directory; ``subject.py`` adds a marker record at every
crash point a fencepost process passes (``<name>:before-commit`` / ``<name>:after-commit``). ``Replay`` walks
that log with the model of a disk that loses its cache on power loss (ADR 0059):

- a file's content is durable as of its last completed ``fsync``/``fdatasync``; the writes and truncations made
  since are pending;
- a directory entry (a created, unlinked or renamed name) is durable once its directory was synced; until
  then the durable directory still shows the old entry;
- the *live* image is what the operating system's cache shows (what a SIGKILL leaves); the *durable* image
  drops every pending operation; a *variant* keeps a seeded random subset of them, split at 4096-byte file
  pages, applied in log order (so a later page may survive while an earlier one is lost: torn and reordered
  writes).

Images are written as ordinary files in a fresh directory; SQLite's ``-shm`` file is left out (its content after
a power loss is arbitrary and SQLite rebuilds it from the WAL on the first open).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "recorder.c"
PAGE = 4096
DIR_ENV, LOG_ENV, DROP_ENV = "FENCEPOST_POWERLOSS_DIR", "FENCEPOST_POWERLOSS_LOG", "FENCEPOST_POWERLOSS_DROP_SYNC"


def build_shim(out_dir: Path) -> Path:
    """Compile ``recorder.c`` into ``out_dir/recorder.so`` with the system C compiler; returns the path.

    Raises ``subprocess.CalledProcessError`` (with the compiler's output) when it does not compile.
    """
    out = out_dir / "recorder.so"
    cc = shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(out), str(SOURCE),
                    "-ldl", "-lpthread"], check=True, capture_output=True, text=True)
    return out


def recording_env(shim: Path, root: Path, log: Path, *, drop_sync: int | None = None) -> dict[str, str]:
    """The environment variables that put a subprocess over the recorder (root: the recorded directory)."""
    env = {"LD_PRELOAD": str(shim), DIR_ENV: str(root), LOG_ENV: str(log)}
    if drop_sync is not None:
        env[DROP_ENV] = str(drop_sync)
    return env


@dataclass(frozen=True)
class Op:
    """One log record: ``kind`` W/S/T/C/U/R (see ``recorder.c``) or M (a crash-point marker)."""

    kind: str
    path: str
    offset: int = 0
    data: bytes = b""
    other: str = ""       # R: the new name; M: the pid that passed the crash point


def read_log(log: Path) -> list[Op]:
    """Every record of ``log`` in order (a record cut short by a kill at the very end is dropped)."""
    raw = log.read_bytes() if log.exists() else b""
    ops: list[Op] = []
    i = 0
    while i < len(raw):
        j = raw.find(b"\n", i)
        if j < 0:
            break
        head = raw[i:j].decode("utf-8", "surrogateescape").split("\t")
        i = j + 1
        kind = head[0]
        if kind == "W":
            length = int(head[3])
            if i + length > len(raw):
                break
            ops.append(Op("W", head[1], int(head[2]), raw[i:i + length]))
            i += length
        elif kind == "T":
            ops.append(Op("T", head[1], int(head[2])))
        elif kind == "R":
            ops.append(Op("R", head[1], other=head[2]))
        elif kind == "M":
            ops.append(Op("M", head[2], other=head[1]))
        else:
            ops.append(Op(kind, head[1]))
    return ops


def append_marker(log: Path, name: str) -> None:
    """Append a crash-point marker record (one O_APPEND write, so it never splits another record)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"M\t{os.getpid()}\t{name}\n".encode())
    finally:
        os.close(fd)


@dataclass
class _Inode:
    durable: bytearray
    live: bytearray
    pending: list[tuple[str, int, bytes]] = field(default_factory=list)   # ("W", offset, bytes) | ("T", size, b"")


def _apply(content: bytearray, op: tuple[str, int, bytes]) -> None:
    kind, offset, data = op
    if kind == "T":
        del content[offset:]
        content.extend(b"\0" * (offset - len(content)))
        return
    if len(content) < offset:
        content.extend(b"\0" * (offset - len(content)))
    content[offset:offset + len(data)] = data


def _pages(op: tuple[str, int, bytes]) -> Iterator[tuple[str, int, bytes]]:
    kind, offset, data = op
    if kind != "W":
        yield op
        return
    pos = 0
    while pos < len(data):
        end = min(len(data), ((offset + pos) // PAGE + 1) * PAGE - offset)
        yield ("W", offset + pos, data[pos:end])
        pos = end


class Replay:
    """The disk model, advanced one log record at a time from the files present before recording began.

    Args:
        root: the recorded directory (every path in the log is under it).
        initial: file name (relative to root) -> content, durable and live at the start.
    """

    def __init__(self, root: Path, initial: dict[str, bytes]) -> None:
        self.root = str(root)
        self._inodes: dict[int, _Inode] = {}
        self._live: dict[str, int] = {}
        self._durable: dict[str, int] = {}
        self._pending_dir: list[tuple[str, str, int | None]] = []   # ("link", name, inode) | ("unlink", name, None)
        self._next = 0
        for name, content in initial.items():
            ino = self._new(content)
            self._live[name] = ino
            self._durable[name] = ino

    def _new(self, content: bytes = b"") -> int:
        self._next += 1
        self._inodes[self._next] = _Inode(bytearray(content), bytearray(content))
        return self._next

    def _name(self, path: str) -> str:
        return os.path.relpath(path, self.root)

    def apply(self, op: Op) -> None:
        """Advance the model by one record (markers change nothing)."""
        if op.kind == "M":
            return
        name = self._name(op.path)
        if op.kind == "C":
            ino = self._new()
            self._live[name] = ino
            self._pending_dir.append(("link", name, ino))
        elif op.kind == "U":
            self._live.pop(name, None)
            self._pending_dir.append(("unlink", name, None))
        elif op.kind == "R":
            new = self._name(op.other)
            ino = self._live.pop(name)
            self._live[new] = ino
            self._pending_dir += [("unlink", name, None), ("link", new, ino)]
        elif op.kind == "S":
            # A directory's sync makes its own entries durable; a file's, its content.
            mine = [e for e in self._pending_dir if (os.path.dirname(e[1]) or ".") == name]
            for entry in mine:
                self._dir_apply(entry)
            self._pending_dir = [e for e in self._pending_dir if (os.path.dirname(e[1]) or ".") != name]
            if name in self._live:
                node = self._inodes[self._live[name]]
                for pending in node.pending:
                    _apply(node.durable, pending)
                node.pending.clear()
        elif op.kind in ("W", "T") and name in self._live:
            node = self._inodes[self._live[name]]
            change = (op.kind, op.offset, op.data)
            _apply(node.live, change)
            node.pending.append(change)

    def _dir_apply(self, entry: tuple[str, str, int | None]) -> None:
        kind, name, ino = entry
        if kind == "link" and ino is not None:
            self._durable[name] = ino
        else:
            self._durable.pop(name, None)

    def unsynced(self) -> int:
        """How many operations (page pieces and directory entries) are pending right now."""
        return (sum(len(list(_pages(p))) for n in self._inodes.values() for p in n.pending)
                + len(self._pending_dir))

    def live_files(self) -> dict[str, bytes]:
        """What the operating system's cache shows: every live name with all its writes."""
        return {name: bytes(self._inodes[ino].live) for name, ino in self._live.items()}

    def durable_files(self, rng: random.Random | None = None, keep: float = 0.5) -> dict[str, bytes]:
        """The files after a power cut now: without ``rng`` only what was synced; with it, each pending page
        piece and directory entry also survives with probability ``keep`` (seeded, applied in log order)."""
        names = dict(self._durable)
        for entry in self._pending_dir:
            if rng is not None and rng.random() < keep:
                kind, name, ino = entry
                if kind == "link" and ino is not None:
                    names[name] = ino
                else:
                    names.pop(name, None)
        files: dict[str, bytes] = {}
        for name, ino in names.items():
            node = self._inodes[ino]
            content = bytearray(node.durable)
            if rng is not None:
                for pending in node.pending:
                    for piece in _pages(pending):
                        if rng.random() < keep:
                            _apply(content, piece)
            files[name] = bytes(content)
        return files


def write_image(files: dict[str, bytes], into: Path) -> Path:
    """Write an image's files (without ``-shm``) into a fresh directory ``into``; returns it."""
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    for name, content in files.items():
        if name.endswith("-shm") or name == ".":
            continue
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        (into / name).write_bytes(content)
    return into
