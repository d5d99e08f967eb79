"""What a GPU-hour costs, by GPU model, so waste can be shown in money."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

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


class PriceTable(BaseModel):
    """Price per GPU-hour by model; the longest key found in the model name wins.

    ``per_model`` entries from a config are merged over ``DEFAULT_PRICES``; matching is
    case-insensitive. A model that matches no key costs ``default_per_hour``.
    """

    model_config = ConfigDict(extra="forbid")

    currency: str = "USD"
    default_per_hour: float = Field(default=1.0, ge=0.0)
    per_model: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_PRICES))

    _cache: dict[str, float] = PrivateAttr(default_factory=dict)

    @field_validator("per_model")
    @classmethod
    def _merge(cls, given: dict[str, float]) -> dict[str, float]:
        merged = dict(DEFAULT_PRICES)
        for key, price in given.items():
            if not key.strip():
                raise ValueError("empty model key")
            if price < 0:
                raise ValueError(f"negative price for '{key}'")
            merged[key.strip().lower()] = float(price)
        return merged

    def price_for(self, model: str) -> float:
        hit = self._cache.get(model)
        if hit is None:
            name = model.lower()
            keys = [k for k in self.per_model if k in name]
            hit = self.per_model[max(keys, key=len)] if keys else self.default_per_hour
            self._cache[model] = hit
        return hit

    def with_prices(self, gpus: Iterable[Gpu], *, overwrite: bool = False) -> tuple[Gpu, ...]:
        """The GPUs with ``price_per_hour`` from this table. A price a source already
        set (a cloud API knows the real one) is kept unless ``overwrite``."""
        return tuple(
            g
            if g.price_per_hour > 0 and not overwrite
            else dataclasses.replace(g, price_per_hour=self.price_for(g.model))
            for g in gpus
        )
