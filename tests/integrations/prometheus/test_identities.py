"""The label-set identities kept across ticks: the same answer as identifying afresh, each label
set identified once while it is kept, and the cache emptied (not grown) past its bound."""

from __future__ import annotations

import pytest

from gpusteward.integrations.prometheus import filing
from gpusteward.integrations.prometheus.filing import Identities
from gpusteward.integrations.prometheus.parse import GpuIdentity, LabelMap, identify_gpu, identify_holder


def _labels(i: int, metric: str = "DCGM_FI_DEV_GPU_UTIL") -> dict[str, str]:
    return {
        "__name__": metric,
        "gpu": str(i % 8),
        "UUID": f"GPU-{i:08d}-0000-0000-0000-000000000000",
        "modelName": "NVIDIA A100-SXM4-80GB",
        "Hostname": f"node{i // 8}",
        "namespace": "research",
        "pod": f"train-{i // 8}",
        "container": "main",
    }


def test_same_answer_as_identifying_afresh() -> None:
    lm = LabelMap()
    ids = Identities()
    for i in (0, 9):
        labels = _labels(i)
        assert ids.identify(labels, lm, None) == (identify_gpu(labels, lm), identify_holder(labels, lm, None))


def test_a_label_set_is_identified_once_then_the_bound_empties_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = filing.identify_gpu

    def counting(labels: dict[str, str], lm: LabelMap) -> GpuIdentity | None:
        calls.append(labels["UUID"])
        return real(labels, lm)

    monkeypatch.setattr(filing, "identify_gpu", counting)
    lm = LabelMap()
    ids = Identities(max_entries=2)
    for _ in range(3):  # three ticks of the same two series
        ids.identify(_labels(0), lm, None)
        ids.identify(_labels(0, "DCGM_FI_DEV_FB_USED"), lm, None)
    assert len(calls) == 2
    assert len(ids) == 2
    ids.identify(_labels(1), lm, None)  # a third label set: over the bound, start again
    assert len(ids) == 1
    assert len(calls) == 3
