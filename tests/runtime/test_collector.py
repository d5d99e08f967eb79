"""The cycle collector is held off for the tick's length, and only for it."""

from __future__ import annotations

import gc

import pytest

from gpusteward.domain.errors import SourceError
from gpusteward.runtime import collector


class _Spy:
    """Wraps the steward's source: records whether the collector ran automatically mid-tick."""

    def __init__(self, inner: object, fail: bool = False) -> None:
        self.inner, self.fail, self.enabled = inner, fail, []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def observe(self, now):  # type: ignore[no-untyped-def]
        self.enabled.append(gc.isenabled())
        if self.fail:
            raise SourceError("down")
        return self.inner.observe(now)  # type: ignore[attr-defined]


def test_tick_holds_the_collector_off_and_turns_it_back_on(make_steward):
    steward, _, clock, _ = make_steward()
    steward.source = spy = _Spy(steward.source)
    assert gc.isenabled()
    steward.tick()
    clock.advance(60)
    spy.fail = True  # a tick whose source fails still ends with the collector on
    steward.tick()
    assert spy.enabled == [False, False]
    assert gc.isenabled()


def _fail_inside() -> None:
    with collector.held_off():
        assert not gc.isenabled()
        raise RuntimeError("boom")


def test_a_tick_that_raises_leaves_the_collector_on():
    with pytest.raises(RuntimeError, match="boom"):
        _fail_inside()
    assert gc.isenabled()


def test_a_caller_that_turned_it_off_keeps_it_off():
    gc.disable()
    try:
        with collector.held_off():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_settled_freezes_what_start_up_made_and_gives_it_back():
    assert gc.get_freeze_count() == 0
    made_at_start_up = [[i] for i in range(1000)]
    with collector.settled():
        assert gc.get_freeze_count() >= len(made_at_start_up)
    assert gc.get_freeze_count() == 0


def test_settled_unfreezes_when_the_loop_fails():
    with pytest.raises(RuntimeError, match="tick"), collector.settled():
        raise RuntimeError("tick")
    assert gc.get_freeze_count() == 0
