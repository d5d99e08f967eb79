from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.ports import Clock
from gpusteward.integrations.sim import SimClock

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def test_is_a_clock() -> None:
    assert isinstance(SimClock(T0), Clock)


def test_sleep_and_advance_move_both_times() -> None:
    clock = SimClock(T0)
    clock.sleep(30)
    clock.advance(90.5)
    assert clock.now() == T0 + timedelta(seconds=120.5)
    assert clock.monotonic() == pytest.approx(120.5)


def test_set_back_keeps_monotonic_time() -> None:
    clock = SimClock(T0)
    clock.set(T0 + timedelta(hours=1))
    assert clock.monotonic() == pytest.approx(3600)
    clock.set(T0)
    assert clock.now() == T0
    assert clock.monotonic() == pytest.approx(3600)


def test_rejects_naive_times_and_negative_steps() -> None:
    with pytest.raises(ValueError, match="timezone"):
        SimClock(datetime(2026, 1, 5))
    clock = SimClock(T0)
    with pytest.raises(ValueError, match="timezone"):
        clock.set(datetime(2026, 1, 5))
    with pytest.raises(ValueError, match="negative"):
        clock.sleep(-1)
