"""The composite source: Slurm's jobs joined to a metric source's GPUs by node and index."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.errors import SourceError
from gpusteward.domain.integration import Integration
from gpusteward.domain.models import (
    EXCLUDE_UNTIL_KEY,
    PROTECT_KEY,
    Gpu,
    Hold,
    Observation,
    Owner,
    RuleAction,
    Sample,
    Workload,
    WorkloadKind,
)
from gpusteward.integrations.sim import SimClock
from gpusteward.integrations.slurm import JobView, SlurmJob, SlurmSource, parse_jobs_json
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings

FIXTURES = Path(__file__).parents[2] / "fixtures" / "slurm"
START = datetime(2026, 11, 30, 3, 49, 13, tzinfo=UTC)


class Reader:
    """Slurm as the source reads it: a job table the test sets, or a failure."""

    def __init__(self, jobs: list[SlurmJob]) -> None:
        self.view = JobView(tuple(jobs), "22.05.8", "json")
        self.fail: str | None = None

    def jobs(self):
        if self.fail:
            raise SourceError(self.fail)
        return self.view, []

    def job(self, job_id):
        if self.fail:
            raise SourceError(self.fail)
        return next((j for j in self.view.jobs if j.job_id == job_id), None)


class Metrics:
    """GPUs on some nodes, utilisation per (node, index), samples at the asked time unless frozen."""

    name = "testmetrics"

    def __init__(self, nodes: dict[str, int], util: float = 0.0) -> None:
        self.gpus = tuple(
            Gpu(f"GPU-{n}-{i}", n, i, "H100 80GB", 81920.0)
            for n, count in nodes.items()
            for i in range(count)
        )
        self.util = {(g.node, g.index): util for g in self.gpus}
        self.workloads: tuple[Workload, ...] = ()
        self.fail: str | None = None

    def observe(self, now):
        if self.fail:
            raise SourceError(self.fail)
        samples = tuple(
            Sample(
                g.uuid, now, gpu_util_pct=self.util[(g.node, g.index)], mem_used_mib=4096.0, proc_cpu_pct=40.0
            )
            for g in self.gpus
        )
        return Observation(now, self.gpus, samples, self.workloads)

    def close(self):
        pass


def job(job_id: str, gpus: dict[str, tuple[int, ...]], **kw) -> SlurmJob:
    fields = {
        "job_id": job_id,
        "display_id": job_id,
        "name": f"job{job_id}",
        "user": "alice",
        "account": "physics",
        "partition": "gpu",
        "qos": "normal",
        "states": frozenset({"RUNNING"}),
        "started_at": START,
        "time_limit_minutes": 600,
        "nodes": tuple(gpus),
        "gpu_indices": gpus,
        "gpu_count": sum(len(v) for v in gpus.values()),
        "cluster": "c1",
    }
    fields.update(kw)
    return SlurmJob(**fields)


def fixture_jobs() -> list[SlurmJob]:
    view, _ = parse_jobs_json((FIXTURES / "squeue_22.05_gpus_array.json").read_text())
    return list(view.jobs)


def test_join_by_node_and_index_with_fully_qualified_metric_nodes():
    metrics = Metrics({"gst-node1.cluster.example": 4})
    source = SlurmSource(Reader(fixture_jobs()), metrics, contact=lambda u: f"{u}@example.org")
    now = START + timedelta(minutes=5)
    obs = source.observe(now)
    assert obs.errors == ()
    by_id = {w.id: w for w in obs.workloads}
    assert set(by_id) == {"slurm:gst:1", "slurm:gst:2_0", "slurm:gst:2_1"}
    node = "gst-node1.cluster.example"
    assert by_id["slurm:gst:1"].gpu_uuids == (f"GPU-{node}-0", f"GPU-{node}-1")
    assert by_id["slurm:gst:2_0"].gpu_uuids == (f"GPU-{node}-2",)
    w = by_id["slurm:gst:1"]
    assert w.kind is WorkloadKind.JOB
    assert w.owner == Owner("root", "", "root@example.org")
    assert w.gpus_requested == 2
    assert w.started_at == START
    assert w.source == "slurm"
    assert w.ref["job_id"] == "1"
    assert w.ref["requeue"] == "true"
    assert by_id["slurm:gst:2_0"].ref["job_id"] == "3", "scancel gets Slurm's own id of the array task"
    assert w.annotations["slurm.time_limit_minutes"] == "90"
    assert w.labels["slurm.partition"] == "debug"
    # The metric source's uuids, GPUs and samples pass through; the samples keep their own time.
    assert {g.uuid for g in obs.gpus} == {g.uuid for g in metrics.gpus}
    assert all(s.at == now for s in obs.samples)


def test_node_names_map_slurm_names_to_metric_names():
    metrics = Metrics({"a100-07-ib": 2, "10.0.0.8": 1, "10.0.0.9": 1})
    jobs = [job("5", {"a100-07": (1,)}), job("6", {"b1": (0,)}), job("7", {"10": (0,)})]
    source = SlurmSource(Reader(jobs), metrics, node_names={"a100-07": "a100-07-ib", "b1": "10.0.0.9"})
    by_id = {w.id: w.gpu_uuids for w in source.observe(START).workloads}
    assert by_id["slurm:c1:5"] == ("GPU-a100-07-ib-1",)
    assert by_id["slurm:c1:6"] == ("GPU-10.0.0.9-0",)
    assert by_id["slurm:c1:7"] == ("slurm:10:0",), "an IP address is never shortened into a node name"


def test_gpus_the_metric_source_lacks_get_placeholders_and_the_job_is_never_judged():
    metrics = Metrics({"n1": 2})  # n1 has GPUs 0-1 in the metric source; the job also holds n1/gpu3
    source = SlurmSource(Reader([job("7", {"n1": (1, 3)})]), metrics)
    obs = source.observe(START)
    (w,) = obs.workloads
    assert w.gpu_uuids == ("GPU-n1-1", "slurm:n1:3")
    assert "slurm:n1:3" in {g.uuid for g in obs.gpus}
    assert "slurm:n1:3" not in {s.gpu_uuid for s in obs.samples}
    assert obs.errors == ("slurm job 7: no metrics for n1/gpu3; it is not judged",)


def test_gpus_without_indices_borrow_from_metric_job_labels_or_stay_unknown():
    metrics = Metrics({"n1": 4})
    holder = Workload(
        "proc:1",
        WorkloadKind.PROCESS,
        "python",
        Owner("alice"),
        1,
        ("GPU-n1-2",),
        START,
        labels={"hpc_job": "8"},
    )
    # What the prometheus source makes of a dcgm-exporter series labelled hpc_job="10".
    prom = Workload(
        "job/10",
        WorkloadKind.JOB,
        "10",
        Owner(""),
        1,
        ("GPU-n1-3",),
        START,
        source="prometheus",
        ref={"job_id": "10"},
    )
    metrics.workloads = (holder, prom)
    # Slurm allocated GPUs but did not say which (IDX:N/A, or an old Slurm without gres_detail).
    eight = job("8", {}, nodes=("n1",), gpu_count=1)
    nine = job("9", {}, nodes=("n1",), gpu_count=2)
    ten = job("10", {}, nodes=("n1",), gpu_count=1)
    obs = SlurmSource(Reader([eight, nine, ten]), metrics).observe(START)
    by_id = {w.id: w for w in obs.workloads}
    assert by_id["slurm:c1:8"].gpu_uuids == ("GPU-n1-2",)
    assert by_id["slurm:c1:10"].gpu_uuids == ("GPU-n1-3",)
    assert by_id["slurm:c1:9"].gpu_uuids == ("slurm:9:unknown0", "slurm:9:unknown1")
    assert any("job 9" in e and "no index" in e for e in obs.errors)


def test_protections_and_exclusion_become_annotations():
    jobs = [
        job("1", {"n1": (0,)}, comment="resubmit; gpusteward:protect"),
        job("2", {"n1": (1,)}, partition="interactive"),
        job("3", {"n1": (2,)}, qos="urgent"),
        job("4", {"n1": (3,)}, comment="gpusteward:exclude-until=2030-01-01T00:00:00Z"),
        job("5", {"n2": (0,)}, comment="not-gpusteward:protected"),
    ]
    source = SlurmSource(
        Reader(jobs), Metrics({"n1": 4, "n2": 1}), protect_partitions=["interactive"], protect_qos=["urgent"]
    )
    by_id = {w.id.rsplit(":", 1)[1]: w for w in source.observe(START).workloads}
    assert by_id["1"].annotations[PROTECT_KEY] == "true"
    assert by_id["1"].annotations["gpusteward.io/protect-reason"] == "job comment has gpusteward:protect"
    assert by_id["2"].annotations["gpusteward.io/protect-reason"] == "partition interactive is protected"
    assert by_id["3"].annotations["gpusteward.io/protect-reason"] == "QOS urgent is protected"
    assert PROTECT_KEY not in by_id["4"].annotations
    assert by_id["4"].annotations[EXCLUDE_UNTIL_KEY] == "2030-01-01T00:00:00Z"
    assert PROTECT_KEY not in by_id["5"].annotations


def test_only_running_gpu_jobs_are_workloads():
    jobs = [
        job("1", {"n1": (0,)}),
        job("2", {"n1": (1,)}, states=frozenset({"RUNNING", "COMPLETING"})),
        job("3", {}, states=frozenset({"PENDING"}), started_at=None, nodes=(), gpu_count=2),
        job("4", {}, nodes=("n1",), gpu_count=0),
        job("5", {"n1": (2,)}, started_at=None),
    ]
    obs = SlurmSource(Reader(jobs), Metrics({"n1": 4})).observe(START)
    assert [w.id for w in obs.workloads] == ["slurm:c1:1"]
    assert obs.errors == ("slurm job 5: job 5 is running without a start time",)


def test_either_side_failing_fails_the_observation():
    reader, metrics = Reader([job("1", {"n1": (0,)})]), Metrics({"n1": 1})
    source = SlurmSource(reader, metrics)
    reader.fail = "squeue --json timed out after 30 s"
    with pytest.raises(SourceError, match="slurm: cannot read the job table: squeue --json timed out"):
        source.observe(START)
    reader.fail, metrics.fail = None, "connection refused"
    with pytest.raises(SourceError, match="slurm: metric source testmetrics failed: connection refused"):
        source.observe(START)


def test_fresh_reads_the_job_now():
    reader = Reader([job("1", {"n1": (0,)})])
    source = SlurmSource(reader, Metrics({"n1": 1}))
    (w,) = source.observe(START).workloads
    assert source.fresh(w) == w
    reader.view = replace(reader.view, jobs=(job("1", {"n1": (0,)}, states=frozenset({"COMPLETED"})),))
    assert source.fresh(w) is None
    reader.fail = "down"
    with pytest.raises(SourceError):
        source.fresh(w)


def _steward(tmp_path, source):
    settings = load_settings(
        None,
        mode="enforce",
        tick_seconds=60,
        store={"url": f"sqlite:///{tmp_path / 'state.db'}"},
        policy={"startup_grace_minutes": 0},
    )
    clock = SimClock(START + timedelta(minutes=1))
    integration = Integration(name="slurm", source=source)
    steward, _ = build_steward(settings, clock=clock, notifier=MemoryNotifier(), integration=integration)
    return steward, clock


def test_a_job_with_an_unmeasured_gpu_is_never_warned(tmp_path):
    metrics = Metrics({"n1": 2})
    source = SlurmSource(Reader([job("1", {"n1": (0,)}), job("2", {"n1": (1, 3)})]), metrics)
    steward, clock = _steward(tmp_path, source)
    for _ in range(40):
        steward.tick()
        clock.advance(60)
    # The fully measured job on the same node is warned: the data was there to judge it.
    assert "warn-1" in {a.step for a in steward.store.actions(workload_id="slurm:c1:1")}
    assert steward.store.actions(workload_id="slurm:c1:2") == []
    assert {d.hold for d in steward.store.decisions_for("slurm:c1:2")} <= {Hold.STALE}


def test_per_gpu_attribution_gives_right_size_advice(tmp_path):
    metrics = Metrics({"n1": 4})
    metrics.util[("n1", 0)] = 90.0  # a 2-GPU job that only uses one of them
    source = SlurmSource(Reader([job("1", {"n1": (0, 2)})]), metrics)
    steward, clock = _steward(tmp_path, source)
    findings = []
    for _ in range(70):
        findings += steward.tick().findings
        clock.advance(60)
    advice = [f for f in findings if f.rule == "overprovisioned"]
    assert advice
    assert {f.action for f in advice} == {RuleAction.ADVISE}
    assert {f.gpu_uuids for f in advice} == {("GPU-n1-2",)}
    assert not [f for f in findings if f.action is RuleAction.RECLAIM]
