"""Property tests of the frontier resolver (``fencepost.workflows.frontier``) against an independent oracle.

Rules under test: ADR-0226 (frontier) as stated in ../shared/workflow-execution.md and in the resolver's module
docstring (ADR 0072). The oracle below re-states them in English-first form and never calls or copies the
resolver: it works on ancestor sets from a transitive closure (fixpoint sweeps, no topological order), so a
resolver that propagated only one level per pass, or in key order, disagrees with it.

Only REACHABLE states are compared: each example builds a random DAG (up to 128 steps, keys shuffled against
the topological order), admits it (steps without needs ``ready``, the rest ``waiting``) and then plays a random
history: resolver passes, ready steps started, host verdicts for running steps, operator resolutions of lost
steps, junk verdicts the resolver must ignore, and a cancel request. Every pass is checked against the oracle
(transitions, Run fences, verdict, ready set, outcome) and for idempotence.

Why the ancestor rule and the resolver's need rule agree on reachable states: a step leaves ``waiting`` for
``ready`` only when every need succeeded, and terminal states never change, so every step that is ``ready``,
``running``, ``lost`` or ``succeeded`` has only succeeded ancestors. Hence on any path from a blocking
ancestor down to a waiting step, every step in between is waiting (or already blocking), and propagation in
topological order reaches the waiting step within the pass. The states below never break that invariant; the
test asserts it (``assert_reachable``) so a broken generator cannot silently test nothing.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fencepost.core.statuses import StepRunStatus as S
from fencepost.core.statuses import WorkflowRunStatus as W
from fencepost.workflows.frontier import Resolution, StepState, Verdict, resolve

MAX_STEPS = 128
TERMINAL_STEP = {S.SUCCEEDED, S.FAILED, S.SKIPPED, S.CANCELLED, S.TIMED_OUT}
BLOCKING = {S.FAILED, S.SKIPPED, S.CANCELLED, S.TIMED_OUT}
#: ADR-0226 aggregation, written as a ranked list: the first rule whose statuses occur decides.
AGGREGATION_RANKS: list[tuple[set[S], W]] = [
    ({S.FAILED, S.SKIPPED}, W.FAILED),
    ({S.TIMED_OUT}, W.TIMED_OUT),
    ({S.CANCELLED}, W.CANCELLED),
]
RUN_TERMINAL = [W.SUCCEEDED, W.FAILED, W.CANCELLED, W.TIMED_OUT]


# ── the oracle ──
def ancestors(needs: Mapping[str, tuple[str, ...]]) -> dict[str, set[str]]:
    """Transitive closure of ``needs`` by fixpoint sweeps (deliberately not a topological walk)."""
    closure = {key: set(direct) for key, direct in needs.items()}
    changed = True
    while changed:
        changed = False
        for key in closure:
            grown = set(closure[key])
            for parent in closure[key]:
                grown |= closure[parent]
            if grown != closure[key]:
                closure[key], changed = grown, True
    return closure


def oracle_aggregate(statuses: list[S]) -> W | None:
    if not statuses or any(s not in TERMINAL_STEP for s in statuses):
        return None
    for members, verdict in AGGREGATION_RANKS:
        if any(s in members for s in statuses):
            return verdict
    return W.SUCCEEDED


@dataclass(frozen=True)
class Expected:
    outcome: str
    transitions: list[tuple[str, S, S, str | None, int, int]]
    run_status: W | None
    run_fence: int
    ready: list[str]


def oracle(steps: list[StepState], run_status: W, run_fence: int, cancel: bool,
           verdicts: Mapping[str, Verdict], closure: Mapping[str, set[str]]) -> Expected:
    """What one ADR-0226 pass must do, from the rules' English statement."""
    before = {s.key: s for s in steps}
    if run_status is not W.RUNNING:
        return Expected("settled", [], None, run_fence, sorted(k for k, s in before.items() if s.status is S.READY))
    now = {k: s.status for k, s in before.items()}
    why: dict[str, str | None] = {}
    # 1. verdicts: running -> succeeded/failed/timed_out/lost; lost -> succeeded/failed; anything else ignored.
    allowed = {S.RUNNING: {S.SUCCEEDED, S.FAILED, S.TIMED_OUT, S.CANCELLED, S.LOST}, S.LOST: {S.SUCCEEDED, S.FAILED}}
    for key in before:
        v = verdicts.get(key)
        if v is not None and v.status in allowed.get(now[key], set()):
            now[key], why[key] = v.status, v.reason
    after_verdicts = dict(now)
    for key in before:
        if now[key] not in (S.WAITING, S.READY):
            continue
        if cancel:
            # 2. cancel intent: every non-executing step is cancelled; running/lost ones are left alone.
            now[key], why[key] = S.CANCELLED, "cancel_requested"
        elif now[key] is S.WAITING:
            # 3. any ANCESTOR (transitively) blocking -> skipped; else all DIRECT needs succeeded -> ready.
            if any(after_verdicts[a] in BLOCKING for a in closure[key]):
                now[key], why[key] = S.SKIPPED, "dependency_not_succeeded"
            elif all(after_verdicts[n] is S.SUCCEEDED for n in before[key].needs):
                now[key], why[key] = S.READY, None
    transitions = []
    fence = run_fence
    for key in sorted(before):
        if now[key] != before[key].status:
            fence += 1
            transitions.append((key, before[key].status, now[key], why.get(key), before[key].fence + 1, fence))
    verdict = oracle_aggregate(list(now.values()))
    outcome = "advanced" if transitions or verdict else "unchanged"
    return Expected(outcome, transitions, verdict, fence, sorted(k for k, s in now.items() if s is S.READY))


def as_expected(res: Resolution) -> Expected:
    return Expected(res.outcome, [(t.key, t.from_status, t.to_status, t.reason, t.step_fence, t.run_fence)
                                  for t in res.transitions], res.run_status, res.run_fence, list(res.ready))


# ── a simulated Run ──
@dataclass
class Run:
    needs: dict[str, tuple[str, ...]]
    closure: dict[str, set[str]]
    status: dict[str, S]
    fence: dict[str, int]
    run_fence: int = 1
    run_status: W = W.RUNNING
    cancel: bool = False
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    history: list[Resolution] = field(default_factory=list)

    def steps(self) -> list[StepState]:
        return [StepState(k, self.needs[k], self.status[k], self.fence[k]) for k in self.needs]

    def apply(self, res: Resolution) -> None:
        for t in res.transitions:
            self.status[t.key], self.fence[t.key] = t.to_status, t.step_fence
        self.run_fence = res.run_fence

    def assert_reachable(self) -> None:
        for key, st_ in self.status.items():
            if st_ in (S.READY, S.RUNNING, S.LOST, S.SUCCEEDED):
                assert all(self.status[a] is S.SUCCEEDED for a in self.closure[key]), (key, st_)

    def check_pass(self) -> Resolution:
        """One resolver pass over the current state, checked against the oracle and for idempotence."""
        self.assert_reachable()
        steps = self.steps()
        res = resolve(steps, run_status=self.run_status, run_fence=self.run_fence, cancel_requested=self.cancel,
                      verdicts=self.verdicts)
        assert as_expected(res) == oracle(steps, self.run_status, self.run_fence, self.cancel, self.verdicts,
                                          self.closure)
        self.history.append(res)
        # Idempotence: the pass's result, resolved again (the same verdicts still on offer), changes nothing.
        after = {s.key: s for s in steps}
        for t in res.transitions:
            after[t.key] = StepState(t.key, after[t.key].needs, t.to_status, t.step_fence)
        again = resolve(list(after.values()), run_status=self.run_status, run_fence=res.run_fence,
                        cancel_requested=self.cancel, verdicts=self.verdicts)
        assert again.transitions == ()
        assert again.run_fence == res.run_fence and again.ready == res.ready
        if self.run_status is W.RUNNING:
            assert again.run_status == res.run_status
            assert again.outcome == ("advanced" if res.run_status else "unchanged")
        if res.run_status is not None:
            settled = resolve(list(after.values()), run_status=res.run_status, run_fence=res.run_fence,
                              cancel_requested=self.cancel, verdicts=self.verdicts)
            assert (settled.outcome, settled.transitions, settled.run_status) == ("settled", (), None)
        return res


def build_run(rnd: random.Random, size: int) -> Run:
    """A random DAG of ``size`` steps, admitted. Keys are s000.. assigned in a shuffled order, so key order and
    topological order differ; each step needs only steps earlier in the (hidden) topological order."""
    names = [f"s{i:03d}" for i in range(size)]
    rnd.shuffle(names)
    needs: dict[str, tuple[str, ...]] = {}
    for i, key in enumerate(names):
        fan_in = min(i, rnd.choice([0, 1, 1, 2, 2, 3, 5]))
        # Mostly recent steps (long chains), sometimes any earlier step (wide diamonds).
        pool = names[max(0, i - 6):i] if rnd.random() < 0.6 else names[:i]
        needs[key] = tuple(rnd.sample(pool, min(fan_in, len(pool))))
    keyed = dict(sorted(needs.items())) if rnd.random() < 0.5 else needs  # input order varies too
    status = {k: (S.READY if not n else S.WAITING) for k, n in keyed.items()}
    return Run(keyed, ancestors(keyed), status, {k: 1 for k in keyed})


JUNK = [S.WAITING, S.READY, S.SKIPPED, S.RUNNING]


def play(rnd: random.Random, run: Run, max_rounds: int) -> None:
    """A random history; a resolver pass between bursts of host activity, checked each time."""
    # Per history: how often a verdict fails, times out or loses the step (all three mostly rare, so Runs get
    # deep before something blocks; sometimes common, so skips meet running branches).
    fail, timeout, lose = (rnd.choice([0.0, 0.0, 0.01, 0.05, 0.3]), rnd.choice([0.0, 0.0, 0.01, 0.05, 0.3]),
                           rnd.choice([0.0, 0.05, 0.2]))
    for _ in range(max_rounds):
        keys = list(run.needs)
        ready = [k for k in keys if run.status[k] is S.READY]
        running = [k for k in keys if run.status[k] is S.RUNNING]
        lost = [k for k in keys if run.status[k] is S.LOST]
        # Start a random share of the ready steps (the start barrier; admission skips a cancelled Run).
        if not run.cancel:
            for key in ready:
                if rnd.random() < 0.7:
                    run.status[key], run.fence[key] = S.RUNNING, run.fence[key] + 1
                    run.run_fence += 1
        # Host verdicts for a share of the running steps, operator resolutions for lost ones.
        for key in running:
            if rnd.random() < 0.6:
                roll = rnd.random()
                to = (S.FAILED if roll < fail else S.TIMED_OUT if roll < fail + timeout
                      else S.LOST if roll < fail + timeout + lose
                      # a task refused at its own start check because the Run was cancelled
                      else S.CANCELLED if run.cancel and roll < fail + timeout + lose + 0.2 else S.SUCCEEDED)
                run.verdicts[key] = Verdict(to, f"host:{to}")
        for key in lost:
            if rnd.random() < 0.5:
                to = S.FAILED if rnd.random() < 0.3 else S.SUCCEEDED
                run.verdicts[key] = Verdict(to, f"operator:{to}")
        # Junk the resolver must ignore: verdicts a status cannot take, on any step, and an unknown key.
        for _ in range(rnd.choice([0, 0, 1, 3])):
            key = rnd.choice(keys)
            if run.status[key] is S.LOST:
                run.verdicts.setdefault(key, Verdict(rnd.choice([S.LOST, S.TIMED_OUT, *JUNK]), "junk"))
            elif run.status[key] is S.RUNNING:
                run.verdicts.setdefault(key, Verdict(rnd.choice(JUNK), "junk"))
            else:
                run.verdicts.setdefault(key, Verdict(rnd.choice(list(S)), "junk"))
        if rnd.random() < 0.1:
            run.verdicts["zz-unknown"] = Verdict(S.FAILED, "junk")
        if not run.cancel and rnd.random() < 0.04:
            run.cancel = True
        res = run.check_pass()
        run.apply(res)
        run.verdicts.clear()  # consumed (or stale: a host re-reports a verdict, it does not keep offering junk)
        if res.run_status is not None:
            run.run_status = res.run_status
            run.check_pass()  # a replay on the terminal Run: settled
            return


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, MAX_STEPS), rounds=st.integers(1, 150))
def test_resolver_matches_oracle_on_reachable_histories(seed: int, size: int, rounds: int) -> None:
    rnd = random.Random(seed)
    run = build_run(rnd, size)
    play(rnd, run, rounds)
    assert run.history


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 40), rounds=st.integers(0, 30),
       final=st.sampled_from(RUN_TERMINAL))
def test_terminal_run_is_settled(seed: int, size: int, rounds: int, final: W) -> None:
    """Whatever the steps look like, a pass on a terminal Run answers ``settled`` and changes nothing."""
    rnd = random.Random(seed)
    run = build_run(rnd, size)
    play(rnd, run, rounds)
    run.cancel = rnd.random() < 0.5
    verdicts = {k: Verdict(S.FAILED, "late") for k in run.needs if run.status[k] in (S.RUNNING, S.LOST)}
    res = resolve(run.steps(), run_status=final, run_fence=run.run_fence, cancel_requested=run.cancel,
                  verdicts=verdicts)
    assert (res.outcome, res.transitions, res.run_status, res.run_fence) == ("settled", (), None, run.run_fence)
    assert list(res.ready) == sorted(k for k in run.needs if run.status[k] is S.READY)


def test_history_generator_reaches_every_run_verdict() -> None:
    """Guards the generator: the property above must see each Run verdict, cancel passes, lost steps resolved
    and many skips in one pass (deep chains)."""
    seen: set[W] = set()
    most_skips = 0
    reasons: set[str | None] = set()
    key_order_differs = 0
    for seed in range(300):
        rnd = random.Random(seed)
        run = build_run(rnd, rnd.randint(1, 40))
        key_order_differs += any(need > key for key, needs in run.needs.items() for need in needs)
        play(rnd, run, 200)
        for res in run.history:
            if res.run_status is not None:
                seen.add(res.run_status)
            most_skips = max(most_skips, sum(t.to_status is S.SKIPPED for t in res.transitions))
            reasons |= {t.reason for t in res.transitions if t.from_status is S.LOST}
            reasons |= {t.reason for t in res.transitions if t.to_status is S.CANCELLED}
    assert seen == set(RUN_TERMINAL)
    assert most_skips >= 5
    assert key_order_differs >= 200  # a need sorting after its dependent: key order is not topological order
    assert {"operator:succeeded", "operator:failed", "cancel_requested"} <= reasons


# ── explicit examples ──
def step(key: str, status: S, *needs: str, fence: int = 1) -> StepState:
    return StepState(key, tuple(needs), status, fence)


def table(res: Resolution) -> list[tuple[str, str, str, str | None, int, int]]:
    return [(t.key, t.from_status, t.to_status, t.reason, t.step_fence, t.run_fence) for t in res.transitions]


def test_diamond_with_failed_root_skips_both_branches_and_the_join_in_one_pass() -> None:
    # Keys against topological order: root "z" (running, its verdict failed), branches "m", "b", join "a".
    steps = [step("a", S.WAITING, "m", "b"), step("b", S.WAITING, "z"), step("m", S.WAITING, "z"),
             step("z", S.RUNNING, fence=2)]
    res = resolve(steps, run_status=W.RUNNING, run_fence=10, verdicts={"z": Verdict(S.FAILED, "boom")})
    assert table(res) == [("a", "waiting", "skipped", "dependency_not_succeeded", 2, 11),
                          ("b", "waiting", "skipped", "dependency_not_succeeded", 2, 12),
                          ("m", "waiting", "skipped", "dependency_not_succeeded", 2, 13),
                          ("z", "running", "failed", "boom", 3, 14)]
    assert (res.outcome, res.run_status, res.run_fence, res.ready) == ("advanced", W.FAILED, 14, ())


def test_cancel_leaves_a_running_step_running_and_reaches_no_run_verdict() -> None:
    steps = [step("a", S.SUCCEEDED), step("b", S.RUNNING, "a"), step("c", S.READY, "a"),
             step("d", S.WAITING, "b")]
    res = resolve(steps, run_status=W.RUNNING, run_fence=5, cancel_requested=True)
    assert table(res) == [("c", "ready", "cancelled", "cancel_requested", 2, 6),
                          ("d", "waiting", "cancelled", "cancel_requested", 2, 7)]
    assert (res.outcome, res.run_status, res.ready) == ("advanced", None, ())
    # Once the running step's verdict arrives, the Run is cancelled (no failure, no timeout).
    done = [step("a", S.SUCCEEDED), step("b", S.RUNNING, "a"), step("c", S.CANCELLED, "a"),
            step("d", S.CANCELLED, "b")]
    res = resolve(done, run_status=W.RUNNING, run_fence=7, cancel_requested=True,
                  verdicts={"b": Verdict(S.SUCCEEDED)})
    assert table(res) == [("b", "running", "succeeded", None, 2, 8)]
    assert res.run_status is W.CANCELLED


def test_timed_out_outranks_cancelled() -> None:
    steps = [step("a", S.TIMED_OUT), step("b", S.CANCELLED), step("c", S.SUCCEEDED)]
    res = resolve(steps, run_status=W.RUNNING, run_fence=3)
    assert (res.outcome, res.transitions, res.run_status, res.run_fence) == ("advanced", (), W.TIMED_OUT, 3)


@pytest.mark.parametrize("others", [[S.TIMED_OUT], [S.CANCELLED], [S.TIMED_OUT, S.CANCELLED], []])
def test_a_skipped_step_fails_the_run(others: list[S]) -> None:
    steps = [step("x", S.SKIPPED), step("y", S.SUCCEEDED)] + [step(f"o{i}", s) for i, s in enumerate(others)]
    assert resolve(steps, run_status=W.RUNNING, run_fence=1).run_status is W.FAILED


def test_ignored_verdicts_change_nothing() -> None:
    steps = [step("a", S.LOST), step("b", S.READY), step("c", S.WAITING, "a")]
    res = resolve(steps, run_status=W.RUNNING, run_fence=4,
                  verdicts={"a": Verdict(S.LOST), "b": Verdict(S.SUCCEEDED), "c": Verdict(S.FAILED),
                            "nope": Verdict(S.FAILED)})
    assert (res.outcome, res.transitions, res.run_fence, res.ready) == ("unchanged", (), 4, ("b",))


@pytest.mark.parametrize(("steps", "message"), [
    ([step("a", S.WAITING, "zz")], "unknown steps"),
    ([step("a", S.WAITING, "b"), step("b", S.WAITING, "a")], "cycle"),
    ([step("a", S.WAITING, "a")], "cycle"),
    ([step("a", S.READY), step("a", S.READY)], "duplicate step key"),
])
def test_malformed_steps_raise_value_error(steps: list[StepState], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve(steps, run_status=W.RUNNING, run_fence=1)


def test_a_need_named_twice_counts_once() -> None:
    # Plans exclude duplicate needs; the resolver must still not mistake one for a cycle (it released the
    # dependent twice, so the order held it twice and failed the length check).
    steps = [step("a", S.WAITING, "b", "b"), step("b", S.SUCCEEDED)]
    assert table(resolve(steps, run_status=W.RUNNING, run_fence=1)) == [("a", "waiting", "ready", None, 2, 2)]
