"""The simulated scheduler's queue (``Integration.queue``): who waits, and how long started jobs
waited, on a hand-made node whose every time is known."""

from __future__ import annotations

from datetime import timedelta

from gpusteward.domain.integration import BuildContext
from gpusteward.domain.models import WorkloadKind
from gpusteward.integrations.sim import Behaviour, Row, SimClock, SimCluster
from gpusteward.integrations.sim.build import build
from gpusteward.integrations.sim.settings import SimSourceSettings

H = timedelta(hours=1)
T = Behaviour.TRAINING
J = WorkloadKind.JOB

#: One node of 2 GPUs. a: 2 GPUs, 0-2 h. b: 1 GPU, submitted at 0.5 h, runs 1 h.
#: c: 2 GPUs, submitted at 1 h, runs 1 h. b starts when a ends (2 h, waited 1.5 h); c cannot
#: start beside b and starts when b ends (3 h, waited 2 h).
ROWS = [
    Row(T, J, "a", 2, 1, (0, 0), (2, 2), (0, 0), "nlp"),
    Row(T, J, "b", 1, 1, (0.5, 0.5), (1, 1), (0, 0), "speech"),
    Row(T, J, "c", 2, 1, (1, 1), (1, 1), (0, 0), "vision"),
]


def node() -> SimCluster:
    return SimCluster(scenario=ROWS)


def test_waiting_jobs_and_their_reason() -> None:
    cluster = node()
    q = cluster.queue(cluster.start + 1.5 * H)
    assert q.at == cluster.start + 1.5 * H
    assert [(p.queue, p.gpus, p.submitted_at, p.reason) for p in q.pending] == [
        ("speech", 1, cluster.start + 0.5 * H, "Resources"),
        ("vision", 2, cluster.start + H, "Resources"),
    ]
    assert all(p.waits_for_gpus and p.gpu_model == cluster.gpus[0].model for p in q.pending)
    assert q.gpus_waited_for(cluster.gpus[0].model) == 3
    assert q.gpus_waited_for("NVIDIA H100 80GB HBM3") == 0
    assert [(s.queue, s.waited_s) for s in q.started] == []  # a started at 0 h, over an hour ago


def test_a_job_starts_when_a_gpu_frees_and_its_wait_is_start_minus_submit() -> None:
    cluster = node()
    q = cluster.queue(cluster.start + 2.5 * H)
    (c,) = q.pending
    assert c.gpus == 2
    (b,) = q.started
    assert (b.queue, b.waited_s, b.started_at, b.gpus) == ("speech", 1.5 * 3600, cluster.start + 2 * H, 1)
    # The pending job's id is the one it runs under once started.
    q = cluster.queue(cluster.start + 3.5 * H)
    assert q.pending == ()
    (started,) = q.started
    assert (started.id, started.waited_s) == (c.id, 2 * 3600)
    assert cluster.workload(c.id) is not None
    waits = cluster.queue_waits(cluster.start, cluster.start + 4 * H)
    assert sorted(waits) == [0.0, 1.5 * 3600, 2 * 3600]


def test_a_reclaimed_gpu_lets_the_waiting_job_start() -> None:
    cluster = node()
    (a,) = cluster.observe(cluster.start + 0.75 * H).workloads
    cluster.terminate(a.id, cluster.start + 0.75 * H)  # SIGTERM: gone 5 s later
    q = cluster.queue(cluster.start + 0.8 * H)
    assert [(s.queue, s.waited_s) for s in q.started] == [("nlp", 0.0), ("speech", 0.25 * 3600 + 5)]
    assert q.pending == ()  # c has not been submitted yet
    # c (2 GPUs) cannot start beside b: it waits until b ends at 0.75 h + 5 s + 1 h.
    q = cluster.queue(cluster.start + 1.1 * H)
    assert [(p.queue, p.gpus) for p in q.pending] == [("vision", 2)]
    waits = cluster.queue_waits(cluster.start, cluster.start + 3 * H)
    assert sorted(waits) == [0.0, 0.25 * 3600 + 5, 0.75 * 3600 + 5]


def test_still_waiting_jobs_count_with_the_time_they_waited_so_far() -> None:
    cluster = node()
    waits = cluster.queue_waits(cluster.start, cluster.start + 1.5 * H)
    assert sorted(waits) == [0.0, 0.5 * 3600, 1.0 * 3600]  # a started; b and c wait


def test_the_sim_integration_exposes_its_queue() -> None:
    clock = SimClock(SimCluster().start)
    integration = build(SimSourceSettings(history_hours=0), BuildContext(clock=clock))
    assert integration.queue is not None
    q = integration.queue(clock.now() + 6 * H)
    assert q.at == clock.now() + 6 * H
    assert all(p.reason == "Resources" and p.gpus >= 1 for p in q.pending)
    assert q.pending or q.started
