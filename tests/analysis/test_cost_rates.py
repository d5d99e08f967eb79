"""On-demand, reserved and spot rates, electricity, and the cost section of the config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpusteward.analysis.cost import (
    DEFAULT_PRICES,
    DEFAULT_RESERVED_DISCOUNT,
    DEFAULT_SPOT_DISCOUNT,
    PriceTable,
)
from gpusteward.runtime.config import load_settings


def test_reserved_and_spot_default_to_a_discount_off_on_demand() -> None:
    t = PriceTable()
    h100 = DEFAULT_PRICES["h100"]
    assert t.rates_for("NVIDIA H100 80GB HBM3") == {
        "on-demand": h100,
        "reserved": pytest.approx(h100 * (1 - DEFAULT_RESERVED_DISCOUNT)),
        "spot": pytest.approx(h100 * (1 - DEFAULT_SPOT_DISCOUNT)),
    }
    assert t.price_for("NVIDIA H100 80GB HBM3") == h100  # on-demand unless the rate says otherwise
    assert t.price("Something else", "spot") == pytest.approx(
        t.default_per_hour * (1 - DEFAULT_SPOT_DISCOUNT)
    )


def test_the_rate_picks_the_price_and_explicit_prices_win() -> None:
    t = PriceTable.model_validate(
        {
            "rate": "reserved",
            "reserved_per_model": {"H100": 1.9},
            "spot_discount": 0.5,
            "per_model": {"L4": 0.8},
        }
    )
    assert t.price_for("NVIDIA H100 80GB HBM3") == 1.9
    assert t.price_for("NVIDIA A100-SXM4-80GB") == pytest.approx(DEFAULT_PRICES["a100-sxm4-80gb"] * 0.65)
    assert t.price("NVIDIA L4", "spot") == pytest.approx(0.4)
    assert t.price("NVIDIA L4", "on-demand") == 0.8


def test_electricity() -> None:
    assert PriceTable().energy_cost(10) == 0
    assert PriceTable(electricity_per_kwh=0.2).energy_cost(10) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "data",
    [
        {"rate": "monthly"},
        {"reserved_discount": 1.5},
        {"spot_per_model": {"h100": -1}},
        {"reserved_per_model": {"": 1}},
        {"electricity_per_kwh": -0.1},
        {"savings_horizon_hours": -1},
    ],
)
def test_rejects_bad_rates(data: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        PriceTable.model_validate(data)


def test_cost_section_of_the_config() -> None:
    s = load_settings(None, cost={"currency": "EUR", "rate": "spot", "electricity_per_kwh": 0.3})
    assert (s.cost.currency, s.cost.rate, s.cost.electricity_per_kwh) == ("EUR", "spot", 0.3)
    assert s.cost.savings_horizon_hours == 2.0
