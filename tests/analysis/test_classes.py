"""Workload classes: every path of ``workload_class`` (label, owner kind, partition, name, kind),
and that a Kubernetes service's stop is a scale-down."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpusteward.domain.classes import CLASS_KEY, workload_class
from gpusteward.domain.models import Owner, Workload, WorkloadKind
from gpusteward.integrations.kubernetes.model import KINDS, Mode

POD, JOB, PROC = WorkloadKind.POD, WorkloadKind.JOB, WorkloadKind.PROCESS


def w(
    kind: WorkloadKind,
    name: str = "w",
    ref: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Workload:
    return Workload(
        "w1",
        kind,
        name,
        Owner("alice", "ml"),
        1,
        ("GPU-0",),
        datetime(2026, 3, 2, tzinfo=UTC),
        labels=labels or {},
        annotations=annotations or {},
        ref=ref or {},
    )


def k8s(owner_kind: str, name: str = "pod-abc") -> Workload:
    return w(POD, name, {"kind": owner_kind, "namespace": "ml"})


def slurm(partition: str, name: str = "train.sh") -> Workload:
    return w(JOB, name, {"job_id": "42", "partition": partition})


@pytest.mark.parametrize(
    ("case", "workload", "expected"),
    [
        # An explicit label or annotation wins over everything, in any case and spacing.
        (
            "label service on a Job",
            w(POD, ref={"kind": "Job", "namespace": "ml"}, labels={CLASS_KEY: "service"}),
            "service",
        ),
        ("annotation, capitals", w(PROC, "python", annotations={CLASS_KEY: " Interactive "}), "interactive"),
        (
            "label batch on a Deployment",
            w(POD, ref={"kind": "Deployment", "namespace": "a"}, labels={CLASS_KEY: "batch"}),
            "batch",
        ),
        (
            "an unknown label value is ignored",
            w(POD, ref={"kind": "Deployment", "namespace": "a"}, labels={CLASS_KEY: "web"}),
            "service",
        ),
        # Kubernetes owner kinds.
        ("Deployment", k8s("Deployment"), "service"),
        ("StatefulSet", k8s("StatefulSet"), "service"),
        ("ReplicaSet", k8s("ReplicaSet"), "service"),
        ("InferenceService", k8s("InferenceService"), "service"),
        ("LeaderWorkerSet", k8s("LeaderWorkerSet"), "service"),
        ("Knative Revision", k8s("Revision"), "service"),
        ("Job", k8s("Job"), "batch"),
        ("CronJob", k8s("CronJob"), "batch"),
        ("PyTorchJob", k8s("PyTorchJob"), "batch"),
        ("RayJob", k8s("RayJob"), "batch"),
        ("JobSet", k8s("JobSet"), "batch"),
        ("Notebook", k8s("Notebook"), "interactive"),
        ("a bare pod named jupyter-alice", k8s("Pod", "jupyter-alice"), "interactive"),
        ("a bare pod", k8s("Pod", "web-7f9"), "unknown"),
        ("an operator nobody knows", k8s("SeldonDeployment"), "unknown"),
        # Slurm: the partition and the job name.
        ("batch partition", slurm("gpu"), "batch"),
        ("interactive partition", slurm("Interactive-A100"), "interactive"),
        ("srun shell", slurm("gpu", "bash"), "interactive"),
        ("salloc", slurm("gpu", "salloc"), "interactive"),
        ("a Jupyter job in a batch partition", slurm("gpu", "jupyter-lab"), "interactive"),
        ("no partition reported", w(JOB, "train", {"job_id": "7"}), "batch"),
        # Processes (NVML) by their name.
        ("python script", w(PROC, "python"), "batch"),
        ("ipykernel", w(PROC, "python -m ipykernel_launcher"), "interactive"),
        # What the source left unsaid.
        ("a job with no reference", w(JOB, "train"), "batch"),
        ("a notebook job with no reference", w(JOB, "notebook-1"), "interactive"),
        ("a replayed pod", w(POD, "2a2ad1"), "unknown"),
        (
            "a kind without a namespace is not a Kubernetes owner",
            w(POD, "x", {"kind": "Deployment"}),
            "unknown",
        ),
    ],
)
def test_workload_class(case: str, workload: Workload, expected: str) -> None:
    assert workload_class(workload) == expected, case


def test_a_kubernetes_service_is_scaled_down_not_evicted() -> None:
    """L2 for a service is a scale-down: every owner kind the Kubernetes source can reach and
    that classifies as a service is scaled (or only noticed), never evicted or deleted."""
    services = {kind for (_, kind) in KINDS if workload_class(k8s(kind)) == "service"}
    assert services >= {"Deployment", "StatefulSet", "LeaderWorkerSet", "InferenceService"}
    for (_, kind), known in KINDS.items():
        if kind in services:
            assert known.mode in (Mode.SCALE, Mode.NOTICE, Mode.WALK), kind
    assert KINDS[("apps", "Deployment")].mode is Mode.SCALE
