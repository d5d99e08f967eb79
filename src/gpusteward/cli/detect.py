"""What `gpusteward init` can reach from here: an NVIDIA driver, Slurm, Kubernetes, Prometheus.

Each probe is quick and read-only (a PATH lookup, a file, `nvidia-smi -L`, one GET with a short
timeout) and never raises: what cannot be reached is simply not found, with the reason kept for
the summary. No cloud metadata is probed: gpusteward has no cloud integration to configure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx

#: Where a Prometheus on this machine answers, unless `--prometheus` names one.
LOCAL_PROMETHEUS = "http://localhost:9090"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
PROBE_TIMEOUT_S = 2.0


@dataclass
class Found:
    """What was found; ``notes`` say what was looked at and why something was not used."""

    nvidia_gpus: int = 0
    squeue: str | None = None
    kubeconfig: Path | None = None
    in_cluster: bool = False
    prometheus: str | None = None
    notes: list[str] = field(default_factory=list)

    def source(self) -> str:
        """A scheduler's source when there is one (it knows who holds each GPU), else the metrics'."""
        if self.in_cluster or self.kubeconfig is not None:
            return "kubernetes"
        if self.squeue:
            return "slurm"
        if self.nvidia_gpus:
            return "nvml"
        if self.prometheus:
            return "prometheus"
        return "sim"


def nvidia_gpus() -> tuple[int, str]:
    """GPUs `nvidia-smi -L` lists (the driver answers), and a note."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0, "NVIDIA driver: no nvidia-smi on PATH"
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 0, f"NVIDIA driver: {smi} -L failed: {e}"
    gpus = [line for line in done.stdout.splitlines() if line.startswith("GPU ")]
    if done.returncode != 0 or not gpus:
        return 0, f"NVIDIA driver: {smi} -L exited {done.returncode} listing no GPU"
    return len(gpus), f"NVIDIA driver: {len(gpus)} GPU(s) ({smi})"


def kubernetes() -> tuple[Path | None, bool, str]:
    """(kubeconfig, in-cluster, note): the pod's service account, else $KUBECONFIG or ~/.kube/config."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT / "token").is_file():
        return None, True, "Kubernetes: in-cluster service account"
    env = os.environ.get("KUBECONFIG", "")
    candidates = [Path(p) for p in env.split(os.pathsep) if p] or [Path.home() / ".kube" / "config"]
    for path in candidates:
        if path.is_file():
            return path, False, f"Kubernetes: kubeconfig {path}"
    return None, False, "Kubernetes: no service account, no kubeconfig"


def prometheus_ready(url: str) -> tuple[bool, str]:
    """Whether ``url`` answers GET /-/ready with 200 within PROBE_TIMEOUT_S."""
    try:
        r = httpx.get(f"{url.rstrip('/')}/-/ready", timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError as e:
        return False, f"Prometheus: {url} does not answer ({type(e).__name__})"
    if r.status_code != 200:
        return False, f"Prometheus: {url}/-/ready answered {r.status_code}"
    return True, f"Prometheus: {url} is ready"


def detect(prometheus: str | None = None) -> Found:
    found = Found()
    found.nvidia_gpus, note = nvidia_gpus()
    found.notes.append(note)
    found.squeue = shutil.which("squeue")
    found.notes.append(f"Slurm: squeue at {found.squeue}" if found.squeue else "Slurm: no squeue on PATH")
    found.kubeconfig, found.in_cluster, note = kubernetes()
    found.notes.append(note)
    url = prometheus or LOCAL_PROMETHEUS
    ready, note = prometheus_ready(url)
    found.notes.append(note)
    # A URL given on purpose is kept even when it does not answer now (the scan will say so).
    found.prometheus = url if ready or prometheus else None
    found.notes.append("cloud: not probed (gpusteward has no cloud integration)")
    return found
