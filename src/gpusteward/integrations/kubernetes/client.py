"""An ``ApiClient`` in-cluster (the pod's service account) or from a kubeconfig."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpusteward.domain.errors import ConfigError, SourceUnavailable
from gpusteward.integrations.kubernetes.settings import KubernetesSourceSettings

#: Where Kubernetes mounts the service account's namespace in every pod.
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def in_cluster() -> bool:
    """True inside a pod: the API server's address is in the environment."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def own_namespace(configured: str = "", sa_file: Path = SA_NAMESPACE) -> str:
    """The agent's own namespace: configured, else ``POD_NAMESPACE``, else the service account's."""
    if configured:
        return configured
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return sa_file.read_text().strip()
    except OSError:
        return ""


def api_client(cfg: KubernetesSourceSettings) -> Any:
    """A ``kubernetes.client.ApiClient`` as ``cfg.config`` says (``auto``: in-cluster inside a pod)."""
    try:
        from kubernetes import client
        from kubernetes import config as kconfig
        from kubernetes.config.config_exception import ConfigException
    except ImportError as e:
        raise SourceUnavailable(
            "the kubernetes source needs the official client: pip install 'gpusteward[k8s]'"
        ) from e
    mode = cfg.config
    if mode == "auto":
        mode = "in-cluster" if in_cluster() else "kubeconfig"
    config: Any = kconfig  # its loaders are untyped
    configuration = client.Configuration()
    try:
        if mode == "in-cluster":
            config.load_incluster_config(client_configuration=configuration)
        else:
            path = str(cfg.kubeconfig) if cfg.kubeconfig else None
            config.load_kube_config(
                config_file=path,
                context=cfg.context,
                client_configuration=configuration,
                persist_config=False,
            )
    except (ConfigException, OSError) as e:
        where = "in-cluster service account" if mode == "in-cluster" else f"kubeconfig {cfg.kubeconfig or ''}"
        raise ConfigError(f"source.kubernetes: cannot load the {where}: {e}") from e
    return client.ApiClient(configuration)
