"""Real ``nvidia-smi`` captures → ``FakeNode``s, so the fake answers what a real GPU answered.

Two capture formats are read, both pure text in, values out:

* ``nvidia-smi -q -x`` XML (DTD v10-v13): GPUs, MIG devices, processes, PCIe counters.
* nvidia_gpu_exporter's capture files: ``# <phase> :: <section>`` blocks holding the
  ``--query-gpu`` and ``--query-compute-apps`` CSVs, ``-q`` text (MIG devices, process
  instance ids, PCIe), ``-L`` (MIG UUIDs) and ``pmon`` (per-process utilisation).

A capture that cannot be read (truncated, a row without its uuid, XML that is not well formed)
is a ``SourceError`` naming what is wrong, never a bare ``ValueError`` or ``KeyError``.

Values nvidia-smi prints as ``N/A``, ``[N/A]``, ``[Not Supported]`` or "deprecated" become
``None``: the fake then answers "not supported" for them.
"""

from __future__ import annotations

import csv
import io
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.nvml.capture_health import count, health_from_csv, health_from_xml
from gpusteward.integrations.nvml.fake import FakeGpu, FakeMig, FakeNode, FakeProcess

_NUM = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


def number(text: str | None) -> float | None:
    """``"81559 MiB"`` → 81559.0; ``"[N/A]"``, ``"N/A"``, ``""`` → None."""
    if text is None:
        return None
    m = _NUM.match(text)
    v = float(m.group(1)) if m else None
    return v if v is not None and math.isfinite(v) else None  # 400 digits is inf: no reading


def _int(text: str | None) -> int | None:
    v = number(text)
    return None if v is None else int(v)


def _mig_mode(text: str | None) -> bool | None:
    t = (text or "").strip().lower()
    return True if t == "enabled" else False if t == "disabled" else None


# --- the CSV sections -------------------------------------------------------------------------


def parse_query_gpu_csv(text: str) -> tuple[list[FakeGpu], str | None]:
    """``--query-gpu=... --format=csv``: one GPU per row, and the driver version."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return [], None
    head = [h.split(" [")[0].strip() for h in rows[0]]
    gpus: list[FakeGpu] = []
    driver = None
    for row in rows[1:]:
        if not row:
            continue
        d = dict(zip(head, row, strict=False))
        if "uuid" not in d or "name" not in d:
            raise ValueError(f"query-gpu row without uuid and name: {row[:4]}")
        driver = d.get("driver_version") or driver
        gpu = FakeGpu(
            uuid=d["uuid"],
            name=d["name"],
            memory_total_mib=number(d.get("memory.total")),
            memory_used_mib=number(d.get("memory.used")),
            util_gpu_pct=number(d.get("utilization.gpu")),
            util_mem_pct=number(d.get("utilization.memory")),
            power_w=number(d.get("power.draw")),
            temp_c=number(d.get("temperature.gpu")),
            mig_enabled=_mig_mode(d.get("mig.mode.current")),
        )
        health_from_csv(gpu, d)
        gpus.append(gpu)
    return gpus, driver


def parse_compute_apps_csv(text: str) -> list[tuple[str, FakeProcess]]:
    """``--query-compute-apps=...,gpu_uuid,pid,process_name,used_gpu_memory``: (GPU uuid, process)."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    head = [h.split(" [")[0].strip() for h in rows[0]]
    out = []
    for row in rows[1:]:
        if not row:
            continue
        d = dict(zip(head, row, strict=False))
        if not {"gpu_uuid", "pid", "process_name"} <= d.keys() or not d["pid"].isdigit():
            raise ValueError(
                f"query-compute-apps row without gpu_uuid, a numeric pid and process_name: {row[:4]}"
            )
        out.append(
            (
                d["gpu_uuid"],
                FakeProcess(int(d["pid"]), number(d.get("used_gpu_memory")), name=d["process_name"]),
            )
        )
    return out


def parse_pmon(text: str) -> dict[tuple[int, int], tuple[str, float | None, float | None]]:
    """``nvidia-smi pmon``: (GPU index, pid) → (type, sm %, mem %) of the last sample; ``-`` → None."""
    out: dict[tuple[int, int], tuple[str, float | None, float | None]] = {}
    for line in text.splitlines():
        parts = line.split()
        if (
            len(parts) < 5
            or line.lstrip().startswith("#")
            or not parts[0].isdigit()
            or not parts[1].isdigit()
        ):
            continue
        out[(int(parts[0]), int(parts[1]))] = (parts[2], number(parts[3]), number(parts[4]))
    return out


_MIG_LINE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s*(\S+?)\)")


def parse_list(text: str) -> dict[int, list[tuple[str, int, str]]]:
    """``nvidia-smi -L``: GPU index → [(MIG profile, MIG device index, MIG UUID)]."""
    out: dict[int, list[tuple[str, int, str]]] = {}
    gpu = -1
    for line in text.splitlines():
        if line.startswith("GPU "):
            gpu = int(line.split()[1].rstrip(":"))
            out.setdefault(gpu, [])
        elif (m := _MIG_LINE.match(line)) and gpu >= 0:
            out[gpu].append((m.group(1), int(m.group(2)), m.group(3)))
    return out


# --- ``nvidia-smi -q`` text ---------------------------------------------------------------------


@dataclass
class QNode:
    """One ``Key : value`` line of ``nvidia-smi -q`` and the lines indented under it."""

    key: str
    value: str | None
    children: list[QNode] = field(default_factory=list)

    def get(self, *path: str) -> str | None:
        node: QNode | None = self
        for key in path:
            node = next((c for c in node.children if c.key == key), None) if node else None
        return node.value if node else None

    def all(self, key: str) -> list[QNode]:
        return [c for c in self.children if c.key == key]


def parse_query_text(text: str) -> list[QNode]:
    """``nvidia-smi -q``: the tree of one capture, one top node per ``GPU <bus id>``."""
    root = QNode("", None)
    stack: list[tuple[int, QNode]] = [(-1, root)]
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", "=")):
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = line.strip().partition(" : ")
        if not sep and line.rstrip().endswith(":"):
            key, value = line.strip()[:-1], ""
        node = QNode(key.strip(), value.strip() if sep else None)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return [n for n in root.children if n.key.startswith("GPU ")]


def _q_processes(gpu: QNode) -> list[FakeProcess]:
    procs: list[FakeProcess] = []
    block = next((c for c in gpu.children if c.key == "Processes"), None)
    gi = ci = None
    for c in block.children if block else []:
        if c.key == "GPU instance ID":
            gi = _int(c.value)
        elif c.key == "Compute instance ID":
            ci = _int(c.value)
        elif c.key == "Process ID" and c.value:
            kind = {"C": "compute", "G": "graphics", "C+G": "both"}.get(c.get("Type") or "C", "compute")
            procs.append(
                FakeProcess(int(c.value), number(c.get("Used GPU Memory")), kind, c.get("Name") or "", gi, ci)
            )
    return procs


def _q_migs(gpu: QNode) -> list[tuple[int, int, int, float | None, float | None]]:
    """(MIG device index, GPU instance id, compute instance id, total MiB, used MiB)."""
    out = []
    for m in gpu.all("MIG Device"):
        mem = "Shared FB Memory Usage" if m.get("Shared FB Memory Usage", "Total") else "FB Memory Usage"
        out.append(
            (
                _int(m.get("Index")) or 0,
                _int(m.get("GPU Instance ID")) or 0,
                _int(m.get("Compute Instance ID")) or 0,
                number(m.get(mem, "Total")),
                number(m.get(mem, "Used")),
            )
        )
    return out


# --- nvidia_gpu_exporter capture files ----------------------------------------------------------

_SECTION = re.compile(r"^# (\w+) :: (.+)$")


def split_capture(text: str) -> dict[tuple[str, str], str]:
    """(phase, section title) → body, for every ``# phase :: title`` block of a capture file."""
    out: dict[tuple[str, str], list[str]] = {}
    current: list[str] | None = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _SECTION.match(line)
        if m and i > 0 and lines[i - 1].startswith("####"):
            current = out.setdefault((m.group(1), m.group(2).strip()), [])
            continue
        if current is not None and not line.startswith(("####", "# $ ")):
            current.append(line)
    return {k: "\n".join(v).strip("\n") for k, v in out.items()}


def _section(sections: dict[tuple[str, str], str], phase: str, prefix: str) -> str:
    return next(
        (body for (p, title), body in sections.items() if p == phase and title.startswith(prefix)), ""
    )


def node_from_capture(text: str, phase: str) -> FakeNode:
    """The node of one phase (``idle`` or ``load``) of an nvidia_gpu_exporter capture file."""
    try:
        return _node_from_capture(text, phase)
    except (ValueError, KeyError, IndexError) as e:  # a pure parser: every one is a bad capture
        raise SourceError(f"nvidia-smi capture, phase {phase!r}: unreadable ({type(e).__name__}: {e})") from e


def _node_from_capture(text: str, phase: str) -> FakeNode:
    sections = split_capture(text)
    gpus, driver = parse_query_gpu_csv(_section(sections, phase, "query-gpu"))
    if not gpus:
        raise ValueError(f"no query-gpu section for phase {phase!r}")
    by_uuid = {g.uuid: (i, g) for i, g in enumerate(gpus)}
    q = parse_query_text(_section(sections, phase, "query (-q)"))
    listing = parse_list(_section(sections, "capabilities", "list (-L)"))
    pmon = parse_pmon(_section(sections, phase, "pmon"))
    for i, gpu in enumerate(gpus):
        qgpu = q[i] if i < len(q) else QNode("", None)
        gpu.pcie_rx_kb_per_s = number(qgpu.get("PCI", "Rx Throughput"))
        gpu.pcie_tx_kb_per_s = number(qgpu.get("PCI", "Tx Throughput"))
        gpu.pcie_replays = count(qgpu.get("PCI", "Replays Since Reset"))
        uuids = {dev: (profile, uuid) for profile, dev, uuid in listing.get(i, [])}
        for dev, gi, ci, total, used in _q_migs(qgpu) if gpu.mig_enabled else []:
            profile, uuid = uuids.get(dev, ("?", f"MIG-{gpu.uuid}/{gi}/{ci}"))
            gpu.migs.append(FakeMig(dev, uuid, profile, gi, ci, total, used))
        instances = {p.pid: p for p in _q_processes(qgpu)}
        for p in instances.values():
            if p.type == "graphics":  # not in --query-compute-apps
                gpu.processes.append(p)
    for uuid, proc in parse_compute_apps_csv(_section(sections, phase, "query-compute-apps")):
        if uuid not in by_uuid:
            raise ValueError(f"compute app on GPU {uuid!r}, which query-gpu does not list")
        index, gpu = by_uuid[uuid]
        seen = (
            next((p for p in _q_processes(q[index]) if p.pid == proc.pid), None) if index < len(q) else None
        )
        if seen is not None:
            proc.gpu_instance_id, proc.compute_instance_id = seen.gpu_instance_id, seen.compute_instance_id
        kind = pmon.get((index, proc.pid), ("C", None, None))
        proc.type = "both" if kind[0] == "C+G" else "compute"
        proc.sm_util_pct, proc.mem_util_pct = kind[1], kind[2]
        gpu.processes.append(proc)
    return FakeNode(gpus, driver, process_util=bool(pmon), util_time_us=1)


# --- ``nvidia-smi -q -x`` -----------------------------------------------------------------------


def _x(el: ET.Element, path: str) -> str | None:
    found = el.find(path)
    return None if found is None or found.text is None else found.text.strip()


def _xml_power(gpu: ET.Element) -> float | None:
    for path in (
        "power_readings/power_draw",
        "gpu_power_readings/power_draw",
        "gpu_power_readings/average_power_draw",
        "gpu_power_readings/instant_power_draw",
    ):
        v = number(_x(gpu, path))
        if v is not None:
            return v
    return None


def parse_smi_xml(text: str) -> FakeNode:
    """``nvidia-smi -q -x``. MIG devices lack UUIDs before DTD v13; they get NVML's
    pre-R470 form ``MIG-<GPU UUID>/<GI>/<CI>``."""
    if "<!ENTITY" in text:  # nvidia-smi never declares entities; refusing them bounds expansion
        raise SourceError("nvidia-smi XML: entities are not allowed")
    try:
        root = ET.fromstring(text)  # noqa: S314 - entities refused above, no external DTD is loaded
    except ET.ParseError as e:
        raise SourceError(f"nvidia-smi XML: not well-formed XML ({e})") from e
    gpus: list[FakeGpu] = []
    for el in root.findall("gpu"):
        uuid = _x(el, "uuid") or f"GPU-unknown-{len(gpus)}"
        name = _x(el, "product_name") or "NVIDIA GPU"
        gpu = FakeGpu(
            uuid=uuid,
            name=name,
            memory_total_mib=number(_x(el, "fb_memory_usage/total")),
            memory_used_mib=number(_x(el, "fb_memory_usage/used")),
            util_gpu_pct=number(_x(el, "utilization/gpu_util")),
            util_mem_pct=number(_x(el, "utilization/memory_util")),
            power_w=_xml_power(el),
            temp_c=number(_x(el, "temperature/gpu_temp")),
            pcie_rx_kb_per_s=number(_x(el, "pci/rx_util")),
            pcie_tx_kb_per_s=number(_x(el, "pci/tx_util")),
            mig_enabled=_mig_mode(_x(el, "mig_mode/current_mig")),
        )
        health_from_xml(gpu, el)
        for m in el.findall("mig_devices/mig_device"):
            gi, ci = _int(_x(m, "gpu_instance_id")) or 0, _int(_x(m, "compute_instance_id")) or 0
            gpu.migs.append(
                FakeMig(
                    index=_int(_x(m, "index")) or 0,
                    uuid=_x(m, "uuid") or f"MIG-{uuid}/{gi}/{ci}",
                    profile="",
                    gpu_instance_id=gi,
                    compute_instance_id=ci,
                    memory_total_mib=number(_x(m, "fb_memory_usage/total")),
                    memory_used_mib=number(_x(m, "fb_memory_usage/used")),
                )
            )
        for p in el.findall("processes/process_info"):
            kind = {"C": "compute", "G": "graphics", "C+G": "both"}.get(_x(p, "type") or "C", "compute")
            pid = _int(_x(p, "pid"))
            if pid is None or pid < 0:
                raise SourceError(f"nvidia-smi XML: GPU {uuid}: process without a pid: {_x(p, 'pid')!r}")
            gpu.processes.append(
                FakeProcess(
                    pid=pid,
                    used_mib=number(_x(p, "used_memory")),
                    type=kind,
                    name=_x(p, "process_name") or "",
                    gpu_instance_id=_int(_x(p, "gpu_instance_id")),
                    compute_instance_id=_int(_x(p, "compute_instance_id")),
                )
            )
        gpus.append(gpu)
    return FakeNode(gpus, _x(root, "driver_version"), process_util=False)
