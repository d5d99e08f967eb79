"""A wall-clock step (NTP) must not fire a ladder step early: within a process, ladder timing
follows the monotonic clock. Tested with an injected clock whose wall time jumps forward."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpusteward.integrations.sim import DEFAULT_START, SimClock
from gpusteward.integrations.sim.behaviours import Behaviour


class SteppedClock:
    """A simulated clock whose wall time can step without the monotonic time moving."""

    def __init__(self, start: datetime) -> None:
        self.sim = SimClock(start)
        self.offset = timedelta()

    def now(self) -> datetime:
        return self.sim.now() + self.offset

    def monotonic(self) -> float:
        return self.sim.monotonic()

    def sleep(self, seconds: float) -> None:
        self.sim.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.sim.advance(seconds)

    def step(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


ZOMBIE_ONLY = """
rules:
  - name: zombie
    kind: zombie
    when: mean(gpu_util_pct, 30m) < 5 and last(mem_used_mib) > 1024
"""


def ladder_in_monotonic_minutes(make_steward, settings_for, tmp_path, *, guard: bool) -> dict[str, float]:
    ladder = {"warn_again_after_minutes": 3, "graceful_stop_after_minutes": 6}
    clock = SteppedClock(DEFAULT_START)
    # Only the 30-minute zombie rule: the 5-minute gap the step leaves in the window keeps its
    # coverage above 80 %, so the ladder keeps being judged across the step.
    pack = tmp_path / "zombie.yaml"
    pack.write_text(ZOMBIE_ONLY)
    settings = settings_for(
        policy={"ladder": ladder},
        rules={"use_default_pack": False, "files": [str(pack)]},
        store={"url": f"sqlite:///{tmp_path / f'{guard}.db'}"},
    )
    steward, integration, _, _ = make_steward(settings, clock=clock)
    steward.guard_clock_jumps = guard
    (zombie,) = {
        t.workload_id
        for t in integration.ground_truth.truths()
        if t.behaviour is Behaviour.ZOMBIE and not t.protected
    }
    taken: dict[str, float] = {}
    for _ in range(90):
        report = steward.tick()
        for a in report.actions:
            if a.decision.workload_id == zombie:
                taken.setdefault(a.decision.step, clock.monotonic() / 60)
                if a.decision.step == "warn-1":
                    clock.step(5 * 60)  # NTP steps the wall clock 5 minutes forward
        clock.advance(60)
        if "graceful-stop" in taken:
            break
    return {step: at - taken["warn-1"] for step, at in taken.items()}


def test_a_forward_step_does_not_bring_the_stop_forward(make_steward, settings_for, tmp_path):
    guarded = ladder_in_monotonic_minutes(make_steward, settings_for, tmp_path, guard=True)
    assert guarded == {"warn-1": 0, "warn-2": 3, "graceful-stop": 6}  # on schedule, in monotonic time
    # The same run on wall time alone: the step jumps the ladder ahead (what the guard prevents).
    naive = ladder_in_monotonic_minutes(make_steward, settings_for, tmp_path, guard=False)
    assert naive["graceful-stop"] < 6


def test_the_step_is_audited(make_steward, settings_for, run_for):
    clock = SteppedClock(DEFAULT_START)
    steward, _, _, _ = make_steward(settings_for(), clock=clock)
    steward.guard_clock_jumps = True
    run_for(steward, clock, minutes=10)
    clock.step(-120)  # and backwards
    run_for(steward, clock, minutes=2)
    (step,) = [r for r in steward.store.audit_log(limit=1000) if r.event == "clock.step"]
    assert step.payload["seconds"] == -120
