"""Which cluster node an EC2 instance backs: the names a node may go by, read off the instance.

Kubernetes on EKS names a node after the instance's private DNS name and keeps
``aws:///<zone>/<instance-id>`` as its providerID; a Slurm cluster usually names nodes after a
host name (often a tag such as ``Name``); some clusters use the private IP. ``node_name`` in
``cloud.instances`` picks one of these; ``auto`` offers them all as aliases and lets the tick
match them against the node names it sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROVIDER_ID_PREFIX = "aws:///"


def instance_id_from_provider_id(provider_id: str) -> str | None:
    """``aws:///us-east-1a/i-0abc`` → ``i-0abc``; None for anything else."""
    if not provider_id.startswith(PROVIDER_ID_PREFIX):
        return None
    last = provider_id.rsplit("/", 1)[-1]
    return last if last.startswith("i-") else None


def provider_id(raw: Mapping[str, Any]) -> str:
    zone = str(raw.get("Placement", {}).get("AvailabilityZone", ""))
    return f"{PROVIDER_ID_PREFIX}{zone}/{raw['InstanceId']}"


def tags_of(raw: Mapping[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in raw.get("Tags", []) or []}


def names(raw: Mapping[str, Any], tag: str) -> dict[str, str]:
    """Every name the instance may be known by, by how it was found (empty ones left out)."""
    dns = str(raw.get("PrivateDnsName") or "")
    ip = str(raw.get("PrivateIpAddress") or "")
    found = {
        "tag": tags_of(raw).get(tag, ""),
        "private-dns": dns,
        "private-dns-short": dns.split(".", 1)[0],
        "private-ip": ip,
        "ip-name": f"ip-{ip.replace('.', '-')}" if ip else "",
        "instance-id": str(raw["InstanceId"]),
        "provider-id": provider_id(raw),
    }
    return {k: v for k, v in found.items() if v}


def node_name(raw: Mapping[str, Any], mode: str, tag: str) -> tuple[str, tuple[str, ...]]:
    """(the node name, aliases) for ``cloud.instances.node_name``: one name for a fixed mode; for
    ``auto`` the tag (else the private DNS name) and every other name as an alias."""
    found = names(raw, tag)
    if mode != "auto":
        return found.get(mode, ""), ()
    first = found.get("tag") or found.get("private-dns") or str(raw["InstanceId"])
    return first, tuple(sorted(set(found.values()) - {first}))
