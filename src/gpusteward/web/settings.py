"""The ``web`` and ``server`` config sections: how ``gpusteward serve`` and ``run --web`` serve
the admin app, and where ``gpusteward run`` serves /metrics and the Alertmanager receiver."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9400`` for IPv6) → (host, port). Raises ``ValueError``."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


class ServerSettings(BaseModel):
    """/metrics and the Alertmanager receiver (POST /api/v1/alertmanager)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    listen: str | None = Field(
        None, description="HOST:PORT to serve on (e.g. 0.0.0.0:9400); unset: none. `run --listen` overrides."
    )
    alertmanager_token: SecretStr | None = Field(
        None,
        description="The receiver needs `Authorization: Bearer <token>`. Without it (and without "
        "alertmanager_open) the receiver is not started: `run --listen` stops with a config error.",
    )
    alertmanager_open: bool = Field(
        False,
        description="Take alerts without a token, from anyone who can reach the port (a trusted "
        "network only): each firing alert can make the agent tick early.",
    )
    alertmanager_min_wake_seconds: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="At most one early tick per this many seconds; alerts meanwhile add their "
        "reasons to the next one.",
    )
    max_body_bytes: int = Field(
        4 * 1024 * 1024, gt=0, le=1024**3, description="Larger webhook bodies get 413."
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        if v is not None:
            parse_listen(v)
        return v


class WebSettings(BaseModel):
    """The web admin: pages, the JSON API under /api/v1, sessions and one-click links."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    listen: str = Field(
        "127.0.0.1:8080", description="HOST:PORT for `gpusteward serve` (its --host/--port override)."
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Processes `gpusteward serve` answers requests in (its --workers overrides): "
        "one Python process serves one request at a time, so give a busy admin one per core. "
        "`run --web` serves from the loop's own process and ignores it.",
    )
    base_url: str = Field(
        "",
        description="Where people reach the web app (e.g. https://gpusteward.example.com): the "
        "one-click links in notices point there. Empty: http://<listen>.",
    )
    secret_key: SecretStr | None = Field(
        None,
        description="Key that signs session cookies and one-click links. Unset: a random key kept "
        "in the state database (shared by every process on it).",
    )
    session_hours: float = Field(12.0, gt=0, le=720, description="How long a login lasts.")
    link_hours: float = Field(
        24.0, gt=0, le=720, description="How long a one-click approve/snooze link works."
    )
    login_max_failures: int = Field(
        10,
        ge=1,
        le=10_000,
        description="Failed logins (form or bearer token) one source address, or one token prefix, "
        "may make within login_window_seconds before it must wait (429 with Retry-After).",
    )
    login_window_seconds: float = Field(
        300.0, ge=1, le=86_400, description="The sliding window over which failed logins are counted."
    )
    shutdown_grace_seconds: int = Field(
        10,
        ge=1,
        le=600,
        description="After SIGTERM, how long requests still running may finish before they are "
        "cancelled and the server exits.",
    )
    read_cache: bool = Field(
        True,
        description="Answer the findings, actions and audit listings, the pause flag and the caller's "
        "token from what was read since the database last changed (PostgreSQL only: a write "
        "anywhere, by any process, starts over; nothing stale is ever shown). Off: every request "
        "reads the store.",
    )
    secure_cookies: bool = Field(
        False, description="Send the session cookie only over HTTPS (turn on behind a TLS proxy)."
    )
    max_body_bytes: int = Field(
        1_048_576,
        ge=1024,
        le=64 * 1_048_576,
        description="Largest request body the web app reads (a rule pack, a form); larger ones get 413.",
    )
    cluster_name: str = Field(
        "",
        max_length=63,
        pattern=r"^([a-z0-9][a-z0-9._-]*)?$",
        description="This cluster's name, shown in /api/v1/overview and /api/v1/fleet (a federation "
        "hub keys what it pulls by it). Empty: unnamed.",
    )
    rules_file: Path | None = Field(
        None,
        description="Rule pack the rules page saves edits to (admins only); it must be listed in "
        "rules.files to take effect at the next start. Unset: rules can be previewed, not saved.",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        parse_listen(v)
        return v

    def link_base(self) -> str:
        if self.base_url:
            return self.base_url.rstrip("/")
        host, port = parse_listen(self.listen)
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104 - compared, not bound
        return f"http://{host}:{port}"
