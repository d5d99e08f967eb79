"""The ``source.kubernetes`` config section."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class KubernetesSourceSettings(BaseModel):
    """GPU pods from the Kubernetes API, joined with a metric source's GPUs and samples."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    config: Literal["auto", "in-cluster", "kubeconfig"] = Field(
        "auto",
        description="How to reach the API server: the pod's service account (in-cluster), a "
        "kubeconfig, or auto (in-cluster when KUBERNETES_SERVICE_HOST is set).",
    )
    kubeconfig: Path | None = Field(
        None, description="Kubeconfig file; default $KUBECONFIG or ~/.kube/config."
    )
    context: str | None = Field(None, description="Kubeconfig context; default its current context.")
    metrics: str = Field(
        "prometheus",
        description="Source of the GPU metrics (another source name): prometheus reads dcgm-exporter "
        "or `gpusteward exporter` series, whose pod/namespace labels name the holder.",
    )
    namespaces: list[str] = Field(
        default_factory=list, description="Only act in these namespaces (empty: all but the excluded)."
    )
    exclude_namespaces: list[str] = Field(
        default_factory=list,
        description="Never act in these. kube-system and the agent's own namespace are always excluded.",
    )
    agent_namespace: str = Field(
        "", description="The agent's namespace; empty: POD_NAMESPACE or the service account's namespace."
    )
    resync_seconds: float = Field(
        300,
        ge=10,
        le=86400,
        description="Full re-list of pods and nodes this often (the watch runs in between).",
    )
    request_timeout_seconds: float = Field(10, gt=0, le=3600, description="Longest wait for one API request.")
    list_page_size: int = Field(
        500,
        ge=0,
        le=100_000,
        description="List pods and nodes in pages of this many (limit/continue), sparing the API "
        "server one huge response; 0: all in one request.",
    )
    scale_to_replicas: int = Field(
        0,
        ge=0,
        le=100_000,
        description="L2 scales a Deployment/StatefulSet/LeaderWorkerSet that wakes on demand "
        "(annotation gpusteward.io/wakes-on-demand=true: KEDA HTTP add-on, an activator) to this many.",
    )
    min_replicas: int = Field(
        1,
        ge=0,
        le=100_000,
        description="L2 scales any other service down to this many (or its gpusteward.io/min-replicas); "
        "one already there is told, never stopped.",
    )
    eviction_grace_seconds: int | None = Field(
        None,
        ge=0,
        le=86400,
        description="Termination grace of an evicted pod; default policy.ladder.stop_grace_seconds.",
    )
    force_delete_namespaces: list[str] = Field(
        default_factory=list,
        description="L3 deletes pods with grace period 0 only in these namespaces (`*`: all). "
        "Elsewhere L3 is not done.",
    )
    conflict_retries: int = Field(
        3, ge=0, le=10, description="Re-reads and retries of a write refused with 409 Conflict."
    )
    owner_keys: list[str] = Field(
        default_factory=lambda: [
            "gpusteward.io/owner",
            "notebooks.kubeflow.org/creator",
            "owner",
            "user",
        ],
        description="Labels/annotations naming a workload's owner, in order; default: the namespace.",
    )
    queue: bool = Field(
        True,
        description="Read the queue: Pending GPU pods the scheduler calls Unschedulable (from the pod "
        "cache, no extra API call).",
    )
    queue_lookback_seconds: float = Field(
        3600, gt=0, le=30 * 86400, description="Queue times come from pods scheduled this far back."
    )
