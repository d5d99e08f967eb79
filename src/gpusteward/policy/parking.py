"""L4 parking, planned: which idle nodes to park (cordon / drain) and which to unpark. Pure.

A node is a candidate when it is not parked, no workload holds any of its GPUs, and every GPU
has been free and idle (fresh samples) for ``idle_minutes``. It is parked only inside a
low-load window: a configured one (``windows`` in ``timezone``) and/or the forecast's one for
its pool (``use_forecast``; both must agree when both are set). The forecast vetoes parking
when its uncertainty band (upper less mean) is wider than the pool's SLO headroom. Each pool
keeps ``min_free_gpus`` free GPUs and ``min_spare_nodes`` wholly free nodes unparked.

Unparking happens when the window ends (``prewarm_minutes`` early, or before the forecast's
next rise), when the forecast turns unsure, and when free unparked GPUs fall below the minimum
(demand returned). Only nodes gpusteward parked are ever unparked; nodes someone else took out
of scheduling are left alone and count as no capacity at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo

from gpusteward.domain.models import Decision, Level
from gpusteward.domain.nodes import node_workload_id
from gpusteward.policy.ladder import Step
from gpusteward.policy.parking_settings import ParkingSettings

PARK = Step("park-node", Level.INFRA, "node park")
UNPARK = Step("unpark-node", Level.INFRA, "node unpark")
RULE = "parking"


@dataclass(frozen=True, slots=True)
class NodeView:
    """One GPU node as the tick sees it."""

    name: str
    pool: str
    gpu_uuids: tuple[str, ...]
    #: GPUs held by a workload now.
    held: int
    #: Since when every GPU has been free and idle with fresh data; None when not now.
    free_since: datetime | None
    #: Parked by gpusteward now.
    parked: bool = False
    parked_at: datetime | None = None
    #: Out of scheduling by someone else (an admin's cordon, a maintenance drain): not touched.
    foreign: bool = False

    @property
    def gpus(self) -> int:
        return len(self.gpu_uuids)


@dataclass(frozen=True, slots=True)
class PoolForecast:
    """What the forecast says about one pool now (runtime/parking.py builds it from the tide)."""

    #: The low-load window the forecast puts ``now`` in (start kept stable across re-forecasts).
    low_start: datetime | None
    low_end: datetime | None
    #: Widest band (upper less mean, GPUs) from now to the window's end.
    spread_gpus: float = 0.0
    #: Share of the pool's GPUs kept free for the SLO (forecast.pools[].slo_headroom).
    slo_headroom: float = 0.2
    #: When the forecast's next rise needs capacity started (pre-warm), if any.
    next_rise: datetime | None = None


@dataclass(frozen=True, slots=True)
class ParkingInput:
    now: datetime
    nodes: Sequence[NodeView]
    #: By pool; None when the forecast is not used.
    forecasts: Mapping[str, PoolForecast] | None = None
    paused: bool = False


@dataclass(frozen=True, slots=True)
class PoolNote:
    pool: str
    #: The window in force (start, end), or None with why not.
    window: tuple[datetime, datetime] | None
    why: str
    free_gpus: int
    parked: int


@dataclass(frozen=True, slots=True)
class ParkingPlan:
    parks: tuple[Decision, ...]
    unparks: tuple[Decision, ...]
    notes: tuple[PoolNote, ...]


def schedule_window(
    now: datetime, windows: Sequence[tuple[time, time]], tz: tzinfo
) -> tuple[datetime, datetime] | None:
    """The configured window ``now`` falls in, as UTC (start, end), or None."""
    local = now.astimezone(tz)
    for start, end in windows:
        for day in (local.date() - timedelta(days=1), local.date()):
            s = datetime.combine(day, start, tzinfo=tz)
            e = datetime.combine(day if end > start else day + timedelta(days=1), end, tzinfo=tz)
            if s <= local < e:
                return s.astimezone(UTC), e.astimezone(UTC)
    return None


def _hm(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def pool_window(
    pool: str, pool_gpus: int, inp: ParkingInput, s: ParkingSettings
) -> tuple[tuple[datetime, datetime] | None, str]:
    """The low-load window in force for ``pool`` (pre-warm taken off its end), or None and why."""
    now = inp.now
    if not s.windows and not s.use_forecast:
        return None, "no window configured (parking.windows or parking.use_forecast)"
    start, end = datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)
    why: list[str] = []
    if s.windows:
        sched = schedule_window(now, s.parsed_windows(), ZoneInfo(s.timezone))
        if sched is None:
            return None, f"outside the configured windows ({', '.join(s.windows)} {s.timezone})"
        start, end = sched
        why.append(f"configured window until {_hm(end)}")
    if s.use_forecast:
        fc = (inp.forecasts or {}).get(pool)
        if fc is None:
            return None, f"no forecast for pool {pool} (forecast.pools)"
        if fc.low_start is None or fc.low_end is None:
            return None, "the forecast shows no low-load window now"
        headroom = fc.slo_headroom * pool_gpus
        if fc.spread_gpus > headroom + 1e-9:
            return None, (
                f"the forecast's uncertainty band ({fc.spread_gpus:.1f} GPUs) crosses the SLO "
                f"headroom ({headroom:.1f} GPUs): too unsure to park"
            )
        start, end = max(start, fc.low_start), min(end, fc.low_end)
        why.append(f"forecast low-load window until {_hm(fc.low_end)}")
        if fc.next_rise is not None and fc.next_rise - timedelta(minutes=s.prewarm_minutes) <= now:
            return None, f"pre-warm: the forecast needs capacity from {_hm(fc.next_rise)}"
    prewarm = timedelta(minutes=s.prewarm_minutes)
    if now >= end - prewarm:
        return None, f"pre-warm: the low-load window ends at {_hm(end)}"
    return (start, end), "; ".join(why)


def plan_parking(inp: ParkingInput, s: ParkingSettings) -> ParkingPlan:
    """Parks and unparks for this tick, with the reason for each, per pool."""
    parks: list[Decision] = []
    unparks: list[Decision] = []
    notes: list[PoolNote] = []
    if inp.paused:
        return ParkingPlan((), (), ())
    pools: dict[str, list[NodeView]] = {}
    for n in inp.nodes:
        if not s.pools or n.pool in s.pools:
            pools.setdefault(n.pool, []).append(n)
    budget = s.max_per_tick
    for pool in sorted(pools):
        nodes = [n for n in pools[pool] if not n.foreign]
        parked = sorted((n for n in nodes if n.parked), key=lambda n: (n.parked_at or inp.now, n.name))
        active = [n for n in nodes if not n.parked]
        free = sum(n.gpus - n.held for n in active)
        spare = sum(1 for n in active if n.held == 0)
        window, why = pool_window(pool, sum(n.gpus for n in nodes), inp, s)
        notes.append(PoolNote(pool, window, why, free, len(parked)))
        if window is None:
            unparks += [
                _unpark(n, inp.now, f"{why}: node {n.name} goes back into scheduling") for n in parked
            ]
            continue
        # Demand returned: unpark (oldest parked first) until the minimums hold again.
        short = list(parked)
        back: list[NodeView] = []
        while short and (free < s.min_free_gpus or spare < s.min_spare_nodes):
            n = short.pop(0)
            back.append(n)
            free, spare = free + n.gpus, spare + 1
        if back:
            want = f"{s.min_free_gpus} free GPUs and {s.min_spare_nodes} spare node(s)"
            unparks += [
                _unpark(n, inp.now, f"demand returned in pool {pool}: fewer than {want} unparked")
                for n in back
            ]
            continue
        idle = timedelta(minutes=s.idle_minutes)
        candidates = sorted(
            (
                n
                for n in active
                if n.held == 0 and n.free_since is not None and inp.now - n.free_since >= idle
            ),
            key=lambda n: (n.free_since, n.name),
        )
        for n in candidates:
            if budget <= 0 or spare - 1 < s.min_spare_nodes:
                break
            if free - n.gpus < s.min_free_gpus:
                continue
            free, spare, budget = free - n.gpus, spare - 1, budget - 1
            assert n.free_since is not None
            minutes = (inp.now - n.free_since).total_seconds() / 60.0
            reason = (
                f"all {n.gpus} GPUs of node {n.name} free and idle for {minutes:.0f} min in a low-load "
                f"window ({why}); pool {pool} keeps {free} free GPUs and {spare} spare node(s) unparked"
            )
            # One park per node, window and free episode: a node parked, unparked for demand and
            # free again later in the same window gets a new key (and a new approval request).
            since = n.free_since.astimezone(UTC)
            key = f"park:{window[0].astimezone(UTC):%Y%m%dT%H%MZ}:{since:%Y%m%dT%H%M%SZ}"
            parks.append(_decision(n, inp.now, PARK, reason, key))
    return ParkingPlan(tuple(parks), tuple(unparks), tuple(notes))


def _unpark(n: NodeView, now: datetime, reason: str) -> Decision:
    since = n.parked_at or now.replace(second=0, microsecond=0)
    return _decision(n, now, UNPARK, reason, f"unpark:{since.astimezone(UTC):%Y%m%dT%H%M%SZ}")


def _decision(n: NodeView, now: datetime, step: Step, reason: str, suffix: str) -> Decision:
    wid = node_workload_id(n.name)
    return Decision(
        workload_id=wid,
        at=now,
        level=step.level,
        step=step.name,
        reason=reason,
        rule=RULE,
        gpu_uuids=n.gpu_uuids,
        idempotency_key=f"{wid}:{suffix}",
    )
