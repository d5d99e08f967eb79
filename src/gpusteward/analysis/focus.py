"""The showback as a FinOps FOCUS dataset (FinOps Open Cost and Usage Specification, 1.1):
one Usage row per team x GPU model x day for the GPU-hours held, and one per team x GPU model x
day for measured power where it was charged.

Columns follow the specification's column library
(https://focus.finops.org/focus-specification/v1-1/, FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec
``specification/columns/*.md``): all Mandatory columns, and the Conditional ones that apply to
GPU-hours (consumption, pricing, resource, SKU, sub account, tags). What gpusteward adds rides in
``x_`` columns, as the specification's naming rules ask.

* BilledCost = EffectiveCost = ContractedCost: the held GPU-hours at the rate they are priced at
  (on-demand, reserved or spot), which is what the team is shown; ListCost is the on-demand
  price (the list price) times the same hours.
* PricingCategory: on-demand "Standard", reserved "Committed", spot "Dynamic"; several rates on
  one row "Other".
* A team is a sub account; owners, the used, wasted and reclaimed GPU-hours are in ``x_`` columns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from gpusteward.analysis.cost import PriceTable
from gpusteward.analysis.showback import ShowbackSettings, month_range, team_label
from gpusteward.domain.records import ShowbackRow

FOCUS_VERSION = "1.1"
GPU_HOURS = "GPU-Hours"
_CATEGORY = {"on-demand": "Standard", "reserved": "Committed", "spot": "Dynamic"}

#: The columns in the order they are written: FOCUS columns alphabetically, then ``x_`` ones.
COLUMNS: tuple[str, ...] = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "SkuId",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
    "x_GpuModel",
    "x_Rates",
    "x_Users",
    "x_UsedGpuHours",
    "x_WastedGpuHours",
    "x_ReclaimedGpuHours",
)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def focus_time(d: date) -> str:
    """A day boundary in FOCUS's Date/Time format (UTC, 'YYYY-MM-DDTHH:mm:ssZ')."""
    return f"{d.isoformat()}T00:00:00Z"


@dataclass(slots=True)
class _Group:
    held: float = 0.0
    used: float = 0.0
    wasted: float = 0.0
    reclaimed: float = 0.0
    spend: float = 0.0
    list_cost: float = 0.0
    kwh: float = 0.0
    power_cost: float = 0.0
    rates: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)


def _groups(rows: Sequence[ShowbackRow], prices: PriceTable) -> dict[tuple[str, str, str], _Group]:
    out: dict[tuple[str, str, str], _Group] = {}
    for r in rows:
        k, a = r.key, r.amounts
        g = out.setdefault((k.day, k.team, k.gpu_model), _Group())
        g.held += a.held_gpu_hours
        g.used += a.used_gpu_hours
        g.wasted += a.wasted_gpu_hours
        g.reclaimed += a.reclaimed_gpu_hours
        g.spend += a.spend
        g.list_cost += a.held_gpu_hours * prices.price(k.gpu_model, "on-demand")
        g.kwh += a.kwh
        g.power_cost += a.power_cost
        g.rates.add(k.rate)
        g.users.add(k.user)
    return out


def focus_rows(
    rows: Sequence[ShowbackRow], month: str, settings: ShowbackSettings, prices: PriceTable
) -> list[dict[str, Any]]:
    """The month's showback as FOCUS rows (values typed: numbers, strings, None, a dict for Tags)."""
    period_start, period_end = month_range(month)
    out: list[dict[str, Any]] = []
    for (day, team, model), g in sorted(_groups(rows, prices).items()):
        if g.held <= 0 and g.power_cost <= 0:
            continue  # waste or reclaim counted without a held sample: no charge to show
        start = date.fromisoformat(day)
        sub = team_label(team)
        rate = next(iter(g.rates)) if len(g.rates) == 1 else "mixed"
        common: dict[str, Any] = {
            "BillingAccountId": settings.billing_account_id,
            "BillingAccountName": settings.billing_account_id,
            "BillingCurrency": prices.currency,
            "BillingPeriodEnd": focus_time(period_end),
            "BillingPeriodStart": focus_time(period_start),
            "ChargeCategory": "Usage",
            "ChargeClass": None,
            "ChargeFrequency": "Usage-Based",
            "ChargePeriodEnd": focus_time(start + timedelta(days=1)),
            "ChargePeriodStart": focus_time(start),
            "InvoiceIssuerName": settings.provider_name,
            "ProviderName": settings.provider_name,
            "PublisherName": settings.provider_name,
            "RegionId": settings.region_id,
            "RegionName": settings.region_id,
            "ResourceId": f"{settings.billing_account_id}/{_slug(sub)}/{_slug(model)}",
            "ResourceName": f"{model} GPUs of {sub}",
            "ResourceType": "GPU",
            "ServiceCategory": "Compute",
            "SkuId": _slug(model),
            "SubAccountId": sub,
            "SubAccountName": sub,
            "Tags": {"team": sub, "gpu_model": model},
            "x_GpuModel": model,
            "x_Rates": ",".join(sorted(g.rates)),
            "x_Users": ",".join(sorted(g.users)),
            "x_UsedGpuHours": g.used,
            "x_WastedGpuHours": g.wasted,
            "x_ReclaimedGpuHours": g.reclaimed,
        }
        if g.held > 0:
            out.append(
                {
                    **common,
                    "BilledCost": g.spend,
                    "ChargeDescription": f"{g.held:.2f} GPU-hours of {model} held by {sub} ({rate} rate)",
                    "ConsumedQuantity": g.held,
                    "ConsumedUnit": GPU_HOURS,
                    "ContractedCost": g.spend,
                    "ContractedUnitPrice": g.spend / g.held,
                    "EffectiveCost": g.spend,
                    "ListCost": g.list_cost,
                    "ListUnitPrice": g.list_cost / g.held,
                    "PricingCategory": _CATEGORY.get(rate, "Other"),
                    "PricingQuantity": g.held,
                    "PricingUnit": GPU_HOURS,
                    "ServiceName": "GPU compute",
                    "SkuPriceId": f"{_slug(model)}:{rate}",
                }
            )
        if g.power_cost > 0 and g.kwh > 0:
            per_kwh = g.power_cost / g.kwh
            out.append(
                {
                    **common,
                    "BilledCost": g.power_cost,
                    "ChargeDescription": f"{g.kwh:.2f} kWh measured on {model} GPUs held by {sub}",
                    "ConsumedQuantity": g.kwh,
                    "ConsumedUnit": "kWh",
                    "ContractedCost": g.power_cost,
                    "ContractedUnitPrice": per_kwh,
                    "EffectiveCost": g.power_cost,
                    "ListCost": g.power_cost,
                    "ListUnitPrice": per_kwh,
                    "PricingCategory": "Standard",
                    "PricingQuantity": g.kwh,
                    "PricingUnit": "kWh",
                    "ServiceName": "GPU power",
                    "SkuId": f"{_slug(model)}-power",
                    "SkuPriceId": f"{_slug(model)}-power:kwh",
                }
            )
    return out


def csv_value(value: Any) -> str:
    """A FOCUS value as CSV text: null empty, Tags as a JSON object, numbers in plain decimal."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if isinstance(value, float):
        text = f"{value:.10f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    return str(value)
