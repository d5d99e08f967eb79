"""Cross-cluster advice (pure): where one cluster's jobs waited for a GPU model that sat idle in
another cluster the same team may use, say so with figures. Advice only: the hub never acts.

    cluster alpha: 14 jobs waited 3.2 h p50 for A100; cluster beta had 22 idle A100 for 9 h

* Waiting: the jobs the hub saw waiting for GPUs in the period (``hub_waits``), per cluster and
  model, with the median of how long each had waited when last seen. A job that asks for no
  model ("") can use any.
* Idle: the hub's samples of each cluster's idle GPUs per model (``hub_model_samples``). Idle
  hours add the time from each sample with idle GPUs to the next (a gap longer than
  ``max_gap_s`` counts ``max_gap_s``: the hub did not see the rest); the count said is the median
  over those samples.
* Teams: a cluster whose member lists ``teams`` only takes advice for a cluster that shares one.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Waiting:
    cluster: str
    model: str
    jobs: int
    gpus: int
    p50_wait_s: float


@dataclass(frozen=True)
class Idle:
    cluster: str
    model: str
    median_idle_gpus: float
    idle_hours: float


@dataclass(frozen=True)
class Advice:
    waiting: Waiting
    idle: Idle
    teams: tuple[str, ...]

    @property
    def text(self) -> str:
        w, i = self.waiting, self.idle
        model = short_model(i.model)
        jobs = f"{w.jobs} job{'s' if w.jobs != 1 else ''}"
        return (
            f"cluster {w.cluster}: {jobs} waited {w.p50_wait_s / 3600:.1f} h "
            f"p50 for {short_model(w.model) if w.model else 'any GPU'}; cluster {i.cluster} had "
            f"{i.median_idle_gpus:g} idle {model} for {i.idle_hours:.1f} h"
        )

    def row(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "waiting_cluster": self.waiting.cluster,
            "model": self.idle.model,
            "jobs": self.waiting.jobs,
            "gpus_waited_for": self.waiting.gpus,
            "p50_wait_h": round(self.waiting.p50_wait_s / 3600, 2),
            "idle_cluster": self.idle.cluster,
            "idle_gpus": self.idle.median_idle_gpus,
            "idle_hours": round(self.idle.idle_hours, 2),
            "teams": list(self.teams),
        }


def short_model(model: str) -> str:
    """``NVIDIA A100-SXM4-80GB`` → ``A100``: the part people say."""
    words = model.replace("NVIDIA", "").strip().split()
    return words[0].split("-")[0] if words else model


def waiting(waits: Sequence[Mapping[str, Any]], *, min_wait_s: float) -> list[Waiting]:
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for w in waits:
        groups[(str(w["cluster"]), str(w["gpu_model"]))].append(w)
    out = []
    for (cluster, model), jobs in sorted(groups.items()):
        p50 = statistics.median(float(j["waited_s"]) for j in jobs)
        if p50 >= min_wait_s:
            out.append(Waiting(cluster, model, len(jobs), sum(int(j["gpus"]) for j in jobs), p50))
    return out


def idle(samples: Sequence[Mapping[str, Any]], until: datetime, *, max_gap_s: float) -> list[Idle]:
    """Per cluster and model, from samples sorted by time within each (cluster, model)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for s in samples:
        groups[(str(s["cluster"]), str(s["model"]))].append(s)
    out = []
    for (cluster, model), rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: r["at"])
        counts, seconds = [], 0.0
        for k, r in enumerate(rows):
            if int(r["idle_gpus"]) <= 0:
                continue
            nxt: datetime = rows[k + 1]["at"] if k + 1 < len(rows) else until
            seconds += min(max(0.0, (nxt - r["at"]).total_seconds()), max_gap_s)
            counts.append(int(r["idle_gpus"]))
        if counts:
            out.append(Idle(cluster, model, float(statistics.median(counts)), seconds / 3600))
    return out


def shared_teams(a: Sequence[str], b: Sequence[str]) -> tuple[str, ...] | None:
    """The teams that may use both clusters: () for "anyone", None when none may."""
    if not b:
        return tuple(sorted(a))
    both = tuple(sorted(set(a) & set(b)))
    return both or None


def advise(
    waits: Sequence[Mapping[str, Any]],
    samples: Sequence[Mapping[str, Any]],
    teams: Mapping[str, Sequence[str]],
    until: datetime,
    *,
    min_wait_s: float,
    min_idle_hours: float,
    max_gap_s: float,
) -> list[Advice]:
    """Every (waiting cluster, idle cluster) pair worth saying, the most waiting first."""
    idles = [i for i in idle(samples, until, max_gap_s=max_gap_s) if i.idle_hours >= min_idle_hours]
    out = []
    for w in waiting(waits, min_wait_s=min_wait_s):
        for i in idles:
            if i.cluster == w.cluster or (w.model and i.model != w.model):
                continue
            shared = shared_teams(teams.get(w.cluster, ()), teams.get(i.cluster, ()))
            if shared is not None:
                out.append(Advice(w, i, shared))
    out.sort(key=lambda a: (-a.waiting.jobs * a.waiting.p50_wait_s, -a.idle.idle_hours, a.idle.cluster))
    return out
