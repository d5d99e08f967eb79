from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.models import EXCLUDE_UNTIL_KEY, PROTECT_KEY, Gpu, Hold, Owner, Workload, WorkloadKind
from gpusteward.policy import BudgetSettings, ProtectSettings, StopCandidate
from gpusteward.policy import guards as g

T0 = datetime(2025, 3, 4, 9, 0, tzinfo=UTC)


def workload(
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    user: str = "alice",
    team: str = "nlp",
    started: datetime = T0 - timedelta(hours=1),
    gpus: tuple[str, ...] = ("GPU-0", "GPU-1"),
) -> Workload:
    return Workload(
        "job-1",
        WorkloadKind.JOB,
        "train",
        Owner(user, team),
        len(gpus),
        gpus,
        started,
        labels=labels or {},
        annotations=annotations or {},
    )


@pytest.mark.parametrize(
    ("w", "settings", "reason"),
    [
        (workload(labels={PROTECT_KEY: "true"}), ProtectSettings(), f"{PROTECT_KEY}=true"),
        (workload(annotations={PROTECT_KEY: " True "}), ProtectSettings(), PROTECT_KEY),
        (workload(labels={PROTECT_KEY: "false"}), ProtectSettings(), None),
        (workload(), ProtectSettings(), None),
        (workload(user="bob"), ProtectSettings(users=["bob"]), "owner bob"),
        (workload(team="infra"), ProtectSettings(teams=["infra"]), "team infra"),
        (workload(team=""), ProtectSettings(teams=[""]), None),
        (workload(labels={"tier": "prod"}), ProtectSettings(labels={"tier": "prod"}), "tier=prod"),
        (workload(labels={PROTECT_KEY: "true"}), ProtectSettings(labels={"tier": "prod"}), None),
    ],
)
def test_protected(w: Workload, settings: ProtectSettings, reason: str | None) -> None:
    held = g.protected(w, settings)
    if reason is None:
        assert held is None
    else:
        assert held is not None
        assert held.hold is Hold.PROTECTED
        assert reason in held.reason


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, None),
        ("2025-03-04T10:00:00Z", "until 10:00 UTC 2025-03-04"),
        ("2025-03-04T12:00:00+02:00", "until 10:00 UTC"),
        ("2025-03-04t10:00:00z", "until 10:00 UTC"),
        ("2025-03-04T09:00:00Z", None),  # expired exactly now
        ("2025-03-01T00:00:00Z", None),
        ("tomorrow", "not an RFC 3339 time"),
        ("2025-03-05T00:00:00", "not an RFC 3339 time"),  # no offset: ambiguous, so fail safe
    ],
)
def test_excluded_until(value: str | None, reason: str | None) -> None:
    w = workload(annotations={} if value is None else {EXCLUDE_UNTIL_KEY: value})
    held = g.excluded(w, T0)
    if reason is None:
        assert held is None
    else:
        assert held is not None
        assert held.hold is Hold.EXCLUDED
        assert reason in held.reason


@pytest.mark.parametrize(
    ("age", "text"),
    [
        (
            timedelta(minutes=0),
            "started 0 min ago and new workloads get 15 min to start up; nothing is done "
            "before that ends (in 15 min, at 09:15 UTC)",
        ),
        (timedelta(minutes=14, seconds=59), "(in 1 min, at 09:01 UTC)"),
        (timedelta(minutes=15), None),
    ],
)
def test_startup_grace(age: timedelta, text: str | None) -> None:
    result = g.startup_grace(workload(started=T0 - age), T0, 15)
    if text is None:
        assert result is None
    else:
        assert result is not None
        assert result.hold is Hold.STARTUP_GRACE
        assert text in result.reason


def test_paused() -> None:
    assert g.paused(False) is None
    held = g.paused(True)
    assert held is not None
    assert held.hold is Hold.PAUSED


@pytest.mark.parametrize(
    ("gpus", "wasted", "held"),
    [
        (("GPU-0", "GPU-1"), {"GPU-0", "GPU-1"}, False),
        (("GPU-0", "GPU-1"), {"GPU-0", "GPU-1", "GPU-7"}, False),
        (("GPU-0", "GPU-1"), {"GPU-0"}, True),
        ((), {"GPU-0"}, True),  # it holds no GPU we know of: never stop on someone else's waste
    ],
)
def test_partly_busy(gpus: tuple[str, ...], wasted: set[str], held: bool) -> None:
    result = g.partly_busy(workload(gpus=gpus), wasted)
    assert (result is not None) is held
    if result is not None:
        assert result.hold is Hold.PARTIAL


def pool(name: str, n: int, price: float = 2.0, start: int = 0) -> dict[str, Gpu]:
    return {
        f"{name}-{i}": Gpu(f"{name}-{i}", f"node-{name}", i, "A100", 81920.0, price, pool=name)
        for i in range(start, start + n)
    }


def test_reserve_holds_the_cheapest_idle_workloads_up_to_the_share_of_each_pool() -> None:
    gpus = {**pool("a", 8), **pool("b", 4)}
    gpus["a-1"] = Gpu("a-1", "node-a", 1, "T4", 16384.0, 0.5, pool="a")
    gpus["a-2"] = Gpu("a-2", "node-a", 2, "T4", 16384.0, 0.5, pool="a")
    candidates = [
        StopCandidate("a0", ("a-0",), 10.0, 1.0),
        StopCandidate("a1", ("a-1",), 1.0, 1.0),
        StopCandidate("a2", ("a-2",), 1.0, 1.0),
        StopCandidate("a3", ("a-3",), 1.0, 1.0),
        StopCandidate("b0", ("b-0",), 1.0, 1.0),
        StopCandidate("b1", ("b-1",), 1.0, 1.0),
    ]
    held = g.reserve(candidates, gpus, 0.25)  # 2 of 8 in pool a, 1 of 4 in pool b
    assert sorted(held) == ["a1", "a2", "b0"]
    assert all(h.hold is Hold.RESERVE for h in held.values())
    assert g.reserve(candidates, gpus, 0.0) == {}


def test_reserve_rounds_the_share_up_to_whole_gpus() -> None:
    gpus = pool("a", 30)
    candidates = [StopCandidate(f"w{i}", (f"a-{i}",), 1.0, 1.0) for i in range(10)]
    assert len(g.reserve(candidates, gpus, 0.1)) == 3  # 3.0000000000000004 is still 3
    assert len(g.reserve(candidates, gpus, 0.11)) == 4


def test_budget_caps_the_number_of_stops_and_takes_the_most_wasteful_first() -> None:
    candidates = [StopCandidate(f"w{i}", (f"g{i}",), float(i), 0.0) for i in range(5)]
    held = g.budget(
        candidates, BudgetSettings(max_actions_per_hour=3), total_gpus=100, recent_actions=1, recent_gpus=1
    )
    assert sorted(held) == ["w0", "w1", "w2"]  # w4 and w3 (most waste) use the 2 stops left
    assert all(h.hold is Hold.BUDGET for h in held.values())
    assert "3 stops and 3 GPUs already used" in held["w2"].reason


def test_budget_caps_the_gpu_share_and_lets_a_smaller_stop_fit() -> None:
    candidates = [
        StopCandidate("big", ("g0", "g1"), 9.0, 0.0),
        StopCandidate("big2", ("g2", "g3"), 8.0, 0.0),
        StopCandidate("small", ("g4",), 1.0, 0.0),
    ]
    settings = BudgetSettings(max_gpu_share_per_hour=0.25)  # 4 of 16 GPUs
    held = g.budget(candidates, settings, total_gpus=16, recent_actions=0, recent_gpus=1)
    assert sorted(held) == ["big2"]
    none_left = g.budget(candidates, settings, total_gpus=16, recent_actions=0, recent_gpus=4)
    assert sorted(none_left) == ["big", "big2", "small"]


def test_rfc3339_parsing() -> None:
    assert g.parse_rfc3339("2025-03-04T10:00:00.5Z") == T0 + timedelta(hours=1, milliseconds=500)
    assert g.parse_rfc3339("") is None
    assert g.parse_rfc3339("2025-03-04") is None
