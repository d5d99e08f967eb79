"""Pure mapping of exporter series: label variants, units, sentinels, MIG, slots, shards."""

from __future__ import annotations

import csv
import random
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import WorkloadKind
from gpusteward.integrations.prometheus.assemble import Assembler
from gpusteward.integrations.prometheus.parse import (
    DEFAULT_SPECS,
    LabelMap,
    clean_value,
    identify_gpu,
    identify_holder,
)
from gpusteward.integrations.prometheus.query import RawSeries, parse_api_result, shard_patterns
from gpusteward.integrations.prometheus.workloads import build_workloads

FIXTURES = Path(__file__).parents[2] / "fixtures" / "prometheus"
IGNORE = re.compile("(nvidia-)?dcgm-exporter.*")
LM = LabelMap()


def exposition(name: str, t: float = 1000.0) -> list[RawSeries]:
    """A real scrape as series of one point each at ``t``."""
    out = []
    # the README snippet quotes its curl command and elides lines with "...": metric lines only
    lines = [x for x in (FIXTURES / name).read_text().splitlines() if not x.startswith(("curl", "...", "`"))]
    for fam in text_string_to_metric_families("\n".join(lines) + "\n"):
        for s in fam.samples:
            out.append(RawSeries({"__name__": s.name, **s.labels}, [(t, repr(s.value))]))
    return out


@pytest.mark.parametrize(
    ("labels", "uuid", "node", "index"),
    [
        ({"UUID": "GPU-1", "Hostname": "n1", "gpu": "3"}, "GPU-1", "n1", 3),
        ({"uuid": "GPU-1", "hostname": "n1", "gpu": "3"}, "GPU-1", "n1", 3),
        ({"uuid": "GPU-1", "instance": "n1:9445", "minor_number": "2"}, "GPU-1", "n1", 2),
        ({"uuid": "GPU-1", "instance": "[::1]:9445"}, "GPU-1", "[::1]:9445", -1),
        (
            {"UUID": "GPU-1", "Hostname": "n1", "gpu": "0", "GPU_I_ID": "3", "GPU_I_PROFILE": "2g.10gb"},
            "GPU-1/3",
            "n1",
            0,
        ),
        ({"UUID": "", "uuid": "GPU-2"}, "GPU-2", "", -1),
    ],
)
def test_gpu_label_variants(labels: dict[str, str], uuid: str, node: str, index: int) -> None:
    gpu = identify_gpu(labels, LM)
    assert gpu is not None
    assert (gpu.uuid, gpu.node, gpu.index) == (uuid, node, index)


def test_a_series_without_uuid_names_no_gpu() -> None:
    assert identify_gpu({"Hostname": "n1", "gpu": "0"}, LM) is None


@pytest.mark.parametrize(
    ("labels", "wid", "kind"),
    [
        ({"pod": "p", "namespace": "ns", "container": "c"}, "pod/ns/p", WorkloadKind.POD),
        ({"pod_name": "p", "pod_namespace": "ns", "container_name": "c"}, "pod/ns/p", WorkloadKind.POD),
        ({"exported_pod": "p", "exported_namespace": "ns", "pod": "dcgm-exporter-1", "namespace": "m"},
         "pod/ns/p", WorkloadKind.POD),
        ({"pod": "nvidia-dcgm-exporter-x", "namespace": "gpu-operator"}, None, None),
        ({"pod": "", "namespace": "", "container": ""}, None, None),
        ({"hpc_job": "42"}, "job/42", WorkloadKind.JOB),
        ({"jobid": "777"}, "job/777", WorkloadKind.JOB),
        ({"pod": "p", "namespace": "ns", "hpc_job": "1"}, "pod/ns/p", WorkloadKind.POD),
        ({}, None, None),
    ],
)  # fmt: skip
def test_holder_label_variants(labels: dict[str, str], wid: str | None, kind: WorkloadKind | None) -> None:
    holder = identify_holder(labels, LM, IGNORE)
    assert (holder.id if holder else None, holder.kind if holder else None) == (wid, kind)


def test_label_overrides_replace_a_role() -> None:
    lm = LabelMap().with_overrides({"pod": ["k8s_pod"]})
    holder = identify_holder({"k8s_pod": "x", "namespace": "n", "pod": "ignored"}, lm, None)
    assert holder is not None
    assert holder.id == "pod/n/x"
    with pytest.raises(ValueError, match="unknown label roles: podd"):
        LabelMap().with_overrides({"podd": ["x"]})


@pytest.mark.parametrize(
    ("raw", "scale", "want"),
    [
        ("5", 1.0, 5.0),
        ("0.5", 100.0, 50.0),
        ("NaN", 1.0, None),
        ("+Inf", 1.0, None),
        ("9223372036854775794", 1.0, None),  # dcgm-exporter README: DCGM int64 blank
        ("2147483632", 1.0, None),  # DCGM int32 blank
        ("140737488355328", 1.0, None),  # DCGM FP64 blank
        ("garbage", 1.0, None),
        ("-3", 1.0, None),  # a glitch, not a very idle GPU: counted, it would be waste
        ("0", 1.0, 0.0),
    ],
)
def test_clean_value(raw: str, scale: float, want: float | None) -> None:
    assert clean_value(raw, scale) == want


def test_real_dcgm_scrape() -> None:
    asm = Assembler(DEFAULT_SPECS, LM, 30, IGNORE)
    for s in exposition("dcgm_datadog_metrics.txt"):
        asm.add(s)
    [slot] = asm.slots()
    t4 = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
    sample = next(s for s in slot.samples if s.gpu_uuid == t4)
    assert (sample.gpu_util_pct, sample.mem_used_mib, sample.temp_c) == (0, 0, 25)
    assert sample.power_w == pytest.approx(8.969)
    assert sample.sm_active_pct is None
    assert sample.proc_cpu_pct is None
    gpu = asm.gpu(t4)
    assert (gpu.node, gpu.index, gpu.model, gpu.memory_total_mib) == ("424773df46e0", 0, "Tesla T4", 15109)
    # the dummy lines without labels name no GPU and are skipped
    assert set(asm.gpus) <= {t4, "GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5", "GPU-abc"}
    assert slot.holders[t4] is None


def test_readme_scrape_with_empty_pod_labels_and_blank_values() -> None:
    series = exposition("dcgm_readme_metrics_snippet.txt")
    labels = series[0].labels
    assert labels["pod"] == ""
    assert identify_holder(labels, LM, IGNORE) is None
    blank = RawSeries({**labels, "__name__": "DCGM_FI_DEV_GPU_TEMP"}, [(1000.0, "9223372036854775794")])
    asm = Assembler(DEFAULT_SPECS, LM, 30)
    asm.add(blank)
    assert [len(s.samples) for s in asm.slots()] == [0]  # only a blank reading: no sample


def test_nvidia_gpu_exporter_scrapes() -> None:
    asm = Assembler(DEFAULT_SPECS, LM, 30)
    for s in exposition("linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.prom.txt"):
        asm.add(s)
    [slot] = asm.slots()
    [sample] = slot.samples
    assert sample.gpu_util_pct == pytest.approx(100)  # ratio 1 → 100 %
    text = (FIXTURES / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.prom.txt").read_text()
    used = float(re.search(r"^nvidia_smi_memory_used_bytes\{.*\} (\S+)$", text, re.M)[1])  # type: ignore[index]
    assert sample.mem_used_mib == pytest.approx(used / 1024 / 1024)
    gpu = asm.gpu(sample.gpu_uuid)
    assert gpu.model == "NVIDIA H100 80GB HBM3"
    assert gpu.index == 0
    assert gpu.memory_total_mib == pytest.approx(81_559, rel=0.01)
    # in MIG mode nvidia-smi reports no utilisation: None, never 0
    mig = Assembler(DEFAULT_SPECS, LM, 30)
    for s in exposition("linux-x86_64__nvidia-h100-mig__590.48.01__idle.prom.txt"):
        mig.add(s)
    [[idle]] = [slot.samples for slot in mig.slots()]
    assert idle.gpu_util_pct is None
    assert idle.mem_used_mib is not None


def test_every_default_dcgm_counter_is_read_or_deliberately_not() -> None:
    rows = (FIXTURES / "dcgm_default-counters.csv").read_text().splitlines()
    enabled = {r[0].strip() for r in csv.reader(x for x in rows if x.strip() and not x.startswith("#"))}
    not_samples = {  # no Sample field: clocks, energy, errors, copy/codec engines, licences, rows
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    }  # fmt: skip
    assert enabled - not_samples <= set(DEFAULT_SPECS)
    assert {"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"} <= set(DEFAULT_SPECS)


def _series(name: str, labels: dict[str, str], *points: tuple[float, str]) -> RawSeries:
    return RawSeries({"__name__": name, **labels}, list(points))


def test_mig_instances_replace_their_parent_and_use_the_graphics_engine() -> None:
    parent = {"UUID": "GPU-p", "Hostname": "n", "gpu": "0", "modelName": "A100"}
    asm = Assembler(DEFAULT_SPECS, LM, 30)
    asm.add(_series("DCGM_FI_DEV_GPU_UTIL", parent, (100.0, "0")))
    for gi, ratio in (("1", "0.02"), ("2", "0.9")):
        mig = {**parent, "GPU_I_ID": gi, "GPU_I_PROFILE": "3g.20gb"}
        asm.add(_series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", mig, (100.0, ratio)))
        asm.add(_series("DCGM_FI_DEV_FB_USED", mig, (100.0, "100")))
    [slot] = asm.slots()
    utils = {s.gpu_uuid: s.gpu_util_pct for s in slot.samples}
    assert utils == {"GPU-p/1": pytest.approx(2), "GPU-p/2": pytest.approx(90)}
    assert set(asm.gpus) == {"GPU-p/1", "GPU-p/2"}
    # a whole GPU reporting both keeps GPU_UTIL
    whole = Assembler(DEFAULT_SPECS, LM, 30)
    whole.add(_series("DCGM_FI_DEV_GPU_UTIL", parent, (100.0, "40")))
    whole.add(_series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", parent, (100.0, "0.9")))
    assert whole.slots()[0].samples[0].gpu_util_pct == 40


def test_one_sample_per_gpu_per_slot_newest_wins_and_holder_follows() -> None:
    lab = {"UUID": "GPU-x", "Hostname": "n"}
    asm = Assembler(DEFAULT_SPECS, LM, 30)
    asm.add(
        _series("DCGM_FI_DEV_GPU_UTIL", {**lab, "pod": "a", "namespace": "n"}, (60.0, "10"), (70.0, "20"))
    )
    asm.add(
        _series("DCGM_FI_DEV_GPU_UTIL", {**lab, "pod": "b", "namespace": "n"}, (80.0, "30"), (95.0, "40"))
    )
    slots = asm.slots()
    assert [(s.start_s, len(s.samples)) for s in slots] == [(60.0, 1), (90.0, 1)]
    first = slots[0]
    assert first.samples[0].gpu_util_pct == 30
    assert first.samples[0].at.timestamp() == 80.0
    holder = first.holders["GPU-x"]
    assert holder is not None
    assert holder.id == "pod/n/b"


def test_build_workloads_groups_gpus_by_holder() -> None:
    a = identify_holder({"pod": "p", "namespace": "ns"}, LM, None)
    j = identify_holder({"hpc_job": "9"}, LM, None)
    from datetime import UTC, datetime

    t = datetime(2024, 1, 1, tzinfo=UTC)
    ws = build_workloads({"g2": a, "g1": a, "g3": j, "g4": None}, {"pod/ns/p": t, "job/9": t}, {"g1": "n1"})
    by = {w.id: w for w in ws}
    assert by["pod/ns/p"].gpu_uuids == ("g1", "g2")
    assert by["pod/ns/p"].ref["node"] == "n1"
    assert "pod_uid" not in by["pod/ns/p"].ref  # no label, no claim
    assert by["job/9"].ref["job_id"] == "9"
    assert by["job/9"].gpus_requested == 1


def test_pod_uid_label_reaches_the_workload_ref() -> None:
    """gpusteward's exporter labels a process with its pod's UID (from the cgroup): the
    Kubernetes source joins by it even where the container has no POD_NAME."""
    from datetime import UTC, datetime

    uid = "6e7520b1-f6e3-45bd-8673-1d64d102fedf"
    h = identify_holder({"pod": "p", "namespace": "ns", "pod_uid": uid}, LM, None)
    assert h is not None
    assert h.pod_uid == uid
    t = datetime(2024, 1, 1, tzinfo=UTC)
    (w,) = build_workloads({"g1": h}, {"pod/ns/p": t}, {"g1": "n1"})
    assert w.ref["pod_uid"] == uid


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 17, 100, 255, 256, 1000])
def test_shards_cover_every_uuid_exactly_once(n: int) -> None:
    rng = random.Random(n)
    uuids = [f"GPU-{rng.getrandbits(128):032x}" for _ in range(300)]
    uuids += [u.upper() for u in uuids[:20]] + ["a", "-", "GPU-x", "GPU-1/2", "GPU-ab-", "MIG-7", "z9", "00"]
    patterns = [re.compile(p) for p in shard_patterns(n)]
    assert len(patterns) == min(max(n, 1), 256)
    for u in uuids:
        hits = sum(1 for p in patterns if p.fullmatch(u)) if n > 1 else 1
        assert hits == 1, u
    if n > 1:
        assert not any(p.fullmatch("") for p in patterns)  # a missing label is no uuid


def test_parse_api_result() -> None:
    series, warnings = parse_api_result(
        {
            "status": "success",
            "warnings": ["partial response"],
            "data": {"resultType": "vector", "result": [{"metric": {"a": "1"}, "value": [10.5, "3"]}]},
        }
    )
    assert series[0].points == [(10.5, "3")]
    assert warnings == ["partial response"]
    with pytest.raises(SourceError, match="bad_data: parse error"):
        parse_api_result({"status": "error", "errorType": "bad_data", "error": "parse error"})
    with pytest.raises(SourceError, match=r"no data\.result"):
        parse_api_result({"status": "success", "data": {}})
    with pytest.raises(SourceError, match="resultType"):
        parse_api_result({"status": "success", "data": {"resultType": "scalar", "result": [{}]}})


def test_a_negative_reading_is_missing_not_a_sample() -> None:
    asm = Assembler(DEFAULT_SPECS, LM, 30, IGNORE)
    for uuid, raw in (("GPU-neg", "-7"), ("GPU-zero", "0")):
        labels = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": uuid, "Hostname": "n1", "gpu": "0"}
        asm.add(RawSeries(labels, [(60.0, raw)]))
    util = {s.gpu_uuid: s.gpu_util_pct for slot in asm.slots() for s in slot.samples}
    assert util.get("GPU-zero") == 0.0  # a real 0 % stays
    assert util.get("GPU-neg") is None  # the glitch is no reading at all
