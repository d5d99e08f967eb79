"""Rendered metric arrays and health readings → one ``Sample`` per GPU."""

from __future__ import annotations

from collections.abc import Collection, Mapping, MutableMapping, Sequence
from datetime import datetime

import numpy as np

from gpusteward.domain.models import Sample
from gpusteward.integrations.sim.health import Readings
from gpusteward.integrations.sim.signals import Metrics


def samples(now: datetime, uuids: Sequence[str], m: Metrics, h: Readings) -> list[Sample]:
    """A dropped sample reads nothing at all, health included (the whole scrape failed)."""
    temp = np.fmax(m.temp, h.temp_floor)
    cols = zip(
        uuids,
        m.dropped.tolist(),
        m.util.tolist(),
        m.mem.tolist(),
        m.power.tolist(),
        temp.tolist(),
        m.sm.tolist(),
        m.rx.tolist(),
        m.tx.tolist(),
        m.cpu.tolist(),
        h.xid_code.tolist(),
        h.xid_fatal.tolist(),
        h.ecc_dbe_count.tolist(),
        h.ecc_sbe_count.tolist(),
        h.retired_pages.tolist(),
        h.row_remap_failure.tolist(),
        h.throttled.tolist(),
        h.pcie_replay_count.tolist(),
        strict=True,
    )
    return [
        Sample(c[0], now)
        if c[1]
        else Sample(
            c[0],
            now,
            gpu_util_pct=c[2],
            mem_used_mib=c[3],
            power_w=c[4],
            temp_c=c[5],
            sm_active_pct=c[6],
            pcie_rx_bytes_per_s=c[7],
            pcie_tx_bytes_per_s=c[8],
            proc_cpu_pct=c[9],
            xid_code=c[10],
            xid_fatal=c[11],
            ecc_dbe_count=c[12],
            ecc_sbe_count=c[13],
            retired_pages=c[14],
            row_remap_failure=c[15],
            throttled=c[16],
            pcie_replay_count=c[17],
        )
        for c in cols
    ]


def freeze_stale(
    samples: list[Sample],
    frozen: MutableMapping[str, Sample],
    stale: Collection[str],
    index: Mapping[str, int],
) -> None:
    """GPUs whose exporter is stuck repeat the sample ``frozen`` keeps for them, old ``at`` and all."""
    for uuid in list(frozen):
        if uuid not in stale:
            del frozen[uuid]
    for uuid in stale:
        i = index.get(uuid)
        if i is not None:
            samples[i] = frozen.setdefault(uuid, samples[i])
