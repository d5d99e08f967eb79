"""Prices per GPU model."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpusteward.analysis.cost import DEFAULT_PRICES, PriceTable
from gpusteward.domain.models import Gpu


@pytest.mark.parametrize(
    ("model", "price"),
    [
        ("NVIDIA A100-SXM4-40GB", DEFAULT_PRICES["a100"]),
        ("NVIDIA A100-PCIE-40GB", DEFAULT_PRICES["a100"]),
        ("NVIDIA A100-SXM4-80GB", DEFAULT_PRICES["a100-sxm4-80gb"]),
        ("NVIDIA A100 80GB PCIe", DEFAULT_PRICES["a100 80gb"]),
        ("NVIDIA H100 80GB HBM3", DEFAULT_PRICES["h100"]),
        ("NVIDIA H200", DEFAULT_PRICES["h200"]),
        ("NVIDIA L40S", DEFAULT_PRICES["l40s"]),  # not L4 nor L40: the longest match wins
        ("NVIDIA L40", DEFAULT_PRICES["l40"]),
        ("NVIDIA L4", DEFAULT_PRICES["l4"]),
        ("NVIDIA A10G", DEFAULT_PRICES["a10g"]),
        ("NVIDIA A10", DEFAULT_PRICES["a10"]),
        ("Tesla T4", DEFAULT_PRICES["t4"]),
        ("tesla v100-sxm2-16gb", DEFAULT_PRICES["v100"]),
        ("Radeon Instinct MI250X", 1.0),
    ],
)
def test_price_by_model(model: str, price: float) -> None:
    assert PriceTable().price_for(model) == price


def test_defaults_are_plausible_and_ordered() -> None:
    t = PriceTable()
    assert t.currency == "USD"
    assert 0 < t.price_for("Tesla T4") < t.price_for("NVIDIA L4") < t.price_for("NVIDIA A100-SXM4-40GB")
    assert (
        t.price_for("NVIDIA A100-SXM4-40GB")
        < t.price_for("NVIDIA A100-SXM4-80GB")
        < t.price_for("NVIDIA H100")
    )
    assert t.price_for("NVIDIA H100") < t.price_for("NVIDIA H200")


def test_config_entries_merge_over_the_defaults() -> None:
    t = PriceTable.model_validate(
        {"currency": "EUR", "default_per_hour": 0.5, "per_model": {"H100": 2.0, "MI300X": 4}}
    )
    assert t.price_for("NVIDIA H100 80GB HBM3") == 2.0
    assert t.price_for("AMD Instinct MI300X") == 4.0
    assert t.price_for("Tesla T4") == DEFAULT_PRICES["t4"]
    assert t.price_for("something else") == 0.5


@pytest.mark.parametrize(
    "data",
    [{"per_model": {"h100": -1}}, {"default_per_hour": -0.1}, {"per_model": {" ": 1}}, {"currencyy": "EUR"}],
)
def test_rejects_bad_tables(data: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        PriceTable.model_validate(data)


def test_with_prices_fills_unpriced_gpus() -> None:
    gpus = (
        Gpu("a", "n", 0, "NVIDIA H100 80GB HBM3", 81559),
        Gpu("b", "n", 1, "NVIDIA H100 80GB HBM3", 81559, price_per_hour=9.9),
    )
    t = PriceTable()
    priced = t.with_prices(gpus)
    assert [g.price_per_hour for g in priced] == [DEFAULT_PRICES["h100"], 9.9]
    assert [g.price_per_hour for g in t.with_prices(gpus, overwrite=True)] == [DEFAULT_PRICES["h100"]] * 2
    assert (priced[0].uuid, priced[0].memory_total_mib) == ("a", 81559)


def test_with_prices_gives_the_same_object_back_for_the_same_gpu() -> None:
    gpu = Gpu("a", "n", 0, "Acme Z9", 81920)
    t = PriceTable(per_model={"acme z9": 2.0})
    first = t.with_prices([gpu])[0]
    assert first.price_per_hour == 2.0
    assert t.with_prices([gpu])[0] is first  # a source's unchanged GPU: priced once
    twin = Gpu("a", "n", 0, "Acme Z9", 81920)  # equal, but another object
    again = t.with_prices([twin])[0]
    assert again == first
    assert again is not first
    other = PriceTable(per_model={"acme z9": 3.0})  # another table prices it afresh
    assert other.with_prices([gpu])[0].price_per_hour == 3.0
    assert t.with_prices([gpu], overwrite=True)[0].price_per_hour == 2.0
