"""Linearizability of workflow execution, checked from commit order (issue 18 "Proof"; ADRs 0072-0074).

Three worker processes advance one Run at once (each runs the real worker: its task kind and its coordinator
sweep, plus a loop of ``advance`` calls whose answers it reports with the monotonic clock around each call),
while a fourth process changes something once:

- **cancel**: it requests the Run's cancel after some steps succeeded (``wf_exec_race.py cancel``);
- **quarantine / disable**: it quarantines or disables the package after some start barriers committed.

Every transaction of a Run takes the Run's next fences (StepRun mutations' ``run_fence``, the run-level
ledger's ``fence``), under the Run's lock, so the committed fences ARE the Run's commit order: the tests first
check that they form one gapless sequence 2..N with events, instants and per-step versions agreeing with it,
then judge every step against the change's place in that order:

- cancel: no start barrier after the ``cancel_request`` fence; every step waiting or ready there ends
  ``cancelled`` (``cancel_requested``); every step running there ends ``succeeded`` (its task ran on the target)
  or ``cancelled`` by its task's own start check (``run_cancelled``, nothing ran); the Run ends ``cancelled``.
- guards: the quarantine/disable and the start barrier both take the package lock, and each reads its instant
  after the lock's wait (SQLite: after ``BEGIN IMMEDIATE``), so every start barrier's instant precedes the
  change's; every start precedes every refusal in the Run's fence order; every step that never started ends
  ``failed`` (``start_refused`` naming the guard) or ``skipped``; every started step finishes ``succeeded``.

Real time agrees with both (the processes' own reports): an ``advance`` that began after the change returned
started nothing. The target database is the last witness: exactly the succeeded steps' tasks ran, once each.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import wf_exec_race
from exec_kit import Installed, Steps, install
from wf_support import backend_params, cli_url, opened_backend, raw

from fencepost.core.clock import SystemClock, from_iso
from fencepost.core.statuses import RunMutationKind, StepMutationKind, StepRunStatus, WorkflowRunStatus
from fencepost.store.base import Store
from fencepost.store.workflow_records import ProgressMutation, RunMutation, RunState, StepRunRow, StepStart
from fencepost.workflows.frontier import CANCEL_REQUESTED, DEPENDENCY_NOT_SUCCEEDED
from fencepost.workflows.task import TASK_LEDGER
from helpers.processes import Process, kill_all, start
from helpers.store_backends import StoreBackend

RACE = Path(__file__).with_name("wf_exec_race.py")
WORKERS = 3
DEADLINE_S = 180.0  # a bound, not a pace: a loaded machine (the soak runs) can be slow
GUARDS = {"quarantine": ("quarantine", "SELECT quarantined_at FROM installation_quarantines"),
          "disable": ("lifecycle_disposition", "SELECT updated_at FROM installation_dispositions")}


# ── shapes: tasks that take a while (a bounded recursive count) and leave a row in the target's log ──
def timed_task(step: str, iterations: int) -> str:
    """A task that logs ``step`` and then counts to ``iterations`` (about 5 million a second)."""
    return (f"INSERT INTO log (step, at) VALUES ('{step}', 1);\n"
            f"WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {iterations}) "
            "SELECT count(*) FROM n;\n")


def shape(steps: dict[str, tuple[str, ...]], low: int, high: int, seed: int) -> Steps:
    """``steps`` (key -> needs), each with its own task of ``low..high`` iterations."""
    rng = random.Random(seed)
    return Steps(steps={k: (f"t{k}", needs) for k, needs in steps.items()},
                 tasks={f"t{k}": timed_task(k, rng.randint(low, high)) for k in steps})


def chains(count: int, length: int) -> dict[str, tuple[str, ...]]:
    """``count`` independent chains ``cXXsY`` of ``length`` steps."""
    return {f"c{c:02d}s{i}": ((f"c{c:02d}s{i - 1}",) if i else ()) for c in range(count) for i in range(length)}


def fan(width: int, length: int) -> dict[str, tuple[str, ...]]:
    """A root ``a``, ``width`` chains of ``length`` steps that need it, and ``z`` that needs every chain's end."""
    steps: dict[str, tuple[str, ...]] = {"a": ()}
    for c in range(width):
        for i in range(length):
            steps[f"b{c:02d}s{i}"] = (f"b{c:02d}s{i - 1}",) if i else ("a",)
    steps["z"] = tuple(f"b{c:02d}s{length - 1}" for c in range(width))
    return steps


# ── the committed rows of one Run ──
@dataclass(frozen=True)
class Ledger:
    run: RunState
    steps: dict[str, StepRunRow]
    created: dict[str, StepRunStatus]          # step key -> status at admission
    mutations: list[ProgressMutation]          # by run fence
    run_mutations: list[RunMutation]
    starts: list[StepStart]
    events: list[tuple[int, str, dict[str, Any]]]

    def key(self, step_run_id: str) -> str:
        return next(k for k, r in self.steps.items() if r.id == step_run_id)

    def last(self, key: str) -> ProgressMutation:
        return [m for m in self.mutations if m.step_run_id == self.steps[key].id][-1]

    def state_at(self, fence: int) -> dict[str, StepRunStatus]:
        """Every step's status just before the Run's fence ``fence`` (replaying the mutations below it)."""
        state = dict(self.created)
        for m in self.mutations:
            if m.run_fence < fence:
                state[self.key(m.step_run_id)] = m.to_status
        return state


def read_ledger(store: Store, run_id: str) -> Ledger:
    def unit(tx: Any) -> Ledger:
        run = tx.progress.get_run(run_id)
        assert run is not None
        steps = {r.step_key: r for r in tx.progress.step_runs(run_id)}
        by_id = {r.id: k for k, r in steps.items()}
        created = {by_id[str(s)]: StepRunStatus(str(t)) for s, t in raw(
            tx, f"SELECT step_run_id, to_status FROM workflow_step_mutations WHERE run_id = '{run_id}' "
                "AND kind = 'create'")}
        events = [(int(seq), str(t), json.loads(str(p))) for seq, t, p in raw(
            tx, f"SELECT seq, type, payload FROM workflow_events WHERE run_id = '{run_id}' ORDER BY seq")]
        return Ledger(run, steps, created, tx.progress.mutations(run_id), tx.progress.run_mutations(run_id),
                      tx.progress.starts(run_id), events)
    return store.read(unit)


def assert_one_serial_order(ledger: Ledger) -> list[Any]:
    """The Run's committed fences form one gapless sequence 2..N (the Run's commit order), with which every
    other witness agrees; returns the Run's mutations (step and run level) in that order."""
    order: list[Any] = sorted([*ledger.mutations, *ledger.run_mutations],
                              key=lambda m: m.run_fence if isinstance(m, ProgressMutation) else m.fence)
    fences = [m.run_fence if isinstance(m, ProgressMutation) else m.fence for m in order]
    assert fences == list(range(2, ledger.run.fence + 1)), f"run fences are not one gapless order: {fences}"
    # the instants agree with the order (each transaction reads its instant under the Run's lock)
    instants = [m.created_at for m in order]
    assert instants == sorted(instants), "an instant runs against the fence order"
    # events: gapless seqs, one per admission row and per mutation, in the same order as the fences
    seqs = [e[0] for e in ledger.events]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) == 1 + len(ledger.steps) + len(order)
    later = [e for e in ledger.events if "run_fence" in e[2]]
    assert [e[2]["run_fence"] for e in later] == fences, "event order differs from fence order"
    # each StepRun: versions 2..fence, consecutive, its row at its last mutation
    for key, row in ledger.steps.items():
        own = [m for m in ledger.mutations if m.step_run_id == row.id]
        assert [m.fence for m in own] == list(range(2, row.fence + 1)), key
        assert (own[-1].to_status if own else ledger.created[key]) is row.status, key
    # a start barrier per start mutation, never two for a step (no retry after the barrier)
    started = [(m.step_run_id, m.fence) for m in ledger.mutations if m.kind is StepMutationKind.START]
    assert sorted(started) == sorted((s.step_run_id, s.step_fence) for s in ledger.starts)
    assert len({s.step_run_id for s in ledger.starts}) == len(ledger.starts), "a step was started twice"
    # the Run's verdict is its last fence
    assert ledger.run.status.terminal
    assert isinstance(order[-1], RunMutation) and order[-1].kind is RunMutationKind.SETTLE
    assert order[-1].to_status is ledger.run.status
    return order


def target_ran(kit: Installed) -> tuple[list[str], list[str]]:
    """(steps in the target's task ledger, steps in its log), each sorted."""
    with sqlite3.connect(kit.target_path) as conn:
        ledger = [r[0] for r in conn.execute(f'SELECT step_key FROM "{TASK_LEDGER}"')]
        logged = [r[0] for r in conn.execute("SELECT step FROM log")]
    return sorted(ledger), sorted(logged)


# ── the race ──
@contextmanager
def control_store(backend_name: str, tmp_path: Path) -> Iterator[tuple[StoreBackend, Store]]:
    """A migrated store on the system clock (the race processes' clock: their instants must compare)."""
    with opened_backend(backend_name, tmp_path) as backend:
        extra = {} if backend.is_postgres else {"clock": SystemClock()}
        yield backend, backend.migrated(**extra)


def _process(tmp_path: Path, name: str, *args: str) -> Process:
    return start(args, name=name, stdout_path=tmp_path / f"{name}.log", argv_prefix=[sys.executable, str(RACE)])


class _Thread(threading.Thread):
    """A race role in a thread of this process, with its own store connection (what it raised is kept)."""

    def __init__(self, name: str, argv: list[str]) -> None:
        super().__init__(name=name, daemon=True)
        self.argv = argv
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            wf_exec_race.main(self.argv)
        except BaseException as error:  # reported by the test
            self.failure = error

    @property
    def alive(self) -> bool:
        return self.is_alive()


def race(backend: StoreBackend, tmp_path: Path, run_id: str, change: list[str], *,
         processes: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Start WORKERS worker roles and the ``change`` role (real subprocesses when ``processes``, else threads of
    this process, each with its own store connection), let them go at once, wait for all to end.
    Returns (every worker's ``advance`` reports, the change's report)."""
    url = cli_url(backend)
    go = tmp_path / "go"
    outs = [tmp_path / f"worker-{i}.json" for i in range(WORKERS)]
    change_out = tmp_path / "change.json"
    argvs: dict[str, list[str]] = {}
    for i, out in enumerate(outs):
        work = tmp_path / f"work-{i}"
        work.mkdir()
        argvs[f"worker-{i}"] = ["worker", url, str(work), run_id, str(out), str(go), str(DEADLINE_S)]
    role, *rest = change
    argvs["change"] = [role, url, *rest, str(change_out), str(go), str(DEADLINE_S)]
    racers: list[Any] = []
    try:
        for name, argv in argvs.items():
            racers.append(_process(tmp_path, name, *argv) if processes else _Thread(name, argv))
            if not processes:
                racers[-1].start()
        ready_by = time.monotonic() + 60
        while not all(Path(f"{out}.ready").exists() for out in [*outs, change_out]):
            assert time.monotonic() < ready_by, "a racer never became ready"
            assert all(r.alive for r in racers), [getattr(r, "failure", None) or r.describe() for r in racers]
            time.sleep(0.02)
        go.touch()
        began = time.monotonic_ns()
        for racer in racers:
            if processes:
                assert racer.wait_exit(DEADLINE_S + 30) == 0, racer.describe()
            else:
                racer.join(DEADLINE_S + 30)
                assert not racer.is_alive() and racer.failure is None, (racer.name, racer.failure)
    finally:
        if processes:
            kill_all(racers)
    reports = [r for out in outs for r in json.loads(out.read_text(encoding="utf-8"))]
    changed = json.loads(change_out.read_text(encoding="utf-8"))
    print(f"race: change {(changed['t0'] - began) / 1e9:.2f} s after go, settled "
          f"{(max(r['t1'] for r in reports) - began) / 1e9:.2f} s after go")
    errors = [r["error"] for r in reports if "error" in r]
    assert all("StoreUnavailable" in e or "busy" in e.lower() for e in errors), errors
    assert any(r.get("outcome") == "settled" for r in reports)
    return reports, changed


def assert_nothing_started_after(reports: list[dict[str, Any]], change: dict[str, Any]) -> None:
    """Real time: an ``advance`` that began after the change returned started no step."""
    late = [r for r in reports if r["t0"] > change["t1"] and r.get("started")]
    assert late == [], f"advances begun after the change returned started steps: {late}"


# ── cancel against advancing workers ──
def cancel_race(backend_name: str, tmp_path: Path, *, width: int, length: int, after: int, seed: int,
                processes: bool) -> None:
    with control_store(backend_name, tmp_path) as (backend, store):
        kit = install(store, tmp_path, shape(chains(width, length), 250_000, 1_000_000, seed))
        run_id = kit.admit()
        reports, change = race(backend, tmp_path, run_id, ["cancel", run_id, str(after)], processes=processes)
        assert change["outcome"] == "requested", change
        ledger = read_ledger(store, run_id)
        order = assert_one_serial_order(ledger)

        cancel, = [m for m in ledger.run_mutations if m.kind is RunMutationKind.CANCEL_REQUEST]
        late_starts = [m for m in ledger.mutations if m.kind is StepMutationKind.START and m.run_fence > cancel.fence]
        assert late_starts == [], f"started after the cancel fence {cancel.fence}: " \
            f"{[(ledger.key(m.step_run_id), m.run_fence) for m in late_starts]}"
        at = ledger.state_at(cancel.fence)
        running_then = {k for k, s in at.items() if s is StepRunStatus.RUNNING}
        by_start_check: list[str] = []
        for key, then in at.items():
            final, last = ledger.steps[key].status, ledger.last(key) if ledger.steps[key].fence > 1 else None
            if then in (StepRunStatus.WAITING, StepRunStatus.READY):
                assert final is StepRunStatus.CANCELLED and last is not None, (key, final)
                assert last.reason == CANCEL_REQUESTED and last.run_fence > cancel.fence, (key, last)
            elif then is StepRunStatus.RUNNING:
                assert last is not None and last.run_fence > cancel.fence, key
                if final is StepRunStatus.CANCELLED:
                    assert "run_cancelled" in (last.reason or ""), (key, last.reason)
                    by_start_check.append(key)
                else:
                    assert final is StepRunStatus.SUCCEEDED, (key, final, last.reason)
            else:
                assert then.terminal and final is then, (key, then, final)
        succeeded = sorted(k for k, r in ledger.steps.items() if r.status is StepRunStatus.SUCCEEDED)
        if succeeded == sorted(ledger.steps):
            assert all(at[k] is not StepRunStatus.WAITING for k in ledger.steps)
            assert ledger.run.status is WorkflowRunStatus.SUCCEEDED
        else:
            assert ledger.run.status is WorkflowRunStatus.CANCELLED
            assert {r.status for r in ledger.steps.values()} <= {StepRunStatus.SUCCEEDED, StepRunStatus.CANCELLED}
        assert order[-1].fence > cancel.fence
        # the target: exactly the succeeded steps' tasks ran, once each; nothing of a cancelled step
        assert target_ran(kit) == (succeeded, succeeded)
        assert_nothing_started_after(reports, change)
        # not vacuous: the cancel landed mid-run, with steps done before it and steps it stopped
        done_then = [k for k, s in at.items() if s is StepRunStatus.SUCCEEDED]
        stopped = [k for k, s in at.items() if s is StepRunStatus.WAITING]
        assert done_then and stopped and running_then, (done_then, stopped, running_then)
        print(f"cancel at fence {cancel.fence} of {ledger.run.fence}: {len(done_then)} done, "
              f"{len(running_then)} running ({len(by_start_check)} cancelled by their start check), "
              f"{len(stopped)} waiting")


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", backend_params(["sqlite-wal", "postgres"]))
def test_cancel_linearizes_with_advancing_workers(backend_name: str, tmp_path: Path) -> None:
    cancel_race(backend_name, tmp_path, width=6, length=3, after=4, seed=18, processes=False)


@pytest.mark.soak
@pytest.mark.parametrize("round_", range(3))
@pytest.mark.parametrize("backend_name", backend_params([], soak=["sqlite-wal", "sqlite-delete", "postgres"]))
def test_cancel_linearizes_soak(backend_name: str, round_: int, tmp_path: Path) -> None:
    rng = random.Random(round_)
    cancel_race(backend_name, tmp_path, width=6, length=6, after=rng.randint(3, 16), seed=round_,
                processes=True)


# ── quarantine and disable against step starts ──
def _instant(value: Any) -> datetime:
    return value if isinstance(value, datetime) else from_iso(str(value))


def guard_race(backend_name: str, tmp_path: Path, action: str, *, width: int, length: int, after: int,
               seed: int, processes: bool) -> None:
    guard, change_sql = GUARDS[action]
    with control_store(backend_name, tmp_path) as (backend, store):
        kit = install(store, tmp_path, shape(fan(width, length), 100_000, 500_000, seed))
        run_id = kit.admit()
        reports, change = race(backend, tmp_path, run_id, ["guard", action, kit.package, run_id, str(after)],
                               processes=processes)
        ledger = read_ledger(store, run_id)
        assert_one_serial_order(ledger)
        changed = store.read(lambda tx: raw(tx, change_sql))
        assert len(changed) == 1, changed
        changed_at = _instant(changed[0][0])

        started = {ledger.key(s.step_run_id) for s in ledger.starts}
        refusals = [m for m in ledger.mutations if m.kind is StepMutationKind.REFUSE]
        # commit order: every start barrier committed before the change, every refusal after it
        late = [(ledger.key(s.step_run_id), s.started_at) for s in ledger.starts if not s.started_at < changed_at]
        assert late == [], f"start barriers at or after the {action} at {changed_at}: {late}"
        if refusals:
            assert max(s.run_fence for s in ledger.mutations if s.kind is StepMutationKind.START) < \
                min(m.run_fence for m in refusals), "a step started after a refusal in the Run's order"
        if not backend.is_postgres:  # SQLite: both instants are read inside BEGIN IMMEDIATE: the commit order
            early = [m for m in refusals if not m.created_at > changed_at]
            assert early == [], f"refusals before the {action}: {early}"
        for key, row in ledger.steps.items():
            if key in started:     # past its barrier: finishes on its revision
                assert row.status is StepRunStatus.SUCCEEDED, (key, row.status, ledger.last(key).reason)
            elif row.status is StepRunStatus.FAILED:
                reason = ledger.last(key).reason or ""
                assert ledger.last(key).kind is StepMutationKind.REFUSE, key
                assert reason.startswith("start_refused:") and f"guard {guard}" in reason, (key, reason)
            else:
                assert row.status is StepRunStatus.SKIPPED, (key, row.status)
                assert ledger.last(key).reason == DEPENDENCY_NOT_SUCCEEDED, key
        assert ledger.run.status is WorkflowRunStatus.FAILED
        assert target_ran(kit) == (sorted(started), sorted(started))
        assert_nothing_started_after(reports, change)
        assert started and refusals, f"vacuous race: {len(started)} started, {len(refusals)} refused"
        print(f"{action} after {change['seen']} starts: {len(started)} started, {len(refusals)} refused, "
              f"{len(ledger.steps) - len(started) - len(refusals)} skipped")


@pytest.mark.slow
@pytest.mark.parametrize("action", sorted(GUARDS))
@pytest.mark.parametrize("backend_name", backend_params(["sqlite-wal", "postgres"]))
def test_guard_change_linearizes_with_step_starts(backend_name: str, action: str, tmp_path: Path) -> None:
    guard_race(backend_name, tmp_path, action, width=4, length=3, after=6, seed=18, processes=False)


@pytest.mark.soak
@pytest.mark.parametrize("round_", range(3))
@pytest.mark.parametrize("action", sorted(GUARDS))
@pytest.mark.parametrize("backend_name", backend_params([], soak=["sqlite-wal", "sqlite-delete", "postgres"]))
def test_guard_change_linearizes_soak(backend_name: str, action: str, round_: int, tmp_path: Path) -> None:
    rng = random.Random(round_)
    guard_race(backend_name, tmp_path, action, width=6, length=5, after=rng.randint(2, 20), seed=round_,
               processes=True)
