"""The embedded simulated cluster: GPUs, a scheduler, workloads with ground truth.

Time inside is seconds since ``start`` (negative before it). Workloads arrive on a
deterministic schedule and wait, in arrival order with backfill (a later small job may
pass a big one), until one node has enough free GPUs (the fullest such node is used).
They run their ``Plan`` and end by themselves or when an executor stops them.
Everything is a function of the seed and of the actions taken, never of how often
the cluster is observed.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from types import MappingProxyType

import numpy as np

from gpusteward.domain.classes import CLASS_KEY
from gpusteward.domain.models import PROTECT_KEY, Gpu, Observation, Owner, Sample, Workload
from gpusteward.integrations.sim.behaviours import CHECKPOINTS, Behaviour, Mode
from gpusteward.integrations.sim.capacity import CHECKPOINT_EXIT_S, Capacity
from gpusteward.integrations.sim.ground_truth import GroundTruth
from gpusteward.integrations.sim.health import HealthModel, draw
from gpusteward.integrations.sim.runs import Run
from gpusteward.integrations.sim.sampling import freeze_stale
from gpusteward.integrations.sim.sampling import samples as to_samples
from gpusteward.integrations.sim.scenarios import Arrival, Row, Scenario, arrivals_for_day, resolve, scaled
from gpusteward.integrations.sim.signals import render
from gpusteward.integrations.sim.truth import EndHow, Event, Truth
from gpusteward.integrations.sim.waiting import Waiting

DEFAULT_START = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
DAY_S = 86400.0
#: A process sent SIGTERM exits this long after it (well within any grace).
TERMINATE_EXIT_S = 5.0
_INF = math.inf


def _hour_of_day(at: datetime) -> float:
    u = at.astimezone(UTC)
    return u.hour + u.minute / 60.0 + u.second / 3600.0


#: The class an integration would report for each behaviour (a Deployment, a Notebook, a Job).
_CLASS = {Behaviour.INFERENCE: "service", Behaviour.SERVING: "service", Behaviour.NOTEBOOK: "interactive"}


class SimCluster(GroundTruth, Waiting, Capacity):
    """A simulated GPU cluster. ``nodes``/``gpus_per_node`` default to the scenario's size;
    ``failing_gpus``/``throttling_gpus`` to the scenario's (``health.py``)."""

    def __init__(
        self,
        nodes: int | None = None,
        gpus_per_node: int | None = None,
        seed: int = 42,
        start: datetime = DEFAULT_START,
        gpu_model: str = "NVIDIA A100-SXM4-80GB",
        memory_total_mib: float = 81920.0,
        scenario: str | Scenario | Sequence[Row] = "default",
        *,
        drop_rate: float = 0.0,
        stale_gpus: Collection[str] = (),
        source_name: str = "sim",
        failing_gpus: int | None = None,
        throttling_gpus: int | None = None,
    ) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self.scenario = resolve(scenario)
        self.nodes = nodes or self.scenario.nodes
        self.gpus_per_node = gpus_per_node or self.scenario.gpus_per_node
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError("need at least one node with one GPU")
        if not 0.0 <= drop_rate <= 1.0:
            raise ValueError("drop_rate must be within [0, 1]")
        if self.scenario.repeat_daily and any(
            r.start_h[0] >= 0 and r.start_h[1] > 24 for r in self.scenario.rows
        ):
            raise ValueError("rows repeated daily must arrive within the day (start_h <= 24)")
        self.seed = seed
        self.start = start
        self.memory_total_mib = memory_total_mib
        self.source_name = source_name
        #: Share of samples whose values come back as None (mutable between observations).
        self.drop_rate = drop_rate
        #: GPU uuids whose exporter is stuck: they repeat their last sample, old ``at`` and all.
        self.stale_gpus: set[str] = set(stale_gpus)
        self.events: list[Event] = []
        #: Nodes out of scheduling (L4 parking), by name: (reason, since). No new job lands there.
        self.parked_nodes: dict[str, tuple[str, datetime]] = {}
        self._init_capacity()

        self.gpus = tuple(
            Gpu(f"GPU-sim-{n:02d}-{i}", f"sim-node-{n:02d}", i, gpu_model, memory_total_mib)
            for n in range(self.nodes)
            for i in range(self.gpus_per_node)
        )
        self._uuids = [g.uuid for g in self.gpus]
        self._index = {u: i for i, u in enumerate(self._uuids)}
        n_gpus = len(self.gpus)
        sc = self.scenario
        failing = scaled(sc, sc.failing_gpus, n_gpus) if failing_gpus is None else failing_gpus
        throttling = scaled(sc, sc.throttling_gpus, n_gpus) if throttling_gpus is None else throttling_gpus
        self.health = HealthModel(n_gpus, *draw(seed, n_gpus, failing, throttling))
        self._holder: list[Run | None] = [None] * n_gpus
        self._free_keys = (np.arange(n_gpus, dtype=np.uint64) + np.uint64(seed % (1 << 32))) << np.uint64(32)
        self._keys = self._free_keys.copy()
        self._util_base = np.zeros(n_gpus)
        self._mem = np.zeros(n_gpus)
        self._active = np.ones(n_gpus, dtype=bool)
        self._pos = np.full(n_gpus, -1, dtype=np.int64)
        self._frozen: dict[str, Sample] = {}

        self._running: list[Run] = []
        self._runs: dict[str, Run] = {}
        self._queue: list[Arrival] = []
        self._arrivals: list[Arrival] = []
        self._next_arrival = 0
        self._days = 0
        self._dirty = True
        self._workloads: tuple[Workload, ...] = ()
        self._add_day()
        self._t = min((a.at_s for a in self._arrivals), default=0.0)
        self._advance(0.0)

    # ----- time -------------------------------------------------------------------------
    @property
    def now(self) -> datetime:
        """How far the cluster has been advanced."""
        return self._dt(self._t)

    # ----- schedule ---------------------------------------------------------------------
    def _add_day(self) -> None:
        day = self._days
        self._days += 1
        if day > 0 and not self.scenario.repeat_daily:
            return
        self._arrivals += arrivals_for_day(
            self.scenario,
            day=day,
            seed=self.seed,
            total_gpus=len(self.gpus),
            gpus_per_node=self.gpus_per_node,
            first_seq=len(self._arrivals) + 1,
        )

    def advance_to(self, now: datetime) -> None:
        """Start and end workloads, and apply pending stops, up to ``now``. Never goes back."""
        self._advance(self._offset(now))

    def _advance(self, now_s: float) -> None:
        while True:
            while self._days * DAY_S <= now_s:
                self._add_day()
            arrival = self._arrivals[self._next_arrival] if self._next_arrival < len(self._arrivals) else None
            t_arr = arrival.at_s if arrival is not None else _INF
            run = min(self._running, key=Run.next_s, default=None)
            t_run = run.next_s() if run is not None else _INF
            t_due = self._next_timer_s()
            if min(t_arr, t_run, t_due) > now_s:
                break
            if t_due <= min(t_arr, t_run):
                self._fire_timer()
            elif run is not None and t_run <= t_arr:
                self._fire(run, t_run)
                self._place(t_run)
            elif arrival is not None:
                self._queue.append(arrival)
                self._next_arrival += 1
                self._place(t_arr)
        self._t = max(self._t, now_s)

    def _fire(self, run: Run, t: float) -> None:
        if run.terminate_s is not None and run.terminate_s <= run.exit_s:
            # The grace after a checkpoint signal ran out: SIGTERM.
            run.terminate_s = None
            self._event(t, run, "terminate", "grace expired")
            self._schedule_exit(run, t + TERMINATE_EXIT_S, EndHow.TERMINATED)
            return
        run.ended_s, run.ended_how = t, run.exit_how
        self._running.remove(run)
        for i in run.gpu_idx:
            self._holder[i] = None
            self._keys[i] = self._free_keys[i]
            self._util_base[i] = 0.0
            self._mem[i] = 0.0
            self._active[i] = True
        self._dirty = True
        self._event(t, run, "exit", run.exit_how.value)

    def _place(self, t: float) -> None:
        """Start queued arrivals that fit, in order; later small ones may pass a big one."""
        if not self._queue:
            return
        gpn = self.gpus_per_node
        # A failed GPU is withdrawn from scheduling (device plugin, node health check).
        usable = [h is None and not self.health.failed(i, t) for i, h in enumerate(self._holder)]
        free = [sum(usable[n * gpn : (n + 1) * gpn]) for n in range(self.nodes)]
        away = self.parked_nodes.keys() | self.down_nodes  # parked, or its instance is away
        parked = {n for n in range(self.nodes) if self.gpus[n * gpn].node in away}
        waiting: list[Arrival] = []
        for arrival in self._queue:
            fits = [n for n in range(self.nodes) if free[n] >= arrival.gpus and n not in parked]
            if not fits:
                waiting.append(arrival)
                continue
            node = min(fits, key=lambda n: free[n])
            idx = [i for i in range(node * gpn, (node + 1) * gpn) if usable[i]][: arrival.gpus]
            free[node] -= arrival.gpus
            for i in idx:
                usable[i] = False
            self._start(arrival, t, idx)
        self._queue = waiting

    def _start(self, arrival: Arrival, t: float, idx: list[int]) -> None:
        row, plan = arrival.row, arrival.plan
        wid = arrival.workload_id
        labels = {"team": row.team, "user": arrival.user, CLASS_KEY: _CLASS.get(row.behaviour, "batch")}
        if row.protect:
            labels[PROTECT_KEY] = "true"
        workload = Workload(
            id=wid,
            kind=row.kind,
            name=f"{row.name}-{arrival.seq}",
            owner=Owner(arrival.user, row.team, f"{arrival.user}@example.org"),
            gpus_requested=arrival.gpus,
            gpu_uuids=tuple(self._uuids[i] for i in idx),
            started_at=self._dt(t),
            source=self.source_name,
            labels=MappingProxyType(labels),
            ref=MappingProxyType({"sim_id": wid, "node": self.gpus[idx[0]].node}),
        )
        wasteful = None if plan.wasteful_from_s is None else self._dt(t + plan.wasteful_from_s)
        truth = Truth(
            wid, plan.behaviour, wasteful, row.protect, arrival.gpus, self._dt(t), self._dt(t + plan.run_s)
        )
        run = Run(arrival, t, idx, workload, truth)
        stuck = float(self.health.fail_s[idx].min())
        run.stuck_s = stuck if stuck < _INF else None
        for slot, i in enumerate(idx):
            active = slot < plan.active_gpus
            self._holder[i] = run
            self._active[i] = active
            self._keys[i] = np.uint64((arrival.key + slot) % (1 << 64))
            self._util_base[i] = plan.util_base
            self._mem[i] = plan.mem_frac * self.memory_total_mib if active else 0.0
        self._running.append(run)
        self._runs[wid] = run
        self._dirty = True
        self._event(t, run, "start")

    def _event(self, t: float, run: Run, kind: str, detail: str = "") -> None:
        self.events.append(Event(self._dt(t), run.workload.id, kind, detail))

    def park_node(self, node: str, reason: str, at: datetime) -> None:
        """Take ``node`` out of scheduling (cordon/drain): what runs there goes on, nothing new starts."""
        self.parked_nodes.setdefault(node, (reason, at))

    def unpark_node(self, node: str) -> None:
        """Put ``node`` back into scheduling; queued arrivals that fit start at once."""
        if self.parked_nodes.pop(node, None) is not None:
            self._place(self._t)

    @property
    def queued(self) -> int:
        """Arrivals waiting for free GPUs."""
        return len(self._queue)

    # ----- sensing ----------------------------------------------------------------------
    def _rebuild(self) -> None:
        pos = {id(r): k for k, r in enumerate(self._running)}
        self._pos[:] = [-1 if h is None else pos[id(h)] for h in self._holder]
        self._workloads = tuple(r.workload for r in self._running)
        self._dirty = False

    def observe(self, now: datetime) -> Observation:
        """Advance to ``now`` and sample every GPU."""
        self.advance_to(now)
        if self._dirty:
            self._rebuild()
        t = self._offset(now)
        n = len(self._running)
        # One extra slot at the end: free GPUs index it through position -1.
        modes = np.full(n + 1, Mode.FREE, dtype=np.int64)
        frac = np.zeros(n + 1)
        for k, run in enumerate(self._running):
            modes[k], frac[k] = run.plan.mode_at(t - run.start_s)
            if run.stuck_s is not None and t >= run.stuck_s:  # hung on a failed GPU: nothing moves
                modes[k] = Mode.DEAD
        gpu_modes = np.where(self._active, modes[self._pos], Mode.IDLE_EMPTY)
        m = render(
            modes=gpu_modes,
            frac=frac[self._pos],
            util_base=self._util_base,
            mem_mib=self._mem,
            keys=self._keys,
            second=int(now.timestamp()),
            hour_of_day=_hour_of_day(now),
            drop_rate=self.drop_rate,
        )
        samples = to_samples(now, self._uuids, m, self.health.read(t))
        if self.stale_gpus or self._frozen:
            freeze_stale(samples, self._frozen, self.stale_gpus, self._index)
        return Observation(now, self.gpus, tuple(samples), self._workloads)

    # ----- actuation --------------------------------------------------------------------
    def _live(self, workload_id: str, at: datetime) -> tuple[Run, float] | None:
        run = self._runs.get(workload_id)
        if run is None:
            raise KeyError(f"unknown workload {workload_id!r}")
        if run.ended_s is not None:
            return None
        t = max(self._offset(at), self._t)
        if run.stop_s is None:
            run.stop_s = t
        return run, t

    def _schedule_exit(self, run: Run, t: float, how: EndHow) -> None:
        if t < run.exit_s:
            run.exit_s, run.exit_how = t, how

    def checkpoint(self, workload_id: str, at: datetime) -> bool:
        """Ask for a checkpoint; a live trainer writes it and exits a minute later.
        Crashed, idle and interactive processes ignore it. False when already gone."""
        live = self._live(workload_id, at)
        if live is None:
            return False
        run, t = live
        self._event(t, run, "checkpoint")
        plan = run.plan
        wasteful = plan.wasteful_from_s is not None and t - run.start_s >= plan.wasteful_from_s
        hung = run.stuck_s is not None and t >= run.stuck_s
        if not hung and (
            plan.behaviour in CHECKPOINTS or (plan.behaviour is Behaviour.ZOMBIE and not wasteful)
        ):
            self._schedule_exit(run, t + CHECKPOINT_EXIT_S, EndHow.CHECKPOINTED)
        self._advance(self._t)
        return True

    def terminate(self, workload_id: str, at: datetime) -> bool:
        """SIGTERM: exits within seconds. False when already gone."""
        live = self._live(workload_id, at)
        if live is None:
            return False
        run, t = live
        self._event(t, run, "terminate")
        self._schedule_exit(run, t + TERMINATE_EXIT_S, EndHow.TERMINATED)
        self._advance(self._t)
        return True

    def kill(self, workload_id: str, at: datetime) -> bool:
        """SIGKILL: gone at once. False when already gone."""
        live = self._live(workload_id, at)
        if live is None:
            return False
        run, t = live
        run.killed = True
        self._event(t, run, "kill")
        self._schedule_exit(run, t, EndHow.KILLED)
        self._advance(self._t)
        return True

    def graceful_stop(self, workload_id: str, at: datetime, grace_s: float) -> bool:
        """Checkpoint signal now, SIGTERM when ``grace_s`` has passed and it still runs."""
        t = max(self._offset(at), self._t)
        if not self.checkpoint(workload_id, at):
            return False
        run = self._runs[workload_id]
        if run.ended_s is None:
            due = t + grace_s
            run.terminate_s = due if run.terminate_s is None else min(run.terminate_s, due)
        return True

    def stopping(self, workload_id: str) -> bool:
        """A stop action has reached it (it may still be running out its grace)."""
        run = self._runs.get(workload_id)
        return run is not None and run.stop_s is not None

    def killed(self, workload_id: str) -> bool:
        run = self._runs.get(workload_id)
        return run is not None and run.killed

    def workload(self, workload_id: str) -> Workload | None:
        """The running workload with this id, or None (gone, queued or unknown)."""
        run = self._runs.get(workload_id)
        return run.workload if run is not None and run.ended_s is None else None

    def known(self, workload_id: str) -> bool:
        return workload_id in self._runs

    def holds(self, workload_id: str, gpu_uuid: str) -> bool:
        """Whether ``gpu_uuid`` is held by this workload now."""
        holder = self._holder[self._index[gpu_uuid]]
        return holder is not None and holder.workload.id == workload_id
