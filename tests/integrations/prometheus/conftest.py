"""A real Prometheus, backfilled with a planted cluster whose exposition is built from real scrapes.

Every planted GPU carries the labels of a real exporter line (dcgm-exporter's Tesla T4
scrape, jobstats' and nvidia_gpu_exporter's names) in one of the label variants seen in
the field, and is either idle or busy; the tests assert gpusteward finds exactly the
idle, held ones.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpusteward.integrations.prometheus.localserver import (
    LocalPrometheus,
    Series,
    binaries,
    write_openmetrics,
)
from gpusteward.runtime.config import Settings, load_settings

FIXTURES = Path(__file__).parents[2] / "fixtures" / "prometheus"
MIB = 1024 * 1024


def need_prometheus() -> None:
    """Skip without Debian's prometheus, except under CI where it must be installed."""
    if binaries() is None:
        msg = "prometheus/promtool not installed (apt-get install prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


def real_labels(metric: str, file: str = "dcgm_datadog_metrics.txt") -> dict[str, str]:
    """The label set of the first sample of ``metric`` in a real scrape."""
    text = (FIXTURES / file).read_text()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == metric and s.labels:
                return dict(s.labels)
    raise LookupError(metric)


@dataclass
class Planted:
    """One planted GPU: its series, and what gpusteward should conclude."""

    key: str  # the uuid gpusteward should use
    #: (metric, labels, kind of value[, (from, to) seconds before the end])
    series: list[tuple[str, dict[str, str], str]] | list[tuple[str, dict[str, str], str, tuple[int, int]]]
    workload: str | None  # expected holder id
    idle: bool
    stale: bool = False
    young: bool = False  # its holder arrived too recently to be judged
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def expect_found(self) -> bool:
        return self.idle and self.workload is not None and not self.stale and not self.young


def _dcgm(uuid: str, host: str, gpu: int, *, lower: bool = False, **holder: str) -> dict[str, str]:
    base = real_labels("DCGM_FI_DEV_GPU_UTIL")
    base.pop("UUID"), base.pop("Hostname")
    ident = {"uuid": uuid, "hostname": host} if lower else {"UUID": uuid, "Hostname": host}
    return {**base, **ident, "gpu": str(gpu), **holder}


def _dcgm_series(labels: dict[str, str], *, mig: bool = False) -> list[tuple[str, dict[str, str], str]]:
    util = (
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, "ratio") if mig else ("DCGM_FI_DEV_GPU_UTIL", labels, "pct")
    )
    return [
        util,
        ("DCGM_FI_DEV_FB_USED", labels, "mem_mib"),
        ("DCGM_FI_DEV_FB_FREE", labels, "free_mib"),
        ("DCGM_FI_DEV_POWER_USAGE", labels, "power"),
        ("DCGM_FI_DEV_GPU_TEMP", labels, "temp"),
    ]


def planted_cluster() -> list[Planted]:
    """Every label variant of the issue, idle and busy, plus a stale GPU and a MIG card."""
    out: list[Planted] = []

    def dcgm(name: str, idle: bool, workload: str | None, **kw: object) -> None:
        lower = bool(kw.pop("lower", False))
        stale = bool(kw.pop("stale", False))
        labels = _dcgm(
            f"GPU-{name}", f"node-{name[:1]}", len(out) % 8, lower=lower, **{k: str(v) for k, v in kw.items()}
        )
        out.append(Planted(f"GPU-{name}", _dcgm_series(labels), workload, idle, stale))

    # dcgm-exporter scraped with honor_labels: pod / namespace / container
    dcgm("a1", True, "pod/ml/notebook-a", pod="notebook-a", namespace="ml", container="jupyter")
    dcgm("a2", False, "pod/ml/train-a", pod="train-a", namespace="ml", container="trainer")
    # lower-case hostname / uuid, and the old cAdvisor-style pod_name / pod_namespace / container_name
    dcgm("b1", True, "pod/research/train-b", lower=True, pod_name="train-b", pod_namespace="research",
         container_name="main")  # fmt: skip
    dcgm("b2", False, "pod/research/busy-b", lower=True, pod_name="busy-b", pod_namespace="research")
    # without honor_labels: the workload is exported_*, pod/namespace are the exporter's own
    exporter = {
        "pod": "nvidia-dcgm-exporter-x1",
        "namespace": "gpu-operator",
        "container": "nvidia-dcgm-exporter",
    }
    dcgm("c1", True, "pod/team-c/svc-c", exported_pod="svc-c", exported_namespace="team-c",
         exported_container="srv", **exporter)  # fmt: skip
    # empty pod labels: nobody holds the GPU (and only the exporter's pod, once relabelled)
    dcgm("d1", True, None, pod="", namespace="", container="")
    dcgm("e1", True, None, **exporter)
    # a Slurm job through DCGM's HPC job mapping
    dcgm("g1", True, "job/4242", hpc_job="4242")
    dcgm("g2", False, "job/4243", hpc_job="4243")
    # a multi-GPU pod idle on both GPUs
    dcgm("m1", True, "pod/ml/multi", pod="multi", namespace="ml")
    dcgm("m2", True, "pod/ml/multi", pod="multi", namespace="ml")
    # idle, held, but its exporter stopped 10 minutes ago: no data is not idleness
    dcgm("l1", True, "pod/ml/stale-l", pod="stale-l", namespace="ml", stale=True)

    # a GPU handed from one pod to another ten minutes ago, idle all along: the new pod is too
    # young to judge, and the old pod's idle hour must not count against it
    old = _dcgm("GPU-n1", "node-n", 0, pod="old-n", namespace="ml")
    new = {**old, "pod": "new-n"}
    handover = [
        *[(m, lab, kind, (4500, 600)) for m, lab, kind in _dcgm_series(old)],
        *[(m, lab, kind, (590, 0)) for m, lab, kind in _dcgm_series(new)],
    ]
    out.append(Planted("GPU-n1", handover, "pod/ml/new-n", True, young=True))

    # MIG: instances report GR_ENGINE_ACTIVE, no GPU_UTIL; the parent's own series is dropped
    parent = _dcgm("GPU-f0", "node-f", 0, pod="", namespace="")
    parent["modelName"] = "NVIDIA A100-SXM4-40GB"
    for gi, (idle, pod) in {"1": (True, "mig-small"), "2": (False, "mig-busy")}.items():
        mig = {**parent, "GPU_I_ID": gi, "GPU_I_PROFILE": "1g.5gb", "pod": pod, "namespace": "ml"}
        out.append(Planted(f"GPU-f0/{gi}", _dcgm_series(mig, mig=True), f"pod/ml/{pod}", idle))
    out.append(
        Planted("GPU-f0", [("DCGM_FI_DEV_GPU_UTIL", parent, "pct")], None, False, extra={"parent": "1"})
    )

    # Princeton jobstats: nvidia_gpu_* with jobid
    for name, idle in (("h1", True), ("h2", False)):
        labels = {
            "uuid": f"GPU-{name}",
            "minor_number": "0",
            "name": "NVIDIA A100",
            "instance": f"node-h{name[1]}:9445",
            "jobid": f"77{name[1]}",
            "cluster": "della",
        }
        series = [
            ("nvidia_gpu_duty_cycle", labels, "pct"),
            ("nvidia_gpu_memory_used_bytes", labels, "mem_bytes"),
            ("nvidia_gpu_memory_total_bytes", labels, "total_bytes"),
            ("nvidia_gpu_power_usage_milliwatts", labels, "power_mw"),
        ]
        out.append(Planted(f"GPU-{name}", series, f"job/77{name[1]}", idle))

    # gpusteward's own node exporter: per-GPU series, holders from its per-process series
    own = {"UUID": "GPU-i1", "Hostname": "node-i", "gpu": "0", "modelName": "NVIDIA H100", "gpu_instance": ""}
    proc = {**own, "pid": "4711", "user": "alice", "pod": "agent-i", "namespace": "ops", "type": "compute"}
    own_series = [
        ("gpusteward_gpu_utilization_percent", own, "pct"),
        ("gpusteward_gpu_memory_used_bytes", own, "mem_bytes"),
        ("gpusteward_gpu_memory_total_bytes", own, "total_bytes"),
        ("gpusteward_process_gpu_memory_used_bytes", proc, "mem_bytes"),
    ]
    out.append(Planted("GPU-i1", own_series, "pod/ops/agent-i", True))
    # ... and a bare process in a Slurm job on another GPU, busy
    own2 = {**own, "UUID": "GPU-i2", "gpu": "1"}
    job = {**own2, "pid": "4712", "user": "bob", "slurm_job": "9001", "type": "compute"}
    own2_series = [
        ("gpusteward_gpu_utilization_percent", own2, "pct"),
        ("gpusteward_gpu_memory_used_bytes", own2, "mem_bytes"),
        ("gpusteward_process_gpu_memory_used_bytes", job, "mem_bytes"),
    ]
    out.append(Planted("GPU-i2", own2_series, "job/9001", False))
    # utkuozdemir/nvidia_gpu_exporter: no holder labels, so never judged, but read
    smi_file = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.prom.txt"
    smi = {
        **real_labels("nvidia_smi_utilization_gpu_ratio", smi_file),
        "uuid": "GPU-k1",
        "instance": "node-k:9835",
    }
    out.append(
        Planted(
            "GPU-k1",
            [
                ("nvidia_smi_utilization_gpu_ratio", smi, "ratio"),
                ("nvidia_smi_memory_used_bytes", smi, "mem_bytes"),
            ],
            None,
            True,
        )
    )
    return out


def _value(kind: str, idle: bool, t: float) -> float:
    wobble = (math.sin(t / 97.0) + 1) / 2  # 0..1, deterministic
    util = 1.0 + 2 * wobble if idle else 60.0 + 30 * wobble
    mem = 20_000.0 if idle else 30_000.0
    return {
        "pct": util,
        "ratio": util / 100,
        "mem_mib": mem,
        "free_mib": 40_960.0 - mem,
        "mem_bytes": mem * MIB,
        "total_bytes": 40_960.0 * MIB,
        "power": 60.0 if idle else 300.0,
        "power_mw": 60_000.0 if idle else 300_000.0,
        "temp": 35.0 if idle else 70.0,
    }[kind]


def cluster_series(
    gpus: list[Planted], end_s: float, minutes: float = 75, step_s: float = 10
) -> list[Series]:
    """Points every ``step_s`` up to ``end_s`` (stale GPUs stop 10 minutes earlier)."""
    out: list[Series] = []
    n = int(minutes * 60 / step_s)
    for g in gpus:
        stop = end_s - 600 if g.stale else end_s
        times = [end_s - i * step_s for i in range(n, -1, -1)]
        for metric, labels, kind, *span in g.series:
            lo, hi = span[0] if span else (math.inf, -math.inf)
            pts = [(t, _value(kind, g.idle, t)) for t in times if t <= stop and end_s - lo <= t <= end_s - hi]
            out.append((metric, {k: v for k, v in labels.items() if v != ""}, pts))
    return out


@pytest.fixture
def need_prom() -> None:
    need_prometheus()


@pytest.fixture(scope="session")
def planted() -> list[Planted]:
    return planted_cluster()


@pytest.fixture(scope="session")
def end_s() -> float:
    """The planted data's last timestamp: two minutes ago, on the 10 s grid."""
    import time

    return math.floor((time.time() - 120) / 10) * 10


StartProm = Callable[..., LocalPrometheus]


@pytest.fixture(scope="session")
def prom_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartProm]:
    """Start Prometheus servers over given series; all are stopped at the end."""
    started: list[LocalPrometheus] = []

    def start(series: list[Series], *extra_args: str, name: str = "prom") -> LocalPrometheus:
        need_prometheus()
        work = tmp_path_factory.mktemp(name)
        om = work / "data.om"
        with om.open("w") as f:
            write_openmetrics(f, series)
        prom = LocalPrometheus(work, om, extra_args=extra_args)
        prom.start()
        started.append(prom)
        return prom

    yield start
    for p in started:
        p.stop()


@pytest.fixture(scope="session")
def cluster_data(planted: list[Planted], end_s: float) -> list[Series]:
    return cluster_series(planted, end_s)


@pytest.fixture(scope="session")
def cluster_prom(prom_factory: StartProm, cluster_data: list[Series]) -> LocalPrometheus:
    return prom_factory(cluster_data, name="cluster")


@pytest.fixture(scope="session")
def expected(planted: list[Planted]) -> tuple[set[str], set[str]]:
    """(workload ids, GPU uuids) gpusteward must report as wasteful."""
    found = [p for p in planted if p.expect_found]
    return {p.workload for p in found if p.workload}, {p.key for p in found}


@pytest.fixture
def prom_settings(tmp_path: Path) -> Callable[..., Settings]:
    """Settings for the prometheus source at ``url`` (tick 30 s, 4 h window: the default pack's
    longest rule reads 3.5 h). The planted pods are batch work: the series carry no owner kind,
    so the tests say so, as an operator of a training cluster would."""

    def make(url: str, **prometheus: object) -> Settings:
        return load_settings(
            None,
            tick_seconds=30,
            source={"name": "prometheus", "prometheus": {"url": url, "default_class": "batch", **prometheus}},
            store={"url": f"sqlite:///{tmp_path / 'state.db'}", "window_minutes": 240},
        )

    return make
