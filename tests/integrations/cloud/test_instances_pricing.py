"""Pricing and naming of instances from AWS's documented response shapes (moto has no
``describe_reserved_instances``): reservations cover the oldest matching on-demand instances,
zonal ones first; rates take the cost table's discounts; node names from providerID, DNS, IP."""

from __future__ import annotations

import pytest

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.cloud import Lifecycle
from gpusteward.integrations.cloud.join import instance_id_from_provider_id, node_name
from gpusteward.integrations.cloud.pricing import GpuKind, covered, gpu_kind, instance_price, reservations

#: Two entries as DescribeReservedInstances returns them (trimmed to the fields read).
RESERVED = [
    {
        "InstanceType": "p4d.24xlarge",
        "InstanceCount": 1,
        "State": "active",
        "Scope": "Availability Zone",
        "AvailabilityZone": "us-east-1a",
    },
    {"InstanceType": "p4d.24xlarge", "InstanceCount": 1, "State": "active", "Scope": "Region"},
    {"InstanceType": "p4d.24xlarge", "InstanceCount": 5, "State": "retired", "Scope": "Region"},
]


def test_reservations_cover_zonal_first_then_regional_oldest_first() -> None:
    counts = reservations(RESERVED)
    assert counts == {("p4d.24xlarge", "us-east-1a"): 1, ("p4d.24xlarge", ""): 1}
    oldest_first = [
        ("i-1", "p4d.24xlarge", "us-east-1b"),
        ("i-2", "p4d.24xlarge", "us-east-1a"),
        ("i-3", "p4d.24xlarge", "us-east-1a"),
        ("i-4", "g5.xlarge", "us-east-1a"),
    ]
    # i-2 takes the zonal one (its zone); the regional one goes to the oldest left, i-1.
    assert covered(oldest_first, counts) == {"i-1", "i-2"}


def test_an_instance_is_priced_at_its_rate() -> None:
    table = PriceTable()
    a100 = GpuKind("NVIDIA A100 40GB", 8)
    assert instance_price("p4d.24xlarge", a100, Lifecycle.ON_DEMAND, table, {}) == pytest.approx(14.4)
    assert instance_price("p4d.24xlarge", a100, Lifecycle.SPOT, table, {}) == pytest.approx(14.4 * 0.4)
    own = {"p4d.24xlarge": 32.77}
    assert instance_price("p4d.24xlarge", a100, Lifecycle.ON_DEMAND, table, own) == pytest.approx(32.77)
    assert instance_price("p4d.24xlarge", a100, Lifecycle.RESERVED, table, own) == pytest.approx(32.77 * 0.65)


def test_gpu_kind_reads_ec2_gpu_info() -> None:
    info = {
        "GpuInfo": {
            "Gpus": [
                {"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8, "MemoryInfo": {"SizeInMiB": 81920}}
            ]
        }
    }
    assert gpu_kind(info) == GpuKind("NVIDIA A100 80GB", 8)
    assert PriceTable().price("NVIDIA A100 80GB") == pytest.approx(2.50)  # the 80 GB key matches
    assert gpu_kind({"InstanceType": "m5.large"}) is None


def test_node_names() -> None:
    raw = {
        "InstanceId": "i-0abc",
        "PrivateDnsName": "ip-10-0-1-5.ec2.internal",
        "PrivateIpAddress": "10.0.1.5",
        "Placement": {"AvailabilityZone": "us-east-1a"},
        "Tags": [{"Key": "Name", "Value": "gpu-17"}],
    }
    assert instance_id_from_provider_id("aws:///us-east-1a/i-0abc") == "i-0abc"
    assert instance_id_from_provider_id("gce://p/z/n") is None
    name, aliases = node_name(raw, "auto", "Name")
    assert name == "gpu-17"
    assert {
        "ip-10-0-1-5.ec2.internal",
        "ip-10-0-1-5",
        "10.0.1.5",
        "i-0abc",
        "aws:///us-east-1a/i-0abc",
    } <= set(aliases)
    assert node_name(raw, "private-dns", "Name") == ("ip-10-0-1-5.ec2.internal", ())
    assert node_name(raw, "tag", "Missing") == ("", ())
