"""Fuzzing the Kubernetes mapping with mutated real objects (kubectl exports and the API's
every-field fixtures; fields dropped, duplicated or replaced by any JSON): a pod, its owner
chain and its workload are read without a Python exception, a field of the wrong shape
reading as absent, and a pod never holds a negative number of GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.fuzzing import JSON, mutated_json

from gpusteward.integrations.kubernetes.model import Protection, build_workload, pod_info, unit_of
from gpusteward.integrations.kubernetes.owners import OwnerResolver

FIXTURES = Path(__file__).parents[2] / "fixtures" / "kubernetes"
OBJECTS = {p.name: json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*/*.json"))}
PODS = {n: o for n, o in OBJECTS.items() if o.get("kind") == "Pod"}
OWNERS = {n: o for n, o in OBJECTS.items() if o.get("kind") in ("ReplicaSet", "Deployment")}


def _with_gpus(pod: dict[str, Any]) -> dict[str, Any]:
    """The real pod, running on a node with a GPU limit, so the fuzz reaches the owner chain."""
    pod = json.loads(json.dumps(pod))
    pod.setdefault("spec", {}).setdefault("nodeName", "gpu-1")
    pod.setdefault("status", {})["phase"] = "Running"
    for c in pod["spec"].get("containers") or []:
        res = c["resources"] = c.get("resources") or {}
        res["limits"] = {**(res.get("limits") or {}), "nvidia.com/gpu": "1"}
    return pod


SEEDS = [_with_gpus(p) for p in PODS.values()]


class _Api:
    """Answers every owner GET with the next fuzzed object."""

    def __init__(self, owners: list[Any]) -> None:
        self.owners = owners

    def get(self, resource: Any, namespace: str, name: str) -> SimpleNamespace:
        body = self.owners.pop(0) if self.owners else None
        if not isinstance(body, dict):
            return SimpleNamespace(status=404, ok=False, message="not found", body=None)
        return SimpleNamespace(status=200, ok=True, message="", body=body)


class _Clock:
    def monotonic(self) -> float:
        return 0.0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(st.sampled_from(range(len(SEEDS))).flatmap(lambda i: mutated_json(SEEDS[i])), JSON),
    st.lists(
        st.one_of(st.sampled_from(sorted(OWNERS)).flatmap(lambda n: mutated_json(OWNERS[n])), JSON),
        max_size=3,
    ),
)
@example({"spec": []}, [])
@example({"spec": {"containers": [{"resources": {"limits": [1]}}]}}, [])
@example({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "-3"}}}]}}, [])
@example({"metadata": {"ownerReferences": 5}}, [])
def test_fuzz_pods_and_owners_map_without_exceptions(pod: Any, owners: list[Any]) -> None:
    if not isinstance(pod, dict):
        return  # the watch cache holds decoded objects only
    info = pod_info(pod)
    assert info.gpus >= 0
    resolver = OwnerResolver(_Api(list(owners)), _Clock(), ttl_s=60.0)  # type: ignore[arg-type]
    chain, _ = resolver.chain(info, pod)
    unit, mode = unit_of(chain)
    build_workload(
        unit,
        mode,
        chain,
        [info],
        # The GPUs come from the metrics, never from the request: a fuzzed request of 10^12 GPUs
        # must not make the test allocate them.
        ["GPU-1"] * min(info.gpus, 64),
        source="k8s",
        protection=Protection(),
        owner_keys=["owner"],
    )
