"""The config file: one YAML document validated by pydantic-settings.

Unknown keys are errors (a typo must never be silently ignored). Environment variables
``GPUSTEWARD_<SECTION>__<FIELD>`` override the file, e.g. ``GPUSTEWARD_MODE=enforce`` or
``GPUSTEWARD_STORE__URL=postgresql+psycopg://...``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gpusteward.analysis.budgets import BudgetSettings
from gpusteward.analysis.cost import PriceTable
from gpusteward.analysis.showback import ShowbackSettings
from gpusteward.domain.errors import ConfigError
from gpusteward.domain.yamlload import config_error, load_yaml
from gpusteward.integrations.cloud.settings import CloudSettings
from gpusteward.integrations.kubernetes.settings import KubernetesSourceSettings
from gpusteward.integrations.nvml.settings import NvmlSourceSettings
from gpusteward.integrations.prometheus.remote_write.settings import RemoteWriteSettings
from gpusteward.integrations.prometheus.settings import PrometheusSourceSettings
from gpusteward.integrations.replay.settings import ReplaySettings
from gpusteward.integrations.sim.settings import SimSourceSettings
from gpusteward.integrations.slurm.settings import SlurmSourceSettings
from gpusteward.notify.settings import NotifySettings
from gpusteward.policy.consolidation import ConsolidationSettings
from gpusteward.policy.parking_settings import ParkingSettings
from gpusteward.policy.settings import PolicySettings
from gpusteward.runtime.config_env import unknown_variables, variable_for
from gpusteward.runtime.insights_settings import ForecastSettings, InsightsSettings
from gpusteward.web.settings import ServerSettings, WebSettings

log = logging.getLogger(__name__)


def default_state_url() -> str:
    """SQLite in the XDG state directory, so commands run from any folder share one state."""
    folder = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "gpusteward"
    # A new machine has none and SQLite will not create it; if this fails, opening the store
    # names the path and the reason.
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'gpusteward.db'}"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SourceSettings(_Section):
    name: str = Field(
        "sim",
        description="Which source senses the cluster: sim (built in), nvml, prometheus, remote_write, slurm, "
        "kubernetes, replay.",
    )
    sim: SimSourceSettings = Field(default_factory=SimSourceSettings)
    prometheus: PrometheusSourceSettings = Field(default_factory=PrometheusSourceSettings)
    remote_write: RemoteWriteSettings = Field(default_factory=RemoteWriteSettings)
    slurm: SlurmSourceSettings = Field(default_factory=SlurmSourceSettings)
    kubernetes: KubernetesSourceSettings = Field(default_factory=KubernetesSourceSettings)
    nvml: NvmlSourceSettings = Field(default_factory=NvmlSourceSettings)
    replay: ReplaySettings = Field(default_factory=ReplaySettings)
    backoff_max_seconds: float = Field(
        300,
        gt=0,
        le=86400,
        description="Longest wait before retrying a source that failed (doubles per failure).",
    )


class StoreSettings(_Section):
    url: str = Field(default_factory=default_state_url, description="SQLAlchemy URL of the state database.")
    window_minutes: float = Field(
        240,  # the default service rule reads 3.5 h; 4 bytes per metric per tick per GPU
        gt=0,
        le=10080,
        description="History kept per GPU in memory (at most a week); at least the longest rule window.",
    )
    ledger_flush_seconds: float = Field(
        300,  # a usage row per workload: at 10,000 GPUs writing them each tick was ~40 ms of ~190
        ge=0,
        le=3600,
        description="How often the ledger's amounts are written (and when the loop stops). A crash "
        "loses the use counted since (waste goes on from its marks). 0: every tick.",
    )


class RuleSettings(_Section):
    use_default_pack: bool = Field(True, description="Load the built-in rule pack.")
    files: list[Path] = Field(
        default_factory=list, description="Extra rule packs (YAML), relative to the config file."
    )


class AnalysisSettings(_Section):
    stale_after_seconds: float = Field(
        180, gt=0, le=86400, description="A GPU whose newest sample is older than this is never acted on."
    )


class HaSettings(_Section):
    """Two replicas may run; only the leader decides and acts."""

    leader_election: Literal["none", "postgres", "kubernetes-lease"] = Field(
        "none",
        description="none: this replica always acts (run one). postgres: a PostgreSQL advisory lock "
        "on the state database. kubernetes-lease: a coordination.k8s.io Lease (in-cluster).",
    )
    lease_name: str = Field("gpusteward-leader", description="Name of the Lease (kubernetes-lease).")
    lease_namespace: str = Field(
        "", description="Namespace of the Lease; empty: the pod's own namespace (kubernetes-lease)."
    )
    lease_seconds: float = Field(
        15,
        gt=0,
        le=3600,
        description="How long leadership lasts without renewal before the other replica takes it.",
    )


class LogSettings(_Section):
    format: Literal["plain", "json"] = Field(
        "plain",
        description="plain: a readable line per event. json: one JSON object per line (time, level, logger, "
        "message and, where known, tick, workload, rule, action and idempotency key) for Loki or ELK. "
        "`gpusteward --log-format` overrides it.",
    )


class Settings(BaseSettings):
    """Everything gpusteward reads from its config file."""

    model_config = SettingsConfigDict(
        env_prefix="GPUSTEWARD_",
        env_nested_delimiter="__",
        extra="forbid",
        allow_inf_nan=False,
        nested_model_default_partial_update=True,
    )

    mode: Literal["dry-run", "enforce"] = Field(
        "dry-run", description="dry-run records what would be done; enforce acts."
    )
    tick_seconds: float = Field(30, ge=1, le=86400, description="Seconds between two ticks of the loop.")
    source: SourceSettings = Field(default_factory=SourceSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    rules: RuleSettings = Field(default_factory=RuleSettings)
    analysis: AnalysisSettings = Field(default_factory=AnalysisSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    cost: PriceTable = Field(default_factory=PriceTable)
    showback: ShowbackSettings = Field(default_factory=ShowbackSettings)
    budgets: BudgetSettings = Field(default_factory=BudgetSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    ha: HaSettings = Field(default_factory=HaSettings)
    forecast: ForecastSettings = Field(default_factory=ForecastSettings)
    parking: ParkingSettings = Field(default_factory=ParkingSettings)
    consolidation: ConsolidationSettings = Field(default_factory=ConsolidationSettings)
    insights: InsightsSettings = Field(default_factory=InsightsSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    notify: NotifySettings = Field(default_factory=NotifySettings)
    cloud: CloudSettings = Field(default_factory=CloudSettings)
    log: LogSettings = Field(default_factory=LogSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment overrides the file (passed as init kwargs).
        return (env_settings, init_settings)

    @property
    def dry_run(self) -> bool:
        return self.mode != "enforce"


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings from ``path`` (or defaults and the environment when None).

    Raises ``ConfigError`` naming the file, the line and the problem.
    """
    data: dict[str, Any] = {}
    doc = None
    if path is not None:
        doc = load_yaml(path)
        if doc.data is None:
            data = {}
        elif not isinstance(doc.data, dict):
            raise ConfigError("the config must be a mapping of sections", path=doc.path, line=1)
        else:
            data = doc.data
    data = {**data, **overrides}
    try:
        settings = Settings(**data)
    except ValidationError as e:
        err = e.errors()[0]
        var = variable_for(err["loc"])
        if var is not None or doc is None:  # the file is not to blame for the environment
            dotted = ".".join(str(p) for p in err["loc"])
            where = f"environment variable {var}" if var else "<environment>"
            raise ConfigError(f"{dotted}: {err['msg']}", path=where) from e
        raise config_error(e, doc) from e
    for line in unknown_variables(Settings):
        log.warning("%s", line)
    if path is not None:
        base = Path(path).parent
        settings.rules.files = [f if f.is_absolute() else base / f for f in settings.rules.files]
    return settings
