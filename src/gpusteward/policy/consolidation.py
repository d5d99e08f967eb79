"""Consolidation moves, planned (L4): the packing plan as one ``Decision`` at a time. Pure.

The planner (analysis/consolidation) says which workloads go together; this turns the plan into
moves: one workload to the shared resource per tick at most, and none while an earlier move is
still being watched. A watched move whose GPU shows contention beyond the bound is rolled back
(``unshare-gpu``: gives a whole GPU back, so it never waits for an approval); a move waits for
an admin like any L4 step (policy/approval.py).

Keys: a share names the workload's incarnation and the resource, so a workload that was rolled
back is never moved again in the same incarnation (its key has run); a rollback names the move's
time, one per move.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from gpusteward.domain.models import Decision, Hold, Level
from gpusteward.policy.ladder import Step

SHARE = Step("share-gpu", Level.INFRA, "GPU share move")
#: Gives a whole GPU back: never waits for an approval.
UNSHARE = Step("unshare-gpu", Level.INFRA, "GPU share rollback")
RULE = "consolidation"


class ConsolidationSettings(BaseModel):
    """L4: move light services from whole GPUs onto a shared resource (time-slicing, MIG), one at
    a time, planned from what they used over ``min_history_hours`` (off by default)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = Field(False, description="Plan and move at all (off by default).")
    resource: str = Field(
        "nvidia.com/gpu.shared",
        description="The shared resource the nodes advertise: nvidia.com/gpu.shared (time-slicing) "
        "or nvidia.com/mig-<profile> (MIG, mixed strategy).",
    )
    sharing: Literal["time-slicing", "mps"] = Field("time-slicing", description="How a GPU is shared.")
    plan_every_minutes: float = Field(60, ge=1, le=10080, description="Minutes between two plans.")
    history_hours: float = Field(
        26, ge=1, le=336, description="Hours of per-workload usage kept in memory to plan from."
    )
    min_history_hours: float = Field(
        24,
        ge=0.25,
        le=336,
        description="Hours of usage needed before the first plan (24: a whole day, every hour's "
        "bursts seen). The history is kept in memory: after a restart it is gathered again.",
    )
    watch_minutes: float = Field(
        60, ge=1, le=10080, description="Minutes a moved workload is watched before the next move."
    )
    gpu_memory_gib: float = Field(80, gt=0, le=4096, description="Memory of one GPU of the pool (GiB).")
    memory_margin: float = Field(0.10, ge=0, le=0.9, description="Share of GPU memory kept free.")
    contention_share_max: float = Field(
        0.005, ge=0, le=1, description="Most share of a shared GPU's minutes contended in the history."
    )
    rollback_contention_share: float = Field(
        0.01,
        ge=0,
        le=1,
        description="Share of the watched minutes with the shared GPU saturated that rolls a move back.",
    )
    saturated_util_pct: float = Field(
        98, gt=0, le=100, description="A shared GPU at or above this utilisation (%) is contended."
    )
    mix_teams: list[str] = Field(
        default_factory=list, description="Teams that may share a GPU with other teams ('*': all)."
    )
    anti_affinity_label: str = Field(
        "app.kubernetes.io/name",
        description="Workloads with the same value of this label (replicas of one service) never share.",
    )
    max_per_gpu: int = Field(8, ge=2, le=64, description="Most workloads on one GPU.")


class PlannedGroup(Protocol):
    """A group of the packing plan (analysis.consolidation.Group), as far as moves need it."""

    @property
    def members(self) -> tuple[str, ...]: ...

    @property
    def contention_share(self) -> float: ...

    @property
    def peak_memory_mib(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Move:
    """A workload gpusteward moved to the shared resource, as the tick knows it."""

    workload_id: str
    resource: str
    #: When the move was made (or first seen, after a restart).
    at: datetime
    #: Share of the watched minutes its GPU was saturated.
    contention_share: float = 0.0


def share_key(workload_id: str, incarnation: str, resource: str) -> str:
    return f"{workload_id}:share-gpu:{incarnation}:{resource}"


def share_resource(key: str) -> str:
    """The resource a ``share_key`` names ("" when it is not one)."""
    head, sep, resource = key.rpartition(":")
    return resource if sep and ":share-gpu:" in head else ""


def unshare_key(workload_id: str, moved_at: datetime) -> str:
    return f"{workload_id}:unshare-gpu:{moved_at.astimezone(UTC):%Y%m%dT%H%MZ}"


def plan_moves(
    groups: Sequence[PlannedGroup] | None,
    incarnations: Mapping[str, str],
    moves: Sequence[Move],
    now: datetime,
    s: ConsolidationSettings,
    *,
    paused: bool,
) -> list[Decision]:
    """At most one decision: roll back a contended move, else (no move being watched) move the
    next workload of a shared group that still holds a whole GPU. ``incarnations``: the running
    workloads that may move, by id."""
    watch = timedelta(minutes=s.watch_minutes)
    for m in moves:
        if m.contention_share > s.rollback_contention_share and now - m.at < watch:
            why = (
                f"moved to {m.resource} at {m.at:%H:%M}; its GPU was saturated in "
                f"{100 * m.contention_share:.1f} % of the watched minutes (bound "
                f"{100 * s.rollback_contention_share:.1f} %): back to a whole GPU"
            )
            key = unshare_key(m.workload_id, m.at)
            return [
                Decision(m.workload_id, now, UNSHARE.level, UNSHARE.name, why, rule=RULE, idempotency_key=key)
            ]
    watched = [m for m in moves if now - m.at < watch]
    if groups is None:
        return []
    moved = {m.workload_id for m in moves}
    for g in groups:
        if len(g.members) < 2:
            continue
        for wid in g.members:
            if wid in moved or wid not in incarnations:
                continue
            others = ", ".join(m for m in g.members if m != wid)
            why = (
                f"shares a GPU ({s.resource}) with {others}: together their demand fit one GPU in "
                f"the history, contended {100 * g.contention_share:.2f} % of the minutes, peak memory "
                f"{g.peak_memory_mib / 1024:.1f} GiB"
            )
            key = share_key(wid, incarnations[wid], s.resource)
            d = Decision(wid, now, SHARE.level, SHARE.name, why, rule=RULE, idempotency_key=key)
            if watched:
                w = watched[0]
                until = w.at + watch
                why = f"{why}; waiting: {w.workload_id} is watched until {until:%H:%M} (one move at a time)"
                return [Decision(wid, now, d.level, d.step, why, Hold.WAITING, RULE, (), key)]
            if paused:
                return [
                    Decision(
                        wid, now, d.level, d.step, f"{why}; gpusteward is paused", Hold.PAUSED, RULE, (), key
                    )
                ]
            return [d]
    return []
