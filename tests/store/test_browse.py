"""Paged, filtered reads for the web admin (store.browse) on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import insert

from gpusteward.domain.models import Finding, Owner, RuleAction
from gpusteward.store import browse
from gpusteward.store.db import StateStore
from gpusteward.store.dbschema import actions_t, audit_t, workloads_t

T = TypeVar("T")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _walk(fetch: Callable[[int | None, int], browse.Page[T]], limit: int) -> list[list[T]]:
    """Every page, following ``next_before`` from the newest."""
    pages, before = [], None
    while True:
        page = fetch(before, limit)
        pages.append(page.rows)
        if page.next_before is None:
            return pages
        before = page.next_before


def _audit_rows(n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        # Record 137 is the needle: older than the newest 10,000 of 25,000.
        payload = {"by": "Needle-Person", "i": i} if i == 137 else {"by": f"user{i % 7}", "i": i}
        event = "approval.granted" if i % 5 == 0 else "action.planned"
        rows.append(
            {
                "at": T0 + timedelta(seconds=i),
                "event": event,
                "workload_id": f"job-{i % 50}",
                "payload": payload,
            }
        )
    return rows


def test_audit_search_finds_records_older_than_ten_thousand(store: StateStore) -> None:
    with store.transaction("seed") as conn:
        conn.execute(insert(audit_t), _audit_rows(25_000))
    page = browse.audit_page(store, q="needle-PERSON")  # any case, inside the payload
    assert [r.payload["i"] for r in page.rows] == [137]
    assert page.next_before is None
    # Two words must both match (in any searched column); the event is a case-sensitive prefix.
    both = browse.audit_page(store, q="user3 approval", limit=10_000)
    expected = [i for i in range(25_000) if i % 7 == 3 and i % 5 == 0 and i != 137]
    assert sorted(r.payload["i"] for r in both.rows) == expected
    assert browse.audit_page(store, event="approval.", limit=1).rows[0].payload["i"] == 24_995
    assert browse.audit_page(store, event="APPROVAL.").rows == []


def test_audit_pages_are_disjoint_complete_and_newest_first(store: StateStore) -> None:
    with store.transaction("seed") as conn:
        conn.execute(insert(audit_t), _audit_rows(3_000))

    def fetch(before: int | None, limit: int) -> browse.Page[Any]:
        return browse.audit_page(store, event="approval.", workload_id="job-10", before=before, limit=limit)

    pages = _walk(fetch, 7)
    ids = [r.id for p in pages for r in p]
    assert len(ids) == len(set(ids))  # disjoint
    assert ids == sorted(ids, reverse=True)  # newest first across pages
    want = [i for i in range(3_000) if i % 5 == 0 and i % 50 == 10]
    assert sorted(r.payload["i"] for p in pages for r in p) == want  # complete
    assert all(len(p) == 7 for p in pages[:-1])
    assert 1 <= len(pages[-1]) <= 7
    # The export walk (chunked) returns the same rows as the pages.
    exported = list(browse.every(fetch, chunk=4))
    assert [r.id for r in exported] == ids
    assert list(browse.every(fetch, start=ids[5], chunk=4)) == exported[6:]


def test_action_filters_combine(store: StateStore) -> None:
    statuses = ["planned", "succeeded", "failed", "skipped"]
    rows = [
        {
            "idempotency_key": f"key-{i}",
            "dry_run": False,
            "workload_id": f"job-{i % 3}",
            "level": 1 + i % 4,
            "step": "notify" if i % 4 == 0 else "graceful-stop",
            "rule": "idle-gpu",
            "status": statuses[i % 4 if i % 8 else 1],
            "created_at": T0 + timedelta(minutes=i),
            "updated_at": T0 + timedelta(minutes=i),
            "attempts": 1,
            "detail": "Scaled DOWN by steward" if i % 6 == 0 else "",
            "gpu_uuids": [f"GPU-{i % 10}"],
            "gpu_count": 1,
        }
        for i in range(400)
    ]
    with store.transaction("seed") as conn:
        conn.execute(insert(actions_t), rows)

    def ids(**kw: Any) -> list[str]:
        return [a.idempotency_key for a in browse.actions_page(store, limit=1000, **kw).rows]

    want = [
        r["idempotency_key"]
        for r in reversed(rows)
        if r["status"] == "succeeded" and r["level"] == 1 and r["workload_id"] == "job-0" and r["detail"]
    ]
    assert want
    assert ids(status="succeeded", level="L1", workload_id="job-0", q="scaled down") == want
    assert ids(q="gpu-7 L3") == [r["idempotency_key"] for r in reversed(rows) if r["gpu_uuids"] == ["GPU-7"]
                                 and r["level"] == 3]  # fmt: skip
    assert ids(level="L9") == []
    assert ids(q="100%") == []  # LIKE wildcards in the search are literal text


def test_action_times_are_every_action_of_the_span_dry_runs_included(store: StateStore) -> None:
    rows = [
        {
            "idempotency_key": f"key-{i}",
            "dry_run": i % 2 == 0,
            "workload_id": f"job-{i}",
            "level": 1 + i % 3,
            "step": "notify",
            "rule": "idle-gpu",
            "status": "succeeded" if i % 3 else "planned",
            "created_at": T0 + timedelta(minutes=10 * i),
            "updated_at": T0 + timedelta(minutes=10 * i),
            "attempts": 1,
            "detail": "",
            "gpu_uuids": [],
            "gpu_count": 1,
        }
        for i in range(7000)  # more than the 5,000 newest the overview used to read
    ]
    with store.transaction("seed") as conn:
        conn.execute(insert(actions_t), rows)
    start, end = T0 + timedelta(minutes=10), T0 + timedelta(minutes=10 * 6500)
    got = browse.action_times(store, start, end)
    want = [r for r in rows if start <= r["created_at"] < end]
    assert len(got) == len(want) == 6499
    assert sorted((t, lv.value, st) for t, lv, st in got) == [
        (r["created_at"], r["level"], r["status"]) for r in want
    ]


def _finding(wid: str | None, rule: str, kind: str, gpus: tuple[str, ...], message: str) -> Finding:
    return Finding(rule, kind, RuleAction.RECLAIM, T0, gpus, wid, {}, 5.0, 0.1, 0.2, message)


def test_finding_filters_combine_and_page(store: StateStore) -> None:
    owners = {"job-0": ("ann", "vision"), "job-1": ("bob", "vision"), "job-2": ("ann", "speech")}
    with store.transaction("seed") as conn:
        conn.execute(
            insert(workloads_t),
            [
                {"id": w, "kind": "job", "name": w, "source": "slurm", "owner": {"user": u, "team": t},
                 "gpu_uuids": [], "labels": {}, "annotations": {}, "started_at": T0, "first_seen_at": T0,
                 "last_seen_at": T0}
                for w, (u, t) in owners.items()
            ],
        )  # fmt: skip
    # Episodes over rounds: every round opens one per workload, closes them every other round.
    for k in range(30):
        at = T0 + timedelta(minutes=k)
        fs = [
            _finding(
                f"job-{j}", f"r{k}", "idle" if j else "zombie", (f"GPU-{j}", f"GPU-{j + 10}"), "on node-x"
            )
            for j in range(3)
        ]
        fs.append(_finding(None, f"r{k}", "idle", ("GPU-99",), "unheld GPU on node-z"))
        store.record_findings(fs, at)
        if k % 2:
            store.close_findings([(f"job-{j}", f"r{k}") for j in range(3)], at)
    everything = store.all_findings()

    def keys(f: browse.FindingFilter, limit: int = 1000) -> list[int]:
        return [
            e.id
            for p in _walk(lambda b, n: browse.findings_page(store, f, before=b, limit=n), limit)
            for e, _ in p
        ]

    ann_idle = [e.id for e in reversed(everything) if e.finding.workload_id == "job-2"]
    assert keys(browse.FindingFilter(owner="ann", kind="idle", open_only=False)) == ann_idle
    vision_open = [
        e.id
        for e in reversed(everything)
        if e.finding.workload_id in ("job-0", "job-1") and e.ended_at is None
    ]
    assert keys(browse.FindingFilter(team="vision"), limit=4) == vision_open  # across pages
    # A node: the GPUs placed on it, or its name in the message.
    on_gpu = browse.FindingFilter(node="node-a", node_gpus=("GPU-11",), open_only=False)
    assert keys(on_gpu) == [e.id for e in reversed(everything) if "GPU-11" in e.finding.gpu_uuids]
    by_text = browse.FindingFilter(node="node-z", open_only=False)
    assert keys(by_text) == [e.id for e in reversed(everything) if e.finding.workload_id is None]
    # GPU-1 must not match GPU-10 … GPU-19: whole uuids only.
    exact = browse.FindingFilter(node="rack-9", node_gpus=("GPU-1",), open_only=False)
    assert keys(exact) == [e.id for e in reversed(everything) if e.finding.workload_id == "job-1"]
    page = browse.findings_page(store, browse.FindingFilter(owner="bob"), limit=1)
    ((episode, snapshot),) = page.rows
    assert snapshot == browse.Holder("job-1", Owner("bob", "vision"))  # from the snapshot's columns
    assert page.next_before == episode.id

    facets = browse.finding_facets(store, open_only=False)
    assert facets.kinds == ["idle", "zombie"]
    assert facets.owners == ["ann", "bob"]
    assert facets.teams == ["speech", "vision"]
    assert set(facets.gpu_uuids) == {"GPU-0", "GPU-1", "GPU-2", "GPU-10", "GPU-11", "GPU-12", "GPU-99"}


def test_open_finding_facets_pair_owners_and_kinds(store: StateStore) -> None:
    """The facets come from two queries of distinct pairs (kind, GPUs) and (user, team): each
    column's values are still its own, over the open episodes only, none lost to a pairing."""
    owners = {
        "job-a": ("ann", "vision"),
        "job-b": ("ann", ""),
        "job-c": ("", "speech"),
        "job-d": ("dan", "ops"),
    }
    with store.transaction("seed") as conn:
        conn.execute(
            insert(workloads_t),
            [
                {"id": w, "kind": "job", "name": w, "source": "slurm", "owner": {"user": u, "team": t},
                 "gpu_uuids": [], "labels": {}, "annotations": {}, "started_at": T0, "first_seen_at": T0,
                 "last_seen_at": T0}
                for w, (u, t) in owners.items()
            ],
        )  # fmt: skip
    store.record_findings(
        [
            _finding("job-a", "r1", "idle", ("GPU-1",), ""),
            _finding("job-b", "r1", "idle", ("GPU-1",), ""),  # the same kind and GPUs: one pair
            _finding("job-c", "r1", "zombie", ("GPU-2", "GPU-3"), ""),
            _finding("job-d", "r1", "leak", ("GPU-4",), ""),
            _finding(None, "r1", "idle", ("GPU-9",), ""),
        ],
        T0,
    )
    store.close_findings([("job-d", "r1")], T0 + timedelta(minutes=1))
    open_now = browse.finding_facets(store, open_only=True)
    assert open_now.kinds == ["idle", "zombie"]
    assert open_now.owners == ["ann"]
    assert open_now.teams == ["speech", "vision"]
    assert open_now.gpu_uuids == ["GPU-1", "GPU-2", "GPU-3", "GPU-9"]
    every = browse.finding_facets(store, open_only=False)
    assert (every.kinds, every.owners, every.teams) == (
        ["idle", "leak", "zombie"],
        ["ann", "dan"],
        ["ops", "speech", "vision"],
    )
    assert every.gpu_uuids == ["GPU-1", "GPU-2", "GPU-3", "GPU-4", "GPU-9"]
