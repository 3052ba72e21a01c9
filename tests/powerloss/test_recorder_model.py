"""The disk model the power-loss harness replays (``recorder.Replay``, ADR 0059), on hand-written logs:
content is durable at its file's sync, a directory entry at its directory's sync, and variants keep subsets
of the pending pages. Also the shim itself, on a real process: what it logs matches what the process did."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

from recorder import PAGE, Op, Replay, read_log, recording_env

ROOT = Path("/r")


def _replay(*ops: Op, initial: dict[str, bytes] | None = None) -> Replay:
    replay = Replay(ROOT, initial or {})
    for op in ops:
        replay.apply(op)
    return replay


def test_writes_are_durable_only_once_their_file_is_synced() -> None:
    replay = _replay(Op("W", "/r/f", 0, b"new!"), initial={"f": b"old."})
    assert replay.live_files() == {"f": b"new!"}
    assert replay.durable_files() == {"f": b"old."}
    replay.apply(Op("S", "/r/f"))
    assert replay.durable_files() == {"f": b"new!"}


def test_a_created_or_unlinked_name_is_durable_only_once_its_directory_is_synced() -> None:
    replay = _replay(Op("C", "/r/j"), Op("W", "/r/j", 0, b"journal"), Op("S", "/r/j"), initial={"db": b"x"})
    assert replay.durable_files() == {"db": b"x"}               # the file's sync does not sync its name
    replay.apply(Op("S", "/r"))
    assert replay.durable_files() == {"db": b"x", "j": b"journal"}
    replay.apply(Op("U", "/r/j"))
    assert "j" not in replay.live_files()
    assert replay.durable_files() == {"db": b"x", "j": b"journal"}   # the unlink is lost without a dir sync
    replay.apply(Op("S", "/r"))
    assert replay.durable_files() == {"db": b"x"}


def test_variants_keep_subsets_of_pending_pages_in_log_order() -> None:
    old = b"\0" * (3 * PAGE)
    replay = _replay(Op("W", "/r/f", 0, b"a" * (3 * PAGE)), initial={"f": old})
    assert replay.unsynced() == 3
    seen = set()
    for seed in range(40):
        content = replay.durable_files(random.Random(seed))["f"]
        seen.add(tuple(content[i * PAGE:(i + 1) * PAGE] == b"a" * PAGE for i in range(3)))
    assert (True, False, True) in seen and (False, True, False) in seen   # torn and reordered
    assert len(seen) == 8


def test_the_shim_logs_what_a_process_wrote_and_synced(shim: Path, tmp_path: Path) -> None:
    root = tmp_path / "rec"
    root.mkdir()
    (tmp_path / "outside").write_bytes(b"")
    log = tmp_path / "log"
    script = (f"import os\nfd = os.open({str(root / 'f')!r}, os.O_RDWR | os.O_CREAT)\n"
              "os.pwrite(fd, b'hello', 3)\nos.fsync(fd)\nos.write(fd, b'xy')\nos.ftruncate(fd, 4)\nos.close(fd)\n"
              f"os.rename({str(root / 'f')!r}, {str(root / 'g')!r})\nos.unlink({str(root / 'g')!r})\n"
              f"open({str(tmp_path / 'outside')!r}, 'w').write('not recorded')\n")
    subprocess.run([sys.executable, "-c", script], env=recording_env(shim, root, log), check=True)
    f, g = str(root / "f"), str(root / "g")
    assert read_log(log) == [Op("C", f), Op("W", f, 3, b"hello"), Op("S", f), Op("W", f, 0, b"xy"),
                             Op("T", f, 4), Op("R", f, other=g), Op("U", g)]
