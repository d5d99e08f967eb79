"""``gpusteward run``'s HTTP side: ``serve`` (thread + loop), ``app`` (routes), ``alerts`` (payload)."""
