"""Scenarios: tables of workload templates, expanded into a deterministic arrival list.

A row says "``count`` workloads of this behaviour, each asking for ``gpus`` GPUs,
arriving somewhere in ``start_h`` (hours after the simulated start; negative means
already running when the simulation begins), planned to run for ``run_h`` hours".
``waste_after_h`` (``waste_h`` in the tables) is when a zombie crashes or a notebook
goes idle for good, in hours after it started. Each workload draws its exact values
from its own generator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpusteward.domain.models import WorkloadKind
from gpusteward.integrations.sim.behaviours import HOUR_S, Behaviour, Plan, make_plan

JOB, POD, PROC = WorkloadKind.JOB, WorkloadKind.POD, WorkloadKind.PROCESS
TRAINING, LOADING, INFERENCE = Behaviour.TRAINING, Behaviour.LOADING, Behaviour.INFERENCE
NOTEBOOK, ZOMBIE, IDLE = Behaviour.NOTEBOOK, Behaviour.ZOMBIE, Behaviour.IDLE
OVERPROV, SERVING = Behaviour.OVERPROVISIONED, Behaviour.SERVING

#: The users of each team; owners are drawn from these.
TEAMS: Mapping[str, tuple[str, ...]] = {
    "nlp": ("alice", "bharat", "chen"),
    "vision": ("dana", "emeka", "farah"),
    "speech": ("goran", "hana"),
    "recsys": ("ines", "jun"),
    "platform": ("kofi",),
}

Span = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Row:
    """One line of a scenario table."""

    behaviour: Behaviour
    kind: WorkloadKind
    name: str
    gpus: int
    count: int
    start_h: Span
    run_h: Span
    waste_after_h: Span
    team: str
    protect: bool = False


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    rows: tuple[Row, ...]
    nodes: int
    gpus_per_node: int
    #: Rows arriving within the day (start_h >= 0) arrive again every following day.
    repeat_daily: bool = True
    #: Scale counts by the cluster's GPU count relative to nodes * gpus_per_node.
    scale: bool = True
    #: GPUs that degrade and then fail, and healthy GPUs that throttle for a while (``health.py``).
    failing_gpus: int = 0
    throttling_gpus: int = 0


# fmt: off
#: Per 64 GPUs (8 nodes x 8). Already running at the start: 62 of 64 GPUs held.
DEFAULT_ROWS: tuple[Row, ...] = (
    #   behaviour  kind   name            gpus cnt start_h        run_h        waste_h      team
    Row(TRAINING,  JOB,   "pretrain-llm",  8,  2,  (-20, -2),     (24, 48),    (0, 0),      "nlp"),
    Row(TRAINING,  JOB,   "train-vit",     4,  2,  (-10, -1),     (8, 20),     (0, 0),      "vision"),
    Row(TRAINING,  JOB,   "finetune",      2,  2,  (-6, -0.5),    (4, 12),     (0, 0),      "speech"),
    Row(INFERENCE, POD,   "serve-chat",    2,  2,  (-72, -24),    (200, 300),  (0, 0),      "nlp"),
    Row(INFERENCE, POD,   "serve-rank",    1,  3,  (-72, -24),    (200, 300),  (0, 0),      "recsys"),
    Row(NOTEBOOK,  POD,   "jupyter",       1,  3,  (-3, -0.5),    (8, 20),     (0.5, 2),    "vision"),
    Row(ZOMBIE,    JOB,   "train-asr",     4,  1,  (-8, -3),      (30, 48),    (1, 3),      "speech"),
    Row(ZOMBIE,    PROC,  "python",        2,  1,  (-6, -2),      (30, 48),    (0.5, 2),    "recsys", True),
    Row(OVERPROV,  JOB,   "train-detr",    8,  2,  (-12, -2),     (20, 40),    (0, 0),      "vision"),
    Row(IDLE,      JOB,   "interactive",   1,  2,  (-4, -1),      (10, 24),    (0, 0),      "platform"),
    # Arrivals during the day.
    Row(TRAINING,  JOB,   "train-vit",     4,  2,  (0, 16),       (4, 12),     (0, 0),      "vision"),
    Row(TRAINING,  JOB,   "finetune",      2,  3,  (0, 18),       (3, 10),     (0, 0),      "nlp"),
    Row(TRAINING,  PROC,  "python",        1,  2,  (0, 20),       (2, 6),      (0, 0),      "speech"),
    Row(LOADING,   POD,   "eval-llm",      1,  3,  (0, 16),       (3, 10),     (0, 0),      "nlp"),
    Row(LOADING,   JOB,   "distill",       2,  1,  (2, 14),       (4, 10),     (0, 0),      "recsys"),
    Row(NOTEBOOK,  POD,   "jupyter",       1,  3,  (1, 12),       (6, 20),     (0.5, 2),    "nlp"),
    Row(NOTEBOOK,  POD,   "jupyter",       1,  1,  (1, 8),        (10, 20),    (0.5, 1.5),  "platform", True),
    Row(ZOMBIE,    JOB,   "train-rec",     2,  2,  (0, 8),        (16, 30),    (1, 4),      "recsys"),
    Row(IDLE,      JOB,   "interactive",   1,  2,  (0, 10),       (6, 16),     (0, 0),      "vision"),
    Row(IDLE,      PROC,  "python",        2,  1,  (2, 10),       (6, 16),     (0, 0),      "speech"),
    Row(OVERPROV,  JOB,   "train-mae",     8,  1,  (1, 6),        (10, 20),    (0, 0),      "vision"),
    Row(INFERENCE, POD,   "serve-embed",   1,  1,  (4, 10),       (100, 200),  (0, 0),      "recsys"),
    # Serving as the GenTD26 trace shows it (behaviours.py): traffic ends 15.4-17.4 h in, the pod
    # stays up (with a stray request now and then) until a redeploy the next morning; one in
    # six is bursty all its life and must be left alone.
    Row(SERVING,   POD,   "sd-serve",      1,  5,  (-1, 0),       (24, 26),    (15.4, 17.4), "vision"),
    Row(SERVING,   POD,   "sd-bursty",     1,  1,  (-1, 0),       (24, 26),    (0, 0),       "vision"),
)

#: 2 nodes x 4 GPUs, exact times, one of each kind of interest; tests reason about it.
SMALL_ROWS: tuple[Row, ...] = (
    #   behaviour  kind   name            gpus cnt start_h        run_h        waste_h      team
    Row(TRAINING,  JOB,   "train",         2,  1,  (-2, -2),      (30, 30),    (0, 0),      "nlp"),
    Row(LOADING,   POD,   "eval",          1,  1,  (1, 1),        (6, 6),      (0, 0),      "nlp"),
    Row(ZOMBIE,    JOB,   "train-asr",     1,  1,  (-3, -3),      (30, 30),    (2, 2),      "speech"),
    Row(IDLE,      JOB,   "interactive",   1,  1,  (-1, -1),      (5, 5),      (0, 0),      "platform"),
    Row(NOTEBOOK,  POD,   "jupyter",       1,  1,  (-0.5, -0.5),  (20, 20),    (1, 1),      "vision"),
    Row(ZOMBIE,    PROC,  "python",        1,  1,  (-4, -4),      (30, 30),    (1, 1),      "recsys", True),
)
# fmt: on

SCENARIOS: Mapping[str, Scenario] = {
    "default": Scenario("default", DEFAULT_ROWS, nodes=8, gpus_per_node=8, failing_gpus=2, throttling_gpus=2),
    "small": Scenario("small", SMALL_ROWS, nodes=2, gpus_per_node=4, repeat_daily=False, scale=False),
}


@dataclass(frozen=True, slots=True)
class Arrival:
    """One workload as submitted: it starts when GPUs are free, at ``at_s`` or later."""

    seq: int
    at_s: float
    row: Row
    gpus: int
    user: str
    plan: Plan
    #: Seed of the workload's own noise stream.
    key: int
    #: How many times it was submitted again after its node was taken (a spot interruption).
    retry: int = 0

    @property
    def workload_id(self) -> str:
        base = f"{self.row.kind.value}-{self.seq:04d}"
        return f"{base}-r{self.retry}" if self.retry else base


def scaled(scenario: Scenario, count: int, total_gpus: int) -> int:
    """``count`` per the scenario's size, for a cluster of ``total_gpus``."""
    if not scenario.scale:
        return count
    return int(count * total_gpus / (scenario.nodes * scenario.gpus_per_node) + 0.5)


def _draw(rng: np.random.Generator, span: Span) -> float:
    lo, hi = span
    return lo if hi <= lo else float(rng.uniform(lo, hi))


def arrivals_for_day(
    scenario: Scenario, *, day: int, seed: int, total_gpus: int, gpus_per_node: int, first_seq: int
) -> list[Arrival]:
    """The arrivals of simulated day ``day`` (day 0 also holds those already running)."""
    factor = total_gpus / (scenario.nodes * scenario.gpus_per_node) if scenario.scale else 1.0
    out: list[Arrival] = []
    for r, row in enumerate(scenario.rows):
        if day > 0 and (not scenario.repeat_daily or row.start_h[0] < 0):
            continue
        count = int(row.count * factor + 0.5)
        for k in range(count):
            rng = np.random.default_rng([seed, day, r, k])
            gpus = min(row.gpus, gpus_per_node)
            # Whole seconds, like the start times a scheduler reports.
            at_s = float(round((day * 24 + _draw(rng, row.start_h)) * HOUR_S))
            plan = make_plan(
                row.behaviour,
                rng,
                run_s=float(round(_draw(rng, row.run_h) * HOUR_S)),
                waste_after_s=_draw(rng, row.waste_after_h) * HOUR_S,
                gpus=gpus,
            )
            users = TEAMS.get(row.team, (row.team,))
            user = users[int(rng.integers(len(users)))]
            key = int(rng.integers(1 << 62))
            out.append(Arrival(0, at_s, row, gpus, user, plan, key))
    out.sort(key=lambda a: a.at_s)
    return [Arrival(first_seq + i, a.at_s, a.row, a.gpus, a.user, a.plan, a.key) for i, a in enumerate(out)]


def resolve(scenario: str | Scenario | Sequence[Row]) -> Scenario:
    """A scenario by name, as given, or built from bare rows (no scaling, no repeats)."""
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, str):
        try:
            return SCENARIOS[scenario]
        except KeyError:
            raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}") from None
    rows = tuple(scenario)
    gpn = max((row.gpus for row in rows), default=1)
    return Scenario("custom", rows, nodes=1, gpus_per_node=gpn, repeat_daily=False, scale=False)
