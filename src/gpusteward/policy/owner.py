"""Owner and admin controls as policy sees them: snoozes, approvals and the working-hours calendar.

Pure: the runtime reads snoozes and approval requests from the store and passes them in as the
plain values below; nothing here does I/O (the ``holidays`` package is only data, imported
lazily because it is an optional extra).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import ApprovalStatus, Hold
from gpusteward.policy.guards import Held
from gpusteward.policy.ladder import Step, clock, when
from gpusteward.policy.settings import WorkingHoursSettings


@dataclass(frozen=True, slots=True)
class SnoozeView:
    """A workload's snooze in force."""

    until: datetime
    by: str
    reason: str


@dataclass(frozen=True, slots=True)
class ApprovalView:
    """The latest approval request for one step (one action idempotency key)."""

    id: int
    status: ApprovalStatus
    expires_at: datetime
    decided_by: str = ""
    decision_reason: str = ""
    #: How many requests were made for this step (a new one follows each expiry).
    requests: int = 1


def approval_key(action_key: str, attempt: int) -> str:
    """The approval request key for the ``attempt``-th request of one step: the action key for the
    first, ``<key>~r2``, ``<key>~r3``… after each expiry (keys are unique per request;
    ``domain.records.base_key`` reverses it)."""
    return action_key if attempt <= 1 else f"{action_key}~r{attempt}"


def snoozed(snooze: SnoozeView, seen: str) -> str:
    why = f" ({snooze.reason})" if snooze.reason.strip() else ""
    return (
        f"{seen} Nothing is done: {snooze.by} snoozed it until {clock(snooze.until)} "
        f"{snooze.until:%Y-%m-%d}{why}; its ladder starts again from a first warning afterwards."
    )


def approval_gate(
    step: Step, approval: ApprovalView | None, now: datetime, expire_hours: float
) -> Held | None:
    """None when the step may run (approved, or its approval already used); else why it waits."""
    if approval is not None:
        status = approval.status
        if status is ApprovalStatus.USED or (status is ApprovalStatus.APPROVED and approval.expires_at > now):
            return None
        if status is ApprovalStatus.REJECTED:
            why = f": {approval.decision_reason}" if approval.decision_reason.strip() else ""
            return Held(
                Hold.REJECTED,
                f"{approval.decided_by or 'an admin'} rejected it (request {approval.id}){why}; it is "
                "not asked again while this waste lasts",
            )
        if status is ApprovalStatus.PENDING and approval.expires_at > now:
            return Held(
                Hold.AWAITING_APPROVAL,
                f"it waits for an admin's approval (request {approval.id}, `gpusteward approvals "
                f"approve {approval.id}`), which expires {when(approval.expires_at, now)}",
            )
    again = " again: the last request expired unanswered" if approval is not None else ""
    return Held(
        Hold.AWAITING_APPROVAL,
        f"a {step.title} needs an admin's approval; it is asked for{again} "
        f"(it expires in {expire_hours:g} h)",
    )


@lru_cache(maxsize=16)
def _holidays(country: str, subdiv: str) -> Any:
    try:
        import holidays  # optional extra, only for a configured country
    except ImportError as e:
        raise ConfigError(
            "policy.working_hours.holidays_country needs the holidays package: "
            "pip install 'gpusteward[calendar]'"
        ) from e
    try:
        return holidays.country_holidays(country, subdiv=subdiv or None)
    except NotImplementedError as e:
        raise ConfigError(f"policy.working_hours: no holidays known for {country!r} {subdiv!r}") from e


def check_calendar(settings: WorkingHoursSettings) -> None:
    """Fail at start-up (not in a tick) when the holidays of the calendar cannot be loaded."""
    if settings.enabled and settings.holidays_country:
        _holidays(settings.holidays_country.upper(), settings.holidays_subdiv.upper())


def off_hours(now: datetime, settings: WorkingHoursSettings) -> Held | None:
    """Held when ``now`` is outside working hours (a day off, a holiday, before or after hours)."""
    if not settings.enabled:
        return None
    local = now.astimezone(ZoneInfo(settings.timezone))
    hours = f"{settings.start_hour:02d}:00-{settings.end_hour:02d}:00 {settings.timezone}"
    if settings.holidays_country:
        name = _holidays(settings.holidays_country.upper(), settings.holidays_subdiv.upper()).get(
            local.date()
        )
        if name:
            return Held(Hold.OFF_HOURS, f"today is a public holiday ({name}); stops wait for working hours")
    if local.weekday() not in settings.days:
        return Held(
            Hold.OFF_HOURS, f"it is {local:%A}, not a working day; stops wait for working hours ({hours})"
        )
    if not settings.start_hour <= local.hour < settings.end_hour:
        return Held(Hold.OFF_HOURS, f"it is {local:%H:%M}, outside working hours ({hours}); stops wait")
    return None
