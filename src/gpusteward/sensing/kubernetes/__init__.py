"""The ``kubernetes`` source: GPU pods and their owners from the API server.

Nothing here imports the ``kubernetes`` client at import time (``pip install 'gpusteward[k8s]'``);
``api.KubeApi`` and ``client.api_client`` import it when they are used.
"""
