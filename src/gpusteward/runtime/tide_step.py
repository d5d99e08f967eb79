"""The tide step: pool demand history → forecast → replica plan → ``PoolScaler``, within limits.

Every tick adds each pool's demand to its history; every ``plan_every_minutes`` each configured
pool is forecast (the model is refitted every ``refit_hours`` and re-run in between), planned
(analysis/tide.py) and, when the plan changes the replicas, scaled through its ``PoolScaler``.
Dry-run (the default) plans and audits without scaling. Nothing is scaled while gpusteward is
paused, within ``cooldown_minutes`` of the pool's last scaling, or when the forecast cannot be
made (no statsmodels, too little history): the pool is then left as it is. Every change, made
or only planned, is in the audit log with the replicas before it (what undoing it needs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from gpusteward.analysis.forecast import FittedModel, Forecast, ForecastUnavailable, fit, forecast
from gpusteward.analysis.tide import LowWindow, ReplicaPlan, low_load_windows, plan_replicas
from gpusteward.domain.errors import ConfigError, ExecutionError, StoreError
from gpusteward.domain.ports import PoolScaler
from gpusteward.integrations.sim.pool_scaler import SimPoolScaler
from gpusteward.runtime.demand import DemandHistory, load_demand_csv
from gpusteward.runtime.insights_settings import ForecastSettings, PoolSettings
from gpusteward.store.db import StateStore

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
    """What the step did for one pool."""

    pool: str
    at: datetime
    #: planned (dry-run), scaled, failed, steady, held, cooldown, paused, unavailable, unknown-pool
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


@dataclass
class TideStep:
    settings: ForecastSettings
    scalers: Mapping[str, PoolScaler]
    store: StateStore | None = None
    dry_run: bool = True
    history: DemandHistory = field(default_factory=DemandHistory)
    _state: dict[str, _PoolState] = field(default_factory=dict)
    _last_plan: datetime | None = None
    last: list[TideOutcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.history.step_s = self.settings.bucket_minutes * 60
        self.history.max_days = self.settings.history_days
        self.history.directory = self.settings.history_dir
        self.history.load()
        for p in self.settings.pools:
            if p.history_csv is not None:
                table = load_demand_csv(p.history_csv, p.history_column)
                self.history.extend(p.name, table.times_s.tolist(), table.values.tolist())

    def observe(self, now: datetime, demand: Mapping[str, float]) -> None:
        """Add this tick's demand of the configured pools to their history."""
        for p in self.settings.pools:
            if p.name in demand:
                self.history.add(p.name, now.timestamp(), demand[p.name])

    def due(self, now: datetime) -> bool:
        every = timedelta(minutes=self.settings.plan_every_minutes)
        return self._last_plan is None or now - self._last_plan >= every

    def step(self, now: datetime, demand_now: Mapping[str, float] | None = None) -> list[TideOutcome]:
        """Forecast, plan and scale every configured pool. One pool's failure never stops another."""
        self._last_plan = now
        try:
            self.history.flush(now.timestamp())
        except OSError as e:
            log.warning("demand history not written to %s: %s", self.settings.history_dir, e)
        paused = self.store.is_paused() if self.store is not None else False
        out = [self._pool(p, now, (demand_now or {}).get(p.name, 0.0), paused) for p in self.settings.pools]
        self.last = out
        return out

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

    def _pool(self, p: PoolSettings, now: datetime, demand_now: float, paused: bool) -> TideOutcome:
        scaler = self.scalers.get(p.scaler)
        current = scaler.replicas(p.name) if scaler is not None else None
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
        result = self._act(p, scaler, plan, now, paused)
        return TideOutcome(p.name, now, result[0], result[1], plan, fc, windows)

    def _act(
        self, p: PoolSettings, scaler: PoolScaler, plan: ReplicaPlan, now: datetime, paused: bool
    ) -> tuple[str, str]:
        if not plan.changes:
            status = "held" if plan.held else "steady"
            if plan.held:
                self._audit("tide-held", now, p, plan)
            return status, plan.reason
        st = self._state.setdefault(p.name, _PoolState())
        cooldown = timedelta(minutes=self.settings.cooldown_minutes)
        if st.scaled_at is not None and now - st.scaled_at < cooldown:
            return "cooldown", f"{plan.reason}; waiting: scaled {st.scaled_at:%H:%M} UTC, cooldown {cooldown}"
        if paused:
            self._audit("tide-held", now, p, plan, held="paused")
            return "paused", f"{plan.reason}; gpusteward is paused: nothing is scaled"
        if self.dry_run:
            self._audit("tide-plan", now, p, plan, dry_run=True)
            st.scaled_at = now  # a dry run paces its plans as the real one would
            return "planned", f"[dry-run] {plan.reason}"
        try:
            outcome = scaler.scale(p.name, plan.target, plan.reason)
        except ExecutionError as e:
            self._audit("tide-scale-failed", now, p, plan, error=str(e)[:500])
            return "failed", f"{plan.reason}; scaling failed: {e}"
        st.scaled_at = now
        self._audit(
            "tide-scale", now, p, plan, ok=outcome.ok, detail=outcome.detail, verified=outcome.verified
        )
        return ("scaled" if outcome.ok else "failed"), f"{plan.reason}; {outcome.detail}"

    def _audit(self, event: str, now: datetime, p: PoolSettings, plan: ReplicaPlan, **extra: object) -> None:
        if self.store is None:
            return
        payload = {
            "pool": p.name,
            "scaler": p.scaler,
            "previous_replicas": plan.current,
            "target_replicas": plan.target,
            "reason": plan.reason,
            "held": plan.held,
            "dry_run": self.dry_run,
            **extra,
        }
        try:
            self.store.audit(event, now, None, **payload)
        except StoreError:
            log.exception("tide audit record not written")


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
