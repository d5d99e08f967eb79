"""Kubernetes: GPU pods and their owners from the API server, and acting on them (events, scale
with annotation, eviction, delete), the pool scaler, Lease leadership and node cordoning.

Nothing here imports the ``kubernetes`` client at import time (``pip install 'gpusteward[k8s]'``);
``kubeapi.KubeApi`` and ``client.api_client`` import it when they are used.
"""
