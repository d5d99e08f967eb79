"""Acting on Kubernetes: the executor (events, scale with annotation, eviction, delete),
the pool scaler, Lease leadership and node cordoning. The API comes in as a ``KubeControl``."""

from gpusteward.execution.kubernetes.events import EventNotifier, EventPoster
from gpusteward.execution.kubernetes.executor import KubernetesExecutor, restore
from gpusteward.execution.kubernetes.lease import LeaseLeadership
from gpusteward.execution.kubernetes.scaler import KubernetesPoolScaler

__all__ = [
    "EventNotifier",
    "EventPoster",
    "KubernetesExecutor",
    "KubernetesPoolScaler",
    "LeaseLeadership",
    "restore",
]
