"""``source: remote_write`` → a ``RemoteWriteSource`` whose receiver the web server feeds."""

from __future__ import annotations

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import BuildContext, Integration, no_history
from gpusteward.integrations.prometheus.build import build_source
from gpusteward.integrations.prometheus.remote_write.receiver import Receiver
from gpusteward.integrations.prometheus.remote_write.settings import RemoteWriteSettings
from gpusteward.integrations.prometheus.remote_write.source import RemoteWriteSource
from gpusteward.integrations.prometheus.remote_write.wire import available


def build(cfg: RemoteWriteSettings, ctx: BuildContext) -> Integration:
    if why := available():
        raise ConfigError(f"source remote_write: {why}")
    book = build_source(cfg.prometheus, ctx)
    receiver = Receiver(
        book.specs,
        max_samples=cfg.max_buffered_samples,
        max_body_bytes=cfg.max_body_bytes,
        max_decoded_bytes=cfg.max_decoded_bytes,
        retry_after_s=cfg.retry_after_seconds,
        forget_after_s=ctx.window_s,
    )
    source = RemoteWriteSource(receiver, book)
    return Integration(
        name="remote_write",
        source=source,
        history=book.history if cfg.backfill else no_history,
        parts=receiver,
    )
