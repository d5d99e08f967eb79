"""Paged lists (``limit`` + ``continue``) against the fake API server: complete, one snapshot,
an expired continue token starts the list over, and the watch resumes where the list ended."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import parse_qs

import pytest
from k8s_cluster import gpu_pod, node
from k8s_fakeapi import Call, FakeApiServer, FakeCluster

from gpusteward.integrations.kubernetes.cache import WatchCache
from gpusteward.integrations.kubernetes.kubeapi import LIST_RESTARTS, PODS, KubeApi

EXTRA_PODS = 23
PAGE = 5


@pytest.fixture
def cluster() -> FakeCluster:
    from k8s_cluster import scenario

    c = scenario()
    for i in range(EXTRA_PODS):
        c.put("", "pods", gpu_pod("pod1.json", f"batch-{i:02d}", "batch", None))
    return c


def pod_names(objs: list[dict[str, Any]]) -> set[str]:
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objs}


def lists(cluster: FakeCluster, resource: str = "pods") -> list[Call]:
    return [c for c in cluster.calls if c.verb == "list" and c.resource == resource]


def query(call: Call) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(call.query).items()}


def test_a_paged_list_is_complete_and_one_snapshot(cluster: FakeCluster, api_client: Any) -> None:
    before = pod_names(cluster.items("", "pods"))
    snapshot_rv = str(cluster.rv)
    assert len(before) > 3 * PAGE
    pages: list[dict[str, Any]] = []

    def write_between_pages(page: dict[str, Any]) -> None:
        pages.append(page)
        if len(pages) == 1:  # writes after the first page must not show up in this list
            cluster.put("", "pods", gpu_pod("pod1.json", "created-meanwhile", "batch", None))
            cluster.remove("", "pods", "batch", "batch-22")

    cluster.after_page = write_between_pages
    reply = KubeApi(api_client, page_size=PAGE).list(PODS)

    assert reply.ok
    assert pod_names(reply.body["items"]) == before
    assert len(reply.body["items"]) == len(before)
    assert reply.body["metadata"]["resourceVersion"] == snapshot_rv
    assert "continue" not in reply.body["metadata"]
    calls = lists(cluster)
    assert len(calls) == math.ceil(len(before) / PAGE)
    assert all(query(c)["limit"] == str(PAGE) for c in calls)
    assert "continue" not in query(calls[0])
    assert all(query(c)["continue"] for c in calls[1:])
    assert {p["metadata"]["resourceVersion"] for p in pages} == {snapshot_rv}
    assert [p["metadata"].get("remainingItemCount") for p in pages[:-1]] == [
        len(before) - PAGE * (i + 1) for i in range(len(pages) - 1)
    ]
    # The next list sees the writes.
    after = pod_names(KubeApi(api_client, page_size=PAGE).list(PODS).body["items"])
    assert after == (before | {"batch/created-meanwhile"}) - {"batch/batch-22"}


def test_an_expired_continue_token_starts_the_list_over(cluster: FakeCluster, api_client: Any) -> None:
    n = len(cluster.items("", "pods"))
    served: list[dict[str, Any]] = []

    def expire_after_first_page(page: dict[str, Any]) -> None:
        served.append(page)
        if len(served) == 1:  # compaction between pages 1 and 2, and a pod created meanwhile
            cluster.put("", "pods", gpu_pod("pod1.json", "created-meanwhile", "batch", None))
            cluster.expire_continue_tokens()

    cluster.after_page = expire_after_first_page
    api = KubeApi(api_client, page_size=PAGE)
    cache = WatchCache("pods", lambda: api.list(PODS), lambda rv, t: api.watch(PODS, rv, t), resync_s=300)
    cache.relist()  # synchronous: only the list, no watch filling gaps

    assert pod_names(cache.snapshot()) == pod_names(cluster.items("", "pods"))
    assert len(cache.snapshot()) == n + 1
    assert cache.resource_version == str(cluster.rv)
    calls = lists(cluster)
    # page 1, the refused page 2, then the whole list again from its first page
    assert len(calls) == 2 + math.ceil((n + 1) / PAGE)
    assert "continue" in query(calls[1])
    assert "continue" not in query(calls[2])


def test_a_token_that_keeps_expiring_is_an_error_not_a_loop(cluster: FakeCluster, api_client: Any) -> None:
    cluster.after_page = lambda _page: cluster.expire_continue_tokens()
    reply = KubeApi(api_client, page_size=PAGE).list(PODS)

    assert reply.status == 410
    assert reply.body["reason"] == "Expired"
    assert len(lists(cluster)) == 2 * (1 + LIST_RESTARTS)


def test_the_watch_starts_where_the_list_ended(cluster: FakeCluster, api_client: Any) -> None:
    list_rv: list[str] = []

    def create_after_last_page(page: dict[str, Any]) -> None:
        if "continue" not in page["metadata"] and not list_rv:
            list_rv.append(page["metadata"]["resourceVersion"])
            cluster.put("", "pods", gpu_pod("pod1.json", "late-pod", "batch", None))

    cluster.after_page = create_after_last_page
    api = KubeApi(api_client, page_size=PAGE)
    cache = WatchCache("pods", lambda: api.list(PODS), lambda rv, t: api.watch(PODS, rv, t), resync_s=300)
    cache.start()
    try:
        # hang guard only: the pod comes from the watch, which started at the list's version
        assert cache.wait_for(lambda objs: "batch/late-pod" in pod_names(objs), 30)
        assert cache.lists == 1
        watches = [c for c in cluster.calls if c.verb == "watch" and c.resource == "pods"]
        assert query(watches[0])["resourceVersion"] == list_rv[0]
    finally:
        cache.stop()


def test_page_size_zero_lists_in_one_request(cluster: FakeCluster, api_client: Any) -> None:
    reply = KubeApi(api_client, page_size=0).list(PODS)

    assert pod_names(reply.body["items"]) == pod_names(cluster.items("", "pods"))
    calls = lists(cluster)
    assert len(calls) == 1
    assert "limit" not in query(calls[0])


def test_nodes_are_listed_in_pages(cluster: FakeCluster, api_client: Any) -> None:
    for i in range(4):
        cluster.put("", "nodes", node(f"extra-node-{i}"))
    want = {n["metadata"]["name"] for n in cluster.items("", "nodes")}

    reply = KubeApi(api_client, page_size=2).list_nodes()

    assert {n["metadata"]["name"] for n in reply.body["items"]} == want
    assert len(lists(cluster, "nodes")) == math.ceil(len(want) / 2)


def test_the_setting_reaches_the_source(server: FakeApiServer, api_client: Any, metrics: Any) -> None:
    from test_source import parts_for

    parts = parts_for(api_client, metrics, list_page_size=7)
    try:
        parts.source.start()
        parts.source.pods.check(30)  # hang guard: waits for the first list
        assert len(parts.source.pods.snapshot()) == len(server.cluster.items("", "pods"))
    finally:
        parts.source.close()
    calls = lists(server.cluster)
    assert calls
    assert {query(c)["limit"] for c in calls} == {"7"}
