"""deploy/kubernetes: valid against the Kubernetes schema, and RBAC exactly what the code calls."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_source import parts_for

import gpusteward
from gpusteward.domain.models import Decision, Level
from gpusteward.integrations.kubernetes.build import restore_workload
from gpusteward.integrations.kubernetes.node_control import KubernetesNodeControl
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.parking_executor import NodeParkingExecutor, node_workload

from .k8s_cluster import lease_for

kv = pytest.importorskip("kubernetes_validate")

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def documents() -> list[dict[str, Any]]:
    """What ``kubectl apply -k`` applies: every resource file of the kustomization."""
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    docs = []
    for name in kust["resources"]:
        docs.extend(d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d)
    return docs


def test_every_manifest_validates_against_the_kubernetes_schema() -> None:
    docs = documents()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ConfigMap",
            "Deployment",
            "Service",
            "DaemonSet",
            "Service",
            "ServiceMonitor",
        ]
    )
    for d in docs:
        if d["kind"] == "ServiceMonitor":  # a CRD: not in the Kubernetes schema
            assert d["apiVersion"] == "monitoring.coreos.com/v1"
            assert d["spec"]["endpoints"][0]["port"] == "metrics"
            continue
        kv.validate(d, K8S_VERSION, strict=True)


def test_validation_catches_a_broken_manifest() -> None:
    bad = next(d for d in documents() if d["kind"] == "Deployment")
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, K8S_VERSION, strict=True)


def test_the_configmap_is_a_valid_gpusteward_config(tmp_path: Path) -> None:
    cm = next(d for d in documents() if d["kind"] == "ConfigMap")
    f = tmp_path / "gpusteward.yaml"
    f.write_text(cm["data"]["gpusteward.yaml"])
    settings = load_settings(f)
    assert settings.source.name == "kubernetes"
    assert settings.ha.leader_election == "kubernetes-lease"


def test_the_daemonset_runs_the_exporter_with_host_pids_on_the_nvidia_runtime() -> None:
    ds = next(d for d in documents() if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["containers"][0]["args"][0] == "exporter"


def test_kubectl_kustomize_renders_valid_objects_running_this_version() -> None:
    """What `kubectl apply -k` sends: rendered by kubectl's kustomize (Debian's kubectl, installed
    by .ci/run), every object valid, the image the one the Containerfile builds for this version."""
    if shutil.which("kubectl") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl not installed under CI (apt-get install kubectl)")
        pytest.skip("kubectl not installed (apt-get install kubectl)")
    out = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY)], capture_output=True, text=True, check=True, timeout=60
    )
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in rendered) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in documents()
    )
    images = set()
    for d in rendered:
        assert d["metadata"].get("namespace", "gpusteward") == "gpusteward"
        if d["kind"] == "ServiceMonitor":  # a CRD: checked above
            continue
        kv.validate(d, K8S_VERSION, strict=True)
        if d["kind"] in ("Deployment", "DaemonSet"):
            images |= {c["image"] for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {f"gpusteward:{gpusteward.__version__}"}


def granted() -> set[tuple[str, str, str]]:
    out = set()
    for d in documents():
        if d["kind"] in ("ClusterRole", "Role"):
            for rule in d["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        for v in rule["verbs"]:
                            out.add((g, r, v))
    return out


def test_rbac_is_exactly_what_the_code_calls(api_client: Any, metrics: Any, cluster: Any) -> None:
    """Drive every code path against the fake server, then compare its request log with RBAC."""
    parts = parts_for(api_client, metrics, force_delete_namespaces=["ml"])
    try:
        ws = {w.id: w for w in parts.source.observe(NOW).workloads}
        ex = parts.executor

        def act(wid: str, level: Level = Level.GRACEFUL_STOP) -> None:
            w = ws[wid]
            d = Decision(
                w.id, NOW, level, "x", "idle", rule="idle", gpu_uuids=w.gpu_uuids, idempotency_key=wid
            )
            assert ex.current(w) is not None
            ex.execute(d, w)
            ex.verify(d, w)

        serve = ws["k8s:ml/deployment/llm-serve"]  # a spot interruption's checkpoint request (pod patch)
        assert ex.checkpoint_now(Decision(serve.id, NOW, Level.GRACEFUL_STOP, "x", "spot"), serve).ok
        act("k8s:ml/deployment/llm-serve")
        act("k8s:ml/notebook/alice-nb")
        pdb = cluster.get("policy", "poddisruptionbudgets", "ml", "scratch-pdb")
        pdb["status"]["disruptionsAllowed"] = 5
        cluster.put("policy", "poddisruptionbudgets", pdb)
        act("k8s:ml/pod/idle-pod")
        w = ws["k8s:ml/pod/protected-pod"]
        ex.api.delete_pod("ml", "protected-pod", w.ref["pods"].split("=")[1], 0)
        restore_workload(
            load_settings(None).source.kubernetes, "k8s:ml/deployment/llm-serve", client=api_client
        )
        assert parts.scaler.scale("ml/statefulset/alice-nb", 1, "tidal").ok  # stopped by the notebook step
        lease = lease_for(
            load_settings(None, ha={"lease_namespace": "gpusteward"}), client=api_client, clock=SimClock(NOW)
        )
        assert lease.acquire()
        assert lease.acquire()
        # L4 parking: list, cordon (get + patch), verify, uncordon.
        nodes = KubernetesNodeControl(parts.api)
        parker = NodeParkingExecutor(nodes)
        node_w = node_workload("gpu-node-1", ["GPU-nb"], "kubernetes")
        for step in ("park-node", "unpark-node"):
            assert parker.execute(Decision(node_w.id, NOW, Level.INFRA, step, "idle"), node_w).verified
        assert nodes.unschedulable() == {}
    finally:
        parts.source.close()
    used = set()
    for c in cluster.calls:
        res = f"{c.resource}/{c.subresource}" if c.subresource else c.resource
        used.add((c.group, res, c.verb))
    rules = granted()
    assert used <= rules, f"called without permission: {sorted(used - rules)}"
    # Granted but not called here: owner kinds absent from the test cluster (read the same way).
    unused = rules - used
    assert unused <= {
        ("apps", "daemonsets", "get"),
        ("batch", "jobs", "get"),
        ("batch", "cronjobs", "get"),
        ("serving.kserve.io", "inferenceservices", "get"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "get"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "patch"),
        ("apps", "statefulsets", "patch"),
        ("apps", "deployments/scale", "get"),
        ("apps", "deployments/scale", "patch"),
    }, sorted(unused)
