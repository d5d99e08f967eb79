"""Tidal scaling, planned: the forecast's replica plans as ``Decision``s. Pure.

The forecasting side (runtime/tide_step.py over analysis/tide.py) says how many replicas each
pool should run; this turns each plan into a decision on the pool's synthetic workload
(``pool:<name>``), or says why nothing is done: the plan is held (an unsure forecast), the pool
was scaled within ``cooldown`` (no flapping), or gpusteward is paused.

The idempotency key names the plan's time and its replicas before and after: one key per plan,
and what the executor needs to re-check (``scale_replicas``) survives a crash in the action row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpusteward.domain.models import Decision, Hold, Level
from gpusteward.policy.ladder import Step, clock

SCALE_DOWN = Step("scale-down", Level.INFRA, "pool scale-down")
#: Gives capacity back: never waits for an approval (policy/approval.py).
SCALE_UP = Step("scale-up", Level.INFRA, "pool scale-up")
RULE = "tide"


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """What the forecast planned for one pool this tick."""

    pool: str
    current: int
    target: int
    reason: str
    #: Why the plan keeps the replicas although the forecast would change them (``uncertain``,
    #: ``no-forecast``), or ``""``.
    held: str = ""


def pool_workload_id(pool: str) -> str:
    return f"pool:{pool}"


def scale_key(pool: str, at: datetime, current: int, target: int) -> str:
    return f"{pool_workload_id(pool)}:scale:{at.astimezone(UTC):%Y%m%dT%H%MZ}:{current}>{target}"


def scale_replicas(key: str) -> tuple[int, int] | None:
    """(replicas the plan was made for, replicas wanted) from a ``scale_key``, or None."""
    before, sep, after = key.rpartition(":")[2].partition(">")
    if not sep or not before.isdigit() or not after.isdigit():
        return None
    return int(before), int(after)


def plan_scaling(
    plans: Sequence[PoolPlan],
    now: datetime,
    *,
    scaled_at: Mapping[str, datetime],
    cooldown: timedelta,
    paused: bool,
) -> list[Decision]:
    """One decision per plan that would change a pool (or that the forecast held)."""
    out: list[Decision] = []
    for p in plans:
        wid = pool_workload_id(p.pool)
        if p.held:
            out.append(Decision(wid, now, Level.NONE, "", p.reason, hold=Hold.WAITING, rule=RULE))
            continue
        if p.target == p.current:
            continue
        step = SCALE_UP if p.target > p.current else SCALE_DOWN
        d = Decision(
            wid,
            now,
            step.level,
            step.name,
            p.reason,
            rule=RULE,
            idempotency_key=scale_key(p.pool, now, p.current, p.target),
        )
        last = scaled_at.get(p.pool)
        if last is not None and now - last < cooldown:
            why = f"{p.reason}; waiting: scaled {clock(last)}, cooldown {cooldown}"
            d = Decision(wid, now, d.level, d.step, why, Hold.WAITING, RULE, (), d.idempotency_key)
        elif paused:
            why = f"{p.reason}; gpusteward is paused: nothing is scaled"
            d = Decision(wid, now, d.level, d.step, why, Hold.PAUSED, RULE, (), d.idempotency_key)
        out.append(d)
    return out
