"""Findings in, decisions out: one decision per workload that has a finding or a ladder.

Pure and deterministic: no clock (``now`` comes in), no I/O, inputs are never mutated and
outputs are sorted by workload id. Dry-run and enforce get the same decisions; whether a
decision is executed is the runtime's business (``Decision.acts`` says whether it should be).

A held decision carries the level and step it would have taken, with ``hold`` saying why it
does not; only acting decisions advance the ladder. Acting decisions carry an idempotency key,
and so does a step held awaiting approval (the runtime asks for approval under that key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import chain
from operator import attrgetter

from gpusteward.domain.models import (
    Decision,
    Finding,
    Gpu,
    Hold,
    LadderState,
    Level,
    RuleAction,
    Workload,
)
from gpusteward.domain.queue import Queue
from gpusteward.policy import guards, health, ladder, owner
from gpusteward.policy.ladder import Step
from gpusteward.policy.owner import ApprovalView, SnoozeView
from gpusteward.policy.scope_settings import Stage
from gpusteward.policy.scopes import Scope, cap, scope_for
from gpusteward.policy.settings import PolicySettings


@dataclass(frozen=True)
class PolicyInput:
    now: datetime
    findings: Sequence[Finding]
    #: Running workloads by id.
    workloads: Mapping[str, Workload]
    #: Persisted ladders by workload id.
    states: Mapping[str, LadderState]
    #: Workloads with stale or missing data this tick: nothing advances, nothing clears.
    unknown_workloads: frozenset[str]
    gpus: Mapping[str, Gpu]
    paused: bool = False
    #: L2+ actions executed in the last hour, and the GPUs they touched (from the store).
    recent_actions: int = 0
    recent_action_gpus: int = 0
    #: Per rule, the workloads it could not judge (too little data since a restart or a new
    #: holder): a ladder driven by that rule neither advances nor clears on them.
    unjudged: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: Enforcing with approvals on: the latest approval request per action idempotency key.
    #: ``None``: no step waits for a person (dry-run previews every step as if approved).
    approvals: Mapping[str, ApprovalView] | None = None
    #: Workload id → its snooze in force.
    snoozes: Mapping[str, SnoozeView] = field(default_factory=dict)
    #: Rules whose findings a snooze does not hold (``snoozable: false``).
    unsnoozable_rules: frozenset[str] = frozenset()
    #: Scope → the stage ``gpusteward rollout promote`` set (over the configured mode).
    stages: Mapping[str, Stage] = field(default_factory=dict)
    #: Scope → ladder-timing multiplier while a suspected false kill there is unsettled.
    slowed: Mapping[str, float] = field(default_factory=dict)
    #: The schedulers' queues, merged: jobs waiting for a model speed its idle holders' ladders up.
    #: ``None``: no queue was read (the ladder keeps its configured pace).
    queue: Queue | None = None


@dataclass(frozen=True)
class PolicyResult:
    decisions: tuple[Decision, ...]
    #: Ladders to persist (new or changed). Disjoint from ``cleared``.
    states: Mapping[str, LadderState]
    #: Workload ids whose ladder ends (waste gone, workload gone, restarted, opted out).
    cleared: frozenset[str]


@dataclass
class _Plan:
    """One workload's decision while the tick-wide guards may still hold its step."""

    workload_id: str
    reason: str
    workload: Workload | None = None
    finding: Finding | None = None
    advice: bool = False
    seen: str = ""
    state: LadderState | None = None
    clear: bool = False
    step: Step | None = None
    hold: Hold = Hold.NONE
    rule: str = ""
    gpu_uuids: tuple[str, ...] = ()
    #: The key of a step that waits for approval (the runtime asks for it under this key).
    waiting_key: str = ""
    approved_by: str = ""
    scope: Scope | None = None


#: A workload's GPUs: the fleet the budget's share is of counts those no source lists too.
_UUIDS = attrgetter("gpu_uuids")


def idempotency_key(state: LadderState, step: Step) -> str:
    """``workload:incarnation:episode:step``, unique per waste episode so that a second episode
    of the same workload gets its warnings again instead of colliding with the first one's."""
    return f"{state.workload_id}:{state.incarnation}:{int(state.first_seen_at.timestamp())}:{step.name}"


def _waste(f: Finding) -> tuple[float, float, str]:
    # The rule name breaks ties so the driver does not depend on finding order.
    return f.wasted_cost, f.wasted_gpu_hours, f.rule


def _driver(findings: Sequence[Finding]) -> Finding | None:
    """The reclaim finding with the most waste, else the most wasteful advice."""
    reclaim = [f for f in findings if f.action is RuleAction.RECLAIM]
    pool = reclaim or list(findings)
    return max(pool, key=_waste) if pool else None


def _seen(f: Finding, gpus: Mapping[str, Gpu]) -> str:
    """What was seen: rule, GPUs, minutes and money (a health finding: the fault), in one sentence."""
    return health.seen(f, gpus)


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _ahead(state: LadderState, p: _Plan, now: datetime, settings: PolicySettings) -> str:
    assert p.scope is not None  # a step is only planned once the workload's scope is known
    steps = ladder.schedule(state, p.scope.timings, now, advice=p.advice, max_level=p.scope.cap)
    pace = p.scope.pace(state, now, advice=p.advice)
    if not steps:
        return pace
    plan = ", ".join(f"{s.title} ({s.name}) {ladder.when(at, now)}" for s, at in steps)
    return f" Next: {plan}, unless the GPUs get busy again.{pace}"


def _clean(wid: str, w: Workload, prev: LadderState, now: datetime, settings: PolicySettings) -> _Plan:
    """Fresh data shows no waste: the ladder ends once that has lasted ``clear_after_minutes``."""
    since = prev.clean_since or now
    ends = since + timedelta(minutes=settings.ladder.clear_after_minutes)
    if now >= ends:
        return _Plan(
            wid, "No waste is seen on fresh data any more: its ladder is reset.", workload=w, clear=True
        )
    reason = (
        f"No waste seen since {ladder.clock(since)}: nothing is done, and the ladder "
        f"(at {prev.step or 'no step yet'}) resets {ladder.when(ends, now)} if it stays so."
    )
    state = replace(prev, clean_since=since)
    return _Plan(wid, reason, workload=w, state=state, hold=Hold.WAITING, rule=prev.rule)


def _plan(wid: str, findings: Sequence[Finding], inp: PolicyInput, settings: PolicySettings) -> _Plan | None:
    now, prev, w = inp.now, inp.states.get(wid), inp.workloads.get(wid)
    driver = _driver(findings)
    unjudged = driver is None and prev is not None and wid in inp.unjudged.get(prev.rule, frozenset())
    if wid in inp.unknown_workloads or unjudged:
        seen = _seen(driver, inp.gpus) if driver else ""
        where = f" (the ladder stays at {prev.step or 'no step yet'})" if prev else ""
        rule = driver.rule if driver else prev.rule if prev else ""
        return _Plan(
            wid,
            _join(seen, f"No fresh data: nothing is done{where}."),
            workload=w,
            finding=driver,
            seen=seen,
            state=prev,
            hold=Hold.STALE,
            rule=rule,
            gpu_uuids=driver.gpu_uuids if driver else (),
        )
    if w is None:
        if prev is None:
            rule = driver.rule if driver else ""
            return _Plan(wid, "The workload is not running: nothing to do.", finding=driver, rule=rule)
        return _Plan(wid, "The workload is no longer running: its ladder ends.", clear=True, rule=prev.rule)
    restarted = prev is not None and prev.incarnation != w.incarnation
    if restarted:
        prev = None
    if driver is None:
        if prev is None:
            return _Plan(wid, "It restarted: its ladder is reset.", workload=w, clear=True)
        return _clean(wid, w, prev, now, settings)
    advice = driver.action is not RuleAction.RECLAIM
    seen = _seen(driver, inp.gpus)
    p = _Plan(wid, "", w, driver, advice, seen, rule=driver.rule, gpu_uuids=driver.gpu_uuids)
    p.scope = scope = scope_for(w, inp.gpus, settings, inp.stages, inp.slowed, inp.queue)
    owner_hold = guards.excluded(w, now)
    if owner_hold is not None:
        # The owner opted out for a while: the ladder ends, and starts again from a first warning later.
        p.clear, p.hold = True, owner_hold.hold
        p.reason = f"{seen} Nothing is done: {owner_hold.reason}."
        return p
    if prev is not None and ladder.kind(prev) in (None, "advice" if advice else "reclaim"):
        p.state = ladder.observe(prev, driver.rule, now)
    else:
        p.state = ladder.start(wid, w.incarnation, driver.rule, now)
    # Each class its own timings (a service may get longer to answer its owner, say), then the scope's.
    nxt = ladder.next_step(p.state, scope.timings, advice=advice)
    if nxt is None:
        p.hold = Hold.ADVICE_ONLY if advice else Hold.WAITING
        done = ladder.STEPS[p.state.step].title if p.state.step in ladder.STEPS else p.state.step
        at = ladder.clock(p.state.step_at) if p.state.step_at else "earlier"
        tail = "gpusteward takes no action on advice" if advice else "there is no further step"
        p.reason = f"{seen} The {done} was issued at {at}; {tail}."
        return p
    step, due = nxt
    if due > now:
        p.hold = Hold.WAITING
        p.reason = f"{seen} Next: {step.title} ({step.name}) {ladder.when(due, now)}."
        p.reason += scope.pace(p.state, now, advice=advice)
        return p
    if _capped(p, step, w, now, settings):
        return p
    p.step = step
    if step.level >= Level.GRACEFUL_STOP:
        p.gpu_uuids = w.gpu_uuids
    wasted = {u for f in findings if f.action is RuleAction.RECLAIM for u in f.gpu_uuids}
    held = guards.startup_grace(w, now, settings.startup_grace_minutes)
    if held is None and step.level >= Level.GRACEFUL_STOP:
        held = guards.partly_busy(w, wasted)
    if held is not None:
        p.hold, p.reason = held.hold, _join(seen, f"The {step.title} is held: {held.reason}.")
    return p


def _capped(p: _Plan, step: Step, w: Workload, now: datetime, settings: PolicySettings) -> bool:
    """Hold a due step above what the scope's stage, protection or max_level allows."""
    assert p.scope is not None
    assert p.state is not None
    held = cap(p.scope, p.state, step, w, now, settings.protect, advice=p.advice)
    if held is None:
        return False
    p.step, p.hold = held.step, held.hold
    p.reason = _join(p.seen, held.reason)
    if held.step is not None and held.step.level >= Level.GRACEFUL_STOP:
        p.gpu_uuids = w.gpu_uuids
    return True


def _snoozed(wid: str, found: Sequence[Finding], snooze: SnoozeView, inp: PolicyInput) -> _Plan:
    """Snoozed by its owner: recorded, nothing done, and its ladder ends (it starts again later)."""
    driver = _driver(found)
    assert driver is not None
    seen = _seen(driver, inp.gpus)
    return _Plan(
        wid,
        owner.snoozed(snooze, seen),
        workload=inp.workloads.get(wid),
        finding=driver,
        seen=seen,
        clear=True,
        hold=Hold.SNOOZED,
        rule=driver.rule,
        gpu_uuids=driver.gpu_uuids,
    )


def _owner_gates(plans: Mapping[str, _Plan], inp: PolicyInput, settings: PolicySettings) -> None:
    """Working hours, then approvals: a due step either passes both or waits with the reason."""
    off = owner.off_hours(inp.now, settings.working_hours)
    for p in plans.values():
        if p.step is None or p.hold is not Hold.NONE or p.state is None:
            continue
        if off is not None and p.step.level >= settings.working_hours.min_level:
            p.hold, p.reason = off.hold, _join(p.seen, f"The {p.step.title} is held: {off.reason}.")
            continue
        if inp.approvals is None or not settings.approval.needs_approval(p.step.level):
            continue
        # The key does not depend on when the step is taken: the request names the same step.
        key = idempotency_key(p.state, p.step)
        approval = inp.approvals.get(key)
        held = owner.approval_gate(p.step, approval, inp.now, settings.approval.expire_hours)
        if held is None:
            p.approved_by = approval.decided_by if approval is not None else ""
            continue
        p.hold, p.reason = held.hold, _join(p.seen, f"The {p.step.title} is held: {held.reason}.")
        if held.hold is Hold.AWAITING_APPROVAL:
            p.waiting_key = key


def _candidates(plans: Sequence[_Plan], *, only: Step | None = None) -> list[guards.StopCandidate]:
    return [
        guards.StopCandidate(p.workload_id, p.gpu_uuids, p.finding.wasted_cost, p.finding.wasted_gpu_hours)
        for p in plans
        if p.step is not None
        and p.hold is Hold.NONE
        and p.finding is not None
        and p.step.level >= Level.GRACEFUL_STOP
        and (only is None or p.step is only)
    ]


def _hold_all(plans: Mapping[str, _Plan], held: Mapping[str, guards.Held]) -> None:
    for wid, h in held.items():
        p = plans[wid]
        title = p.step.title if p.step else "step"
        p.hold, p.reason = h.hold, _join(p.seen, f"The {title} is held: {h.reason}.")


def _acting_reason(p: _Plan, state: LadderState, now: datetime, settings: PolicySettings) -> str:
    step, ahead = p.step, _ahead(state, p, now, settings)
    if step is ladder.WARN_1:
        return f"{p.seen} This is the first warning.{ahead}"
    if step is ladder.WARN_2:
        return f"{p.seen} This is the second warning.{ahead}"
    if step is ladder.GRACEFUL_STOP:
        grace = settings.ladder.stop_grace_seconds
        return (
            f"{p.seen} Stopping it gracefully now: checkpoint signal, then SIGTERM {grace:g} s later.{ahead}"
        )
    if step is ladder.FORCE:
        return f"{p.seen} It still holds its GPUs after the graceful stop: force-stopping it now."
    return f"{p.seen} Advice only: gpusteward will not act on this."


def decide(inp: PolicyInput, settings: PolicySettings) -> PolicyResult:
    """Turn this tick's findings and the persisted ladders into decisions and new ladders."""
    now = inp.now
    by_workload: dict[str, list[Finding]] = {}
    for f in inp.findings:
        if f.workload_id is not None:  # waste on GPUs no workload holds has nobody to act on
            by_workload.setdefault(f.workload_id, []).append(f)
    faulted = health.set_aside(by_workload, inp.workloads)  # on a failed GPU: never idle
    plans: dict[str, _Plan] = {}
    for wid in sorted(set(by_workload) | set(inp.states)):
        found = by_workload.get(wid, [])
        snooze = inp.snoozes.get(wid)
        if snooze is not None and found and wid in inp.workloads and wid not in inp.unknown_workloads:
            # A snooze holds every finding but those of rules admins made unsnoozable.
            kept = [f for f in found if f.rule in inp.unsnoozable_rules]
            if not kept:
                plans[wid] = _snoozed(wid, found, snooze, inp)
                continue
            found = kept
        p = _plan(wid, found, inp, settings)
        if p is not None:
            plans[wid] = p

    pause = guards.paused(inp.paused)
    if pause is not None:
        for p in plans.values():
            if p.finding is not None or not p.clear:
                p.hold, p.reason = pause.hold, _join(p.seen, f"Nothing is done: {pause.reason}.")
    _owner_gates(plans, inp, settings)
    stops = list(plans.values())
    _hold_all(
        plans, guards.reserve(_candidates(stops, only=ladder.GRACEFUL_STOP), inp.gpus, settings.reserve.share)
    )
    candidates = _candidates(stops)
    if candidates:  # the fleet's GPUs counted (100,000 at the largest) only when a stop is due
        total = len(inp.gpus.keys() | chain.from_iterable(map(_UUIDS, inp.workloads.values())))
        budget = guards.budget(
            candidates,
            settings.budget,
            total_gpus=total,
            recent_actions=inp.recent_actions,
            recent_gpus=inp.recent_action_gpus,
        )
        _hold_all(plans, budget)

    decisions: list[Decision] = []
    states: dict[str, LadderState] = {}
    cleared: set[str] = set()
    for wid, p in plans.items():
        state, key, level, reason = p.state, p.waiting_key, Level.NONE, p.reason
        if p.step is not None:
            level = p.step.level
            if p.hold is Hold.NONE and state is not None and p.workload is not None:
                state = ladder.take(state, p.step, now)
                key = idempotency_key(state, p.step)
                reason = _acting_reason(p, state, now, settings)
                if p.approved_by:
                    reason = f"{reason} Approved by {p.approved_by}."
        step, hold = (p.step.name if p.step else ""), p.hold
        if wid in faulted:
            acting = bool(step) and hold is Hold.NONE
            drain = settings.health.drain_failed_nodes
            hold, reason = health.held(hold, reason, p.seen, acting=acting, finding=p.finding, drain=drain)
        decisions.append(
            Decision(wid, now, level, step, reason, hold, p.rule, p.gpu_uuids, idempotency_key=key)
        )
        if state is not None and not p.clear:
            if state != inp.states.get(wid):
                states[wid] = state
        elif wid in inp.states:
            cleared.add(wid)
    return PolicyResult(tuple(decisions), states, frozenset(cleared))
