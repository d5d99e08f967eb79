"""Every page, rendered with a payload in each query parameter and in each string the store
holds, shows the payload as text and never as markup; the SVG charts escape their text; the
login page's ``next`` is only ever a path on this site."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from urllib.parse import quote, urlencode

import pytest
from fastapi.testclient import TestClient

from gpusteward.domain.records import ShowbackAmounts, ShowbackKey
from gpusteward.web import pages
from gpusteward.web.auth import LOGIN_CSRF_COOKIE

from .conftest import Demo, bearer
from .xss_payloads import (
    CLOSED_PARAMS,
    PAYLOAD_RULE,
    Seeded,
    flat_routes,
    mount_of,
    payload_app,
    quote_yaml,
    reflected_query,
    seed,
    unescaped,
    xss,
)

#: The page routes (GET, outside /api and /static) the render test opens; a new page must join.
PAGE_ROUTES = {
    "/",
    "/login",
    "/partials/overview",
    "/findings",
    "/workloads/{workload_id:path}",
    "/actions",
    "/audit",
    "/approvals",
    "/rules",
    "/rules/{name}/edit",
    "/settings",
    "/consolidation",
    "/rollout",
    "/showback",
    "/l/{token}",
}
ESCAPED = "&lt;script&gt;window.__xss"


@pytest.fixture(scope="module")
def seeded(demo: Demo) -> Seeded:
    done = seed(demo)
    # Showback: a team, an owner and a GPU model from the source, in this month's rows.
    day = demo.clock.now().date().isoformat()
    key = ShowbackKey(day, xss("sb-team"), xss("sb-user"), xss("sb-model"), "on-demand", "USD")
    demo.store.ledger.add({}, {}, showback={key: ShowbackAmounts(2.0, 1.0, 0.5, 0.0, 6.0)})
    return done


@pytest.fixture(scope="module")
def xclient(demo: Demo, seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(payload_app(demo)) as c:
        yield c


def _pages(s: Seeded) -> list[str]:
    return [
        "/",
        "/login",
        "/partials/overview",
        "/findings",
        "/findings?status=all",
        s.workload_path,
        "/workloads/" + quote(s.missing, safe=""),
        "/actions",
        "/audit",
        "/approvals",
        "/rules",
        f"/rules/{PAYLOAD_RULE}/edit",
        "/settings",
        "/consolidation",
        "/rollout",
        "/rollout?status=&scope=" + quote(xss("scope-filter"), safe=""),
        "/showback",
        s.link,
    ]


def test_the_render_test_opens_every_page_route(xclient: TestClient) -> None:
    routes = {
        r.path
        for r in flat_routes(xclient.app)  # type: ignore[arg-type]
        if not mount_of(r) and "GET" in (r.methods or ()) and not r.path.startswith("/api/")
    }
    assert routes == PAGE_ROUTES


def test_pages_show_payloads_as_text(demo: Demo, seeded: Seeded, xclient: TestClient) -> None:
    admin = bearer(demo.tokens["admin"])
    raw: dict[str, list[str]] = {}
    shown = []
    for page in _pages(seeded):
        url = page + ("&" if "?" in page else "?") + reflected_query()
        headers = {} if page in ("/login", seeded.link) else admin
        resp = xclient.get(url, headers=headers, follow_redirects=False)
        assert resp.status_code in (200, 404), (page, resp.status_code, resp.text[:300])
        assert resp.headers["content-type"].startswith("text/html")
        if found := unescaped(resp.text):
            raw[page] = found
        if ESCAPED in resp.text:
            shown.append(page)
    assert not raw, raw
    # The payloads did reach the pages (as text): the test is not passing on empty pages.
    assert set(shown) >= set(_pages(seeded)) - {"/login", "/partials/overview"}


def test_closed_parameters_refuse_payloads_as_text(demo: Demo, seeded: Seeded, xclient: TestClient) -> None:
    admin = bearer(demo.tokens["admin"])
    refused = set()
    for page in _pages(seeded):
        for param in CLOSED_PARAMS:
            url = page + ("&" if "?" in page else "?") + urlencode({param: xss(f"c-{param}")})
            headers = {} if page in ("/login", seeded.link) else admin
            resp = xclient.get(url, headers=headers, follow_redirects=False)
            assert resp.status_code in (200, 404, 422), (url, resp.status_code)
            assert resp.headers["content-type"].startswith("text/html")
            assert not unescaped(resp.text), (url, unescaped(resp.text))
            if resp.status_code == 422:
                refused.add(page.split("?")[0])
    assert refused == {"/findings", "/actions", "/approvals", "/rollout"}


def test_the_anonymous_login_page_reflects_nothing(xclient: TestClient) -> None:
    resp = xclient.get("/login?" + reflected_query())
    assert resp.status_code == 200
    assert "__xss" not in resp.text  # neither raw nor escaped: no text injection either
    assert "pwned" not in resp.text


def test_posted_forms_echo_payloads_as_text(demo: Demo, seeded: Seeded, xclient: TestClient) -> None:
    admin = bearer(demo.tokens["admin"])
    broken = f"rules:\n  - name: x\n    kind: {xss('pk')}\n    when: {xss('pw')}\n"
    kind = quote_yaml(xss("pk2")[:100])
    valid = f"rules:\n  - name: y\n    kind: {kind}\n    when: mean(gpu_util_pct, 10m) < 5\n"
    for text in (broken, valid):
        resp = xclient.post("/rules/preview", data={"text": text}, headers=admin)
        assert resp.status_code == 200
        assert not unescaped(resp.text), resp.text
    snooze = xclient.post(
        seeded.workload_path + "/snooze",
        data={"hours": "100000", "reason": xss("sr")},
        headers=admin,
        follow_redirects=True,
    )
    assert snooze.status_code in (200, 409)
    assert not unescaped(snooze.text), snooze.text


def test_svg_charts_escape_their_text() -> None:
    # The chart builders the pages use, whichever module they live in.
    line_chart, bar_chart, hbar_chart = pages.line_chart, pages.bar_chart, pages.hbar_chart
    # The chart builders the pages use, whichever module they live in.
    line_chart, bar_chart, hbar_chart = pages.line_chart, pages.bar_chart, pages.hbar_chart
    p = xss("chart")
    charts = [
        line_chart([p, "b"], {p: [1.0, 2.0], "other": [2.0, None]}, title=p, unit=p),
        bar_chart([p, "b"], {p: [1.0, 2.0], "other": [3.0, 1.0]}, title=p, unit=p),
        hbar_chart([p, "b"], [1.0, 2.0], title=p, unit=p),
    ]
    for svg in charts:
        assert not unescaped(svg)
        root = ET.fromstring(svg)  # well-formed: no attribute was broken out of
        texts = {el.text for el in root.iter() if el.text}
        attrs = {v for el in root.iter() for v in el.attrib.values()}
        assert p in texts
        assert p in attrs  # data-label / data-series keep the exact value


EVIL_NEXT = [
    "//evil.example/x",
    "https://evil.example/",
    "/\\evil.example",
    "\\/evil.example",
    "/\t/evil.example",
    "/\n/evil.example",
    "javascript:alert(1)",
    " /x",
    "",
]


@pytest.mark.parametrize("nxt", EVIL_NEXT)
def test_login_next_is_only_a_local_path(demo: Demo, client: TestClient, nxt: str) -> None:
    form = client.get("/login", params={"next": nxt})
    assert 'name="next" value="/"' in form.text
    resp = client.post(
        "/login",
        data={
            "token": demo.tokens["viewer"],
            "csrf": client.cookies.get(LOGIN_CSRF_COOKIE) or "",
            "next": nxt,
        },
        follow_redirects=False,
    )
    assert resp.status_code == 303
    assert resp.headers["location"] == "/"


def test_login_keeps_a_local_next_with_its_query(demo: Demo, client: TestClient) -> None:
    sent = client.get("/actions?q=a&status=failed", follow_redirects=False)
    assert sent.status_code == 303
    form = client.get(sent.headers["location"])
    assert 'name="next" value="/actions?q=a&amp;status=failed"' in form.text
    resp = client.post(
        "/login",
        data={
            "token": demo.tokens["viewer"],
            "csrf": client.cookies.get(LOGIN_CSRF_COOKIE) or "",
            "next": "/actions?q=a&status=failed",
        },
        follow_redirects=False,
    )
    assert resp.headers["location"] == "/actions?q=a&status=failed"


def test_a_wrong_token_shows_the_fixed_login_error(demo: Demo, client: TestClient) -> None:
    client.get("/login")
    resp = client.post(
        "/login", data={"token": "gst_wrong", "csrf": client.cookies.get(LOGIN_CSRF_COOKIE) or ""}
    )
    assert resp.status_code == 200
    assert "unknown or revoked token" in resp.text
