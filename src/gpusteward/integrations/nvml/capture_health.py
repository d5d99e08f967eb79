"""The health fields of real ``nvidia-smi`` captures, for the fake NVML to answer from.

``--query-gpu`` CSV (``ecc.errors.*.volatile.total``, ``retired_pages.*``, ``remapped_rows.*``,
``clocks_event_reasons.active``), ``-q`` text (``Replays Since Reset``) and ``-q -x`` XML
(``ecc_errors/volatile``, ``retired_pages``, ``remapped_rows``, ``clocks_event_reasons`` or
the older ``clocks_throttle_reasons``, ``pci/replay_counter``). A value printed as ``N/A``
stays ``None``, so the fake answers "not supported" as the GPU did.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping

from gpusteward.integrations.nvml.fake import FakeGpu

_COUNT = re.compile(r"^\s*(\d+)\s*$")

#: nvidia-smi's names of the clocks-event reasons → NVML's bits (nvml.h).
REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}


def count(text: str | None) -> int | None:
    m = _COUNT.match(text or "")
    return int(m.group(1)) if m else None


def yes_no(text: str | None) -> bool | None:
    t = (text or "").strip().lower()
    return True if t == "yes" else False if t == "no" else None


def bitmask(text: str | None) -> int | None:
    t = (text or "").strip()
    try:
        return int(t, 16) if t.lower().startswith("0x") else None
    except ValueError:
        return None


def _remap(
    corr: int | None, unc: int | None, pending: bool | None, failure: bool | None
) -> tuple[int, int, bool, bool] | None:
    if corr is None or unc is None or pending is None or failure is None:
        return None
    return (corr, unc, pending, failure)


def health_from_csv(gpu: FakeGpu, row: Mapping[str, str]) -> None:
    """One ``--query-gpu`` row (header → value) onto ``gpu``."""
    gpu.ecc_sbe = count(row.get("ecc.errors.corrected.volatile.total"))
    gpu.ecc_dbe = count(row.get("ecc.errors.uncorrected.volatile.total"))
    gpu.retired_sbe_pages = count(row.get("retired_pages.single_bit_ecc.count"))
    gpu.retired_dbe_pages = count(row.get("retired_pages.double_bit.count"))
    gpu.retired_pending = yes_no(row.get("retired_pages.pending"))
    gpu.remapped_rows = _remap(
        count(row.get("remapped_rows.correctable")),
        count(row.get("remapped_rows.uncorrectable")),
        yes_no(row.get("remapped_rows.pending")),
        yes_no(row.get("remapped_rows.failure")),
    )
    # Drivers before R535 print the same bitmask as clocks_throttle_reasons.
    gpu.clocks_event_reasons = bitmask(
        row.get("clocks_event_reasons.active") or row.get("clocks_throttle_reasons.active")
    )


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def health_from_xml(gpu: FakeGpu, el: ET.Element) -> None:
    """One ``<gpu>`` element of ``nvidia-smi -q -x`` onto ``gpu``."""

    def x(path: str) -> str | None:
        found = el.find(path)
        return None if found is None or found.text is None else found.text.strip()

    vol = el.find("ecc_errors/volatile")
    if vol is not None:
        text: Callable[[str], str | None] = lambda tag: vol.findtext(tag)  # noqa: E731
        # DTD v12+ splits SRAM and DRAM (and, later, SRAM parity / SEC-DED); before, single/double bit.
        sbe = [count(text(t)) for t in ("sram_correctable", "dram_correctable", "single_bit/total")]
        dbe = [
            count(text(t))
            for t in (
                "sram_uncorrectable",
                "sram_uncorrectable_parity",
                "sram_uncorrectable_secded",
                "dram_uncorrectable",
                "double_bit/total",
            )
        ]
        gpu.ecc_sbe, gpu.ecc_dbe = _sum(sbe), _sum(dbe)
    gpu.retired_sbe_pages = count(x("retired_pages/multiple_single_bit_retirement/retired_count"))
    gpu.retired_dbe_pages = count(x("retired_pages/double_bit_retirement/retired_count"))
    gpu.retired_pending = yes_no(x("retired_pages/pending_retirement"))
    gpu.remapped_rows = _remap(
        count(x("remapped_rows/remapped_row_corr")),
        count(x("remapped_rows/remapped_row_unc")),
        yes_no(x("remapped_rows/remapped_row_pending")),
        yes_no(x("remapped_rows/remapped_row_failure")),
    )
    gpu.clocks_event_reasons = _reasons(el)
    gpu.pcie_replays = count(x("pci/replay_counter"))


def _reasons(el: ET.Element) -> int | None:
    """The bitmask from the per-reason ``Active`` / ``Not Active`` elements; None if none is readable."""
    for block, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        found = el.find(block)
        if found is None:
            continue
        mask, read = 0, False
        for child in found:
            bit = REASON_BITS.get(child.tag.removeprefix(prefix))
            state = (child.text or "").strip()
            if bit is None or state not in ("Active", "Not Active"):
                continue
            read = True
            mask |= bit if state == "Active" else 0
        return mask if read else None
    return None
