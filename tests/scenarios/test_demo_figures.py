"""The demo's issue-16 figures: queue time with and without acting, failed GPUs flagged and the
degrading rule's lead time, on hand-made cases and on the demo itself."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import MappingProxyType

import pytest

from gpusteward.domain.models import Finding, RuleAction, WorkloadKind
from gpusteward.domain.records import FindingEpisode
from gpusteward.integrations.sim import Behaviour, Row, SimCluster
from gpusteward.scenarios.demo import DemoResult, run_demo
from gpusteward.scenarios.demo_figures import health_figures, queue_figures, untouched

H = timedelta(hours=1)
T, J = Behaviour.TRAINING, WorkloadKind.JOB
#: One node of 2 GPUs: a (2 GPUs, 0-2 h), b (1 GPU, submitted 0.5 h), c (2 GPUs, submitted 1 h).
ROWS = [
    Row(T, J, "a", 2, 1, (0, 0), (2, 2), (0, 0), "nlp"),
    Row(T, J, "b", 1, 1, (0.5, 0.5), (1, 1), (0, 0), "speech"),
    Row(T, J, "c", 2, 1, (1, 1), (1, 1), (0, 0), "vision"),
]


def test_queue_time_with_and_without_acting() -> None:
    cluster = SimCluster(scenario=ROWS)
    (a,) = cluster.observe(cluster.start + 0.75 * H).workloads
    cluster.terminate(a.id, cluster.start + 0.75 * H)  # released 5 s later
    q = queue_figures(cluster, cluster.start + 4 * H)
    # Acted: a 0, b 0.25 h + 5 s, c waits for b (0.75 h + 5 s). Alone: a 0, b 1.5 h, c 2 h.
    assert q["with_gpusteward"] == round((0.25 * 3600 + 5) / 60, 1)
    assert q["without"] == 90.0
    assert q["jobs"] == 3
    assert q["still_waiting"] == {"with_gpusteward": 0, "without": 0}


def test_the_counterfactual_is_the_same_cluster_left_alone() -> None:
    cluster = SimCluster(seed=9, nodes=2)
    alone = untouched(cluster)
    at = cluster.start + 12 * H
    assert alone.observe(at) == cluster.observe(at)
    assert alone.health.faults == cluster.health.faults


def episode(rule: str, gpu: str, first: datetime) -> FindingEpisode:
    f = Finding(rule, "health", RuleAction.ADVISE, first, (gpu,), None, MappingProxyType({}), 0, 0, 0)
    return FindingEpisode(1, f, first, first, None)


def test_failed_gpus_flagged_and_lead_time() -> None:
    cluster = SimCluster(seed=42)
    until = cluster.start + 24 * H
    cluster.advance_to(until)
    first, second = sorted(cluster.failures(), key=lambda f: f.failed_at)
    episodes = [
        episode("gpu-degrading", first.gpu_uuid, first.failed_at - 90 * timedelta(minutes=1)),
        episode("gpu-degrading", first.gpu_uuid, first.failed_at - 30 * timedelta(minutes=1)),
        episode("gpu-failed", first.gpu_uuid, first.failed_at + timedelta(minutes=2)),
        # After the failure it is no prediction; on another GPU it is not this one's.
        episode("gpu-degrading", second.gpu_uuid, second.failed_at + H),
        episode("gpu-failed", "GPU-sim-07-7", second.failed_at),
        episode("idle-allocation", second.gpu_uuid, second.failed_at),
    ]
    h = health_figures(cluster, episodes, until)
    assert (h["failed_gpus"], h["failed_gpus_flagged"], h["degrading_lead_time_min"]) == (2, 1, 90.0)
    rows = {r["gpu"]: r for r in h["gpu_failures"]}
    assert (rows[first.gpu_uuid]["flagged"], rows[first.gpu_uuid]["lead_time_min"]) == (True, 90.0)
    assert (rows[second.gpu_uuid]["flagged"], rows[second.gpu_uuid]["lead_time_min"]) == (False, None)
    assert health_figures(cluster, [], until)["degrading_lead_time_min"] is None


@pytest.fixture(scope="module")
def half_day() -> DemoResult:
    # 16 h hold both of seed 42's failures (10:16 and 11:06) and hours of their hung jobs at 0 %.
    return run_demo(hours=16)


def test_demo_reports_queue_time(half_day: DemoResult) -> None:
    q = half_day.summary()["queue_time_p50_min"]
    assert isinstance(q, dict)
    assert isinstance(q["with_gpusteward"], float)
    assert isinstance(q["without"], float)
    assert q["with_gpusteward"] < q["without"]  # reclaimed GPUs start waiting jobs sooner
    assert isinstance(q["jobs"], int)
    assert q["jobs"] > 0


def test_demo_flags_failed_gpus_predicts_them_and_stops_no_hung_job(half_day: DemoResult) -> None:
    s = half_day.summary()
    assert s["failed_gpus"] == 2
    assert s["failed_gpus_flagged"] == 2
    lead = s["degrading_lead_time_min"]
    assert isinstance(lead, float)
    assert lead > 0  # gpu-degrading fired before the failure
    assert all(r["lead_time_min"] is not None and r["lead_time_min"] > 0 for r in s["gpu_failures"])
    hung = {r["stuck_workload"] for r in s["gpu_failures"]} - {None}
    assert hung  # at least one job hung on a failed GPU: at 0 % for hours
    assert not hung & {a.workload_id for a in half_day.stops}
    assert s["false_actions"] == 0


def test_demo_meets_each_spot_interruption_with_checkpoints(half_day: DemoResult) -> None:
    s = half_day.summary()
    assert sum(s["instances"].values()) == 8  # one instance per node
    assert s["instances"]["spot"] == 2
    # Seed 42 interrupts a spot node in the morning; the loop signals every workload on it in time.
    assert s["interruptions"] >= 1
    assert s["interruptions_checkpointed"] == s["interruptions"]
    assert s["jobs_lost_progress"] == 0
    assert s["jobs_resumed_from_checkpoint"] >= 1
    # Nobody signalling on the same schedule loses more work (back to each job's own checkpoint).
    assert s["interruption_lost_gpu_hours"] < s["interruption_lost_gpu_hours_without"]
    assert len(half_day.interrupted) == s["interrupted_jobs"]
    for key in ("instances_stopped", "instance_hours_saved", "instance_cost_saved"):
        assert s[key] >= 0


def test_demo_without_cloud_nodes_reports_no_cloud_figures() -> None:
    s = run_demo(hours=1, cloud_nodes=False).summary()
    assert "instances" not in s
    assert "interruptions" not in s
