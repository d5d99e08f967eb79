"""Which roll-out scope holds a workload, and what that scope lets the ladder do. Pure.

A scope's stage is the configured mode unless ``gpusteward rollout promote`` set another (the
runtime hands those in as ``stages``); a scope with a suspected false kill that no admin has
settled runs on slower timings (``slowed``: scope → multiplier). Jobs waiting for the model a
workload holds speed its timings up (policy/demand.py), never a slowed scope's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from gpusteward.domain.classes import WorkloadClass, workload_class
from gpusteward.domain.models import Gpu, Hold, LadderState, Level, Workload
from gpusteward.domain.queue import Queue
from gpusteward.policy import demand, guards, ladder
from gpusteward.policy.demand import Demand
from gpusteward.policy.ladder import Step
from gpusteward.policy.scope_settings import DefaultScopeSettings, ScopeSelector, Stage
from gpusteward.policy.settings import LadderSettings, PolicySettings, ProtectSettings

DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class Scope:
    name: str
    stage: Stage
    #: Highest level once enforced: the scope's max_level under policy.max_level.
    max_level: Level
    timings: LadderSettings
    #: Ladder timings multiplied by this (suspected false kills not yet settled); 1: none.
    slowdown: float = 1.0
    #: What waits for the workload's GPU model (None: no queue read); ``timings`` include its pace.
    demand: Demand | None = None

    def pace(self, state: LadderState, now: datetime, *, advice: bool) -> str:
        """Why the ladder moves slower or faster than configured, with when the stop comes."""
        slow = ""
        if self.slowdown > 1:
            slow = f" (scope {self.name} runs {self.slowdown:g}x slower after a suspected false kill)"
        if advice or self.demand is None:  # no queue read: nothing to say about the stop's time
            return slow
        steps = ladder.schedule(state, self.timings, now, advice=False, max_level=self.cap)
        stop = next((ladder.when(at, now) for s, at in steps if s is ladder.GRACEFUL_STOP), "")
        return slow + demand.sentence(self.demand, stop, slowed=self.slowdown > 1)

    @property
    def cap(self) -> Level:
        """The highest level the stage allows now."""
        if self.stage is Stage.OBSERVE:
            return Level.NONE
        if self.stage is Stage.NOTIFY:
            return min(Level.NOTIFY, self.max_level)
        return self.max_level

    def held_reason(self, title: str) -> str:
        """Why a step above the stage's cap is not taken, naming the scope."""
        if self.stage is Stage.OBSERVE:
            return f"scope {self.name} is in observe: recorded, nobody told (enforce would take the {title})"
        if self.stage is Stage.NOTIFY:
            return f"scope {self.name} is in notify: its owners get warnings only, not the {title}"
        return f"scope {self.name} allows at most {self.max_level.label}"


def _any(have: str, want: list[str]) -> bool:
    return not want or have in want


def matches(sel: ScopeSelector, w: Workload, gpus: Mapping[str, Gpu]) -> bool:
    """Whether every field ``sel`` gives accepts ``w``."""
    ref = w.ref
    namespace = ref.get("namespace") or w.labels.get("gpusteward.io/namespace", "")
    if not (
        _any(w.owner.team, sel.teams)
        and _any(w.owner.user, sel.users)
        and _any(namespace, sel.namespaces)
        and _any(ref.get("account", ""), sel.accounts)
        and _any(ref.get("partition", ""), sel.partitions)
        and _any(ref.get("qos", ""), sel.qos)
    ):
        return False
    if sel.pools and not any(gpus[u].pool in sel.pools for u in w.gpu_uuids if u in gpus):
        return False
    for key, want in sel.labels.items():
        have = w.tag(key)
        if have is None or have.strip().lower() != want.strip().lower():
            return False
    return not sel.classes or workload_class(w) in sel.classes


#: A class's timings with a scope's over them, by the identities of the ladder settings, the
#: class and the scope settings (frozen models): each entry holds the objects whose ids it is
#: keyed by, so an id is never another object's while it is here. Merging afresh for every
#: ladder every tick was two pydantic copies and a dump each.
_MERGED: dict[tuple[int, str, int], tuple[LadderSettings, DefaultScopeSettings, LadderSettings]] = {}
_MAX_MERGED = 256


def _timings(
    ladder_settings: LadderSettings, cls: WorkloadClass, cfg: DefaultScopeSettings
) -> LadderSettings:
    key = (id(ladder_settings), cls, id(cfg))
    hit = _MERGED.get(key)
    if hit is not None and hit[0] is ladder_settings and hit[1] is cfg:
        return hit[2]
    merged = ladder_settings.for_class(cls).model_copy(update=cfg.ladder.model_dump(exclude_none=True))
    if len(_MERGED) >= _MAX_MERGED:
        _MERGED.clear()
    _MERGED[key] = (ladder_settings, cfg, merged)
    return merged


#: Resolved scopes without a demand (no queue read: nearly every one), by name, class, stage,
#: slowdown and the identities of the scope and policy settings, each entry holding the objects
#: it is keyed by (as ``_MERGED``): a Scope built afresh for every planned workload every tick.
_Resolved = tuple[DefaultScopeSettings, PolicySettings, Scope]
_RESOLVED: dict[tuple[str, str, Stage, float, int, int], _Resolved] = {}


def _resolve(
    name: str,
    cfg: DefaultScopeSettings,
    cls: WorkloadClass,
    settings: PolicySettings,
    stages: Mapping[str, Stage],
    slowed: Mapping[str, float],
    need: Demand | None,
) -> Scope:
    stage, slow = stages.get(name, cfg.mode), max(1.0, slowed.get(name, 1.0))
    key = (name, cls, stage, slow, id(cfg), id(settings))
    if need is None:
        hit = _RESOLVED.get(key)
        if hit is not None and hit[0] is cfg and hit[1] is settings:
            return hit[2]
    timings = _timings(settings.ladder, cls, cfg)
    pace = need.factor if need is not None else 1.0
    # A suspected false kill's slowdown is a brake demand never releases: only its slowing part applies.
    timings = demand.paced(timings, slow * (max(pace, 1.0) if slow > 1.0 else pace))
    top = settings.max_level if cfg.max_level is None else min(cfg.max_level, settings.max_level)
    scope = Scope(name, stage, Level(top), timings, slow, need)
    if need is None:
        if len(_RESOLVED) >= _MAX_MERGED:
            _RESOLVED.clear()
        _RESOLVED[key] = (cfg, settings, scope)
    return scope


def scope_for(
    w: Workload,
    gpus: Mapping[str, Gpu],
    settings: PolicySettings,
    stages: Mapping[str, Stage] | None = None,
    slowed: Mapping[str, float] | None = None,
    queue: Queue | None = None,
) -> Scope:
    """The first listed scope that matches ``w``, else the default one, resolved for ``w``'s class
    and paced by what ``queue`` (None: not read) says waits for its GPUs' model."""
    cls = workload_class(w)
    stages, slowed = stages or {}, slowed or {}
    need = demand.demand_for(w, queue, gpus, settings.demand)
    for s in settings.scopes:
        if matches(s.match, w, gpus):
            return _resolve(s.name, s, cls, settings, stages, slowed, need)
    return _resolve(DEFAULT, settings.default_scope, cls, settings, stages, slowed, need)


def scope_names(settings: PolicySettings) -> list[str]:
    return [s.name for s in settings.scopes] + [DEFAULT]


def configured_stage(settings: PolicySettings, name: str) -> Stage | None:
    if name == DEFAULT:
        return settings.default_scope.mode
    return next((s.mode for s in settings.scopes if s.name == name), None)


@dataclass(frozen=True, slots=True)
class Capped:
    """A due step held above what the scope allows: the step recorded, why, in a sentence."""

    step: Step | None
    hold: Hold
    reason: str


def would_take(
    state: LadderState, timings: LadderSettings, now: datetime, top: Level, *, advice: bool
) -> Step:
    """The furthest step enforce would have taken by ``now`` (guards aside)."""
    taken: Step | None = None
    while (nxt := ladder.next_step(state, timings, advice=advice)) is not None:
        step, due = nxt
        if due > now or step.level > top:
            break
        taken, state = step, ladder.take(state, step, due)
    if taken is None:
        raise ValueError("would_take needs a step that is due")
    return taken


def cap(
    scope: Scope,
    state: LadderState,
    step: Step,
    w: Workload,
    now: datetime,
    protect: ProtectSettings,
    *,
    advice: bool,
) -> Capped | None:
    """Hold ``step`` (due now) when the scope's stage, protection or max_level forbids it."""
    if step.level > scope.cap and scope.stage is not Stage.ENFORCE:
        # Recorded as the step enforce would have reached: `rollout status` counts these.
        would = would_take(state, scope.timings, now, scope.max_level, advice=advice)
        return Capped(would, Hold.SCOPE, f"The {step.title} is held: {scope.held_reason(would.title)}.")
    held = guards.protected(w, protect)
    if held is not None and step.level > Level.NOTIFY:
        # Protection stops actions, not information: the warnings went out, the stop never does.
        return Capped(
            step, Hold.PROTECTED, f"The {step.title} is held: {held.reason}; it gets notices, never a stop."
        )
    if step.level > scope.cap:
        return Capped(
            None,
            Hold.WAITING,
            f"The next step would be a {step.title}, but scope {scope.name} allows at most "
            f"{scope.cap.label}: nothing more is done.",
        )
    return None
