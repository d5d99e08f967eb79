"""Roll-out bookkeeping, pure: stage history, recent stops, suspected false kills, promotion.

A stop is a *suspected false kill* when, within the horizon, its owner resubmits it (a running
workload with the same signature that started after the stop), appeals it, or restores it.
The runtime keeps these records in the state store as plain JSON (``to_json``/``from_json``);
everything here is data in, data out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from gpusteward.domain.models import Workload
from gpusteward.policy.scope_settings import PromoteWhen, Stage

SUSPECTED, CONFIRMED, DISMISSED = "suspected", "confirmed", "dismissed"


def signature(w: Workload) -> str:
    """What the owner's next submission of the same work has in common with this one."""
    ref = w.ref
    if "job_id" in ref:  # Slurm: job name, user, account
        return f"slurm:{w.name}|{w.owner.user}|{ref.get('account', w.owner.team)}"
    if "namespace" in ref and "kind" in ref:  # Kubernetes: the owner object itself
        return f"k8s:{ref['namespace']}/{ref['kind']}/{ref.get('name', w.name)}"
    command = w.annotations.get("gpusteward.io/command")
    if command:  # a process: the same command line by the same user on the same node
        return f"cmd:{ref.get('node', '')}|{w.owner.user}|{command}"
    return f"{w.kind.value}:{w.name}|{w.owner.user}|{w.owner.team}"


@dataclass(frozen=True, slots=True)
class StageEntry:
    scope: str
    stage: Stage
    at: datetime
    by: str
    reason: str = ""
    forced: bool = False


@dataclass(frozen=True, slots=True)
class StopRecord:
    """A workload gpusteward stopped (L2+), kept for the horizon."""

    workload_id: str
    at: datetime
    signature: str
    scope: str
    rule: str
    cls: str
    user: str
    matched: bool = False


@dataclass(frozen=True, slots=True)
class FalseKill:
    id: int
    workload_id: str
    stopped_at: datetime
    found_at: datetime
    scope: str
    rule: str
    cls: str
    why: str
    status: str = SUSPECTED
    by: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Appeal:
    workload_id: str
    at: datetime
    by: str
    reason: str = ""


def match(
    stops: Sequence[StopRecord],
    running: Iterable[Workload],
    appeals: Sequence[Appeal],
    now: datetime,
    horizon: timedelta,
) -> list[tuple[StopRecord, str]]:
    """The unmatched stops within the horizon that a resubmission or an appeal marks, with why."""
    open_stops = [s for s in stops if not s.matched and now - s.at <= horizon]
    if not open_stops:
        return []
    # Only a workload started after some open stop can be its resubmission: the others' signatures
    # are not needed (a tick sees thousands of running workloads and a handful of recent stops).
    since = min(s.at for s in open_stops)
    later: dict[str, list[Workload]] = {}
    for w in running:
        if w.started_at > since:
            later.setdefault(signature(w), []).append(w)
    out: list[tuple[StopRecord, str]] = []
    for s in open_stops:
        again = [
            w for w in later.get(s.signature, ()) if w.started_at > s.at and w.started_at - s.at <= horizon
        ]
        appeal = next(
            (a for a in appeals if a.workload_id == s.workload_id and s.at <= a.at <= s.at + horizon), None
        )
        if again:
            w = min(again, key=lambda w: w.started_at)
            out.append((s, f"resubmitted as {w.id} {_minutes(w.started_at - s.at)} after the stop"))
        elif appeal is not None:
            said = f": {appeal.reason}" if appeal.reason else ""
            out.append((s, f"appealed by {appeal.by} {_minutes(appeal.at - s.at)} after the stop{said}"))
    return out


def _minutes(d: timedelta) -> str:
    return f"{max(0, round(d.total_seconds() / 60))} min"


@dataclass
class Watch:
    """The leader's live record: stops within the horizon, false kills, reclaim counts."""

    stops: list[StopRecord] = field(default_factory=list)
    false_kills: list[FalseKill] = field(default_factory=list)
    next_id: int = 1
    #: Executor → [attempted, freed]: L2+ attempts that ended, and those that freed their GPUs.
    reclaim: dict[str, list[int]] = field(default_factory=dict)
    #: "scope|stage" → {"findings": n, "would": {step: n}}: new findings, and the steps a stage
    #: below enforce held (what enforce would have done), each counted once per workload and step.
    counts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def count(self, scope: str, stage: Stage, *, finding: bool = False, would: str = "") -> None:
        c = self.counts.setdefault(f"{scope}|{stage.value}", {"findings": 0, "would": {}})
        if finding:
            c["findings"] += 1
        if would:
            c["would"][would] = c["would"].get(would, 0) + 1

    def suspect(self, stop: StopRecord, why: str, now: datetime) -> FalseKill:
        fk = FalseKill(self.next_id, stop.workload_id, stop.at, now, stop.scope, stop.rule, stop.cls, why)
        self.next_id += 1
        self.false_kills.append(fk)
        self.stops = [replace(s, matched=True) if s == stop else s for s in self.stops]
        return fk


def settled(fks: Sequence[FalseKill], verdicts: Mapping[str, Mapping[str, Any]]) -> list[FalseKill]:
    """The false kills with the admins' verdicts (confirm / dismiss) applied."""
    out = []
    for fk in fks:
        v = verdicts.get(str(fk.id))
        out.append(
            fk
            if v is None
            else replace(fk, status=str(v["status"]), by=str(v["by"]), reason=str(v["reason"]))
        )
    return out


def slowed(fks: Sequence[FalseKill], factor: float) -> dict[str, float]:
    """Scope → timing multiplier while a suspected false kill there is unsettled."""
    if factor <= 1.0:
        return {}
    return {fk.scope: factor for fk in fks if fk.status == SUSPECTED}


def safety_figures(fks: Sequence[FalseKill], reclaim: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """The overview's two live figures. The false-kill ratio is suspected or confirmed false kills
    (dismissed ones are not) over L2+ attempts; reclaim success is attempts that freed their GPUs
    over attempts. None while nothing was attempted: no stop is not 0 %."""
    attempted = sum(int(v[0]) for v in reclaim.values())
    freed = sum(int(v[1]) for v in reclaim.values())
    counted = sum(1 for f in fks if f.status != DISMISSED)
    return {
        "attempted": attempted,
        "freed": freed,
        "false_kills": counted,
        "false_kill_ratio": counted / attempted if attempted else None,
        "reclaim_success_ratio": freed / attempted if attempted else None,
    }


def current_stages(
    config: Mapping[str, Stage], history: Sequence[StageEntry]
) -> dict[str, tuple[Stage, datetime | None]]:
    """Scope → (stage now, since when). The latest entry wins: a promotion overrides the configured
    mode until the configured mode changes (the leader then records a ``config`` entry)."""
    out: dict[str, tuple[Stage, datetime | None]] = {name: (stage, None) for name, stage in config.items()}
    for e in sorted(history, key=lambda e: e.at):
        if e.scope in out:
            stage, since = out[e.scope]
            out[e.scope] = (e.stage, e.at if e.stage is not stage or since is None else since)
    return out


@dataclass(frozen=True, slots=True)
class Readiness:
    days: float
    false_kills: int
    appeals: int
    ready: bool
    why: str


def readiness(
    since: datetime | None, now: datetime, false_kills: int, appeals: int, want: PromoteWhen
) -> Readiness:
    """Whether a scope meets the promotion criteria, and the first one it misses."""
    days = 0.0 if since is None else (now - since).total_seconds() / 86400
    misses = []
    if days < want.min_days:
        misses.append(f"{days:.1f} of {want.min_days:g} days in the stage")
    if false_kills > want.max_false_kills:
        misses.append(f"{false_kills} suspected false kills (at most {want.max_false_kills})")
    if appeals > want.max_appeals:
        misses.append(f"{appeals} appeals (at most {want.max_appeals})")
    why = "; ".join(misses) if misses else "meets the criteria"
    return Readiness(days, false_kills, appeals, not misses, why)


# -- JSON, for the state store -----------------------------------------------------------------
def to_json(obj: Any) -> Any:
    """Dataclasses, lists and dicts as plain JSON values (times as ISO text)."""
    if isinstance(obj, datetime):
        return obj.isoformat()
    if isinstance(obj, Stage):
        return obj.value
    if hasattr(obj, "__dataclass_fields__"):
        return {k: to_json(v) for k, v in asdict(obj).items()}
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_json(v) for v in obj]
    return obj


def _at(value: Any) -> datetime:
    return datetime.fromisoformat(str(value))


def stage_entry(d: Mapping[str, Any]) -> StageEntry:
    return StageEntry(
        d["scope"], Stage(d["stage"]), _at(d["at"]), d["by"], d.get("reason", ""), d.get("forced", False)
    )


def appeal(d: Mapping[str, Any]) -> Appeal:
    return Appeal(d["workload_id"], _at(d["at"]), d["by"], d.get("reason", ""))


def watch(d: Mapping[str, Any] | None) -> Watch:
    if not d:
        return Watch()
    stops = [StopRecord(**{**s, "at": _at(s["at"])}) for s in d.get("stops", [])]
    fks = [
        FalseKill(**{**f, "stopped_at": _at(f["stopped_at"]), "found_at": _at(f["found_at"])})
        for f in d.get("false_kills", [])
    ]
    reclaim = {k: [int(v[0]), int(v[1])] for k, v in d.get("reclaim", {}).items()}
    counts = {k: dict(v) for k, v in d.get("counts", {}).items()}
    return Watch(stops, fks, int(d.get("next_id", 1)), reclaim, counts)
