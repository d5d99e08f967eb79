"""The parking step of the tick (L4): idle nodes out of scheduling in low-load windows, and back.

Analyse (every replica, so a new leader takes over warm): ``observe`` reads which nodes are out
of scheduling (``NodeControl.unschedulable``: one call) and tracks since when every GPU of each
node has been free and idle with fresh data (in memory: after a restart a node waits
``idle_minutes`` again). Plan (the leader): ``plan`` builds each pool's forecast view from the
tide's last plan when ``parking.use_forecast`` is on and lets the pure planner (policy/parking.py)
choose. Act: the parks and unparks are decisions on synthetic node workloads, carried out by the
tick's one ``ActionRunner`` through ``NodeParkingExecutor``, like every step. Approvals are
policy's (policy/approval.py): a park waits like any L3+ step, an unpark never does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from gpusteward.domain.errors import ConfigError, ExecutionError, SourceError
from gpusteward.domain.models import Gpu, Workload, utc
from gpusteward.domain.nodes import NodeControl, NodeState
from gpusteward.domain.ports import Clock
from gpusteward.policy.parking import NodeView, ParkingInput, ParkingPlan, PoolForecast, plan_parking
from gpusteward.policy.parking_settings import ParkingSettings
from gpusteward.runtime.insights_settings import ForecastSettings
from gpusteward.runtime.node_idle import nodes_now
from gpusteward.runtime.parking_executor import NodeParkingExecutor, drained_for_health, node_workload
from gpusteward.runtime.tide_step import TideOutcome
from gpusteward.store.window import WindowView

if TYPE_CHECKING:
    from gpusteward.domain.integration import Integration
    from gpusteward.runtime.config import Settings

log = logging.getLogger(__name__)


class TideForecasts(Protocol):
    """What parking reads of the tide step: its settings and its last plan of every pool."""

    @property
    def settings(self) -> ForecastSettings: ...

    @property
    def last(self) -> Sequence[TideOutcome]: ...


@dataclass
class ParkingStep:
    settings: ParkingSettings
    control: NodeControl
    #: The tide's forecasts (``parking.use_forecast``); None without forecast pools.
    tide: TideForecasts | None = None
    stale_after_s: float = 180.0
    _free_since: dict[str, datetime] = field(default_factory=dict)
    #: Per pool, when the forecast's current low-load window was first seen (stable window keys).
    _low_since: dict[str, datetime] = field(default_factory=dict)
    #: Nodes parked by gpusteward at the last tick.
    _parked: set[str] = field(default_factory=set)
    #: This tick's nodes; None when their states could not be read (nothing is planned then).
    _nodes: list[NodeView] | None = None
    last: ParkingPlan | None = None

    def executors(self, clock: Clock) -> list[NodeParkingExecutor]:
        """What the runner parks through (``clock`` stamps the park on the node)."""
        return [NodeParkingExecutor(self.control, clock=clock)]

    def observe(
        self, now: datetime, view: WindowView, gpus: Mapping[str, Gpu], workloads: Mapping[str, Workload]
    ) -> None:
        """Read the nodes' states and track their idle time. Changes nothing."""
        try:
            states = self.control.unschedulable()
        except (SourceError, ExecutionError) as e:
            log.warning("parking skipped this tick: cannot read node states: %s", e)
            self._nodes = None
            return
        self._nodes = self.nodes(now, view, gpus, workloads, states)

    def plan(self, now: datetime, paused: bool) -> ParkingPlan | None:
        """This tick's parks and unparks (None when the nodes could not be read)."""
        if self._nodes is None:
            return None
        inp = ParkingInput(now, self._nodes, self.forecasts(now), paused=paused)
        self.last = plan_parking(inp, self.settings)
        return self.last

    def workloads(self) -> dict[str, Workload]:
        """This tick's nodes as the workloads parking decisions name."""
        return {
            f"node:{n.name}": node_workload(n.name, n.gpu_uuids, self.control.name) for n in self._nodes or ()
        }

    def named(self, plan: ParkingPlan) -> list[str]:
        """Nodes with a step, and parked ones: remembered like workloads, so that approvals,
        `explain` and the web name them (an approval is only taken for a workload seen lately)."""
        named = {d.workload_id for d in (*plan.parks, *plan.unparks)}
        named |= {f"node:{n.name}" for n in self._nodes or () if n.parked}
        return sorted(named)

    # -- what the planner sees ------------------------------------------------------------------
    def nodes(
        self,
        now: datetime,
        view: WindowView,
        gpus: Mapping[str, Gpu],
        workloads: Mapping[str, Workload],
        states: Mapping[str, NodeState],
    ) -> list[NodeView]:
        out = []
        for node in nodes_now(
            view, gpus, workloads, stale_after_s=self.stale_after_s, idle_util_pct=self.settings.idle_util_pct
        ):
            name, gs, n_held, idle = node.name, node.gpus, node.held, node.idle
            st = states.get(name)
            # A node drained for a failed GPU is not parking's to unpark: it counts as someone else's.
            drained = st is not None and drained_for_health(st)
            ours = st is not None and st.ours and not drained
            if name in self._parked and not ours:
                # Just unparked: it must sit idle idle_minutes again before the next park (no flapping,
                # and a new free episode gives the next park its own idempotency key).
                self._free_since.pop(name, None)
            if idle:
                self._free_since.setdefault(name, now)
            else:
                self._free_since.pop(name, None)
            out.append(
                NodeView(
                    name=name,
                    pool=gs[0].pool,
                    gpu_uuids=tuple(g.uuid for g in gs),
                    held=n_held,
                    free_since=self._free_since.get(name),
                    parked=ours,
                    parked_at=st.parked_at if st is not None else None,
                    foreign=st is not None and st.parked and not ours,
                )
            )
        self._parked = {n.name for n in out if n.parked}
        return out

    def forecasts(self, now: datetime) -> dict[str, PoolForecast] | None:
        """Each forecast pool's low-load window now, from the tide step's last plan."""
        if not self.settings.use_forecast:
            return None
        tide = self.tide
        if tide is None:
            return {}
        slo = {p.name: p.slo_headroom for p in tide.settings.pools}
        now_s = now.timestamp()
        out: dict[str, PoolForecast] = {}
        for o in tide.last:
            fc = o.forecast
            if fc is None:
                continue
            window = next((w for w in o.windows if w.start_s <= now_s + fc.step_s and now_s < w.end_s), None)
            rise = o.plan.next_rise_s if o.plan is not None else None
            if window is None:
                self._low_since.pop(o.pool, None)
                out[o.pool] = PoolForecast(None, None, slo_headroom=slo.get(o.pool, 0.2))
                continue
            t = fc.times()
            sel = (t + fc.step_s > now_s) & (t < window.end_s)
            spread = float((fc.upper[sel] - fc.mean[sel]).max()) if sel.any() else 0.0
            start = self._low_since.setdefault(o.pool, now.replace(second=0, microsecond=0))
            out[o.pool] = PoolForecast(
                start,
                utc(window.end_s),
                spread_gpus=spread,
                slo_headroom=slo.get(o.pool, 0.2),
                next_rise=utc(rise) if rise is not None else None,
            )
        return out


def build_parking(
    settings: Settings,
    integration: Integration,
    tide: TideForecasts | None = None,
    control: NodeControl | None = None,
) -> ParkingStep | None:
    """The parking step when ``parking.enabled``; ``control`` replaces the source's node control."""
    if not settings.parking.enabled:
        return None
    if settings.parking.use_forecast and not settings.forecast.pools:
        raise ConfigError("parking.use_forecast needs forecast.pools (the pools whose demand is forecast)")
    control = control or integration.node_control
    if control is None:
        raise ConfigError(
            f"parking.enabled: source {integration.name!r} cannot park nodes; use sim, slurm or kubernetes"
        )
    return ParkingStep(settings.parking, control, tide, stale_after_s=settings.analysis.stale_after_seconds)
