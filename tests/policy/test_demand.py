"""Demand in the policy (issue 16): jobs waiting for a GPU model make the ladder for idle holders
of that model move faster, within bounds, never skipping a step or a guard."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.policy.test_decide import T0, finding, workload

from gpusteward.domain.models import PROTECT_KEY, Gpu, Hold, LadderState, Workload
from gpusteward.domain.queue import PendingJob, Queue
from gpusteward.policy import PolicyInput, PolicySettings, decide, ladder
from gpusteward.policy.demand import factor
from gpusteward.policy.scopes import scope_for
from gpusteward.policy.settings import DemandSettings

H100 = "NVIDIA H100 80GB HBM3"
GPUS = {f"GPU-{i}": Gpu(f"GPU-{i}", "node-0", i, H100, 81920.0, 2.0) for i in range(4)}
GPUS |= {f"A-{i}": Gpu(f"A-{i}", "node-1", i, "NVIDIA A100-SXM4-80GB", 81920.0, 2.0) for i in range(4)}


def pending(gpus_each: Sequence[int], *, model: str = "h100", reason: str = "Resources") -> Queue:
    jobs = tuple(
        PendingJob(f"j{i}", "gpu", n, T0 - timedelta(hours=1), reason, model) for i, n in enumerate(gpus_each)
    )
    return Queue(T0, jobs)


def climb(
    queue: Queue | None,
    policy: PolicySettings | None = None,
    *,
    w: Workload | None = None,
    minutes: float = 180,
) -> list[tuple[str, float]]:
    """Tick every 10 s from the first sighting: (step, minutes since warn-1) for each step taken."""
    w = w or workload("w", ["GPU-0"])
    policy = policy or PolicySettings()
    states: dict[str, LadderState] = {}
    taken: list[tuple[str, float]] = []
    now = T0
    while now <= T0 + timedelta(minutes=minutes):
        inp = PolicyInput(
            now, [finding("w", w.gpu_uuids, at=now)], {"w": w}, states, frozenset(), GPUS, queue=queue
        )
        result = decide(inp, policy)
        states = {**states, **result.states}
        taken += [(d.step, (now - T0).total_seconds() / 60) for d in result.decisions if d.acts]
        now += timedelta(seconds=10)
    return taken


def expected(f: float, s: PolicySettings, taken: dict[str, float]) -> list[tuple[str, float]]:
    """When each step is due at pace ``f``, counted like the ladder does from when the earlier steps
    were ``taken`` (a tick late at most): a late second warning still gets its full notice."""
    warn, stop, force = (
        s.ladder.warn_again_after_minutes * f,
        s.ladder.graceful_stop_after_minutes * f,
        s.ladder.force_after_minutes * f,
    )
    return [
        ("warn-1", 0.0),
        ("warn-2", warn),
        ("graceful-stop", max(stop, taken.get("warn-2", 0.0) + stop - warn)),
        ("force", taken.get("graceful-stop", 0.0) + force),
    ]


@pytest.mark.parametrize(
    ("waited", "want"),
    [(None, 1.0), (0, 1.0), (1, 0.90625), (4, 0.625), (7, 0.34375), (8, 0.25), (9, 0.25), (10_000, 0.25)],
)
def test_the_pace_falls_linearly_with_gpus_waited_for_and_stops_at_its_bound(
    waited: int | None, want: float
) -> None:
    assert factor(waited, DemandSettings()) == pytest.approx(want)


def test_nobody_waiting_may_slow_the_ladder_but_an_unread_queue_never_does() -> None:
    slow = DemandSettings(max_factor=2.0)
    assert factor(0, slow) == 2.0
    assert factor(None, slow) == 1.0


@pytest.mark.parametrize(
    ("gpus_each", "f"),
    [([], 1.0), ([1], 0.90625), ([2, 2], 0.625), ([8], 0.25), ([4, 4, 8, 64], 0.25)],
)
def test_the_ladder_speeds_up_under_demand_and_never_beyond_its_bound(gpus_each: list[int], f: float) -> None:
    policy = PolicySettings()
    steps = climb(pending(gpus_each), policy)
    # Every step, in order, each within one 10-second tick of its scaled time.
    want_steps = expected(f, policy, dict(steps))
    assert [s for s, _ in steps] == [s for s, _ in want_steps]
    for (_, got), (_, want) in zip(steps, want_steps, strict=True):
        assert want - 1e-9 <= got < want + 10 / 60  # the float minutes, not the timing, differ by 1e-15
    floor = policy.ladder.graceful_stop_after_minutes * policy.demand.min_factor
    assert dict(steps)["graceful-stop"] >= floor


def test_no_queue_keeps_todays_timings() -> None:
    today = [("warn-1", 0.0), ("warn-2", 15.0), ("graceful-stop", 30.0), ("force", 40.0)]
    assert climb(None) == today
    assert climb(Queue(T0)) == today  # read and empty: max_factor 1 by default
    assert climb(pending([8], reason="Priority")) == today  # waits its turn, not for GPUs
    assert climb(pending([8], model="a100")) == today  # waits for another model
    slow = PolicySettings(demand=DemandSettings(max_factor=2.0))
    assert dict(climb(Queue(T0), slow))["graceful-stop"] == 60.0
    assert dict(climb(None, slow))["graceful-stop"] == 30.0


def test_demand_never_jumps_the_startup_grace() -> None:
    fresh = workload("w", ["GPU-0"], started_at=T0)
    steps = climb(pending([64]), w=fresh)
    # The ladder would stop at 7.5 min; the 15 min startup grace holds every step until it ends.
    assert steps[0] == ("warn-1", 15.0)
    assert dict(steps)["graceful-stop"] >= 15.0 + 7.5
    assert [s for s, _ in steps] == ["warn-1", "warn-2", "graceful-stop", "force"]


def test_protection_still_holds_under_demand() -> None:
    safe = workload("w", ["GPU-0"], labels={PROTECT_KEY: "true"})
    assert [s for s, _ in climb(pending([64]), w=safe)] == ["warn-1", "warn-2"]


def test_a_slowed_scope_is_not_sped_up_by_demand() -> None:
    w = workload("w", ["GPU-0"])
    scope = scope_for(w, GPUS, PolicySettings(), slowed={"default": 2.0}, queue=pending([64]))
    assert scope.timings.graceful_stop_after_minutes == 60.0


def test_the_reason_names_the_waiting_jobs_and_the_time() -> None:
    w = workload("w", ["GPU-0"])
    warned = T0 - timedelta(minutes=2)
    state = LadderState("w", w.incarnation, "idle-gpu", warned, warned, "warn-1", warned, warned)
    inp = PolicyInput(T0, [finding("w", ["GPU-0"])], {"w": w}, {"w": state}, frozenset(), GPUS)
    waiting = decide(replace(inp, queue=pending([4] * 12)), PolicySettings())
    reason = waiting.decisions[0].reason
    assert waiting.decisions[0].hold is Hold.WAITING
    assert "12 jobs are waiting for 48 free H100 80GB HBM3 GPUs, so the ladder moves 4x faster" in reason
    # Warned at 08:58, the second warning after 15 x 0.25 min, the stop after 30 x 0.25.
    assert "Next: second warning (warn-2) in 2 min, at 09:02 UTC." in reason
    assert "your idle H100 80GB HBM3 will be reclaimed in 6 min, at 09:06 UTC." in reason
    plain = decide(inp, PolicySettings()).decisions[0].reason
    assert "waiting" not in plain
    assert "second warning (warn-2) in 13 min, at 09:13 UTC." in plain


def test_the_first_warning_says_when_the_stop_comes_under_demand() -> None:
    w = workload("w", ["GPU-0"])
    inp = PolicyInput(
        T0, [finding("w", ["GPU-0"])], {"w": w}, {}, frozenset(), GPUS, queue=pending([1], model="")
    )
    d = decide(inp, PolicySettings()).decisions[0]
    assert d.step == "warn-1"
    assert "1 job is waiting for 1 free H100 80GB HBM3 GPU" in d.reason
    assert "will be reclaimed in 28 min, at 09:28 UTC" in d.reason  # 30 x 0.90625 = 27.2 min


def _times(waited: int, demand: DemandSettings) -> list[datetime]:
    w = workload("w", ["GPU-0"])
    q = pending([waited]) if waited else Queue(T0)
    scope = scope_for(w, GPUS, PolicySettings(demand=demand), queue=q)
    state = ladder.start("w", w.incarnation, "idle-gpu", T0)
    return [at for _, at in ladder.schedule(state, scope.timings, T0, advice=False, max_level=scope.cap)]


@settings(max_examples=60, deadline=None)
@given(
    a=st.integers(0, 200),
    b=st.integers(0, 200),
    lo=st.floats(0.05, 1.0),
    hi=st.floats(1.0, 5.0),
    full=st.integers(1, 64),
)
def test_step_times_are_monotone_in_demand_and_bounded(
    a: int, b: int, lo: float, hi: float, full: int
) -> None:
    demand = DemandSettings(min_factor=lo, max_factor=hi, full_at_gpus=full)
    fewer, more = sorted((a, b))
    t_fewer, t_more = _times(fewer, demand), _times(more, demand)
    fastest = _times(10**6, demand)
    slowest = _times(0, demand)
    assert len(t_fewer) == len(t_more) == 4  # no step is ever skipped
    for x, y, fast, slow in zip(t_fewer, t_more, fastest, slowest, strict=True):
        assert fast <= y <= x <= slow
    base = PolicySettings().ladder
    stop = t_more[2] - T0
    assert stop >= timedelta(minutes=base.graceful_stop_after_minutes * lo) - timedelta(microseconds=1)
    assert stop <= timedelta(minutes=base.graceful_stop_after_minutes * hi) + timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("cls", "paced"), [("batch", True), ("interactive", True), ("service", False), ("unknown", False)]
)
def test_only_the_paced_classes_move_faster(cls: str, paced: bool) -> None:
    """A service's idle spell ends when its traffic returns, whatever waits in the queue."""
    w = workload("w", ["GPU-0"], labels={"gpusteward.io/class": cls})
    stop = dict(climb(pending([64]), w=w))["graceful-stop"]
    # 7.5 min at the 0.25 bound, taken on the first 10 s tick after it; 30 at the normal pace.
    assert (stop < 8) if paced else (stop == 30.0)
    everyone = PolicySettings(demand=DemandSettings(classes=["service", "unknown", "batch", "interactive"]))
    assert dict(climb(pending([64]), everyone, w=w))["graceful-stop"] < 8
