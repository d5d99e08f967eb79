"""The GPU-name memo behind ``{gpu}``: the same answer as ``Gpu.display`` for every GPU, formatted
again only for objects not seen before (a changed GPU is a new frozen object), unknown GPUs named
by uuid, and no more kept than twice the fleet."""

from __future__ import annotations

from dataclasses import replace

from gpusteward.analysis.gpu_names import GpuNames
from gpusteward.domain.models import Gpu


def _gpus(n: int, node: str = "node") -> list[Gpu]:
    return [Gpu(f"GPU-{i}", f"{node}-{i // 8}", i % 8, "H100", 81559.0) for i in range(n)]


def test_names_are_the_display_and_repeat_without_formatting() -> None:
    memo, gpus = GpuNames(), _gpus(20)
    uuids = [g.uuid for g in gpus]
    assert memo.of(uuids, gpus, 20) == [g.display for g in gpus]
    assert memo.computed == 20
    assert memo.of(uuids[::-1], gpus[::-1], 20) == [g.display for g in gpus[::-1]]
    assert memo.computed == 20


def test_a_moved_gpu_is_named_afresh_and_an_unknown_one_by_uuid() -> None:
    memo, gpus = GpuNames(), _gpus(4)
    memo.of([g.uuid for g in gpus], gpus, 4)
    moved = replace(gpus[1], node="spare-7", index=3)
    got = memo.of(["GPU-0", "GPU-1", "GPU-x"], [gpus[0], moved, None], 4)
    assert got == ["node-0/gpu0", "spare-7/gpu3", "GPU-x"]
    assert memo.computed == 5


def test_what_is_kept_follows_the_fleet_not_its_history() -> None:
    memo = GpuNames()
    for tick in range(10):  # a source that builds new objects every tick
        gpus = _gpus(8, node=f"n{tick}")
        assert memo.of([g.uuid for g in gpus], gpus, 8) == [g.display for g in gpus]
    names, objects = memo._kept
    assert len(names) == len(objects) <= 3 * 8
