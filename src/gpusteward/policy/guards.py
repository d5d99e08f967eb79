"""Guards: why a step that is due is not taken. Each is pure and returns a ``Held`` or ``None``.

Per-workload guards (protection, exclusion, start-up grace, pause, partly busy) look at one
workload; the tick-wide ones (reserve pool, budget) look at every stop due this tick.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpusteward.domain.models import EXCLUDE_UNTIL_KEY, Gpu, Hold, Workload
from gpusteward.policy.ladder import clock, when
from gpusteward.policy.settings import BudgetSettings, ProtectSettings


@dataclass(frozen=True, slots=True)
class Held:
    """A hold and the sentence that explains it to the workload's owner."""

    hold: Hold
    reason: str


@dataclass(frozen=True, slots=True)
class StopCandidate:
    """A workload whose stop (L2+) is due this tick, as the tick-wide guards see it."""

    workload_id: str
    gpu_uuids: tuple[str, ...]
    wasted_cost: float
    wasted_gpu_hours: float


def protected(workload: Workload, settings: ProtectSettings) -> Held | None:
    """Protected by a label/annotation or by its owner's user or team name."""
    for key, want in sorted(settings.labels.items()):
        have = workload.tag(key)
        if have is not None and have.strip().lower() == want.strip().lower():
            return Held(Hold.PROTECTED, f"it is protected by {key}={have}")
    if workload.owner.user in settings.users:
        return Held(Hold.PROTECTED, f"its owner {workload.owner.user} is on the protected users list")
    if workload.owner.team and workload.owner.team in settings.teams:
        return Held(Hold.PROTECTED, f"its team {workload.owner.team} is on the protected teams list")
    return None


def parse_rfc3339(text: str) -> datetime | None:
    """An aware datetime, or ``None`` when ``text`` is not an RFC 3339 time with an offset."""
    try:
        at = datetime.fromisoformat(text.strip().upper())
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def excluded(workload: Workload, now: datetime) -> Held | None:
    """Excluded until a future time; a malformed time counts as excluded (fail safe)."""
    value = workload.tag(EXCLUDE_UNTIL_KEY)
    if value is None:
        return None
    until = parse_rfc3339(value)
    if until is None:
        return Held(
            Hold.EXCLUDED,
            f"{EXCLUDE_UNTIL_KEY}={value!r} is not an RFC 3339 time (like 2025-01-31T18:00:00Z), "
            "so it is treated as excluded until that is fixed",
        )
    if until > now:
        return Held(
            Hold.EXCLUDED, f"it is excluded by {EXCLUDE_UNTIL_KEY} until {clock(until)} {until:%Y-%m-%d}"
        )
    return None


def startup_grace(workload: Workload, now: datetime, grace_minutes: float) -> Held | None:
    """Too young: a workload gets ``grace_minutes`` to load data and warm up."""
    ends = workload.started_at + timedelta(minutes=grace_minutes)
    if now >= ends:
        return None
    age = max(0, int((now - workload.started_at).total_seconds() // 60))
    return Held(
        Hold.STARTUP_GRACE,
        f"it started {age} min ago and new workloads get {grace_minutes:g} min to start up; "
        f"nothing is done before that ends ({when(ends, now)})",
    )


def paused(is_paused: bool) -> Held | None:
    """The global kill switch."""
    if not is_paused:
        return None
    return Held(Hold.PAUSED, "an admin paused gpusteward (kill switch) and it stays paused until resumed")


def partly_busy(workload: Workload, wasted_gpu_uuids: set[str]) -> Held | None:
    """Stopping a workload stops all its GPUs: only do it when every one of them is wasted."""
    busy = [u for u in workload.gpu_uuids if u not in wasted_gpu_uuids]
    if workload.gpu_uuids and not busy:
        return None
    n = len(workload.gpu_uuids)
    return Held(
        Hold.PARTIAL,
        f"only {n - len(busy)} of its {n} GPUs are wasted, so stopping it would stop useful work; "
        "it gets notices only",
    )


def reserve(candidates: Sequence[StopCandidate], gpus: Mapping[str, Gpu], share: float) -> dict[str, Held]:
    """Keep ``share`` of each pool (rounded up) on idle workloads: the cheapest to keep are held."""
    if share <= 0:
        return {}
    sizes: dict[str, int] = {}
    for gpu in gpus.values():
        sizes[gpu.pool] = sizes.get(gpu.pool, 0) + 1
    # The epsilon stops float noise (0.1 * 30 = 3.0000000000000004) from adding a GPU.
    need = {pool: math.ceil(share * size - 1e-9) for pool, size in sizes.items()}

    def cost_to_keep(c: StopCandidate) -> tuple[float, int, str]:
        price = sum(gpus[u].price_per_hour for u in c.gpu_uuids if u in gpus)
        return price, len(c.gpu_uuids), c.workload_id

    held: dict[str, Held] = {}
    for c in sorted(candidates, key=cost_to_keep):
        pools = [gpus[u].pool for u in c.gpu_uuids if u in gpus]
        if not any(need.get(p, 0) > 0 for p in pools):
            continue
        for p in pools:
            need[p] = need.get(p, 0) - 1
        names = ", ".join(sorted(set(pools)))
        held[c.workload_id] = Held(
            Hold.RESERVE,
            f"it is kept as part of the reserve pool ({share:.0%} of pool {names} stays on idle "
            "workloads, the cheapest ones first)",
        )
    return held


def budget(
    candidates: Sequence[StopCandidate],
    settings: BudgetSettings,
    *,
    total_gpus: int,
    recent_actions: int,
    recent_gpus: int,
) -> dict[str, Held]:
    """Cap stops per hour by count and GPU share; the most wasteful go first, the rest wait."""
    gpu_limit = settings.max_gpu_share_per_hour * total_gpus
    actions, used = recent_actions, recent_gpus
    held: dict[str, Held] = {}
    for c in sorted(candidates, key=lambda c: (-c.wasted_cost, -c.wasted_gpu_hours, c.workload_id)):
        n = len(c.gpu_uuids)
        if actions + 1 <= settings.max_actions_per_hour and used + n <= gpu_limit:
            actions, used = actions + 1, used + n
            continue
        held[c.workload_id] = Held(
            Hold.BUDGET,
            f"stopping its {n} GPU{'s' if n != 1 else ''} would exceed the hourly budget of "
            f"{settings.max_actions_per_hour} stops and {gpu_limit:g} GPUs ({actions} stops and {used} "
            "GPUs already used); it waits until the budget frees up",
        )
    return held
