"""Finding AWS's GPU instances behind the cluster's nodes: ``describe_instances`` filtered by GPU
families and tags, kept only where EC2's instance-type data lists GPUs, joined with Auto Scaling
membership (group, scale-in protection, the group's tags) and active reservations, and priced
(``pricing.py``). Reads only; every call through the one ``AwsClient``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.cloud import EXCLUDE_UNTIL_TAG, PROTECT_TAG, Instance, Lifecycle
from gpusteward.integrations.cloud.aws import AwsClient
from gpusteward.integrations.cloud.join import node_name, tags_of
from gpusteward.integrations.cloud.pricing import GpuKind, covered, gpu_kind, instance_price, reservations
from gpusteward.policy.instance_settings import InstanceSettings

log = logging.getLogger(__name__)

#: Tags a stop writes on the instance (what ``Instance.recorded`` carries back).
STOPPED_AT_TAG = "gpusteward.io/stopped-at"
STOPPED_HOW_TAG = "gpusteward.io/stopped-how"  # stop | standby (scale-in: on the group)
STOPPED_GROUP_TAG = "gpusteward.io/stopped-group"
RECORD_TAGS = (STOPPED_AT_TAG, STOPPED_HOW_TAG, STOPPED_GROUP_TAG)
#: How long active reservations are taken as read.
RESERVATIONS_EVERY_S = 3600.0


def _exclude_until(value: str | None, where: str) -> datetime | None:
    if not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        log.warning("%s: %s=%r is not an ISO date; treated as excluded", where, EXCLUDE_UNTIL_TAG, value)
        return datetime.max.replace(tzinfo=UTC)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _launched(raw: Mapping[str, Any]) -> datetime:
    at = raw["LaunchTime"]
    if isinstance(at, datetime):
        return at.astimezone(UTC)
    return datetime.fromisoformat(str(at).replace("Z", "+00:00")).astimezone(UTC)


class InstanceFinder:
    """Reads the GPU instances (and remembers each instance type's GPUs: they never change)."""

    def __init__(
        self,
        client: AwsClient,
        settings: InstanceSettings,
        prices: PriceTable,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.settings = settings
        self.prices = prices
        self._kinds: dict[str, GpuKind | None] = {}
        self.monotonic = monotonic
        #: (read at, counts) of the last reservation read.
        self._reservations: tuple[float, dict[tuple[str, str], int]] | None = None

    def describe(self, keep: Callable[[str], bool] = lambda t: True, **params: Any) -> list[Instance]:
        """The GPU instances ``describe_instances`` returns for ``params`` whose type ``keep`` keeps."""
        return self._enrich([r for r in self._describe(**params) if keep(str(r["InstanceType"]))])

    def _describe(self, **params: Any) -> list[dict[str, Any]]:
        return [
            inst
            for page in self.client.pages("ec2", "describe_instances", **params)
            for res in page.get("Reservations", [])
            for inst in res.get("Instances", [])
        ]

    def _kind(self, types: Iterable[str]) -> None:
        missing = sorted(set(types) - set(self._kinds))
        for i in range(0, len(missing), 100):
            chunk = missing[i : i + 100]
            got = self.client.read("ec2", "describe_instance_types", InstanceTypes=chunk)
            for info in got.get("InstanceTypes", []):
                self._kinds[str(info["InstanceType"])] = gpu_kind(info)
            for t in chunk:
                self._kinds.setdefault(t, None)

    def _groups(self, ids: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """(Auto Scaling membership by instance id, the groups by name)."""
        members: dict[str, dict[str, Any]] = {}
        for i in range(0, len(ids), 50):  # the API's limit per call
            got = self.client.read(
                "autoscaling", "describe_auto_scaling_instances", InstanceIds=ids[i : i + 50]
            )
            members.update({str(m["InstanceId"]): m for m in got.get("AutoScalingInstances", [])})
        names = sorted({str(m["AutoScalingGroupName"]) for m in members.values()})
        groups: dict[str, dict[str, Any]] = {}
        for i in range(0, len(names), 50):
            got = self.client.read(
                "autoscaling", "describe_auto_scaling_groups", AutoScalingGroupNames=names[i : i + 50]
            )
            groups.update({str(g["AutoScalingGroupName"]): g for g in got.get("AutoScalingGroups", [])})
        return members, groups

    def _reserved(self) -> dict[tuple[str, str], int]:
        """Active reservations, read at most every ``RESERVATIONS_EVERY_S`` (they change rarely,
        and a read that failed is not tried again every tick)."""
        now = self.monotonic()
        if self._reservations is not None and now - self._reservations[0] < RESERVATIONS_EVERY_S:
            return self._reservations[1]
        try:
            got = self.client.read(
                "ec2", "describe_reserved_instances", Filters=[{"Name": "state", "Values": ["active"]}]
            )
            counts = reservations(got.get("ReservedInstances", []))
        except Exception as e:
            # Optional: a reservation read failing in any way (an endpoint without the call answers
            # an HTML page botocore cannot parse) prices every on-demand instance as on-demand.
            why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            log.warning("reserved instances not read, all priced at on-demand for now: %s", why)
            counts = {}
        self._reservations = (now, counts)
        return counts

    def _enrich(self, raws: list[dict[str, Any]]) -> list[Instance]:
        self._kind(str(r["InstanceType"]) for r in raws)
        gpu = [
            r for r in raws if self._kinds.get(str(r["InstanceType"])) and r["State"]["Name"] != "terminated"
        ]
        if not gpu:
            return []
        members, groups = self._groups([str(r["InstanceId"]) for r in gpu])
        on_demand = sorted(
            (r for r in gpu if not r.get("InstanceLifecycle")),  # plain on-demand ("normal": absent)
            key=lambda r: (_launched(r), r["InstanceId"]),
        )
        counts = self._reserved() if on_demand else {}
        reserved = covered(
            [
                (str(r["InstanceId"]), str(r["InstanceType"]), str(r["Placement"]["AvailabilityZone"]))
                for r in on_demand
            ],
            counts,
        )
        return [self._instance(r, members, groups, reserved) for r in gpu]

    def _instance(
        self,
        raw: dict[str, Any],
        members: Mapping[str, Mapping[str, Any]],
        groups: Mapping[str, Mapping[str, Any]],
        reserved: set[str],
    ) -> Instance:
        iid, itype = str(raw["InstanceId"]), str(raw["InstanceType"])
        kind = self._kinds[itype]
        assert kind is not None
        paid = raw.get("InstanceLifecycle")
        if paid == "spot":
            lifecycle = Lifecycle.SPOT
        elif paid:  # capacity-block, scheduled: paid ahead like a reservation, a stop saves nothing
            lifecycle = Lifecycle.RESERVED
        else:
            lifecycle = Lifecycle.RESERVED if iid in reserved else Lifecycle.ON_DEMAND
        tags = tags_of(raw)
        member = members.get(iid, {})
        group = str(member.get("AutoScalingGroupName", ""))
        gtags = {str(t["Key"]): str(t.get("Value", "")) for t in groups.get(group, {}).get("Tags", [])}
        node, aliases = node_name(raw, self.settings.node_name, self.settings.node_name_tag)
        protect = "true" in (tags.get(PROTECT_TAG, "").lower(), gtags.get(PROTECT_TAG, "").lower())
        until = [
            u
            for u in (
                _exclude_until(tags.get(EXCLUDE_UNTIL_TAG), iid),
                _exclude_until(gtags.get(EXCLUDE_UNTIL_TAG), group),
            )
            if u is not None
        ]
        return Instance(
            id=iid,
            node=node,
            instance_type=itype,
            lifecycle=lifecycle,
            state=str(raw["State"]["Name"]),
            launched_at=_launched(raw),
            gpus=kind.count,
            price_per_hour=instance_price(
                itype, kind, lifecycle, self.prices, self.settings.price_per_hour_by_type
            ),
            currency=self.prices.currency,
            zone=str(raw.get("Placement", {}).get("AvailabilityZone", "")),
            group=group,
            protected=protect,
            scale_in_protected=bool(member.get("ProtectedFromScaleIn", False)),
            exclude_until=max(until) if until else None,
            aliases=aliases,
            recorded={k: v for k, v in tags.items() if k in RECORD_TAGS},
        )
