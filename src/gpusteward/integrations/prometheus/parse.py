"""Pure mapping of exporter series to gpusteward's GPUs, samples and workloads.

Nothing here does I/O. It knows the metric names of dcgm-exporter, Princeton jobstats'
exporter, utkuozdemir's nvidia_gpu_exporter and ``gpusteward exporter``, the unit of
each, and every label variant seen in the field for the GPU, its node and its holder.

A series becomes (GPU identity, holder, field, value); ``assemble.Assembler`` folds them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from gpusteward.domain import health
from gpusteward.domain.models import Metric, WorkloadKind

MIB = 1024.0 * 1024.0
FloatArray = npt.NDArray[np.float64]

#: Pseudo-fields that are not ``Sample`` fields: memory parts that add up to the total,
#: the graphics-engine ratio used where GPU_UTIL is absent (MIG), and info series.
MEM_FREE = "mem_free_mib"
MEM_RESERVED = "mem_reserved_mib"
MEM_TOTAL = "mem_total_mib"
GR_ENGINE = "gr_engine_pct"
INFO = "info"
#: A per-process series: it only says who holds the GPU (pod / Slurm job labels).
HOLDER = "holder"
#: Health parts that ``derive_health`` folds into ``Sample`` fields: retired pages by cause and
#: pending, remapped rows by kind (summed into ``retired_pages``; pending counts as a failure),
#: and the clocks-event (throttle) reasons bitmask (→ ``throttled``).
RETIRED_SBE = "retired_sbe_pages"
RETIRED_DBE = "retired_dbe_pages"
RETIRED_PENDING = "retired_pending"
REMAPPED_CORR = "remapped_rows_correctable"
REMAPPED_UNC = "remapped_rows_uncorrectable"
CLOCK_REASONS = "clock_event_reasons"
HEALTH_PARTS = frozenset(
    {RETIRED_SBE, RETIRED_DBE, RETIRED_PENDING, REMAPPED_CORR, REMAPPED_UNC, CLOCK_REASONS}
)
SAMPLE_FIELDS = frozenset(m.value for m in Metric)
FIELDS = SAMPLE_FIELDS | HEALTH_PARTS | {MEM_FREE, MEM_RESERVED, MEM_TOTAL, GR_ENGINE, INFO, HOLDER}


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """How one exporter metric maps to a field: ``value * scale``."""

    field: str
    scale: float = 1.0
    family: str = "custom"


#: Every exporter metric the source reads. DCP ratios (``DCGM_FI_PROF_*``) are 0-1.
DEFAULT_SPECS: Mapping[str, MetricSpec] = MappingProxyType(
    {
        # dcgm-exporter (default-counters.csv and dcp-metrics-included.csv)
        "DCGM_FI_DEV_GPU_UTIL": MetricSpec(Metric.GPU_UTIL.value, 1.0, "dcgm"),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": MetricSpec(GR_ENGINE, 100.0, "dcgm"),
        "DCGM_FI_DEV_FB_USED": MetricSpec(Metric.MEM_USED.value, 1.0, "dcgm"),
        "DCGM_FI_DEV_FB_FREE": MetricSpec(MEM_FREE, 1.0, "dcgm"),
        "DCGM_FI_DEV_FB_RESERVED": MetricSpec(MEM_RESERVED, 1.0, "dcgm"),
        "DCGM_FI_DEV_POWER_USAGE": MetricSpec(Metric.POWER.value, 1.0, "dcgm"),
        "DCGM_FI_DEV_GPU_TEMP": MetricSpec(Metric.TEMP.value, 1.0, "dcgm"),
        "DCGM_FI_PROF_SM_ACTIVE": MetricSpec(Metric.SM_ACTIVE.value, 100.0, "dcgm"),
        "DCGM_FI_PROF_PCIE_RX_BYTES": MetricSpec(Metric.PCIE_RX.value, 1.0, "dcgm"),
        "DCGM_FI_PROF_PCIE_TX_BYTES": MetricSpec(Metric.PCIE_TX.value, 1.0, "dcgm"),
        # dcgm-exporter health (optional: a GPU without them gets None). XID_ERRORS is the
        # code of the last Xid; the rest are the driver's volatile counters and flags.
        "DCGM_FI_DEV_XID_ERRORS": MetricSpec(Metric.XID.value, 1.0, "dcgm"),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": MetricSpec(Metric.ECC_DBE.value, 1.0, "dcgm"),
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": MetricSpec(Metric.ECC_SBE.value, 1.0, "dcgm"),
        "DCGM_FI_DEV_RETIRED_SBE": MetricSpec(RETIRED_SBE, 1.0, "dcgm"),
        "DCGM_FI_DEV_RETIRED_DBE": MetricSpec(RETIRED_DBE, 1.0, "dcgm"),
        "DCGM_FI_DEV_RETIRED_PENDING": MetricSpec(RETIRED_PENDING, 1.0, "dcgm"),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": MetricSpec(REMAPPED_CORR, 1.0, "dcgm"),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": MetricSpec(REMAPPED_UNC, 1.0, "dcgm"),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": MetricSpec(Metric.REMAP_FAILURE.value, 1.0, "dcgm"),
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": MetricSpec(CLOCK_REASONS, 1.0, "dcgm"),
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": MetricSpec(CLOCK_REASONS, 1.0, "dcgm"),  # DCGM 3.3+ name
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": MetricSpec(Metric.PCIE_REPLAY.value, 1.0, "dcgm"),
        # Princeton jobstats (nvidia_gpu_prometheus_exporter fork)
        "nvidia_gpu_duty_cycle": MetricSpec(Metric.GPU_UTIL.value, 1.0, "jobstats"),
        "nvidia_gpu_memory_used_bytes": MetricSpec(Metric.MEM_USED.value, 1 / MIB, "jobstats"),
        "nvidia_gpu_memory_total_bytes": MetricSpec(MEM_TOTAL, 1 / MIB, "jobstats"),
        "nvidia_gpu_power_usage_milliwatts": MetricSpec(Metric.POWER.value, 1e-3, "jobstats"),
        "nvidia_gpu_temperature_celsius": MetricSpec(Metric.TEMP.value, 1.0, "jobstats"),
        # utkuozdemir/nvidia_gpu_exporter (nvidia-smi): utilisation is a 0-1 ratio
        "nvidia_smi_utilization_gpu_ratio": MetricSpec(Metric.GPU_UTIL.value, 100.0, "nvidia_smi"),
        "nvidia_smi_memory_used_bytes": MetricSpec(Metric.MEM_USED.value, 1 / MIB, "nvidia_smi"),
        "nvidia_smi_memory_total_bytes": MetricSpec(MEM_TOTAL, 1 / MIB, "nvidia_smi"),
        "nvidia_smi_power_draw_watts": MetricSpec(Metric.POWER.value, 1.0, "nvidia_smi"),
        "nvidia_smi_temperature_gpu": MetricSpec(Metric.TEMP.value, 1.0, "nvidia_smi"),
        "nvidia_smi_gpu_info": MetricSpec(INFO, 1.0, "nvidia_smi"),
        # gpusteward's own node exporter (`gpusteward exporter`); holders from its process series
        "gpusteward_gpu_utilization_percent": MetricSpec(Metric.GPU_UTIL.value, 1.0, "gpusteward"),
        "gpusteward_gpu_memory_used_bytes": MetricSpec(Metric.MEM_USED.value, 1 / MIB, "gpusteward"),
        "gpusteward_gpu_memory_total_bytes": MetricSpec(MEM_TOTAL, 1 / MIB, "gpusteward"),
        "gpusteward_gpu_power_watts": MetricSpec(Metric.POWER.value, 1.0, "gpusteward"),
        "gpusteward_gpu_temperature_celsius": MetricSpec(Metric.TEMP.value, 1.0, "gpusteward"),
        "gpusteward_gpu_pcie_rx_bytes_per_second": MetricSpec(Metric.PCIE_RX.value, 1.0, "gpusteward"),
        "gpusteward_gpu_pcie_tx_bytes_per_second": MetricSpec(Metric.PCIE_TX.value, 1.0, "gpusteward"),
        "gpusteward_gpu_info": MetricSpec(INFO, 1.0, "gpusteward"),
        "gpusteward_gpu_xid_code": MetricSpec(Metric.XID.value, 1.0, "gpusteward"),
        "gpusteward_gpu_xid_fatal": MetricSpec(Metric.XID_FATAL.value, 1.0, "gpusteward"),
        "gpusteward_gpu_ecc_uncorrected_errors": MetricSpec(Metric.ECC_DBE.value, 1.0, "gpusteward"),
        "gpusteward_gpu_ecc_corrected_errors": MetricSpec(Metric.ECC_SBE.value, 1.0, "gpusteward"),
        "gpusteward_gpu_retired_pages": MetricSpec(Metric.RETIRED_PAGES.value, 1.0, "gpusteward"),
        "gpusteward_gpu_row_remap_failure": MetricSpec(Metric.REMAP_FAILURE.value, 1.0, "gpusteward"),
        "gpusteward_gpu_throttled": MetricSpec(Metric.THROTTLED.value, 1.0, "gpusteward"),
        "gpusteward_gpu_pcie_replays": MetricSpec(Metric.PCIE_REPLAY.value, 1.0, "gpusteward"),
        "gpusteward_process_gpu_memory_used_bytes": MetricSpec(HOLDER, 1.0, "gpusteward"),
    }
)


#: Request counters of inference servers, per pod: their rate is a service's traffic. vLLM
#: (finished requests), Triton (successful inferences), Knative's queue-proxy (KServe too).
REQUEST_COUNTERS: tuple[str, ...] = (
    "vllm:request_success_total",
    "nv_inference_request_success",
    "revision_request_count",
)


@dataclass(frozen=True, slots=True)
class LabelMap:
    """Label names to try, in order, for each role. The first non-empty one wins.

    ``exported_*`` come first: when Prometheus scrapes dcgm-exporter without
    ``honor_labels``, the workload's pod is renamed ``exported_pod`` and ``pod`` is the
    exporter's own pod.
    """

    uuid: tuple[str, ...] = ("UUID", "uuid", "gpu_uuid")
    node: tuple[str, ...] = ("Hostname", "hostname", "node", "kubernetes_node", "instance")
    index: tuple[str, ...] = ("gpu", "minor_number", "index")
    model: tuple[str, ...] = ("modelName", "model_name", "name", "model")
    mig_instance: tuple[str, ...] = ("GPU_I_ID",)
    mig_profile: tuple[str, ...] = ("GPU_I_PROFILE",)
    pod: tuple[str, ...] = ("exported_pod", "pod", "pod_name")
    namespace: tuple[str, ...] = ("exported_namespace", "namespace", "pod_namespace")
    pod_uid: tuple[str, ...] = ("exported_pod_uid", "pod_uid")
    container: tuple[str, ...] = ("exported_container", "container", "container_name")
    job: tuple[str, ...] = ("hpc_job", "jobid", "slurm_job")
    user: tuple[str, ...] = ("user", "username")

    def with_overrides(self, overrides: Mapping[str, Sequence[str]]) -> LabelMap:
        unknown = set(overrides) - set(self.__slots__)
        if unknown:
            raise ValueError(f"unknown label roles: {', '.join(sorted(unknown))}")
        return replace(self, **{k: tuple(v) for k, v in overrides.items()})


def first_label(labels: Mapping[str, str], names: Iterable[str]) -> str:
    """The first non-empty value among ``names`` (Prometheus treats "" as absent)."""
    for name in names:
        v = labels.get(name, "").strip()
        if v:
            return v
    return ""


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """A GPU or MIG instance as labels describe it. MIG instances: ``<parent uuid>/<GPU_I_ID>``."""

    uuid: str
    node: str
    index: int
    model: str
    parent: str = ""


@dataclass(frozen=True, slots=True)
class Holder:
    """What the labels say holds a GPU: a pod or a job."""

    kind: WorkloadKind
    id: str
    name: str
    namespace: str = ""
    container: str = ""
    user: str = ""
    pod_uid: str = ""


def _node(labels: Mapping[str, str], lm: LabelMap) -> str:
    for name in lm.node:
        v = labels.get(name, "").strip()
        if v:
            # ``instance`` is host:port; the port says nothing about the GPU's node.
            return v.rsplit(":", 1)[0] if name == "instance" and v.count(":") == 1 else v
    return ""


def _index(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        return -1


def identify_gpu(labels: Mapping[str, str], lm: LabelMap) -> GpuIdentity | None:
    """The GPU a series is about, or None when it names none (exporter self-metrics)."""
    uuid = first_label(labels, lm.uuid)
    if not uuid:
        return None
    node = _node(labels, lm)
    model = first_label(labels, lm.model)
    index = _index(first_label(labels, lm.index))
    gi = first_label(labels, lm.mig_instance)
    if gi:
        profile = first_label(labels, lm.mig_profile)
        return GpuIdentity(f"{uuid}/{gi}", node, index, f"{model} MIG {profile}".strip(), parent=uuid)
    return GpuIdentity(uuid, node, index, model)


def identify_holder(
    labels: Mapping[str, str], lm: LabelMap, ignore_pods: re.Pattern[str] | None
) -> Holder | None:
    """The pod or job holding the GPU of a series; None when the labels name none.

    A pod takes precedence over a job id (a Kubernetes job runs in pods); ``ignore_pods``
    matches the exporter's own pod, which is what ``pod`` holds without ``honor_labels``.
    """
    user = first_label(labels, lm.user)
    pod = first_label(labels, lm.pod)
    if pod and not (ignore_pods is not None and ignore_pods.fullmatch(pod)):
        ns = first_label(labels, lm.namespace)
        wid = f"pod/{ns}/{pod}" if ns else f"pod/{pod}"
        container = first_label(labels, lm.container)
        return Holder(WorkloadKind.POD, wid, pod, ns, container, user, first_label(labels, lm.pod_uid))
    job = first_label(labels, lm.job)
    if job:
        return Holder(WorkloadKind.JOB, f"job/{job}", job, user=user)
    return None


#: DCGM's "blank" sentinels (int32 and int64 blanks, FP64 blank at 2**47): no reading.
INT32_BLANK = 0x7FFFFFF0
FP64_BLANK = 2.0**47


def clean_value(raw: str | float, scale: float) -> float | None:
    """A reading in gpusteward's unit, or None for NaN, infinities, negative values (no metric
    gpusteward reads can be below 0: a negative reading is a glitch, not a very idle GPU) and
    DCGM blank values."""
    try:
        v = float(raw)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v) or v < 0 or v >= FP64_BLANK or INT32_BLANK <= v <= 0x7FFFFFFF:
        return None
    return v * scale


# Sample field names, read once (an enum member's .value is a descriptor call, per cell a tick).
_XID, _XID_FATAL, _RETIRED = Metric.XID.value, Metric.XID_FATAL.value, Metric.RETIRED_PAGES.value
_REMAP_FAILURE, _THROTTLED = Metric.REMAP_FAILURE.value, Metric.THROTTLED.value


def derive_health(cols: dict[str, FloatArray], n: int) -> None:
    """Fold the health parts of ``n`` GPU readings (columns by field; NaN: not read) into
    ``Sample`` fields, in place. A field stays NaN unless a series fed it: no health series
    is no reading, never a healthy 0."""

    def column(name: str) -> FloatArray:
        return cols.get(name, np.full(n, np.nan))

    xid = cols.get(_XID)
    if xid is not None:
        cols[_XID_FATAL] = _mapped(xid, column(_XID_FATAL), health.xid_fatal)
    retired = column(_RETIRED).copy()
    missing = np.isnan(retired)
    # Remapped rows (Ampere and newer) where the GPU has them, else retired pages.
    for parts in ((REMAPPED_CORR, REMAPPED_UNC), (RETIRED_SBE, RETIRED_DBE)):
        known = [cols[p] for p in parts if p in cols]
        if not known:
            continue
        has = missing & ~np.all(np.isnan(known), axis=0)
        retired[has] = np.nansum(known, axis=0)[has]
        missing &= ~has
    if not np.isnan(retired).all():
        cols[_RETIRED] = retired
    pending = cols.get(RETIRED_PENDING)
    if pending is not None:
        failure = column(_REMAP_FAILURE)
        was = np.where(np.isnan(failure), 0.0, failure)
        cols[_REMAP_FAILURE] = np.where(np.isnan(pending), failure, np.maximum(was, pending > 0))
    reasons = cols.get(CLOCK_REASONS)
    if reasons is not None:
        cols[_THROTTLED] = _mapped(reasons, column(_THROTTLED), health.throttled)


def _mapped(codes: FloatArray, into: FloatArray, fn: Callable[[int], bool]) -> FloatArray:
    """``into`` with ``fn(int(code))`` as 0/1 where it is NaN and the code is read (each
    distinct code asked once)."""
    need = np.isnan(into) & ~np.isnan(codes)
    if not need.any():
        return into
    out = into.copy()
    distinct, inverse = np.unique(codes[need], return_inverse=True)
    out[need] = np.array([float(fn(int(c))) for c in distinct.tolist()])[inverse.reshape(-1)]
    return out
