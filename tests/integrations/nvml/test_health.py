"""GPU health through NVML: ECC, retirement / remapping, slowdown, PCIe replays and Xid events,
read from real nvidia-smi captures by the fake NVML, with counters raised and Xids injected."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpusteward.domain.models import HEALTH_METRICS, Sample
from gpusteward.integrations.nvml.choke import Nvml
from gpusteward.integrations.nvml.fake import FakeNode, FakeNvmlLib
from gpusteward.integrations.nvml.procfs import ProcReader
from gpusteward.integrations.nvml.sampler import NvmlSampler
from gpusteward.integrations.nvml.settings import NvmlSourceSettings
from gpusteward.integrations.nvml.source import NvmlSource

from .conftest import FakePid, capture, users, xml

NOW = datetime(2026, 7, 14, 9, 0, tzinfo=UTC)
H100 = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01"
H100_MIG = "linux-x86_64__nvidia-h100-mig__590.48.01"
RTX2080 = "linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05"


class CountingLib(FakeNvmlLib):
    """The fake, counting the calls made to each NVML function."""

    def __init__(self, node: FakeNode, **kw: Any) -> None:
        super().__init__(node, **kw)
        self.by_name: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml"):
            counts = object.__getattribute__(self, "by_name")
            counts[name] = counts.get(name, 0) + 1
        return object.__getattribute__(self, name)


def observe(lib: FakeNvmlLib, root: Path, passes: int = 1) -> list[list[Sample]]:
    src = NvmlSource(Nvml(lib), NvmlSourceSettings(node="n1"), procs=ProcReader(root, users=users))
    out = [list(src.observe(NOW + timedelta(seconds=30 * i)).samples) for i in range(passes)]
    src.close()
    return out


def health(s: Sample) -> dict[str, float | None]:
    return {m.value: s.value(m) for m in sorted(HEALTH_METRICS)}


@pytest.fixture
def root(proc_root: Callable[[dict[int, FakePid]], Path]) -> Path:
    return proc_root({})


def test_an_h100_capture_reads_ecc_remapped_rows_replays_and_no_slowdown(root: Path) -> None:
    # The real capture: ECC on with 0 volatile errors, 0 remapped rows and no failure (Hopper
    # has no page retirement), 9 PCIe replays since reset, clocks idle (0x1: not a slowdown).
    [[s]] = observe(FakeNvmlLib(capture(H100, "idle")), root)
    assert health(s) == {
        "xid_code": 0.0,
        "xid_fatal": 0.0,
        "ecc_dbe_count": 0.0,
        "ecc_sbe_count": 0.0,
        "retired_pages": 0.0,
        "row_remap_failure": 0.0,
        "throttled": 0.0,
        "pcie_replay_count": 9.0,
    }


def test_a_consumer_board_leaves_ecc_and_retirement_missing_and_is_asked_once(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # RTX 2080 Super: no ECC, no retirement, no remapping (nvidia-smi prints [N/A]); its idle
    # clocks are held by the SW power cap (0x4), which is a choice, not a slowdown.
    lib = CountingLib(capture(RTX2080, "idle"))
    with caplog.at_level(logging.INFO, logger="gpusteward.integrations.nvml.choke"):
        passes = observe(lib, root, passes=3)
    for [s] in passes:
        h = health(s)
        assert (
            h["ecc_sbe_count"] is h["ecc_dbe_count"] is h["retired_pages"] is h["row_remap_failure"] is None
        )
        assert h["throttled"] == 0.0
        assert h["pcie_replay_count"] == 0.0
    # Two ECC calls (corrected, uncorrected) on the first pass, none after; one log line each.
    assert lib.by_name["nvmlDeviceGetTotalEccErrors"] == 2
    assert lib.by_name["nvmlDeviceGetRemappedRows"] == 1
    assert lib.by_name["nvmlDeviceGetRetiredPages"] == 2
    assert sum("nvmlDeviceGetTotalEccErrors" in r.getMessage() for r in caplog.records) == 1


def test_a_tesla_t4_reads_retired_pages_where_rows_are_not_remapped(root: Path) -> None:
    lib = FakeNvmlLib(xml("tesla-t4"))
    [[s]] = observe(lib, root)
    assert (s.retired_pages, s.row_remap_failure, s.ecc_sbe_count, s.ecc_dbe_count) == (0.0, 0.0, 0.0, 0.0)
    gpu = lib.node().gpus[0]
    gpu.retired_sbe_pages, gpu.retired_dbe_pages, gpu.retired_pending = 3, 1, True
    [[s]] = observe(lib, root)
    assert (s.retired_pages, s.row_remap_failure) == (4.0, 1.0)


def test_an_injected_xid_is_reported_once_with_its_fatality(root: Path) -> None:
    lib = FakeNvmlLib(capture(H100, "load"))
    src = NvmlSource(Nvml(lib), NvmlSourceSettings(node="n1"), procs=ProcReader(root, users=users))
    first = src.observe(NOW).samples[0]
    assert (first.xid_code, first.xid_fatal) == (0.0, 0.0)
    lib.inject_xid(0, 13)  # the job's own fault
    lib.inject_xid(0, 79)  # then the GPU fell off the bus: the last one counts
    hit = src.observe(NOW + timedelta(seconds=30)).samples[0]
    assert (hit.xid_code, hit.xid_fatal) == (79.0, 1.0)
    after = src.observe(NOW + timedelta(seconds=60)).samples[0]
    assert (after.xid_code, after.xid_fatal) == (0.0, 0.0)  # drained: seen once
    lib.inject_xid(0, 31)
    app = src.observe(NOW + timedelta(seconds=90)).samples[0]
    assert (app.xid_code, app.xid_fatal) == (31.0, 0.0)
    src.close()


def test_a_gpu_without_xid_events_reports_no_xid(root: Path) -> None:
    node = capture(H100, "load")
    node.gpus[0].xid_events = False
    lib = FakeNvmlLib(node)
    lib.inject_xid(0, 79)
    [[s]] = observe(lib, root)
    assert s.xid_code is None
    assert s.xid_fatal is None
    assert s.ecc_sbe_count == 0.0  # the rest is still read


def test_a_rising_single_bit_count_shows_pass_by_pass(root: Path) -> None:
    node = capture(H100, "load")
    lib = FakeNvmlLib(node)
    src = NvmlSource(Nvml(lib), NvmlSourceSettings(node="n1"), procs=ProcReader(root, users=users))
    seen = []
    for i, count in enumerate((0, 5, 12, 40)):
        node.gpus[0].ecc_sbe = count  # the driver's volatile total, rising
        seen.append(src.observe(NOW + timedelta(seconds=30 * i)).samples[0].ecc_sbe_count)
    assert seen == [0.0, 5.0, 12.0, 40.0]
    src.close()


def test_slowdown_reasons_and_the_pre_r535_function_name(root: Path) -> None:
    node = capture(H100, "load")
    node.gpus[0].clocks_event_reasons = 0x40 | 0x1  # HW thermal slowdown
    [[s]] = observe(FakeNvmlLib(node), root)
    assert s.throttled == 1.0
    # An older pynvml without nvmlDeviceGetCurrentClocksEventReasons: the old name is read.
    old = FakeNvmlLib(node, missing=["nvmlDeviceGetCurrentClocksEventReasons"])
    [[s]] = observe(old, root)
    assert s.throttled == 1.0
    node.gpus[0].clocks_event_reasons = 0x4 | 0x2  # SW power cap, application clocks
    [[s]] = observe(FakeNvmlLib(node), root)
    assert s.throttled == 0.0


def test_mig_instances_carry_their_gpus_health(root: Path) -> None:
    lib = FakeNvmlLib(capture(H100_MIG, "load"))
    [samples] = observe(lib, root)
    assert len(samples) >= 2
    assert {s.pcie_replay_count for s in samples} == {9.0}
    assert {s.ecc_dbe_count for s in samples} == {0.0}
    lib2 = FakeNvmlLib(capture(H100_MIG, "load"))
    src = NvmlSource(Nvml(lib2), NvmlSourceSettings(node="n1"), procs=ProcReader(root, users=users))
    src.observe(NOW)
    lib2.inject_xid(0, 48)
    hit = src.observe(NOW + timedelta(seconds=30)).samples
    assert {(s.xid_code, s.xid_fatal) for s in hit} == {(48.0, 1.0)}


def test_every_capture_reads_health_without_errors(root: Path) -> None:
    from .conftest import CAPTURES, XMLS

    nodes = [capture(p.stem, phase) for p in CAPTURES for phase in ("idle", "load")]
    nodes += [xml(p.stem) for p in XMLS]
    for node in nodes:
        sampler = NvmlSampler(Nvml(FakeNvmlLib(node)))
        sampler.nvml.start()
        snap = sampler.sample(NOW)
        assert snap.errors == ()
        for r in snap.gpus:
            # ECC counts exist exactly where the capture printed them, never a default 0.
            parent = next((g for g in node.gpus if g.uuid in (r.uuid, r.parent_uuid)), None)
            if parent is not None:
                assert (r.health.ecc_sbe_count is None) == (parent.ecc_sbe is None)
                assert (r.health.throttled is None) == (parent.clocks_event_reasons is None)
