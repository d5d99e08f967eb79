"""The tide step drives a PoolScaler from a forecast: down in the night's trough, up before the
morning (pre-warm), never below the minimum, dry-run aware, paused, audited, contained. Its
scalings are decisions carried out by the ``ActionRunner``, as in the tick (``step`` below)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from gpusteward.domain.models import ActionStatus
from gpusteward.integrations.sim import SimClock
from gpusteward.integrations.sim.pool_scaler import SimPoolScaler
from gpusteward.notify import MemoryNotifier
from gpusteward.policy.approval import hold_for_approval
from gpusteward.policy.scaling import scale_replicas
from gpusteward.policy.settings import ApprovalSettings
from gpusteward.runtime.demand import DemandHistory
from gpusteward.runtime.insights_settings import ForecastSettings
from gpusteward.runtime.runner import ActionRunner
from gpusteward.runtime.tide_step import TideOutcome, TideStep, build_scalers
from gpusteward.store.db import StateStore

pytest.importorskip("statsmodels")

DAY0 = datetime(2026, 2, 2, tzinfo=UTC)  # a Monday
STEP = 900.0


def tidal_demand(t_s: np.ndarray) -> np.ndarray:
    """An inference service: 2 GPUs of demand at night, 10 from 08:00 to 20:00."""
    hour = (t_s % 86_400) / 3600
    day = (hour >= 8) & (hour < 20)
    return np.where(day, 10.0, 2.0)


def settings(**over: object) -> ForecastSettings:
    pool = {
        "name": "web",
        "gpus_per_replica": 1,
        "min_replicas": 2,
        "max_replicas": 16,
        "slo_headroom": 0.2,
        "prewarm_minutes": 30,
    }
    pool.update(over.pop("pool", {}))  # type: ignore[arg-type]
    return ForecastSettings(enabled=True, simulations=200, pools=[pool], **over)  # type: ignore[arg-type]


class Tide:
    """A tide step with the runner the tick gives it: ``step`` is its part of one tick."""

    def __init__(self, s: ForecastSettings, store: StateStore, *, dry_run: bool, replicas: int) -> None:
        self.scaler = SimPoolScaler.of({"web": replicas})
        self.step_ = TideStep(s, {"sim": self.scaler}, dry_run=dry_run, history=DemandHistory())
        self.clock = SimClock(DAY0)
        self.approval = ApprovalSettings(min_level="off")
        self.runner = ActionRunner(
            store,
            self.step_.executors(),
            MemoryNotifier(),
            self.clock,
            dry_run=dry_run,
            approval=self.approval,
        )

    @property
    def history(self) -> DemandHistory:
        return self.step_.history

    def observe(self, now: datetime, demand: dict[str, float]) -> None:
        self.step_.observe(now, demand)

    def step(self, now: datetime, demand: dict[str, float] | None = None) -> list[TideOutcome]:
        """Analyse (forecast, plan), plan (decisions), act (the runner), settle: as the tick does."""
        self.clock.advance((now - self.clock.now()).total_seconds())
        tide, store = self.step_, self.runner.store
        tide.forecast(now, demand or {})
        decisions = tide.decisions(now, store.is_paused())
        decisions = hold_for_approval(decisions, None, now, self.approval)
        results = self.runner.run(decisions, tide.workloads())
        store.record_decisions(decisions)
        tide.settle(now, decisions, results)
        return tide.last


def step_with_history(s: ForecastSettings, store: StateStore, *, dry_run: bool, replicas: int = 14):
    tide = Tide(s, store, dry_run=dry_run, replicas=replicas)
    rng = np.random.default_rng(0)
    t = DAY0.timestamp() + STEP * np.arange(9 * 96)  # nine days of history
    tide.history.extend("web", t.tolist(), (tidal_demand(t) + rng.normal(0, 0.2, t.size)).tolist())
    return tide, tide.scaler


def scalings(store: StateStore) -> list[tuple[str, tuple[int, int] | None, ActionStatus, bool]]:
    """Every scaling action: its step, the replicas before and after, its status, dry-run."""
    return [
        (a.step, scale_replicas(a.idempotency_key), a.status, a.dry_run)
        for a in sorted(store.actions(limit=100), key=lambda a: a.id)
    ]


def feed(tide: Tide, until: datetime) -> None:
    """Ticks of the day so far: the demand the loop would have observed every 5 minutes."""
    t = DAY0 + timedelta(days=9)
    while t < until:
        tide.observe(t, {"web": float(tidal_demand(np.asarray([t.timestamp()]))[0])})
        t += timedelta(minutes=5)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    s.create_schema()
    return s


def test_scales_down_in_the_trough_and_prewarms_before_the_peak(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(), store, dry_run=False)
    night = DAY0 + timedelta(days=9, hours=1)
    feed(tide, night)
    (o,) = tide.step(night, {"web": 2.0})
    assert o.status == "scaled", o.detail
    assert o.forecast is not None
    assert o.forecast.seasonality == "daily"
    assert scaler.pools["web"] == 3  # 2 GPUs of demand (upper band ~2.3) at 80 %: 3 replicas
    assert o.windows
    assert o.windows[0].start_s <= night.timestamp() + 900
    # The plan says when it must add replicas again: at the latest 30 min before 08:00 (the band
    # widens with the horizon, so possibly earlier), and not within the look-ahead it covered.
    assert o.plan is not None
    assert o.plan.next_rise_s is not None
    morning = (DAY0 + timedelta(days=9, hours=7, minutes=30)).timestamp()
    assert night.timestamp() + 45 * 60 <= o.plan.next_rise_s <= morning
    # 07:20: the peak is inside the look-ahead (pre-warm 30 + replan 15 min): scale up before it.
    feed(tide, DAY0 + timedelta(days=9, hours=7, minutes=20))
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=7, minutes=20), {"web": 2.0})
    assert o.status == "scaled"
    assert "pre-warm" in o.detail
    assert scaler.pools["web"] == 13  # ~10.3 GPUs upper band / 0.8
    assert scalings(store) == [
        ("scale-down", (14, 3), ActionStatus.SUCCEEDED, False),
        ("scale-up", (3, 13), ActionStatus.SUCCEEDED, False),
    ]
    assert [r.event for r in store.audit_log()].count("action.succeeded") == 2


def test_dry_run_plans_and_audits_but_never_scales(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(), store, dry_run=True)
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=1))
    assert o.status == "dry-run"
    assert "dry-run: would scale-down" in o.detail
    assert scaler.pools["web"] == 14
    assert scaler.calls == []
    assert scalings(store) == [("scale-down", (14, 3), ActionStatus.SKIPPED, True)]
    assert [r.event for r in store.audit_log()] == ["action.dry_run"]
    # A dry run paces its plans as the real one would: the cooldown holds the next one.
    assert tide.step(DAY0 + timedelta(days=9, hours=1, minutes=15))[0].status in ("steady", "cooldown")


def test_never_below_the_minimum(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(pool={"min_replicas": 6}), store, dry_run=False)
    tide.step(DAY0 + timedelta(days=9, hours=1))
    assert scaler.pools["web"] == 6


def test_a_wide_band_holds_the_scale_down(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(), store, dry_run=False)
    rng = np.random.default_rng(1)
    t = DAY0.timestamp() + STEP * np.arange(9 * 96)
    tide.step_.history = DemandHistory()
    noisy = np.clip(tidal_demand(t) + rng.normal(0, 2.5, t.size), 0, None)  # demand that jumps a lot
    tide.history.extend("web", t.tolist(), noisy.tolist())
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=1))
    assert o.status == "held"
    assert o.plan is not None
    assert o.plan.held == "uncertain"
    assert scaler.pools["web"] == 14
    assert store.actions() == []
    (held,) = store.decisions_for("pool:web")
    assert held.reason == o.plan.reason


def test_paused_and_cooldown_keep_the_pool_as_it_is(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(), store, dry_run=False)
    store.set_paused(True, by="ops", reason="incident", at=DAY0)
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=1))
    assert o.status == "paused"
    assert scaler.calls == []
    assert store.actions() == []
    store.set_paused(False, by="ops", reason="", at=DAY0)
    assert tide.step(DAY0 + timedelta(days=9, hours=1, minutes=15))[0].status == "scaled"
    # Within the cooldown (30 min) the morning scale-up waits.
    assert tide.step(DAY0 + timedelta(days=9, hours=1, minutes=30))[0].status in ("steady", "cooldown")


def test_a_failing_scaler_is_recorded_and_contained(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(), store, dry_run=False)
    scaler.fail.add("web")
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=1))
    assert o.status == "failed"
    assert "scaling web failed" in o.detail
    assert scalings(store) == [("scale-down", (14, 3), ActionStatus.FAILED, False)]
    assert store.audit_log()[-1].event == "action.failed"
    # Not in cooldown after a failure: the next plan tries again.
    scaler.fail.clear()
    assert tide.step(DAY0 + timedelta(days=9, hours=1, minutes=15))[0].status == "scaled"


def test_stale_history_changes_nothing(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(), store, dry_run=False)
    # Nothing observed for seven hours: the forecast no longer covers now.
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=7))
    assert o.status == "held"
    assert o.plan is not None
    assert o.plan.held == "no-forecast"
    assert scaler.calls == []


def test_unknown_pool_and_missing_statsmodels_leave_things_alone(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tide, scaler = step_with_history(settings(), store, dry_run=False)
    tide.step_.scalers = {"sim": SimPoolScaler.of({"other": 3})}
    assert tide.step(DAY0 + timedelta(days=9))[0].status == "unknown-pool"
    tide.step_.scalers = {"sim": scaler}
    monkeypatch.setitem(sys.modules, "statsmodels.tsa.holtwinters", None)
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=1))
    assert o.status == "unavailable"
    assert "gpusteward[forecast]" in o.detail
    assert scaler.calls == []


def test_history_survives_a_restart(tmp_path: Path) -> None:
    h = DemandHistory(step_s=STEP, directory=tmp_path / "demand")
    t0 = DAY0.timestamp()
    for k in range(12):  # three buckets of four samples
        h.add("ns/web", t0 + k * 225, float(k))
    assert h.flush(t0 + 3 * STEP) == 3
    assert h.flush(t0 + 3 * STEP) == 0  # written once
    again = DemandHistory(step_s=STEP, directory=tmp_path / "demand")
    again.load()
    s = again.series("ns/web")
    assert list(s.values) == [1.5, 5.5, 9.5]
    assert s.start_s == t0
    assert (tmp_path / "demand" / "pool-ns-web.csv").read_text().startswith("time,pool,demand")


def test_scalers_are_built_by_name(tmp_path: Path) -> None:
    from gpusteward.domain.errors import ConfigError
    from gpusteward.runtime.config import load_settings

    s = load_settings(None, forecast={"enabled": True, "pools": [{"name": "web", "min_replicas": 2}]})
    scalers = build_scalers(s)
    assert scalers["sim"].replicas("web") == 2
    bad = load_settings(None, forecast={"pools": [{"name": "web", "scaler": "nope"}]})
    with pytest.raises(ConfigError, match="unknown scaler 'nope'"):
        build_scalers(bad)
