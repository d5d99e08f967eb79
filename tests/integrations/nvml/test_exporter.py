"""``gpusteward exporter``: a real HTTP server on 127.0.0.1 scraped like Prometheus would."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpusteward.integrations.nvml.choke import Nvml
from gpusteward.integrations.nvml.exporter import PROCESS_LABELS, NodeCollector, serve
from gpusteward.integrations.nvml.fake import FakeNode, FakeNvmlLib
from gpusteward.integrations.nvml.procfs import ProcReader
from gpusteward.integrations.nvml.sampler import NvmlSampler

from .conftest import CGROUPS, FakePid, capture, users

MIB = 1024 * 1024


def collector_for(node: FakeNode, root: Path) -> NodeCollector:
    nvml = Nvml(FakeNvmlLib(node))
    nvml.start()
    return NodeCollector(NvmlSampler(nvml), ProcReader(root, users=users, clock_ticks=100), "gpu-node-7")


@pytest.fixture
def scrape() -> Iterator[Callable[[NodeCollector], dict[str, list[Sample]]]]:
    servers = []

    def run(collector: NodeCollector) -> dict[str, list[Sample]]:
        server, _ = serve(collector, 0, "127.0.0.1")  # port 0: the kernel picks a free one
        servers.append(server)
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = resp.read().decode()
        out: dict[str, list[Sample]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, []).append(s)
        return out

    yield run
    for server in servers:
        server.shutdown()
        server.server_close()


def one(samples: list[Sample], **labels: str) -> Sample:
    hits = [s for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (labels, hits)
    return hits[0]


def test_per_process_metrics_carry_who_and_where(
    proc_root: Callable[[dict[int, FakePid]], Path],
    scrape: Callable[[NodeCollector], dict[str, list[Sample]]],
) -> None:
    root = proc_root(
        {
            11327: FakePid(comm="memhog", uid=1000, cgroup=(CGROUPS / "slurm-v1-task.cgroup").read_text()),
            11328: FakePid(
                comm="memhog",
                uid=1001,
                cgroup=(CGROUPS / "k8s-containerd-v2-burstable.cgroup").read_text(),
                env={"POD_NAMESPACE": "research", "POD_NAME": "trainer-0"},
                write_bytes=123456,
            ),
            # 11345 (gpu_burn) has no /proc entry: exported with empty attribution.
        }
    )
    m = scrape(collector_for(capture("linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01", "load"), root))
    used = m["gpusteward_process_gpu_memory_used_bytes"]
    assert set(used[0].labels) == set(PROCESS_LABELS)
    slurm = one(used, pid="11327")
    assert slurm.value == 2566 * MIB
    assert slurm.labels["user"] == "alice"
    assert slurm.labels["slurm_job"] == "4242"
    assert slurm.labels["Hostname"] == "gpu-node-7"
    assert slurm.labels["gpu"] == "0"
    assert slurm.labels["UUID"] == "GPU-00000000-0000-0000-0000-000000000000"
    pod = one(used, pid="11328")
    assert (pod.labels["user"], pod.labels["pod"], pod.labels["namespace"]) == (
        "bob",
        "trainer-0",
        "research",
    )
    assert len(pod.labels["container"]) == 12
    # The pod's UID comes from the cgroup path, whatever the container's environment says.
    assert pod.labels["pod_uid"] == "6e7520b1-f6e3-45bd-8673-1d64d102fedf"
    assert slurm.labels["pod_uid"] == ""
    assert pod.labels["command"] == "memhog"
    burn = one(used, pid="11345")
    assert burn.value == 15690 * MIB
    assert burn.labels["user"] == ""
    # pmon saw gpu_burn at 99 % SM; the memhogs ran no kernel: no series, not a 0.
    sm = m["gpusteward_process_sm_utilization_percent"]
    assert [(s.labels["pid"], s.value) for s in sm] == [("11345", 99.0)]
    assert one(m["gpusteward_process_write_bytes_total"], pid="11328").value == 123456
    assert one(m["gpusteward_process_cpu_seconds_total"], pid="11327").value == pytest.approx(1.1)
    assert {s.labels["pid"] for s in m["gpusteward_process_start_time_seconds"]} == {"11327", "11328"}


def test_per_gpu_metrics_match_the_capture(
    proc_root: Callable[[dict[int, FakePid]], Path],
    scrape: Callable[[NodeCollector], dict[str, list[Sample]]],
) -> None:
    m = scrape(collector_for(capture("linux-x86_64__nvidia-h200__590.48.01", "load"), proc_root({})))
    labels = {"UUID": "GPU-00000000-0000-0000-0000-000000000000", "gpu": "0", "Hostname": "gpu-node-7"}
    assert one(m["gpusteward_gpu_utilization_percent"], **labels).value == 100.0
    assert one(m["gpusteward_gpu_memory_used_bytes"], **labels).value == 32362 * MIB
    assert one(m["gpusteward_gpu_memory_total_bytes"], **labels).value == 143771 * MIB
    assert one(m["gpusteward_gpu_power_watts"], **labels).value == pytest.approx(627.40)
    assert one(m["gpusteward_gpu_temperature_celsius"], **labels).value == 52.0
    assert one(m["gpusteward_gpu_info"], **labels).labels["driver_version"] == "590.48.01"
    assert one(m["gpusteward_gpu_info"], **labels).labels["modelName"] == "NVIDIA H200"


def test_mig_instances_are_series_of_their_own_and_missing_values_are_absent(
    proc_root: Callable[[dict[int, FakePid]], Path],
    scrape: Callable[[NodeCollector], dict[str, list[Sample]]],
) -> None:
    m = scrape(collector_for(capture("linux-x86_64__nvidia-h100-mig__590.48.01", "load"), proc_root({})))
    info = m["gpusteward_gpu_info"]
    assert len(info) == 5  # the parent and its four instances
    inst = one(info, UUID="MIG-00000000-0000-0000-0000-000000000000")
    assert inst.labels["gpu_instance"] == "2"
    assert inst.labels["parent_uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    # NVML gives no utilisation on a MIG-enabled GPU: the family is empty, not zeros.
    assert "gpusteward_gpu_utilization_percent" not in m
    mem = one(m["gpusteward_gpu_memory_used_bytes"], UUID="MIG-00000000-0000-0000-0000-000000000000")
    assert mem.value == 11091 * MIB
    assert {s.labels["UUID"] for s in m["gpusteward_process_gpu_memory_used_bytes"]} == {
        "MIG-00000000-0000-0000-0000-000000000000"
    }
    unavailable = {s.labels["function"] for s in m["gpusteward_nvml_function_unavailable"]}
    assert "nvmlDeviceGetUtilizationRates" in unavailable


def test_an_idle_gpu_without_processes(
    proc_root: Callable[[dict[int, FakePid]], Path],
    scrape: Callable[[NodeCollector], dict[str, list[Sample]]],
) -> None:
    m = scrape(collector_for(capture("linux-x86_64__nvidia-l40s__595.80", "idle"), proc_root({})))
    assert "gpusteward_process_gpu_memory_used_bytes" not in m
    assert one(m["gpusteward_gpu_memory_used_bytes"]).value == 0.0
    assert m["gpusteward_exporter_scrape_errors"][0].value == 0.0


def test_health_gauges_follow_the_capture_and_an_injected_xid(
    proc_root: Callable[[dict[int, FakePid]], Path],
    scrape: Callable[[NodeCollector], dict[str, list[Sample]]],
) -> None:
    lib = FakeNvmlLib(capture("linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01", "load"))
    nvml = Nvml(lib)
    nvml.start()
    collector = NodeCollector(NvmlSampler(nvml), ProcReader(proc_root({}), users=users), "gpu-node-7")
    m = scrape(collector)
    assert one(m["gpusteward_gpu_pcie_replays"]).value == 9.0  # the capture's "Replays Since Reset"
    assert one(m["gpusteward_gpu_ecc_uncorrected_errors"]).value == 0.0
    assert one(m["gpusteward_gpu_xid_code"]).value == 0.0
    lib.inject_xid(0, 79)
    m = scrape(collector)
    assert one(m["gpusteward_gpu_xid_code"]).value == 79.0
    assert one(m["gpusteward_gpu_xid_fatal"]).value == 1.0


def test_health_a_board_cannot_read_is_absent_not_zero(
    proc_root: Callable[[dict[int, FakePid]], Path],
    scrape: Callable[[NodeCollector], dict[str, list[Sample]]],
) -> None:
    m = scrape(
        collector_for(
            capture("linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05", "idle"), proc_root({})
        )
    )
    assert "gpusteward_gpu_ecc_corrected_errors" not in m  # no ECC on a GeForce
    assert "gpusteward_gpu_retired_pages" not in m
    assert one(m["gpusteward_gpu_throttled"]).value == 0.0
