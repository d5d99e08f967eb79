"""Which cluster node an EC2 instance backs: the names a node may go by, read off the instance.

Kubernetes on EKS names a node after the instance's private DNS name and keeps
``aws:///<zone>/<instance-id>`` as its providerID; a Slurm cluster usually names nodes after a
host name (often a tag such as ``Name``); some clusters use the private IP. ``node_name`` in
``cloud.instances`` picks one of these; ``auto`` offers them all as aliases and lets the tick
match them against the node names it sees.

Where the cluster tells each node's providerID (Kubernetes, ``Integration.node_ids``), that join
is exact and comes first: the instance a providerID names is that node's, with no aliases left to
match elsewhere; and a node whose providerID names an instance is never joined by a name to
another (a reused ``Name`` tag or private IP cannot put the wrong instance under it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpusteward.domain.cloud import Instance

log = logging.getLogger(__name__)

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


def by_node(found: Iterable[Instance], node_ids: Mapping[str, str]) -> dict[str, Instance]:
    """The instances by node name: first each one a node's providerID names (exactly: node set,
    aliases dropped), then the others by their own name, with every name such a node holds
    taken out of their name and aliases (one left without a name goes by its instance id)."""
    nodes_of: dict[str, list[str]] = {}
    for node, pid in node_ids.items():
        iid = instance_id_from_provider_id(pid)
        if iid is not None:
            nodes_of.setdefault(iid, []).append(node)
    claimed = {node for nodes in nodes_of.values() for node in nodes}
    exact: dict[str, Instance] = {}
    rest: dict[str, Instance] = {}
    for inst in found:
        nodes = nodes_of.get(inst.id, [])
        if len(nodes) == 1:
            exact[nodes[0]] = replace(inst, node=nodes[0], aliases=())
            continue
        if nodes:  # which of two Node objects naming one instance is right is not known: neither
            log.warning("instance %s is the providerID of nodes %s: joined to none", inst.id, sorted(nodes))
            continue
        aliases = tuple(a for a in inst.aliases if a not in claimed)
        name = inst.node if inst.node not in claimed else inst.id
        if name:
            rest[name] = replace(inst, node=name, aliases=aliases)
    return {**rest, **exact}
