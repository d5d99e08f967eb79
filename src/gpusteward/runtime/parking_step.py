"""The parking step of the tick (L4): idle nodes out of scheduling in low-load windows, and back.

Run by the leader after the tick's actions (``Steward.parking``). Each tick it reads which nodes
are out of scheduling (``NodeControl.unschedulable``: one call), tracks since when every GPU of
each node has been free and idle with fresh data (in memory: after a restart a node waits
``idle_minutes`` again), builds each pool's forecast view from the tide step when
``parking.use_forecast`` is on, and lets the pure planner (policy/parking.py) choose.

Decisions go through an ``ActionRunner`` on synthetic node workloads, so they are planned,
idempotent, dry-run aware and audited like every step. Parks wait for an admin's approval like
any L3+ step (``policy.approval``; the same ``approval_gate`` policy uses); unparks give capacity
back and never wait, so they run through a second runner without the approval gate.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from gpusteward.domain.errors import ConfigError, ExecutionError, SourceError
from gpusteward.domain.models import Decision, Gpu, Hold, Level, Metric, utc
from gpusteward.domain.nodes import NodeControl, NodeState
from gpusteward.policy.owner import ApprovalView, approval_gate
from gpusteward.policy.parking import PARK, NodeView, ParkingInput, ParkingPlan, PoolForecast, plan_parking
from gpusteward.policy.parking_settings import ParkingSettings
from gpusteward.runtime.parking_executor import NodeParkingExecutor, node_workload
from gpusteward.runtime.runner import ActionResult, ActionRunner
from gpusteward.store import queries

if TYPE_CHECKING:
    from gpusteward.domain.integration import Integration
    from gpusteward.runtime.config import Settings
    from gpusteward.runtime.loop import Steward

log = logging.getLogger(__name__)


@dataclass
class ParkingStep:
    settings: ParkingSettings
    control: NodeControl
    #: Parks: approvals as configured (policy.approval).
    runner: ActionRunner
    #: Unparks: the same store, notifier and mode, without the approval gate.
    unpark_runner: ActionRunner
    stale_after_s: float = 180.0
    _free_since: dict[str, datetime] = field(default_factory=dict)
    #: Per pool, when the forecast's current low-load window was first seen (stable window keys).
    _low_since: dict[str, datetime] = field(default_factory=dict)
    #: Nodes parked by gpusteward at the last tick.
    _parked: set[str] = field(default_factory=set)
    last: ParkingPlan | None = None

    @classmethod
    def of(
        cls,
        settings: ParkingSettings,
        control: NodeControl,
        runner: ActionRunner,
        stale_after_s: float = 180.0,
    ) -> ParkingStep:
        """``runner``'s store, notifier, clock and mode, with a node executor over ``control``."""
        executors = [NodeParkingExecutor(control, clock=runner.clock)]
        parks = ActionRunner(
            runner.store,
            executors,
            runner.notifier,
            runner.clock,
            dry_run=runner.dry_run,
            approval=runner.approval,
        )
        unparks = ActionRunner(runner.store, executors, runner.notifier, runner.clock, dry_run=runner.dry_run)
        return cls(settings, control, parks, unparks, stale_after_s)

    def __call__(self, steward: Steward, now: datetime) -> list[ActionResult]:
        try:
            states = self.control.unschedulable()
        except (SourceError, ExecutionError) as e:
            log.warning("parking skipped this tick: cannot read node states: %s", e)
            return []
        nodes = self.nodes(steward, now, states)
        plan = plan_parking(
            ParkingInput(now, nodes, self.forecasts(steward, now), paused=self.runner.store.is_paused()),
            self.settings,
        )
        self.last = plan
        workloads = {f"node:{n.name}": node_workload(n.name, n.gpu_uuids, self.control.name) for n in nodes}
        # Nodes with a step, and parked ones, are remembered like workloads: approvals, `explain`
        # and the web name them (and an approval is only taken for a workload seen lately).
        named = {d.workload_id for d in (*plan.parks, *plan.unparks)}
        named |= {f"node:{n.name}" for n in nodes if n.parked}
        self.runner.store.remember_workloads([workloads[w] for w in sorted(named)], now)
        parks = self._gate(plan.parks, now)
        results = self.runner.run(parks, workloads)
        results += self.unpark_runner.run(plan.unparks, workloads)
        self.runner.store.record_decisions([*parks, *plan.unparks])
        return [r for r in results if r.hold is Hold.NONE]

    # -- what the planner sees ------------------------------------------------------------------
    def nodes(self, steward: Steward, now: datetime, states: Mapping[str, NodeState]) -> list[NodeView]:
        by_node: dict[str, list[Gpu]] = {}
        for g in steward.gpus.values():
            by_node.setdefault(g.node, []).append(g)
        held = {u for w in steward.workloads.values() for u in w.gpu_uuids}
        view = steward.window.view(now)
        age, util = view.age_s(), view.last(Metric.GPU_UTIL)
        out = []
        for name in sorted(by_node):
            gs = sorted(by_node[name], key=lambda g: g.index)
            n_held = sum(g.uuid in held for g in gs)
            idx = [view.index_of(g.uuid) for g in gs]
            idle = n_held == 0 and all(
                i is not None
                and bool(age[i] <= self.stale_after_s)
                and bool(np.isfinite(util[i]))
                and float(util[i]) <= self.settings.idle_util_pct
                for i in idx
            )
            st = states.get(name)
            ours = st is not None and st.ours
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
                    foreign=st is not None and st.parked and not st.ours,
                )
            )
        self._parked = {n.name for n in out if n.parked}
        return out

    def forecasts(self, steward: Steward, now: datetime) -> dict[str, PoolForecast] | None:
        """Each forecast pool's low-load window now, from the tide step's last plan."""
        if not self.settings.use_forecast:
            return None
        tide: Any = getattr(steward.insights, "tide", None)
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

    # -- approvals, as policy gates L3+ steps -----------------------------------------------------
    def _gate(self, parks: Sequence[Decision], now: datetime) -> list[Decision]:
        runner = self.runner
        approval = runner.approval
        if not parks or runner.dry_run or approval is None or not approval.needs_approval(Level.INFRA):
            return list(parks)
        store = runner.store
        store.expire_approvals(now)
        found = queries.latest_approvals(store, {d.workload_id for d in parks}, dry_run=False)
        out = []
        for d in parks:
            got = found.get(d.idempotency_key)
            view = (
                None
                if got is None
                else ApprovalView(
                    got[0].id,
                    got[0].status,
                    got[0].expires_at,
                    got[0].decided_by,
                    got[0].decision_reason,
                    got[1],
                )
            )
            held = approval_gate(PARK, view, now, approval.expire_hours)
            out.append(
                d
                if held is None
                else replace(d, hold=held.hold, reason=f"{d.reason}. The park is held: {held.reason}.")
            )
        return out


def build_parking(
    settings: Settings, integration: Integration, runner: ActionRunner, control: NodeControl | None = None
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
    return ParkingStep.of(
        settings.parking,
        control,
        runner,
        stale_after_s=settings.analysis.stale_after_seconds,
    )
