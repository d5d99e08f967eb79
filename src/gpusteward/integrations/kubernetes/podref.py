"""The pods of a Kubernetes workload in its ``Workload.ref``: written by the kubernetes source,
read by the executor and the Event poster (sibling layers, so the format lives here)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: ``ref`` key holding ``name=uid;name=uid…``.
PODS_KEY = "pods"


def encode_pods(pods: Iterable[tuple[str, str]]) -> str:
    """``(name, uid)`` pairs as the ``ref`` value."""
    return ";".join(f"{name}={uid}" for name, uid in pods)


def pods_of(ref: Mapping[str, str]) -> list[tuple[str, str]]:
    """(name, uid) of the pods a workload's ``ref`` names."""
    out = []
    for item in (ref.get(PODS_KEY) or "").split(";"):
        name, _, uid = item.partition("=")
        if name:
            out.append((name, uid))
    return out
