"""Paged lists and streamed exports in the API and on the pages, over more rows than one chunk."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from html import unescape

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert

from gpusteward.store import browse
from gpusteward.store.dbschema import audit_t

from .conftest import Demo, bearer

PROBES = 2_500  # more than two export chunks


@pytest.fixture(scope="module")
def probes(demo: Demo) -> Demo:
    """The demo store with many audit records added (as an agent that ran for months has)."""
    start = demo.clock.now() - timedelta(days=90)
    rows = [
        {
            "at": start + timedelta(minutes=i),
            "event": "probe.seen",
            "workload_id": f"job-probe-{i % 4}",
            "payload": {"n": i, "tag": "Zebra" if i % 2 else "yak"},
        }
        for i in range(PROBES)
    ]
    with demo.store.transaction("seed probes") as conn:
        conn.execute(insert(audit_t), rows)
    return demo


def _walk_api(client: TestClient, url: str, h: dict[str, str]) -> list[list[dict[str, object]]]:
    pages = []
    while url:
        resp = client.get(url, headers=h)
        assert resp.status_code == 200, resp.text
        pages.append(resp.json())
        link = resp.headers.get("link", "")
        url = link[1 : link.index(">")] if link else ""
    return pages


def test_api_pages_follow_the_link_header(probes: Demo, client: TestClient) -> None:
    h = bearer(probes.tokens["viewer"])
    pages = _walk_api(client, "/api/v1/audit?event=probe.&limit=300", h)
    ids = [r["id"] for p in pages for r in p]
    assert len(pages) == -(-PROBES // 300)
    assert len(ids) == len(set(ids)) == PROBES  # disjoint and complete
    assert ids == sorted(ids, reverse=True)  # type: ignore[type-var]
    # Findings too; the filters stay on the next link.
    found = _walk_api(client, "/api/v1/findings?status=all&limit=3", h)
    everything = client.get("/api/v1/findings?status=all&limit=5000", headers=h).json()
    assert len(found) > 1
    assert [r["id"] for p in found for r in p] == [r["id"] for r in everything]


def test_exports_stream_every_match(probes: Demo, client: TestClient) -> None:
    h = bearer(probes.tokens["viewer"])
    zebras = {i for i in range(PROBES) if i % 2}
    assert len(zebras) > browse.CHUNK  # the export crosses a chunk boundary
    exported = client.get("/api/v1/audit?q=zebra&format=csv", headers=h)
    assert exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert len(rows) == len(zebras)
    assert {r["payload"] for r in rows} == {f'{{"n": {i}, "tag": "Zebra"}}' for i in zebras}
    as_json = client.get("/api/v1/audit?q=zebra&all=true", headers=h).json()
    assert [r["id"] for r in as_json] == [int(r["id"]) for r in rows]
    # An explicit limit keeps its old meaning: the newest that many.
    assert (
        len(
            list(csv.DictReader(io.StringIO(client.get("/api/v1/audit?format=csv&limit=10", headers=h).text)))
        )
        == 10
    )
    one = client.get("/api/v1/audit?q=zebra&workload=job-probe-1&all=true&format=csv", headers=h)
    assert len(list(csv.DictReader(io.StringIO(one.text)))) == len([i for i in zebras if i % 4 == 1])


def test_pages_link_to_older_rows(probes: Demo, client: TestClient) -> None:
    h = bearer(probes.tokens["viewer"])
    seen: list[str] = []
    url = "/audit?event=probe.&q=yak&limit=500"
    while url:
        page = client.get(url, headers=h)
        assert page.status_code == 200
        seen += re.findall(r'"n": (\d+), "tag": "yak"', page.text)
        older = re.search(r'<a rel="next" href="([^"]+)"', page.text)
        url = unescape(older.group(1)) if older else ""
        if url:
            assert "q=yak" in url
            assert "before=" in url
    assert sorted(map(int, seen)) == [i for i in range(PROBES) if i % 2 == 0]
    assert "« Newest" in client.get("/audit?event=probe.&before=999999", headers=h).text
