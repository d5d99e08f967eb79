"""The per-workload escalation ladder: a small pure state machine with an injected ``now``.

Reclaim ladder: ``""`` → ``warn-1`` → ``warn-2`` → ``graceful-stop`` → ``force``.
Advice ladder: ``""`` → ``advice`` (one notice per episode, nothing after it).

The functions here only say which step is next and when it is due; whether it is taken
(guards, pause, budget) is decided in ``decide``. A step is taken only by ``take``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal

from gpusteward.domain.models import LadderState, Level
from gpusteward.policy.settings import LadderSettings

Kind = Literal["reclaim", "advice"]


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    level: Level
    #: How a GPU user would call it.
    title: str


WARN_1 = Step("warn-1", Level.NOTIFY, "first warning")
WARN_2 = Step("warn-2", Level.NOTIFY, "second warning")
GRACEFUL_STOP = Step("graceful-stop", Level.GRACEFUL_STOP, "graceful stop")
FORCE = Step("force", Level.FORCE, "force stop")
ADVICE = Step("advice", Level.NOTIFY, "advice notice")
STEPS = {s.name: s for s in (WARN_1, WARN_2, GRACEFUL_STOP, FORCE, ADVICE)}


def kind(state: LadderState) -> Kind | None:
    """Which ladder ``state`` is on; ``None`` while no step is taken (it can become either)."""
    if not state.step:
        return None
    return "advice" if state.step == ADVICE.name else "reclaim"


def start(workload_id: str, incarnation: str, rule: str, now: datetime) -> LadderState:
    """A fresh ladder for a new waste episode: no step taken yet."""
    return LadderState(
        workload_id=workload_id, incarnation=incarnation, rule=rule, first_seen_at=now, last_seen_at=now
    )


def observe(state: LadderState, rule: str, now: datetime) -> LadderState:
    """The finding held again at ``now`` (``rule`` is the one driving the ladder now)."""
    # Built field by field: each waiting workload's every tick, and dataclasses.replace costs
    # several times as much (tests/policy/test_ladder.py checks it against replace).
    s = state
    return LadderState(
        s.workload_id, s.incarnation, rule, s.first_seen_at, now, s.step, s.step_at, s.first_warned_at, None
    )


@functools.cache  # the ladder's few configured lengths, asked for by each waiting ladder each tick
def _minutes(m: float) -> timedelta:
    return timedelta(minutes=m)


def next_step(state: LadderState, settings: LadderSettings, *, advice: bool) -> tuple[Step, datetime] | None:
    """The next step and the earliest time it may fire, or ``None`` when the ladder is done."""
    if advice:
        return (ADVICE, state.first_seen_at) if not state.step else None
    step = state.step
    if not step:
        return WARN_1, state.first_seen_at
    warned = state.first_warned_at or state.step_at or state.first_seen_at
    at = state.step_at or warned
    stop_after = _minutes(settings.graceful_stop_after_minutes)
    warn_again = _minutes(settings.warn_again_after_minutes)
    if step == WARN_1.name:
        if warn_again < stop_after:
            return WARN_2, warned + warn_again
        return GRACEFUL_STOP, warned + stop_after
    if step == WARN_2.name:
        # A late second warning (after a pause or hold) still gets the full notice it promised.
        return GRACEFUL_STOP, max(warned + stop_after, at + (stop_after - warn_again))
    if step == GRACEFUL_STOP.name:
        return FORCE, at + _minutes(settings.force_after_minutes)
    return None


def take(state: LadderState, step: Step, now: datetime) -> LadderState:
    """The ladder after ``step`` was taken at ``now``."""
    first_warned = now if step is WARN_1 else state.first_warned_at
    return replace(state, step=step.name, step_at=now, first_warned_at=first_warned)


def schedule(
    state: LadderState, settings: LadderSettings, now: datetime, *, advice: bool, max_level: Level
) -> list[tuple[Step, datetime]]:
    """The steps still ahead and when they fire if nothing holds them, up to ``max_level``."""
    out: list[tuple[Step, datetime]] = []
    while (nxt := next_step(state, settings, advice=advice)) is not None and nxt[0].level <= max_level:
        step, due = nxt[0], max(nxt[1], now)
        out.append((step, due))
        state = take(state, step, due)
    return out


def clock(at: datetime) -> str:
    """``14:35 UTC``."""
    at = at.astimezone(UTC)
    return f"{at.hour:02d}:{at.minute:02d} UTC"  # strftime's format parsing cost more, per ladder


def when(at: datetime, now: datetime) -> str:
    """``in 7 min, at 14:35 UTC``, both rounded up so that a step is never announced early."""
    at, now = at.astimezone(UTC), now.astimezone(UTC)
    minutes = max(0, math.ceil((at - now).total_seconds() / 60))
    shown = at.replace(second=0, microsecond=0)
    if shown < at:
        shown += timedelta(minutes=1)
    day = "" if shown.date() == now.date() else shown.strftime(" on %Y-%m-%d")
    return f"in {minutes} min, at {clock(shown)}{day}"
