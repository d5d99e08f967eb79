"""XSS in a real browser (Playwright driving Debian's Chromium against uvicorn on loopback).

Every reflected-XSS link (a payload in each query parameter, the anonymous login page
included) and every page showing stored payloads (workload, owner, reasons, notices, token
names, rule texts) is opened: no payload may run (it would set ``window.__xss``, retitle the
page "pwned" or open a dialog). The normal pages must still work under the strict CSP: htmx
loads with its inline-free config, the stylesheet applies, the rule preview (htmx POST with
the CSRF header) and the forms (resume, pause, approve) do their job, with no CSP violation.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusteward.domain.models import ApprovalStatus

from .conftest import BackgroundServer, Demo
from .xss_payloads import PAYLOAD_RULE, Seeded, payload_app, quote_yaml, reflected_query, seed, xss

CHROMIUM = os.environ.get("GPUSTEWARD_CHROMIUM", "/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not shutil.which(CHROMIUM) and not os.environ.get("CI"),
    reason=f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)",
)

#: Records CSP violations before any page script runs (init scripts are not subject to the CSP).
WATCH_CSP = (
    "window.__csp = [];"
    "document.addEventListener('securitypolicyviolation',"
    " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sample || '')));"
)


@dataclass
class Watch:
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def check(self, page: Any, what: str) -> None:
        assert page.evaluate("window.__xss") is None, (
            f"{what}: a payload ran ({page.evaluate('window.__xss')})"
        )
        assert page.title() != "pwned", what  # the payloads' text is in some titles, escaped
        assert not self.dialogs, f"{what}: dialogs {self.dialogs}"
        assert page.evaluate("window.__csp") == [], f"{what}: CSP violations {page.evaluate('window.__csp')}"
        assert not self.errors, f"{what}: {self.errors}"


def _watched(browser: Any) -> tuple[Any, Watch]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch()
    page.add_init_script(WATCH_CSP)

    def on_dialog(d: Any) -> None:
        watch.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda e: watch.errors.append(f"page error: {e}"))
    page.on(
        "console",
        lambda m: (
            watch.errors.append(f"console: {m.text}")
            if m.type == "error" and "Content Security Policy" in m.text
            else None
        ),
    )
    return page, watch


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        # Debian's Chromium, never a downloaded one; no sandbox when tests run as root in a container.
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def seeded(demo: Demo) -> Seeded:
    return seed(demo)


@pytest.fixture(scope="module")
def site(demo: Demo, seeded: Seeded) -> Iterator[str]:
    server = BackgroundServer(payload_app(demo), "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def _log_in(page: Any, site: str, token: str) -> None:
    page.goto(site + "/login")
    page.fill("#token", token)
    page.click("#login")
    page.wait_for_url(site + "/")


def test_anonymous_login_links_run_nothing_and_redirect_nowhere(demo: Demo, site: str, browser: Any) -> None:
    page, watch = _watched(browser)
    page.goto(site + "/login?" + reflected_query())
    watch.check(page, "/login with payloads")
    page.fill("#token", demo.tokens["viewer"])
    page.click("#login")
    page.wait_for_url(site + "/")  # a payload as next= lands on the overview, nowhere else
    for evil in ("//evil.example/", "https://evil.example/", "/\\evil.example/"):
        page.context.clear_cookies()
        page.goto(site + "/login?next=" + evil.replace("\\", "%5C"))
        page.fill("#token", demo.tokens["viewer"])
        page.click("#login")
        page.wait_for_url(site + "/", timeout=5_000)
    watch.check(page, "login")
    page.close()


def test_reflected_and_stored_payloads_never_run(demo: Demo, seeded: Seeded, site: str, browser: Any) -> None:
    page, watch = _watched(browser)
    _log_in(page, site, demo.tokens["admin"])
    pages = [
        "/",
        "/findings",
        "/findings?status=all",
        seeded.workload_path,
        "/workloads/" + seeded.missing.replace("/", "%2F"),
        "/actions",
        "/audit",
        "/approvals",
        "/rules",
        f"/rules/{PAYLOAD_RULE}/edit",
        "/settings",
        "/rollout",
        seeded.link,
    ]
    shown = 0
    for path in pages:
        for url in (path, path + ("&" if "?" in path else "?") + reflected_query()):
            page.goto(site + url)
            page.wait_for_load_state("load")
            watch.check(page, url)
            shown += page.locator("text=window.__xss").count() > 0
    assert shown >= len(pages)  # the payloads are on the pages, as text
    page.close()


def test_pages_work_under_the_csp(demo: Demo, seeded: Seeded, site: str, browser: Any) -> None:
    page, watch = _watched(browser)
    _log_in(page, site, demo.tokens["admin"])
    # htmx is loaded, configured from the meta tag, and the stylesheet applies.
    config = page.evaluate(
        "({t: typeof htmx, i: htmx.config.includeIndicatorStyles, s: htmx.config.allowScriptTags,"
        " e: htmx.config.allowEval})"
    )
    assert config == {"t": "object", "i": False, "s": False, "e": False}
    assert page.evaluate("getComputedStyle(document.querySelector('header.top')).display") == "flex"
    page.wait_for_selector("#chart-utilisation svg circle.point")
    # The overview's live refresh: the partial swaps in through htmx.
    with page.expect_response(lambda r: r.url.endswith("/partials/overview") and r.status == 200):
        page.evaluate("htmx.ajax('GET', '/partials/overview', '#overview')")
    page.wait_for_selector("#overview #idle-gpus")
    watch.check(page, "overview")

    # The rule preview: an htmx POST carrying the CSRF header; a payload in the rule shows as text.
    page.goto(site + f"/rules/{PAYLOAD_RULE}/edit")
    page.click("#preview")
    page.wait_for_selector("#preview-ok")
    bad = f"rules:\n  - name: x\n    kind: idle\n    when: {quote_yaml(xss('preview'))}\n"
    page.fill("#rule-text", bad)  # the error quotes the expression
    page.click("#preview")
    page.wait_for_selector("#preview-error")
    assert "<script>" in page.inner_text("#preview-error")
    watch.check(page, "rule preview")

    # Forms: the seeded pause is resumed from the banner, paused again from the settings page.
    page.goto(site + "/settings")
    page.click("#banner-resume")
    page.wait_for_selector("#paused-badge", state="detached")
    assert not demo.store.is_paused()
    page.fill("input[name=reason]", xss("browser-pause"))
    page.click("#pause")
    page.wait_for_selector("#paused-badge")
    assert demo.store.pause_state().reason == xss("browser-pause")
    watch.check(page, "settings forms")

    pending = [a for a in demo.store.approvals(ApprovalStatus.PENDING) if a.workload_id == seeded.wid]
    assert pending
    page.goto(site + "/approvals")
    card = page.locator(f"#approval-{pending[0].id}")
    card.locator("input[name=reason]").fill(xss("approve"))
    card.locator("button.approve").click()
    page.wait_for_selector(".note")
    decided = demo.store.approval(pending[0].id)
    assert decided is not None
    assert decided.status is ApprovalStatus.APPROVED
    watch.check(page, "approve form")
    page.goto(site + "/approvals")  # the decided request, its payload reason on show
    watch.check(page, "approvals after the decision")
    page.close()
