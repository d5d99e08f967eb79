"""The pages in a real browser: Playwright driving Debian's headless Chromium against the app
served by uvicorn on loopback. Log in, see the overview charts drawn, open a workload, approve
a waiting step, preview a rule edit (htmx), pause and resume; a screenshot of each page is saved
under $GPUSTEWARD_TEST_ARTIFACTS/web (default tests/artifacts/web)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpusteward.domain.models import ApprovalStatus

from .conftest import Demo, covered_slices

CHROMIUM = os.environ.get("GPUSTEWARD_CHROMIUM", "/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not shutil.which(CHROMIUM) and not os.environ.get("CI"),
    reason=f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        # Debian's Chromium, never a downloaded one; no sandbox when tests run as root in a container.
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def _shot(page: Any, artifacts: Path, name: str) -> None:
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5_000  # a page was drawn, not a blank


def test_admin_walkthrough(demo: Demo, served: str, browser: Any, artifacts: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(served + "/")
    assert page.url.startswith(served + "/login")
    _shot(page, artifacts, "01-login")

    page.fill("#token", demo.tokens["operator"])
    page.click("#login")
    page.wait_for_url(served + "/")
    # The overview's charts are drawn: the utilisation line has its points, the money chart its bars.
    page.wait_for_selector("#chart-utilisation svg circle.point")
    assert page.locator("#chart-utilisation svg circle.point").count() >= covered_slices(demo.settings)
    assert page.locator("#chart-money svg rect.bar").count() > 0
    assert page.locator("#chart-actions svg rect.bar").count() > 0
    box = page.locator("#chart-utilisation svg").bounding_box()
    assert box is not None
    assert box["width"] > 200
    assert box["height"] > 80
    assert int(page.inner_text("#idle-gpus")) > 0
    assert page.inner_text("#mode") == "ENFORCE"
    _shot(page, artifacts, "02-overview")

    page.click("nav >> text=Findings")
    page.wait_for_selector("#findings tbody tr td a")
    _shot(page, artifacts, "03-findings")
    page.locator("#findings tbody tr td a").first.click()
    page.wait_for_selector("#workload-title")
    assert page.locator("#evidence svg").count() >= 2
    assert page.locator("#decisions tbody tr").count() >= 1
    _shot(page, artifacts, "04-workload")

    page.click("nav >> text=Actions")
    page.wait_for_selector("#actions tbody tr")
    _shot(page, artifacts, "05-actions")
    page.click("nav >> text=Audit")
    page.wait_for_selector("#audit tbody tr")
    _shot(page, artifacts, "06-audit")

    pending = demo.store.approvals(ApprovalStatus.PENDING)
    assert pending
    target = pending[0]
    page.click("nav >> text=Approvals")
    card = page.locator(f"#approval-{target.id}")
    card.wait_for()
    _shot(page, artifacts, "07-approvals")
    card.locator("input[name=reason]").fill("idle for hours, approved in the browser test")
    card.locator("button.approve").click()
    page.wait_for_selector(".note")
    assert "approved" in page.inner_text(".note")
    decided = demo.store.approval(target.id)
    assert decided is not None
    assert decided.status is ApprovalStatus.APPROVED
    assert decided.decided_by == "operator-1"
    _shot(page, artifacts, "08-approved")

    page.click("nav >> text=Rules")
    page.locator("#rules a", has_text="edit").first.click()
    page.fill(
        "#rule-text", "rules:\n  - name: any-idle\n    kind: idle\n    when: mean(gpu_util_pct, 10m) < 5\n"
    )
    page.click("#preview")  # htmx posts the form, with the CSRF header, and swaps the result in
    page.wait_for_selector("#preview-ok")
    assert page.locator("#preview-findings tbody tr").count() > 0
    _shot(page, artifacts, "09-rule-preview")
    page.fill("#rule-text", "rules:\n  - name: broken\n    kind: idle\n    when: mean(gpu_util, 10m) < 5\n")
    page.click("#preview")
    page.wait_for_selector("#preview-error")
    assert "line 4" in page.inner_text("#preview-error") or ":4:" in page.inner_text("#preview-error")

    page.click("nav >> text=Settings")
    page.fill("input[name=reason]", "browser test")
    page.click("#pause")
    page.wait_for_selector("#paused-badge")
    assert demo.store.is_paused()
    assert page.inner_text("#pause-state") == "paused"
    _shot(page, artifacts, "10-paused")
    page.click("#banner-resume")  # the banner on every page offers it
    page.wait_for_selector("#paused-badge", state="detached")
    assert not demo.store.is_paused()
    _shot(page, artifacts, "11-resumed")
    page.close()


def test_pages_fit_a_phone(demo: Demo, served: str, browser: Any, artifacts: Path) -> None:
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page.goto(served + "/login")
    page.fill("#token", demo.tokens["viewer"])
    page.click("#login")
    page.wait_for_selector("#chart-money svg")
    for path, name in (
        ("/", "phone-overview"),
        ("/findings", "phone-findings"),
        ("/actions", "phone-actions"),
    ):
        page.goto(served + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{path} scrolls sideways by {overflow}px on a phone"
        _shot(page, artifacts, name)
    # A viewer sees the approvals but no buttons to decide them.
    page.goto(served + "/approvals")
    assert page.locator("button.approve").count() == 0
    page.close()
