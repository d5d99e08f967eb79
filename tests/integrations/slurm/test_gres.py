"""Hostlists, GPU index lists, GRES details and TRES strings."""

from __future__ import annotations

import pytest

from gpusteward.integrations.slurm.gres import (
    GresAlloc,
    expand_hostlist,
    expand_indices,
    gpus_of,
    parse_gres,
    tres_gpu_count,
)


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu1", ["gpu1"]),
        ("gpu[1-2]", ["gpu1", "gpu2"]),
        ("a[01-03,07],b5", ["a01", "a02", "a03", "a07", "b5"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("node[8-10]", ["node8", "node9", "node10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("", []),
    ],
)
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("bad", ["gpu[1-", "gpu[a-b]", "gpu[3-1]", "gpu]1["])
def test_bad_hostlists_are_refused(bad):
    with pytest.raises(ValueError, match="hostlist"):
        expand_hostlist(bad)


@pytest.mark.parametrize(
    ("text", "indices"),
    [("0", (0,)), ("0-3", (0, 1, 2, 3)), ("0,2-3", (0, 2, 3)), ("1,5,7", (1, 5, 7))],
)
def test_expand_indices(text, indices):
    assert expand_indices(text) == indices


@pytest.mark.parametrize(
    ("text", "allocs"),
    [
        ("gpu:h100:4(IDX:0-3)", [GresAlloc("gpu", "h100", 4, (0, 1, 2, 3))]),
        ("gpu:2(IDX:0-1)", [GresAlloc("gpu", "", 2, (0, 1))]),
        ("gpu:3(IDX:0,2-3)", [GresAlloc("gpu", "", 3, (0, 2, 3))]),
        ("gpu(IDX:1)", [GresAlloc("gpu", "", 1, (1,))]),
        ("gpu:a100:1(IDX:N/A)", [GresAlloc("gpu", "a100", 1, None)]),
        ("gpu:2", [GresAlloc("gpu", "", 2, None)]),
        (
            "gpu:h100:2(IDX:0-1),gpu:h200:4(IDX:2-5)",
            [GresAlloc("gpu", "h100", 2, (0, 1)), GresAlloc("gpu", "h200", 4, (2, 3, 4, 5))],
        ),
        (
            "gpu:a100_3g.40gb:1(IDX:0),mps:100(IDX:0)",
            [GresAlloc("gpu", "a100_3g.40gb", 1, (0,)), GresAlloc("mps", "", 100, (0,))],
        ),
    ],
)
def test_parse_gres(text, allocs):
    assert parse_gres(text) == allocs


def test_gpus_of_keeps_gpus_only():
    assert [g.count for g in gpus_of("gpu:1(IDX:0),mps:100(IDX:0)")] == [1]
    assert gpus_of("") == []


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("cpu=1,mem=512M,node=1,billing=1", None),
        ("cpu=2,gres/gpu=4,node=1", 4),
        ("gres/gpu=4,gres/gpu:h100=4", 4),
        ("gres/gpu:h100=2", 2),
        ("gres:gpu:2", 2),
        ("gres/gpu:4", 4),
        ("gres/gpu:h100:1", 1),
        ("gres/gpu=2", 2),
        ("cpu=1,gres/gpumem=40G", None),
        ("", None),
    ],
)
def test_tres_gpu_count(text, count):
    assert tres_gpu_count(text) == count
