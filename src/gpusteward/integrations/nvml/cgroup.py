"""What a process's cgroup path says about where it runs: container, pod, Slurm job.

Pure: ``/proc/<pid>/cgroup`` text in, ``CgroupInfo`` out. Covers cgroup v1 and v2 and the
path layouts of Docker, containerd (CRI and plain), CRI-O and Podman, with both the
``cgroupfs`` and the ``systemd`` cgroup drivers, Kubernetes QoS classes (guaranteed pods
sit directly under ``kubepods``), and Slurm's ``task/cgroup`` plugin for v1
(``/slurm/uid_N/job_M/step_S``) and v2 (``.../slurmstepd.scope/job_M/step_S``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A container ID is 64 hex digits; the prefix names the runtime.
_CONTAINER = re.compile(
    r"(?:^|[:-])(?:(?P<runtime>docker|cri-containerd|crio|libpod|containerd|nerdctl)[-:])?"
    r"(?P<id>[0-9a-f]{64})(?:\.scope)?$"
)
# Pod UID: ``pod<uid>`` (cgroupfs) or ``-pod<uid_with_underscores>.slice`` (systemd).
_POD = re.compile(r"pod(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_QOS = re.compile(r"kubepods[-/.](?:slice/kubepods-)?(?P<qos>burstable|besteffort)")
_SLURM_JOB = re.compile(r"/job_(?P<job>\d+)(?:/|$)")
_SLURM_UID = re.compile(r"/uid_(?P<uid>\d+)(?:/|$)")
_SLURM_STEP = re.compile(r"/step_(?P<step>[\w.]+)(?:/|$)")

_RUNTIMES = {
    "docker": "docker",
    "cri-containerd": "containerd",
    "containerd": "containerd",
    "nerdctl": "containerd",
    "crio": "cri-o",
    "libpod": "podman",
}


@dataclass(frozen=True, slots=True)
class CgroupInfo:
    """Where a process runs, as far as its cgroup path tells. Empty strings: not known."""

    path: str = ""
    runtime: str = ""
    container_id: str = ""
    pod_uid: str = ""
    #: Kubernetes QoS class: guaranteed, burstable or besteffort (pods only).
    qos: str = ""
    slurm_job: str = ""
    slurm_step: str = ""
    slurm_uid: str = ""

    @property
    def container_short(self) -> str:
        return self.container_id[:12]


def parse_cgroup_file(text: str) -> list[tuple[str, str]]:
    """``/proc/<pid>/cgroup`` → [(controllers, path)]; v2's single line has controllers ``""``."""
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[1], parts[2].strip()))
    return out


def parse_cgroup_path(path: str) -> CgroupInfo:
    """Everything the path names; the innermost container ID wins."""
    runtime = container = pod = qos = job = step = uid = ""
    segments = [s for s in path.split("/") if s]
    for i in range(len(segments) - 1, -1, -1):
        m = _CONTAINER.search(segments[i])
        # CRI-O's conmon monitor sits beside the container; it is not the container.
        if m and "conmon" not in segments[i]:
            container = m.group("id")
            # Docker's cgroupfs layout puts a bare ID under /docker/.
            runtime = _RUNTIMES.get(m.group("runtime") or (segments[i - 1] if i else ""), "")
            break
    if m := _POD.search(path):
        pod = m.group("uid").replace("_", "-")
        q = _QOS.search(path)
        qos = q.group("qos") if q else "guaranteed"
        if container and not runtime:
            # cgroupfs-driver kubelet paths do not name the runtime.
            runtime = "cri"
    if "slurm" in path or "job_" in path:
        if m := _SLURM_JOB.search(path):
            job = m.group("job")
        if m := _SLURM_STEP.search(path):
            step = m.group("step")
        if m := _SLURM_UID.search(path):
            uid = m.group("uid")
    return CgroupInfo(path, runtime, container, pod, qos, job, step, uid)


def parse_cgroup(text: str) -> CgroupInfo:
    """``/proc/<pid>/cgroup`` text → ``CgroupInfo`` of the path that says most.

    v2's unified line is tried first, then v1's memory hierarchy, then the others; on a
    hybrid host the unified line often names only a systemd service, so the v1 path that
    names a container or job wins over it.
    """
    entries = parse_cgroup_file(text)
    order = {"": 0, "memory": 1, "pids": 2, "cpu,cpuacct": 3, "devices": 4}
    entries.sort(key=lambda e: order.get(e[0], 9))
    best: CgroupInfo | None = None
    best_score = -1
    for _, path in entries:
        if path in ("", "/"):
            continue
        info = parse_cgroup_path(path)
        score = 2 * bool(info.container_id) + 2 * bool(info.slurm_job) + bool(info.pod_uid)
        if score > best_score:
            best, best_score = info, score
    return best or CgroupInfo(path="/")
