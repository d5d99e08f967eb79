"""The test cluster, built from real API objects (tests/fixtures/kubernetes, from ../shared/data).

- ``kubeiql_real_cluster_exports`` (CATechnologiesTest/kubeiql testdata, Apache-2.0): real
  ``kubectl get -o json`` exports of a Deployment, its ReplicaSet and Pod, and a StatefulSet pod.
- ``k8s_api_roundtrip_fixtures_HEAD`` (kubernetes/api testdata, Apache-2.0): a Node.

Changes made to them, as a current API server would serve them and as a GPU cluster has them:
renamed into the scenario's namespaces, ``nvidia.com/gpu`` limits on the containers, owner
references at ``apps/v1`` (the 2018 exports say ``extensions/v1beta1``), phase Running on a
GPU node. A Notebook (kubeflow.org/v1) and its StatefulSet are written after Kubeflow's
notebook controller (there is no real export of one in the data set).
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

from k8s_fakeapi import FakeCluster

# Verbatim copies of ../shared/data/kubernetes (see its README): a clone runs without the shared folder.
K8S = Path(__file__).resolve().parents[2] / "fixtures" / "kubernetes"
Obj = dict[str, Any]

NODE_1, NODE_2 = "gpu-node-1", "gpu-node-2"
STARTED = "2026-01-05T06:00:00Z"


def load(name: str) -> Obj:
    for sub in ("kubeiql_real_cluster_exports", "k8s_api_roundtrip_fixtures_HEAD"):
        p = K8S / sub / name
        if p.exists():
            return json.loads(p.read_text())
    raise FileNotFoundError(name)


def _clean_meta(obj: Obj, name: str, namespace: str | None) -> Obj:
    m = obj["metadata"]
    for k in (
        "selfLink",
        "resourceVersion",
        "uid",
        "generateName",
        "ownerReferences",
        "managedFields",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "finalizers",
        "generation",
    ):
        m.pop(k, None)
    m["name"] = name
    if namespace is None:
        m.pop("namespace", None)
    else:
        m["namespace"] = namespace
    m["uid"] = str(uuid.uuid4())
    m["creationTimestamp"] = STARTED
    return obj


def owner_ref(obj: Obj) -> Obj:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def gpu_pod(
    base: str,
    name: str,
    namespace: str,
    owner: Obj | None,
    *,
    gpus: int = 1,
    node: str = NODE_1,
    labels: dict[str, str] | None = None,
    resource: str = "nvidia.com/gpu",
) -> Obj:
    pod = _clean_meta(copy.deepcopy(load(base)), name, namespace)
    pod["metadata"]["labels"] = {**(pod["metadata"].get("labels") or {}), **(labels or {})}
    if owner is not None:
        pod["metadata"]["ownerReferences"] = [owner_ref(owner)]
    container = pod["spec"]["containers"][0]
    resources = container.get("resources") or {}
    resources["limits"] = {**(resources.get("limits") or {}), resource: str(gpus)}
    container["resources"] = resources
    pod["spec"]["nodeName"] = node
    pod["status"]["phase"] = "Running"
    pod["status"]["startTime"] = STARTED
    return pod


def unschedulable_gpu_pod(
    name: str,
    namespace: str,
    *,
    gpus: int = 1,
    created: str = STARTED,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: Obj | None = None,
) -> Obj:
    """A GPU pod the scheduler could not place. Derived from the real Pending pod ``pod3.json``
    (the data set has no Unschedulable pod): no node, and the ``PodScheduled`` condition the
    scheduler writes when no node has a free GPU (reason and message in kube-scheduler's words)."""
    pod = gpu_pod("pod3.json", name, namespace, None, gpus=gpus, labels=labels)
    pod["metadata"]["creationTimestamp"] = created
    pod["metadata"]["annotations"] = {**pod["metadata"].get("annotations", {}), **(annotations or {})}
    pod["spec"].pop("nodeName", None)
    if node_selector:
        pod["spec"]["nodeSelector"] = node_selector
    if affinity:
        pod["spec"]["affinity"] = affinity
    status = pod["status"]
    for k in ("hostIP", "startTime", "containerStatuses"):
        status.pop(k, None)
    status["phase"] = "Pending"
    status["conditions"] = [
        {
            "lastProbeTime": None,
            "lastTransitionTime": created,
            "message": f"0/2 nodes are available: 2 Insufficient {'nvidia.com/gpu'}. preemption: 0/2 nodes "
            "are available: 2 No preemption victims found for incoming pod.",
            "reason": "Unschedulable",
            "status": "False",
            "type": "PodScheduled",
        }
    ]
    return pod


def scheduled_gpu_pod(name: str, namespace: str, *, created: str, scheduled: str, gpus: int = 1) -> Obj:
    """A GPU pod placed at ``scheduled`` after being created at ``created`` (from ``pod1.json``)."""
    pod = gpu_pod("pod1.json", name, namespace, None, gpus=gpus)
    pod["metadata"]["creationTimestamp"] = created
    for c in pod["status"]["conditions"]:
        if c["type"] == "PodScheduled":
            c["lastTransitionTime"] = scheduled
    return pod


def node(name: str, gpus: int = 8, provider_id: str = "") -> Obj:
    """A GPU node; ``provider_id`` is its ``spec.providerID`` as a cloud controller sets it (EKS:
    ``aws:///<zone>/<instance-id>``), left unset as on kind or bare metal."""
    n = _clean_meta(copy.deepcopy(load("core.v1.Node.json")), name, None)
    n["metadata"]["labels"] = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    }
    n["metadata"]["annotations"] = {}
    n["spec"] = {"podCIDR": "10.244.0.0/24", **({"providerID": provider_id} if provider_id else {})}
    n["status"]["capacity"] = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}
    n["status"]["allocatable"] = dict(n["status"]["capacity"])
    return n


def deployment(
    name: str, namespace: str, replicas: int, labels: dict[str, str] | None = None
) -> tuple[Obj, Obj]:
    d = _clean_meta(copy.deepcopy(load("deployment.json")), name, namespace)
    d["apiVersion"] = "apps/v1"
    d["metadata"]["labels"] = {"app": name, **(labels or {})}
    d["metadata"]["annotations"] = {}
    d["spec"]["replicas"] = replicas
    d["spec"]["selector"] = {"matchLabels": {"app": name}}
    d["spec"]["template"]["metadata"]["labels"] = {"app": name}
    d["status"]["replicas"] = replicas
    rs = _clean_meta(copy.deepcopy(load("replicaset.json")), f"{name}-5d4ddc985d", namespace)
    rs["apiVersion"] = "apps/v1"
    rs["metadata"]["ownerReferences"] = [owner_ref(d)]
    rs["spec"]["replicas"] = replicas
    return d, rs


def statefulset(name: str, namespace: str, owner: Obj | None) -> Obj:
    sts: Obj = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {"statefulset": name}},
        "spec": {
            "replicas": 1,
            "serviceName": "",
            "selector": {"matchLabels": {"statefulset": name}},
            "template": {"metadata": {"labels": {"statefulset": name}}, "spec": {"containers": []}},
        },
        "status": {"replicas": 1},
    }
    sts = _clean_meta(sts, name, namespace)
    if owner is not None:
        sts["metadata"]["ownerReferences"] = [owner_ref(owner)]
    return sts


def notebook(name: str, namespace: str, creator: str) -> Obj:
    nb: Obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "Notebook",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": name},
            "annotations": {"notebooks.kubeflow.org/creator": creator},
        },
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": name, "image": "kubeflownotebookswg/jupyter-pytorch-cuda-full:v1.8.0"}
                    ]
                }
            }
        },
        "status": {"readyReplicas": 1},
    }
    return _clean_meta(nb, name, namespace)


def pdb(name: str, namespace: str, match: dict[str, str], allowed: int) -> Obj:
    return _clean_meta(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": match}},
            "status": {
                "disruptionsAllowed": allowed,
                "currentHealthy": 1,
                "desiredHealthy": 1,
                "expectedPods": 1,
            },
        },
        name,
        namespace,
    )


def scenario(agent_namespace: str = "gpusteward") -> FakeCluster:
    """The issue's scenario: an idle Notebook, a busy Deployment, a protected pod, an idle bare
    pod behind a PodDisruptionBudget, a GPU pod in kube-system and one in the agent's namespace."""
    c = FakeCluster()
    for n in (node(NODE_1), node(NODE_2)):
        c.put("", "nodes", n)
    nb = c.put("kubeflow.org", "notebooks", notebook("alice-nb", "ml", "alice@example.com"))
    sts = c.put("apps", "statefulsets", statefulset("alice-nb", "ml", nb))
    nb_pod = gpu_pod(
        "pod3.json", "alice-nb-0", "ml", sts, labels={"notebook-name": "alice-nb", "statefulset": "alice-nb"}
    )
    c.templates[("apps/statefulsets", "ml", "alice-nb")] = copy.deepcopy(nb_pod)
    c.put("", "pods", nb_pod)
    d, rs = deployment("llm-serve", "ml", 2)
    c.put("apps", "deployments", d)
    c.put("apps", "replicasets", rs)
    for i, suffix in enumerate(("fpddz", "x7k2q")):
        pod = gpu_pod(
            "pod1.json", f"llm-serve-5d4ddc985d-{suffix}", "ml", rs, node=NODE_2, labels={"app": "llm-serve"}
        )
        if i == 0:
            c.templates[("apps/deployments", "ml", "llm-serve")] = copy.deepcopy(pod)
        c.put("", "pods", pod)
    c.put("", "pods", gpu_pod("pod1.json", "idle-pod", "ml", None, labels={"app": "scratch"}))
    c.put("policy", "poddisruptionbudgets", pdb("scratch-pdb", "ml", {"app": "scratch"}, allowed=0))
    c.put(
        "",
        "pods",
        gpu_pod(
            "pod1.json", "protected-pod", "ml", None, labels={"app": "keep", "gpusteward.io/protect": "true"}
        ),
    )
    c.put("", "pods", gpu_pod("pod2.json", "gpu-feature-discovery-x", "kube-system", None, node=NODE_2))
    c.put("", "pods", gpu_pod("pod1.json", "agent-debug", agent_namespace, None, node=NODE_2))
    return c


def lease_for(settings: Any, **kw: Any) -> Any:
    """The Lease leadership ``ha`` configures, as the registry builds it."""
    from gpusteward.integrations.kubernetes.build import lease_leadership

    ha = settings.ha
    return lease_leadership(
        settings.source.kubernetes, ha.lease_namespace, ha.lease_name, ha.lease_seconds, **kw
    )
