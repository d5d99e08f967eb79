"""Snoozes, approvals and the working-hours calendar in ``decide`` (pure, injected ``now``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import ApprovalStatus, Hold, Level
from gpusteward.policy import PolicyInput, PolicySettings, decide, idempotency_key
from gpusteward.policy.ladder import FORCE, GRACEFUL_STOP
from gpusteward.policy.owner import ApprovalView, SnoozeView, approval_key, check_calendar, off_hours
from gpusteward.policy.settings import WorkingHoursSettings

from .test_decide import T0, at_step, finding, gpus, workload

W = workload("w", ["GPU-0"])
STOP_DUE = {"w": at_step("w", "warn-2", W)}  # the graceful stop is due now
FORCE_DUE = {"w": at_step("w", "graceful-stop", W)}


def decide_one(
    states: dict,
    *,
    findings: list | None = None,
    settings: PolicySettings | None = None,
    approvals: dict | None = None,
    snoozes: dict | None = None,
    unsnoozable: frozenset[str] = frozenset(),
    now: datetime = T0,
):
    inp = PolicyInput(
        now=now,
        findings=findings if findings is not None else [finding("w", ["GPU-0"])],
        workloads={"w": W},
        states=states,
        unknown_workloads=frozenset(),
        gpus=gpus(),
        approvals=approvals,
        snoozes=snoozes or {},
        unsnoozable_rules=unsnoozable,
    )
    result = decide(inp, settings or PolicySettings())
    (d,) = result.decisions
    return d, result


def test_a_snooze_holds_the_workload_and_ends_its_ladder() -> None:
    snooze = SnoozeView(T0 + timedelta(hours=2), "alice", "demo tomorrow")
    d, result = decide_one(STOP_DUE, snoozes={"w": snooze})
    assert (d.hold, d.level, d.acts) == (Hold.SNOOZED, Level.NONE, False)
    assert "alice snoozed it" in d.reason
    assert "demo tomorrow" in d.reason
    assert result.cleared == {"w"}


def test_a_snooze_does_not_hold_a_non_snoozable_rule() -> None:
    snooze = SnoozeView(T0 + timedelta(hours=2), "alice", "")
    fs = [finding("w", ["GPU-0"], rule="idle-gpu"), finding("w", ["GPU-0"], rule="crypto", cost=0.1)]
    d, _ = decide_one(STOP_DUE, findings=fs, snoozes={"w": snooze}, unsnoozable=frozenset({"crypto"}))
    # The snoozable (bigger) finding is set aside; the unsnoozable one drives the ladder on.
    assert d.acts
    assert d.rule == "crypto"
    assert d.step == "graceful-stop"


def test_a_step_that_needs_approval_waits_without_advancing_the_ladder() -> None:
    d, result = decide_one(FORCE_DUE, approvals={})
    assert (d.hold, d.step, d.acts) == (Hold.AWAITING_APPROVAL, "force", False)
    assert d.idempotency_key == idempotency_key(FORCE_DUE["w"], FORCE)
    assert "needs an admin's approval" in d.reason
    assert result.states["w"].step == "graceful-stop"  # the ladder does not advance
    # L2 does not need an approval by default (L3 and L4 do).
    d2, _ = decide_one(STOP_DUE, approvals={})
    assert d2.acts


def test_approved_runs_rejected_holds_for_the_episode_expired_is_asked_again() -> None:
    key = idempotency_key(FORCE_DUE["w"], FORCE)
    later = T0 + timedelta(hours=1)
    approved = ApprovalView(7, ApprovalStatus.APPROVED, later, "bob", "ok")
    d, result = decide_one(FORCE_DUE, approvals={key: approved})
    assert d.acts
    assert d.idempotency_key == key
    assert "Approved by bob" in d.reason
    assert result.states["w"].step == "force"

    rejected = replace(approved, status=ApprovalStatus.REJECTED, decision_reason="still loading")
    d, result = decide_one(FORCE_DUE, approvals={key: rejected})
    assert (d.hold, d.idempotency_key) == (Hold.REJECTED, "")
    assert "bob rejected it" in d.reason
    assert "still loading" in d.reason
    assert result.states["w"].step == "graceful-stop"

    pending = replace(approved, status=ApprovalStatus.PENDING)
    d, _ = decide_one(FORCE_DUE, approvals={key: pending})
    assert (d.hold, d.idempotency_key) == (Hold.AWAITING_APPROVAL, key)
    assert "request 7" in d.reason

    # Approved, but the approval lapsed before the step ran: it never runs on it.
    lapsed = replace(approved, expires_at=T0)
    d, _ = decide_one(FORCE_DUE, approvals={key: lapsed})
    assert d.hold is Hold.AWAITING_APPROVAL
    assert "asked for again" in d.reason
    expired = replace(approved, status=ApprovalStatus.EXPIRED)
    d, _ = decide_one(FORCE_DUE, approvals={key: expired})
    assert (d.hold, d.idempotency_key) == (Hold.AWAITING_APPROVAL, key)


def test_approval_level_is_configurable_and_dry_run_asks_nobody() -> None:
    l2 = PolicySettings(approval={"min_level": "L2"})
    d, _ = decide_one(STOP_DUE, settings=l2, approvals={})
    assert d.hold is Hold.AWAITING_APPROVAL
    off = PolicySettings(approval={"min_level": "off"})
    d, _ = decide_one(FORCE_DUE, settings=off, approvals={})
    assert d.acts
    # approvals=None: the runtime's dry-run preview, every step as if approved.
    d, _ = decide_one(FORCE_DUE, approvals=None)
    assert d.acts


def test_approval_keys_are_unique_per_request() -> None:
    assert approval_key("w:1:2:force", 1) == "w:1:2:force"
    assert approval_key("w:1:2:force", 3) == "w:1:2:force~r3"


HOURS = WorkingHoursSettings(enabled=True, timezone="Europe/Berlin", start_hour=9, end_hour=18)


@pytest.mark.parametrize(
    ("local", "held"),
    [
        (datetime(2026, 3, 3, 10, 0), None),  # Tuesday 10:00 in Berlin
        (datetime(2026, 3, 3, 8, 59), "outside working hours"),
        (datetime(2026, 3, 3, 18, 0), "outside working hours"),
        (datetime(2026, 3, 7, 12, 0), "not a working day"),  # Saturday
    ],
)
def test_working_hours_in_the_configured_time_zone(local: datetime, held: str | None) -> None:
    from zoneinfo import ZoneInfo

    now = local.replace(tzinfo=ZoneInfo("Europe/Berlin")).astimezone(UTC)
    got = off_hours(now, HOURS)
    if held is None:
        assert got is None
    else:
        assert got is not None
        assert held in got.reason
        assert got.hold is Hold.OFF_HOURS


def test_public_holidays_from_the_holidays_package() -> None:
    pytest.importorskip("holidays")
    bavaria = HOURS.model_copy(update={"holidays_country": "DE", "holidays_subdiv": "BY"})
    check_calendar(bavaria)
    epiphany = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)  # a Tuesday, a holiday in Bavaria only
    got = off_hours(epiphany, bavaria)
    assert got is not None
    assert "public holiday" in got.reason
    assert (
        off_hours(epiphany, HOURS.model_copy(update={"holidays_country": "DE", "holidays_subdiv": "BE"}))
        is None
    )
    with pytest.raises(ConfigError, match="no holidays known"):
        check_calendar(HOURS.model_copy(update={"holidays_country": "XX"}))


def test_off_hours_hold_stops_but_not_notices() -> None:
    settings = PolicySettings(working_hours=HOURS.model_dump())
    night = datetime(2026, 3, 3, 23, 0, tzinfo=UTC)
    states = {"w": replace(at_step("w", "warn-2", W), step_at=night - timedelta(hours=1))}
    d, result = decide_one(states, settings=settings, now=night)
    assert (d.hold, d.step) == (Hold.OFF_HOURS, GRACEFUL_STOP.name)
    assert result.states["w"].step == "warn-2"
    warn_due = {"w": replace(at_step("w", "warn-1", W), step_at=night - timedelta(hours=1))}
    d, _ = decide_one(warn_due, settings=settings, now=night)
    assert d.acts
    assert d.level is Level.NOTIFY
