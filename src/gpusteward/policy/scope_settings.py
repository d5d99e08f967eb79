"""Roll-out scopes: which part of the cluster is observed, only notified, or enforced.

``policy.scopes`` is an ordered list; the first scope whose selector matches a workload holds
it, ``policy.default_scope`` holds the rest. A selector field lists accepted values (any of
them); every field given must match. ``policy.rollout`` says when a scope may be promoted and
how the live false-kill figure slows a scope down.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpusteward.domain.classes import WorkloadClass
from gpusteward.domain.models import Level


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Stage(StrEnum):
    """How far a scope is rolled out, in promotion order."""

    #: Findings and what would be done are recorded; nobody is told, nothing is done.
    OBSERVE = "observe"
    #: Owners get warnings (L1) only.
    NOTIFY = "notify"
    #: The ladder runs up to the scope's ``max_level``.
    ENFORCE = "enforce"

    def next(self) -> Stage | None:
        order = list(Stage)
        i = order.index(self)
        return order[i + 1] if i + 1 < len(order) else None


_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


class ScopeSelector(_Strict):
    """Which workloads a scope holds; every field given must match, each lists accepted values."""

    teams: list[str] = Field(
        default_factory=list,
        description="Owner teams (the Slurm account, the Kubernetes namespace, or a process's team).",
    )
    users: list[str] = Field(default_factory=list, description="Owner user names.")
    namespaces: list[str] = Field(default_factory=list, description="Kubernetes namespaces.")
    accounts: list[str] = Field(default_factory=list, description="Slurm accounts.")
    partitions: list[str] = Field(default_factory=list, description="Slurm partitions.")
    qos: list[str] = Field(default_factory=list, description="Slurm QOS names.")
    pools: list[str] = Field(default_factory=list, description="Node pools of the workload's GPUs.")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Label or annotation key → value, all required (case-insensitive)."
    )
    classes: list[WorkloadClass] = Field(
        default_factory=list, description="Workload classes (service, batch, interactive, unknown)."
    )


class ScopeLadder(_Strict):
    """A scope's own ladder timings over the class's; a field left out keeps the class's."""

    warn_again_after_minutes: float | None = Field(
        None, ge=0, le=10080, description="Minutes after the first warning before the second."
    )
    graceful_stop_after_minutes: float | None = Field(
        None, ge=0, le=10080, description="Minutes after the first warning before the graceful stop."
    )
    force_after_minutes: float | None = Field(
        None, ge=0, le=10080, description="Minutes after the graceful stop before a force stop."
    )


def _level(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip().upper().replace("-", "_")
        if text in Level.__members__:
            return Level[text]
        if text.startswith("L") and text[1:].isdigit():
            return int(text[1:])
    return value


class DefaultScopeSettings(_Strict):
    """The scope that holds every workload no listed scope matches."""

    mode: Stage = Field(
        Stage.ENFORCE,
        description="observe (record only), notify (warnings only) or enforce (the ladder runs). "
        "`gpusteward rollout promote` overrides this until the configured mode changes.",
    )
    max_level: Level | None = Field(
        None,
        description="Highest level in this scope once enforced (L1-L4); policy.max_level still caps it. "
        "Empty: policy.max_level.",
    )
    ladder: ScopeLadder = Field(default_factory=ScopeLadder, description="This scope's ladder timings.")

    @field_validator("max_level", mode="before")
    @classmethod
    def _parse_level(cls, value: Any) -> Any:
        return _level(value)


class ScopeSettings(DefaultScopeSettings):
    """One roll-out scope: a name, a selector, and how far it is rolled out."""

    name: str = Field(description="Short name (lower case, digits, . _ -), e.g. pilot-nlp.")
    match: ScopeSelector = Field(
        default_factory=ScopeSelector, description="Which workloads it holds (empty: all)."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"scope name {value!r}: use lower case letters, digits, '.', '_' or '-'")
        if value == "default":
            raise ValueError("'default' names policy.default_scope; choose another name")
        return value


class PromoteWhen(_Strict):
    """What a scope must show before ``gpusteward rollout promote`` moves it on (without --force)."""

    min_days: float = Field(14.0, ge=0, le=3650, description="Days in its current stage at least.")
    max_false_kills: int = Field(
        0, ge=0, le=100_000, description="Most suspected false kills (not dismissed) in the stage."
    )
    max_appeals: int = Field(2, ge=0, le=100_000, description="Most appeals by owners in the stage.")


class RolloutSettings(_Strict):
    """Promotion criteria and the live false-kill figure."""

    promote_when: PromoteWhen = Field(default_factory=PromoteWhen, description="Promotion criteria.")
    false_kill_horizon_hours: float = Field(
        6.0,
        gt=0,
        le=168,
        description="Hours after a stop in which a resubmission, restore or appeal by its owner "
        "makes it a suspected false kill.",
    )
    false_kill_slowdown: float = Field(
        2.0,
        ge=1,
        le=10,
        description="While a scope has a suspected false kill no admin has confirmed or dismissed, "
        "its ladder timings are multiplied by this (1: no slowdown).",
    )
    tell_admin_after_attempts: int = Field(
        3,
        ge=1,
        le=100,
        description="An action that failed this many times is reported to the admins (once), with "
        "its error; it is still retried while the waste holds.",
    )
