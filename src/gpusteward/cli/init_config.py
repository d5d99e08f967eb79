"""The commented config `gpusteward init` writes: dry-run, the source that matches what was found."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

from gpusteward.cli.detect import Found

HEADER = """\
# gpusteward config, written by `gpusteward init` on {date} on {host}.
# What it found:
{notes}
# Every key is optional and unknown keys are errors; the reference of every key is in the docs
# (Reference > Configuration). Environment variables override this file:
# GPUSTEWARD_<SECTION>__<FIELD>, e.g. GPUSTEWARD_STORE__URL=postgresql+psycopg://...

# dry-run records what it would do and touches nothing. Switch to enforce once `gpusteward scan`
# and a few days of `gpusteward run` show only what you want stopped.
mode: dry-run
tick_seconds: 30

"""

PROMETHEUS = """\
  prometheus:
    url: {url}{missing}
    # selector: '{{cluster="a"}}'   # read only these series
"""

SOURCES = {
    "sim": """\
source:
  # Nothing real was found: the built-in simulated cluster, to see the loop work. Change the
  # name to nvml, slurm, kubernetes or prometheus (with its section) to watch real GPUs.
  name: sim
  sim:
    scenario: default
""",
    "nvml": """\
source:
  # This machine's GPUs through NVML (pip install 'gpusteward[nvml]') and their processes
  # through /proc. Stops signal the processes: run the agent as root or with CAP_KILL.
  name: nvml
  nvml:
    protected_users: []    # never signalled
    allow_root: false      # leave root's processes alone
""",
    "prometheus": """\
source:
  # GPU metrics (dcgm-exporter, `gpusteward exporter`, jobstats) from Prometheus. It observes
  # only: findings and reports, no stops (use the slurm or kubernetes source to act).
  name: prometheus
""",
    "slurm": """\
source:
  # Jobs from Slurm (squeue, scontrol), GPU metrics from {metrics}, joined by node and GPU index.
  name: slurm
  slurm:
    metrics: {metrics}
    # protect: {{partitions: [debug], qos: [urgent]}}   # never acted on
""",
    "kubernetes": """\
source:
  # GPU pods from the Kubernetes API, their GPUs' metrics from Prometheus (dcgm-exporter).
  name: kubernetes
  kubernetes:
    config: {config}{kubeconfig}
    metrics: prometheus
    # namespaces: [ml-team]          # act only here (default: all but kube-system and the agent's)
""",
}

FOOTER = """
# store:
#   url: sqlite:////var/lib/gpusteward/state.db   # default: ~/.local/state/gpusteward/gpusteward.db
# log:
#   format: json                                  # one JSON object per line, for Loki or ELK
"""


def render(found: Found, source: str) -> str:
    notes = "\n".join(f"#   {n}" for n in found.notes)
    text = HEADER.format(date=datetime.now(UTC).date(), host=socket.gethostname(), notes=notes)
    metrics = "prometheus" if found.prometheus or not found.nvidia_gpus else "nvml"
    kubeconfig = f"\n    kubeconfig: {found.kubeconfig}" if found.kubeconfig is not None else ""
    text += SOURCES[source].format(
        metrics=metrics,
        config="in-cluster" if found.in_cluster else "kubeconfig",
        kubeconfig=kubeconfig,
    )
    if source in ("prometheus", "kubernetes") or (source == "slurm" and metrics == "prometheus"):
        missing = "" if found.prometheus else "   # none found: set the URL of your Prometheus here"
        text += PROMETHEUS.format(url=found.prometheus or "http://127.0.0.1:9090", missing=missing)
    return text + FOOTER
