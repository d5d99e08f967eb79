"""The cloud under the nodes: GPU instances (L4 stop or scale-in of idle nodes) and spot
interruption notices (checkpoint every workload on the node before it is taken). AWS is
first-class (boto3, the ``cloud`` extra, imported lazily); GCP's and Azure's interruption notices
come from their metadata services and need nothing."""
