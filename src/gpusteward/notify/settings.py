"""The ``notify`` config section: which apprise URLs hear about what, per team or owner.

A route is one apprise URL, a list of them, or ``{urls: [...], language: zh}``. An owner's
notice goes to ``owners[user]``, else ``teams[team]``, else ``default``; notices for admins
(approval requests, digests) go to ``admins``. ``{contact}`` in a URL is replaced by the
owner's contact (an e-mail address, say); a URL naming ``{contact}`` is skipped for an owner
without one.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Language = Literal["en", "zh"]


class Route(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    urls: list[str] = Field(min_length=1, description="apprise URLs (slack://, dingtalk://, mailto://, ...).")
    language: Language | None = Field(None, description="en or zh; unset: notify.language.")

    @model_validator(mode="before")
    @classmethod
    def _short_forms(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"urls": [value]}
        if isinstance(value, list):
            return {"urls": value}
        return value

    @field_validator("urls")
    @classmethod
    def _schemes(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if "://" not in url:
                raise ValueError(f"not an apprise URL (scheme://...): {url.split('@')[-1][:60]!r}")
        return urls


class NotifySettings(BaseModel):
    """Owners and admins hear on their own channels (through apprise, `pip install gpusteward[notify]`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    language: Language = Field("en", description="Language of notices unless a route names its own.")
    default: Route | None = Field(None, description="Owners without an owner or team route.")
    teams: dict[str, Route] = Field(default_factory=dict, description="Team / namespace / account → route.")
    owners: dict[str, Route] = Field(default_factory=dict, description="User → route (wins over the team's).")
    admins: Route | None = Field(None, description="Approval requests and digests.")
    timeout_seconds: float = Field(10.0, gt=0, le=600, description="Per-channel send timeout.")

    @property
    def configured(self) -> bool:
        return bool(self.default or self.teams or self.owners or self.admins)
