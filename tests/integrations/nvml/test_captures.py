"""What the nvml source reports, checked against the real captures it replays.

Every capture and phase (H100, H200, MIG, L40S, RTX; idle and under load) and every
``-q -x`` XML (A100 MIG, T4, A10G, dual-GPU boxes, ...) goes through the fake library, the
choke point, the sampler and the source; the expected values are read straight from the
capture text here, with nothing shared with the parsers under test.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpusteward.domain.models import Observation
from gpusteward.integrations.nvml.captures import (
    number,
    parse_list,
    parse_pmon,
    parse_query_text,
    split_capture,
)
from gpusteward.integrations.nvml.choke import Nvml
from gpusteward.integrations.nvml.fake import FakeNode, FakeNvmlLib
from gpusteward.integrations.nvml.procfs import ProcReader
from gpusteward.integrations.nvml.settings import NvmlSourceSettings
from gpusteward.integrations.nvml.source import NvmlSource

from .conftest import CAPTURES, XMLS, capture, write_proc, xml

NOW = datetime(2026, 7, 14, 9, 0, tzinfo=UTC)


def observe(node: FakeNode, tmp_path: Path, **settings: object) -> Observation:
    source = NvmlSource(
        Nvml(FakeNvmlLib(node)),
        NvmlSourceSettings(node="gpu-node-1", **settings),  # type: ignore[arg-type]
        procs=ProcReader(write_proc(tmp_path / "proc", {}), clock_ticks=100),
    )
    return source.observe(NOW)


def section(text: str, phase: str, title: str) -> str:
    m = re.search(rf"^# {phase} :: {re.escape(title)}.*?\n#{{80}}\n(.*?)(?=^#{{80}}$|\Z)", text, re.M | re.S)
    assert m, (phase, title)
    return m.group(1)


def csv_rows(text: str) -> list[dict[str, str]]:
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    return [dict(zip(rows[0], r, strict=True)) for r in rows[1:] if r]


def mib(text: str) -> float | None:
    return None if "N/A" in text else float(text.split()[0])


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
@pytest.mark.parametrize("phase", ["idle", "load"])
def test_gpus_and_samples_match_the_query_gpu_csv(path: Path, phase: str, tmp_path: Path) -> None:
    text = path.read_text()
    row = csv_rows(section(text, phase, "query-gpu (csv"))[0]
    obs = observe(capture(path.stem, phase), tmp_path)
    mig_on = row["mig.mode.current"] == "Enabled"
    if mig_on:
        # The MIG instances are the GPUs; the parent is not listed.
        assert all(g.uuid.startswith("MIG-") for g in obs.gpus)
        assert len(obs.gpus) == len(re.findall(r"^\s+MIG .*Device\s+\d+:", text, re.M))
        return
    (gpu,) = obs.gpus
    (sample,) = obs.samples
    assert gpu.uuid == row["uuid"]
    assert gpu.model == row["name"]
    assert gpu.node == "gpu-node-1"
    assert gpu.memory_total_mib == mib(row["memory.total [MiB]"])
    assert sample.at == NOW
    assert sample.mem_used_mib == mib(row["memory.used [MiB]"])
    assert sample.gpu_util_pct == float(row["utilization.gpu [%]"].split()[0])
    assert sample.power_w == pytest.approx(float(row["power.draw [W]"].split()[0]), abs=0.001)
    assert sample.temp_c == float(row["temperature.gpu"])
    assert sample.sm_active_pct is None  # NVML has no SM-active counter (DCGM has)
    q = section(text, phase, "query (-q)")
    rx = re.search(r"Rx Throughput\s+:\s+(\d+) KB/s", q)
    assert rx
    assert sample.pcie_rx_bytes_per_s == float(rx.group(1)) * 1024


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
@pytest.mark.parametrize("phase", ["idle", "load"])
def test_workloads_match_the_compute_apps_csv(path: Path, phase: str, tmp_path: Path) -> None:
    text = path.read_text()
    apps = csv_rows(section(text, phase, "query-compute-apps"))
    obs = observe(capture(path.stem, phase), tmp_path)
    want = {int(a["pid"]) for a in apps}
    assert {int(w.ref["pid"]) for w in obs.workloads} == want
    if not apps:
        assert obs.workloads == ()  # the "no process" captures: nothing holds the GPU
    gpus = {g.uuid for g in obs.gpus}
    for w in obs.workloads:
        assert w.id == f"process:gpu-node-1:{w.ref['pid']}"
        assert w.gpus_requested == len(w.gpu_uuids) == 1
        assert set(w.gpu_uuids) <= gpus
    # No process is attributed: the recorded /proc is empty, and the source says so.
    if apps:
        assert any("no /proc entry" in e for e in obs.errors)


def test_h100_mig_load_puts_each_process_on_its_instance(tmp_path: Path) -> None:
    name = "linux-x86_64__nvidia-h100-mig__590.48.01"
    text = (CAPTURES[0].parent / f"{name}.txt").read_text()
    listing = parse_list(section(text, "capabilities", "list (-L)"))
    obs = observe(capture(name, "load"), tmp_path)
    want = {uuid: f"NVIDIA H100 80GB HBM3 MIG {profile}" for profile, _, uuid in listing[0]}
    assert {g.uuid: g.model for g in obs.gpus} == want
    used = {s.gpu_uuid: s.mem_used_mib for s in obs.samples}
    # -q: GI 2 (device 0) 11091 MiB used, the others nearly empty.
    assert used == {
        "MIG-00000000-0000-0000-0000-000000000000": 11091.0,
        "MIG-00000001-0000-0000-0000-000000000001": 17.0,
        "MIG-00000002-0000-0000-0000-000000000002": 9.0,
        "MIG-00000003-0000-0000-0000-000000000003": 9.0,
    }
    assert {g.memory_total_mib for g in obs.gpus} == {40448.0, 20096.0, 9984.0}
    # NVML has no utilisation per MIG instance: missing, never 0.
    assert all(s.gpu_util_pct is None and s.power_w is None for s in obs.samples)
    assert all(s.temp_c == 53.0 for s in obs.samples)
    holders = {w.ref["pid"]: w.gpu_uuids for w in obs.workloads}
    assert holders == {
        "21180": ("MIG-00000000-0000-0000-0000-000000000000",),
        "21181": ("MIG-00000000-0000-0000-0000-000000000000",),
        "21198": ("MIG-00000000-0000-0000-0000-000000000000",),
    }


def test_h200_mig_maps_by_gpu_and_compute_instance(tmp_path: Path) -> None:
    # GI 2 holds two compute instances; the processes run in CI 1 (MIG device 1).
    obs = observe(capture("linux-x86_64__nvidia-h200-mig__590.48.01", "load"), tmp_path)
    assert len(obs.gpus) == 5
    assert {w.gpu_uuids for w in obs.workloads} == {("MIG-00000001-0000-0000-0000-000000000001",)}


def test_h100_mig_idle_has_instances_and_no_workloads(tmp_path: Path) -> None:
    obs = observe(capture("linux-x86_64__nvidia-h100-mig__590.48.01", "idle"), tmp_path)
    assert len(obs.gpus) == 4
    assert obs.workloads == ()
    assert obs.errors == ()


def test_per_process_utilisation_comes_from_pmon(tmp_path: Path) -> None:
    name = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01"
    pmon = parse_pmon(section((CAPTURES[0].parent / f"{name}.txt").read_text(), "load", "pmon"))
    nvml = Nvml(FakeNvmlLib(capture(name, "load")))
    nvml.start()
    from gpusteward.integrations.nvml.sampler import NvmlSampler

    sampler = NvmlSampler(nvml)
    snap = sampler.sample(NOW)
    got = {p.pid: p.sm_util_pct for p in snap.processes}
    assert got == {pid: sm for (_, pid), (_, sm, _) in pmon.items()}
    assert got[11345] == 99.0  # gpu_burn
    assert got[11327] is None  # memhog: no kernel ran, no sample
    # The same samples are not reported twice: the next pass asks only for newer ones.
    assert all(p.sm_util_pct is None for p in sampler.sample(NOW).processes)


def test_windows_wddm_processes_have_no_memory_figure(tmp_path: Path) -> None:
    obs = observe(capture("windows-x86_64__nvidia-geforce-rtx-2080-super__610.62", "load"), tmp_path)
    assert len(obs.workloads) > 10
    nvml = Nvml(FakeNvmlLib(capture("windows-x86_64__nvidia-geforce-rtx-2080-super__610.62", "load")))
    nvml.start()
    from gpusteward.integrations.nvml.sampler import NvmlSampler

    assert all(p.used_mib is None for p in NvmlSampler(nvml).sample(NOW).processes)


@pytest.mark.parametrize("path", XMLS, ids=lambda p: p.stem)
def test_xml_captures_match_the_source(path: Path, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    root = ET.fromstring(path.read_text())
    obs = observe(xml(path.stem), tmp_path, graphics_processes=True)
    gpus = root.findall("gpu")
    expected_gpus: list[str] = []
    for el in gpus:
        uuid = el.findtext("uuid")
        migs = el.findall("mig_devices/mig_device")
        if (el.findtext("mig_mode/current_mig") or "").strip() == "Enabled":
            expected_gpus += [
                f"MIG-{uuid}/{m.findtext('gpu_instance_id')}/{m.findtext('compute_instance_id')}"
                for m in migs
            ]
        else:
            expected_gpus.append(uuid or "")
    # Two fixtures mask both GPUs' UUIDs to the same value: the second is dropped, with an error.
    assert [g.uuid for g in obs.gpus] == list(dict.fromkeys(expected_gpus))
    if len(set(expected_gpus)) < len(expected_gpus):
        assert any("seen twice" in e for e in obs.errors)
    first = gpus[0]
    if (first.findtext("mig_mode/current_mig") or "").strip() != "Enabled":
        sample = next(s for s in obs.samples if s.gpu_uuid == first.findtext("uuid"))
        assert sample.mem_used_mib == number(first.findtext("fb_memory_usage/used"))
        assert sample.gpu_util_pct == number(first.findtext("utilization/gpu_util"))
        assert sample.temp_c == number(first.findtext("temperature/gpu_temp"))
    pids = {int(p.findtext("pid") or 0) for el in gpus for p in el.findall("processes/process_info")}
    assert {int(w.ref["pid"]) for w in obs.workloads} == pids


def test_a_process_on_two_gpus_is_one_workload_holding_both(tmp_path: Path) -> None:
    node = xml("dual_a5000-v13")
    obs = observe(node, tmp_path)
    (w,) = obs.workloads
    assert w.ref["pid"] == "100477"
    assert w.gpu_uuids == (
        "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
        "GPU-12345678-aaaa-bbbb-cccc-0123456789cd",
    )
    assert w.gpus_requested == 2


def test_graphics_only_processes_are_not_workloads_by_default(tmp_path: Path) -> None:
    obs = observe(xml("tesla-t4"), tmp_path)
    assert [w.ref["pid"] for w in obs.workloads] == ["5762"]  # python; Xorg (G) is left out
    obs = observe(xml("tesla-t4"), tmp_path, graphics_processes=True)
    assert sorted(w.ref["pid"] for w in obs.workloads) == ["5762", "675"]


def test_a100_mig_instances_without_uuids_get_nvml_legacy_ids(tmp_path: Path) -> None:
    obs = observe(xml("a100-sxm4-v12"), tmp_path)
    assert [g.uuid for g in obs.gpus] == [
        "MIG-GPU-513536b6-7d19-9063-b049-1e69664bb298/3/0",
        "MIG-GPU-513536b6-7d19-9063-b049-1e69664bb298/4/0",
        "MIG-GPU-513536b6-7d19-9063-b049-1e69664bb298/5/0",
        "MIG-GPU-513536b6-7d19-9063-b049-1e69664bb298/6/0",
    ]
    assert all(s.mem_used_mib == 12.0 for s in obs.samples)


def test_capture_sections_and_query_text_parse() -> None:
    text = (CAPTURES[0].parent / "linux-x86_64__nvidia-h100-mig__590.48.01.txt").read_text()
    sections = split_capture(text)
    assert ("load", "query (-q)") in sections
    (gpu,) = parse_query_text(sections[("load", "query (-q)")])
    assert gpu.key == "GPU 00000000:00:09.0"
    assert gpu.get("FB Memory Usage", "Used") == "11125 MiB"
    assert len(gpu.all("MIG Device")) == 4


@pytest.mark.parametrize(
    ("text", "value"),
    [("81559 MiB", 81559.0), ("631.95 W", 631.95), ("[N/A]", None), ("N/A", None), ("", None), (None, None)],
)
def test_number(text: str | None, value: float | None) -> None:
    assert number(text) == value
