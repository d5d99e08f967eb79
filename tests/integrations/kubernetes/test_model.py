"""Pure mapping: GPU requests, owner chains → units, namespace protection."""

from __future__ import annotations

from typing import Any

import pytest

from gpusteward.integrations.kubernetes.model import (
    KINDS,
    Link,
    Mode,
    Protection,
    gpu_request,
    parse_workload_id,
    unit_of,
    workload_id,
)


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"spec": {"containers": containers, "initContainers": init or []}}


def c(
    name: str, limits: dict[str, str] | None = None, requests: dict[str, str] | None = None
) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits or {}, "requests": requests or {}}}


@pytest.mark.parametrize(
    ("p", "gpus", "names", "holders"),
    [
        (pod([c("a", {"cpu": "1"})]), 0, (), ()),
        (
            pod([c("a", {"nvidia.com/gpu": "2"}), c("b", {"nvidia.com/gpu": "1"})]),
            3,
            ("nvidia.com/gpu",),
            ("a", "b"),
        ),
        (pod([c("a", {"nvidia.com/mig-1g.10gb": "1"})]), 1, ("nvidia.com/mig-1g.10gb",), ("a",)),
        (pod([c("a", requests={"nvidia.com/gpu": "1"})]), 1, ("nvidia.com/gpu",), ("a",)),
        # Init containers run first: the pod holds the larger of the two.
        (
            pod([c("a", {"nvidia.com/gpu": "1"})], [c("i", {"nvidia.com/gpu": "4"})]),
            4,
            ("nvidia.com/gpu",),
            ("a",),
        ),
        (pod([c("a", {"amd.com/gpu": "1"})]), 0, (), ()),
    ],
)
def test_gpu_request(p: dict[str, Any], gpus: int, names: tuple[str, ...], holders: tuple[str, ...]) -> None:
    assert gpu_request(p) == (gpus, names, holders)


def link(kind: str, group: str = "apps") -> Link:
    known = KINDS.get((group, kind))
    api = f"{group}/v1" if group else "v1"
    return Link(kind, kind.lower(), f"uid-{kind}", api, known, {"metadata": {"name": kind.lower()}})


POD = Link("Pod", "p", "uid-p", "v1", None)


@pytest.mark.parametrize(
    ("chain", "unit", "mode"),
    [
        ([POD], "Pod", Mode.EVICT),
        ([POD, link("ReplicaSet"), link("Deployment")], "Deployment", Mode.SCALE),
        ([POD, link("ReplicaSet")], "Pod", Mode.EVICT),  # a bare ReplicaSet: its pods are evicted
        ([POD, link("StatefulSet"), link("Notebook", "kubeflow.org")], "Notebook", Mode.NOTEBOOK),
        ([POD, link("Job", "batch"), link("CronJob", "batch")], "Job", Mode.EVICT),
        ([POD, link("DaemonSet")], "DaemonSet", Mode.NEVER),
        (
            [POD, link("ReplicaSet"), link("Deployment"), link("InferenceService", "serving.kserve.io")],
            "InferenceService",
            Mode.NOTICE,
        ),
        ([POD, Link("RayCluster", "ray", "u", "ray.io/v1", None)], "RayCluster", Mode.NOTICE),
        ([POD, Link("Node", "n1", "u", "v1", None)], "Pod", Mode.NEVER),
    ],
)
def test_unit_of(chain: list[Link], unit: str, mode: Mode) -> None:
    got, how = unit_of(chain)
    assert (got.kind, how) == (unit, mode)


def test_protection() -> None:
    p = Protection(allow=frozenset({"ml", "gpusteward"}), deny=frozenset({"prod"}), own="gpusteward")
    assert p.reason("ml") is None
    assert "never touched" in (p.reason("kube-system") or "")
    assert "own" in (p.reason("gpusteward") or "")
    assert "not on the namespaces list" in (p.reason("research") or "")
    assert "exclude" in (Protection(deny=frozenset({"prod"})).reason("prod") or "")


def test_workload_ids_round_trip() -> None:
    wid = workload_id("ml", "Notebook", "alice-nb")
    assert wid == "k8s:ml/notebook/alice-nb"
    assert parse_workload_id(wid) == ("ml", "notebook", "alice-nb")
    assert parse_workload_id("pod/ml/x") is None
    assert parse_workload_id("k8s:ml/x") is None
