"""Policy settings: the escalation ladder, its pace under demand, protection, reserve pool and
blast-radius budget.

Every model rejects unknown keys, so a typo in a policy file is an error, never ignored.
"""

from __future__ import annotations

from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpusteward.domain.classes import WorkloadClass
from gpusteward.domain.models import PROTECT_KEY, Level
from gpusteward.policy.health_settings import HealthSettings
from gpusteward.policy.scope_settings import DefaultScopeSettings, RolloutSettings, ScopeSettings


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LadderSettings(_Strict):
    """When each step of the warn → warn → stop → force ladder fires."""

    warn_again_after_minutes: float = Field(
        15.0, ge=0, le=10080, description="Minutes after the first warning before the second warning."
    )
    graceful_stop_after_minutes: float = Field(
        30.0,
        ge=0,
        le=10080,
        description="Minutes after the first warning before the graceful stop (checkpoint signal, "
        "then SIGTERM). If this is not later than the second warning, that warning is skipped.",
    )
    force_after_minutes: float = Field(
        10.0,
        ge=0,
        le=10080,
        description="Minutes after the graceful stop before a force stop, if the workload still "
        "runs and still wastes its GPUs.",
    )
    clear_after_minutes: float = Field(
        10.0,
        ge=0,
        le=10080,
        description="Minutes the waste must stay gone, on fresh data, before a ladder ends: a short "
        "burst of use, or the first minutes of data after an outage, does not wipe out the warnings "
        "already given. Nothing is done while the waste is not seen.",
    )
    stop_grace_seconds: float = Field(
        120.0,
        ge=0,
        le=86400,
        description="Seconds executors wait between the checkpoint signal and SIGTERM.",
    )
    by_class: dict[WorkloadClass, ClassLadderSettings] = Field(
        default_factory=dict,
        description="Per workload class (service, batch, interactive, unknown), timings that "
        "differ from the above, e.g. by_class.service.graceful_stop_after_minutes: 60.",
    )

    def for_class(self, cls: WorkloadClass) -> LadderSettings:
        """These timings with ``cls``'s own over them."""
        own = self.by_class.get(cls)
        if own is None:
            return self
        return self.model_copy(update=own.model_dump(exclude_none=True))


class ClassLadderSettings(_Strict):
    """One workload class's own timings; a field left out keeps the ladder's."""

    warn_again_after_minutes: float | None = Field(
        None, ge=0, le=10080, description="Minutes after the first warning before the second."
    )
    graceful_stop_after_minutes: float | None = Field(
        None,
        ge=0,
        le=10080,
        description="Minutes after the first warning before the graceful stop (for a service: the "
        "scale-down).",
    )
    force_after_minutes: float | None = Field(
        None, ge=0, le=10080, description="Minutes after the graceful stop before a force stop."
    )


class ProtectSettings(_Strict):
    """Workloads that gpusteward never stops: they still get their findings and, where their
    scope notifies, the warnings (protection stops actions, not information)."""

    users: list[str] = Field(default_factory=list, description="Owners (user names) never acted on.")
    teams: list[str] = Field(
        default_factory=list, description="Teams / namespaces / accounts never acted on."
    )
    labels: dict[str, str] = Field(
        default_factory=lambda: {PROTECT_KEY: "true"},
        description="Label or annotation key → value (compared case-insensitively) that protects "
        f"a workload. Setting this replaces the default: list {PROTECT_KEY} too to keep it.",
    )


class ReserveSettings(_Strict):
    """A warm pool of idle GPUs left alone on purpose."""

    share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of each pool's GPUs, rounded up, that idle workloads may keep: the "
        "cheapest-to-keep idle workloads up to this share are not stopped.",
    )


class BudgetSettings(_Strict):
    """Blast radius: how much stopping (L2 and above) may happen in any hour."""

    max_actions_per_hour: int = Field(
        20, ge=0, le=100_000, description="Most L2+ actions (stops) in any hour, past actions included."
    )
    max_gpu_share_per_hour: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Most GPUs, as a share of all GPUs seen, that L2+ actions may touch in any hour.",
    )


class ApprovalSettings(_Strict):
    """Steps that wait for a person: an admin or operator approves or rejects each one."""

    min_level: Level | None = Field(
        Level.FORCE,
        description="Decisions at this level or above wait in the approval queue (L3 and L4 by "
        "default; L2 to approve graceful stops too; off: nothing waits).",
    )
    expire_hours: float = Field(
        2.0, gt=0, le=720, description="Hours a request may wait; an expired approval never executes."
    )

    @field_validator("min_level", mode="before")
    @classmethod
    def _parse_level(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("off", "none", "never"):
            return None
        return _level(value)

    def needs_approval(self, level: Level) -> bool:
        return self.min_level is not None and level >= self.min_level


class SnoozeSettings(_Strict):
    """Owners may put their workload aside for a while, within limits set by admins."""

    max_hours: float = Field(24.0, gt=0, le=720, description="Longest snooze an owner may ask for.")


class NoticeSettings(_Strict):
    """How often one owner hears from gpusteward (admins' notices are never throttled)."""

    max_per_owner_per_day: int = Field(
        20,
        ge=1,
        le=100_000,
        description="Most notices one owner gets per UTC day; the rest are gathered into one digest "
        "notice the next day (each notice is still recorded, marked not sent).",
    )


class WorkingHoursSettings(_Strict):
    """A working-hours calendar: outside it, steps at ``min_level`` and above wait (notices go on)."""

    enabled: bool = Field(False, description="Hold stops (L2+) outside working hours.")
    timezone: str = Field("UTC", description="IANA time zone of the working hours, e.g. Europe/Berlin.")
    days: list[Annotated[int, Field(ge=0, le=6)]] = Field(
        default_factory=lambda: [0, 1, 2, 3, 4], description="Working days, 0 = Monday … 6 = Sunday."
    )
    start_hour: int = Field(9, ge=0, le=23, description="Working hours start (local hour).")
    end_hour: int = Field(18, ge=1, le=24, description="Working hours end (local hour, exclusive).")
    holidays_country: str = Field(
        "",
        description="ISO country code whose public holidays are days off, e.g. DE (needs the "
        "`holidays` package: pip install 'gpusteward[calendar]'). Empty: no holidays.",
    )
    holidays_subdiv: str = Field("", description="Subdivision for the holidays, e.g. BY.")
    min_level: Level = Field(Level.GRACEFUL_STOP, description="Steps at this level and above wait.")

    @field_validator("min_level", mode="before")
    @classmethod
    def _parse_level(cls, value: Any) -> Any:
        return _level(value)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (use an IANA name like Europe/Berlin)") from None
        return value

    @model_validator(mode="after")
    def _hours_in_order(self) -> WorkingHoursSettings:
        if self.end_hour <= self.start_hour:
            raise ValueError(f"end_hour {self.end_hour} must be after start_hour {self.start_hour}")
        return self


def _paced_classes() -> list[WorkloadClass]:
    return ["batch", "interactive"]


class DemandSettings(_Strict):
    """Waiting jobs make reclaiming urgent: the waits between ladder steps for idle holders of a GPU
    model that jobs wait for shrink, down to ``min_factor`` (issue 16). The defaults leave the ladder
    as it is when nobody waits, and when no scheduler queue is read at all."""

    min_factor: float = Field(
        0.25,
        gt=0,
        le=1,
        description="Shortest the waits between ladder steps get (times the configured waits) while "
        "jobs wait for free GPUs of the model a workload holds: reached at full_at_gpus GPUs waited "
        "for, linear from 1.0 below that. 1: demand never speeds the ladder up.",
    )
    full_at_gpus: int = Field(
        8, ge=1, le=1_000_000, description="GPUs waited for at which the waits reach min_factor."
    )
    max_factor: float = Field(
        1.0,
        ge=1,
        le=10,
        description="Waits times this when a queue was read and nobody waits for the model (the "
        "ladder may move slower); 1: unchanged. An unread queue always means the normal pace.",
    )
    classes: list[WorkloadClass] = Field(
        default_factory=_paced_classes,
        description="Classes whose ladder demand paces. A service's idle spell ends when its traffic "
        "returns, whatever waits in the queue, so services and unknown workloads keep their pace "
        "unless named here (on the dev trace, pacing them turned one quiet pod into a false kill).",
    )


def _level(value: Any) -> Any:
    """Accept ``2``, ``"L2"``, ``"graceful_stop"`` and ``"graceful-stop"`` for a level."""
    if isinstance(value, str):
        text = value.strip().upper().replace("-", "_")
        if text in Level.__members__:
            return Level[text]
        if text.startswith("L") and text[1:].isdigit():
            return int(text[1:])
    return value


class PolicySettings(_Strict):
    """Everything policy needs to turn findings into decisions."""

    ladder: LadderSettings = Field(default_factory=LadderSettings, description="Escalation timing.")
    startup_grace_minutes: float = Field(
        15.0, ge=0, le=10080, description="Minutes after a workload starts before anything is done about it."
    )
    protect: ProtectSettings = Field(
        default_factory=ProtectSettings, description="Protected users, teams and labels."
    )
    reserve: ReserveSettings = Field(
        default_factory=ReserveSettings, description="Idle GPUs deliberately kept."
    )
    budget: BudgetSettings = Field(default_factory=BudgetSettings, description="Blast-radius limits.")
    approval: ApprovalSettings = Field(
        default_factory=ApprovalSettings, description="Which steps wait for a person's approval."
    )
    snooze: SnoozeSettings = Field(default_factory=SnoozeSettings, description="Owner snooze limits.")
    notices: NoticeSettings = Field(default_factory=NoticeSettings, description="Per-owner notice limits.")
    working_hours: WorkingHoursSettings = Field(
        default_factory=WorkingHoursSettings, description="When stops may happen."
    )
    demand: DemandSettings = Field(
        default_factory=DemandSettings, description="How waiting jobs change the ladder's pace."
    )
    health: HealthSettings = Field(
        default_factory=HealthSettings, description="What a failed, degrading or throttled GPU leads to."
    )
    max_level: Level = Field(
        Level.FORCE,
        description="Highest intervention level policy may choose (0-4, L0-L4 or a level name); "
        "steps above it are never taken.",
    )

    scopes: list[ScopeSettings] = Field(
        default_factory=list,
        description="Roll-out scopes, first match wins: each a name, a selector (teams, users, "
        "namespaces, accounts, partitions, qos, pools, labels, classes), a mode (observe, notify, "
        "enforce), a max_level and ladder timings of its own.",
    )
    default_scope: DefaultScopeSettings = Field(
        default_factory=DefaultScopeSettings,
        description="The scope of every workload no listed scope matches (enforce by default).",
    )
    rollout: RolloutSettings = Field(
        default_factory=RolloutSettings, description="Promotion criteria and false-kill handling."
    )

    @field_validator("max_level", mode="before")
    @classmethod
    def _parse_level(cls, value: Any) -> Any:
        return _level(value)

    @field_validator("scopes")
    @classmethod
    def _unique_scopes(cls, value: list[ScopeSettings]) -> list[ScopeSettings]:
        seen: set[str] = set()
        for s in value:
            if s.name in seen:
                raise ValueError(f"scope {s.name!r} is listed twice")
            seen.add(s.name)
        return value
