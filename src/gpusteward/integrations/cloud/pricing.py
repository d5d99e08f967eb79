"""What a GPU instance is and costs: its GPUs from EC2's own instance-type data
(``describe_instance_types`` GpuInfo), its price from ``cloud.instances.price_per_hour_by_type``
or the cost table's GPU prices at its rate, and which on-demand instances active reservations
(``describe_reserved_instances``) cover."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpusteward.analysis.cost import PriceTable, Rate
from gpusteward.domain.cloud import Lifecycle


@dataclass(frozen=True, slots=True)
class GpuKind:
    """The GPUs of one instance type."""

    model: str
    count: int


def gpu_kind(type_info: Mapping[str, Any]) -> GpuKind | None:
    """An instance type's GPUs from its ``GpuInfo`` (None: no GPU, e.g. m5.large). The model
    reads like NVML's names with the memory ("NVIDIA A100 40GB") so the cost table's keys match."""
    gpus = (type_info.get("GpuInfo") or {}).get("Gpus") or []
    if not gpus:
        return None
    g = gpus[0]
    count = sum(int(x.get("Count", 0)) for x in gpus)
    mib = int((g.get("MemoryInfo") or {}).get("SizeInMiB", 0))
    memory = f" {round(mib / 1024)}GB" if mib else ""
    model = f"{g.get('Manufacturer', '')} {g.get('Name', '')}{memory}".strip()
    return GpuKind(model, count) if count > 0 else None


def rate_of(lifecycle: Lifecycle) -> Rate:
    return lifecycle.value  # the same three words


def instance_price(
    instance_type: str,
    kind: GpuKind,
    lifecycle: Lifecycle,
    table: PriceTable,
    by_type: Mapping[str, float],
) -> float:
    """The instance's price per hour at its rate: a configured on-demand price for its type (less
    the table's discount for reserved or spot), else its GPUs at the cost table's price."""
    rate = rate_of(lifecycle)
    own = by_type.get(instance_type)
    if own is None:
        return kind.count * table.price(kind.model, rate)
    if rate == "reserved":
        return own * (1.0 - table.reserved_discount)
    if rate == "spot":
        return own * (1.0 - table.spot_discount)
    return own


def reservations(raw: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    """Active reservations' instance counts by (type, zone); zone "" for regional ones."""
    out: dict[tuple[str, str], int] = {}
    for r in raw:
        if r.get("State") != "active":
            continue
        zone = str(r.get("AvailabilityZone") or "") if r.get("Scope") != "Region" else ""
        key = (str(r["InstanceType"]), zone)
        out[key] = out.get(key, 0) + int(r.get("InstanceCount", 0))
    return out


def covered(candidates: Sequence[tuple[str, str, str]], counts: Mapping[tuple[str, str], int]) -> set[str]:
    """The ids of on-demand instances (id, type, zone) that reservations cover: zonal ones in
    their zone first, then regional ones of the type, oldest instances first (as given)."""
    left = dict(counts)
    out: set[str] = set()
    for pass_zone in (True, False):
        for iid, itype, zone in candidates:
            if iid in out:
                continue
            key = (itype, zone if pass_zone else "")
            if left.get(key, 0) > 0:
                left[key] -= 1
                out.add(iid)
    return out
