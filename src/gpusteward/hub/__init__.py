"""The federation hub (``gpusteward hub``): many clusters' agents seen as one fleet. It pulls each
member's ``/api/v1`` read-only, keeps it in PostgreSQL keyed by cluster, and serves the fleet's
pages. It never acts: actions stay with each cluster's own agent."""
