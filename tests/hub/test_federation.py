"""Three members and a hub, all real processes: two `gpusteward run --web` on the simulator
(different seeds, sizes and cluster names), one `gpusteward serve` over a backtest's state file
(no loop: read-only), and `gpusteward hub run` on the machine's PostgreSQL pulling them every
second. One member is stopped mid-test: the hub shows it stale with its last figures, and
fresh again once it is back. Then the fleet overview and a drill-down in headless Chromium.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from tests.conftest import PG_SERVER
from typer.testing import CliRunner

from gpusteward.cli.main import app
from gpusteward.integrations.prometheus.localserver import free_port

REPLAY = Path(__file__).parents[1] / "fixtures" / "replay" / "scenario_6h.csv"
CHROMIUM = os.environ.get("GPUSTEWARD_CHROMIUM", "/usr/bin/chromium")
HANG_GUARD_S = 120.0
HUB_TOKEN = "hub-view-s3cret"  # a guard against a hung process, not a timing test


def _until(what: str, probe: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        try:
            got = probe()
        except httpx.TransportError:
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.3)


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gpusteward", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def _token(config: Path) -> str:
    made = CliRunner().invoke(
        app, ["token", "create", "--role", "viewer", "--name", "hub", "-c", str(config), "--json"]
    )
    assert made.exit_code == 0, made.output
    return str(json.loads(made.stdout)["token"])


@dataclass
class Fleet:
    base: Path
    hub_url: str
    members: dict[str, str]  # name -> URL
    tokens: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    args: dict[str, list[str]] = field(default_factory=dict)

    def start(self, name: str) -> None:
        self.procs[name] = _start(self.args[name], self.base / f"{name}.log")

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0

    def hub_get(self, path: str, base: str = "", **kw: Any) -> httpx.Response:
        """A request to the hub with its token (web.token is set: nothing is open)."""
        return httpx.get(
            (base or self.hub_url) + path, headers={"authorization": f"Bearer {HUB_TOKEN}"}, **kw
        )

    def overview(self) -> dict[str, Any]:
        got: dict[str, Any] = self.hub_get("/api/v1/hub/overview").json()
        return got

    def cluster(self, name: str) -> dict[str, Any]:
        return next(c for c in self.overview()["clusters"] if c["name"] == name)

    def member_api(self, name: str, path: str) -> Any:
        return httpx.get(
            self.members[name] + path, headers={"authorization": f"Bearer {self.tokens[name]}"}
        ).json()


def _sim_config(base: Path, name: str, sim: str) -> Path:
    path = base / f"{name}.yaml"
    path.write_text(
        f"source: {{name: sim, sim: {sim}}}\ntick_seconds: 2\n"
        f"store: {{url: 'sqlite:///{base / name}.db'}}\n"
        "server: {alertmanager_token: am-s3cret}\n"
        f"web: {{cluster_name: {name}}}\n"
    )
    return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    pytest.importorskip("psycopg", reason="PostgreSQL driver psycopg is not installed")
    base = tmp_path_factory.mktemp("fleet")
    configs = {
        # Two nodes for a busy mix: jobs wait for A100s ...
        "alpha": _sim_config(base, "alpha", "{scenario: default, nodes: 2, seed: 7, history_hours: 6}"),
        # ... that sit idle on a larger, quieter cluster.
        "beta": _sim_config(base, "beta", "{scenario: small, seed: 11, history_hours: 6}"),
    }
    state = base / "gamma.db"
    done = subprocess.run(
        [sys.executable, "-m", "gpusteward", "backtest", "-t", str(REPLAY), "--state", str(state), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    configs["gamma"] = base / "gamma.yaml"
    configs["gamma"].write_text(
        # Its live window replays the same trace (8 H100s); its state is the backtest's.
        f"source: {{name: replay, replay: {{trace: '{REPLAY}'}}}}\ntick_seconds: 60\n"
        f"store: {{url: 'sqlite:///{state}'}}\nweb: {{cluster_name: gamma}}\n"
    )
    ports = {name: free_port() for name in configs}
    members = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    tokens = {name: _token(config) for name, config in configs.items()}
    schema = f"hub_{uuid.uuid4().hex[:12]}"
    hub_port = free_port()
    hub_yaml = base / "hub.yaml"
    hub_yaml.write_text(
        json.dumps(
            {
                "store_url": PG_SERVER,
                "store_schema": schema,
                "interval_seconds": 1,
                "stale_after_seconds": 5,
                "backoff_max_seconds": 2,
                "lease_seconds": 3,
                "advice_min_wait_minutes": 1,
                "advice_min_idle_hours": 0,
                "web": {"token": HUB_TOKEN},
                "members": [
                    {
                        "name": n,
                        "url": members[n],
                        "token": tokens[n],
                        "teams": ["nlp", "vision"] if n != "gamma" else ["ops"],
                    }
                    for n in ("alpha", "beta", "gamma")
                ],
            }
        )
    )
    fl = Fleet(base, f"http://127.0.0.1:{hub_port}", members, tokens)
    for name in ("alpha", "beta"):
        fl.args[name] = ["run", "-c", str(configs[name]), "--web", "--listen", f"127.0.0.1:{ports[name]}"]
    fl.args["gamma"] = ["serve", "-c", str(configs["gamma"]), "--port", str(ports["gamma"])]
    fl.args["hub"] = ["hub", "run", "-c", str(hub_yaml), "--port", str(hub_port)]
    try:
        for name in ("alpha", "beta", "gamma", "hub"):
            fl.start(name)
        _until("every member pulled", lambda: all(c["state"] == "ok" for c in fl.overview()["clusters"]))
        yield fl
    finally:
        for proc in fl.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in fl.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        admin = create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def test_three_members_side_by_side(fleet: Fleet) -> None:
    assert httpx.get(fleet.hub_url + "/api/v1/hub/overview").status_code == 401  # web.token set
    ov = fleet.overview()
    rows = {c["name"]: c for c in ov["clusters"]}
    assert list(rows) == ["alpha", "beta", "gamma"]
    assert {n: c["remote_name"] for n, c in rows.items()} == {
        "alpha": "alpha",
        "beta": "beta",
        "gamma": "gamma",
    }
    # Each member's GPUs as it reports them (gamma: the replayed trace's, beside its backtest state).
    for name, gpus in (("alpha", 16), ("beta", 64), ("gamma", 8)):
        assert rows[name]["gpus"] == fleet.member_api(name, "/api/v1/overview")["gpus"] == gpus
    assert rows["beta"]["free_gpus"] > 0
    assert ov["totals"]["gpus"] == 88
    # The backtest's figures are fixed: the hub shows exactly what the member answers.
    gamma = fleet.member_api("gamma", "/api/v1/overview")
    assert gamma["cluster"] == "gamma"
    assert rows["gamma"]["waste_cost_to_date"] == gamma["waste_cost_to_date"] > 0
    detail = fleet.hub_get("/api/v1/hub/clusters/gamma").json()
    member_actions = fleet.member_api("gamma", "/api/v1/actions?limit=50")
    assert member_actions
    assert [a["id"] for a in detail["actions"]] == [a["id"] for a in member_actions]
    findings = fleet.hub_get("/api/v1/hub/findings", params={"cluster": "alpha"}).json()
    assert findings
    assert {f["cluster"] for f in findings} == {"alpha"}


def _team_hours(showback: dict[str, Any]) -> dict[str, float]:
    teams: dict[str, float] = {}
    for r in showback["rows"]:
        team = r["team"] or "(none)"
        teams[team] = teams.get(team, 0.0) + r["held_gpu_hours"]
    return teams


def test_fleet_showback_sums_each_members_month_per_team(fleet: Fleet) -> None:
    """The live members' ledgers only grow: the member's answer before a hub pull and after it
    bracket the hub's copy, team by team."""
    month = fleet.member_api("alpha", "/api/v1/showback")["month"]
    for name in ("alpha", "beta"):
        before = _team_hours(fleet.member_api(name, f"/api/v1/showback?month={month}"))
        asked = fleet.overview()["at"]
        _until(f"a pull of {name}", lambda n=name, t=asked: fleet.cluster(n)["last_success_at"] > t)
        hub = fleet.hub_get("/api/v1/hub/reports/showback", params={"month": month}).json()
        after = _team_hours(fleet.member_api(name, f"/api/v1/showback?month={month}"))
        mine = {r["team"]: r["held_gpu_hours"] for r in hub["rows"] if r["cluster"] == name}
        assert before, f"{name} should have showback rows"
        assert set(before) <= set(mine) <= set(after)
        for team, hours in mine.items():
            assert before.get(team, 0.0) - 0.01 <= hours <= after[team] + 0.01, (name, team)
    # gamma answers too, with nothing this month: its backtest ledger has the trace's days.
    assert hub["missing"] == []
    assert [r for r in hub["rows"] if r["cluster"] == "gamma"] == []


def test_cross_cluster_advice_names_the_waiting_and_the_idle_cluster(fleet: Fleet) -> None:
    waiting = fleet.member_api("alpha", "/api/v1/fleet")["waiting"]
    assert waiting, "the two-node simulated cluster should have jobs waiting"
    advice = _until(
        "advice from alpha to beta",
        lambda: [a for a in fleet.overview()["advice"] if a["waiting_cluster"] == "alpha"],
    )
    assert {a["idle_cluster"] for a in advice} == {"beta"}  # gamma: no live GPUs, and another team's
    (a,) = advice
    assert a["text"].startswith(f"cluster alpha: {a['jobs']} jobs waited ")
    assert " p50 for A100; cluster beta had " in a["text"]
    assert a["jobs"] >= len(waiting) - 1  # jobs seen waiting (one may have started since)
    assert a["teams"] == ["nlp", "vision"]
    weekly = fleet.hub_get("/api/v1/hub/reports/weekly").json()
    assert any(w["waiting_cluster"] == "alpha" for w in weekly["advice"])


def test_a_stopped_member_is_stale_keeps_its_figures_and_comes_back(fleet: Fleet) -> None:
    before = fleet.cluster("beta")
    fleet.stop("beta")
    stale = _until("beta stale", lambda: (c := fleet.cluster("beta"))["state"] == "stale" and c)
    assert stale["gpus"] == before["gpus"] == 64  # the last figures, never zero
    assert stale["pulled_at"] >= before["pulled_at"]
    assert stale["last_error"]
    assert fleet.overview()["totals"]["stale"] == 1
    page = fleet.hub_get("/").text
    row = page.split('id="cluster-beta"', 1)[1].split("</tr>", 1)[0]
    assert 'data-state="stale"' in row
    assert ">64<" in row
    assert fleet.cluster("alpha")["state"] == "ok"  # the others go on
    fleet.start("beta")
    back = _until("beta fresh again", lambda: (c := fleet.cluster("beta"))["state"] == "ok" and c)
    assert back["last_success_at"] > stale["last_success_at"]
    assert back["failures"] == 0


# -- the pages in a browser ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not shutil.which(CHROMIUM) and not os.environ.get("CI"):
        pytest.skip(f"no Chromium at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def _shot(page: Any, artifacts: Path, name: str) -> None:
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5_000


@pytest.fixture
def artifacts() -> Path:
    base = os.environ.get("GPUSTEWARD_TEST_ARTIFACTS")
    path = (Path(base) if base else Path(__file__).parents[1] / "artifacts") / "hub"
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_fleet_overview_and_drill_down_in_a_browser(fleet: Fleet, browser: Any, artifacts: Path) -> None:
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "404" not in m.text else None)
    page.on(
        "response", lambda r: errors.append(r.url) if r.status >= 400 and "favicon" not in r.url else None
    )
    page.goto(fleet.hub_url + "/")
    page.wait_for_url(fleet.hub_url + "/login")  # web.token is set: log in first
    page.fill("#token", HUB_TOKEN)
    page.click("#login")
    page.wait_for_url(fleet.hub_url + "/")
    assert page.locator("#clusters tbody tr").count() == 3
    for name in ("alpha", "beta", "gamma"):
        assert page.locator(f"#cluster-{name}").get_attribute("data-state") == "ok"
    assert page.inner_text("#fleet-gpus") == "88"
    assert page.locator("#chart-gpus svg rect.bar").count() >= 4  # GPUs and idle, alpha and beta
    assert page.locator("#chart-util svg circle.point").count() >= 2
    assert "cluster alpha:" in page.inner_text("#advice")
    _shot(page, artifacts, "01-fleet")

    page.click("#cluster-alpha a")
    page.wait_for_selector("#cluster-title")
    assert "alpha" in page.inner_text("#cluster-title")
    assert page.get_attribute("#member-link", "href") == fleet.members["alpha"] + "/"
    assert page.inner_text("#c-gpus") == "16"
    assert page.locator("#chart-util svg").count() == 1
    links = page.locator("#cluster-findings a.member-workload")
    if links.count():
        assert links.first.get_attribute("href").startswith(fleet.members["alpha"] + "/workloads/")
    _shot(page, artifacts, "02-cluster")

    page.click("nav >> text=Findings")
    page.wait_for_selector("#findings")
    page.select_option("#cluster-filter", "alpha")
    page.click("form.filters button")
    page.wait_for_url("**/findings?cluster=alpha")
    clusters = set(
        page.locator("#findings tbody tr[data-cluster]").evaluate_all("rs => rs.map(r => r.dataset.cluster)")
    )
    assert clusters == {"alpha"}
    _shot(page, artifacts, "03-findings")
    assert errors == []  # no CSP violation, no script error


def test_a_second_hub_replica_serves_the_same_and_takes_over(fleet: Fleet) -> None:
    """Two `gpusteward hub run` on one schema: both serve the pages, only the lock holder pulls;
    when it stops (SIGTERM releases the lock) the other goes on pulling."""
    port = free_port()
    fleet.args["hub2"] = [*fleet.args["hub"][:-1], str(port), "--verbose"]  # INFO: "leader now"
    fleet.start("hub2")
    second = f"http://127.0.0.1:{port}"
    seen = _until("the second hub serves", lambda: fleet.hub_get("/api/v1/hub/overview", second).json())
    assert [c["name"] for c in seen["clusters"]] == ["alpha", "beta", "gamma"]
    log = (fleet.base / "hub2.log").read_text()
    assert "leader now" not in log  # the first hub holds the lock
    fleet.stop("hub")
    stopped_at = fleet.hub_get("/api/v1/hub/overview", second).json()["at"]
    for name in ("alpha", "beta", "gamma"):
        _until(
            f"{name} pulled by the second hub",
            lambda n=name: next(c for c in fleet.hub_get("/api/v1/hub/overview", second).json()["clusters"]
                                if c["name"] == n)["last_success_at"] > stopped_at,
        )  # fmt: skip
    assert "leader now" in (fleet.base / "hub2.log").read_text()
