"""Settings of L4 parking (``parking:`` in the config): when idle nodes may be cordoned / drained."""

from __future__ import annotations

import re
from datetime import time
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

_WINDOW = re.compile(r"^(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})$")


def parse_window(text: str) -> tuple[time, time]:
    """``"22:00-06:00"`` → (22:00, 06:00). An end at or before the start runs past midnight."""
    m = _WINDOW.match(text.strip())
    if m is None:
        raise ValueError(f"window {text!r} is not HH:MM-HH:MM (e.g. 22:00-06:00)")
    h1, m1, h2, m2 = (int(g) for g in m.groups())
    if h2 == 24 and m2 == 0:
        h2 = 0
    if not (0 <= h1 < 24 and 0 <= h2 < 24 and m1 < 60 and m2 < 60):
        raise ValueError(f"window {text!r}: hours are 00-23 (or 24:00 as an end), minutes 00-59")
    if (h1, m1) == (h2, m2):
        raise ValueError(f"window {text!r} is empty: start and end are the same")
    return time(h1, m1), time(h2, m2)


class ParkingSettings(BaseModel):
    """L4: park (cordon on Kubernetes, drain on Slurm) nodes whose GPUs all sit free during a
    low-load window, and unpark them when the window ends or demand returns."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = Field(False, description="Park idle nodes at all (off by default).")
    windows: list[str] = Field(
        default_factory=list,
        description='Low-load windows in local time, e.g. ["22:00-06:00"]; an end before the start '
        "runs past midnight. With use_forecast too, both must agree.",
    )
    timezone: str = Field("UTC", description="IANA time zone of the windows, e.g. Europe/Berlin.")
    use_forecast: bool = Field(
        False,
        description="Also require the forecast's low-load window for the node's pool (forecast.pools); "
        "no parking when its uncertainty band crosses the pool's SLO headroom.",
    )
    min_free_gpus: int = Field(
        8,
        ge=0,
        le=1_000_000,
        description="Free GPUs kept on unparked nodes per pool; fewer unparks nodes (demand).",
    )
    min_spare_nodes: int = Field(
        1, ge=0, le=100_000, description="Wholly free nodes kept unparked per pool, on top of min_free_gpus."
    )
    idle_minutes: float = Field(
        60.0,
        gt=0,
        le=10080,
        description="Minutes every GPU of a node must be free and idle before it is parked.",
    )
    idle_util_pct: float = Field(
        5.0, ge=0, le=100, description="A free GPU at or under this utilisation counts as idle."
    )
    max_per_tick: int = Field(
        2, ge=1, le=10_000, description="Nodes parked in one tick, at most (unparking is not capped)."
    )
    prewarm_minutes: float = Field(
        30.0, ge=0, le=10080, description="Unpark this long before a window ends or a predicted rise starts."
    )
    pools: list[str] = Field(
        default_factory=list, description="Only nodes of these GPU pools are parked (empty: every pool)."
    )

    @field_validator("windows")
    @classmethod
    def _windows(cls, v: list[str]) -> list[str]:
        for w in v:
            parse_window(w)
        return v

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ValueError(f"unknown time zone {v!r}") from e
        return v

    def parsed_windows(self) -> list[tuple[time, time]]:
        return [parse_window(w) for w in self.windows]
