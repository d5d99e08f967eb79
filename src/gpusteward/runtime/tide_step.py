"""The tide step: pool demand history → forecast → replica plan, for the tick to act on.

Analyse (every replica): each tick adds each pool's demand to its history (``observe``); every
``plan_every_minutes`` each configured pool is forecast (the model is refitted every
``refit_hours`` and re-run in between) and planned (analysis/tide.py): ``forecast``. Nothing is
changed there. Plan (the leader): the plans become decisions (policy/scaling.py: cooldown,
pause). Act: the one ``ActionRunner`` scales through ``PoolScalingExecutor`` (runtime/
pool_executor.py) with its pre-flight, dry-run, approval, idempotency and audit; ``settle`` then
notes what came of each plan (cooldown from the last scaling, dry runs paced like real ones).
When the forecast cannot be made (no statsmodels, too little history) the pool is left as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from gpusteward.analysis.forecast import FittedModel, Forecast, ForecastUnavailable, fit, forecast
from gpusteward.analysis.tide import LowWindow, ReplicaPlan, low_load_windows, plan_replicas
from gpusteward.domain.errors import ConfigError, ExecutionError
from gpusteward.domain.models import ActionStatus, Decision, Gpu, Hold, Workload
from gpusteward.domain.ports import PoolScaler
from gpusteward.integrations.sim.pool_scaler import SimPoolScaler
from gpusteward.policy.scaling import PoolPlan, plan_scaling, pool_workload_id
from gpusteward.runtime.demand import DemandHistory, load_demand_csv, pool_demand
from gpusteward.runtime.insights_settings import ForecastSettings, PoolSettings
from gpusteward.runtime.pool_executor import PoolScalingExecutor, pool_workload
from gpusteward.runtime.runner import ActionResult
from gpusteward.store.window import WindowView

if TYPE_CHECKING:
    from gpusteward.domain.integration import Integration
    from gpusteward.runtime.config import Settings

log = logging.getLogger(__name__)


def _kubernetes(settings: Settings, pools: list[PoolSettings]) -> PoolScaler:
    """Deployments and StatefulSets, pools named ``<namespace>/deployment/<name>``, through the
    scale subresource, for a loop whose source is another system (with the kubernetes source the
    integration's own scaler is used). Imported here: the Kubernetes client is an extra."""
    from gpusteward.integrations.kubernetes.build import kube_api
    from gpusteward.integrations.kubernetes.pool_scaler import KubernetesPoolScaler

    cfg = settings.source.kubernetes
    return KubernetesPoolScaler(kube_api(cfg), conflict_retries=cfg.conflict_retries)


#: Scaler name → factory, given the settings and the pools that name it.
SCALERS: dict[str, Callable[[Settings, list[PoolSettings]], PoolScaler]] = {
    "sim": lambda _settings, pools: SimPoolScaler.of({p.name: max(1, p.min_replicas) for p in pools}),
    "kubernetes": _kubernetes,
}


@dataclass(frozen=True)
class TideOutcome:
    """What came of one pool's plan."""

    pool: str
    at: datetime
    #: steady, held, planned (a change, before the act phase), unavailable, unknown-pool; after it:
    #: scaled, dry-run, failed, skipped, cooldown, paused, awaiting-approval, rejected
    status: str
    detail: str
    plan: ReplicaPlan | None = None
    forecast: Forecast | None = None
    windows: tuple[LowWindow, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "pool": self.pool,
            "at": self.at.isoformat(),
            "status": self.status,
            "detail": self.detail,
            "plan": self.plan.to_dict() if self.plan else None,
            "windows": [w.to_dict() for w in self.windows],
        }


@dataclass
class _PoolState:
    model: FittedModel | None = None
    fitted_at: datetime | None = None
    scaled_at: datetime | None = None


#: What became of an acting scale decision, by the runner's result.
_AFTER: dict[ActionStatus, str] = {
    ActionStatus.SUCCEEDED: "scaled",
    ActionStatus.FAILED: "failed",
    ActionStatus.SKIPPED: "skipped",
}
_HELD: dict[Hold, str] = {
    Hold.WAITING: "cooldown",
    Hold.PAUSED: "paused",
    Hold.AWAITING_APPROVAL: "awaiting-approval",
    Hold.REJECTED: "rejected",
}


@dataclass
class TideStep:
    settings: ForecastSettings
    scalers: Mapping[str, PoolScaler]
    dry_run: bool = True
    history: DemandHistory = field(default_factory=DemandHistory)
    _state: dict[str, _PoolState] = field(default_factory=dict)
    _last_plan: datetime | None = None
    _demand: Mapping[str, float] = field(default_factory=dict)
    #: Planned at this tick: the plan phase turns these into decisions.
    _fresh: list[TideOutcome] = field(default_factory=list)
    #: The last plan of every pool (parking reads its forecasts and low-load windows).
    last: list[TideOutcome] = field(default_factory=list)
    #: Why a pool cannot be forecast (a missing optional dependency), logged once.
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.history.step_s = self.settings.bucket_minutes * 60
        self.history.max_days = self.settings.history_days
        self.history.directory = self.settings.history_dir
        self.history.load()
        for p in self.settings.pools:
            if p.history_csv is not None:
                table = load_demand_csv(p.history_csv, p.history_column)
                self.history.extend(p.name, table.times_s.tolist(), table.values.tolist())

    def executors(self) -> list[PoolScalingExecutor]:
        """What the runner scales through: one executor per scaler."""
        return [PoolScalingExecutor(s) for s in self.scalers.values()]

    # -- analyse: demand, forecast, plan (changes nothing) --------------------------------------
    def observe_window(
        self, view: WindowView, gpus: Mapping[str, Gpu], workloads: Iterable[Workload], now: datetime
    ) -> None:
        """Add this tick's demand of every configured pool, measured on the window, to its history."""
        pools = self.settings.pools
        members = {p.name: p.workloads for p in pools if p.workloads}
        held = list(workloads)
        demand: dict[str, float] = {}
        for measure in {p.demand for p in pools}:
            got = pool_demand(
                view, gpus, held, measure=measure, window_s=min(300.0, view.window_s), members=members
            )
            demand.update({p.name: got[p.name] for p in pools if p.demand == measure and p.name in got})
        self.observe(now, demand)

    def observe(self, now: datetime, demand: Mapping[str, float]) -> None:
        """Add this tick's demand of the configured pools to their history."""
        self._demand = demand
        for p in self.settings.pools:
            if p.name in demand:
                self.history.add(p.name, now.timestamp(), demand[p.name])

    def due(self, now: datetime) -> bool:
        every = timedelta(minutes=self.settings.plan_every_minutes)
        return self._last_plan is None or now - self._last_plan >= every

    def forecast(self, now: datetime, demand_now: Mapping[str, float] | None = None) -> list[TideOutcome]:
        """When due, forecast and plan every configured pool (one pool's failure never stops
        another); [] between plans. Reads each pool's replicas, changes nothing."""
        self._fresh = []
        if not self.due(now):
            return []
        self._last_plan = now
        demand = self._demand if demand_now is None else demand_now
        self._fresh = [self._pool(p, now, demand.get(p.name, 0.0)) for p in self.settings.pools]
        self.last = list(self._fresh)
        return self._fresh

    def _forecast(self, p: PoolSettings, now: datetime) -> Forecast:
        st = self._state.setdefault(p.name, _PoolState())
        s = self.settings
        horizon = max(1, round(s.horizon_hours * 60 / s.bucket_minutes))
        refit = (
            st.model is None or st.fitted_at is None or now - st.fitted_at >= timedelta(hours=s.refit_hours)
        )
        if refit:
            self.history.prune(now.timestamp(), p.name)
        # Up to the bucket under way (a bucket still filling would read as a drop in demand).
        series = self.history.series(p.name, until_s=now.timestamp())
        if st.model is not None and not refit:
            try:
                return forecast(st.model, series, horizon, level=s.band_level, simulations=s.simulations)
            except ValueError:
                pass  # the series no longer matches the model: refit below
        st.model, st.fitted_at = fit(series, seasonality=s.seasonality, horizon_steps=horizon), now
        return forecast(st.model, series, horizon, level=s.band_level, simulations=s.simulations)

    def _peak(self, pool: str, fc: Forecast) -> float:
        """What "low" is measured against: the forecast's peak or the last week's (95th percentile)."""
        week = self.history.series(pool).values[-round(7 * 86_400 / self.history.step_s) :]
        seen = float(np.nanpercentile(week, 95)) if np.isfinite(week).any() else 0.0
        return max(float(fc.upper.max()), seen)

    def _pool(self, p: PoolSettings, now: datetime, demand_now: float) -> TideOutcome:
        scaler = self.scalers.get(p.scaler)
        try:
            current = scaler.replicas(p.name) if scaler is not None else None
        except ExecutionError as e:
            return TideOutcome(p.name, now, "unavailable", f"cannot read the replicas of {p.name}: {e}")
        if scaler is None or current is None:
            where = f"scaler {p.scaler!r}" if scaler is not None else f"no scaler named {p.scaler!r}"
            return TideOutcome(p.name, now, "unknown-pool", f"{where} does not know pool {p.name!r}")
        try:
            fc = self._forecast(p, now)
        except ForecastUnavailable as e:
            return TideOutcome(p.name, now, "unavailable", f"{e}; {p.name} stays at {current} replicas")
        limits = p.limits(self.settings.plan_every_minutes)
        plan = plan_replicas(p.name, fc, now.timestamp(), current, limits, demand_now=demand_now)
        low = self.settings.low_load_share * self._peak(p.name, fc)
        windows = tuple(low_load_windows(fc, low, min_minutes=self.settings.plan_every_minutes))
        status = "planned" if plan.changes else "held" if plan.held else "steady"
        return TideOutcome(p.name, now, status, plan.reason, plan, fc, windows)

    # -- plan (the leader): decisions, and the workloads they name ----------------------------------
    def decisions(self, now: datetime, paused: bool) -> list[Decision]:
        plans = [
            PoolPlan(o.pool, o.plan.current, o.plan.target, o.plan.reason, o.plan.held or "")
            for o in self._fresh
            if o.plan is not None and o.status in ("planned", "held")
        ]
        scaled_at = {pool: st.scaled_at for pool, st in self._state.items() if st.scaled_at is not None}
        cooldown = timedelta(minutes=self.settings.cooldown_minutes)
        return plan_scaling(plans, now, scaled_at=scaled_at, cooldown=cooldown, paused=paused)

    def workloads(self) -> dict[str, Workload]:
        """The pools planned this tick, as the workloads their decisions name."""
        scaler = {p.name: p.scaler for p in self.settings.pools}
        out = {}
        for o in self._fresh:
            s = self.scalers.get(scaler.get(o.pool, ""))
            if s is not None:
                out[pool_workload_id(o.pool)] = pool_workload(o.pool, s.name)
        return out

    # -- after the act phase ----------------------------------------------------------------------
    def settle(self, now: datetime, decisions: Sequence[Decision], results: Sequence[ActionResult]) -> None:
        """Note what came of this tick's plans; a scaling (or a dry run's would-be one) starts the
        pool's cooldown. Writes the demand history's finished buckets."""
        if not self._fresh:
            return
        by_pool = {d.workload_id: d for d in decisions}
        done = {r.decision.workload_id: r for r in results}
        out = []
        for o in self._fresh:
            wid = pool_workload_id(o.pool)
            d, r = by_pool.get(wid), done.get(wid)
            if o.status != "planned" or d is None:
                out.append(o)
            elif r is not None:
                status = (
                    "dry-run" if self.dry_run and r.status is ActionStatus.SKIPPED else _AFTER.get(r.status)
                )
                if r.status is ActionStatus.SUCCEEDED or status == "dry-run":
                    self._state.setdefault(o.pool, _PoolState()).scaled_at = now
                out.append(_with(o, status or r.status.value, f"{d.reason}; {r.detail}"))
            elif d.hold is not Hold.NONE:
                out.append(_with(o, _HELD.get(d.hold, d.hold.value), d.reason))
            else:
                out.append(_with(o, "unchanged", f"{d.reason}; this step was already taken"))
            if out[-1].status == "unavailable" and out[-1].detail not in self.notes:
                self.notes.append(out[-1].detail)  # a missing extra: said once
                log.warning("tide %s: %s", o.pool, out[-1].detail)
            elif out[-1].status not in ("steady", "held", "unavailable"):
                log.info("tide %s: %s: %s", o.pool, out[-1].status, out[-1].detail)
        self._fresh, self.last = out, out
        try:
            self.history.flush(now.timestamp())
        except OSError as e:
            log.warning("demand history not written to %s: %s", self.settings.history_dir, e)


def _with(o: TideOutcome, status: str, detail: str) -> TideOutcome:
    return TideOutcome(o.pool, o.at, status, detail, o.plan, o.forecast, o.windows)


def build_scalers(settings: Settings, integration: Integration | None = None) -> dict[str, PoolScaler]:
    """One scaler per name the pools use: the integration's own when it is the one named (built
    with its one client), else from ``SCALERS``. An unknown name is a config error."""
    by_name: dict[str, list[PoolSettings]] = {}
    for p in settings.forecast.pools:
        by_name.setdefault(p.scaler, []).append(p)
    out: dict[str, PoolScaler] = {}
    for name, pools in by_name.items():
        if integration is not None and integration.name == name and integration.pool_scaler is not None:
            out[name] = integration.pool_scaler
            continue
        factory = SCALERS.get(name)
        if factory is None:
            raise ConfigError(f"forecast.pools: unknown scaler {name!r}; known: {', '.join(sorted(SCALERS))}")
        out[name] = factory(settings, pools)
    return out


def build_tide(settings: Settings, integration: Integration | None = None) -> TideStep | None:
    """The tide step when forecasting has pools to scale, else None."""
    if not (settings.forecast.enabled and settings.forecast.pools):
        return None
    return TideStep(settings.forecast, build_scalers(settings, integration), dry_run=settings.dry_run)
