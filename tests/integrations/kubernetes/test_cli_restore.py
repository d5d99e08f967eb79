"""`gpusteward restore WORKLOAD` through a real kubeconfig to the fake API server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpusteward.cli.main import app
from gpusteward.integrations.kubernetes.control import ORIGINAL_REPLICAS_KEY


def config_for(tmp_path: Path, url: str) -> Path:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
                "current-context": "fake",
            }
        )
    )
    cfg = tmp_path / "gpusteward.yaml"
    cfg.write_text(
        f"source:\n  name: kubernetes\n  kubernetes:\n    config: kubeconfig\n    kubeconfig: {kubeconfig}\n"
    )
    return cfg


def test_restore_puts_back_the_original_replicas(tmp_path: Path, server: Any, cluster: Any) -> None:
    d = cluster.get("apps", "deployments", "ml", "llm-serve")
    d["spec"]["replicas"] = 0
    d["metadata"]["annotations"] = {ORIGINAL_REPLICAS_KEY: "2"}
    cluster.put("apps", "deployments", d)
    cluster.reconcile("apps", "deployments", "ml", "llm-serve")
    assert not cluster.owned_pods("ml", d["metadata"]["uid"])
    cfg = config_for(tmp_path, server.url)
    result = CliRunner().invoke(
        app, ["restore", "k8s:ml/deployment/llm-serve", "--config", str(cfg), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "workload": "k8s:ml/deployment/llm-serve",
        "restored": True,
        "detail": "scaled deployments ml/llm-serve back to 2",
    }
    d = cluster.get("apps", "deployments", "ml", "llm-serve")
    assert d["spec"]["replicas"] == 2
    assert ORIGINAL_REPLICAS_KEY not in d["metadata"]["annotations"]
    assert len(cluster.owned_pods("ml", d["metadata"]["uid"])) == 2
    # Again: nothing to restore, exit 1 with the reason.
    again = CliRunner().invoke(app, ["restore", "ml/deployment/llm-serve", "--config", str(cfg)])
    assert again.exit_code == 1
    assert "did not stop it" in again.output


def test_restore_refuses_kinds_it_never_scales(tmp_path: Path, server: Any) -> None:
    cfg = config_for(tmp_path, server.url)
    result = CliRunner().invoke(app, ["restore", "k8s:ml/pod/idle-pod", "--config", str(cfg)])
    assert result.exit_code == 2
    assert "restorable kinds" in result.output


def test_restore_help_teaches() -> None:
    result = CliRunner().invoke(app, ["restore", "--help"])
    assert result.exit_code == 0
    assert "original-replicas" in result.output


def test_the_registry_builds_the_kubernetes_source_from_a_kubeconfig(tmp_path: Path, server: Any) -> None:
    from gpusteward.integrations.kubernetes.executor import KubernetesExecutor
    from gpusteward.integrations.sim import SimClock
    from gpusteward.runtime.config import load_settings
    from gpusteward.runtime.registry import REGISTRY, build_integration

    assert "kubernetes" in REGISTRY
    settings = load_settings(config_for(tmp_path, server.url))
    integration = build_integration(settings, SimClock(datetime.now(UTC)))
    try:
        assert integration.source.name == "kubernetes"
        assert isinstance(integration.executors[0], KubernetesExecutor)
        assert integration.wrap_notifier is not None
        assert integration.source.metrics.name == "prometheus"  # type: ignore[attr-defined]
        # L4 parts come from the same integration, over its one API client.
        assert integration.node_control is not None
        assert integration.pool_scaler is not None
        assert integration.node_control.api is integration.source.api  # type: ignore[attr-defined]
    finally:
        integration.source.close()
