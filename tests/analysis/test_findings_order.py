"""Findings come out ordered by rule, workload id and GPUs, whichever order the rules and
workloads came in: the per-rule ordering (``_by_workload``) against the plain sort, including
repair findings of free GPUs (no workload id) and a workload id listed twice."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from gpusteward.analysis.engine import _by_workload
from gpusteward.domain.models import Finding, RuleAction

AT = datetime(2026, 3, 2, tzinfo=UTC)


def _finding(rule: str, workload: str | None, gpus: tuple[str, ...]) -> Finding:
    return Finding(rule, "idle", RuleAction.RECLAIM, AT, gpus, workload, {}, 1.0, 1.0, 1.0)


def _plain(fs: list[Finding]) -> list[Finding]:
    return sorted(fs, key=lambda f: (f.rule, f.workload_id or "", f.gpu_uuids))


ids = st.one_of(st.none(), st.text("ab-19", min_size=1, max_size=4))
gpus = st.lists(st.sampled_from(["G-1", "G-2", "G-10", "G-a"]), min_size=1, max_size=3, unique=True)


@given(st.lists(st.tuples(ids, gpus.map(tuple)), max_size=30))
def test_one_rule_is_ordered_as_the_plain_sort(rows: list[tuple[str | None, tuple[str, ...]]]) -> None:
    fs = [_finding("r", w, g) for w, g in rows]
    assert [id(f) for f in _by_workload(fs)] == [id(f) for f in _plain(fs)]


@given(st.lists(st.text("ab-19", min_size=1, max_size=4), unique=True, max_size=30), st.randoms())
def test_distinct_ids_are_ordered_by_id_alone(names: list[str], rnd) -> None:  # type: ignore[no-untyped-def]
    fs = [_finding("r", w, ("G-1",)) for w in names]
    rnd.shuffle(fs)
    assert [f.workload_id for f in _by_workload(fs)] == sorted(names)


def test_rules_by_name_then_free_gpus_first_then_workloads() -> None:
    fs = [
        _finding("zombie", "job-10", ("G-1",)),
        _finding("idle", "job-2", ("G-2",)),
        _finding("idle", "job-10", ("G-3",)),
        _finding("gpu-fault", None, ("G-9",)),
        _finding("gpu-fault", "job-2", ("G-2",)),
        _finding("gpu-fault", "job-2", ("G-1",)),
    ]
    by_rule: dict[str, list[Finding]] = {}
    for f in fs:
        by_rule.setdefault(f.rule, []).append(f)
    got = [f for rule in sorted(by_rule) for f in _by_workload(by_rule[rule])]
    assert got == _plain(fs)
    assert [(f.rule, f.workload_id, f.gpu_uuids) for f in got[:3]] == [
        ("gpu-fault", None, ("G-9",)),
        ("gpu-fault", "job-2", ("G-1",)),
        ("gpu-fault", "job-2", ("G-2",)),
    ]
