"""Per-class ladder timings: ``policy.ladder.by_class.<class>`` over the ladder's own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from gpusteward.domain.models import (
    Finding,
    Gpu,
    LadderState,
    Level,
    Owner,
    RuleAction,
    Workload,
    WorkloadKind,
)
from gpusteward.policy import PolicyInput, PolicySettings, decide

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
REFS = {
    "service": {"kind": "Deployment", "namespace": "ml"},
    "batch": {"kind": "Job", "namespace": "ml"},
    "interactive": {"kind": "Notebook", "namespace": "ml"},
    "unknown": {},
}


def workload(cls: str) -> Workload:
    return Workload(
        cls,
        WorkloadKind.POD,
        cls,
        Owner("alice", "ml"),
        1,
        (f"GPU-{cls}",),
        T0 - timedelta(hours=6),
        ref=REFS[cls],
    )


def step_at(settings: PolicySettings, cls: str, minutes_after_warning: float) -> str | None:
    """The step decided for ``cls``'s workload that long after its first warning."""
    w = workload(cls)
    warned = T0 - timedelta(minutes=minutes_after_warning)
    state = LadderState(w.id, w.incarnation, "idle", warned, warned, "warn-1", warned, warned)
    f = Finding("idle", "idle", RuleAction.RECLAIM, T0, w.gpu_uuids, w.id, {}, 300.0, 5.0, 10.0, "idle")
    gpus = {w.gpu_uuids[0]: Gpu(w.gpu_uuids[0], "n", 0, "A100", 81920.0, 2.0)}
    inp = PolicyInput(T0, [f], {w.id: w}, {w.id: state}, frozenset(), gpus, False, 0, 0)
    (d,) = decide(inp, settings).decisions
    return d.step if d.level >= Level.NOTIFY and d.acts else None


SETTINGS = PolicySettings.model_validate(
    {
        "budget": {"max_gpu_share_per_hour": 1.0},  # one GPU of one: the budget would hold it
        "ladder": {
            "warn_again_after_minutes": 60,  # no second warning before the stop
            "graceful_stop_after_minutes": 30,
            "by_class": {
                "service": {"graceful_stop_after_minutes": 90},
                "interactive": {"graceful_stop_after_minutes": 45},
            },
        },
    }
)


@pytest.mark.parametrize(
    ("cls", "minutes", "expected"),
    [
        ("batch", 29, None),
        ("batch", 30, "graceful-stop"),
        ("unknown", 30, "graceful-stop"),  # no timings of its own: the ladder's
        ("interactive", 30, None),
        ("interactive", 45, "graceful-stop"),
        ("service", 60, "warn-2"),  # the ladder's second warning, now before the stop
        ("service", 59, None),
    ],
)
def test_each_class_waits_its_own_time(cls: str, minutes: float, expected: str | None) -> None:
    assert step_at(SETTINGS, cls, minutes) == expected


def test_service_stop_after_its_second_warning() -> None:
    w = workload("service")
    warned = T0 - timedelta(minutes=90)
    second = T0 - timedelta(minutes=30)
    state = LadderState(w.id, w.incarnation, "idle", warned, second, "warn-2", second, warned)
    f = Finding("idle", "idle", RuleAction.RECLAIM, T0, w.gpu_uuids, w.id, {}, 300.0, 5.0, 10.0, "idle")
    gpus = {w.gpu_uuids[0]: Gpu(w.gpu_uuids[0], "n", 0, "A100", 81920.0, 2.0)}
    inp = PolicyInput(T0, [f], {w.id: w}, {w.id: state}, frozenset(), gpus, False, 0, 0)
    (d,) = decide(inp, SETTINGS).decisions
    assert (d.step, d.level) == ("graceful-stop", Level.GRACEFUL_STOP)


def test_by_class_merges_and_refuses_unknown_classes() -> None:
    lad = SETTINGS.ladder
    assert lad.for_class("service").graceful_stop_after_minutes == 90
    assert lad.for_class("service").warn_again_after_minutes == 60  # not overridden: the ladder's
    assert lad.for_class("batch") is lad
    with pytest.raises(ValidationError, match="by_class"):
        PolicySettings.model_validate({"ladder": {"by_class": {"web": {"force_after_minutes": 5}}}})
    with pytest.raises(ValidationError, match="graceful_stop_after_minute"):
        PolicySettings.model_validate(
            {"ladder": {"by_class": {"service": {"graceful_stop_after_minute": 5}}}}
        )
