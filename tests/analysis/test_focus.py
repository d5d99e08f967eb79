"""The FOCUS export against the specification's columns: every Mandatory column present, each
value of its column's type and allowed values, nulls only where the column allows them, and the
specification's arithmetic (quantity x unit price = cost) holding, in JSON and in CSV.

The column attributes below are written down from the FOCUS 1.1 column library,
FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec ``specification/columns/<column>.md`` ("Content
constraints": Feature level, Allows nulls, Data type, allowed values) and
``specification/attributes/datetime_format.md`` / ``currency_code_format.md`` /
``key_value_format.md``; kept here, apart from the module, so a wrong module cannot agree with
itself.
"""

from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal

import pytest

from gpusteward.analysis.cost import PriceTable
from gpusteward.analysis.focus import COLUMNS, csv_value, focus_rows
from gpusteward.analysis.showback import ShowbackSettings
from gpusteward.domain.records import ShowbackAmounts, ShowbackKey, ShowbackRow

# column: (feature level, allows nulls, data type)
SPEC: dict[str, tuple[str, bool, str]] = {
    "BilledCost": ("Mandatory", False, "Decimal"),
    "BillingAccountId": ("Mandatory", False, "String"),
    "BillingAccountName": ("Mandatory", True, "String"),
    "BillingCurrency": ("Mandatory", False, "String"),
    "BillingPeriodEnd": ("Mandatory", False, "DateTime"),
    "BillingPeriodStart": ("Mandatory", False, "DateTime"),
    "ChargeCategory": ("Mandatory", False, "String"),
    "ChargeClass": ("Mandatory", True, "String"),
    "ChargeDescription": ("Mandatory", True, "String"),
    "ChargeFrequency": ("Recommended", False, "String"),
    "ChargePeriodEnd": ("Mandatory", False, "DateTime"),
    "ChargePeriodStart": ("Mandatory", False, "DateTime"),
    "ConsumedQuantity": ("Conditional", True, "Decimal"),
    "ConsumedUnit": ("Conditional", True, "String"),
    "ContractedCost": ("Mandatory", False, "Decimal"),
    "ContractedUnitPrice": ("Conditional", True, "Decimal"),
    "EffectiveCost": ("Mandatory", False, "Decimal"),
    "InvoiceIssuerName": ("Mandatory", False, "String"),
    "ListCost": ("Mandatory", False, "Decimal"),
    "ListUnitPrice": ("Conditional", True, "Decimal"),
    "PricingCategory": ("Conditional", True, "String"),
    "PricingQuantity": ("Mandatory", True, "Decimal"),
    "PricingUnit": ("Mandatory", True, "String"),
    "ProviderName": ("Mandatory", False, "String"),
    "PublisherName": ("Mandatory", False, "String"),
    "RegionId": ("Conditional", True, "String"),
    "RegionName": ("Conditional", True, "String"),
    "ResourceId": ("Conditional", True, "String"),
    "ResourceName": ("Conditional", True, "String"),
    "ResourceType": ("Conditional", True, "String"),
    "ServiceCategory": ("Mandatory", False, "String"),
    "ServiceName": ("Mandatory", False, "String"),
    "SkuId": ("Conditional", True, "String"),
    "SkuPriceId": ("Conditional", True, "String"),
    "SubAccountId": ("Conditional", True, "String"),
    "SubAccountName": ("Conditional", True, "String"),
    "Tags": ("Conditional", True, "JSON"),
}
ALLOWED = {
    "ChargeCategory": {"Usage", "Purchase", "Tax", "Credit", "Adjustment"},
    "ChargeClass": {"Correction", None},
    "ChargeFrequency": {"One-Time", "Recurring", "Usage-Based"},
    "PricingCategory": {"Standard", "Dynamic", "Committed", "Other", None},
    "ServiceCategory": {
        "AI and Machine Learning",
        "Analytics",
        "Business Applications",
        "Compute",
        "Databases",
        "Developer Tools",
        "Multicloud",
        "Identity",
        "Integration",
        "Internet of Things",
        "Management and Governance",
        "Media",
        "Migration",
        "Mobile",
        "Networking",
        "Security",
        "Storage",
        "Web",
        "Other",
    },
}
DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
CURRENCY = re.compile(r"^[A-Z]{3}$")  # ISO 4217
PRICES = PriceTable(rate="reserved", electricity_per_kwh=0.2)


def key(day: str, team: str, user: str, model: str, rate: str = "reserved") -> ShowbackKey:
    return ShowbackKey(day, team, user, model, rate, "USD")


ROWS = [
    ShowbackRow(
        key("2026-11-03", "vision", "alice", "NVIDIA H100"), ShowbackAmounts(10, 4, 3, 1, 19.5, 5.0, 1.0)
    ),
    ShowbackRow(key("2026-11-03", "vision", "bob", "NVIDIA H100"), ShowbackAmounts(2, 2, 0, 0, 3.9)),
    ShowbackRow(key("2026-11-03", "vision", "bob", "NVIDIA H100", "spot"), ShowbackAmounts(4, 1, 0, 0, 4.8)),
    ShowbackRow(key("2026-11-30", "", "(unallocated)", "Tesla T4"), ShowbackAmounts(24, 0, 0, 0, 5.46)),
    # Waste counted without a held sample: no charge, no row.
    ShowbackRow(key("2026-11-04", "nlp", "carol", "NVIDIA L4"), ShowbackAmounts(0, 0, 2, 0, 0)),
]


def check_value(column: str, value: object) -> None:
    _, nulls, kind = SPEC[column]
    if value is None:
        assert nulls, f"{column} may not be null"
        return
    if kind == "Decimal":
        assert isinstance(value, int | float | Decimal), (column, value)
        assert not isinstance(value, bool), column
    elif kind == "DateTime":
        assert isinstance(value, str), column
        assert DATETIME.match(value), (column, value)
    elif kind == "JSON":
        assert isinstance(value, dict), (column, value)
        assert all(isinstance(k, str) for k in value), column
    else:
        assert isinstance(value, str), (column, value)
        assert value != "" or nulls, column
    if column in ALLOWED:
        assert value in ALLOWED[column], (column, value)


def check_rows(rows: list[dict[str, object]]) -> None:
    mandatory = {c for c, (level, _, _) in SPEC.items() if level == "Mandatory"}
    for row in rows:
        assert mandatory <= set(row), mandatory - set(row)
        for column, value in row.items():
            if column.startswith("x_"):
                continue  # custom columns: the specification asks only for the prefix
            assert column in SPEC, f"{column} is neither a FOCUS column nor x_-prefixed"
            check_value(column, value)
        assert CURRENCY.match(str(row["BillingCurrency"]))
        assert str(row["BillingPeriodStart"]) <= str(row["ChargePeriodStart"]) < str(row["BillingPeriodEnd"])
        q = Decimal(str(row["PricingQuantity"]))
        for cost, unit in (("ListCost", "ListUnitPrice"), ("ContractedCost", "ContractedUnitPrice")):
            assert abs(q * Decimal(str(row[unit])) - Decimal(str(row[cost]))) < Decimal("1e-6"), cost
        if row["ChargeCategory"] == "Usage":
            assert Decimal(str(row["ConsumedQuantity"])) > 0


def test_a_months_focus_rows_meet_the_specification() -> None:
    rows = focus_rows(ROWS, "2026-11", ShowbackSettings(billing_account_id="acme-ml"), PRICES)
    check_rows(rows)
    # One GPU row per team x model x day (bob's reserved and spot hours on one), plus alice's power.
    gpu = [r for r in rows if r["PricingUnit"] == "GPU-Hours"]
    assert [(r["ChargePeriodStart"], r["SubAccountId"], r["x_GpuModel"]) for r in gpu] == [
        ("2026-11-03T00:00:00Z", "vision", "NVIDIA H100"),
        ("2026-11-30T00:00:00Z", "(unallocated)", "Tesla T4"),
    ]
    vision = gpu[0]
    assert vision["PricingQuantity"] == 16
    assert vision["BilledCost"] == pytest.approx(19.5 + 3.9 + 4.8)
    assert vision["ListCost"] == pytest.approx(16 * PRICES.price("NVIDIA H100", "on-demand"))
    assert (vision["PricingCategory"], vision["x_Users"]) == ("Other", "alice,bob")
    assert gpu[1]["PricingCategory"] == "Committed"
    assert gpu[1]["ChargePeriodEnd"] == "2026-12-01T00:00:00Z"
    assert gpu[1]["BillingPeriodEnd"] == "2026-12-01T00:00:00Z"
    [power] = [r for r in rows if r["PricingUnit"] == "kWh"]
    assert (power["BilledCost"], power["PricingQuantity"]) == (1.0, 5.0)
    # Everything the ledger charged is billed, nothing more.
    billed = sum(Decimal(str(r["BilledCost"])) for r in rows)
    assert billed == sum(Decimal(str(r.amounts.spend + r.amounts.power_cost)) for r in ROWS)


def test_the_csv_form_reads_back_to_the_same_typed_values() -> None:
    rows = focus_rows(ROWS, "2026-11", ShowbackSettings(), PRICES)
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(COLUMNS)
    writer.writerows([[csv_value(r.get(c)) for c in COLUMNS] for r in rows])
    back = list(csv.DictReader(io.StringIO(text.getvalue())))
    assert len(back) == len(rows)
    for parsed in back:
        typed: dict[str, object] = {}
        for column, raw in parsed.items():
            kind = SPEC[column][2] if column in SPEC else "String"
            if raw == "":
                typed[column] = None
            elif kind == "Decimal":
                assert re.fullmatch(r"-?\d+(\.\d+)?", raw), (column, raw)  # no exponent, no locale
                typed[column] = Decimal(raw)
            elif kind == "JSON":
                typed[column] = json.loads(raw)
            else:
                typed[column] = raw
        check_rows([typed])


def test_a_bad_month_is_refused_with_the_form_it_wants() -> None:
    with pytest.raises(ValueError, match="YYYY-MM"):
        focus_rows(ROWS, "Nov 2026", ShowbackSettings(), PRICES)
