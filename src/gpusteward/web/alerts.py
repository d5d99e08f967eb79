"""The Alertmanager webhook (version 4) payload, validated, and what its alerts point at.

Required: ``version`` "4", ``status``, ``receiver``, ``alerts``, and per alert ``labels``
with an ``alertname`` and ``startsAt``; the rest is optional, as real senders (and older
Alertmanagers) leave parts out. An alert without a status takes the group's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpusteward.integrations.prometheus.parse import LabelMap, first_label, identify_gpu, identify_holder

Status = Literal["firing", "resolved"]


class Alert(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: Status | None = None
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime  # noqa: N815 - the wire name
    endsAt: datetime | None = None  # noqa: N815
    generatorURL: str = ""  # noqa: N815
    fingerprint: str = ""

    @field_validator("labels")
    @classmethod
    def _alertname(cls, v: dict[str, str]) -> dict[str, str]:
        if not v.get("alertname"):
            raise ValueError("an alert needs an alertname label")
        return v


class WebhookPayload(BaseModel):
    model_config = ConfigDict(extra="allow")

    version: Literal["4"]
    status: Status
    receiver: str
    alerts: list[Alert]
    groupKey: str = ""  # noqa: N815
    truncatedAlerts: int = Field(0, ge=0)  # noqa: N815
    groupLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonAnnotations: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    externalURL: str = ""  # noqa: N815


def problems(e: ValidationError, limit: int = 10) -> list[str]:
    """``loc: message`` lines for a 400 answer."""
    out = []
    for err in e.errors()[:limit]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        out.append(f"{loc}: {err['msg']}")
    return out


@dataclass(frozen=True, slots=True)
class AlertTargets:
    """What the firing alerts point at: GPU uuids (or node/gpuN) and workload ids."""

    alerts: tuple[str, ...]
    gpus: tuple[str, ...]
    workloads: tuple[str, ...]

    def describe(self) -> str:
        parts = [f"alerts {', '.join(self.alerts)}"]
        if self.gpus:
            parts.append(f"gpus {', '.join(self.gpus[:20])}")
        if self.workloads:
            parts.append(f"workloads {', '.join(self.workloads[:20])}")
        return "alertmanager: " + "; ".join(parts)


def alert_status(alert: Alert, payload: WebhookPayload) -> Status:
    return alert.status or payload.status


def targets(
    payload: WebhookPayload, labels: LabelMap | None = None, ignore_pods: re.Pattern[str] | None = None
) -> AlertTargets:
    """GPUs and workloads named by the firing alerts' labels (group labels included)."""
    lm = labels or LabelMap()
    names: dict[str, None] = {}
    gpus: dict[str, None] = {}
    workloads: dict[str, None] = {}
    for alert in payload.alerts:
        if alert_status(alert, payload) != "firing":
            continue
        merged: Mapping[str, str] = {**payload.commonLabels, **alert.labels}
        names[merged["alertname"]] = None
        gpu = identify_gpu(merged, lm)
        if gpu is not None:
            gpus[gpu.uuid] = None
        else:
            node, index = first_label(merged, lm.node), first_label(merged, lm.index)
            if node and index:
                gpus[f"{node}/gpu{index}"] = None
        holder = identify_holder(merged, lm, ignore_pods)
        if holder is not None:
            workloads[holder.id] = None
    return AlertTargets(tuple(names), tuple(gpus), tuple(workloads))
