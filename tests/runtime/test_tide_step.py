"""The tide step drives a PoolScaler from a forecast: down in the night's trough, up before the
morning (pre-warm), never below the minimum, dry-run aware, paused, audited, contained."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from gpusteward.integrations.sim.pool_scaler import SimPoolScaler
from gpusteward.runtime.demand import DemandHistory
from gpusteward.runtime.insights_settings import ForecastSettings
from gpusteward.runtime.tide_step import TideStep, build_scalers
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


def step_with_history(s: ForecastSettings, store: StateStore | None, *, dry_run: bool, replicas: int = 14):
    scaler = SimPoolScaler.of({"web": replicas})
    tide = TideStep(s, {"sim": scaler}, store, dry_run=dry_run, history=DemandHistory())
    rng = np.random.default_rng(0)
    t = DAY0.timestamp() + STEP * np.arange(9 * 96)  # nine days of history
    tide.history.extend("web", t.tolist(), (tidal_demand(t) + rng.normal(0, 0.2, t.size)).tolist())
    return tide, scaler


def feed(tide: TideStep, until: datetime) -> None:
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
    events = [
        (a.event, a.payload["previous_replicas"], a.payload["target_replicas"]) for a in store.audit_log()
    ]
    assert events == [("tide-scale", 14, 3), ("tide-scale", 3, 13)]


def test_dry_run_plans_and_audits_but_never_scales(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(), store, dry_run=True)
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=1))
    assert o.status == "planned"
    assert o.detail.startswith("[dry-run]")
    assert scaler.pools["web"] == 14
    assert scaler.calls == []
    (rec,) = store.audit_log()
    assert rec.event == "tide-plan"
    assert rec.payload["dry_run"] is True


def test_never_below_the_minimum(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(pool={"min_replicas": 6}), store, dry_run=False)
    tide.step(DAY0 + timedelta(days=9, hours=1))
    assert scaler.pools["web"] == 6


def test_a_wide_band_holds_the_scale_down(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(), None, dry_run=False)
    rng = np.random.default_rng(1)
    t = DAY0.timestamp() + STEP * np.arange(9 * 96)
    tide.history = DemandHistory()
    noisy = np.clip(tidal_demand(t) + rng.normal(0, 2.5, t.size), 0, None)  # demand that jumps a lot
    tide.history.extend("web", t.tolist(), noisy.tolist())
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=1))
    assert o.status == "held"
    assert o.plan is not None
    assert o.plan.held == "uncertain"
    assert scaler.pools["web"] == 14


def test_paused_and_cooldown_keep_the_pool_as_it_is(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(), store, dry_run=False)
    store.set_paused(True, by="ops", reason="incident", at=DAY0)
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=1))
    assert o.status == "paused"
    assert scaler.calls == []
    store.set_paused(False, by="ops", reason="", at=DAY0)
    assert tide.step(DAY0 + timedelta(days=9, hours=1, minutes=15))[0].status == "scaled"
    # Within the cooldown (30 min) the morning scale-up waits.
    assert tide.step(DAY0 + timedelta(days=9, hours=1, minutes=30))[0].status in ("steady", "cooldown")


def test_a_failing_scaler_is_recorded_and_contained(store: StateStore) -> None:
    tide, scaler = step_with_history(settings(), store, dry_run=False)
    scaler.fail.add("web")
    (o,) = tide.step(DAY0 + timedelta(days=9, hours=1))
    assert o.status == "failed"
    assert "scaling failed" in o.detail
    assert store.audit_log()[-1].event == "tide-scale-failed"


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
    tide.scalers = {"sim": SimPoolScaler.of({"other": 3})}
    assert tide.step(DAY0 + timedelta(days=9))[0].status == "unknown-pool"
    tide.scalers = {"sim": scaler}
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
