"""The six event-append conformance checks (host-spec U1-U35; ADR 0040).

A store keeps the event log's rule when a duplicate event id is a silent no-op that keeps the first event and
adds or changes no outbox row (T1-T4). These checks probe a store for it, in fresh probe spaces
``event-append-probe-<uuid4>`` of the subject's tenant:

=========================  ============================================================================
id                         what it sends
=========================  ============================================================================
``plain-append``           ``append_event`` then earlier- and later-ordered duplicates
``outbox-append``          ``append_event_with_outbox``, duplicates in four outbox-row states
``outbox-after-plain``     ``append_event``, then outbox duplicates: no row; a control row is the only one
``tx-append``              buffered duplicates in one transaction, committed ones each with a control
``tx-outbox-append``       the outbox check through transactions
``tx-outbox-after-plain``  the outbox-after-plain check through transactions
=========================  ============================================================================

The subject (``EventAppendSubject``) names a ``store`` that speaks plain dicts (fencepost's own ``Store``
through ``fencepost.events.fencepost_subject.FencepostEventStore``). Only ``append_event(envelope)`` and
``list_events(tenant_id, space_id)`` are required (U21); the others are capabilities, and a check whose
capability is absent is ``skipped`` (U23):

- outbox: ``append_event_with_outbox(envelope, outbox)``, ``list_outbox(tenant_id, space_id)``,
  ``claim_outbox(worker, limit, lease_seconds, now, *, tenant_id, space_id)``,
  ``mark_outbox_published(row_id, worker, lease_token, at)``,
  ``mark_outbox_failed(row_id, worker, lease_token, error, available_at)``, and for cleanup
  ``dead_letter_outbox(row_id, worker, lease_token, reason)``. An outbox append without the list, claim and
  mark methods fails: the check could neither verify nor clean up (U24).
- transactions: ``transaction()``, a context manager yielding an object with ``append_event`` (and
  ``append_event_with_outbox`` for the transactional outbox checks); it commits on normal exit.

An envelope is a dict: ``id``, ``tenant_id``, ``space_id``, ``subject_type``, ``subject_id``, ``type``,
``sequence``, ``occurred_at``, ``recorded_at``, ``payload``, ``metadata`` (and ``actor`` when disclosed).
Outbox metadata is ``{"destination", "headers"}``. Records and rows the store returns may be dicts or
dataclasses; an outbox row is read by ``id`` (its row id), ``event_id``, ``status``, ``lease_owner``,
``lease_token``, ``lease_expires_at``, and snapshotted whole.

Run them against test or staging stores with a dedicated probe tenant, and pause outbox relays for it (U25).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import partial
from typing import Any, Protocol

PROBE_SPACE_PREFIX = "event-append-probe-"
PROBE_WORKER_PREFIX = "event-append-probe-worker-"
#: The reason a probe row still pending at cleanup is dead-lettered with (U29).
DEAD_LETTER_REASON = "event append probe; never published"
#: The probe's claim lease (U31) and the clock-skew margin a released lease may still run (U12).
LEASE_SECONDS = 30
SKEW_MARGIN_SECONDS = 5
#: The first probe event's sequence in a fresh space: a store requiring gapless sequences fails (U9).
FIRST_SEQUENCE = 50
RELAY_WARNING = ("pause outbox relays for the probe tenant: these checks write, claim and dead-letter outbox "
                 "rows in probe spaces event-append-probe-<uuid> of it; run them against a test or staging "
                 "store with a dedicated probe tenant")
PAUSE_RELAYS = "pause outbox relays for the probe tenant and run again"
#: Statuses after which a row is no longer pending (fencepost's and common spellings).
_SETTLED = frozenset({"published", "dead_lettered", "dead_letter", "dead", "dead-lettered"})
#: Event fields a store may assign itself: not compared with the first input (U18), only snapshotted.
_STORE_ASSIGNED = frozenset({"sequence", "recorded_at"})
_NUMERIC_FIELDS = frozenset({"sequence", "attempt_count", "lease_token"})


# ---------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class CheckResult:
    """One check's outcome (U22).

    Attributes:
        id: the check id (``plain-append``, ...). status: ``passed``, ``failed`` or ``skipped``.
        evidence: what was probed, one line per step; a skip's evidence starts with ``skipped: `` (U23).
        error: why it failed (names the violation), None otherwise.
    """

    id: str
    status: str
    evidence: str
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"id", "status", "evidence", "error"}`` for JSON."""
        return {"id": self.id, "status": self.status, "evidence": self.evidence, "error": self.error}


@dataclass(frozen=True)
class SuiteResult:
    """A suite's outcome: ``passed`` means no check failed (skips do not fail it, U23)."""

    passed: bool
    checks: list[CheckResult]

    @property
    def skipped(self) -> int:
        """How many checks were skipped."""
        return sum(1 for c in self.checks if c.status == "skipped")

    @property
    def failed(self) -> int:
        """How many checks failed."""
        return sum(1 for c in self.checks if c.status == "failed")

    def as_dict(self) -> dict[str, Any]:
        """``{"passed", "checks": [...]}`` for JSON (U22)."""
        return {"passed": self.passed, "checks": [c.as_dict() for c in self.checks]}


def suite_result(checks: list[CheckResult]) -> SuiteResult:
    """The ``SuiteResult`` of ``checks``: passed when none failed."""
    return SuiteResult(passed=all(c.status != "failed" for c in checks), checks=checks)


@dataclass
class EventAppendSubject:
    """What the checks probe (U21): a ``store`` (see the module doc), the probe ``tenant_id``, and an optional
    ``reset()`` called before each check (for example to reopen a connection)."""

    store: Any
    tenant_id: str
    reset: Callable[[], None] | None = None


class Check(Protocol):
    id: str

    def run(self, subject: EventAppendSubject) -> CheckResult: ...


# ------------------------------------------------------------------------------------------ normalizing
def _ms(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _maybe_date(text: str) -> str:
    if len(text) < 10 or not text[:4].isdigit() or text[4:5] != "-":
        return text
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    return _ms(parsed)


def normalize(value: Any, key: str | None = None) -> Any:
    """A snapshot value in comparable form (U16): mappings with sorted keys and ``None`` entries dropped
    (``None`` is like absent), datetimes and date strings to UTC milliseconds, and numeric strings in
    ``sequence``, ``attempt_count`` and ``lease_token`` as numbers. Dataclasses are read as mappings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): normalize(v, str(k)) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
                if v is not None}
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    if isinstance(value, datetime):
        return _ms(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        if key in _NUMERIC_FIELDS:
            try:
                return int(value)
            except ValueError:
                return value
        return _maybe_date(value)
    if hasattr(value, "value") and isinstance(value.value, str):  # an Enum status
        return value.value
    return value


def snapshot(record: Any) -> dict[str, Any]:
    """The normalized whole-record snapshot of an event or outbox row (U16)."""
    value = normalize(record)
    return value if isinstance(value, dict) else {"value": value}


def _get(record: Any, name: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(name)
    return getattr(record, name, None)


def _diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


# ------------------------------------------------------------------------------------------------ probes
class _Stop(Exception):
    """A check's violation: ends the check as failed with this message."""


@dataclass(frozen=True)
class Duplicate:
    """A duplicate of the probe event: same id, every other field different (U3)."""

    label: str  # "earlier" or "later": lower or higher sequence and times
    envelope: dict[str, Any]
    outbox: dict[str, Any]


@dataclass
class Probe:
    """The envelopes one check sends in its own probe space (introspectable, U3)."""

    tenant_id: str
    space_id: str
    base: datetime
    first: dict[str, Any]
    first_outbox: dict[str, Any]
    duplicates: list[Duplicate]
    controls: int = 0

    def control(self) -> dict[str, Any]:
        """A fresh plain control event of this space, with its own id and a distinct sequence (U5, U6)."""
        self.controls += 1
        n = self.controls
        return _envelope(self.tenant_id, self.space_id, f"{self.space_id}:control-{n}", FIRST_SEQUENCE + 100 + n,
                         self.base + timedelta(seconds=1), f"control-{n}")


def _envelope(tenant: str, space: str, event_id: str, sequence: int, at: datetime, tag: str) -> dict[str, Any]:
    return {"id": event_id, "tenant_id": tenant, "space_id": space, "subject_type": f"EventAppendProbe.{tag}",
            "subject_id": f"subject-{tag}", "type": f"EventAppendProbed.{tag}", "sequence": sequence,
            "occurred_at": at, "recorded_at": at, "payload": {"probe": tag, "value": tag},
            "metadata": {"probe": tag}}


def make_probe(tenant_id: str, now: datetime | None = None) -> Probe:
    """A fresh probe space and its envelopes: the first event (sequence 50, times whole seconds a few
    seconds in the past, no actor) and two duplicates, one ordered earlier (sequence 10, 5 s earlier) and one
    later (sequence 90, 2 s later, still in the past), differing in every other field, in their outbox
    metadata, and disclosing an actor the first did not (U3, U9, U17, U26)."""
    now = now or datetime.now(UTC)
    base = now.replace(microsecond=0) - timedelta(seconds=10)
    space = f"{PROBE_SPACE_PREFIX}{uuid.uuid4()}"
    event_id = f"{space}:probe"
    first = _envelope(tenant_id, space, event_id, FIRST_SEQUENCE, base, "first")
    dups = []
    for label, sequence, shift in (("earlier", 10, -5), ("later", 90, 2)):
        env = _envelope(tenant_id, space, event_id, sequence, base + timedelta(seconds=shift), label)
        env["actor"] = {"id": f"duplicate-actor-{label}"}
        dups.append(Duplicate(label, env, {"destination": f"probe-{label}", "headers": {"probe": label}}))
    return Probe(tenant_id, space, base, first, {"destination": "probe-first", "headers": {"probe": "first"}},
                 dups)


# ------------------------------------------------------------------------------------------- run state
@dataclass
class RunState:
    """What the checks of one run share: a claim that returned foreign rows stops every later claim (U33)."""

    violation: str | None = None


@dataclass
class _Ctx:
    subject: EventAppendSubject
    probe: Probe
    state: RunState
    worker: str = field(default_factory=lambda: f"{PROBE_WORKER_PREFIX}{uuid.uuid4().hex[:12]}")
    evidence: list[str] = field(default_factory=list)
    held: dict[str, tuple[Any, str]] = field(default_factory=dict)  # event id -> (row id, token)
    violating_claim: list[tuple[Any, str, str]] | None = None  # (row id, event id, token)
    foreign_event_ids: set[str] = field(default_factory=set)

    @property
    def store(self) -> Any:
        return self.subject.store

    @property
    def tenant(self) -> str:
        return self.subject.tenant_id

    @property
    def space(self) -> str:
        return self.probe.space_id

    def note(self, line: str) -> None:
        self.evidence.append(line)

    # -- events
    def events(self) -> list[Any]:
        return list(self.store.list_events(self.tenant, self.space))

    def probe_events(self) -> list[Any]:
        # Counts only the original probe id (U6): controls share the space.
        return [e for e in self.events() if _get(e, "id") == self.probe.first["id"]]

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except _Stop:
            raise
        except Exception as error:  # any store error is a finding, reported, never a crash of the suite
            raise _Stop(f"{what} raised {type(error).__name__}: {error}") from error

    # -- outbox
    def rows(self) -> list[Any]:
        return list(self.call("list_outbox", lambda: self.store.list_outbox(self.tenant, self.space)))

    def probe_rows(self) -> list[Any]:
        return [r for r in self.rows() if _get(r, "event_id") == self.probe.first["id"]]

    def claim(self, limit: int) -> list[Any]:
        """Claim with the real current time, a 30 s lease and ``limit`` (U31); foreign rows stop claims."""
        if self.state.violation is not None:
            raise _Stop(f"skipped because of the earlier filter violation: {self.state.violation}")
        now = datetime.now(UTC)
        claimed = list(self.call("claim_outbox", lambda: self.store.claim_outbox(
            self.worker, limit, LEASE_SECONDS, now, tenant_id=self.tenant, space_id=self.space)))
        mine = {_get(r, "event_id") for r in self.rows()}
        foreign = [r for r in claimed if _get(r, "event_id") not in mine
                   or (_get(r, "tenant_id") not in (None, self.tenant))
                   or (_get(r, "space_id") not in (None, self.space))]
        if foreign:
            ids = sorted(str(_get(r, "id")) for r in foreign)
            self.foreign_event_ids.update(str(_get(r, "event_id")) for r in foreign)
            self.violating_claim = [(_get(r, "id"), _get(r, "event_id"), _get(r, "lease_token"))
                                    for r in claimed if r not in foreign]
            self.state.violation = (f"claim_outbox(tenant_id={self.tenant!r}) returned rows outside the probe "
                                    f"space: {', '.join(ids)}")
            raise _Stop(f"{self.state.violation}; the checks wrote nothing to them and make no further claims")
        for r in claimed:
            self.held[_get(r, "event_id")] = (_get(r, "id"), _get(r, "lease_token"))
        return claimed

    def pending_probe_rows(self) -> list[Any]:
        return [r for r in self.rows() if normalize(_get(r, "status")) not in _SETTLED]


# ----------------------------------------------------------------------------------------- assertions
def _check_first_event(ctx: _Ctx, stored: Any) -> dict[str, Any]:
    """The first append is stored as given (U18 tolerance) and discloses no actor (U17); returns the
    normalized reference snapshot."""
    ref = snapshot(stored)
    given = snapshot(ctx.probe.first)
    wrong = [k for k in given if k in ref and k not in _STORE_ASSIGNED and ref[k] != given[k]]
    if wrong:
        raise _Stop(f"the first event was not stored as appended: {', '.join(wrong)} differ")
    for key in ("actor", "actor_disclosure", "actor_id"):
        if key in ref:
            raise _Stop(f"the first event carries {key} although its metadata did not opt in to an actor "
                        "disclosure")
    return ref


def _check_event_kept(ctx: _Ctx, ref: dict[str, Any], dup: Duplicate, where: str) -> None:
    found = ctx.probe_events()
    if len(found) == 0:
        raise _Stop(f"{where}: the probe event is gone after the {dup.label}-ordered duplicate")
    if len(found) > 1:
        raise _Stop(f"{where}: kept both events: {len(found)} events with id {ctx.probe.first['id']} after the "
                    f"{dup.label}-ordered duplicate")
    now = snapshot(found[0])
    changed = [k for k in _diff(ref, now) if k != "updated_at"]
    if not changed:
        return
    dup_n = snapshot(dup.envelope)
    given = snapshot(ctx.probe.first)
    taken = [k for k in changed if k in dup_n and now.get(k) == dup_n[k]]
    differing = [k for k in given if k in dup_n and given[k] != dup_n[k] and k in ref and k not in _STORE_ASSIGNED]
    if taken and set(differing) <= set(taken):
        raise _Stop(f"{where}: the {dup.label}-ordered duplicate replaced the first event (fields now the "
                    f"duplicate's: {', '.join(taken)})")
    if taken:
        raise _Stop(f"{where}: the {dup.label}-ordered duplicate was merged into the first event (fields taken: "
                    f"{', '.join(taken)}; changed: {', '.join(changed)})")
    raise _Stop(f"{where}: the first event was rewritten by the {dup.label}-ordered duplicate (changed: "
                f"{', '.join(changed)})")


def _check_row_kept(ctx: _Ctx, ref: dict[str, Any], state: str, dup: Duplicate) -> None:
    rows = ctx.probe_rows()
    if len(rows) != 1:
        raise _Stop(f"state {state}: {len(rows)} outbox rows for the probe event after the {dup.label}-ordered "
                    "duplicate (a duplicate added an outbox row)" if len(rows) > 1 else
                    f"state {state}: the probe's outbox row is gone after the {dup.label}-ordered duplicate")
    now = snapshot(rows[0])
    if now != ref:
        raise _Stop(f"state {state}: the outbox row was reset or rewritten by the {dup.label}-ordered duplicate "
                    f"(changed: {', '.join(_diff(ref, now))}); if a relay runs for this tenant, {PAUSE_RELAYS}")


def _check_lease_owner(ctx: _Ctx, row: Mapping[str, Any], state: str) -> None:
    owner = row.get("lease_owner")
    if owner is not None and owner != ctx.worker:
        raise _Stop(f"state {state}: the probe row is leased by another worker ({owner}); {PAUSE_RELAYS}")


# ------------------------------------------------------------------------------------------ the checks
_OUTBOX_METHODS = ("list_outbox", "claim_outbox", "mark_outbox_published", "mark_outbox_failed")


def _missing(store: Any, names: tuple[str, ...]) -> list[str]:
    return [n for n in names if not callable(getattr(store, n, None))]


class _Base:
    id = ""
    needs: tuple[str, ...] = ()
    outbox = False

    def run(self, subject: EventAppendSubject, state: RunState | None = None) -> CheckResult:
        """Run this check alone (U1), or as part of a suite run sharing ``state``. Never raises: a store
        error is a failure whose error names it."""
        state = state or RunState()
        missing = _missing(subject.store, self.needs)
        if missing:
            return CheckResult(self.id, "skipped", f"skipped: the store has no {', '.join(missing)}")
        if self.outbox:
            lacking = _missing(subject.store, _OUTBOX_METHODS)
            if lacking:
                return CheckResult(self.id, "failed", "outbox append available",
                                   f"the store appends with an outbox but has no {', '.join(lacking)}: the "
                                   "check can neither verify nor clean up its probe rows")
        if subject.reset is not None:
            subject.reset()
        ctx = _Ctx(subject, make_probe(subject.tenant_id), state)
        ctx.note(f"probe space {ctx.space}, worker {ctx.worker}")
        error: str | None = None
        try:
            if self.outbox and state.violation is not None:
                raise _Stop(f"skipped because of the earlier filter violation: {state.violation}")
            self.body(ctx)
        except _Stop as stop:
            error = str(stop)
        except Exception as raised:  # a store error outside a named call (list_events, a buffered append)
            error = f"{type(raised).__name__}: {raised}"
        cleanup_error = _cleanup(ctx) if self.outbox else None
        if cleanup_error:
            error = f"{error}; {cleanup_error}" if error else cleanup_error
        status = "failed" if error else "passed"
        return CheckResult(self.id, status, "\n".join(ctx.evidence), error)

    def body(self, ctx: _Ctx) -> None:
        raise NotImplementedError


def _stored_first(ctx: _Ctx) -> dict[str, Any]:
    found = ctx.probe_events()
    if len(found) != 1:
        raise _Stop(f"{len(found)} events with the probe id after the first append (expected 1)")
    return _check_first_event(ctx, found[0])


class PlainAppend(_Base):
    """``plain-append``: ``append_event`` keeps the first of an id against earlier and later duplicates."""

    id = "plain-append"

    def body(self, ctx: _Ctx) -> None:
        ctx.call("append_event", lambda: ctx.store.append_event(ctx.probe.first))
        ref = _stored_first(ctx)
        ctx.note("first event stored")
        for dup in ctx.probe.duplicates:
            ctx.call(f"append_event of the {dup.label}-ordered duplicate (throwing on a duplicate)",
                     partial(ctx.store.append_event, dup.envelope))
            _check_event_kept(ctx, ref, dup, "plain append")
            ctx.note(f"{dup.label}-ordered duplicate: first event kept")


def _four_states(ctx: _Ctx, send: Callable[[Duplicate], None], event_ref: dict[str, Any]) -> None:
    """The outbox row through pending, leased, retry-pending and published, with both duplicates sent in
    each state and whole-row snapshots compared (U10-U15)."""
    rows = ctx.probe_rows()
    if len(rows) != 1:
        raise _Stop(f"{len(rows)} outbox rows for the probe event after the first outbox append (expected 1)")
    meta = snapshot(ctx.probe.first_outbox)
    row = snapshot(rows[0])
    wrong = [k for k in meta if k in row and row[k] != meta[k]]
    if wrong:
        raise _Stop(f"the first outbox row does not carry the first metadata: {', '.join(wrong)} differ")
    for key in ("actor", "actor_disclosure", "actor_id"):
        if key in row or key in (row.get("envelope") or {}):
            raise _Stop(f"the first outbox envelope carries {key} although its metadata did not opt in")

    def duplicates(state: str) -> None:
        ref = _the_row(ctx, state)
        _check_lease_owner(ctx, ref, state)
        for dup in ctx.probe.duplicates:
            send(dup)
            _check_event_kept(ctx, event_ref, dup, f"state {state}")
            _check_row_kept(ctx, ref, state, dup)
        ctx.note(f"state {state}: duplicates kept the event and the whole row")

    duplicates("pending")
    token = _claim_probe(ctx, "leased")
    duplicates("leased")
    row_id = ctx.held[ctx.probe.first["id"]][0]
    available = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=3)  # U15: whole s, in the past
    ok = ctx.call("mark_outbox_failed", lambda: ctx.store.mark_outbox_failed(
        row_id, ctx.worker, token, "event append probe failure (nothing was sent)", available))
    if ok is False:
        raise _Stop("mark_outbox_failed refused the probe's own lease")
    ctx.held.pop(ctx.probe.first["id"], None)
    _wait_released(ctx, _the_row(ctx, "retry-pending"))
    duplicates("retry-pending")
    token = _claim_probe(ctx, "reclaimed")
    ok = ctx.call("mark_outbox_published", lambda: ctx.store.mark_outbox_published(
        row_id, ctx.worker, token, datetime.now(UTC)))
    if ok is False:
        raise _Stop("mark_outbox_published refused the probe's own lease")
    ctx.held.pop(ctx.probe.first["id"], None)
    duplicates("published")
    # U28: the row stays published although nothing was sent; that state is what duplicates are probed against.


def _the_row(ctx: _Ctx, state: str) -> dict[str, Any]:
    rows = ctx.probe_rows()
    if len(rows) != 1:
        raise _Stop(f"state {state}: {len(rows)} outbox rows for the probe event (expected 1)")
    return snapshot(rows[0])


def _claim_probe(ctx: _Ctx, state: str) -> str:
    claimed = ctx.claim(len(ctx.pending_probe_rows()))
    held = ctx.held.get(ctx.probe.first["id"])
    if held is None:
        raise _Stop(f"claim_outbox did not return the probe row ({state}); if a relay runs for this tenant, "
                    f"{PAUSE_RELAYS}")
    ctx.note(f"claimed {len(claimed)} row(s) ({state})")
    return held[1]


def _wait_released(ctx: _Ctx, row: dict[str, Any]) -> None:
    """U11, U12: retry-pending accepts a cleared lease, an expired one (no owner or the probe's), or the probe
    owner kept without expiry; an expiry within 5 s is clock skew, waited out."""
    _check_lease_owner(ctx, row, "retry-pending")
    raw = row.get("lease_expires_at")
    if raw is None:
        return
    expires = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    left = (expires - datetime.now(UTC)).total_seconds()
    if left > SKEW_MARGIN_SECONDS:
        raise _Stop("mark_outbox_failed did not release the lease (it still expires in "
                    f"{left:.0f} s)")
    if left > 0:
        ctx.note(f"released lease still runs {left:.1f} s (clock skew): waited")
        time.sleep(left + 0.05)


class OutboxAppend(_Base):
    """``outbox-append``: ``append_event_with_outbox`` keeps the first event and its row in four states."""

    id = "outbox-append"
    needs = ("append_event_with_outbox",)
    outbox = True

    def body(self, ctx: _Ctx) -> None:
        ctx.call("append_event_with_outbox", lambda: ctx.store.append_event_with_outbox(
            ctx.probe.first, ctx.probe.first_outbox))
        ref = _stored_first(ctx)

        def send(dup: Duplicate) -> None:
            ctx.call(f"append_event_with_outbox of the {dup.label}-ordered duplicate (throwing on a duplicate)",
                     lambda: ctx.store.append_event_with_outbox(dup.envelope, dup.outbox))

        _four_states(ctx, send, ref)


def _only_control_row(ctx: _Ctx, control: dict[str, Any]) -> None:
    """U20: the fresh control's row is the only outbox row in the probe space, so an empty ``list_outbox``
    cannot pass."""
    rows = ctx.rows()
    ids = [_get(r, "event_id") for r in rows]
    if ids != [control["id"]]:
        raise _Stop(f"after the control outbox append the probe space holds outbox rows for {ids} (expected only "
                    f"the control {control['id']}): a duplicate of a plain event added a row, or list_outbox "
                    "does not show rows")
    ctx.note("the control's row is the only outbox row")


class OutboxAfterPlain(_Base):
    """``outbox-after-plain``: an outbox duplicate of a plain event adds no row (T3)."""

    id = "outbox-after-plain"
    needs = ("append_event_with_outbox",)
    outbox = True

    def body(self, ctx: _Ctx) -> None:
        ctx.call("append_event", lambda: ctx.store.append_event(ctx.probe.first))
        ref = _stored_first(ctx)
        for dup in ctx.probe.duplicates:
            ctx.call(f"append_event_with_outbox of the {dup.label}-ordered duplicate (throwing on a duplicate)",
                     partial(ctx.store.append_event_with_outbox, dup.envelope, dup.outbox))
            _check_event_kept(ctx, ref, dup, "outbox after plain")
            if ctx.probe_rows():
                raise _Stop(f"the {dup.label}-ordered outbox duplicate of a plain event added an outbox row")
        control = ctx.probe.control()
        ctx.call("append_event_with_outbox of the control", lambda: ctx.store.append_event_with_outbox(
            control, ctx.probe.first_outbox))
        _only_control_row(ctx, control)


@contextmanager
def _tx(ctx: _Ctx, what: str) -> Iterator[Any]:
    try:
        with ctx.store.transaction() as tx:
            yield tx
    except _Stop:
        raise
    except Exception as error:  # any store error is a finding, reported, never a crash of the suite
        raise _Stop(f"{what} raised {type(error).__name__}: {error}") from error


def _committed_duplicate(ctx: _Ctx, dup: Duplicate, outbox: bool) -> None:
    """One transaction: the duplicate, then a fresh plain control; after commit the control must be there
    (U5: a silently rolled-back unit is detected)."""
    control = ctx.probe.control()
    with _tx(ctx, f"the transaction of the committed {dup.label}-ordered duplicate (throwing on a duplicate)") as tx:
        if outbox:
            tx.append_event_with_outbox(dup.envelope, dup.outbox)
        else:
            tx.append_event(dup.envelope)
        tx.append_event(control)
    if not any(_get(e, "id") == control["id"] for e in ctx.events()):
        raise _Stop(f"the control event of the committed {dup.label}-ordered duplicate's transaction is missing: "
                    "the transaction was silently rolled back")


class TxAppend(_Base):
    """``tx-append``: buffered duplicates in the first transaction and committed ones each keep the first."""

    id = "tx-append"
    needs = ("transaction",)

    def body(self, ctx: _Ctx) -> None:
        with _tx(ctx, "the first transaction (buffered duplicates)") as tx:
            tx.append_event(ctx.probe.first)
            for dup in ctx.probe.duplicates:
                tx.append_event(dup.envelope)
        found = ctx.probe_events()
        if len(found) != 1:
            raise _Stop(f"kept both events: {len(found)} events with the probe id after buffered duplicates in "
                        "one transaction" if found else "the first transaction stored no probe event: it was silently "
                        "rolled back, or its appends were lost")
        ref = snapshot(found[0])
        given = snapshot(ctx.probe.first)
        for dup in ctx.probe.duplicates:  # U19: every exposed differing field keeps the first value
            dup_n = snapshot(dup.envelope)
            taken = [k for k in ref if k in given and k in dup_n and given[k] != dup_n[k] and ref[k] == dup_n[k]
                     and k not in _STORE_ASSIGNED]
            if taken:
                raise _Stop(f"buffered duplicate in one transaction: the {dup.label}-ordered duplicate's fields "
                            f"won ({', '.join(taken)}): the first write must win within a transaction too")
        ref = _check_first_event(ctx, found[0])
        ctx.note("buffered duplicates: first event kept")
        for dup in ctx.probe.duplicates:
            _committed_duplicate(ctx, dup, outbox=False)
            _check_event_kept(ctx, ref, dup, "committed duplicate in a transaction")
        ctx.note("committed duplicates: first event kept, controls committed")


class TxOutboxAppend(_Base):
    """``tx-outbox-append``: the outbox check through transactions (buffered and committed duplicates)."""

    id = "tx-outbox-append"
    needs = ("transaction", "append_event_with_outbox")
    outbox = True

    def body(self, ctx: _Ctx) -> None:
        with _tx(ctx, "the first transaction (buffered outbox duplicates)") as tx:
            tx.append_event_with_outbox(ctx.probe.first, ctx.probe.first_outbox)
            for dup in ctx.probe.duplicates:
                tx.append_event_with_outbox(dup.envelope, dup.outbox)
        ref = _stored_first(ctx)
        ctx.note("buffered outbox duplicates: first event kept")

        def send(dup: Duplicate) -> None:
            _committed_duplicate(ctx, dup, outbox=True)

        _four_states(ctx, send, ref)


class TxOutboxAfterPlain(_Base):
    """``tx-outbox-after-plain``: transactional outbox duplicates of a plain event add no row."""

    id = "tx-outbox-after-plain"
    needs = ("transaction", "append_event_with_outbox")
    outbox = True

    def body(self, ctx: _Ctx) -> None:
        first_dup = ctx.probe.duplicates[0]
        with _tx(ctx, "the first transaction (plain, then a buffered outbox duplicate)") as tx:
            tx.append_event(ctx.probe.first)
            tx.append_event_with_outbox(first_dup.envelope, first_dup.outbox)
        ref = _stored_first(ctx)
        if ctx.probe_rows():
            raise _Stop("a buffered outbox duplicate of a plain event added an outbox row")
        for dup in ctx.probe.duplicates:
            _committed_duplicate(ctx, dup, outbox=True)
            _check_event_kept(ctx, ref, dup, "committed outbox duplicate of a plain event")
            if ctx.probe_rows():
                raise _Stop(f"the committed {dup.label}-ordered outbox duplicate of a plain event added an outbox "
                            "row")
        control = ctx.probe.control()
        with _tx(ctx, "the control's transaction") as tx:
            tx.append_event_with_outbox(control, ctx.probe.first_outbox)
        _only_control_row(ctx, control)


# --------------------------------------------------------------------------------------------- cleanup
def _cleanup(ctx: _Ctx) -> str | None:
    """Dead-letter every visible probe row still pending (U29), writing only to probe rows (U32). After a
    filter violation: only the probe rows the violating claim returned, with its tokens, no new claim (U34).
    Returns an error message, or None."""
    problems: list[str] = []

    def dead_letter(row_id: Any, token: str, event_id: str) -> None:
        try:
            if ctx.store.dead_letter_outbox(row_id, ctx.worker, token, DEAD_LETTER_REASON) is False:
                problems.append(f"dead-lettering probe row {row_id} was refused")
        except Exception as error:  # any store error is a finding, reported, never a crash of the suite
            problems.append(f"dead-lettering probe row {row_id} raised {type(error).__name__}: {error}")

    if not callable(getattr(ctx.store, "dead_letter_outbox", None)):
        return None if not _pending(ctx) else "the store has no dead_letter_outbox: probe rows stay pending"
    try:
        for event_id, (row_id, token) in list(ctx.held.items()):
            dead_letter(row_id, token, event_id)
        ctx.held.clear()
        if ctx.violating_claim is not None:
            for row_id, event_id, token in ctx.violating_claim:
                dead_letter(row_id, token, event_id)
        elif ctx.state.violation is None:
            pending = _pending(ctx)
            if pending:
                try:
                    ctx.claim(len(pending))
                except _Stop as stop:  # the cleanup claim itself returned foreign rows (U34)
                    problems.append(str(stop))
                    for row_id, event_id, token in ctx.violating_claim or []:
                        dead_letter(row_id, token, event_id)
                for event_id, (row_id, token) in list(ctx.held.items()):
                    dead_letter(row_id, token, event_id)
                ctx.held.clear()
        left = [str(_get(r, "id")) for r in _pending(ctx)]
    except Exception as error:  # any store error is a finding, reported, never a crash of the suite
        return f"probe cleanup raised {type(error).__name__}: {error}"
    if left:
        problems.append(f"probe rows still pending: {', '.join(left)}; dead-letter them by hand")
    else:
        ctx.note("cleanup: no probe row left pending")
    return "; ".join(problems) or None


def _pending(ctx: _Ctx) -> list[Any]:
    return [r for r in ctx.store.list_outbox(ctx.tenant, ctx.space)
            if normalize(_get(r, "status")) not in _SETTLED and _get(r, "event_id") not in ctx.foreign_event_ids]


# ------------------------------------------------------------------------------------------ entry points
def event_append_checks() -> list[Any]:
    """The six check objects in order (U1): ``plain-append``, ``outbox-append``, ``outbox-after-plain``,
    ``tx-append``, ``tx-outbox-append``, ``tx-outbox-after-plain``. Each has ``id`` and ``run(subject)``."""
    return [PlainAppend(), OutboxAppend(), OutboxAfterPlain(), TxAppend(), TxOutboxAppend(), TxOutboxAfterPlain()]


def run_event_append_checks(subject: EventAppendSubject) -> SuiteResult:
    """Run the six checks against ``subject`` (U1), sharing one run state, so that a claim returning foreign
    rows stops every later claim and fails later outbox checks as skipped because of it (U33).

    Returns:
        ``SuiteResult(passed, checks)``; ``passed`` is True when no check failed (skips included, U23).
    """
    state = RunState()
    return suite_result([check.run(subject, state) for check in event_append_checks()])
