"""The roll-out on the web: the Roll-out page and /api/v1/rollout show what ``gpusteward rollout
status`` prints; promote and settling a false kill need an admin (and CSRF on a page), follow the
CLI's rules and are audited; an appeal through the web or a signed link is recorded as the CLI's
is and makes the stop a suspected false kill; Settings lists the scopes; the overview shows the
false-kill ratio and reclaim success. On a real SQLite file, with no agent attached."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpusteward.cli import app as cli_app
from gpusteward.integrations.sim import SimClock
from gpusteward.policy import rollout as ro
from gpusteward.policy.scope_settings import Stage
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.rollout import RolloutBook
from gpusteward.store.access import AccessStore
from gpusteward.store.db import StateStore
from gpusteward.web.app import create_web_app

from .conftest import bearer, login

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
WID = "slurm:gst:4242"
CONFIG = """\
store: {{url: "sqlite:///{db}"}}
web: {{secret_key: test-signing-key-0123456789abcdef}}
policy:
  max_level: L3
  scopes:
    - name: pilot-nlp
      match: {{teams: [nlp], labels: {{tier: gold}}}}
      mode: observe
    - name: research
      match: {{accounts: [research]}}
      mode: notify
      max_level: L4
      ladder: {{graceful_stop_after_minutes: 90}}
  default_scope: {{mode: enforce, max_level: L2}}
  rollout:
    promote_when: {{min_days: 14, max_false_kills: 0, max_appeals: 2}}
"""


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.config = tmp_path / "gpusteward.yaml"
        self.config.write_text(CONFIG.format(db=tmp_path / "state.db"))
        self.settings: Settings = load_settings(str(self.config))
        self.store = StateStore(self.settings.store.url)
        self.store.create_schema()
        self.clock = SimClock(T0)
        self.book = RolloutBook(self.store, self.settings.policy)
        access = AccessStore(self.store)
        self.tokens = {r: access.create_token(f"{r}-1", r, at=T0)[1] for r in ("viewer", "operator", "admin")}
        # Stages began 20 days ago; research has one suspected false kill (not ready to promote),
        # pilot-nlp none; 4 stops attempted, 3 freed their GPUs.
        self.book.note_config(T0 - timedelta(days=20))
        watch = ro.Watch(reclaim={"SlurmExecutor": [4, 3]})
        watch.count("pilot-nlp", Stage.OBSERVE, finding=True)
        watch.count("pilot-nlp", Stage.OBSERVE, would="graceful-stop")
        # Two stops an hour ago: one already matched by a resubmission, WID not (yet).
        stops = [
            ro.StopRecord(w, T0 - timedelta(hours=1), f"slurm:{w}|bob|research", "research", "idle-gpu",
                          "batch", "bob")
            for w in ("slurm:gst:4000", WID)
        ]  # fmt: skip
        watch.stops.extend(stops)
        watch.suspect(
            stops[0], "resubmitted as slurm:gst:4243 12 min after the stop", T0 - timedelta(minutes=30)
        )
        self.book.save_watch(watch, T0)

    def app(self) -> TestClient:
        return TestClient(create_web_app(self.store, self.settings, [], clock=self.clock))

    def events(self, prefix: str) -> list[tuple[str, dict[str, object]]]:
        return [
            (r.event, dict(r.payload)) for r in self.store.audit_log(limit=200) if r.event.startswith(prefix)
        ]

    def cli(self, *args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli_app, [*args, "-c", str(self.config)])
        return result.exit_code, result.output


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.store.close()


def test_the_api_and_the_page_show_what_rollout_status_prints(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI reads the wall clock: days in the stage are compared at the CLI's own time.
    monkeypatch.setattr("gpusteward.cli.rollout.utcnow", lambda: T0)
    code, out = world.cli("rollout", "status", "--json")
    assert code == 0, out
    with world.app() as c:
        api = c.get("/api/v1/rollout", headers=bearer(world.tokens["viewer"]))
        page = c.get("/rollout", headers=bearer(world.tokens["viewer"]))
    assert api.status_code == 200
    assert api.json() == json.loads(out)
    rows = {r["scope"]: r for r in api.json()}
    assert rows["pilot-nlp"]["findings"] == 1
    assert rows["pilot-nlp"]["enforce_would_have"] == {"graceful-stop": 1}
    assert rows["pilot-nlp"]["ready_to_promote"] is True
    assert rows["research"]["false_kills"] == 1
    assert rows["research"]["ready_to_promote"] is False
    assert page.status_code == 200
    html = page.text
    for text in ("pilot-nlp", "graceful-stop 1", "research", "1 suspected false kills (at most 0)",
                 "resubmitted as slurm:gst:4243", 'id="fk-1"'):  # fmt: skip
        assert text in html, text
    # A viewer sees the figures, not the admin's buttons.
    assert "/promote" not in html
    assert 'value="confirm"' not in html


def test_promote_on_the_page_needs_an_admin_csrf_and_the_criteria(world: World) -> None:
    with world.app() as c:
        csrf = login(c, world.tokens["operator"])
        assert c.post("/rollout/research/promote", data={"csrf": csrf}).status_code == 403
        c.cookies.clear()
        csrf = login(c, world.tokens["admin"])
        assert 'action="/rollout/research/promote"' in c.get("/rollout").text
        assert c.post("/rollout/research/promote", data={"reason": "x"}).status_code == 403  # no CSRF
        refused = c.post("/rollout/research/promote", data={"csrf": csrf})
        assert refused.status_code == 409
        assert "does not meet the promotion criteria" in refused.text
        no_reason = c.post("/rollout/research/promote", data={"csrf": csrf, "force": "1"})
        assert no_reason.status_code == 409
        forced = c.post(
            "/rollout/research/promote",
            data={"csrf": csrf, "force": "1", "reason": "pilot sign-off"},
            follow_redirects=False,
        )
        assert forced.status_code == 303
        assert "now+in+enforce" in forced.headers["location"]
        ready = c.post("/rollout/pilot-nlp/promote", data={"csrf": csrf}, follow_redirects=False)
        assert ready.status_code == 303
    stages = world.book.stages()
    assert stages["research"][0] is Stage.ENFORCE
    assert stages["pilot-nlp"][0] is Stage.NOTIFY
    events = world.events("rollout.")
    assert [e for e, _ in events] == ["rollout.promote_refused", "rollout.promoted", "rollout.promoted"]
    assert events[1][1] | {"by": "admin-1", "forced": True, "reason": "pilot sign-off"} == events[1][1]
    assert events[2][1]["forced"] is False


def test_promote_and_settle_through_the_api(world: World) -> None:
    admin, viewer = bearer(world.tokens["admin"]), bearer(world.tokens["viewer"])
    with world.app() as c:
        assert c.post("/api/v1/rollout/pilot-nlp/promote", headers=viewer).status_code == 403
        assert c.post("/api/v1/rollout/nope/promote", headers=admin).status_code == 404
        assert c.post("/api/v1/rollout/Bad%20Name/promote", headers=admin).status_code == 422
        refused = c.post("/api/v1/rollout/research/promote", headers=admin)
        assert refused.status_code == 409
        assert "promotion criteria" in refused.json()["error"]
        forced = c.post("/api/v1/rollout/research/promote", headers=admin, json={"force": True})
        assert forced.status_code == 409  # a forced promotion needs a reason, as on the CLI
        done = c.post("/api/v1/rollout/research/promote", headers=admin, json={"force": True, "reason": "ok"})
        assert done.status_code == 200
        assert done.json()["stage"] == "enforce"
        listed = c.get("/api/v1/rollout/false-kills?status=suspected", headers=viewer).json()
        assert [f["id"] for f in listed["false_kills"]] == [1]
        assert listed["reclaim"] == {"SlurmExecutor": {"attempted": 4, "freed": 3}}
        assert c.get("/api/v1/rollout/false-kills?status=bogus", headers=viewer).status_code == 422
        assert c.post("/api/v1/rollout/false-kills/1/dismiss", headers=admin, json={}).status_code == 422
        assert c.post("/api/v1/rollout/false-kills/1/confirm", headers=viewer).status_code == 403
        ok = c.post("/api/v1/rollout/false-kills/1/dismiss", headers=admin, json={"reason": "cron job"})
        assert ok.status_code == 200
        assert ok.json()["status"] == "dismissed"
        again = c.post("/api/v1/rollout/false-kills/1/confirm", headers=admin)
        assert again.status_code == 409
        assert c.post("/api/v1/rollout/false-kills/9/confirm", headers=admin).status_code == 404
        assert (
            c.get("/api/v1/rollout/false-kills?status=suspected", headers=viewer).json()["false_kills"] == []
        )
    assert [e for e, _ in world.events("rollout.false_kill")] == ["rollout.false_kill_dismissed"]


def test_confirm_and_dismiss_on_the_page(world: World) -> None:
    with world.app() as c:
        csrf = login(c, world.tokens["admin"])
        page = c.get("/rollout").text
        assert 'action="/rollout/false-kills/1"' in page
        assert c.post("/rollout/false-kills/1", data={"csrf": csrf, "decision": "dismiss"}).status_code == 409
        assert c.post("/rollout/false-kills/1", data={"csrf": csrf, "decision": "maybe"}).status_code == 422
        done = c.post(
            "/rollout/false-kills/1", data={"csrf": csrf, "decision": "confirm"}, follow_redirects=False
        )
        assert done.status_code == 303
        assert "confirmed" in done.headers["location"]
        after = c.get("/rollout").text
    assert 'action="/rollout/false-kills/1"' not in after  # settled: no buttons any more
    assert "confirmed by admin-1" in after
    assert [f.status for f in world.book.false_kills()] == ["confirmed"]
    assert [e for e, _ in world.events("rollout.false_kill")] == ["rollout.false_kill_confirmed"]


def _appealed_stops(world: World, now: datetime) -> list[tuple[str, str]]:
    """What the tick's record phase (``RolloutStep``) matches: stops against appeals."""
    horizon = timedelta(hours=world.settings.policy.rollout.false_kill_horizon_hours)
    watch = world.book.watch()
    return [(s.workload_id, why) for s, why in ro.match(watch.stops, [], world.book.appeals(), now, horizon)]


def test_an_appeal_through_a_signed_link_is_recorded_once_and_counts(world: World) -> None:
    assert _appealed_stops(world, T0) == []  # nothing appealed yet: WID's stop is unmatched
    world.clock.advance(300)
    with world.app() as c:
        url = c.app.state.web.links.appeal_url(WID, to="bob", now=world.clock.now())  # type: ignore[attr-defined]
        path = urlsplit(url).path
        form = c.get(path)
        assert form.status_code == 200
        assert f"appeal the stop of {WID}" in form.text
        used = c.post(path, data={"csrf": c.cookies.get("gst_login_csrf") or "", "reason": "it was training"})
        assert used.status_code == 200, used.text
        again = c.post(path, data={"csrf": c.cookies.get("gst_login_csrf") or ""})
        assert again.status_code == 409  # single use
    [appeal] = world.book.appeals()
    assert (appeal.workload_id, appeal.by, appeal.reason) == (WID, "link:bob", "it was training")
    assert [(e, p["by"]) for e, p in world.events("workload.appeal")] == [("workload.appeal", "link:bob")]
    matched = _appealed_stops(world, world.clock.now())
    assert matched == [(WID, matched[0][1])]
    assert matched[0][1].startswith("appealed by link:bob")


def test_an_appeal_from_the_workload_page_needs_an_operator(world: World) -> None:
    with world.app() as c:
        csrf = login(c, world.tokens["viewer"])
        assert c.post(f"/workloads/{WID}/appeal", data={"csrf": csrf}).status_code == 403
        c.cookies.clear()
        csrf = login(c, world.tokens["operator"])
        assert c.post(f"/workloads/{WID}/appeal", data={"reason": "x"}).status_code == 403  # no CSRF
        done = c.post(
            f"/workloads/{WID}/appeal", data={"csrf": csrf, "reason": "busy"}, follow_redirects=False
        )
        assert done.status_code == 303
        api = c.post(
            "/api/v1/workloads/other%2Fjob/appeal",
            headers=bearer(world.tokens["operator"]),
            json={"reason": "r"},
        )
        assert api.status_code == 200
    assert [(a.workload_id, a.by) for a in world.book.appeals()] == [
        (WID, "operator-1"),
        ("other/job", "operator-1"),
    ]
    assert len(world.events("workload.appeal")) == 2
    assert _appealed_stops(world, T0)[0][1].startswith("appealed by operator-1")


def test_settings_lists_the_scopes_and_the_overview_the_safety_figures(world: World) -> None:
    viewer = bearer(world.tokens["viewer"])
    with world.app() as c:
        scopes = {s["scope"]: s for s in c.get("/api/v1/settings", headers=viewer).json()["scopes"]}
        page = c.get("/settings", headers=viewer).text
        ov = c.get("/api/v1/overview", headers=viewer).json()
        home = c.get("/", headers=viewer).text
    assert list(scopes) == ["pilot-nlp", "research", "default"]
    assert scopes["pilot-nlp"]["match"] == {"teams": ["nlp"], "labels": {"tier": "gold"}}
    assert scopes["research"]["max_level"] == "L3"  # its L4 capped by policy.max_level
    assert scopes["default"]["max_level"] == "L2"
    assert scopes["research"]["ladder"] == {"graceful_stop_after_minutes": 90.0}
    assert "teams: nlp; labels: tier=gold" in page
    assert "accounts: research" in page
    assert ov["safety"] == {
        "attempted": 4,
        "freed": 3,
        "false_kills": 1,
        "false_kill_ratio": 0.25,
        "reclaim_success_ratio": 0.75,
    }
    assert "25.0 %" in home
    assert "75.0 %" in home
