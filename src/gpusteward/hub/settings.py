"""The hub's own config file (``gpusteward hub run --config hub.yaml``): its members, how often
it pulls them, its PostgreSQL database and where it serves its pages.

The hub reads members with a ``viewer`` token each and never acts; its state lives in PostgreSQL
only (two replicas share it, the leader pulls), in a schema of its own so it can share a
database with a member.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.yamlload import config_error, load_yaml
from gpusteward.web.settings import parse_listen

NAME = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class MemberSettings(BaseModel):
    """One member agent the hub pulls (its web app: `gpusteward run --web` or `gpusteward serve`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(
        pattern=NAME,
        description="The cluster's name in the hub (its figures are keyed by it; keep it stable). "
        "Should match the member's web.cluster_name; the hub warns when it does not.",
    )
    url: str = Field(
        pattern=r"^https?://[^\s/]+", max_length=500, description="The member's web base URL (http or https)."
    )
    token: SecretStr = Field(description="A `viewer` API token of the member (`gpusteward token create`).")
    verify_tls: bool = Field(True, description="Check the member's TLS certificate (https URLs).")
    ca_file: Path | None = Field(
        None, description="A CA bundle (PEM) to check the member's certificate with; unset: the system's."
    )
    teams: list[str] = Field(
        default_factory=list,
        max_length=1000,
        description="Teams that may run jobs on this cluster (cross-cluster advice only points a "
        "team at a cluster it may use). Empty: every team.",
    )
    link_url: str = Field(
        "",
        max_length=500,
        description="Where people open the member's own pages (the drill-down links there). Empty: url.",
    )

    @property
    def pages_url(self) -> str:
        return (self.link_url or self.url).rstrip("/")


class HubWebSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    listen: str = Field("127.0.0.1:8090", description="HOST:PORT the hub's pages are served on.")
    token: SecretStr | None = Field(
        None,
        description="A token people and scripts must give to read the hub (login form, or "
        "`Authorization: Bearer`). Unset: open to whoever reaches listen.",
    )
    secure_cookies: bool = Field(False, description="Send the login cookie over HTTPS only (behind TLS).")
    shutdown_grace_seconds: int = Field(
        10, ge=1, le=600, description="After SIGTERM, how long running requests may finish."
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        parse_listen(v)
        return v


class HubSettings(BaseModel):
    """``hub.yaml``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    members: list[MemberSettings] = Field(min_length=1, max_length=500, description="The member agents.")
    store_url: str = Field(
        description="The hub's PostgreSQL database (SQLAlchemy URL, postgresql+psycopg://...). "
        "Required: two hub replicas share it and elect a leader on it."
    )
    store_schema: str = Field(
        "gpusteward_hub",
        pattern=r"^[a-z_][a-z0-9_]{0,62}$",
        description="The PostgreSQL schema the hub's tables live in (made when missing), apart "
        "from a member's tables in the same database.",
    )
    interval_seconds: float = Field(
        60.0, ge=1, le=86_400, description="How often the leader pulls every member."
    )
    timeout_seconds: float = Field(20.0, gt=0, le=600, description="One HTTP request to a member, at most.")
    stale_after_seconds: float = Field(
        300.0,
        ge=1,
        le=30 * 86_400,
        description="A member not pulled successfully for this long is shown as stale (its last "
        "figures kept and marked, never shown as zero).",
    )
    backoff_max_seconds: float = Field(
        900.0, ge=1, le=86_400, description="A down member is retried with doubling waits up to this."
    )
    page_size: int = Field(
        500, ge=1, le=5000, description="Rows asked for per page of a member's listing (findings, actions)."
    )
    max_pages: int = Field(
        20, ge=1, le=10_000, description="Pages of one listing (findings, actions) read per pull, at most."
    )
    lease_seconds: float = Field(
        15.0, ge=2, le=600, description="How soon a dead leader's lock is freed for the other replica."
    )
    advice_min_wait_minutes: float = Field(
        30.0,
        ge=0,
        le=10_080,
        description="Cross-cluster advice names waits with a median at least this long.",
    )
    advice_min_idle_hours: float = Field(
        1.0, ge=0, le=744, description="... and idle GPUs of another cluster for at least this many hours."
    )
    web: HubWebSettings = Field(default_factory=HubWebSettings, description="The hub's pages.")

    @field_validator("store_url")
    @classmethod
    def _postgres(cls, v: str) -> str:
        try:
            backend = make_url(v).get_backend_name()
        except ArgumentError as e:
            raise ValueError(f"not a database URL: {e}") from None
        if backend != "postgresql":
            raise ValueError(f"the hub needs PostgreSQL (postgresql+psycopg://...), not {backend}")
        return v

    @model_validator(mode="after")
    def _unique(self) -> HubSettings:
        names = [m.name for m in self.members]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"member names must be unique: {', '.join(twice)} given twice")
        return self

    def member(self, name: str) -> MemberSettings | None:
        return next((m for m in self.members if m.name == name), None)


def load_hub_settings(path: str | Path, **overrides: Any) -> HubSettings:
    """``hub.yaml`` → settings; a ``ConfigError`` names the file, line and field."""
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise ConfigError("the hub config must be a mapping (members, store_url, ...)", path=doc.path, line=1)
    try:
        settings = HubSettings(**{**doc.data, **overrides})
    except ValidationError as e:
        raise config_error(e, doc) from e
    base = Path(path).parent
    for k, m in enumerate(settings.members):
        if m.ca_file is not None and not m.ca_file.is_absolute():
            m.ca_file = base / m.ca_file
        if m.ca_file is not None and not m.ca_file.is_file():
            where = doc.line_of(("members", k, "ca_file"))
            raise ConfigError(f"members.{k}.ca_file: no such file {m.ca_file}", path=doc.path, line=where)
    return settings
