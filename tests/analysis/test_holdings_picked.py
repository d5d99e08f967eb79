"""``Picked``: the repair rules' per-GPU holdings read their uuids and holders through an index
array instead of building two lists of every GPU each tick; it must read as those lists would."""

from __future__ import annotations

import numpy as np

from gpusteward.analysis.holdings import Picked


def test_picked_reads_as_the_list_it_stands_for():
    base = ["a", "b", "c", "d"]
    index = np.array([3, 0, 0, 2], dtype=np.intp)
    picked = Picked(base, index)
    built = [base[i] for i in index]
    assert len(picked) == len(built) == 4
    assert list(picked) == built
    assert [picked[i] for i in range(4)] == built
    assert picked[-1] == "c"
    assert picked[1:3] == built[1:3]
    assert list(map(picked.__getitem__, [3, 1])) == ["c", "a"]
