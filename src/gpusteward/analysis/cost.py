"""What a GPU-hour costs, by GPU model, so waste can be shown in money."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from gpusteward.domain.models import Gpu

#: On-demand price of one GPU for one hour, in USD, keyed by a lower-case piece of the
#: model name as NVML reports it ("NVIDIA A100-SXM4-80GB", "Tesla T4"). Rough list
#: prices of GPU clouds (Lambda, RunPod, CoreWeave) and GPU-only hyperscaler rates,
#: 2024-25; hyperscaler instances cost up to 2-4x more. Set your own in the config.
DEFAULT_PRICES: Mapping[str, float] = {
    "a100": 1.80,  # 40 GB unless the name says 80 GB
    "a100-sxm4-80gb": 2.50,
    "a100 80gb": 2.50,
    "a100-pcie-80gb": 2.50,
    "h100": 3.00,
    "h200": 3.80,
    "l40s": 1.00,
    "l40": 0.90,
    "l4": 0.70,
    "a10g": 1.00,  # AWS g5
    "a10": 0.75,
    "t4": 0.35,
    "v100": 2.50,
}


#: Which price a GPU-hour costs: what you pay by the hour, under a 1-3 year commitment, or for
#: interruptible capacity.
Rate = Literal["on-demand", "reserved", "spot"]
RATES: tuple[Rate, ...] = ("on-demand", "reserved", "spot")

#: Off on-demand, where no explicit reserved / spot price is set: 1-year commitments on
#: the hyperscalers and GPU clouds save roughly 30-40 %, spot / preemptible capacity 60-70 %.
DEFAULT_RESERVED_DISCOUNT = 0.35
DEFAULT_SPOT_DISCOUNT = 0.60


def _merge_prices(given: Mapping[str, float], base: Mapping[str, float]) -> dict[str, float]:
    merged = dict(base)
    for key, price in given.items():
        if not key.strip():
            raise ValueError("empty model key")
        if price < 0:
            raise ValueError(f"negative price for '{key}'")
        merged[key.strip().lower()] = float(price)
    return merged


def _longest_match(table: Mapping[str, float], name: str) -> str | None:
    keys = [k for k in table if k in name]
    return max(keys, key=len) if keys else None


#: A price per GPU-hour as a config may give one.
Price = Annotated[float, Field(ge=0.0, le=1_000_000)]


class PriceTable(BaseModel):
    """Price per GPU-hour by model; the longest key found in the model name wins.

    ``per_model`` (on-demand) entries from a config are merged over ``DEFAULT_PRICES``;
    matching is case-insensitive. A model that matches no key costs ``default_per_hour``.
    Reserved and spot prices are the on-demand price less a discount unless
    ``reserved_per_model`` / ``spot_per_model`` name one. ``rate`` picks the price that
    waste and savings are counted at (``price_for``).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    currency: str = "USD"
    default_per_hour: float = Field(default=1.0, ge=0.0, le=1_000_000)
    per_model: dict[str, Price] = Field(default_factory=lambda: dict(DEFAULT_PRICES))
    rate: Rate = Field("on-demand", description="The rate waste and savings are priced at.")
    reserved_discount: float = Field(
        DEFAULT_RESERVED_DISCOUNT, ge=0.0, le=1.0, description="Reserved price = on-demand x (1 - this)."
    )
    spot_discount: float = Field(
        DEFAULT_SPOT_DISCOUNT, ge=0.0, le=1.0, description="Spot price = on-demand x (1 - this)."
    )
    reserved_per_model: dict[str, Price] = Field(
        default_factory=dict, description="Reserved prices by model, over the discount."
    )
    spot_per_model: dict[str, Price] = Field(
        default_factory=dict, description="Spot prices by model, over the discount."
    )
    electricity_per_kwh: float | None = Field(
        None,
        ge=0.0,
        le=1000,
        description="Price of a kWh: adds the measured power draw of wasting GPUs to their cost. "
        "Leave unset on clouds, where power is part of the hourly price.",
    )
    savings_horizon_hours: float = Field(
        2.0,
        ge=0.0,
        le=8760,
        description="How long a stopped idle workload is assumed to have held its GPUs otherwise: "
        "the live ledger credits a stop with its GPUs for this long (a backtest measures it).",
    )

    _cache: dict[tuple[str, str], float] = PrivateAttr(default_factory=dict)
    # id of a GPU a source handed in -> (that GPU, kept alive so the id stays its own; priced)
    _priced: dict[int, tuple[Gpu, Gpu]] = PrivateAttr(default_factory=dict)

    @field_validator("per_model")
    @classmethod
    def _merge(cls, given: dict[str, float]) -> dict[str, float]:
        return _merge_prices(given, DEFAULT_PRICES)

    @field_validator("reserved_per_model", "spot_per_model")
    @classmethod
    def _check(cls, given: dict[str, float]) -> dict[str, float]:
        return _merge_prices(given, {})

    def price_for(self, model: str) -> float:
        """The price of one GPU-hour of ``model`` at the configured ``rate``."""
        return self.price(model, self.rate)

    def price(self, model: str, rate: Rate | None = None) -> float:
        """The price of one GPU-hour of ``model`` at ``rate`` (default: the configured one)."""
        rate = rate or self.rate
        hit = self._cache.get((model, rate))
        if hit is None:
            name = model.lower()
            key = _longest_match(self.per_model, name)
            hit = self.per_model[key] if key is not None else self.default_per_hour
            if rate != "on-demand":
                table = self.reserved_per_model if rate == "reserved" else self.spot_per_model
                own = _longest_match(table, name)
                discount = self.reserved_discount if rate == "reserved" else self.spot_discount
                hit = table[own] if own is not None else hit * (1.0 - discount)
            self._cache[(model, rate)] = hit
        return hit

    def rates_for(self, model: str) -> dict[str, float]:
        """On-demand, reserved and spot prices of ``model``, for tables."""
        return {r: self.price(model, r) for r in RATES}

    def energy_cost(self, kwh: float) -> float:
        """What ``kwh`` of measured draw costs; 0 when no electricity price is set."""
        return kwh * self.electricity_per_kwh if self.electricity_per_kwh is not None else 0.0

    def with_prices(self, gpus: Iterable[Gpu], *, overwrite: bool = False) -> tuple[Gpu, ...]:
        """The GPUs with ``price_per_hour`` from this table. A price a source already
        set (a cloud API knows the real one) is kept unless ``overwrite``. A GPU object priced
        before gives back the same priced object (sources hand back unchanged GPUs as is)."""
        memo, out = self._priced, []
        if len(memo) > 200_000:
            memo.clear()
        for g in gpus:
            if g.price_per_hour > 0 and not overwrite:
                out.append(g)
                continue
            hit = memo.get(id(g))
            if hit is None or hit[0] is not g or overwrite:
                hit = memo[id(g)] = (g, dataclasses.replace(g, price_per_hour=self.price_for(g.model)))
            out.append(hit[1])
        return tuple(out)
