"""The ``server`` config section: where ``gpusteward run`` serves /metrics and the receiver."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9400`` for IPv6) → (host, port). Raises ``ValueError``."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


class ServerSettings(BaseModel):
    """/metrics and the Alertmanager receiver (POST /api/v1/alertmanager)."""

    model_config = ConfigDict(extra="forbid")

    listen: str | None = Field(
        None, description="HOST:PORT to serve on (e.g. 0.0.0.0:9400); unset: none. `run --listen` overrides."
    )
    alertmanager_token: SecretStr | None = Field(
        None, description="When set, the receiver needs `Authorization: Bearer <token>`."
    )
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0, description="Larger webhook bodies get 413.")

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        if v is not None:
            parse_listen(v)
        return v
