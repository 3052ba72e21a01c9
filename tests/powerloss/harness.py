"""The simulated power-loss harness: record a real fencepost flow, cut the power at chosen instants, check
every image the cut can leave, recover it and compare with the crash-free run.

``record_rehearsal`` runs the real CLI and worker (``subject.py``: ``fencepost`` with crash-point markers) over
the recorder, on a control database migrated beforehand: ``rehearsal create`` of the inventory example,
``rehearsal attempt``, and a worker until the Attempt succeeded. That run is the crash-free reference (its
final live state, summarized as the SIGKILL matrix does). ``record_admission`` records ``workflow admit`` of a
128-step plan, ``record_host`` an action invocation through ``tests/crash/host_subject.py`` (its provider's
ledger on the recorded disk), and ``record_raw`` the standard library's ``sqlite3`` alone at a chosen SQLite
``PRAGMA synchronous`` level.

``instants`` picks where the power goes: at every crash point (each side of every COMMIT of every named
transaction the flow runs) and, for the largest transactions, after each write and sync between a
``before-commit`` and its ``after-commit`` (inside COMMIT: the journal or WAL being written and synced).

``Cut.check`` judges one image by the states the live log went through. Every *committed state* is recorded:
the live database right after each WAL commit frame (WAL) or each unlink of the rollback journal (DELETE),
as a dump of every row (``iterdump``). An image must pass ``PRAGMA integrity_check`` and equal one committed
state (anything else is a partial fact): with ``synchronous=FULL`` one no older than the last COMMIT that had
returned (its ``after-commit`` marker precedes the cut) — so no returned COMMIT is lost; with ``NORMAL``
(WAL) any earlier one. ``fencepost audit``'s checks (``crash_harness.unsound``) must be clean on it, and
``recover`` converges it (run again what had not answered, then a worker to completion) to the reference.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crash_flows import EXAMPLE_PACKAGE, drain
from crash_harness import LEASE_SECONDS, POLL_SECONDS, CrashDB, Summary, Workers, cli, summarize, unsound
from recorder import Op, Replay, read_log, recording_env, write_image
from wf_support import ADMISSION_TABLES, PACKAGE, WORKFLOW, expected_admission_counts, table_counts, write_package

from fencepost.catalog.lifecycle import CatalogService
from fencepost.rehearsal.service import release_gate
from fencepost.store import open_store
from fencepost.workflows.service import WorkflowService
from helpers.processes import CLI_TIMEOUT, STATE_TIMEOUT, subprocess_env, worker_args

SUBJECT = [sys.executable, str(Path(__file__).resolve().parent / "subject.py")]
DB_FILE = "control.db"
# The largest transactions of this flow: each Receipt's evidence write (and the Attempt's six Receipts).
# (Admission: the 128-step plan's one transaction, 516 inserts.)
LARGE = ("rehearsal.receipt", "rehearsal.enqueue", "rehearsal.succeed", "workflow.admit", "host.finalize",
         "host.settle", "raw.insert")
HOST_SUBJECT = Path(__file__).resolve().parents[1] / "crash" / "host_subject.py"
LEDGER_FILES = ("requests", "charges", "lock")


def sqlite_url(directory: Path, mode: str, synchronous: str) -> str:
    return f"sqlite:///{directory / DB_FILE}?journal_mode={mode}&synchronous={synchronous}"


@dataclass
class Recording:
    """One recorded crash-free flow.

    Attributes:
        flow: ``rehearsal``, ``admission`` or ``raw`` (which ``recover`` applies).
        mode, synchronous: the SQLite settings of every process of the flow.
        root: the recorded directory (holds ``control.db`` and its journal or WAL).
        initial: the files of ``root`` before recording began (migrated, closed, synced).
        ops: the recorder's log.
        run_id, attempt_id: what the flow created (admission: the plan file and ""; raw: "" and "").
        reference: the flow's outcome (rehearsal: the ``Summary`` of its final live state; admission: the
            receipt it printed; raw: None).
    """

    flow: str
    mode: str
    synchronous: str
    root: Path
    initial: dict[str, bytes]
    ops: list[Op]
    run_id: str
    attempt_id: str
    reference: Any


def _run(args: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run([*SUBJECT, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stdout, done.stderr)
    return done.stdout


def _wait_marker(log: Path, name: str, proc: subprocess.Popen[bytes], what: Path) -> None:
    deadline = time.monotonic() + STATE_TIMEOUT
    needle = f"\t{name}\n".encode()
    while time.monotonic() < deadline:
        if log.exists() and needle in log.read_bytes():
            return
        assert proc.poll() is None, f"the recorded worker exited early:\n{what.read_text(errors='replace')}"
        time.sleep(0.05)
    raise AssertionError(f"no {name} within {STATE_TIMEOUT}s:\n{what.read_text(errors='replace')}")


def _migrated(base: Path, mode: str, synchronous: str) -> tuple[Path, str]:
    root = base / "db"
    root.mkdir(parents=True)
    url = sqlite_url(root, mode, synchronous)
    store = open_store(url, create=True)
    try:
        store.migrate()
    finally:
        store.close()
    return root, url


def _initial(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.iterdir() if not p.name.endswith("-shm")}


def _replayed(root: Path, initial: dict[str, bytes], ops: list[Op]) -> Replay:
    replay = Replay(root, initial)
    for op in ops:
        replay.apply(op)
    return replay


def record_rehearsal(shim: Path, base: Path, *, mode: str, synchronous: str,
                     drop_sync: int | None = None, worker: bool = True) -> Recording:
    """Record ``rehearsal create``, ``rehearsal attempt`` and (``worker``) a worker running the Attempt to
    SUCCEEDED.

    ``drop_sync`` is the recorder's test-only fault (``recorder.c``). Nothing but the recorded processes
    touches the database while recording (a reader here could checkpoint it behind the recorder's back).
    """
    root, url = _migrated(base, mode, synchronous)
    initial = _initial(root)
    log = base / "recorder.log"
    env = subprocess_env(**recording_env(shim, root, log, drop_sync=drop_sync))
    created = json.loads(_run(["rehearsal", "create", str(EXAMPLE_PACKAGE), "--json", "-d", url], env, base))
    run_id = str(created["id"])
    enqueued = json.loads(_run(["rehearsal", "attempt", run_id, "--json", "-d", url], env, base))
    attempt_id = str(enqueued["id"])
    if worker:
        _work(url, env, base, log)
    ops = read_log(log)
    final = CrashDB("sqlite-" + mode, sqlite_url(write_image(_replayed(root, initial, ops).live_files(),
                                                             base / "final"), mode, synchronous), base / "final-root")
    try:
        reference = summarize(final, run_id)
    finally:
        final.close()
    return Recording("rehearsal", mode, synchronous, root, initial, ops, run_id, attempt_id, reference)


def _work(url: str, env: dict[str, str], base: Path, log: Path) -> None:
    """A recorded worker until the Attempt's ``rehearsal.succeed`` returned, then stopped by SIGTERM."""
    worker_log = base / "worker.log"
    args = worker_args(url, base / "work", lease_seconds=LEASE_SECONDS, poll_interval=POLL_SECONDS,
                       batch_size=1, worker_id="recorded")
    with open(worker_log, "wb") as out:
        proc = subprocess.Popen([*SUBJECT, *args], cwd=base, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_marker(log, "rehearsal.succeed:after-commit", proc, worker_log)
        proc.terminate()
        assert proc.wait(timeout=STATE_TIMEOUT) == 0, worker_log.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


ADMISSION_STEPS = 128


def record_admission(shim: Path, base: Path, *, mode: str, synchronous: str) -> Recording:
    """Record ``fencepost workflow admit`` of a 128-step plan (the largest admission there is), on a control
    database where the plan's package was published and installed beforehand (not recorded)."""
    root, url = _migrated(base, mode, synchronous)
    store = open_store(url, create=False)
    try:
        catalog = CatalogService(store, release_gate=release_gate)
        catalog.publish(write_package(base / "packages", extra_steps=ADMISSION_STEPS - 2), allow_ungated=True)
        catalog.install(PACKAGE)
        plan = WorkflowService(store).plan(PACKAGE, WORKFLOW, plan_id="power-loss")
    finally:
        store.close()
    plan_file = base / "plan.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    initial = _initial(root)
    log = base / "recorder.log"
    env = subprocess_env(**recording_env(shim, root, log))
    admitted = json.loads(_run(["workflow", "admit", str(plan_file), "--json", "-d", url], env, base))
    assert admitted["outcome"] == "created", admitted
    return Recording("admission", mode, synchronous, root, initial, read_log(log), str(plan_file), "",
                     admitted["receipt"])


def _host(url: str, root: Path, mode: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """``host_subject.py URL LEDGER MODE 1 flaky`` (an idempotent charge whose first call fails
    transiently) to its end; returns the JSON it printed last (``{}`` when it printed none)."""
    done = subprocess.run([*SUBJECT, "--script", str(HOST_SUBJECT), url, str(root / "ledger"), mode, "1", "flaky"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, (mode, done.stdout, done.stderr)
    lines = [line for line in done.stdout.strip().splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def record_host(shim: Path, base: Path, *, mode: str, synchronous: str) -> Recording:
    """Record an action invocation submitted and worked to its verdict through ``host_subject.py`` (host
    submit, claim, handler, step rows and attempts, checkpoint, settle, finalize). The provider's ledger
    (fsynced before each reply) lives in the recorded directory too, so every image carries the provider's
    ground truth as of the cut."""
    root, url = _migrated(base, mode, synchronous)
    (root / "ledger").mkdir()
    for name in LEDGER_FILES:
        (root / "ledger" / name).touch()
    initial = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
               if p.is_file() and not p.name.endswith("-shm")}
    log = base / "recorder.log"
    env = subprocess_env(**recording_env(shim, root, log))
    _host(url, root, "submit", env, base)
    verdict = _host(url, root, "work", env, base)
    assert verdict.get("status") == "succeeded", verdict
    return Recording("host", mode, synchronous, root, initial, read_log(log), "", "",
                     {"status": "succeeded", "charges": 1})


RAW_SCRIPT = """
import sqlite3, sys
sys.path.insert(0, {here!r})
from recorder import append_marker
from pathlib import Path
log = Path({log!r})
conn = sqlite3.connect({db!r}, isolation_level=None)
conn.execute("PRAGMA journal_mode={mode}")
conn.execute("PRAGMA synchronous={level}")
conn.execute("CREATE TABLE IF NOT EXISTS fact (n INTEGER PRIMARY KEY, body TEXT NOT NULL)")
for n in range(1, {count} + 1):
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO fact VALUES (?, ?)", (n, "x" * 3000))
    append_marker(log, "raw.insert:before-commit")
    conn.execute("COMMIT")
    append_marker(log, "raw.insert:after-commit")
conn.close()
"""


def record_raw(shim: Path, base: Path, *, mode: str, level: str, count: int = 4) -> Recording:
    """Record the standard library's ``sqlite3`` alone (no fencepost) committing ``count`` one-row
    transactions at SQLite's ``PRAGMA synchronous=<level>`` (so a level fencepost never uses can be shown)."""
    root = base / "db"
    root.mkdir(parents=True)
    log = base / "recorder.log"
    script = RAW_SCRIPT.format(here=str(Path(__file__).resolve().parent), log=str(log), db=str(root / DB_FILE),
                               mode=mode, level=level, count=count)
    env = subprocess_env(**recording_env(shim, root, log))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    return Recording("raw", mode, "full", root, {}, read_log(log), "", "", None)


# ── reading an image ──
def image_digest(directory: Path) -> str:
    """``integrity_check`` then a digest of every row (``iterdump``), on a private copy of the image (the
    ordinary driver rolls back a hot journal or replays the WAL as it opens); ``corrupt: ...`` otherwise."""
    copy = directory.with_name(directory.name + "-read")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(directory, copy)
    try:
        conn = sqlite3.connect(copy / DB_FILE, isolation_level=None)
        try:
            check = conn.execute("PRAGMA integrity_check").fetchall()
            if check != [("ok",)]:
                return f"corrupt: {check[:3]}"
            text = "\n".join(conn.iterdump())
        finally:
            conn.close()
    except sqlite3.DatabaseError as error:
        return f"corrupt: {error}"
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _commit_points(ops: list[Op], mode: str) -> list[int]:
    """Indexes of the records after which a transaction is committed in the live files."""
    points = []
    frame_commits: set[str] = set()
    for i, op in enumerate(ops):
        if mode == "wal" and op.kind == "W" and op.path.endswith("-wal"):
            if op.path in frame_commits:
                frame_commits.discard(op.path)
                points.append(i)
            elif len(op.data) == 24 and op.data[4:8] != b"\0\0\0\0":
                frame_commits.add(op.path)
        if mode == "delete" and op.kind == "U" and op.path.endswith("-journal"):
            points.append(i)
    return points


@dataclass(frozen=True)
class Instant:
    """Where the power goes: after record ``index`` (``-1``: before any); ``label`` names it."""

    index: int
    label: str
    kind: str          # the transaction it belongs to
    inside_commit: bool


def instants(ops: list[Op]) -> list[Instant]:
    """Every crash-point marker, and every write and sync inside the COMMIT of a ``LARGE`` transaction."""
    found: list[Instant] = []
    counts: dict[str, int] = {}
    open_commits: dict[tuple[str, str], int] = {}
    for i, op in enumerate(ops):
        if op.kind != "M":
            continue
        name, _, side = op.path.partition(":")
        counts[op.path] = counts.get(op.path, 0) + 1
        label = f"{op.path}@{counts[op.path]}"
        found.append(Instant(i, label, name, False))
        if side == "before-commit" and name in LARGE:
            open_commits[(name, op.other)] = i
        if side == "after-commit" and (name, op.other) in open_commits:
            start = open_commits.pop((name, op.other))
            number = 0
            for j in range(start + 1, i):
                if ops[j].kind in ("W", "S", "U", "T"):
                    number += 1
                    found.append(Instant(j, f"{name}@{counts[op.path]}:inside-commit#{number}", name, True))
    return sorted(found, key=lambda x: x.index)


@dataclass
class Tally:
    """Images tried and held, per transaction kind."""

    tried: dict[str, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    recovered: int = 0

    def add(self, kind: str, held: bool) -> None:
        self.tried[kind] = self.tried.get(kind, 0) + 1
        self.held[kind] = self.held.get(kind, 0) + (1 if held else 0)

    def lines(self) -> list[str]:
        return [f"{kind}: {self.held[kind]}/{self.tried[kind]} images held" for kind in sorted(self.tried)]


@dataclass
class Image:
    """One power-cut image: where, which variant (``durable`` or ``variant-<seed>``), and its directory."""

    instant: Instant
    variant: str
    directory: Path
    digest: str
    allowed: list[str]          # digests of the committed states it may equal
    returned_state: str         # the state of the last returned COMMIT (FULL must not be older)
    states: list[str]           # every committed state so far, oldest first


class Cut:
    """Walks a ``Recording`` once and yields the images of the chosen instants (``images``)."""

    def __init__(self, recording: Recording, work: Path) -> None:
        self.rec = recording
        self.work = work
        self.points = set(_commit_points(recording.ops, recording.mode))

    def _state(self, replay: Replay, name: str) -> str:
        return image_digest(write_image(replay.live_files(), self.work / name))

    def images(self, chosen: list[Instant], variants: int, seed: int) -> Iterator[Image]:
        """For each instant of ``chosen``: the durable image and ``variants`` seeded variants."""
        replay = Replay(self.rec.root, self.rec.initial)
        states = [self._state(replay, "state")]
        returned = 0
        by_index: dict[int, list[Instant]] = {}
        for instant in chosen:
            by_index.setdefault(instant.index, []).append(instant)
        rng = random.Random(seed)
        for i, op in enumerate(self.rec.ops):
            replay.apply(op)
            if i in self.points:
                digest = self._state(replay, "state")
                if digest != states[-1]:
                    states.append(digest)
            if op.kind == "M" and op.path.endswith(":after-commit"):
                returned = len(states) - 1
            for instant in by_index.get(i, []):
                allowed = states[returned:] if self.rec.synchronous == "full" else list(states)
                kinds = [("durable", None)] + [(f"variant-{k}", random.Random(rng.random()))
                                              for k in range(variants)]
                for variant, variant_rng in kinds:
                    directory = write_image(replay.durable_files(variant_rng), self.work / "image")
                    yield Image(instant, variant, directory, image_digest(directory), allowed,
                                states[returned], list(states))


def violations(image: Image) -> list[str]:
    """What is wrong with an image's state (empty when it is one the durability setting allows)."""
    where = f"{image.instant.label} ({image.variant})"
    if image.digest.startswith("corrupt"):
        return [f"{where}: the database does not open clean: {image.digest}"]
    if image.digest in image.allowed:
        return []
    if image.digest in image.states:
        lost = len(image.states) - 1 - image.states[::-1].index(image.digest)
        return [f"{where}: lost a committed transaction whose COMMIT had returned (the image is committed "
                f"state {lost}, the last returned COMMIT left state {image.states.index(image.returned_state)})"]
    return [f"{where}: partial fact: the image equals no committed state"]


def audit_image(image: Image, mode: str, synchronous: str) -> list[str]:
    """``fencepost audit``'s checks and the structural check on a private copy of the image."""
    copy = image.directory.with_name("audited")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(image.directory, copy)
    db = CrashDB("sqlite-" + mode, sqlite_url(copy, mode, synchronous), copy.parent / "audited-root")
    try:
        return [f"{image.instant.label} ({image.variant}): {f}" for f in unsound(db.store)]
    finally:
        db.close()


def recover(image: Image, recording: Recording, work: Path) -> Any:
    """Recover an image the way its flow's operator would (``recover_rehearsal``, ``recover_admission``);
    returns what must equal ``recording.reference``."""
    if recording.flow == "admission":
        return recover_admission(image, recording, work)
    if recording.flow == "host":
        return recover_host(image, recording, work)
    return recover_rehearsal(image, recording, work)


def _private(image: Image, work: Path) -> tuple[Path, Path]:
    copy = work / "recovered"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(image.directory, copy)
    root = work / "recovered-root"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    return copy, root


def recover_admission(image: Image, recording: Recording, work: Path) -> Any:
    """``fencepost workflow admit`` of the same plan again: ``existing`` (the stored receipt) when the
    admission was durable, ``created`` otherwise; then every admission table holds exactly one whole
    128-step admission and ``fencepost audit`` exits 0. Returns the receipt of the admission that holds
    (compared with the recorded one when it was durable, else only its step count)."""
    copy, root = _private(image, work)
    db = CrashDB("sqlite-" + recording.mode, sqlite_url(copy, recording.mode, recording.synchronous), root)
    try:
        before = table_counts(db.store, ADMISSION_TABLES)
        durable = before == expected_admission_counts(ADMISSION_STEPS)
        assert durable or before == dict.fromkeys(ADMISSION_TABLES, 0), f"a partial admission: {before}"
        again = cli(db, "workflow", "admit", recording.run_id, "--json")
        assert again.returncode == 0, again.describe()
        answer = again.json()
        assert answer["outcome"] == ("existing" if durable else "created"), (durable, answer["outcome"])
        assert table_counts(db.store, ADMISSION_TABLES) == expected_admission_counts(ADMISSION_STEPS)
        audit = cli(db, "audit", "--json")
        assert audit.returncode == 0 and audit.json()["sound"] is True, audit.describe()
        if durable:
            return answer["receipt"]
        assert len(answer["receipt"]["step_runs"]) == ADMISSION_STEPS
        return recording.reference
    finally:
        db.close()


def recover_host(image: Image, recording: Recording, work: Path) -> Any:
    """The caller submits again with the same key when no invocation is durable, then a worker runs it to
    its verdict; the provider's ledger (from the image) must then hold exactly one charge. Returns the
    verdict's status and the charge count."""
    copy, root = _private(image, work)
    url = sqlite_url(copy, recording.mode, recording.synchronous)
    db = CrashDB("sqlite-" + recording.mode, url, root)
    try:
        audit = cli(db, "audit", "--json")
        assert audit.returncode == 0 and audit.json()["sound"] is True, audit.describe()
        before = list((copy / "ledger" / "charges").read_text().splitlines())
        assert len(before) <= 1, before
        env = subprocess_env()
        if not db.store.read(lambda tx: tx.host.list_invocations()):
            _host(url, copy, "submit", env, root)
        verdict = _host(url, copy, "work", env, root)
        charges = (copy / "ledger" / "charges").read_text().splitlines()
        after = cli(db, "audit", "--json")
        assert after.returncode == 0 and after.json()["sound"] is True, after.describe()
        return {"status": verdict.get("status"), "charges": len(charges)}
    finally:
        db.close()


def recover_rehearsal(image: Image, recording: Recording, work: Path) -> Summary:
    """What an operator does after the power returns: ``rehearsal create`` again if no Run is durable,
    ``rehearsal attempt`` again if no Attempt is, then a worker until the Attempt is terminal; returns the
    converged summary (``fencepost audit`` through the real CLI must exit 0 first)."""
    copy, root = _private(image, work)
    db = CrashDB("sqlite-" + recording.mode, sqlite_url(copy, recording.mode, recording.synchronous), root)
    try:
        audit = cli(db, "audit", "--json")
        assert audit.returncode == 0 and audit.json()["sound"] is True, audit.describe()
        runs = db.run_ids()
        if runs:
            run_id = runs[0]
        else:
            made = cli(db, "rehearsal", "create", str(EXAMPLE_PACKAGE), "--json")
            assert made.returncode == 0, made.describe()
            run_id = str(made.json()["id"])
        attempts = db.service.attempts(run_id)
        if attempts:
            attempt_id = attempts[0].id
        else:
            queued = cli(db, "rehearsal", "attempt", run_id, "--json")
            assert queued.returncode == 0, queued.describe()
            attempt_id = str(queued.json()["id"])
        workers = Workers(db)
        try:
            if not db.attempt(attempt_id).status.terminal:
                drain(db, workers, attempt_id, "recovery")
        finally:
            workers.kill_all()
        summary = summarize(db, run_id)
        after = cli(db, "audit", "--json")
        assert after.returncode == 0 and after.json()["sound"] is True, after.describe()
        return summary
    finally:
        db.close()
