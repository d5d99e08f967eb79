"""The ``remote_write`` source: Prometheus remote write (1.0) received on the web server's
``POST /api/v1/write``, so that every sample arrives without a query."""

from gpusteward.integrations.prometheus.remote_write.receiver import BufferFull, Receiver, active
from gpusteward.integrations.prometheus.remote_write.source import RemoteWriteSource
from gpusteward.integrations.prometheus.remote_write.wire import BadBody, TooLarge, decode, encode

__all__ = ["BadBody", "BufferFull", "Receiver", "RemoteWriteSource", "TooLarge", "active", "decode", "encode"]
