"""Spot interruptions in the simulator: ``InterruptionWatch`` over a seeded schedule.

Each simulated day draws its interruptions from its own generator (``per_day`` on average,
times and spot nodes uniform), so the schedule depends on the seed alone, never on how often the
cluster is observed. A notice comes ``notice_s`` (two minutes, as on AWS) before the instance is
taken; a node whose instance is not running then (stopped, or still being replaced) gets none.
When taken, its workloads end (``capacity.py`` keeps the progress of those whose checkpoint signal
came in time) and a replacement instance joins ``replacement_s`` later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import partial

import numpy as np

from gpusteward.domain.cloud import InterruptionNotice, Lifecycle, NoticeKind
from gpusteward.integrations.sim.capacity import Interrupted
from gpusteward.integrations.sim.cloud import RUNNING, TERMINATED, SimCloud

DAY_S = 86400.0
#: AWS's two-minute spot interruption warning.
NOTICE_S = 120.0


@dataclass(frozen=True, slots=True)
class Interruption:
    """One interruption carried out: its notice and what became of the node's workloads."""

    notice: InterruptionNotice
    taken_at: datetime
    jobs: tuple[Interrupted, ...]

    @property
    def checkpointed(self) -> bool:
        """Every workload on the node got its checkpoint signal in time (an empty node lost none)."""
        return all(j.checkpointed for j in self.jobs)


class SimInterruptions:
    """Implements ``gpusteward.domain.cloud.InterruptionWatch`` for a ``SimCloud``'s spot nodes."""

    def __init__(
        self,
        cloud: SimCloud,
        *,
        per_day: float = 1.0,
        notice_s: float = NOTICE_S,
        replacement_s: float = 600.0,
    ) -> None:
        if per_day < 0 or notice_s <= 0 or replacement_s < 0:
            raise ValueError("per_day and replacement_s must be >= 0, notice_s > 0")
        self.cloud = cloud
        self.cluster = cloud.cluster
        self.per_day = per_day
        self.notice_s = notice_s
        self.replacement_s = replacement_s
        self.spot_nodes = [n for n, i in cloud.instances().items() if i.lifecycle is Lifecycle.SPOT]
        #: Every notice given, in order; and every interruption carried out.
        self.notices: list[InterruptionNotice] = []
        self.done: list[Interruption] = []
        self._generation = dict.fromkeys(cloud.nodes, 0)
        if self.spot_nodes and per_day > 0:
            self.cluster.at(0.0, self._draw_day)

    def like(self, cloud: SimCloud) -> SimInterruptions:
        """The same schedule over another fleet (a counterfactual cluster of the same seed)."""
        return SimInterruptions(
            cloud, per_day=self.per_day, notice_s=self.notice_s, replacement_s=self.replacement_s
        )

    def _draw_day(self, t: float) -> None:
        """At the start of a day: that day's notices, then the next day's draw."""
        day = int(t // DAY_S)
        rng = np.random.default_rng([self.cluster.seed, day, 1802])
        count = int(rng.poisson(self.per_day))
        times = np.round(np.sort(rng.uniform(0.0, DAY_S, count))) + day * DAY_S  # whole seconds
        picks = rng.integers(len(self.spot_nodes), size=count)
        for at_s, k in zip(times, picks, strict=True):
            node = self.spot_nodes[int(k)]
            self.cluster.at(float(at_s), partial(self._notice, node))
        self.cluster.at((day + 1) * DAY_S, self._draw_day)

    def _notice(self, node: str, t: float) -> None:
        instance = self.cloud.instances()[node]
        if instance.state != RUNNING:
            return
        seen = self.cluster.time_at(t)
        notice = InterruptionNotice(
            node=node,
            instance_id=instance.id,
            provider="sim",
            kind=NoticeKind.INTERRUPTION,
            deadline=self.cluster.time_at(t + self.notice_s),
            seen_at=seen,
            via="sim",
            raw=f"spot interruption of {instance.id} ({node}) at {seen:%H:%M:%S}",
        )
        self.notices.append(notice)
        self.cluster.at(t + self.notice_s, partial(self._take, notice))

    def _take(self, notice: InterruptionNotice, t: float) -> None:
        instance = self.cloud.instances()[notice.node]
        if instance.id != notice.instance_id or instance.state != RUNNING:
            return  # stopped meanwhile: a stopped instance is not taken
        jobs = self.cluster.take_node(notice.node, t)
        self.cloud.set_state(notice.node, TERMINATED)
        self.done.append(Interruption(notice, self.cluster.time_at(t), tuple(jobs)))
        self.cluster.at(t + self.replacement_s, partial(self._replace, notice.node))

    def _replace(self, node: str, t: float) -> None:
        self._generation[node] += 1
        self.cloud.replace_instance(node, self._generation[node], self.cluster.time_at(t))
        self.cluster.node_up(node)

    def poll(self, now: datetime) -> list[InterruptionNotice]:
        """Notices given by ``now`` whose instance is not yet taken. Like a metadata service, a
        notice is there only until its deadline: a poller slower than the warning misses it."""
        self.cluster.advance_to(now)
        return [n for n in self.notices if n.seen_at <= now and n.deadline is not None and now < n.deadline]

    def figures(self, until: datetime) -> dict[str, float | int]:
        """Interruptions by ``until``: how many had every job checkpointed in time, and the jobs'
        progress kept or lost."""
        done = [i for i in self.done if i.taken_at <= until]
        jobs = [j for i in done for j in i.jobs if j.resubmitted]
        return {
            "interruptions": len(done),
            "interruptions_checkpointed": sum(1 for i in done if i.checkpointed),
            "interrupted_jobs": sum(len(i.jobs) for i in done),
            "jobs_resumed_from_checkpoint": sum(1 for j in jobs if j.checkpointed),
            "jobs_lost_progress": sum(1 for j in jobs if not j.checkpointed and j.lost_gpu_hours > 0),
            "interruption_lost_gpu_hours": round(sum(j.lost_gpu_hours for j in jobs), 2),
        }
