"""The class memo: the same answer as ``workload_class`` for every workload, recomputed only
for objects the previous call did not see (a changed workload is a new frozen object)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from gpusteward.analysis.class_memo import ClassMemo
from gpusteward.domain.classes import CLASS_KEY, CLASSES, workload_class
from gpusteward.domain.models import Owner, Workload, WorkloadKind

AT = datetime(2026, 3, 2, tzinfo=UTC)


def fleet() -> list[Workload]:
    """A mix whose classes differ: a tagged service, Kubernetes owners, Slurm, processes."""
    job = {"kind": "Job", "namespace": "n"}
    pod = {"kind": "Pod", "namespace": "n"}
    return [
        Workload("a", WorkloadKind.POD, "svc", Owner("u"), 1, ("G-a",), AT, labels={CLASS_KEY: "service"}),
        Workload("b", WorkloadKind.POD, "p", Owner("u"), 1, ("G-b",), AT, ref=job),
        Workload("c", WorkloadKind.JOB, "bash", Owner("u"), 1, ("G-c",), AT, ref={"job_id": "7"}),
        Workload("d", WorkloadKind.PROCESS, "jupyter-lab", Owner("u"), 1, ("G-d",), AT),
        Workload("e", WorkloadKind.POD, "bare", Owner("u"), 1, ("G-e",), AT, ref=pod),
    ]


def expected(ws: list[Workload]) -> list[str]:
    return [workload_class(w) for w in ws]


def classes(memo: ClassMemo, ws: list[Workload]) -> list[str]:
    return [CLASSES[i] for i in memo.codes(ws).tolist()]


def test_codes_match_workload_class_and_repeat_without_recomputing() -> None:
    memo, ws = ClassMemo(), fleet()
    assert len(set(expected(ws))) >= 4  # the fixture really mixes classes
    assert classes(memo, ws) == expected(ws)
    assert memo.computed == len(ws)
    assert classes(memo, ws) == expected(ws)  # the same list
    assert classes(memo, list(reversed(ws))) == expected(list(reversed(ws)))  # same objects, reordered
    assert memo.computed == len(ws)


def test_a_changed_or_new_workload_is_classified_afresh() -> None:
    memo, ws = ClassMemo(), fleet()
    memo.codes(ws)
    # A relabelled workload is a new object: its new class, not the remembered one.
    relabelled = replace(ws[2], labels={CLASS_KEY: "service"})
    newcomer = Workload("f", WorkloadKind.PROCESS, "train.py", Owner("u"), 1, ("G-f",), AT)
    changed = [newcomer, *ws[:2], relabelled, *ws[3:]]
    got = classes(memo, changed)
    assert got == expected(changed)
    assert got[3] == "service"
    assert workload_class(ws[2]) != "service"
    assert memo.computed == len(ws) + 2


def test_an_equal_but_distinct_object_is_not_mistaken_for_a_remembered_one() -> None:
    """Only identity counts: a fresh list of fresh objects is classified again."""
    memo = ClassMemo()
    memo.codes(fleet())
    again = fleet()
    assert classes(memo, again) == expected(again)
    assert memo.computed == 2 * len(again)


def test_empty_fleet() -> None:
    memo = ClassMemo()
    assert memo.codes([]).size == 0
    assert memo.codes(fleet()[:1]).tolist() == [CLASSES.index("service")]
